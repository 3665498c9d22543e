#pragma once
// Transformer block: self-attention, optional cross-attention, feed-forward, each a residual
// branch with its own norm, in post-norm (Vaswani et al.: Norm(x + f(x))), pre-norm
// (GPT-2, T5, LLaMA: x + f(Norm(x))) or sandwich (Gemma 2, 3: x + Norm2(f(Norm1(x)))) order. An encoder block is a non-causal one without
// cross-attention; a decoder block is causal, with cross-attention in encoder-decoders.

#include <cstdint>
#include <functional>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/pimpl.h>

#include "kernels/masks.h"
#include "layers/attention.h"
#include "layers/feed_forward.h"
#include "layers/kv_cache.h"
#include "layers/linear_attention.h"
#include "layers/mixture_of_experts.h"
#include "layers/norm.h"
#include "layers/variants.h"

namespace zoo {

struct TransformerBlockOptions {
  TransformerBlockOptions(AttentionOptions attention, FeedForwardOptions feed_forward,
                          NormOptions norm)
      : attention_(std::move(attention)),
        feed_forward_(std::move(feed_forward)),
        norm_(std::move(norm)) {}
  TORCH_ARG(AttentionOptions, attention);  // the self-attention
  // Set: the block mixes tokens with linear or gated linear attention instead (decoders only),
  // registered as self_attn too; `attention` then only gives d_model.
  TORCH_ARG(std::optional<LinearAttentionOptions>, linear_attention) = std::nullopt;
  // Adds cross-attention over an encoder's output, shaped like the self-attention (same heads,
  // scaling and projections) but neither causal, windowed nor rotary.
  TORCH_ARG(bool, cross_attention) = false;
  TORCH_ARG(FeedForwardOptions, feed_forward);
  // Set: the feed-forward is a sparse mixture of experts instead (registered as moe; `feed_forward`
  // then only gives d_model).
  TORCH_ARG(std::optional<MixtureOfExpertsOptions>, mixture_of_experts) = std::nullopt;
  TORCH_ARG(NormOptions, norm);  // every norm of the block
  // false: no norm before the self-attention (pre-norm only): ModernBERT's first layer, which the
  // embeddings' norm precedes.
  TORCH_ARG(bool, attention_norm) = true;
  TORCH_ARG(NormPosition, norm_position) = NormPosition::kPre;
  TORCH_ARG(double, dropout) = 0.0;  // residual dropout, on each branch's output
  // Which entries of a KVCache this block reads and writes.
  TORCH_ARG(int64_t, layer_index) = 0;

 public:  // TORCH_ARG leaves the section private
  AttentionOptions cross_attention_options() const;
  void validate() const;
};

class TransformerBlockImpl : public torch::nn::Cloneable<TransformerBlockImpl> {
 public:
  explicit TransformerBlockImpl(const TransformerBlockOptions& options);
  void reset() override;

  // x: (B, T, d_model) -> (B, T, d_model), with the biases a model builds once for all its
  // blocks (layers/attention_bias.h): `self_bias` over the self-attention keys (a recurrent mixer
  // reads its token_mask), `cross_bias` over the memory. A mixture-of-experts block appends its
  // router logits (N, E) to `router_logits` when given.
  torch::Tensor forward(const torch::Tensor& x, const AttentionBias& self_bias, const torch::Tensor& memory = {},
                        const AttentionBias& cross_bias = {}, KVCache* cache = nullptr,
                        const RopePositions& position_ids = {}, std::vector<torch::Tensor>* router_logits = nullptr);

  TransformerBlockOptions options;
  Attention self_attn{nullptr};          // softmax attention, or
  LinearAttention linear_attn{nullptr};  // a recurrent mixer (options.linear_attention())
  Norm self_attn_norm{nullptr};  // none without options.attention_norm()
  Attention cross_attn{nullptr};
  Norm cross_attn_norm{nullptr};
  FeedForward ff{nullptr};               // a dense feed-forward, or
  MixtureOfExperts moe{nullptr};         // a mixture of experts (options.mixture_of_experts())
  Norm ff_norm{nullptr};
  Norm self_attn_post_norm{nullptr};  // sandwich only: over each branch's output
  Norm cross_attn_post_norm{nullptr};
  Norm ff_post_norm{nullptr};
  torch::nn::Dropout dropout{nullptr};

 private:
  // The residual branches around `self_attention(h)` and `cross_attention(h)`, in norm order.
  torch::Tensor residual(const torch::Tensor& x, const std::function<torch::Tensor(const torch::Tensor&)>& self_attention,
                         const std::function<torch::Tensor(const torch::Tensor&)>& cross_attention,
                         std::vector<torch::Tensor>* router_logits);
  void check_memory(const torch::Tensor& memory, KVCache* cache) const;
};
TORCH_MODULE(TransformerBlock);

// block->forward without a cache, its activations not kept but recomputed in backward
// (activation checkpointing, kernels/recompute.h): gradients still reach x, the biases (T5's
// relative bias), the memory (the encoder) and the block's trainable weights, and from the
// router logits it appends to `router_logits` (a mixture of experts) back through the block.
torch::Tensor forward_recomputing(const TransformerBlock& block, const torch::Tensor& x, const AttentionBias& self_bias,
                                  const torch::Tensor& memory = {}, const AttentionBias& cross_bias = {},
                                  const RopePositions& position_ids = {},
                                  std::vector<torch::Tensor>* router_logits = nullptr);

}  // namespace zoo
