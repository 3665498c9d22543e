#pragma once
// Architecture variants as typed enums. Configs name them by string through each enum's
// EnumNames (core/enum_names.h, the one naming mechanism); from_string's error lists the
// accepted spellings.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/enum_names.h"

namespace zoo {

// rmsnorm_plus_one: RMSNorm scaled by (1 + weight), the weight starting at 0, the product taken in
// float32 before rounding to the input's type (Gemma).
enum class NormKind { kLayerNorm, kRMSNorm, kRMSNormPlusOne };
// sandwich: pre-norm with a second norm over each branch's output, x + norm2(f(norm1(x))) (Gemma 2, 3).
enum class NormPosition { kPre, kPost, kSandwich };
// Gated variants (SwiGLU, GeGLU) multiply act(x W_gate) by x W_up (Shazeer, 2020).
// geglu_tanh is T5 v1.1's "gated-gelu" (its GELU is the tanh approximation).
enum class Activation { kReLU, kGELU, kGELUTanh, kSiLU, kSwiGLU, kGeGLU, kGeGLUTanh };
enum class PositionKind { kNone, kLearned, kSinusoidal, kRope, kAlibi, kRelative };
// half: rotate the first half of each head against the second (GPT-NeoX, LLaMA in HF);
// interleaved: rotate adjacent pairs (x0,x1), (x2,x3), ... (RoFormer, GPT-J, Meta's LLaMA).
enum class RopeLayout { kHalf, kInterleaved };
// How RoPE's frequencies are stretched for contexts longer than the one trained at. linear:
// every frequency divided by the factor (Chen et al., 2023, position interpolation); llama3:
// LLaMA 3.1's rule, long wavelengths divided by the factor, short ones kept, a blend between;
// yarn: YaRN (Peng et al., 2023), a ramp between the two by rotations in the trained context,
// and the rotations scaled by an attention factor (long-context Qwen, DeepSeek); longrope:
// LongRoPE (Ding et al., 2024; Phi-3, Phi-4-mini), each frequency divided by its own searched
// factor, one list for forwards within the trained context and one for forwards past it.
enum class RopeScalingKind { kNone, kLinear, kLlama3, kYarn, kLongrope };
// Which attention kernel runs (layers/attention_path.h chooses): auto picks per call among
// LibTorch's fused kernel and zoo's tiled one; fused always takes LibTorch's scaled-dot-product
// kernel; tiled always zoo's (an error where it cannot run); math the explicit (T, T) path,
// the tests' reference.
enum class AttentionBackend { kAuto, kFused, kTiled, kMath };
// What mixes the tokens of a decoder layer: softmax attention over every key (the KV cache grows
// with the context), or a recurrence over one (heads x d_k x d_v) state (constant time and memory
// per decoded token): linear attention (Katharopoulos et al., 2020) or gated linear attention
// (Yang et al., 2024: a data-dependent decay per key dimension). layers/linear_attention.h.
// linformer: softmax attention over keys and values projected along the sequence to
// linformer_k rows by learned matrices (Wang et al., 2020), O(T k); encoders only
// (kernels/linformer_attention.h). longformer: softmax attention over a sliding window (dilated
// per head) and the global tokens, which see every token through their own projections
// (Beltagy et al., 2020), O(T (w + g)); encoders only (kernels/longformer_attention.h).
enum class AttentionKind { kSoftmax, kLinear, kGatedLinear, kLinformer, kLongformer };
// Which of Linformer's projections are shared (Wang et al., 2020, section 4): per_head, an E and
// an F for each key/value head; headwise, one E and one F for all the heads of a layer;
// key_value, one matrix for all heads projecting keys and values both.
enum class LinformerSharing { kPerHead, kHeadwise, kKeyValue };
// Linear attention's feature map phi: elu1 = 1 + ELU (Katharopoulos et al.); relu; performer =
// FAVOR+ positive orthogonal random features (Choromanski et al., 2021), which approximate the
// softmax kernel exp(q.k / sqrt(d)).
enum class FeatureMap { kElu1, kRelu, kPerformer };

ZOO_ENUM_NAMES(NormKind, "norm", {"layernorm", NormKind::kLayerNorm}, {"rmsnorm", NormKind::kRMSNorm},
               {"rmsnorm_plus_one", NormKind::kRMSNormPlusOne});
ZOO_ENUM_NAMES(NormPosition, "norm_position", {"pre", NormPosition::kPre}, {"post", NormPosition::kPost},
               {"sandwich", NormPosition::kSandwich});
ZOO_ENUM_NAMES(Activation, "activation",
               {"relu", Activation::kReLU}, {"gelu", Activation::kGELU}, {"gelu_tanh", Activation::kGELUTanh},
               {"silu", Activation::kSiLU}, {"swiglu", Activation::kSwiGLU}, {"geglu", Activation::kGeGLU},
               {"geglu_tanh", Activation::kGeGLUTanh});
ZOO_ENUM_NAMES(PositionKind, "position",
               {"none", PositionKind::kNone}, {"learned", PositionKind::kLearned},
               {"sinusoidal", PositionKind::kSinusoidal}, {"rope", PositionKind::kRope},
               {"alibi", PositionKind::kAlibi}, {"relative", PositionKind::kRelative});
ZOO_ENUM_NAMES(RopeLayout, "rope_layout", {"half", RopeLayout::kHalf}, {"interleaved", RopeLayout::kInterleaved});
ZOO_ENUM_NAMES(RopeScalingKind, "rope_scaling",
               {"none", RopeScalingKind::kNone}, {"linear", RopeScalingKind::kLinear}, {"llama3", RopeScalingKind::kLlama3},
               {"yarn", RopeScalingKind::kYarn}, {"longrope", RopeScalingKind::kLongrope});
ZOO_ENUM_NAMES(AttentionBackend, "attention_backend",
               {"auto", AttentionBackend::kAuto}, {"fused", AttentionBackend::kFused},
               {"tiled", AttentionBackend::kTiled}, {"math", AttentionBackend::kMath});
ZOO_ENUM_NAMES(AttentionKind, "attention",
               {"softmax", AttentionKind::kSoftmax}, {"linear", AttentionKind::kLinear},
               {"gated_linear", AttentionKind::kGatedLinear}, {"linformer", AttentionKind::kLinformer},
               {"longformer", AttentionKind::kLongformer});
ZOO_ENUM_NAMES(LinformerSharing, "linformer_sharing", {"per_head", LinformerSharing::kPerHead},
               {"headwise", LinformerSharing::kHeadwise}, {"key_value", LinformerSharing::kKeyValue});
ZOO_ENUM_NAMES(FeatureMap, "feature_map",
               {"elu1", FeatureMap::kElu1}, {"relu", FeatureMap::kRelu}, {"performer", FeatureMap::kPerformer});

bool is_gated(Activation a);
// Whether a layer of this kind carries a recurrent state instead of keys (linear, gated_linear).
bool is_recurrent(AttentionKind kind);

// RoPE frequency scaling, as a model config states it and the rotary layer applies it
// (layers/rotary.h: rope_inverse_frequencies). Defaults are LLaMA 3.1's except the factor.
struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::kNone;
  double factor = 1.0;  // linear, llama3, yarn, longrope: how many times the trained context is stretched
  double low_freq_factor = 1.0;  // llama3: wavelengths over original_max_positions / this are scaled
  double high_freq_factor = 4.0;  // llama3: wavelengths under original_max_positions / this are kept
  int64_t original_max_positions = 8192;  // llama3, yarn, longrope: the context length the model was trained at
  double beta_fast = 32.0;  // yarn: frequencies turning more than this often in the trained context are kept
  double beta_slow = 1.0;   // yarn: ... less than this often, divided by the factor; a ramp between
  // yarn, longrope: cos and sin times this; 0: yarn's 0.1 ln(factor) + 1, longrope's
  // sqrt(1 + ln(factor) / ln(original_max_positions)), as their papers
  double attention_factor = 0.0;
  bool truncate = true;  // yarn: the ramp's ends rounded outward to whole dimensions
  // longrope: one divisor per rotated pair; the long ones for a forward whose positions go past
  // original_max_positions, the short ones otherwise.
  std::vector<double> short_factor, long_factor;
};

// Whether a forward over positions 0 .. n - 1 takes longrope's long factors (transformers'
// longrope_frequency_update: the largest position of the call past the trained context).
bool uses_long_factors(const RopeScaling& scaling, int64_t n);
// Whether a sequence growing from n - 1 to n positions starts taking longrope's long factors:
// the keys cached so far were rotated by the short ones, and the sequence is read again whole
// (transformers' Phi-3 drops its cache at that step, so that every key takes the long factors).
bool rereads_at(const RopeScaling& scaling, int64_t n);

// What cos and sin are multiplied by: yarn's and longrope's attention factor, else 1.
double rope_attention_factor(const RopeScaling& scaling);

// Empty when `scaling` is consistent, else what is wrong, naming the config keys (rope_scaling,
// rope_scaling_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_positions)
// and their values: a kind's own keys out of range, or another kind's keys set.
std::string rope_scaling_problem(const RopeScaling& scaling);

}  // namespace zoo
