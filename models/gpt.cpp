#include "models/gpt.h"

#include <torch/torch.h>

#include "kernels/linear.h"
#include "kernels/math_attention.h"
#include "kernels/quantized_weight.h"
#include "models/init.h"

namespace zoo {

torch::Tensor positions_from_mask(const torch::Tensor& attention_mask, int64_t t) {
  auto mask = attention_mask.to(torch::kLong);
  auto positions = (mask.cumsum(1) - 1).clamp_min(0);  // (B, K)
  return positions.narrow(1, positions.size(1) - t, t);
}

GPTImpl::GPTImpl(ModelConfig config) : config(std::move(config)) { reset(); }

void GPTImpl::reset() {
  const auto& c = config;
  TORCH_CHECK(c.family == Family::kGpt, "GPT built from a config of another family");
  token_embedding = register_module("token_embedding", torch::nn::Embedding(c.vocab_size, c.d_model));
  positions = register_module("positions", PositionEncoding(position_options(c, /*bidirectional=*/false)));
  dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
  blocks = register_module("blocks", torch::nn::ModuleList());
  block_list_.clear();
  for (int64_t i = 0; i < c.n_layers; ++i) {
    block_list_.emplace_back(block_options(c, /*causal=*/true, /*cross_attention=*/false, i));
    blocks->push_back(block_list_.back());
  }
  final_norm = nullptr;
  switch (c.norm_position) {
    case NormPosition::kPre:
    case NormPosition::kSandwich: final_norm = register_module("final_norm", Norm(norm_options(c))); break;
    case NormPosition::kPost: break;
  }
  lm_head = nullptr;
  if (!c.tie_embeddings) {
    lm_head = register_module("lm_head",
                              torch::nn::Linear(torch::nn::LinearOptions(c.d_model, c.vocab_size).bias(false)));
  }
  initialize_weights(*this, c);
}

torch::Tensor GPTImpl::hidden_states(const torch::Tensor& input_ids,
                                     const torch::Tensor& attention_mask, KVCache* cache,
                                     const torch::Tensor& position_ids,
                                     const std::shared_ptr<RingExchange>& ring,
                                     std::vector<torch::Tensor>* router_logits) {
  TORCH_CHECK(input_ids.dim() == 2, "GPT: input_ids must be (batch, tokens), got shape ",
              input_ids.sizes());
  const int64_t b = input_ids.size(0), t = input_ids.size(1);
  const int64_t past = cache != nullptr ? cache->seen() : 0;
  TORCH_CHECK(past + t <= config.max_length(), "GPT: cannot forward ", past + t,
              " tokens, max_positions is ", config.max_length());
  if (attention_mask.defined()) {
    TORCH_CHECK(attention_mask.dim() == 2 && attention_mask.size(0) == b &&
                    attention_mask.size(1) == past + t,
                "GPT: attention_mask must be (", b, ", ", past + t,
                ") covering cached and new tokens, got ", attention_mask.sizes());
  }
  // Explicit positions, or each row's own from the mask (left padding); otherwise every row's are
  // past.., which no layer needs as a tensor.
  const bool explicit_positions = position_ids.defined() || attention_mask.defined();
  const torch::Tensor ids = position_ids.defined()    ? position_ids
                            : attention_mask.defined() ? positions_from_mask(attention_mask, t)
                                                       : torch::Tensor();
  auto x = embed(token_embedding, input_ids);  // (B, T, d_model)
  if (config.scale_embeddings) x = x * embedding_scale(config, x.scalar_type());
  // Positions past.. of every row: a slice of the table, nothing to check on the device.
  // Positions counted from a mask are below past + t: nothing to read back to check them.
  const auto pe = explicit_positions ? positions->embedding(ids, x.scalar_type(), position_ids.defined() ? 0 : past + t)
                                     : positions->embedding(past, t, x.scalar_type(), x.device());
  if (pe.defined()) x = x + pe;
  if (is_training() && config.dropout > 0.0) x = dropout->forward(x);  // else no op at all

  // One bias for every layer (masks and position terms): queries at past.., keys from position 0;
  // or, around a ring, the terms at the global positions of the zigzag layout.
  TORCH_CHECK(!ring || (position_ids.defined() && !attention_mask.defined() && cache == nullptr),
              "GPT: ring attention takes this rank's tokens with their global position_ids, no mask and no cache");
  // A stack of linear attention layers only needs no bias at all (building one costs O(keys)).
  bool any_softmax = false;
  for (int64_t i = 0; i < config.n_layers; ++i) any_softmax = any_softmax || config.attention_of(i) == AttentionKind::kSoftmax;
  // The layers window_layers leaves out (Gemma's global ones) attend to every key: a bias of their own.
  auto biases = ring || any_softmax ? stack_attention_biases(config, /*causal=*/true, positions.get(), attention_mask, t,
                                                             past, past + t, x, is_training(), ring)
                                    : StackBiases{};
  if (attention_mask.defined() && config.has_recurrent_layers()) {
    biases.windowed.token_mask = attention_mask.narrow(1, past, t);
  }
  // Rotary attention continues from the cache by itself; explicit positions are passed only when
  // they differ from that (left padding), sparing every layer a table gather and a device sync.
  const RopePositions rope_positions =
      config.position == PositionKind::kRope && explicit_positions
          ? RopePositions(ids, position_ids.defined() ? 0 : past + t)
          : RopePositions();
  const bool recompute = activation_checkpointing && is_training() && cache == nullptr;
  for (auto& block : block_list_) {
    const auto& layer_bias = biases.of(block->options.layer_index());
    x = recompute ? forward_recomputing(block, x, layer_bias, {}, {}, rope_positions, router_logits)
                  : block->forward(x, layer_bias, {}, {}, cache, rope_positions, router_logits);
  }
  return final_norm ? final_norm->forward(x) : x;
}

torch::Tensor GPTImpl::head_weight(torch::ScalarType dtype) const {
  const torch::nn::Module& owner = lm_head ? static_cast<const torch::nn::Module&>(*lm_head) : *token_embedding;
  const torch::Tensor& weight = lm_head ? lm_head->weight : token_embedding->weight;
  const auto quantized = quantized_weight_of(owner, weight);
  return quantized ? dequantize_weight(*quantized, dtype) : weight;
}

torch::Tensor GPTImpl::logits(const torch::Tensor& hidden) {
  return soft_cap(lm_head ? project(lm_head, hidden) : project(hidden, token_embedding), config.logit_softcap);
}

torch::Tensor embedding_scale(const ModelConfig& config, torch::ScalarType dtype) {
  return torch::scalar_tensor(std::sqrt(static_cast<double>(config.d_model)), torch::TensorOptions().dtype(dtype));
}

torch::Tensor GPTImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                               KVCache* cache, const torch::Tensor& position_ids) {
  return logits(hidden_states(input_ids, attention_mask, cache, position_ids));
}

torch::Tensor GPTImpl::next_token_logits(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                         KVCache* cache, const torch::Tensor& position_ids) {
  return logits(hidden_states(input_ids, attention_mask, cache, position_ids).select(1, -1));
}

}  // namespace zoo
