#include "layers/variants.h"

#include <cmath>
#include <sstream>
#include <tuple>

namespace zoo {

bool is_gated(Activation a) {
  switch (a) {
    case Activation::kSwiGLU:
    case Activation::kGeGLU:
    case Activation::kGeGLUTanh: return true;
    case Activation::kReLU:
    case Activation::kGELU:
    case Activation::kGELUTanh:
    case Activation::kSiLU: return false;
  }
  return false;
}

std::string rope_scaling_problem(const RopeScaling& s) {
  auto number = [](double v) {
    std::ostringstream out;
    out << v;
    return out.str();
  };
  const RopeScaling defaults;
  const std::string kind = to_string(s.kind);
  bool uses_factor = false, uses_llama3_keys = false, uses_original = false, uses_yarn_keys = false;
  switch (s.kind) {
    case RopeScalingKind::kNone: break;
    case RopeScalingKind::kLinear: uses_factor = true; break;
    case RopeScalingKind::kLlama3: uses_factor = uses_llama3_keys = uses_original = true; break;
    case RopeScalingKind::kYarn: uses_factor = uses_yarn_keys = uses_original = true; break;
  }
  // A key the kind does not read must keep its default: a factor set with rope_scaling none is
  // a forgotten kind, not a request for nothing.
  if (!uses_factor && s.factor != defaults.factor) {
    return "rope_scaling_factor (" + number(s.factor) + ") applies to rope_scaling linear, llama3 or yarn, not " +
           kind;
  }
  const std::tuple<const char*, bool, bool, const char*> unused[] = {
      {"rope_low_freq_factor", uses_llama3_keys, s.low_freq_factor != defaults.low_freq_factor, "llama3"},
      {"rope_high_freq_factor", uses_llama3_keys, s.high_freq_factor != defaults.high_freq_factor, "llama3"},
      {"rope_original_max_positions", uses_original, s.original_max_positions != defaults.original_max_positions,
       "llama3 or yarn"},
      {"rope_beta_fast", uses_yarn_keys, s.beta_fast != defaults.beta_fast, "yarn"},
      {"rope_beta_slow", uses_yarn_keys, s.beta_slow != defaults.beta_slow, "yarn"},
      {"rope_attention_factor", uses_yarn_keys, s.attention_factor != defaults.attention_factor, "yarn"},
      {"rope_truncate", uses_yarn_keys, s.truncate != defaults.truncate, "yarn"}};
  for (const auto& [key, used, set, kinds] : unused) {
    if (!used && set) return std::string(key) + " applies to rope_scaling " + kinds + ", not " + kind;
  }
  if (uses_factor && !(s.factor >= 1.0)) {
    return "rope_scaling_factor (" + number(s.factor) + ") must be >= 1 for rope_scaling " + kind;
  }
  if (uses_original && s.original_max_positions <= 0) {
    return "rope_original_max_positions (" + std::to_string(s.original_max_positions) + ") must be positive";
  }
  if (uses_yarn_keys) {
    if (!(s.beta_slow > 0.0) || !(s.beta_fast > s.beta_slow)) {
      return "rope_beta_fast (" + number(s.beta_fast) + ") must exceed rope_beta_slow (" + number(s.beta_slow) +
             "), which must be positive";
    }
    if (!(s.attention_factor >= 0.0)) {
      return "rope_attention_factor (" + number(s.attention_factor) + ") must be positive, or 0 for 0.1 ln(factor) + 1";
    }
  }
  if (uses_llama3_keys) {
    if (!(s.low_freq_factor > 0.0)) {
      return "rope_low_freq_factor (" + number(s.low_freq_factor) + ") must be positive";
    }
    if (!(s.high_freq_factor > s.low_freq_factor)) {
      return "rope_high_freq_factor (" + number(s.high_freq_factor) + ") must exceed rope_low_freq_factor (" +
             number(s.low_freq_factor) + ")";
    }
  }
  return "";
}

double rope_attention_factor(const RopeScaling& s) {
  switch (s.kind) {
    case RopeScalingKind::kNone:
    case RopeScalingKind::kLinear:
    case RopeScalingKind::kLlama3: return 1.0;
    case RopeScalingKind::kYarn:
      if (s.attention_factor > 0.0) return s.attention_factor;
      return s.factor <= 1.0 ? 1.0 : 0.1 * std::log(s.factor) + 1.0;
  }
  return 1.0;
}

}  // namespace zoo
