#include "models/t5.h"

#include <cmath>

#include <torch/torch.h>

#include "kernels/linear.h"
#include "models/gpt.h"  // positions_from_mask
#include "models/init.h"

namespace zoo {

EncoderDecoderImpl::EncoderDecoderImpl(ModelConfig config) : config(std::move(config)) { reset(); }

void EncoderDecoderImpl::reset() {
  const auto& c = config;
  TORCH_CHECK(c.is_encoder_decoder(), "EncoderDecoder built from a config of another family");
  token_embedding = register_module("token_embedding", torch::nn::Embedding(c.vocab_size, c.d_model));
  encoder_positions = register_module("encoder_positions", PositionEncoding(position_options(c, true)));
  decoder_positions = register_module("decoder_positions", PositionEncoding(position_options(c, false)));
  dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
  encoder_blocks = register_module("encoder_blocks", torch::nn::ModuleList());
  decoder_blocks = register_module("decoder_blocks", torch::nn::ModuleList());
  encoder_list_.clear();
  decoder_list_.clear();
  for (int64_t i = 0; i < c.resolved_encoder_layers(); ++i) {
    encoder_list_.emplace_back(block_options(c, /*causal=*/false, /*cross_attention=*/false, i));
    encoder_blocks->push_back(encoder_list_.back());
  }
  for (int64_t i = 0; i < c.resolved_decoder_layers(); ++i) {
    decoder_list_.emplace_back(block_options(c, /*causal=*/true, /*cross_attention=*/true, i));
    decoder_blocks->push_back(decoder_list_.back());
  }
  encoder_final_norm = decoder_final_norm = nullptr;
  if (c.norm_position == NormPosition::kPre) {
    encoder_final_norm = register_module("encoder_final_norm", Norm(norm_options(c)));
    decoder_final_norm = register_module("decoder_final_norm", Norm(norm_options(c)));
  }
  lm_head = nullptr;
  if (!c.tie_embeddings) {
    lm_head = register_module("lm_head",
                              torch::nn::Linear(torch::nn::LinearOptions(c.d_model, c.vocab_size).bias(false)));
  }
  initialize_weights(*this, c);
}

torch::Tensor EncoderDecoderImpl::embed(const torch::Tensor& ids, int64_t start,
                                        PositionEncoding& positions, const torch::Tensor& explicit_positions,
                                        bool counted_from_mask) {
  const int64_t t = ids.size(1);
  TORCH_CHECK(start + t <= config.max_length(), "encoder-decoder: cannot forward ", start + t,
              " tokens, max_positions is ", config.max_length());
  auto x = zoo::embed(token_embedding, ids);  // zoo::, not this class's embed
  if (config.scale_embeddings) x = x * embedding_scale(config, x.scalar_type());
  const auto pe = explicit_positions.defined()
                      ? positions->embedding(explicit_positions, x.scalar_type(), counted_from_mask ? start + t : 0)
                                              : positions->embedding(start, t, x.scalar_type(), x.device());
  if (pe.defined()) x = x + pe;
  return dropout->forward(x);
}

torch::Tensor EncoderDecoderImpl::encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                         const torch::Tensor& position_ids, const std::shared_ptr<RingExchange>& ring) {
  TORCH_CHECK(input_ids.dim() == 2, "encoder: input_ids must be (batch, tokens), got shape ",
              input_ids.sizes());
  const int64_t b = input_ids.size(0), s = input_ids.size(1);
  const int64_t sequence = ring ? s * ring->ranks() : s;
  TORCH_CHECK(!attention_mask.defined() || (attention_mask.dim() == 2 && attention_mask.size(0) == b && attention_mask.size(1) == sequence),
              "encoder: attention_mask must be (", b, ", ", sequence, ")", ring ? " (the whole sequence's)" : "",
              ", got ", attention_mask.sizes());
  TORCH_CHECK(!ring || (position_ids.defined() && position_ids.sizes() == input_ids.sizes()),
              "encoder: ring attention takes this rank's tokens with their global position_ids");
  TORCH_CHECK(sequence <= config.max_length(), "encoder-decoder: cannot forward ", sequence,
              " tokens, max_positions is ", config.max_length());
  auto x = embed(input_ids, 0, encoder_positions, position_ids);
  const auto bias = stack_attention_bias(config, /*causal=*/false, encoder_positions.get(), attention_mask, s, 0, s, x,
                                         is_training(), ring);
  const auto& rope_positions = ring && config.position == PositionKind::kRope ? position_ids : torch::Tensor();
  const bool recompute = activation_checkpointing && is_training();
  for (auto& block : encoder_list_) {
    x = recompute ? forward_recomputing(block, x, bias, {}, {}, rope_positions)
                  : block->forward(x, bias, {}, {}, nullptr, rope_positions);
  }
  if (encoder_final_norm) x = encoder_final_norm->forward(x);
  return dropout->forward(x);
}

torch::Tensor EncoderDecoderImpl::decode(const torch::Tensor& decoder_input_ids, const torch::Tensor& memory,
                                         const torch::Tensor& memory_mask, KVCache* cache,
                                         const torch::Tensor& decoder_mask, const torch::Tensor& position_ids,
                                         const std::shared_ptr<RingExchange>& ring) {
  TORCH_CHECK(decoder_input_ids.dim() == 2, "decoder: decoder_input_ids must be (batch, tokens), got shape ",
              decoder_input_ids.sizes());
  const int64_t t = decoder_input_ids.size(1);
  const int64_t past = cache != nullptr ? cache->seen() : 0;
  if (decoder_mask.defined()) {
    TORCH_CHECK(decoder_mask.dim() == 2 && decoder_mask.size(0) == decoder_input_ids.size(0) &&
                    decoder_mask.size(1) == past + t,
                "decoder: decoder_mask must be (", decoder_input_ids.size(0), ", ", past + t,
                ") covering cached and new tokens, got ", decoder_mask.sizes());
  }
  TORCH_CHECK(!ring || (cache == nullptr && !decoder_mask.defined() && position_ids.defined() &&
                        position_ids.sizes() == decoder_input_ids.sizes()),
              "decoder: ring attention takes this rank's tokens with their global position_ids, no cache and no "
              "decoder_mask");
  if (ring) {
    TORCH_CHECK(t * ring->ranks() <= config.max_length(), "encoder-decoder: cannot forward ", t * ring->ranks(),
                " tokens, max_positions is ", config.max_length());
  }
  const auto& explicit_positions =
      ring ? position_ids : decoder_mask.defined() ? positions_from_mask(decoder_mask, t) : torch::Tensor();
  auto x = embed(decoder_input_ids, past, decoder_positions, explicit_positions, /*counted_from_mask=*/!ring);
  // One bias for every layer's self-attention, one for its cross-attention over the memory; or,
  // around a ring, both ring attention (the cross-attention's keys are the encoder's chunks).
  AttentionBias self_bias, cross_bias;
  if (ring) {
    self_bias = stack_attention_bias(config, /*causal=*/true, decoder_positions.get(), {}, t, 0, t, x, is_training(), ring);
    cross_bias = stack_attention_bias(config, /*causal=*/false, nullptr, memory_mask, t, 0, t, x, is_training(), ring);
  } else {
    self_bias = stack_attention_bias(config, /*causal=*/true, decoder_positions.get(), decoder_mask, t, past, past + t,
                                     x, is_training());
    const int64_t memory_length = memory_mask.defined() ? memory_mask.size(1) : 0;
    cross_bias = stack_attention_bias(config, /*causal=*/false, nullptr, memory_mask, t, 0, memory_length, x,
                                      is_training());
  }
  const auto& rope_positions = ring && config.position == PositionKind::kRope ? position_ids : torch::Tensor();
  const bool recompute = activation_checkpointing && is_training() && cache == nullptr;
  for (auto& block : decoder_list_) {
    x = recompute ? forward_recomputing(block, x, self_bias, memory, cross_bias, rope_positions)
                  : block->forward(x, self_bias, memory, cross_bias, cache, rope_positions);
  }
  if (decoder_final_norm) x = decoder_final_norm->forward(x);
  x = dropout->forward(x);
  if (lm_head) return project(lm_head, x);
  if (config.scales_tied_head()) x = x * (1.0 / std::sqrt(static_cast<double>(config.d_model)));
  return project(x, token_embedding);
}

torch::Tensor EncoderDecoderImpl::forward(const torch::Tensor& input_ids,
                                          const torch::Tensor& attention_mask,
                                          const torch::Tensor& decoder_input_ids) {
  return decode(decoder_input_ids, encode(input_ids, attention_mask), attention_mask);
}

}  // namespace zoo
