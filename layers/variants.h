#pragma once
// Architecture variants as typed enums. Configs name them by string; from_string is the one
// parser, and its error lists the accepted spellings.

#include <string>
#include <vector>

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

// Parses a config spelling ("rmsnorm", "swiglu", ...). Throws std::invalid_argument naming the
// variant kind, the bad value and the accepted values.
template <typename E>
E from_string(const std::string& name);
template <typename E>
std::string to_string(E value);
// The accepted spellings, in declaration order.
template <typename E>
std::vector<std::string> variant_names();

bool is_gated(Activation a);

}  // namespace zoo
