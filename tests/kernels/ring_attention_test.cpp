#include "kernels/ring_attention.h"

#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/masks.h"
#include "kernels/thread_ring.h"
#include "layers/position_bias.h"

namespace zoo {
namespace {

using testing::Mailboxes;
using testing::ThreadRing;

struct Case {
  int64_t ranks = 2, chunk = 37;  // tokens = 2 * ranks * chunk
  int64_t batch = 2, heads = 4, kv_heads = 4, head_dim = 16;
  bool causal = true;
  int64_t window = 0;
  TiledPositionBias position = TiledPositionBias::kNone;
  bool bidirectional = true;
  torch::ScalarType dtype = torch::kFloat;
  double dropout = 0.0;  // with seed 1234
  // Key padding: the last `padded` keys of batch row 1 are padding (a whole chunk, or more).
  int64_t padded = 0;
  // Cross-attention: keys from another sequence, cut into chunks of key_chunk (0: self-attention).
  int64_t key_chunk = 0;

  int64_t tokens() const { return 2 * ranks * chunk; }
  int64_t keys() const { return 2 * ranks * (key_chunk > 0 ? key_chunk : chunk); }
  std::string name() const {
    const char* kinds[] = {"none", "alibi", "t5"};
    return c10::str(ranks, " ranks, T ", tokens(), " (chunk ", chunk, "), H ", heads, "/", kv_heads,
                    causal ? " causal" : "", window ? c10::str(" window ", window) : "", " position ",
                    kinds[static_cast<int>(position)], bidirectional ? "" : " (causal buckets)",
                    padded ? c10::str(" padding ", padded) : "", key_chunk ? c10::str(" cross to ", keys(), " keys") : "",
                    dtype == torch::kBFloat16 ? " bf16" : " fp32", dropout > 0 ? c10::str(" dropout ", dropout) : "");
  }
};

struct Inputs {
  torch::Tensor q, k, v, d_out, slopes, table, key_padding_mask;
};

Inputs make_inputs(const Case& c) {
  torch::manual_seed(c.tokens() * 10 + c.heads + c.ranks);
  Inputs in;
  in.q = torch::randn({c.batch, c.heads, c.tokens(), c.head_dim}).to(c.dtype);
  in.k = torch::randn({c.batch, c.kv_heads, c.keys(), c.head_dim}).to(c.dtype);
  in.v = torch::randn({c.batch, c.kv_heads, c.keys(), c.head_dim}).to(c.dtype);
  in.d_out = torch::randn({c.batch, c.heads, c.tokens(), c.head_dim}).to(c.dtype);
  in.slopes = AlibiBias(AlibiBiasOptions(c.heads))->slopes();
  in.table = torch::randn({32, c.heads});
  if (c.padded > 0) {
    in.key_padding_mask = torch::ones({c.batch, c.keys()}, torch::kBool);
    in.key_padding_mask[1].narrow(0, c.keys() - c.padded, c.padded).fill_(false);
  }
  return in;
}

TiledAttentionOptions make_terms(const Case& c, const Inputs& in, const torch::Tensor& table) {
  const auto& slopes = in.slopes;
  auto o = TiledAttentionOptions()
               .key_padding_mask(in.key_padding_mask)
               .causal(c.causal)
               .window(c.window)
               .position_bias(c.position)
               .relative_bidirectional(c.bidirectional)
               .relative_max_distance(64);
  if (c.dropout > 0) o.dropout(c.dropout).dropout_seed(1234);
  switch (c.position) {
    case TiledPositionBias::kNone:
      break;
    case TiledPositionBias::kAlibi:
      o.alibi_slopes(slopes);
      break;
    case TiledPositionBias::kRelative:
      o.relative_table(table);
      break;
  }
  return o;
}

struct Outputs {
  torch::Tensor out, lse, dq, dk, dv, d_table;
};

// One process over the whole sequence, the explicit way: the (T, T) bias from zoo's masks and
// position modules, a float32 softmax, autograd for the gradients.
Outputs single_process(const Case& c, const Inputs& in) {
  auto q = in.q.to(torch::kFloat).clone().requires_grad_();
  auto k = in.k.to(torch::kFloat).clone().requires_grad_();
  auto v = in.v.to(torch::kFloat).clone().requires_grad_();
  const int64_t group = c.heads / c.kv_heads, t = c.tokens(), tk = c.keys();
  auto scores = torch::matmul(q, k.repeat_interleave(group, 1).transpose(-2, -1)) /
                std::sqrt(static_cast<double>(c.head_dim));
  RelativePositionBias relative{
      RelativePositionBiasOptions(c.heads).num_buckets(32).max_distance(64).bidirectional(c.bidirectional)};
  switch (c.position) {
    case TiledPositionBias::kNone:
      break;
    case TiledPositionBias::kAlibi:
      scores = scores + AlibiBias(AlibiBiasOptions(c.heads))->forward(t, tk, 0, 0);
      break;
    case TiledPositionBias::kRelative:
      relative->relative_attention_bias->weight.detach().copy_(in.table);
      scores = scores + relative->forward(t, tk, 0, 0);
      break;
  }
  if (c.causal) scores = scores.masked_fill(causal_mask(t, tk, 0, 0, c.window).logical_not(), -INFINITY);
  if (c.padded > 0) scores = scores.masked_fill(in.key_padding_mask.logical_not().view({c.batch, 1, 1, tk}), -INFINITY);
  Outputs r;
  auto weights = torch::softmax(scores, -1);
  if (c.dropout > 0) {
    // The whole sequence's mask of the seed, as tiled_dropout_keep_mask lays it out.
    const auto keep = tiled_dropout_keep_mask(1234, c.dropout, c.batch, c.heads, t, tk);
    weights = weights * keep.to(torch::kFloat) / (1.0 - c.dropout);
  }
  r.out = torch::matmul(weights, v.repeat_interleave(group, 1));
  r.lse = scores.logsumexp(-1).detach();
  (r.out * in.d_out.to(torch::kFloat)).sum().backward();
  r.out = r.out.detach();
  r.dq = q.grad();
  r.dk = k.grad();
  r.dv = v.grad();
  if (c.position == TiledPositionBias::kRelative) r.d_table = relative->relative_attention_bias->weight.grad();
  return r;
}

// Every rank as a thread: its zigzag slice through ring_attention and backward, then the slices
// put back in global order (the table gradient summed over ranks, as the trainer's reduce does).
Outputs ring(const Case& c, const Inputs& in, int64_t* messages = nullptr) {
  const auto layout = ZigzagLayout::of(c.tokens(), c.ranks), key_layout = ZigzagLayout::of(c.keys(), c.ranks);
  Mailboxes boxes(c.ranks);
  std::vector<Outputs> per_rank(c.ranks);
  testing::on_every_rank(boxes, [&](int64_t rank, const std::shared_ptr<ThreadRing>& exchange) {
    auto local = [&](const torch::Tensor& x) { return zigzag_split(x, 2, layout, rank).contiguous(); };
    auto local_keys = [&](const torch::Tensor& x) { return zigzag_split(x, 2, key_layout, rank).contiguous(); };
    auto q = local(in.q).requires_grad_();
    auto k = local_keys(in.k).requires_grad_(), v = local_keys(in.v).requires_grad_();
    auto table = in.table.clone().requires_grad_();
    const auto terms = make_terms(c, in, table);
    auto& r = per_rank[rank];
    r.out = ring_attention(q, k, v, terms, exchange);
    (r.out * local(in.d_out)).sum().backward();
    r.out = r.out.detach();
    r.lse = ring_attention_forward(q.detach(), k.detach(), v.detach(), terms, *exchange).lse;
    r.dq = q.grad(), r.dk = k.grad(), r.dv = v.grad();
    if (c.position == TiledPositionBias::kRelative) r.d_table = table.grad();
  });
  if (messages != nullptr) *messages = boxes.messages();
  Outputs all;
  auto gather = [&](auto field, const ZigzagLayout& cut) {
    std::vector<torch::Tensor> parts;
    std::vector<torch::Tensor> positions;
    for (int64_t rank = 0; rank < c.ranks; ++rank) {
      parts.push_back(per_rank[rank].*field);
      positions.push_back(zigzag_positions(cut, rank));
    }
    auto local = torch::cat(parts, 2);
    return torch::empty_like(local).index_copy_(2, torch::cat(positions), local);
  };
  all.out = gather(&Outputs::out, layout);
  all.lse = gather(&Outputs::lse, layout);
  all.dq = gather(&Outputs::dq, layout);
  all.dk = gather(&Outputs::dk, key_layout);
  all.dv = gather(&Outputs::dv, key_layout);
  if (c.position == TiledPositionBias::kRelative) {
    all.d_table = torch::zeros_like(in.table);
    for (const auto& r : per_rank) all.d_table += r.d_table;
  }
  return all;
}

// max |a - ref| / max(max |ref|, 1), in float64 (as tests/kernels/tiled_attention_test.cpp).
double relative_error(const torch::Tensor& a, const torch::Tensor& ref) {
  EXPECT_EQ(a.sizes(), ref.sizes());
  if (a.sizes() != ref.sizes()) return INFINITY;
  auto x = a.to(torch::kDouble), y = ref.to(torch::kDouble);
  EXPECT_FALSE(x.isnan().any().item<bool>()) << "NaN in the ring's result";
  return (x - y).abs().max().item<double>() / std::max(y.abs().max().item<double>(), 1.0);
}

void expect_matches_single_process(const Case& c) {
  SCOPED_TRACE(c.name());
  const auto in = make_inputs(c);
  const auto ref = single_process(c, in);
  const auto got = ring(c, in);
  // float32 agrees to rounding; bfloat16 carries 8 bits of mantissa (the tolerances).
  const double tolerance = c.dtype == torch::kFloat ? 1e-5 : 5e-2;
  EXPECT_LE(relative_error(got.out, ref.out), tolerance) << "output";
  EXPECT_LE(relative_error(got.lse, ref.lse), tolerance) << "log-sum-exp";
  EXPECT_LE(relative_error(got.dq, ref.dq), tolerance) << "dq";
  EXPECT_LE(relative_error(got.dk, ref.dk), tolerance) << "dk";
  EXPECT_LE(relative_error(got.dv, ref.dv), tolerance) << "dv";
  if (c.position == TiledPositionBias::kRelative) {
    EXPECT_LE(relative_error(got.d_table, ref.d_table), tolerance) << "T5 table";
  }
}

TEST(ZigzagLayout, RankRHoldsChunksRAnd2NMinus1MinusR) {
  // 4 ranks, 16 tokens: chunks of 2; rank 1 holds chunks 1 and 6.
  const auto layout = ZigzagLayout::of(16, 4);
  EXPECT_EQ(layout.chunk, 2);
  EXPECT_TRUE(torch::equal(zigzag_positions(layout, 1), torch::tensor({2, 3, 12, 13}, torch::kLong)));
  EXPECT_TRUE(torch::equal(zigzag_positions(layout, 3), torch::tensor({6, 7, 8, 9}, torch::kLong)));
  const auto x = torch::arange(16).view({1, 16});
  EXPECT_TRUE(torch::equal(zigzag_split(x, 1, layout, 0), torch::tensor({{0, 1, 14, 15}}, torch::kLong)));
  // Every position is held by exactly one rank.
  std::vector<torch::Tensor> all;
  for (int64_t r = 0; r < 4; ++r) all.push_back(zigzag_positions(layout, r));
  EXPECT_TRUE(torch::equal(std::get<0>(torch::cat(all).sort()), torch::arange(16)));
  try {
    ZigzagLayout::of(30, 4);
    ADD_FAILURE() << "30 tokens over 4 ranks were accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("30 tokens cannot be cut into 2 x 4 = 8 equal chunks"), std::string::npos)
        << e.what();
  }
}

TEST(RingAttention, CausalOnTwoAndFourRanks) {
  for (int64_t ranks : {2, 4}) {
    for (int64_t chunk : {37, 100}) {  // within one tile, and across tiles (64 queries, 128 keys)
      Case c;
      c.ranks = ranks, c.chunk = chunk;
      expect_matches_single_process(c);
    }
  }
}

TEST(RingAttention, BidirectionalAsInEncoders) {
  for (int64_t ranks : {2, 4}) {
    Case c;
    c.ranks = ranks, c.causal = false;
    expect_matches_single_process(c);
  }
}

TEST(RingAttention, EncoderKeyPaddingOfTheWholeSequence) {
  // Row 1's padding covers its last chunk and part of the one before: a pair whose keys are all
  // padding adds nothing; with causal attention too (a decoder of padded examples).
  for (int64_t ranks : {2, 4}) {
    for (bool causal : {false, true}) {
      Case c;
      c.ranks = ranks, c.causal = causal, c.padded = 53;
      c.position = ranks == 2 ? TiledPositionBias::kRelative : TiledPositionBias::kAlibi;
      expect_matches_single_process(c);
    }
  }
}

TEST(RingAttention, CrossAttentionToAnotherSequenceCutOverTheRing) {
  // A decoder's queries (chunks of 37) against an encoder's padded keys (chunks of 23, and of 70:
  // fewer and more keys than queries), with dropout in the (queries, keys) index space.
  for (int64_t ranks : {2, 4}) {
    for (int64_t key_chunk : {23, 70}) {
      Case c;
      c.ranks = ranks, c.causal = false, c.key_chunk = key_chunk, c.padded = key_chunk + 5;
      c.dropout = ranks == 2 ? 0.2 : 0.0;
      c.kv_heads = 2;
      expect_matches_single_process(c);
    }
  }
}

TEST(RingAttention, PositionTermsUseGlobalPositions) {
  for (int64_t ranks : {2, 4}) {
    for (auto position : {TiledPositionBias::kAlibi, TiledPositionBias::kRelative}) {
      for (bool causal : {true, false}) {
        Case c;
        c.ranks = ranks, c.position = position, c.causal = causal, c.bidirectional = !causal;
        expect_matches_single_process(c);
      }
    }
  }
}

TEST(RingAttention, SlidingWindowAcrossChunks) {
  // Windows shorter than a chunk (pairs skipped), across one chunk edge, and past several.
  for (int64_t window : {20, 50, 130}) {
    Case c;
    c.ranks = 4, c.window = window;
    expect_matches_single_process(c);
  }
}

TEST(RingAttention, GroupedQueriesAndBfloat16) {
  Case c;
  c.ranks = 4, c.heads = 4, c.kv_heads = 2, c.position = TiledPositionBias::kAlibi;
  expect_matches_single_process(c);
  c.kv_heads = 1;
  c.dtype = torch::kBFloat16;
  expect_matches_single_process(c);
}

// Attention dropout: each weight drawn at its global positions, so N ranks drop exactly the
// weights one process drops with the same seed (the mask is tiled_dropout_keep_mask's, over the
// whole sequence); the backward redraws it.
TEST(RingAttention, DropoutDropsTheWeightsOneProcessDrops) {
  Case c;
  c.dropout = 0.2;
  for (const int64_t ranks : {int64_t{2}, int64_t{4}}) {
    c.ranks = ranks;
    expect_matches_single_process(c);
  }
  c.ranks = 4, c.kv_heads = 2, c.position = TiledPositionBias::kAlibi, c.window = 50;
  expect_matches_single_process(c);
  c.ranks = 2, c.kv_heads = 4, c.window = 0, c.causal = false, c.position = TiledPositionBias::kRelative;
  expect_matches_single_process(c);
}

// Ranks whose generators differ would drop different masks: without a seed, each rank draws one
// and the ring compares them, naming both ranks. (The test's threads share one generator, so
// their draws differ.)
TEST(RingAttention, RanksThatDrawDifferentDropoutSeedsAreNamed) {
  Case c;
  const auto in = make_inputs(c);
  const auto layout = ZigzagLayout::of(c.tokens(), c.ranks), key_layout = ZigzagLayout::of(c.keys(), c.ranks);
  Mailboxes boxes(c.ranks);
  std::vector<std::string> errors(c.ranks);
  std::vector<std::thread> threads;
  for (int64_t rank = 0; rank < c.ranks; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto local = [&](const torch::Tensor& x) { return zigzag_split(x, 2, layout, rank).contiguous(); };
        ring_attention(local(in.q), local(in.k), local(in.v), TiledAttentionOptions().causal(true).dropout(0.1),
                       std::make_shared<ThreadRing>(boxes, rank));
      } catch (const c10::Error& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int64_t rank = 0; rank < c.ranks; ++rank) {
    const std::string want = c10::str("ring_attention: rank ", rank, " drew dropout seed ");
    EXPECT_NE(errors[rank].find(want), std::string::npos) << errors[rank];
    EXPECT_NE(errors[rank].find(c10::str("and rank ", (rank + c.ranks - 1) % c.ranks, " drew ")), std::string::npos) << errors[rank];
    EXPECT_NE(errors[rank].find("seed every rank alike"), std::string::npos) << errors[rank];
  }
}

TEST(RingAttention, OneRankIsTheTiledKernel) {
  Case c;
  c.ranks = 1, c.chunk = 50, c.position = TiledPositionBias::kRelative;
  expect_matches_single_process(c);
}

TEST(RingAttention, BlocksAndGradientsEachGoRoundOnce) {
  // Forward: N - 1 passes of K/V per rank; backward: N - 1 again plus N of dK/dV; the test's
  // extra lse forward: N - 1 more.
  Case c;
  c.ranks = 4;
  int64_t messages = 0;
  ring(c, make_inputs(c), &messages);
  EXPECT_EQ(messages, c.ranks * ((c.ranks - 1) * 3 + c.ranks));
}

TEST(RingAttention, RefusesWhatItCannotComputeExactly) {
  Mailboxes boxes(1);
  auto exchange = std::make_shared<ThreadRing>(boxes, 0);
  const auto x = torch::randn({1, 2, 8, 4});
  auto expect_error = [&](const TiledAttentionOptions& terms, const torch::Tensor& q, const std::string& words) {
    try {
      ring_attention(q, x, x, terms, exchange);
      ADD_FAILURE() << "accepted; expected an error with: " << words;
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_error(TiledAttentionOptions().dropout(0.1).dropout_seed(1).dropout_keys(64), x,
               "the dropout mask's positions come from the zigzag layout");
  expect_error(TiledAttentionOptions().key_padding_mask(torch::ones({1, 4}, torch::kBool)), x,
               "the key padding mask covers the whole sequence's keys in global order, (1, 8)");
  expect_error(TiledAttentionOptions().causal(true), torch::randn({1, 2, 6, 4}),
               "causal attention needs q and k to hold the same local tokens");
  expect_error(TiledAttentionOptions().query_start(3), x, "query_start and key_start must be 0");
  expect_error(TiledAttentionOptions(), torch::randn({1, 2, 5, 4}), "two chunks of equal length");
}

}  // namespace
}  // namespace zoo
