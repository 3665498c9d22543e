#pragma once
// GPT family: a decoder-only causal language model. The GPT-2 layout (learned positions,
// pre-norm, final LayerNorm, tanh GELU, tied head) and, by config, LLaMA (RoPE, RMSNorm, SwiGLU,
// GQA, no biases, untied head) and Mistral (plus a sliding window).

#include <cstdint>
#include <memory>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "layers/block.h"
#include "layers/kv_cache.h"
#include "layers/norm.h"
#include "layers/position_encoding.h"
#include "models/config.h"
#include "models/layer_options.h"

namespace zoo {

class GPTImpl : public torch::nn::Cloneable<GPTImpl> {
 public:
  // `config` must be valid: build_model validates it once before any module is built.
  explicit GPTImpl(ModelConfig config);
  void reset() override;

  // input_ids (B, T) -> logits (B, T, vocab_size).
  // attention_mask (B, K): 1 at real tokens, 0 at (left) padding, covering every token so far
  //   (K = cache->seen() + T with a cache). Positions then count real tokens only.
  // position_ids (B, T): explicit positions; the default continues from the cache.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {},
                        KVCache* cache = nullptr, const torch::Tensor& position_ids = {});
  // The logits of each row's last position only (B, vocab_size): what a decoding step samples
  // from, without the head's product over the prompt's other positions.
  torch::Tensor next_token_logits(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {},
                                  KVCache* cache = nullptr, const torch::Tensor& position_ids = {});
  // The final hidden states (B, T, d_model), before the head.
  // ring: context parallelism (kernels/ring_attention.h). input_ids are then this rank's zigzag
  //   tokens of each sequence, position_ids (B, T) their global positions, and every attention
  //   runs around the ring; no mask, no cache.
  // router_logits: where the mixture-of-experts layers put their router logits (N, E), in layer
  //   order, for the load-balancing loss (layers/mixture_of_experts.h).
  torch::Tensor hidden_states(const torch::Tensor& input_ids,
                              const torch::Tensor& attention_mask = {}, KVCache* cache = nullptr,
                              const torch::Tensor& position_ids = {},
                              const std::shared_ptr<RingExchange>& ring = nullptr,
                              std::vector<torch::Tensor>* router_logits = nullptr);
  // Output head on hidden states: the tied embedding or lm_head.
  torch::Tensor logits(const torch::Tensor& hidden);
  // That head's weight (vocab_size, d_model): logits = hidden head_weight^T. A quantized head
  // (QLoRA's frozen base) is dequantized into `dtype`: a float copy while the step runs.
  torch::Tensor head_weight(torch::ScalarType dtype) const;
  KVCache make_cache() const { return KVCache(config.n_layers); }

  ModelConfig config;
  // Training recomputes each block's activations in backward instead of keeping them.
  bool activation_checkpointing = false;
  torch::nn::Embedding token_embedding{nullptr};
  PositionEncoding positions{nullptr};  // relative bias buckets look back only
  torch::nn::Dropout dropout{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  Norm final_norm{nullptr};  // pre-norm only
  torch::nn::Linear lm_head{nullptr};  // untied only

 private:
  std::vector<TransformerBlock> block_list_;
};
TORCH_MODULE(GPT);

// sqrt(d_model) rounded to the embeddings' `dtype`, what scale_embeddings multiplies them by (as
// transformers' Gemma does: 48 in bfloat16 is exact, sqrt(640) = 25.30 becomes 25.25).
torch::Tensor embedding_scale(const ModelConfig& config, torch::ScalarType dtype);

// Positions of the last T tokens given a (B, K) attention mask: real tokens count 0, 1, ...
// from the first real one; padding gets 0. (B, T).
torch::Tensor positions_from_mask(const torch::Tensor& attention_mask, int64_t t);

}  // namespace zoo
