#pragma once
// Encoder-decoder family: T5 (Raffel et al., 2020; RMSNorm pre-norm, shared relative position
// bias, unscaled attention, tied head scaled by d_model^-0.5 in v1.0, untied in v1.1) and, by
// config, the original Transformer (Vaswani et al., 2017; post-norm, sinusoidal positions,
// ReLU, one embedding shared by source, target and output).

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

class EncoderDecoderImpl : public torch::nn::Cloneable<EncoderDecoderImpl> {
 public:
  // `config` must be valid: build_model validates it once before any module is built.
  explicit EncoderDecoderImpl(ModelConfig config);
  void reset() override;

  // input_ids (B, S), attention_mask (B, S) 1 at real tokens -> memory (B, S, d_model).
  // ring: context parallelism (kernels/ring_attention.h). input_ids and position_ids (B, S) are
  //   then this rank's zigzag tokens with their global positions, attention_mask the whole
  //   sequence's (B, N * S) in global order, and the memory this rank's rows of it.
  torch::Tensor encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {},
                       const torch::Tensor& position_ids = {}, const std::shared_ptr<RingExchange>& ring = nullptr);
  // decoder_input_ids (B, T) -> logits (B, T, vocab_size). With a cache, positions continue
  // from it and the memory's projections are computed on the first call only (after that,
  // memory may be undefined). decoder_mask (B, past + T): 1 at the decoder's real positions, 0 at
  // left padding (a continuous batch's rows, serve/batch_scheduler.h); positions then count real
  // tokens only. ring: as for encode, the decoder's tokens at their global position_ids, no
  //   cache and no decoder_mask; the memory is this rank's zigzag rows of the encoder's output
  //   (encode's with the same ring) and memory_mask the whole encoder sequence's.
  torch::Tensor decode(const torch::Tensor& decoder_input_ids, const torch::Tensor& memory,
                       const torch::Tensor& memory_mask = {}, KVCache* cache = nullptr,
                       const torch::Tensor& decoder_mask = {}, const torch::Tensor& position_ids = {},
                       const std::shared_ptr<RingExchange>& ring = nullptr);
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                        const torch::Tensor& decoder_input_ids);
  KVCache make_cache() const { return KVCache(config.resolved_decoder_layers()); }

  ModelConfig config;
  // Training recomputes each block's activations in backward instead of keeping them.
  bool activation_checkpointing = false;
  torch::nn::Embedding token_embedding{nullptr};  // shared by encoder, decoder and tied head
  // Computed once per stack and shared by its layers (T5 computes it in the first layer).
  PositionEncoding encoder_positions{nullptr};  // relative: bidirectional buckets
  PositionEncoding decoder_positions{nullptr};  // relative: causal buckets
  torch::nn::Dropout dropout{nullptr};
  torch::nn::ModuleList encoder_blocks{nullptr};
  torch::nn::ModuleList decoder_blocks{nullptr};
  Norm encoder_final_norm{nullptr};  // pre-norm only
  Norm decoder_final_norm{nullptr};
  torch::nn::Linear lm_head{nullptr};  // untied only

 private:
  // explicit_positions (B, T): positions of the tokens (default: start, start + 1, ...); counted
  // from a mask they are below start + T, known without reading them back (counted_from_mask).
  torch::Tensor embed(const torch::Tensor& ids, int64_t start, PositionEncoding& positions,
                      const torch::Tensor& explicit_positions = {}, bool counted_from_mask = false);
  std::vector<TransformerBlock> encoder_list_, decoder_list_;
};
TORCH_MODULE(EncoderDecoder);

}  // namespace zoo
