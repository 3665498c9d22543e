#include "layers/linear_attention.h"

#include <cmath>
#include <stdexcept>

#include <torch/torch.h>

#include "kernels/linear.h"
#include "kernels/linear_attention.h"

namespace zoo {

int64_t LinearAttentionOptions::head_k() const {
  if (kind_ == AttentionKind::kGatedLinear) return key_dim_ / n_heads_;
  return head_dim_ > 0 ? head_dim_ : d_model_ / n_heads_;
}

int64_t LinearAttentionOptions::head_v() const {
  if (kind_ == AttentionKind::kGatedLinear) return value_dim_ / n_heads_;
  return head_k();
}

void LinearAttentionOptions::validate() const {
  auto fail = [](const std::string& m) { throw std::invalid_argument("linear attention: " + m); };
  if (d_model_ <= 0 || n_heads_ <= 0) fail(c10::str("d_model (", d_model_, ") and n_heads (", n_heads_, ") must be positive"));
  switch (kind_) {
    case AttentionKind::kSoftmax:
    case AttentionKind::kLinformer:
    case AttentionKind::kLongformer: fail("kind " + to_string(kind_) + " is layers/attention.h's"); break;
    case AttentionKind::kLinear:
      if (head_dim_ == 0 && d_model_ % n_heads_ != 0) {
        fail(c10::str("d_model (", d_model_, ") must be divisible by n_heads (", n_heads_, ") unless head_dim is set"));
      }
      if (feature_map_ == FeatureMap::kPerformer && (performer_features_ < 1 || !normalize_)) {
        fail(c10::str("performer needs performer_features >= 1 (got ", performer_features_, ") and normalize"));
      }
      break;
    case AttentionKind::kGatedLinear:
      if (key_dim_ <= 0 || value_dim_ <= 0 || key_dim_ % n_heads_ != 0 || value_dim_ % n_heads_ != 0) {
        fail(c10::str("key_dim (", key_dim_, ") and value_dim (", value_dim_, ") must be positive multiples of n_heads (",
                      n_heads_, ")"));
      }
      if (gate_rank_ < 1 || !(gate_normalizer_ > 0.0)) {
        fail(c10::str("gate_rank (", gate_rank_, ") and gate_normalizer (", gate_normalizer_, ") must be positive"));
      }
      break;
  }
}

LinearAttentionImpl::LinearAttentionImpl(const LinearAttentionOptions& options) : options(options) { reset(); }

void LinearAttentionImpl::reset() {
  options.validate();
  const int64_t d = options.d_model(), h = options.n_heads();
  auto linear = [](int64_t in, int64_t out, bool bias) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
  };
  gate = decay_down = decay_up = nullptr;
  head_norm = nullptr;
  switch (options.kind()) {
    case AttentionKind::kSoftmax:
    case AttentionKind::kLinformer:
    case AttentionKind::kLongformer: break;  // refused by validate
    case AttentionKind::kLinear: {
      const int64_t width = h * options.head_k();
      const bool in_bias = options.bias() || options.qkv_bias();
      q = register_module("q", linear(d, width, in_bias));
      k = register_module("k", linear(d, width, in_bias));
      v = register_module("v", linear(d, width, in_bias));
      out = register_module("out", linear(width, d, options.bias()));
      if (options.feature_map() == FeatureMap::kPerformer) {
        features = register_buffer(
            "features", orthogonal_random_features(options.performer_features(), options.head_k(), options.performer_seed()));
      }
      break;
    }
    case AttentionKind::kGatedLinear:
      q = register_module("q", linear(d, options.key_dim(), false));
      k = register_module("k", linear(d, options.key_dim(), false));
      v = register_module("v", linear(d, options.value_dim(), false));
      gate = register_module("gate", linear(d, options.value_dim(), false));
      decay_down = register_module("decay_down", linear(d, options.gate_rank(), false));
      decay_up = register_module("decay_up", linear(options.gate_rank(), options.key_dim(), true));
      head_norm = register_module("head_norm",
                                  Norm(NormOptions(options.head_v()).kind(NormKind::kRMSNorm).eps(options.norm_eps())));
      out = register_module("out", linear(options.value_dim(), d, false));
      break;
  }
}

torch::Tensor LinearAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& token_mask, AttentionCache* cache) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == options.d_model(), "linear attention: expected input (B, T, ",
              options.d_model(), "), got ", x.sizes());
  const int64_t b = x.size(0), t = x.size(1), h = options.n_heads(), dk = options.head_k(), dv = options.head_v();
  TORCH_CHECK(!token_mask.defined() || token_mask.sizes() == torch::IntArrayRef({b, t}),
              "linear attention: token_mask must be (", b, ", ", t, "), got ", token_mask.sizes());
  auto heads = [&](const torch::Tensor& y, int64_t width) { return y.view({b, t, h, width}).transpose(1, 2); };
  auto query = heads(project(q, x), dk), key = heads(project(k, x), dk), value = heads(project(v, x), dv);
  torch::Tensor log_decay;
  double scale = 1.0 / std::sqrt(static_cast<double>(dk));
  bool normalize = false;
  switch (options.kind()) {
    case AttentionKind::kSoftmax:
    case AttentionKind::kLinformer:
    case AttentionKind::kLongformer: break;
    case AttentionKind::kLinear:
      normalize = options.normalize();
      switch (options.feature_map()) {
        case FeatureMap::kElu1:
          query = torch::elu(query) + 1.0, key = torch::elu(key) + 1.0;
          break;
        case FeatureMap::kRelu:
          query = torch::relu(query), key = torch::relu(key);
          break;
        case FeatureMap::kPerformer:
          // The features estimate exp(q.k / sqrt(dk)) themselves.
          query = performer_features(query, features, /*stabilize=*/true);
          key = performer_features(key, features, /*stabilize=*/false);
          scale = 1.0;
          break;
      }
      break;
    case AttentionKind::kGatedLinear:
      log_decay = heads(torch::log_sigmoid(project(decay_up, project(decay_down, x))) / options.gate_normalizer(), dk);
      break;
  }
  if (token_mask.defined()) {
    const auto real = token_mask.ne(0).view({b, 1, t, 1});
    key = key * real.to(key.scalar_type());
    if (log_decay.defined()) log_decay = log_decay * real.to(log_decay.scalar_type());
  }
  // The normaliser phi(q) . sum phi(k) is one more value column of ones.
  if (normalize) value = torch::cat({value, torch::ones({b, h, t, 1}, value.options())}, -1);
  LinearAttentionResult r;
  if (cache == nullptr) {
    r = chunked_linear_attention(query, key, value, log_decay, {}, scale, /*want_final_state=*/false);
  } else {
    // A few tokens step by step; a prompt through the chunks, from the state so far.
    r = t < kLinearAttentionSubChunk
            ? recurrent_linear_attention(query, key, value, log_decay, cache->state(), scale)
            : chunked_linear_attention(query, key, value, log_decay, cache->state(), scale, /*want_final_state=*/true);
    cache->set_state(r.final_state, t);
  }
  auto o = r.output;  // (B, H, T, Dv[+1])
  if (normalize) o = o.narrow(-1, 0, dv) / (o.narrow(-1, dv, 1) + 1e-6);
  o = o.transpose(1, 2);  // (B, T, H, Dv)
  if (options.kind() == AttentionKind::kGatedLinear) {
    o = head_norm->forward(o) * torch::silu(project(gate, x).view({b, t, h, dv}));
  }
  return project(out, o.reshape({b, t, h * dv}));
}

}  // namespace zoo
