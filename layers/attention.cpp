#include "layers/attention.h"

#include <cmath>
#include <stdexcept>

#include <torch/torch.h>

#include "kernels/decode_attention.h"
#include "kernels/linear.h"
#include "kernels/linformer_attention.h"
#include "kernels/longformer_attention.h"
#include "kernels/masks.h"
#include "kernels/math_attention.h"
#include "kernels/ring_attention.h"
#include "kernels/tiled_attention.h"

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
  if (qk_norm_ && qk_norm_->d_model() != resolved_head_dim()) {
    fail(c10::str("attention: qk_norm's width (", qk_norm_->d_model(), ") must be head_dim (", resolved_head_dim(), ")"));
  }
  if (window_.has_value()) {
    if (*window_ < 1) fail(c10::str("attention: window (", *window_, ") must be >= 1"));
    if (cross_attention_) {
      fail(c10::str("attention: window (", *window_, ") needs self-attention"));
    }
  }
  if (causal_ && cross_attention_) fail("attention: causal does not apply to cross-attention");
  if (scale_dim_ < 0) fail(c10::str("attention: scale_dim (", scale_dim_, ") must be positive (or 0 for head_dim)"));
  if (!(softcap_ >= 0.0)) fail(c10::str("attention: softcap (", softcap_, ") must be positive (or 0 for none)"));
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
  if (linformer_k_ < 0) fail(c10::str("attention: linformer_k (", linformer_k_, ") must be positive (or 0 for none)"));
  if (linformer_k_ > 0) {
    const auto refuse = [&](const char* what) {
      fail(c10::str("attention: linformer projects keys along the sequence, which mixes every position: ", what));
    };
    if (causal_) refuse("causal self-attention cannot take it (each projected key holds future tokens)");
    if (cross_attention_) refuse("it applies to self-attention");
    if (window_.has_value()) refuse("a window bounds keys by position, and projected keys have none");
    if (softcap_ > 0.0) refuse("its fused kernel has no soft-capping");
    if (longformer_window_) refuse("longformer is another attention");
    if (linformer_length_ < linformer_k_) {
      fail(c10::str("attention: linformer_k (", linformer_k_, ") must be at most the sequence length its projections take (",
                    linformer_length_, ")"));
    }
  }
  if (longformer_window_) {
    const auto refuse = [&](const char* what) { fail(c10::str("attention: longformer ", what)); };
    if (*longformer_window_ < 0) fail(c10::str("attention: longformer_window (", *longformer_window_, ") must be >= 0"));
    if (causal_) refuse("is an encoder's attention: causal self-attention cannot take its global tokens, which see every token");
    if (cross_attention_) refuse("applies to self-attention");
    if (window_.has_value()) refuse("has its own window (longformer_window), not window");
    if (softcap_ > 0.0) refuse("has no soft-capping");
    if (rope_) refuse("takes learned, sinusoidal or no positions, not rope (its global projections are not rotated)");
    if (resolved_n_kv_heads() != n_heads_) refuse("has one key head per query head (n_kv_heads = n_heads)");
    if (!longformer_dilation_.empty() && static_cast<int64_t>(longformer_dilation_.size()) != n_heads_) {
      fail(c10::str("attention: longformer_dilation has ", longformer_dilation_.size(), " values, one per head (",
                    n_heads_, ") expected"));
    }
    for (const int64_t d : longformer_dilation_) {
      if (d < 1) fail(c10::str("attention: longformer_dilation values must be >= 1, got ", d));
    }
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
  qkv_global = nullptr;
  if (options.longformer_window()) qkv_global = register_module("qkv_global", linear(d, 3 * q_width, in_bias));
  q_norm = k_norm = nullptr;
  if (options.qk_norm()) {
    q_norm = register_module("q_norm", Norm(*options.qk_norm()));
    k_norm = register_module("k_norm", Norm(*options.qk_norm()));
  }
  linformer_e = linformer_f = torch::Tensor();
  if (options.linformer_k() > 0) {
    // uniform(-1/sqrt(k), 1/sqrt(k)), as the reference implementations of the paper start them.
    const int64_t shared = options.linformer_sharing() == LinformerSharing::kPerHead ? options.resolved_n_kv_heads() : 1;
    const double bound = 1.0 / std::sqrt(static_cast<double>(options.linformer_k()));
    auto projection = [&] {
      return torch::empty({shared, options.linformer_k(), options.linformer_length()}).uniform_(-bound, bound);
    };
    linformer_e = register_parameter("linformer_e", projection());
    if (options.linformer_sharing() != LinformerSharing::kKeyValue) {
      linformer_f = register_parameter("linformer_f", projection());
    }
  }
  rotary = nullptr;
  if (options.rope()) {
    rotary = register_module(
        "rotary", RotaryEmbedding(RotaryEmbeddingOptions(hd)
                                      .rotary_dim(options.rotary_dim())
                                      .base(options.rope_base())
                                      .layout(options.rope_layout())
                                      .scaling(options.rope_scaling())));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const AttentionBias& bias, const torch::Tensor& memory,
                                     AttentionCache* cache, const RopePositions& position_ids) {
  return std::get<0>(run(x, bias, memory, cache, position_ids));
}

std::tuple<torch::Tensor, torch::Tensor> AttentionImpl::forward_with_weights(const torch::Tensor& x,
                                                                             const AttentionBias& bias,
                                                                             const torch::Tensor& memory,
                                                                             AttentionCache* cache,
                                                                             const RopePositions& position_ids) {
  TORCH_CHECK(options.linformer_k() == 0, "attention: linformer's weights are over its projected rows, not tokens: "
              "none are returned");
  TORCH_CHECK(!options.longformer_window(), "attention: longformer's weights are a window and global columns, not "
              "(T, T): none are returned");
  TORCH_CHECK(bias.choice.path == AttentionPath::kMath,
              "attention: the weights come from the math path; the bias was built for the ",
              to_string(bias.choice.path), " path (build it with need_weights)");
  return run(x, bias, memory, cache, position_ids);
}

std::tuple<torch::Tensor, torch::Tensor> AttentionImpl::run(const torch::Tensor& x, const AttentionBias& bias,
                                                            const torch::Tensor& memory, AttentionCache* cache,
                                                            const RopePositions& position_ids) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == options.d_model(), "attention: expected input (B, T, ",
              options.d_model(), "), got ", x.sizes());
  const int64_t b = x.size(0), t = x.size(1);
  const int64_t h = options.n_heads(), hkv = options.resolved_n_kv_heads();
  const int64_t hd = options.resolved_head_dim();
  // (B, T, n * D) -> (B, n, T, D)
  auto heads = [&](const torch::Tensor& y, int64_t n) {
    return y.view({b, -1, n, hd}).transpose(1, 2);
  };

  // Project, rotate, cache.
  torch::Tensor qh, kh, vh;
  AttendArguments arguments;
  if (!options.cross_attention()) {
    TORCH_CHECK(!memory.defined(), "attention: memory given to self-attention");
    if (qkv) {
      auto parts = lora.project(qkv, x).split_with_sizes({h * hd, hkv * hd, hkv * hd}, -1);
      qh = heads(parts[0], h), kh = heads(parts[1], hkv), vh = heads(parts[2], hkv);
    } else {
      qh = heads(lora.project(q, x), h), kh = heads(lora.project(k, x), hkv), vh = heads(lora.project(v, x), hkv);
    }
    if (q_norm) qh = q_norm(qh), kh = k_norm(kh);
    arguments.query_start = cache != nullptr ? cache->seen() : 0;
    if (rotary) {
      if (position_ids.defined()) {
        qh = rotary->forward(qh, position_ids);
        kh = rotary->forward(kh, position_ids);
      } else {
        qh = rotary->forward(qh, arguments.query_start);
        kh = rotary->forward(kh, arguments.query_start);
      }
    }
    if (cache != nullptr) {
      std::tie(kh, vh) = cache->append(kh, vh, options.resolved_window());
      arguments.key_start = cache->start();
    }
  } else {
    qh = heads(lora.project(q, x), h);
    if (q_norm) qh = q_norm(qh);
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
      if (k_norm) kh = k_norm(kh);
      if (cache != nullptr) cache->set_static(kh, vh);
    }
  }

  // Attend, merge.
  const int64_t scale_dim = options.scale_dim() > 0 ? options.scale_dim() : hd;
  arguments.scale = options.scaled() ? 1.0 / std::sqrt(static_cast<double>(scale_dim)) : 1.0;
  arguments.softcap = options.softcap();
  arguments.dropout = is_training() ? options.dropout() : 0.0;
  if (options.linformer_k() > 0) {
    // The stack's masks are over tokens; Linformer's keys are rows of E K: only the padding
    // applies, before the projection (bias.token_mask).
    TORCH_CHECK(cache == nullptr, "attention: linformer keeps no cache (an encoder's attention)");
    TORCH_CHECK(bias.choice.path != AttentionPath::kRing, "attention: linformer projects the whole sequence's keys, "
                "which context parallelism (ring attention) splits across ranks");
    TORCH_CHECK(t <= options.linformer_length(), "attention: linformer's projections take at most ",
                options.linformer_length(), " tokens, got ", t);
    const auto o = linformer_attention(qh, kh, vh, linformer_e, linformer_f.defined() ? linformer_f : linformer_e,
                                       bias.token_mask, arguments.scale, arguments.dropout);
    return {lora.project(out, o.transpose(1, 2).reshape({b, t, h * hd})), torch::Tensor()};
  }
  if (options.longformer_window()) {
    // The stack's masks are (query, key) pairs; Longformer makes its window and global columns
    // itself from the padding (bias.token_mask) and the global tokens (bias.global_mask).
    TORCH_CHECK(cache == nullptr, "attention: longformer keeps no cache (an encoder's attention)");
    TORCH_CHECK(bias.choice.path != AttentionPath::kRing, "attention: longformer's global tokens see the whole "
                "sequence, which context parallelism (ring attention) splits across ranks");
    auto global = qkv_global->forward(x).split(h * hd, -1);
    LongformerAttentionOptions terms(*options.longformer_window());
    terms.dilation(options.longformer_dilation())
        .global_mask(bias.global_mask)
        .token_mask(bias.token_mask)
        .scale(arguments.scale)
        .dropout(arguments.dropout);
    const auto o = longformer_attention(qh, kh, vh, heads(global[0], h), heads(global[1], h), heads(global[2], h), terms);
    return {lora.project(out, o.transpose(1, 2).reshape({b, t, h * hd})), torch::Tensor()};
  }
  auto [o, w] = attend(qh, kh, vh, bias, arguments);
  auto merged = o.transpose(1, 2).reshape({b, t, h * hd});  // (B, T, H * D)
  return {lora.project(out, merged), w};
}

AttentionBias attention_bias(const AttentionImpl& attention, const torch::Tensor& x, AttentionMasks masks,
                             bool need_weights) {
  const auto& o = attention.options;
  if (masks.queries == 0) masks.queries = x.size(1);
  if (masks.keys == 0) {
    TORCH_CHECK(!o.cross_attention(), "attention_bias: give cross-attention the memory's length (masks.keys)");
    masks.keys = masks.query_start + masks.queries;
  }
  masks.causal = o.causal(), masks.window = o.resolved_window();
  AttentionCall call;
  call.backend = o.backend();
  call.grouped = o.resolved_n_kv_heads() != o.n_heads();
  call.dropout = attention.is_training() ? o.dropout() : 0.0;
  call.need_weights = need_weights;
  call.softcap = o.softcap() > 0.0;
  return build_attention_bias(call, masks, x);
}

namespace {

// An additive bias covers every key from the start: the columns of the `keys` keys a call holds,
// in `dtype`.
torch::Tensor columns_of_keys(const torch::Tensor& additive, int64_t keys, torch::ScalarType dtype) {
  if (!additive.defined()) return additive;
  TORCH_CHECK(additive.size(-1) >= keys, "attention: the bias covers ", additive.size(-1), " keys, the module holds ",
              keys);
  const auto columns = additive.size(-1) == keys ? additive : additive.narrow(-1, additive.size(-1) - keys, keys);
  return columns.to(dtype);
}

// The tiled kernel's terms for the keys a call holds: its scale, dropout and first key, and the
// key padding mask's last columns.
TiledAttentionOptions tiled_terms_of_keys(const AttentionBias& bias, int64_t batch, int64_t keys,
                                          const AttendArguments& arguments) {
  auto terms = bias.terms;
  if (const auto m = terms.key_padding_mask(); m.defined() && (m.dim() != 2 || m.size(1) != keys)) {
    TORCH_CHECK(m.dim() == 2 && m.size(0) == batch && m.size(1) >= keys, "attention: key padding mask must be (",
                batch, ", >= ", keys, "), got ", m.sizes());
    terms.key_padding_mask(m.narrow(1, m.size(1) - keys, keys));
  }
  return terms.scale(arguments.scale).softcap(arguments.softcap).key_start(arguments.key_start).dropout(arguments.dropout);
}

}  // namespace

std::tuple<torch::Tensor, torch::Tensor> attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                                const AttentionBias& bias, const AttendArguments& arguments) {
  const int64_t h = q.size(1), t = q.size(2), hkv = k.size(1), tk = k.size(2);
  // Autocast may leave q, k, v in different types (rotary in float32): the kernels take one.
  const auto dtype = q.scalar_type();
  const auto keys = k.to(dtype), values = v.to(dtype);
  switch (bias.choice.path) {
    case AttentionPath::kMath:
      return math_attention(q, keys, values, columns_of_keys(bias.additive, tk, dtype), arguments.scale,
                            arguments.dropout, arguments.softcap);
    case AttentionPath::kLibTorch: {
      TORCH_CHECK(arguments.softcap == 0.0, "attention: LibTorch's kernel has no soft-capping (the bias was built "
                  "for a call without it)");
      const auto folded = fold_query_heads(q, columns_of_keys(bias.additive, tk, dtype), hkv);
      // The stack left a plain causal mask to the kernel: its queries and keys start together.
      TORCH_CHECK(!bias.kernel_causal || (h == hkv && arguments.query_start == arguments.key_start && t == tk),
                  "attention: the kernel's causal mask needs as many queries as keys from the same position and no "
                  "grouped heads");
      std::optional<torch::Tensor> mask;
      if (folded.bias.defined()) mask = folded.bias;
      const auto o = at::scaled_dot_product_attention(folded.q, keys, values, mask, arguments.dropout,
                                                      bias.kernel_causal, arguments.scale);
      return {unfold_query_heads(o, h), torch::Tensor()};
    }
    case AttentionPath::kDecode: {
      const auto folded = fold_query_heads(q, columns_of_keys(bias.additive, tk, dtype), hkv);
      const auto o = dtype == torch::kBFloat16
                         ? bf16_decode_attention(folded.q, keys, values, folded.bias, arguments.scale, arguments.softcap)
                         : float32_decode_attention(folded.q, keys, values, folded.bias, arguments.scale,
                                                    arguments.softcap);
      return {unfold_query_heads(o, h), torch::Tensor()};
    }
    case AttentionPath::kTiled:
      return {tiled_attention(q, keys, values, tiled_terms_of_keys(bias, q.size(0), tk, arguments)), torch::Tensor()};
    case AttentionPath::kRing:
      // Context parallelism: this rank's zigzag tokens, their keys and values (or the encoder's,
      // for cross-attention), the whole sequence's key padding, no cache.
      TORCH_CHECK(arguments.query_start == 0 && arguments.key_start == 0, "attention: ring attention takes no cache (queries at ",
                  arguments.query_start, ", keys at ", arguments.key_start, ")");
      return {ring_attention(q, keys, values,
                             TiledAttentionOptions(bias.terms)
                                 .scale(arguments.scale)
                                 .softcap(arguments.softcap)
                                 .dropout(arguments.dropout),
                             bias.ring),
              torch::Tensor()};
  }
  throw std::logic_error("attention: unhandled path");
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
