#include "layers/variants.h"

#include <stdexcept>
#include <utility>

namespace zoo {
namespace {

template <typename E>
struct Variant;

template <>
struct Variant<NormKind> {
  static constexpr const char* kWhat = "norm";
  static std::vector<std::pair<std::string, NormKind>> table() {
    return {{"layernorm", NormKind::kLayerNorm}, {"rmsnorm", NormKind::kRMSNorm}};
  }
};
template <>
struct Variant<NormPosition> {
  static constexpr const char* kWhat = "norm_position";
  static std::vector<std::pair<std::string, NormPosition>> table() {
    return {{"pre", NormPosition::kPre}, {"post", NormPosition::kPost}};
  }
};
template <>
struct Variant<Activation> {
  static constexpr const char* kWhat = "activation";
  static std::vector<std::pair<std::string, Activation>> table() {
    return {{"relu", Activation::kReLU},       {"gelu", Activation::kGELU},
            {"gelu_tanh", Activation::kGELUTanh}, {"silu", Activation::kSiLU},
            {"swiglu", Activation::kSwiGLU},   {"geglu", Activation::kGeGLU},
            {"geglu_tanh", Activation::kGeGLUTanh}};
  }
};
template <>
struct Variant<PositionKind> {
  static constexpr const char* kWhat = "position";
  static std::vector<std::pair<std::string, PositionKind>> table() {
    return {{"none", PositionKind::kNone},         {"learned", PositionKind::kLearned},
            {"sinusoidal", PositionKind::kSinusoidal}, {"rope", PositionKind::kRope},
            {"alibi", PositionKind::kAlibi},       {"relative", PositionKind::kRelative}};
  }
};
template <>
struct Variant<RopeLayout> {
  static constexpr const char* kWhat = "rope_layout";
  static std::vector<std::pair<std::string, RopeLayout>> table() {
    return {{"half", RopeLayout::kHalf}, {"interleaved", RopeLayout::kInterleaved}};
  }
};
template <>
struct Variant<AttentionBackend> {
  static constexpr const char* kWhat = "attention_backend";
  static std::vector<std::pair<std::string, AttentionBackend>> table() {
    return {{"fused", AttentionBackend::kFused}, {"math", AttentionBackend::kMath}};
  }
};

}  // namespace

template <typename E>
E from_string(const std::string& name) {
  std::string accepted;
  for (const auto& [key, value] : Variant<E>::table()) {
    if (key == name) return value;
    accepted += (accepted.empty() ? "" : ", ") + key;
  }
  throw std::invalid_argument(std::string("unknown ") + Variant<E>::kWhat + " '" + name +
                              "' (expected one of: " + accepted + ")");
}

template <typename E>
std::string to_string(E value) {
  for (const auto& [key, v] : Variant<E>::table()) {
    if (v == value) return key;
  }
  throw std::logic_error(std::string("unnamed ") + Variant<E>::kWhat + " value");
}

template <typename E>
std::vector<std::string> variant_names() {
  std::vector<std::string> names;
  for (const auto& entry : Variant<E>::table()) names.push_back(entry.first);
  return names;
}

bool is_gated(Activation a) {
  return a == Activation::kSwiGLU || a == Activation::kGeGLU || a == Activation::kGeGLUTanh;
}

#define ZOO_INSTANTIATE_VARIANT(E)                     \
  template E from_string<E>(const std::string&);       \
  template std::string to_string<E>(E);                \
  template std::vector<std::string> variant_names<E>();
ZOO_INSTANTIATE_VARIANT(NormKind)
ZOO_INSTANTIATE_VARIANT(NormPosition)
ZOO_INSTANTIATE_VARIANT(Activation)
ZOO_INSTANTIATE_VARIANT(PositionKind)
ZOO_INSTANTIATE_VARIANT(RopeLayout)
ZOO_INSTANTIATE_VARIANT(AttentionBackend)
#undef ZOO_INSTANTIATE_VARIANT

}  // namespace zoo
