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

ZOO_ENUM_NAMES(NormKind, "norm", {"layernorm", NormKind::kLayerNorm}, {"rmsnorm", NormKind::kRMSNorm});
ZOO_ENUM_NAMES(NormPosition, "norm_position", {"pre", NormPosition::kPre}, {"post", NormPosition::kPost});
ZOO_ENUM_NAMES(Activation, "activation",
               {"relu", Activation::kReLU}, {"gelu", Activation::kGELU}, {"gelu_tanh", Activation::kGELUTanh},
               {"silu", Activation::kSiLU}, {"swiglu", Activation::kSwiGLU}, {"geglu", Activation::kGeGLU},
               {"geglu_tanh", Activation::kGeGLUTanh});
ZOO_ENUM_NAMES(PositionKind, "position",
               {"none", PositionKind::kNone}, {"learned", PositionKind::kLearned},
               {"sinusoidal", PositionKind::kSinusoidal}, {"rope", PositionKind::kRope},
               {"alibi", PositionKind::kAlibi}, {"relative", PositionKind::kRelative});
ZOO_ENUM_NAMES(RopeLayout, "rope_layout", {"half", RopeLayout::kHalf}, {"interleaved", RopeLayout::kInterleaved});
ZOO_ENUM_NAMES(AttentionBackend, "attention_backend",
               {"fused", AttentionBackend::kFused}, {"math", AttentionBackend::kMath});

bool is_gated(Activation a);

}  // namespace zoo
