#include "layers/attention.h"

#include <cmath>
#include <stdexcept>

#include <torch/torch.h>

#include "kernels/decode_attention.h"
#include "kernels/f32_rows_dot.h"
#include "kernels/linear.h"
#include "kernels/masks.h"
#include "kernels/ring_attention.h"
#include "kernels/tiled_attention.h"
#include "layers/attention_path.h"

namespace zoo {

void AttentionOptions::validate() const {
  auto fail = [](const std::string& message) { throw std::invalid_argument(message); };
  if (d_model_ <= 0) fail(c10::str("attention: d_model (", d_model_, ") must be positive"));
  if (n_heads_ <= 0) fail(c10::str("attention: n_heads (", n_heads_, ") must be positive"));
  if (n_kv_heads_ < 0) {
    fail(c10::str("attention: n_kv_heads (", n_kv_heads_, ") must be positive (or 0 for n_heads)"));
  }
  if (n_heads_ % resolved_n_kv_heads() != 0) {
    fail(c10::str("attention: n_heads (", n_heads_, ") must be divisible by n_kv_heads (",
                  n_kv_heads_, ")"));
  }
  if (head_dim_ < 0) fail(c10::str("attention: head_dim (", head_dim_, ") must be positive"));
  if (head_dim_ == 0 && d_model_ % n_heads_ != 0) {
    fail(c10::str("attention: d_model (", d_model_, ") must be divisible by n_heads (", n_heads_,
                  ") unless head_dim is set"));
  }
  if (window_.has_value()) {
    if (*window_ < 1) fail(c10::str("attention: window (", *window_, ") must be >= 1"));
    if (!causal_ || cross_attention_) {
      fail(c10::str("attention: window (", *window_, ") needs causal self-attention"));
    }
  }
  if (causal_ && cross_attention_) fail("attention: causal does not apply to cross-attention");
  if (dropout_ < 0.0 || dropout_ >= 1.0) {
    fail(c10::str("attention: dropout (", dropout_, ") must be in [0, 1)"));
  }
  if (rope_) {
    if (cross_attention_) fail("attention: rope does not apply to cross-attention");
    if (resolved_head_dim() % 2 != 0) {
      fail(c10::str("attention: rope needs an even head_dim, got ", resolved_head_dim()));
    }
    if (!(rope_base_ > 1.0)) fail(c10::str("attention: rope_base (", rope_base_, ") must be > 1"));
  }
}

AttentionImpl::AttentionImpl(const AttentionOptions& options) : options(options) { reset(); }

void AttentionImpl::reset() {
  options.validate();
  const int64_t d = options.d_model();
  const int64_t hd = options.resolved_head_dim();
  const int64_t q_width = options.n_heads() * hd;
  const int64_t kv_width = options.resolved_n_kv_heads() * hd;
  const bool in_bias = options.bias() || options.qkv_bias();
  auto linear = [&](int64_t in, int64_t out, bool bias) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
  };
  qkv = q = kv = k = v = nullptr;
  if (options.fused_projections() && !options.cross_attention()) {
    qkv = register_module("qkv", linear(d, q_width + 2 * kv_width, in_bias));
  } else {
    q = register_module("q", linear(d, q_width, in_bias));
    if (options.fused_projections()) {
      kv = register_module("kv", linear(d, 2 * kv_width, in_bias));
    } else {
      k = register_module("k", linear(d, kv_width, in_bias));
      v = register_module("v", linear(d, kv_width, in_bias));
    }
  }
  out = register_module("out", linear(q_width, d, options.bias()));
  rotary = nullptr;
  if (options.rope()) {
    rotary = register_module(
        "rotary", RotaryEmbedding(RotaryEmbeddingOptions(hd)
                                      .base(options.rope_base())
                                      .layout(options.rope_layout())
                                      .scaling(options.rope_scaling())));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& memory,
                                     const torch::Tensor& key_padding_mask,
                                     const torch::Tensor& position_bias, AttentionCache* cache,
                                     const torch::Tensor& position_ids) {
  return std::get<0>(run(x, memory, {nullptr, key_padding_mask, position_bias}, cache, position_ids,
                         /*need_weights=*/false));
}

torch::Tensor AttentionImpl::forward_with_bias(const torch::Tensor& x, const AttentionBias& bias, const torch::Tensor& memory,
                                     AttentionCache* cache, const torch::Tensor& position_ids) {
  return std::get<0>(run(x, memory, {&bias, {}, {}}, cache, position_ids, /*need_weights=*/false));
}

std::tuple<torch::Tensor, torch::Tensor> AttentionImpl::forward_with_weights(
    const torch::Tensor& x, const torch::Tensor& memory, const torch::Tensor& key_padding_mask,
    const torch::Tensor& position_bias, AttentionCache* cache, const torch::Tensor& position_ids) {
  return run(x, memory, {nullptr, key_padding_mask, position_bias}, cache, position_ids, /*need_weights=*/true);
}

std::tuple<torch::Tensor, torch::Tensor> AttentionImpl::run(const torch::Tensor& x, const torch::Tensor& memory,
                                                            const Masks& masks, AttentionCache* cache,
                                                            const torch::Tensor& position_ids, bool need_weights) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == options.d_model(), "attention: expected input (B, T, ",
              options.d_model(), "), got ", x.sizes());
  const int64_t b = x.size(0), t = x.size(1);
  const int64_t h = options.n_heads(), hkv = options.resolved_n_kv_heads();
  const int64_t hd = options.resolved_head_dim();
  // (B, T, n * D) -> (B, n, T, D)
  auto heads = [&](const torch::Tensor& y, int64_t n) {
    return y.view({b, -1, n, hd}).transpose(1, 2);
  };

  torch::Tensor qh, kh, vh;
  int64_t q_start = 0, k_start = 0;
  if (!options.cross_attention()) {
    TORCH_CHECK(!memory.defined(), "attention: memory given to self-attention");
    if (qkv) {
      auto parts = lora.project(qkv, x).split_with_sizes({h * hd, hkv * hd, hkv * hd}, -1);
      qh = heads(parts[0], h), kh = heads(parts[1], hkv), vh = heads(parts[2], hkv);
    } else {
      qh = heads(lora.project(q, x), h), kh = heads(lora.project(k, x), hkv), vh = heads(lora.project(v, x), hkv);
    }
    q_start = cache != nullptr ? cache->seen() : 0;
    if (rotary) {
      if (position_ids.defined()) {
        qh = rotary->forward(qh, position_ids);
        kh = rotary->forward(kh, position_ids);
      } else {
        qh = rotary->forward(qh, q_start);
        kh = rotary->forward(kh, q_start);
      }
    }
    if (cache != nullptr) {
      std::tie(kh, vh) = cache->append(kh, vh, options.resolved_window());
      k_start = cache->start();
    }
  } else {
    qh = heads(lora.project(q, x), h);
    if (cache != nullptr && cache->is_static()) {
      kh = cache->keys(), vh = cache->values();
    } else {
      TORCH_CHECK(memory.defined() && memory.dim() == 3 && memory.size(0) == b &&
                      memory.size(2) == options.d_model(),
                  "cross-attention: expected memory (", b, ", S, ", options.d_model(), "), got ",
                  memory.defined() ? memory.sizes() : c10::IntArrayRef{});
      if (kv) {
        auto parts = lora.project(kv, memory).chunk(2, -1);
        kh = heads(parts[0], hkv), vh = heads(parts[1], hkv);
      } else {
        kh = heads(lora.project(k, memory), hkv), vh = heads(lora.project(v, memory), hkv);
      }
      if (cache != nullptr) cache->set_static(kh, vh);
    }
  }
  const int64_t tk = kh.size(2);

  const double scale = options.scaled() ? 1.0 / std::sqrt(static_cast<double>(hd)) : 1.0;
  const double p = is_training() ? options.dropout() : 0.0;
  auto finish = [&](const torch::Tensor& o, const torch::Tensor& w) -> std::tuple<torch::Tensor, torch::Tensor> {
    auto merged = o.transpose(1, 2).reshape({b, t, h * hd});  // (B, T, H * D)
    return {lora.project(out, merged), w};
  };

  // The stack chose the tiled kernel for all its layers, or this module chooses for its own masks.
  std::optional<TiledAttentionOptions> tiled;
  if (masks.stack_bias != nullptr && masks.stack_bias->tiled) {
    tiled = masks.stack_bias->terms;
  } else if (masks.stack_bias == nullptr) {
    AttentionCall call;
    call.backend = options.backend();
    call.cpu = x.device().is_cpu();
    call.float_or_bf16 = qh.scalar_type() == torch::kFloat || qh.scalar_type() == torch::kBFloat16;
    call.bf16 = qh.scalar_type() == torch::kBFloat16, call.float32_decode_kernel = cpu_runs_f32_rows_dot();
    call.queries = t, call.keys = tk, call.aligned = q_start == k_start && t == tk;
    call.causal = options.causal(), call.window = options.resolved_window();
    call.key_padding = masks.key_padding_mask.defined();
    call.position = masks.position_bias.defined() ? AttentionPositionTerm::kTensor : AttentionPositionTerm::kNone;
    call.grouped = h != hkv, call.dropout = p, call.need_weights = need_weights;
    if (choose_attention_path(call).path == AttentionPath::kTiled) {
      tiled = TiledAttentionOptions()
                  .causal(options.causal())
                  .window(options.resolved_window())
                  .query_start(q_start)
                  .key_padding_mask(masks.key_padding_mask);
    }
  }
  if (tiled && !need_weights) {
    // Autocast may leave q, k, v in different types (rotary in float32): the kernel takes one.
    const auto dtype = qh.scalar_type();
    if (masks.stack_bias != nullptr && masks.stack_bias->ring) {
      // Context parallelism: this rank's zigzag tokens, their keys and values (or the encoder's,
      // for cross-attention), the whole sequence's key padding, no cache.
      TORCH_CHECK(q_start == 0 && k_start == 0, "attention: ring attention takes no cache (queries at ", q_start,
                  ", keys at ", k_start, ")");
      tiled->scale(scale).dropout(p);
      return finish(ring_attention(qh, kh.to(dtype), vh.to(dtype), *tiled, masks.stack_bias->ring), torch::Tensor());
    }
    // The mask covers every key from the start: this module takes the columns of the keys it holds.
    if (const auto m = tiled->key_padding_mask(); m.defined() && (m.dim() != 2 || m.size(1) != tk)) {
      TORCH_CHECK(m.dim() == 2 && m.size(0) == b && m.size(1) >= tk, "attention: key padding mask must be (", b,
                  ", >= ", tk, "), got ", m.sizes());
      tiled->key_padding_mask(m.narrow(1, m.size(1) - tk, tk));
    }
    tiled->scale(scale).key_start(k_start).dropout(p);
    return finish(tiled_attention(qh, kh.to(dtype), vh.to(dtype), *tiled), torch::Tensor());
  }

  // One additive bias for every mask and position term: the stack's, or built here.
  const auto backend = need_weights ? AttentionBackend::kMath : options.backend();
  const bool kernel_may_mask = backend != AttentionBackend::kMath && h == hkv;
  AttentionBias own;
  if (masks.stack_bias == nullptr) {
    if (masks.key_padding_mask.defined()) {
      TORCH_CHECK(masks.key_padding_mask.dim() == 2 && masks.key_padding_mask.size(0) == b,
                  "attention: key padding mask must be (", b, ", K), got ", masks.key_padding_mask.sizes());
    }
    AttentionBiasInputs in;
    in.queries = t, in.keys = tk, in.query_start = q_start, in.key_start = k_start;
    in.causal = options.causal(), in.window = options.resolved_window();
    in.key_padding_mask = masks.key_padding_mask, in.position_bias = masks.position_bias;
    in.kernel_may_mask = kernel_may_mask;
    own = build_attention_bias(in, qh.scalar_type(), x.device());
  }
  const AttentionBias& stack = masks.stack_bias != nullptr ? *masks.stack_bias : own;
  torch::Tensor bias = stack.additive;
  if (bias.defined()) {
    TORCH_CHECK(bias.size(-1) >= tk, "attention: the bias covers ", bias.size(-1), " keys, the module holds ", tk);
    if (bias.size(-1) != tk) bias = bias.narrow(-1, bias.size(-1) - tk, tk);
    bias = bias.to(qh.scalar_type());
  }
  bool kernel_causal = stack.kernel_causal;
  if (kernel_causal && (!kernel_may_mask || q_start != k_start || t != tk)) {
    // The stack left the causal mask to a kernel this module cannot use: build it here.
    bias = mask_to_bias(causal_mask(t, tk, q_start, k_start, options.resolved_window(), x.device()), qh.scalar_type());
    kernel_causal = false;
  }

  auto [o, w] = scaled_dot_product(qh, kh, vh, bias, scale, p, kernel_causal, backend, need_weights);
  return finish(o, w);
}

std::tuple<torch::Tensor, torch::Tensor> scaled_dot_product(
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& attn_bias, double scale, double dropout, bool is_causal,
    AttentionBackend backend, bool need_weights) {
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3);
  const int64_t hkv = k.size(1), tk = k.size(2);
  TORCH_CHECK(h % hkv == 0, "attention: ", h, " query heads cannot share ", hkv, " key heads");
  TORCH_CHECK(!(is_causal && h != hkv), "attention: kernel causal mask needs h == hkv");
  const int64_t rep = h / hkv;

  // Grouped queries: fold the `rep` query heads of each key/value head into the query length,
  // (B, H, T, D) -> (B, Hkv, rep * T, D), so keys and values are never copied per query head.
  auto qf = rep > 1 ? q.reshape({b, hkv, rep * t, d}) : q;
  torch::Tensor bias = attn_bias;
  if (bias.defined()) {
    while (bias.dim() < 4) bias = bias.unsqueeze(0);
    if (rep > 1) {
      bias = bias.expand({bias.size(0), h, t, tk}).reshape({bias.size(0), hkv, rep * t, tk});
    }
  }

  torch::Tensor o, w;
  // The decode path of choose_attention_path: bfloat16 on every backend, float32 but on math.
  if (takes_bf16_decode_attention(q, k, v, dropout, is_causal, need_weights)) {
    o = bf16_decode_attention(qf, k, v, bias, scale);
  } else if (backend != AttentionBackend::kMath &&
             takes_float32_decode_attention(q, k, v, dropout, is_causal, need_weights)) {
    o = float32_decode_attention(qf, k, v, bias, scale);
  } else if (backend != AttentionBackend::kMath && !need_weights) {
    std::optional<torch::Tensor> mask;
    if (bias.defined()) mask = bias;
    o = at::scaled_dot_product_attention(qf, k, v, mask, dropout, is_causal, scale);
  } else {
    auto scores = torch::matmul(qf, k.transpose(-2, -1)) * scale;  // (B, Hkv, rep * T, Tk)
    if (is_causal) {
      scores = scores + mask_to_bias(torch::ones({t, tk}, q.options().dtype(torch::kBool)).tril(),
                                     scores.scalar_type());
    }
    if (bias.defined()) scores = scores + bias;
    // Half-precision scores are normalised in float32; float and double as they are.
    const auto dtype = q.scalar_type();
    const bool low = dtype == torch::kHalf || dtype == torch::kBFloat16;
    w = torch::softmax(scores, -1, low ? torch::kFloat : dtype).to(dtype);
    if (dropout > 0.0) w = torch::dropout(w, dropout, /*train=*/true);
    o = torch::matmul(w, v);
    if (rep > 1 && need_weights) w = w.view({b, h, t, tk});
  }
  // reshape, not view: CUDA's fused kernels return (B, Hkv, rep * T, D) laid out as (B, rep * T, Hkv, D).
  if (rep > 1) o = o.reshape({b, h, t, d});
  return {o, need_weights ? w : torch::Tensor()};
}

std::vector<ProjectionPart> AttentionImpl::projection_parts() const {
  const int64_t hd = options.resolved_head_dim();
  const int64_t q_width = options.n_heads() * hd;
  const int64_t kv_width = options.resolved_n_kv_heads() * hd;
  std::vector<ProjectionPart> parts;
  if (qkv) {
    parts = {{"q", qkv, 0, q_width}, {"k", qkv, q_width, kv_width}, {"v", qkv, q_width + kv_width, kv_width}};
  } else {
    parts.push_back({"q", q, 0, q_width});
    if (kv) {
      parts.push_back({"k", kv, 0, kv_width});
      parts.push_back({"v", kv, kv_width, kv_width});
    } else {
      parts.push_back({"k", k, 0, kv_width});
      parts.push_back({"v", v, 0, kv_width});
    }
  }
  parts.push_back({"out", out, 0, options.d_model()});
  return parts;
}

}  // namespace zoo
