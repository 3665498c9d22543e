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

bool is_recurrent(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kLinear:
    case AttentionKind::kGatedLinear: return true;
    case AttentionKind::kSoftmax:
    case AttentionKind::kLinformer:
    case AttentionKind::kLongformer: return false;
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
  bool uses_factor = false, uses_llama3_keys = false, uses_original = false, uses_yarn_keys = false,
       uses_attention_factor = false, uses_longrope_keys = false;
  switch (s.kind) {
    case RopeScalingKind::kNone: break;
    case RopeScalingKind::kLinear: uses_factor = true; break;
    case RopeScalingKind::kLlama3: uses_factor = uses_llama3_keys = uses_original = true; break;
    case RopeScalingKind::kYarn: uses_factor = uses_yarn_keys = uses_original = uses_attention_factor = true; break;
    case RopeScalingKind::kLongrope:
      uses_factor = uses_longrope_keys = uses_original = uses_attention_factor = true;
      break;
  }
  // A key the kind does not read must keep its default: a factor set with rope_scaling none is
  // a forgotten kind, not a request for nothing.
  if (!uses_factor && s.factor != defaults.factor) {
    return "rope_scaling_factor (" + number(s.factor) +
           ") applies to rope_scaling linear, llama3, yarn or longrope, not " + kind;
  }
  const std::tuple<const char*, bool, bool, const char*> unused[] = {
      {"rope_low_freq_factor", uses_llama3_keys, s.low_freq_factor != defaults.low_freq_factor, "llama3"},
      {"rope_high_freq_factor", uses_llama3_keys, s.high_freq_factor != defaults.high_freq_factor, "llama3"},
      {"rope_original_max_positions", uses_original, s.original_max_positions != defaults.original_max_positions,
       "llama3, yarn or longrope"},
      {"rope_beta_fast", uses_yarn_keys, s.beta_fast != defaults.beta_fast, "yarn"},
      {"rope_beta_slow", uses_yarn_keys, s.beta_slow != defaults.beta_slow, "yarn"},
      {"rope_attention_factor", uses_attention_factor, s.attention_factor != defaults.attention_factor,
       "yarn or longrope"},
      {"rope_truncate", uses_yarn_keys, s.truncate != defaults.truncate, "yarn"},
      {"rope_short_factor", uses_longrope_keys, !s.short_factor.empty(), "longrope"},
      {"rope_long_factor", uses_longrope_keys, !s.long_factor.empty(), "longrope"}};
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
  }
  if (uses_attention_factor && !(s.attention_factor >= 0.0)) {
    return "rope_attention_factor (" + number(s.attention_factor) + ") must be positive, or 0 for the paper's";
  }
  if (uses_longrope_keys) {
    if (s.original_max_positions < 2) {
      return "rope_original_max_positions (" + std::to_string(s.original_max_positions) +
             ") must be at least 2 for rope_scaling longrope (its attention factor divides by its log)";
    }
    if (s.short_factor.empty() || s.short_factor.size() != s.long_factor.size()) {
      return "rope_short_factor and rope_long_factor must be lists of one number per rotated pair, of the same "
             "length (got " + std::to_string(s.short_factor.size()) + " and " + std::to_string(s.long_factor.size()) +
             ")";
    }
    for (const auto* list : {&s.short_factor, &s.long_factor}) {
      for (const double f : *list) {
        if (!(f > 0.0) || !std::isfinite(f)) {
          return std::string(list == &s.short_factor ? "rope_short_factor" : "rope_long_factor") + " holds " +
                 number(f) + ": each factor must be a positive number";
        }
      }
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
    case RopeScalingKind::kLongrope:
      if (s.attention_factor > 0.0) return s.attention_factor;
      return s.factor <= 1.0 ? 1.0
                             : std::sqrt(1.0 + std::log(s.factor) / std::log(static_cast<double>(s.original_max_positions)));
  }
  return 1.0;
}

bool uses_long_factors(const RopeScaling& s, int64_t n) {
  return s.kind == RopeScalingKind::kLongrope && n > s.original_max_positions;
}

bool rereads_at(const RopeScaling& s, int64_t n) { return uses_long_factors(s, n) && !uses_long_factors(s, n - 1); }

}  // namespace zoo
