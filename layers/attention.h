#pragma once
// Multi-head attention (Vaswani et al., 2017) with grouped-query (Ainslie et al., 2023) and
// multi-query (Shazeer, 2019) variants chosen by n_kv_heads; self- or cross-attention; causal,
// key-padding and sliding-window masks; rotary positions; an additive position bias (ALiBi, T5);
// and a KV cache for incremental decoding.

#include <cstdint>
#include <tuple>
#include <vector>

#include <c10/util/Optional.h>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "layers/attention_bias.h"
#include "layers/kv_cache.h"
#include "layers/lora.h"
#include "layers/norm.h"
#include "layers/rotary.h"
#include "layers/variants.h"

namespace zoo {

struct AttentionOptions {
  AttentionOptions(int64_t d_model, int64_t n_heads) : d_model_(d_model), n_heads_(n_heads) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, n_heads);
  // Key/value heads: n_heads is MHA, 1 is MQA, a divisor in between is GQA. 0 means n_heads.
  TORCH_ARG(int64_t, n_kv_heads) = 0;
  // Width of one head. 0 means d_model / n_heads; T5 v1.1 sets it apart (its d_kv).
  TORCH_ARG(int64_t, head_dim) = 0;
  // Keys and values come from `memory` (an encoder's output) instead of the input.
  TORCH_ARG(bool, cross_attention) = false;
  // One matmul for q, k, v (self) or for k, v (cross): fewer, larger GEMMs.
  TORCH_ARG(bool, fused_projections) = true;
  TORCH_ARG(bool, bias) = true;
  // Biases on the query, key and value projections even without `bias` (Qwen2: q/k/v biased,
  // the output projection not).
  TORCH_ARG(bool, qkv_bias) = false;
  // A norm over each head of the queries and of the keys (its d_model is head_dim), after the
  // projections and before rotary positions (Qwen3, Gemma 3). Unset = none.
  TORCH_ARG(std::optional<NormOptions>, qk_norm) = std::nullopt;
  // Multiply scores by 1/sqrt(head_dim). T5 does not (its initialisation absorbs it).
  TORCH_ARG(bool, scaled) = true;
  // With scaled: 1/sqrt(scale_dim) instead (Gemma's query_pre_attn_scalar); 0 = head_dim.
  TORCH_ARG(int64_t, scale_dim) = 0;
  // Soft-capping of the scaled scores, cap * tanh(score / cap), before masks and softmax (Gemma 2's
  // attn_logit_softcapping); 0 = none.
  TORCH_ARG(double, softcap) = 0.0;
  TORCH_ARG(bool, causal) = false;
  // Sliding window, self-attention only: causal, query i sees keys i-window+1 .. i (Mistral); not
  // causal, keys i-window+1 .. i+window-1 (ModernBERT's local layers). Unset = unbounded.
  TORCH_ARG(std::optional<int64_t>, window) = std::nullopt;
  TORCH_ARG(double, dropout) = 0.0;  // on the attention weights, in training only
  // Rotary positions applied to queries and keys (self-attention only).
  TORCH_ARG(bool, rope) = false;
  TORCH_ARG(double, rope_base) = 10000.0;
  TORCH_ARG(RopeLayout, rope_layout) = RopeLayout::kHalf;
  TORCH_ARG(RopeScaling, rope_scaling) = {};
  TORCH_ARG(int64_t, rotary_dim) = 0;  // the first features of each head rotated; 0 = all (Phi-3 rotates part)
  // Which kernel runs (layers/attention_path.h): auto chooses per call between LibTorch's fused
  // kernel and zoo's tiled one; math is the explicit path tests compare against.
  TORCH_ARG(AttentionBackend, backend) = AttentionBackend::kAuto;
  // Linformer (kernels/linformer_attention.h): keys and values projected along the sequence to
  // this many rows by learned E and F; 0 = none. An encoder's self-attention only: not causal, no
  // window, cache or soft-capping (the projection mixes every position).
  TORCH_ARG(int64_t, linformer_k) = 0;
  TORCH_ARG(int64_t, linformer_length) = 0;  // n: the longest sequence E and F take
  TORCH_ARG(LinformerSharing, linformer_sharing) = LinformerSharing::kHeadwise;
  // Longformer (kernels/longformer_attention.h): a query sees this many tokens on each side
  // (transformers' attention_window / 2) and the global tokens (AttentionBias::global_mask), which
  // see every token through their own projections (qkv_global); unset = none. An encoder's
  // self-attention only, one key head per query head.
  TORCH_ARG(std::optional<int64_t>, longformer_window) = std::nullopt;
  TORCH_ARG(std::vector<int64_t>, longformer_dilation) = {};  // one per head, or empty (1)

 public:  // TORCH_ARG leaves the section private
  int64_t resolved_n_kv_heads() const { return n_kv_heads_ > 0 ? n_kv_heads_ : n_heads_; }
  int64_t resolved_window() const { return window_.value_or(0); }  // 0 = unbounded
  int64_t resolved_head_dim() const {
    return head_dim_ > 0 ? head_dim_ : (n_heads_ > 0 ? d_model_ / n_heads_ : 0);
  }
  // Throws std::invalid_argument naming the option and the values.
  void validate() const;
};

// Shapes: B batch, T query length, S memory length, H heads, Hkv key/value heads, D head_dim.
//
// The layer reads: project -> (norm each head) -> rotate -> cache -> attend(q, k, v, bias) -> merge. Which kernel
// attends, and the masks and position terms it reads, come in the bias the stack built once for
// all its layers (build_attention_bias, layers/attention_bias.h), covering every key from the
// start of the sequence: the cached keys and the new ones for self-attention, the memory for
// cross-attention. With a sliding-window cache that has dropped old keys, the module takes the
// last columns, those of the keys it kept.
class AttentionImpl : public torch::nn::Cloneable<AttentionImpl> {
 public:
  explicit AttentionImpl(const AttentionOptions& options);
  void reset() override;

  // x: (B, T, d_model) -> (B, T, d_model).
  // memory: (B, S, d_model) keys/values source, cross-attention only.
  // cache: appended to (self) or filled once and reused (cross); positions continue from it.
  // position_ids: (B, T) or (T) absolute positions for RoPE; default continues the cache.
  torch::Tensor forward(const torch::Tensor& x, const AttentionBias& bias, const torch::Tensor& memory = {},
                        AttentionCache* cache = nullptr, const RopePositions& position_ids = {});

  // The same with a bias built for the math path (attention_bias with need_weights), also
  // returning the weights (B, H, T, Tk).
  std::tuple<torch::Tensor, torch::Tensor> forward_with_weights(const torch::Tensor& x, const AttentionBias& bias,
                                                                const torch::Tensor& memory = {},
                                                                AttentionCache* cache = nullptr,
                                                                const RopePositions& position_ids = {});

  AttentionOptions options;
  torch::nn::Linear qkv{nullptr};  // fused self-attention: [q; k; v] rows
  torch::nn::Linear q{nullptr};
  torch::nn::Linear kv{nullptr};   // fused cross-attention: [k; v] rows
  torch::nn::Linear k{nullptr};
  torch::nn::Linear v{nullptr};
  torch::nn::Linear out{nullptr};
  Norm q_norm{nullptr};  // qk_norm: over each query head, and each key head
  Norm k_norm{nullptr};
  RotaryEmbedding rotary{nullptr};
  // Linformer's projections (P, k, n), P = n_kv_heads (per_head) or 1; F undefined under
  // key_value sharing (E projects both). Undefined without linformer_k.
  torch::Tensor linformer_e, linformer_f;
  // Longformer's global query, key and value projections, [q; k; v] rows. Unset without
  // longformer_window.
  torch::nn::Linear qkv_global{nullptr};
  ProjectionAdapters lora;  // LoRA adapters of q, k, v, out (none unless attached)

  // What LoRA can adapt: q, k, v (rows of qkv or kv when fused) and out.
  std::vector<ProjectionPart> projection_parts() const;

 private:
  std::tuple<torch::Tensor, torch::Tensor> run(const torch::Tensor& x, const AttentionBias& bias,
                                               const torch::Tensor& memory, AttentionCache* cache,
                                               const RopePositions& position_ids);
};
TORCH_MODULE(Attention);

// The bias of one call of `attention`, built as a model builds its stack's (build_attention_bias)
// from the module's options (backend, grouping, causal and window, dropout in training) and
// `masks`, whose queries default to x's length and keys to query_start + queries. A layer's
// tests and callers outside a model use it.
AttentionBias attention_bias(const AttentionImpl& attention, const torch::Tensor& x, AttentionMasks masks = {},
                             bool need_weights = false);

// Where a call's keys start and how its scores scale: what attend needs besides the heads.
struct AttendArguments {
  double scale = 1.0;
  double softcap = 0.0;    // cap * tanh(score / cap) of the scaled scores; 0 = none
  double dropout = 0.0;    // on the weights (0 outside training)
  int64_t query_start = 0;  // absolute position of the first query (the cache before it)
  int64_t key_start = 0;    // absolute position of the first key the caller holds
};

// Scaled dot-product attention over projected heads by the path bias.choice names: one switch.
// q: (B, H, T, D); k, v: (B, Hkv, Tk, D) with H a multiple of Hkv (query head h reads key/value
// head h / (H / Hkv)). Returns (B, H, T, D) and, on the math path, the weights (B, H, T, Tk).
std::tuple<torch::Tensor, torch::Tensor> attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                                const AttentionBias& bias, const AttendArguments& arguments);

}  // namespace zoo
