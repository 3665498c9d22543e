#pragma once
// Architecture variants as typed enums. Configs name them by string through each enum's
// EnumNames (core/enum_names.h, the one naming mechanism); from_string's error lists the
// accepted spellings.

#include <utility>

#include "core/enum_names.h"

namespace zoo {

enum class NormKind { kLayerNorm, kRMSNorm };
enum class NormPosition { kPre, kPost };
// Gated variants (SwiGLU, GeGLU) multiply act(x W_gate) by x W_up (Shazeer, 2020).
// geglu_tanh is T5 v1.1's "gated-gelu" (its GELU is the tanh approximation).
enum class Activation { kReLU, kGELU, kGELUTanh, kSiLU, kSwiGLU, kGeGLU, kGeGLUTanh };
enum class PositionKind { kNone, kLearned, kSinusoidal, kRope, kAlibi, kRelative };
// half: rotate the first half of each head against the second (GPT-NeoX, LLaMA in HF);
// interleaved: rotate adjacent pairs (x0,x1), (x2,x3), ... (RoFormer, GPT-J, Meta's LLaMA).
enum class RopeLayout { kHalf, kInterleaved };
// fused: LibTorch's scaled-dot-product kernel; math: the explicit reference path.
enum class AttentionBackend { kFused, kMath };

template <>
struct EnumNames<NormKind> {
  static constexpr const char* kWhat = "norm";
  static constexpr std::pair<const char*, NormKind> kNames[] = {{"layernorm", NormKind::kLayerNorm},
                                                                {"rmsnorm", NormKind::kRMSNorm}};
};
template <>
struct EnumNames<NormPosition> {
  static constexpr const char* kWhat = "norm_position";
  static constexpr std::pair<const char*, NormPosition> kNames[] = {{"pre", NormPosition::kPre},
                                                                    {"post", NormPosition::kPost}};
};
template <>
struct EnumNames<Activation> {
  static constexpr const char* kWhat = "activation";
  static constexpr std::pair<const char*, Activation> kNames[] = {
      {"relu", Activation::kReLU},   {"gelu", Activation::kGELU},     {"gelu_tanh", Activation::kGELUTanh},
      {"silu", Activation::kSiLU},   {"swiglu", Activation::kSwiGLU}, {"geglu", Activation::kGeGLU},
      {"geglu_tanh", Activation::kGeGLUTanh}};
};
template <>
struct EnumNames<PositionKind> {
  static constexpr const char* kWhat = "position";
  static constexpr std::pair<const char*, PositionKind> kNames[] = {
      {"none", PositionKind::kNone}, {"learned", PositionKind::kLearned}, {"sinusoidal", PositionKind::kSinusoidal},
      {"rope", PositionKind::kRope}, {"alibi", PositionKind::kAlibi},     {"relative", PositionKind::kRelative}};
};
template <>
struct EnumNames<RopeLayout> {
  static constexpr const char* kWhat = "rope_layout";
  static constexpr std::pair<const char*, RopeLayout> kNames[] = {{"half", RopeLayout::kHalf},
                                                                  {"interleaved", RopeLayout::kInterleaved}};
};
template <>
struct EnumNames<AttentionBackend> {
  static constexpr const char* kWhat = "attention_backend";
  static constexpr std::pair<const char*, AttentionBackend> kNames[] = {{"fused", AttentionBackend::kFused},
                                                                        {"math", AttentionBackend::kMath}};
};

bool is_gated(Activation a);

}  // namespace zoo
