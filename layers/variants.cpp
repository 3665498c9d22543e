#include "layers/variants.h"

#include <sstream>

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
  bool uses_factor = false, uses_llama3_keys = false;
  switch (s.kind) {
    case RopeScalingKind::kNone: break;
    case RopeScalingKind::kLinear: uses_factor = true; break;
    case RopeScalingKind::kLlama3: uses_factor = uses_llama3_keys = true; break;
  }
  // A key the kind does not read must keep its default: a factor set with rope_scaling none is
  // a forgotten kind, not a request for nothing.
  if (!uses_factor && s.factor != defaults.factor) {
    return "rope_scaling_factor (" + number(s.factor) + ") applies to rope_scaling linear or llama3, not " + kind;
  }
  if (!uses_llama3_keys) {
    const std::pair<const char*, bool> unused[] = {
        {"rope_low_freq_factor", s.low_freq_factor != defaults.low_freq_factor},
        {"rope_high_freq_factor", s.high_freq_factor != defaults.high_freq_factor},
        {"rope_original_max_positions", s.original_max_positions != defaults.original_max_positions}};
    for (const auto& [key, set] : unused) {
      if (set) return std::string(key) + " applies to rope_scaling llama3, not " + kind;
    }
  }
  if (uses_factor && !(s.factor >= 1.0)) {
    return "rope_scaling_factor (" + number(s.factor) + ") must be >= 1 for rope_scaling " + kind;
  }
  if (uses_llama3_keys) {
    if (!(s.low_freq_factor > 0.0)) {
      return "rope_low_freq_factor (" + number(s.low_freq_factor) + ") must be positive";
    }
    if (!(s.high_freq_factor > s.low_freq_factor)) {
      return "rope_high_freq_factor (" + number(s.high_freq_factor) + ") must exceed rope_low_freq_factor (" +
             number(s.low_freq_factor) + ")";
    }
    if (s.original_max_positions <= 0) {
      return "rope_original_max_positions (" + std::to_string(s.original_max_positions) + ") must be positive";
    }
  }
  return "";
}

}  // namespace zoo
