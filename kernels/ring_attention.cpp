#include "kernels/ring_attention.h"

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/custom_class.h>
#include <torch/torch.h>

namespace zoo {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// One (query chunk, key chunk) pair of a ring step: local row offsets and global starts.
struct ChunkPair {
  int64_t query_offset, key_offset;  // into the local (2 * chunk) tokens
  int64_t query_start, key_start;    // global positions
};

// The zigzag layouts of a call's queries and of its keys: the same for self-attention; a
// decoder's cross-attention (no causal mask) cuts its queries and the encoder's keys apart.
struct RingLayouts {
  ZigzagLayout queries, keys;
};

// The pairs of this rank's query chunks with `source`'s key chunks that some mask leaves
// visible: a causal key chunk wholly after the query chunk, or a window wholly before it, is
// skipped (its rows would all be masked, adding nothing to the merge).
std::vector<ChunkPair> visible_pairs(const RingLayouts& layouts, int64_t rank, int64_t source,
                                     const TiledAttentionOptions& terms) {
  std::vector<ChunkPair> pairs;
  for (int64_t a = 0; a < 2; ++a) {
    for (int64_t b = 0; b < 2; ++b) {
      const ChunkPair pair{a * layouts.queries.chunk, b * layouts.keys.chunk, layouts.queries.chunk_start(rank, a),
                           layouts.keys.chunk_start(source, b)};
      const int64_t last_query = pair.query_start + layouts.queries.chunk - 1;
      const int64_t last_key = pair.key_start + layouts.keys.chunk - 1;
      if (terms.causal() && pair.key_start > last_query) continue;
      if (terms.causal() && terms.window() > 0 && last_key <= pair.query_start - terms.window()) continue;
      pairs.push_back(pair);
    }
  }
  return pairs;
}

RingLayouts check_ring_call(const torch::Tensor& q, const torch::Tensor& k, const TiledAttentionOptions& terms,
                            const RingExchange& ring) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4, "ring_attention: q and k must be (B, H, T, D), got ", q.sizes(), ", ",
              k.sizes());
  // A two-sided window (an encoder's) would need the chunks after a query chunk too: not skipped here, not tested.
  TORCH_CHECK(terms.window() == 0 || terms.causal(), "ring_attention: a window needs causal attention");
  TORCH_CHECK(!terms.causal() || q.size(2) == k.size(2),
              "ring_attention: causal attention needs q and k to hold the same local tokens, got ", q.size(2), " and ",
              k.size(2));
  TORCH_CHECK(ring.ranks() >= 1 && ring.rank() >= 0 && ring.rank() < ring.ranks(), "ring_attention: rank ",
              ring.rank(), " of ", ring.ranks());
  TORCH_CHECK(q.size(2) % 2 == 0 && k.size(2) % 2 == 0, "ring_attention: a rank holds two chunks of equal length, got ",
              q.size(2), " local queries and ", k.size(2), " local keys");
  TORCH_CHECK(terms.query_start() == 0 && terms.key_start() == 0,
              "ring_attention: positions come from the zigzag layout; query_start and key_start must be 0");
  const int64_t keys = k.size(2) * ring.ranks();
  if (const auto& m = terms.key_padding_mask(); m.defined()) {
    TORCH_CHECK(m.dim() == 2 && m.size(0) == k.size(0) && m.size(1) == keys,
                "ring_attention: the key padding mask covers the whole sequence's keys in global order, (", k.size(0),
                ", ", keys, "); got ", m.sizes());
  }
  TORCH_CHECK(terms.dropout() == 0.0 || terms.dropout_seed().has_value(), "ring_attention: dropout needs a seed");
  TORCH_CHECK(terms.dropout_queries() == 0 && terms.dropout_keys() == 0,
              "ring_attention: the dropout mask's positions come from the zigzag layout; leave them 0");
  return {ZigzagLayout::of(q.size(2) * ring.ranks(), ring.ranks()), ZigzagLayout::of(keys, ring.ranks())};
}

// Folds a partial (out, lse) into the running float32 (out, lse): weights exp(lse - new lse),
// with rows no key has reached yet (both -inf) left at 0 rather than NaN.
void merge(torch::Tensor out, torch::Tensor lse, const torch::Tensor& part_out, const torch::Tensor& part_lse) {
  const auto merged = torch::logaddexp(lse, part_lse);
  const auto empty = merged == -kInf;
  const auto safe = torch::where(empty, torch::zeros_like(merged), merged);
  const auto keep = torch::where(empty, torch::zeros_like(merged), (lse - safe).exp()).unsqueeze(-1);
  const auto take = torch::where(empty, torch::zeros_like(merged), (part_lse - safe).exp()).unsqueeze(-1);
  out.mul_(keep).add_(part_out.to(torch::kFloat) * take);
  lse.copy_(merged);
}

// The terms of one pair: its chunks' global starts, the padding of its keys, and dropout drawn
// in the whole sequence's index space, as one process draws it.
TiledAttentionOptions at_pair(const TiledAttentionOptions& terms, const ChunkPair& pair, const RingLayouts& layouts) {
  auto at = TiledAttentionOptions(terms)
                .query_start(pair.query_start)
                .key_start(pair.key_start)
                .dropout_queries(2 * layouts.queries.ranks * layouts.queries.chunk)
                .dropout_keys(2 * layouts.keys.ranks * layouts.keys.chunk);
  if (const auto& m = terms.key_padding_mask(); m.defined()) {
    at.key_padding_mask(m.narrow(1, pair.key_start, layouts.keys.chunk));
  }
  return at;
}

// Every rank of the ring must draw the same dropout seed (their generators seeded alike and
// drawn alike, as a trainer's ranks are): each rank sends its seed to the next and compares the
// one it receives, so one pass checks every neighbour and with them the whole ring.
void check_same_seed(int64_t seed, RingExchange& ring) {
  if (ring.ranks() == 1) return;
  auto mine = torch::tensor({seed}, torch::kLong), previous = torch::empty({1}, torch::kLong);
  ring.pass(mine, previous, 0)();
  const int64_t theirs = previous.item<int64_t>();
  TORCH_CHECK(theirs == seed, "ring_attention: rank ", ring.rank(), " drew dropout seed ", seed, " and rank ",
              (ring.rank() + ring.ranks() - 1) % ring.ranks(), " drew ", theirs,
              ": the ranks' random generators differ (seed every rank alike)");
}

}  // namespace

ZigzagLayout ZigzagLayout::of(int64_t tokens, int64_t ranks) {
  TORCH_CHECK(ranks >= 1, "zigzag layout: ranks must be >= 1, got ", ranks);
  TORCH_CHECK(tokens > 0 && tokens % (2 * ranks) == 0, "zigzag layout: ", tokens,
              " tokens cannot be cut into 2 x ", ranks, " = ", 2 * ranks, " equal chunks (", ranks,
              " ranks, two chunks each)");
  return ZigzagLayout{ranks, tokens / (2 * ranks)};
}

torch::Tensor zigzag_positions(const ZigzagLayout& layout, int64_t rank) {
  return torch::cat({torch::arange(layout.chunk_start(rank, 0), layout.chunk_start(rank, 0) + layout.chunk, torch::kLong),
                     torch::arange(layout.chunk_start(rank, 1), layout.chunk_start(rank, 1) + layout.chunk, torch::kLong)});
}

torch::Tensor zigzag_split(const torch::Tensor& x, int64_t dim, const ZigzagLayout& layout, int64_t rank) {
  TORCH_CHECK(x.size(dim) == 2 * layout.chunk * layout.ranks, "zigzag_split: ", x.size(dim), " tokens along dim ",
              dim, ", the layout covers ", 2 * layout.chunk * layout.ranks);
  TORCH_CHECK(rank >= 0 && rank < layout.ranks, "zigzag_split: rank ", rank, " of ", layout.ranks);
  return torch::cat({x.narrow(dim, layout.chunk_start(rank, 0), layout.chunk),
                     x.narrow(dim, layout.chunk_start(rank, 1), layout.chunk)},
                    dim);
}

RingAttentionResult ring_attention_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           const TiledAttentionOptions& terms, RingExchange& ring) {
  torch::NoGradGuard no_grad;
  const RingLayouts layouts = check_ring_call(q, k, terms, ring);
  const int64_t n = ring.ranks(), rank = ring.rank();
  auto out = torch::zeros(q.sizes(), q.options().dtype(torch::kFloat));
  auto lse = torch::full({q.size(0), q.size(1), q.size(2)}, -kInf, q.options().dtype(torch::kFloat));
  // K and V travel as one message: (2, B, Hkv, Tlocal, D).
  auto kv = torch::stack({k, v}).contiguous();
  for (int64_t step = 0; step < n; ++step) {
    const int64_t source = ((rank - step) % n + n) % n;  // whose block this rank holds now
    torch::Tensor next;
    std::function<void()> arrived;
    if (step + 1 < n) {
      next = torch::empty_like(kv);
      arrived = ring.pass(kv, next, 0);  // the next block travels while this one is computed
    }
    for (const auto& pair : visible_pairs(layouts, rank, source, terms)) {
      const int64_t rows = layouts.queries.chunk, keys = layouts.keys.chunk;
      const auto part = tiled_attention_forward(q.narrow(2, pair.query_offset, rows),
                                                kv[0].narrow(2, pair.key_offset, keys),
                                                kv[1].narrow(2, pair.key_offset, keys), at_pair(terms, pair, layouts));
      merge(out.narrow(2, pair.query_offset, rows), lse.narrow(2, pair.query_offset, rows), part.out, part.lse);
    }
    if (arrived) {
      arrived();
      kv = next;
    }
  }
  return {out.to(q.scalar_type()), lse};
}

TiledAttentionGradients ring_attention_backward(const torch::Tensor& d_out, const torch::Tensor& q,
                                                const torch::Tensor& k, const torch::Tensor& v,
                                                const torch::Tensor& out, const torch::Tensor& lse,
                                                const TiledAttentionOptions& terms, RingExchange& ring) {
  torch::NoGradGuard no_grad;
  const RingLayouts layouts = check_ring_call(q, k, terms, ring);
  TORCH_CHECK(d_out.sizes() == q.sizes() && out.sizes() == q.sizes(), "ring_attention_backward: d_out ",
              d_out.sizes(), " and out ", out.sizes(), " must have q's shape ", q.sizes());
  const int64_t n = ring.ranks(), rank = ring.rank();
  const bool relative = terms.position_bias() == TiledPositionBias::kRelative;
  auto dq = torch::zeros(q.sizes(), q.options().dtype(torch::kFloat));
  torch::Tensor d_table = relative ? torch::zeros(terms.relative_table().sizes(), torch::kFloat) : torch::Tensor();
  auto kv = torch::stack({k, v}).contiguous();
  // The gradient of the block held at each step, float32, travelling one step behind it: the
  // block from `source` arrives with the sums of ranks source .. rank - 1.
  torch::Tensor dkv, dkv_incoming;
  std::function<void()> dkv_arrived;
  for (int64_t step = 0; step < n; ++step) {
    const int64_t source = ((rank - step) % n + n) % n;
    torch::Tensor next;
    std::function<void()> kv_arrived;
    if (step + 1 < n) {
      next = torch::empty_like(kv);
      kv_arrived = ring.pass(kv, next, 0);
    }
    auto contribution = torch::zeros(kv.sizes(), kv.options().dtype(torch::kFloat));
    for (const auto& pair : visible_pairs(layouts, rank, source, terms)) {
      const auto rows = [&](const torch::Tensor& t) { return t.narrow(2, pair.query_offset, layouts.queries.chunk); };
      const auto keys = [&](const torch::Tensor& t) { return t.narrow(2, pair.key_offset, layouts.keys.chunk); };
      const auto g = tiled_attention_backward(rows(d_out), rows(q), keys(kv[0]), keys(kv[1]), rows(out),
                                              lse.narrow(2, pair.query_offset, layouts.queries.chunk), at_pair(terms, pair, layouts));
      rows(dq).add_(g.dq);
      keys(contribution[0]).add_(g.dk);
      keys(contribution[1]).add_(g.dv);
      if (relative) d_table.add_(g.relative_table);
    }
    if (dkv_arrived) {
      dkv_arrived();
      dkv = dkv_incoming.add_(contribution);
    } else {
      dkv = contribution;
    }
    // On to the next rank; the N-th pass brings each block's sums home.
    dkv_incoming = torch::empty_like(dkv);
    dkv_arrived = n > 1 ? ring.pass(dkv, dkv_incoming, 1) : std::function<void()>();
    if (kv_arrived) {
      kv_arrived();
      kv = next;
    }
  }
  if (dkv_arrived) {
    dkv_arrived();
    dkv = dkv_incoming;
  }
  TiledAttentionGradients grads;
  grads.dq = dq.to(q.scalar_type());
  grads.dk = dkv[0].to(k.scalar_type());
  grads.dv = dkv[1].to(v.scalar_type());
  if (relative) grads.relative_table = d_table.to(terms.relative_table().scalar_type());
  return grads;
}

namespace {

// The ring, kept by the autograd context until the backward (saved_data holds IValues).
struct RingHolder : torch::CustomClassHolder {
  explicit RingHolder(std::shared_ptr<RingExchange> ring) : ring(std::move(ring)) {}
  std::shared_ptr<RingExchange> ring;
};

class RingAttentionFunction : public torch::autograd::Function<RingAttentionFunction> {
 public:
  // `table` is terms.relative_table() passed apart so that autograd sees it (an empty
  // placeholder unless kRelative).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& table, const TiledAttentionOptions& terms,
                               const std::shared_ptr<RingExchange>& ring) {
    auto result = ring_attention_forward(q, k, v, terms, *ring);
    ctx->save_for_backward({q, k, v, table, result.out, result.lse});
    auto& saved = ctx->saved_data;
    saved["ring"] = c10::IValue::make_capsule(c10::make_intrusive<RingHolder>(ring));
    saved["scale"] = terms.scale();
    saved["causal"] = terms.causal();
    saved["window"] = terms.window();
    saved["position_bias"] = static_cast<int64_t>(terms.position_bias());
    saved["alibi_slopes"] = terms.alibi_slopes();
    saved["key_padding_mask"] = terms.key_padding_mask();
    saved["relative_bidirectional"] = terms.relative_bidirectional();
    saved["relative_max_distance"] = terms.relative_max_distance();
    saved["dropout"] = terms.dropout();
    saved["dropout_seed"] = terms.dropout_seed().value_or(0);
    return result.out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_outputs) {
    const auto saved_tensors = ctx->get_saved_variables();
    const auto& saved = ctx->saved_data;
    auto ring = c10::static_intrusive_pointer_cast<RingHolder>(saved.at("ring").toCapsule())->ring;
    const auto terms = TiledAttentionOptions()
                           .scale(saved.at("scale").toDouble())
                           .causal(saved.at("causal").toBool())
                           .window(saved.at("window").toInt())
                           .position_bias(static_cast<TiledPositionBias>(saved.at("position_bias").toInt()))
                           .alibi_slopes(saved.at("alibi_slopes").toTensor())
                           .key_padding_mask(saved.at("key_padding_mask").toTensor())
                           .relative_table(saved_tensors[3])
                           .relative_bidirectional(saved.at("relative_bidirectional").toBool())
                           .relative_max_distance(saved.at("relative_max_distance").toInt())
                           .dropout(saved.at("dropout").toDouble())
                           .dropout_seed(saved.at("dropout_seed").toInt());
    // Every rank passes the ring even when its output got no gradient: the others wait on it.
    auto d_out = grad_outputs[0].defined() ? grad_outputs[0] : torch::zeros_like(saved_tensors[4]);
    auto g = ring_attention_backward(d_out, saved_tensors[0], saved_tensors[1], saved_tensors[2], saved_tensors[4],
                                     saved_tensors[5], terms, *ring);
    return {g.dq, g.dk, g.dv, g.relative_table, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const TiledAttentionOptions& terms, const std::shared_ptr<RingExchange>& ring) {
  TORCH_CHECK(ring != nullptr, "ring_attention: no ring");
  const auto table = differentiated_table(terms);
  if (terms.dropout() == 0.0 || terms.dropout_seed()) return RingAttentionFunction::apply(q, k, v, table, terms, ring);
  const int64_t seed = draw_dropout_seed();
  check_same_seed(seed, *ring);
  return RingAttentionFunction::apply(q, k, v, table, TiledAttentionOptions(terms).dropout_seed(seed), ring);
}

}  // namespace zoo
