#include "layers/attention_bias.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "kernels/f32_rows_dot.h"
#include "layers/position_encoding.h"

namespace zoo {
namespace {

AttentionPositionTerm position_term(const AttentionMasks& masks) {
  if (masks.position_bias.defined()) return AttentionPositionTerm::kTensor;
  if (masks.positions != nullptr && masks.positions->alibi) return AttentionPositionTerm::kAlibi;
  if (masks.positions != nullptr && masks.positions->relative) return AttentionPositionTerm::kRelative;
  return AttentionPositionTerm::kNone;
}

// The dtype the projections compute in: autocast's where it is on for `like`'s device.
torch::ScalarType compute_dtype_of(const torch::Tensor& like) {
  const auto device = like.device().type();
  if (like.is_floating_point() && at::autocast::is_autocast_enabled(device)) {
    return at::autocast::get_autocast_dtype(device);
  }
  return like.scalar_type();
}

// The tiled kernel's terms: the masks and the position term's parameters.
TiledAttentionOptions tiled_terms(const AttentionMasks& masks) {
  auto terms = TiledAttentionOptions().causal(masks.causal).window(masks.window);
  const auto* positions = masks.positions;
  if (positions != nullptr && positions->alibi) {
    terms.position_bias(TiledPositionBias::kAlibi).alibi_slopes(positions->alibi->slopes());
  }
  if (positions != nullptr && positions->relative) {
    const auto& o = positions->relative->options;
    terms.position_bias(TiledPositionBias::kRelative)
        .relative_table(positions->relative->relative_attention_bias->weight)
        .relative_bidirectional(o.bidirectional())
        .relative_max_distance(o.max_distance());
  }
  return terms;
}

}  // namespace

AttentionBias build_attention_bias(AttentionCall call, const AttentionMasks& masks, const torch::Tensor& like) {
  const auto& padding = masks.key_padding_mask;
  set_mask_facts(call, masks.queries, masks.query_start, masks.keys, masks.causal, masks.window, padding.defined(),
                 position_term(masks));
  call.ring = masks.ring != nullptr;
  const auto dtype = compute_dtype_of(like);
  call.cpu = like.device().is_cpu();
  call.float_or_bf16 = dtype == torch::kFloat || dtype == torch::kBFloat16;
  call.bf16 = dtype == torch::kBFloat16;
  call.float32_decode_kernel = cpu_runs_f32_rows_dot();
  call.differentiable = torch::GradMode::is_enabled();

  AttentionBias bias;
  bias.choice = choose_attention_path(call);
  switch (bias.choice.path) {
    case AttentionPath::kRing:
      bias.ring = masks.ring;
      bias.terms = tiled_terms(masks);
      if (padding.defined()) bias.terms.key_padding_mask(padding);
      return bias;
    case AttentionPath::kTiled:
      bias.terms = tiled_terms(masks).query_start(masks.query_start);
      if (padding.defined()) {
        TORCH_CHECK(padding.dim() == 2 && padding.size(1) >= masks.keys, "attention: key padding mask must be (B, >= ",
                    masks.keys, "), got ", padding.sizes());
        bias.terms.key_padding_mask(padding.narrow(1, padding.size(1) - masks.keys, masks.keys));
      }
      return bias;
    case AttentionPath::kMath:
    case AttentionPath::kLibTorch:
    case AttentionPath::kDecode: break;
  }
  AttentionBiasInputs in;
  in.queries = masks.queries, in.keys = masks.keys, in.query_start = masks.query_start;
  in.causal = masks.causal, in.window = call.window;
  in.key_padding_mask = padding;
  in.position_bias = masks.position_bias;
  if (!in.position_bias.defined() && masks.positions != nullptr) {
    in.position_bias = masks.positions->attention_bias(masks.queries, masks.keys, masks.query_start, 0, like.device(),
                                                       like.scalar_type());
  }
  // Only LibTorch's kernel applies a causal mask itself, and not to grouped queries folded into
  // the query length, which its mask would misalign.
  in.kernel_may_mask = bias.choice.path == AttentionPath::kLibTorch && !call.grouped;
  const auto additive = additive_attention_bias(in, like.scalar_type(), like.device());
  bias.additive = additive.additive;
  bias.kernel_causal = additive.kernel_causal;
  return bias;
}

}  // namespace zoo
