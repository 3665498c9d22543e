#include "layers/block.h"

#include "kernels/recompute.h"

#include <stdexcept>

#include <torch/torch.h>

namespace zoo {

AttentionOptions TransformerBlockOptions::cross_attention_options() const {
  AttentionOptions cross = attention_;
  cross.cross_attention(true).causal(false).window(std::nullopt).rope(false);
  return cross;
}

void TransformerBlockOptions::validate() const {
  attention_.validate();
  const int64_t d = attention_.d_model();
  if (linear_attention_) {
    linear_attention_->validate();
    if (linear_attention_->d_model() != d || cross_attention_) {
      throw std::invalid_argument(c10::str("block: linear attention of d_model ", linear_attention_->d_model(),
                                           " in a block of ", d, cross_attention_ ? " with cross-attention" : ""));
    }
  }
  if (mixture_of_experts_ && mixture_of_experts_->d_model() != d) {
    throw std::invalid_argument(c10::str("block: a mixture of experts of d_model ", mixture_of_experts_->d_model(),
                                         " in a block of ", d));
  }
  if (feed_forward_.d_model() != d || norm_.d_model() != d) {
    throw std::invalid_argument(c10::str("block: d_model differs between attention (", d,
                                         "), feed-forward (", feed_forward_.d_model(),
                                         ") and norm (", norm_.d_model(), ")"));
  }
  if (dropout_ < 0.0 || dropout_ >= 1.0) {
    throw std::invalid_argument(c10::str("block: dropout (", dropout_, ") must be in [0, 1)"));
  }
  if (!attention_norm_ && norm_position_ != NormPosition::kPre) {
    throw std::invalid_argument("block: attention_norm false needs norm_position pre");
  }
  if (layer_index_ < 0) {
    throw std::invalid_argument(c10::str("block: layer_index (", layer_index_, ") must be >= 0"));
  }
}

TransformerBlockImpl::TransformerBlockImpl(const TransformerBlockOptions& options)
    : options(options) {
  reset();
}

void TransformerBlockImpl::reset() {
  options.validate();
  self_attn = nullptr;
  linear_attn = nullptr;
  if (options.linear_attention()) {
    linear_attn = register_module("self_attn", LinearAttention(*options.linear_attention()));
  } else {
    self_attn = register_module("self_attn", Attention(options.attention()));
  }
  self_attn_norm = options.attention_norm() ? register_module("self_attn_norm", Norm(options.norm())) : nullptr;
  cross_attn = nullptr;
  cross_attn_norm = nullptr;
  if (options.cross_attention()) {
    cross_attn = register_module("cross_attn", Attention(options.cross_attention_options()));
    cross_attn_norm = register_module("cross_attn_norm", Norm(options.norm()));
  }
  ff = nullptr;
  moe = nullptr;
  if (options.mixture_of_experts()) {
    moe = register_module("moe", MixtureOfExperts(*options.mixture_of_experts()));
  } else {
    ff = register_module("ff", FeedForward(options.feed_forward()));
  }
  ff_norm = register_module("ff_norm", Norm(options.norm()));
  self_attn_post_norm = cross_attn_post_norm = ff_post_norm = nullptr;
  switch (options.norm_position()) {
    case NormPosition::kPre:
    case NormPosition::kPost: break;
    case NormPosition::kSandwich:
      self_attn_post_norm = register_module("self_attn_post_norm", Norm(options.norm()));
      if (cross_attn) cross_attn_post_norm = register_module("cross_attn_post_norm", Norm(options.norm()));
      ff_post_norm = register_module("ff_post_norm", Norm(options.norm()));
      break;
  }
  dropout = register_module("dropout", torch::nn::Dropout(options.dropout()));
}

void TransformerBlockImpl::check_memory(const torch::Tensor& memory, KVCache* cache) const {
  AttentionCache* cross_cache = cache != nullptr ? &cache->cross_attention(options.layer_index()) : nullptr;
  TORCH_CHECK(cross_attn || !memory.defined(), "block: memory given to a block without "
              "cross-attention");
  TORCH_CHECK(!cross_attn || memory.defined() || (cross_cache && cross_cache->is_static()),
              "block: cross-attention needs memory (the encoder output)");
}

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& x, const AttentionBias& self_bias,
                                            const torch::Tensor& memory, const AttentionBias& cross_bias,
                                            KVCache* cache, const RopePositions& position_ids,
                                            std::vector<torch::Tensor>* router_logits) {
  check_memory(memory, cache);
  const int64_t layer = options.layer_index();
  AttentionCache* self_cache = cache != nullptr ? &cache->self_attention(layer) : nullptr;
  AttentionCache* cross_cache = cache != nullptr ? &cache->cross_attention(layer) : nullptr;
  return residual(
      x,
      [&](const torch::Tensor& h) {
        return linear_attn ? linear_attn->forward(h, self_bias.token_mask, self_cache)
                           : self_attn->forward(h, self_bias, {}, self_cache, position_ids);
      },
      [&](const torch::Tensor& h) { return cross_attn->forward(h, cross_bias, memory, cross_cache); }, router_logits);
}

torch::Tensor TransformerBlockImpl::residual(const torch::Tensor& x,
                                             const std::function<torch::Tensor(const torch::Tensor&)>& self_attention,
                                             const std::function<torch::Tensor(const torch::Tensor&)>& cross_attention,
                                             std::vector<torch::Tensor>* router_logits) {
  // No dropout op at all where it would return its input (rate 0, or evaluation).
  const bool drops = is_training() && options.dropout() > 0.0;
  auto drop = [&](const torch::Tensor& y) { return drops ? dropout->forward(y) : y; };
  auto self_branch = [&](const torch::Tensor& h) { return drop(self_attention(h)); };
  auto cross_branch = [&](const torch::Tensor& h) { return drop(cross_attention(h)); };
  auto ff_branch = [&](const torch::Tensor& h) {
    if (!moe) return drop(ff->forward(h));
    auto [out, logits] = moe->forward(h);
    if (router_logits != nullptr) router_logits->push_back(logits);
    return drop(out);
  };
  torch::Tensor h = x;
  switch (options.norm_position()) {
    case NormPosition::kPre:  // x + f(norm(x))
      h = h + self_branch(self_attn_norm ? self_attn_norm->forward(h) : h);
      if (cross_attn) h = h + cross_branch(cross_attn_norm->forward(h));
      return h + ff_branch(ff_norm->forward(h));
    case NormPosition::kPost:  // norm(x + f(x))
      h = self_attn_norm->forward(h + self_branch(h));
      if (cross_attn) h = cross_attn_norm->forward(h + cross_branch(h));
      return ff_norm->forward(h + ff_branch(h));
    case NormPosition::kSandwich:  // x + norm2(f(norm1(x)))
      h = h + self_attn_post_norm->forward(self_branch(self_attn_norm->forward(h)));
      if (cross_attn) h = h + cross_attn_post_norm->forward(cross_branch(cross_attn_norm->forward(h)));
      return h + ff_post_norm->forward(ff_branch(ff_norm->forward(h)));
  }
  throw std::logic_error("unhandled norm position");
}

torch::Tensor forward_recomputing(const TransformerBlock& block, const torch::Tensor& x, const AttentionBias& self_bias,
                                  const torch::Tensor& memory, const AttentionBias& cross_bias,
                                  const RopePositions& position_ids, std::vector<torch::Tensor>* router_logits) {
  // Captured by value: backward runs after this frame is gone. The additive biases travel as
  // inputs (their gradient reaches T5's table through them); a tiled stack's terms are captured,
  // and T5's table they hold joins the parameters the recomputation differentiates.
  AttentionBias self_terms = self_bias, cross_terms = cross_bias;
  self_terms.additive = cross_terms.additive = torch::Tensor();
  // A mixture of experts returns its router logits beside the output, so that the load-balancing
  // loss's gradient reaches the router through the recomputation.
  auto run = [block, self_terms, cross_terms, position_ids](const std::vector<torch::Tensor>& in) {
    AttentionBias self = self_terms, cross = cross_terms;
    self.additive = in[1], cross.additive = in[3];
    std::vector<torch::Tensor> logits;
    const auto out = block.ptr()->forward(in[0], self, in[2], cross, nullptr, position_ids, &logits);
    logits.insert(logits.begin(), out);  // the block's output first
    return logits;
  };
  auto parameters = trainable_parameters(*block);
  for (const auto* bias : {&self_bias, &cross_bias}) {
    const auto& table = bias->terms.relative_table();
    if (table.defined() && table.requires_grad()) parameters.push_back(table);  // tiled and ring terms only
  }
  auto outputs = recompute_outputs_in_backward(run, {x, self_bias.additive, memory, cross_bias.additive}, parameters);
  if (router_logits != nullptr) router_logits->insert(router_logits->end(), outputs.begin() + 1, outputs.end());
  return outputs.at(0);
}

}  // namespace zoo
