#include "kernels/tiled_attention.h"

#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/masks.h"
#include "layers/position_bias.h"

namespace zoo {
namespace {

// One attention problem: shapes, masks and position term.
struct Case {
  int64_t batch = 2, heads = 4, kv_heads = 4, queries = 65, keys = 65, head_dim = 16;
  int64_t query_start = 0, key_start = 0;
  bool causal = false;
  int64_t window = 0;
  bool padding = false;          // random key padding (about a third of the keys)
  bool padded_sequence = false;  // the last sequence of the batch is all padding
  TiledPositionBias position = TiledPositionBias::kNone;
  bool bidirectional = true;  // T5's bucketing
  torch::ScalarType dtype = torch::kFloat;
  double dropout = 0.0;  // with a fixed mask seed, the same mask on both paths
  double softcap = 0.0;  // cap * tanh(score / cap) of the scaled scores (Gemma 2)

  std::string name() const {
    return c10::str("B", batch, " H", heads, "/", kv_heads, " Tq", queries, " Tk", keys, " D", head_dim, " q@",
                    query_start, " k@", key_start, causal ? " causal" : "", window ? c10::str(" window ", window) : "",
                    padding ? " padding" : "", padded_sequence ? " padded-sequence" : "", position_name(),
                    dtype == torch::kBFloat16 ? " bf16" : " fp32", dropout > 0 ? c10::str(" dropout ", dropout) : "",
                    softcap > 0 ? c10::str(" softcap ", softcap) : "");
  }
  const char* position_name() const {
    switch (position) {
      case TiledPositionBias::kNone:
        return "";
      case TiledPositionBias::kAlibi:
        return " alibi";
      case TiledPositionBias::kRelative:
        return bidirectional ? " t5-bidirectional" : " t5-causal";
    }
    return "";
  }
};

constexpr int64_t kDropoutSeed = 20261126;

struct Inputs {
  torch::Tensor q, k, v, d_out, mask, slopes, table;
};

Inputs make_inputs(const Case& c) {
  torch::manual_seed(c.queries * 1000 + c.keys + c.heads * 7 + c.kv_heads);
  Inputs in;
  in.q = torch::randn({c.batch, c.heads, c.queries, c.head_dim}).to(c.dtype);
  in.k = torch::randn({c.batch, c.kv_heads, c.keys, c.head_dim}).to(c.dtype);
  in.v = torch::randn({c.batch, c.kv_heads, c.keys, c.head_dim}).to(c.dtype);
  // A fresh gradient, not one with the output's strides.
  in.d_out = torch::randn({c.batch, c.heads, c.queries, c.head_dim}).to(c.dtype);
  if (c.padding || c.padded_sequence) {
    in.mask = c.padding ? torch::rand({c.batch, c.keys}) > 0.33 : torch::ones({c.batch, c.keys}, torch::kBool);
    if (c.padded_sequence) in.mask[c.batch - 1].fill_(false);
  }
  in.slopes = AlibiBias(AlibiBiasOptions(c.heads))->slopes();
  in.table = torch::randn({32, c.heads});
  return in;
}

TiledAttentionOptions make_options(const Case& c, const Inputs& in) {
  auto o = TiledAttentionOptions()
               .causal(c.causal)
               .window(c.window)
               .query_start(c.query_start)
               .key_start(c.key_start)
               .key_padding_mask(in.mask)
               .position_bias(c.position)
               .relative_bidirectional(c.bidirectional)
               .relative_max_distance(64)
               .dropout(c.dropout)
               .dropout_seed(kDropoutSeed)
               .softcap(c.softcap);
  switch (c.position) {
    case TiledPositionBias::kNone:
      break;
    case TiledPositionBias::kAlibi:
      o.alibi_slopes(in.slopes);
      break;
    case TiledPositionBias::kRelative:
      o.relative_table(in.table);
      break;
  }
  return o;
}

struct Outputs {
  torch::Tensor out, lse, dq, dk, dv, d_table;
};

// The plain reference: the full (Tq, Tk) bias from zoo's own masks and position modules, a
// float32 softmax and two matmuls, differentiated by autograd. Rows with no visible key are
// zeroed (mask_to_bias's finite bias would give them a uniform softmax instead).
Outputs math_path(const Case& c, const Inputs& in) {
  auto q = in.q.to(torch::kFloat).clone().requires_grad_();
  auto k = in.k.to(torch::kFloat).clone().requires_grad_();
  auto v = in.v.to(torch::kFloat).clone().requires_grad_();
  const int64_t group = c.heads / c.kv_heads;
  auto kr = k.repeat_interleave(group, 1), vr = v.repeat_interleave(group, 1);
  auto scores = torch::matmul(q, kr.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  if (c.softcap > 0) scores = torch::tanh(scores / c.softcap) * c.softcap;  // before the position term, as Gemma 2
  RelativePositionBias relative{RelativePositionBiasOptions(c.heads).num_buckets(32).max_distance(64).bidirectional(
      c.bidirectional)};
  switch (c.position) {
    case TiledPositionBias::kNone:
      break;
    case TiledPositionBias::kAlibi: {
      AlibiBias alibi{AlibiBiasOptions(c.heads)};
      scores = scores + alibi->forward(c.queries, c.keys, c.query_start, c.key_start);
      break;
    }
    case TiledPositionBias::kRelative:
      relative->relative_attention_bias->weight.detach().copy_(in.table);
      scores = scores + relative->forward(c.queries, c.keys, c.query_start, c.key_start);
      break;
  }
  torch::Tensor allowed;
  if (c.causal) allowed = causal_mask(c.queries, c.keys, c.query_start, c.key_start, c.window);
  else if (c.window > 0) allowed = band_mask(c.queries, c.keys, c.query_start, c.key_start, c.window);
  if (in.mask.defined()) allowed = allowed.defined() ? allowed & padding_mask(in.mask) : padding_mask(in.mask);
  // Dropout after the softmax, with the mask the kernel draws, built whole.
  auto dropped = [&](const torch::Tensor& probs) {
    if (c.dropout == 0.0) return probs;
    // Drawn at absolute positions: the call's block of a mask from position 0.
    const auto keep = tiled_dropout_keep_mask(kDropoutSeed, c.dropout, c.batch, c.heads, c.query_start + c.queries,
                                              c.key_start + c.keys)
                          .narrow(2, c.query_start, c.queries)
                          .narrow(3, c.key_start, c.keys);
    return probs * keep / (1.0 - c.dropout);
  };
  Outputs r;
  if (allowed.defined()) {
    auto probs = torch::softmax(scores + mask_to_bias(allowed, torch::kFloat), -1);
    auto any = allowed.any(-1, /*keepdim=*/true);  // (B or 1, 1, Tq, 1)
    r.out = torch::matmul(dropped(probs), vr) * any;
    r.lse = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity()).logsumexp(-1);
  } else {
    r.out = torch::matmul(dropped(torch::softmax(scores, -1)), vr);
    r.lse = scores.logsumexp(-1);
  }
  (r.out * in.d_out.to(torch::kFloat)).sum().backward();
  r.out = r.out.detach();
  r.lse = r.lse.detach().expand({c.batch, c.heads, c.queries}).contiguous();
  r.dq = q.grad();
  r.dk = k.grad();
  r.dv = v.grad();
  if (c.position == TiledPositionBias::kRelative) r.d_table = relative->relative_attention_bias->weight.grad();
  return r;
}

Outputs tiled_path(const Case& c, const Inputs& in) {
  Outputs r;
  auto q = in.q.clone().requires_grad_(), k = in.k.clone().requires_grad_(), v = in.v.clone().requires_grad_();
  auto table = in.table.clone().requires_grad_();
  Inputs with_table = in;
  with_table.table = table;
  const auto options = make_options(c, with_table);
  r.out = tiled_attention(q, k, v, options);
  (r.out * in.d_out).sum().backward();
  r.out = r.out.detach();
  r.lse = tiled_attention_forward(in.q, in.k, in.v, options).lse;
  r.dq = q.grad();
  r.dk = k.grad();
  r.dv = v.grad();
  if (c.position == TiledPositionBias::kRelative) r.d_table = table.grad();
  return r;
}

// max |a - ref| / max |ref|, in float64. The inputs are standard normal: a reference that cancels
// to 0 (dq with a single visible key) is measured against 1, the size of its terms.
double relative_error(const torch::Tensor& a, const torch::Tensor& ref) {
  EXPECT_EQ(a.sizes(), ref.sizes());
  if (a.sizes() != ref.sizes()) return INFINITY;
  auto x = a.to(torch::kDouble), y = ref.to(torch::kDouble);
  EXPECT_FALSE(x.isnan().any().item<bool>()) << "NaN in the tiled result";
  const double scale = std::max(y.abs().max().item<double>(), 1.0);
  return (x - y).abs().max().item<double>() / scale;
}

// Rows with no visible key: lse -inf in both; the others compared as above.
double lse_error(const torch::Tensor& a, const torch::Tensor& ref) {
  auto empty = ref.isinf();
  EXPECT_TRUE(torch::equal(a.isinf(), empty)) << "rows with no visible key differ";
  if (empty.all().item<bool>()) return 0;
  return relative_error(a.masked_fill(empty, 0), ref.masked_fill(empty, 0));
}

// Compares the tiled kernel with the math path: output, log-sum-exp, and the gradients of q,
// k, v and the T5 table, each within `tolerance` of the reference's largest magnitude.
void expect_matches_math_path(const Case& c) {
  SCOPED_TRACE(c.name());
  const auto in = make_inputs(c);
  const auto ref = math_path(c, in);
  const auto got = tiled_path(c, in);
  // float32 agrees to rounding; bfloat16 inputs and outputs carry 8 bits of mantissa.
  const double tolerance = c.dtype == torch::kFloat ? 1e-5 : 5e-2;
  EXPECT_EQ(got.out.scalar_type(), c.dtype);
  EXPECT_EQ(got.dk.sizes(), in.k.sizes());
  const double e_out = relative_error(got.out, ref.out), e_lse = lse_error(got.lse, ref.lse);
  const double e_dq = relative_error(got.dq, ref.dq), e_dk = relative_error(got.dk, ref.dk);
  const double e_dv = relative_error(got.dv, ref.dv);
  const double e_table = ref.d_table.defined() ? relative_error(got.d_table, ref.d_table) : 0.0;
  EXPECT_LE(e_out, tolerance);
  EXPECT_LE(e_lse, tolerance);
  EXPECT_LE(e_dq, tolerance);
  EXPECT_LE(e_dk, tolerance);
  EXPECT_LE(e_dv, tolerance);
  EXPECT_LE(e_table, tolerance);
  std::printf("  %-70s out %.1e lse %.1e dq %.1e dk %.1e dv %.1e table %.1e\n", c.name().c_str(), e_out, e_lse, e_dq,
              e_dk, e_dv, e_table);
}

// The mask combinations: none, causal, causal + window and a two-sided window (ModernBERT's),
// each narrower and wider than a query block, and each of those with padding.
std::vector<Case> mask_combinations(Case base) {
  std::vector<Case> cases;
  for (bool padding : {false, true}) {
    for (auto [causal, window] : std::vector<std::pair<bool, int64_t>>{
             {false, 0}, {true, 0}, {true, 17}, {true, 70}, {false, 17}, {false, 70}}) {
      Case c = base;
      c.padding = padding;
      c.causal = causal;
      c.window = window;
      cases.push_back(c);
    }
  }
  return cases;
}

TEST(TiledAttention, MatchesMathPathOnBlockEdgesForEveryMask) {
  for (int64_t t : {1, 63, 64, 65, 127, 128, 129, 200}) {
    Case base;
    base.queries = base.keys = t;
    for (const auto& c : mask_combinations(base)) expect_matches_math_path(c);
  }
}

// Gemma 2's soft-capping inside the tiles, forward and backward (through 1 - tanh^2), with every
// mask, a cache before the queries, grouped heads, ALiBi, dropout and bf16: a cap of 1.5 bends
// these unit-variance scores.
TEST(TiledAttention, SoftCappedScoresMatchTheMathPath) {
  for (int64_t t : {1, 65, 129}) {
    Case base;
    base.queries = base.keys = t;
    base.softcap = 1.5;
    for (const auto& c : mask_combinations(base)) expect_matches_math_path(c);
  }
  Case c;
  c.softcap = 1.5, c.causal = true, c.window = 17;
  c.queries = 5, c.keys = 150, c.key_start = 20, c.query_start = 165;
  expect_matches_math_path(c);
  c = Case{};
  c.softcap = 1.5, c.kv_heads = 2, c.causal = true, c.position = TiledPositionBias::kAlibi, c.dropout = 0.2;
  expect_matches_math_path(c);
  c.dtype = torch::kBFloat16, c.dropout = 0.0;
  expect_matches_math_path(c);
  // The cap changes the result: the same case uncapped differs.
  Case capped;
  capped.causal = true, capped.softcap = 1.5;
  Case uncapped = capped;
  uncapped.softcap = 0;
  const auto in = make_inputs(capped);
  EXPECT_GT((tiled_path(capped, in).out - tiled_path(uncapped, in).out).abs().max().item<double>(), 1e-2);
}

TEST(TiledAttention, QueriesAfterACacheOfKeys) {
  // Decoding with a cache: the queries are the last Tq positions; a sliding-window cache may
  // also have dropped its first keys (key_start > 0).
  for (int64_t tq : {1, 5, 65}) {
    for (int64_t key_start : {0, 20}) {
      Case base;
      base.queries = tq;
      base.keys = 150;
      base.key_start = key_start;
      base.query_start = key_start + base.keys - tq;
      for (const auto& c : mask_combinations(base)) {
        // Without a causal mask or position term the key positions change nothing.
        if (c.causal || key_start == 0) expect_matches_math_path(c);
      }
    }
  }
}

// zoo serve's scheduler runs the model under c10::InferenceMode, and a long prompt's chunk
// reaches this kernel with enough query blocks for a second thread, whose writes into the output
// (an inference tensor) once failed: "Inplace update to inference tensor outside InferenceMode".
TEST(TiledAttention, RunsUnderInferenceModeOnEveryThread) {
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  Case c;
  c.queries = 388, c.keys = 900, c.query_start = 512, c.causal = true;
  const auto in = make_inputs(c);
  const auto options = make_options(c, in);
  const auto expected = tiled_attention_forward(in.q, in.k, in.v, options).out;
  torch::Tensor got;
  try {
    c10::InferenceMode inference;
    got = tiled_attention_forward(in.q, in.k, in.v, options).out;
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  at::set_num_threads(threads);
  ASSERT_TRUE(got.defined());
  EXPECT_TRUE(torch::equal(got, expected));
}

TEST(TiledAttention, RowsWithNoVisibleKeyGiveZerosNotNaN) {
  // The last sequence is all padding; and, causal, queries before the first key see nothing.
  Case padded;
  padded.padded_sequence = true;
  padded.queries = padded.keys = 70;
  Case early;
  early.causal = true;
  early.queries = 80;
  early.keys = 70;
  early.key_start = 10;
  for (const Case& c : {padded, early}) {
    expect_matches_math_path(c);
    const auto in = make_inputs(c);
    const auto got = tiled_path(c, in);
    for (const auto& t : {got.out, got.lse, got.dq, got.dk, got.dv}) EXPECT_FALSE(t.isnan().any().item<bool>());
  }
  const auto in = make_inputs(padded);
  const auto got = tiled_path(padded, in);
  EXPECT_EQ(got.out[1].abs().max().item<float>(), 0.0f);
  EXPECT_EQ(got.dq[1].abs().max().item<float>(), 0.0f);
  EXPECT_EQ(got.dk[1].abs().max().item<float>(), 0.0f);
  EXPECT_TRUE(got.lse[1].isneginf().all().item<bool>());
  const auto in_early = make_inputs(early);
  const auto got_early = tiled_path(early, in_early);
  EXPECT_EQ(got_early.out.narrow(2, 0, 10).abs().max().item<float>(), 0.0f);
}

TEST(TiledAttention, GroupedQueryHeadsShareTheirKeyHead) {
  for (int64_t kv_heads : {2, 1}) {
    for (int64_t t : {65, 129}) {
      Case base;
      base.kv_heads = kv_heads;
      base.queries = base.keys = t;
      for (const auto& c : mask_combinations(base)) expect_matches_math_path(c);
    }
    Case offset;
    offset.kv_heads = kv_heads;
    offset.queries = 7;
    offset.keys = 140;
    offset.query_start = 133;
    offset.causal = true;
    offset.padding = true;
    expect_matches_math_path(offset);
  }
}

TEST(TiledAttention, AlibiMatchesZoosAlibiBias) {
  for (bool causal : {false, true}) {
    for (bool padding : {false, true}) {
      Case c;
      c.position = TiledPositionBias::kAlibi;
      c.queries = c.keys = 129;
      c.causal = causal;
      c.padding = padding;
      expect_matches_math_path(c);
    }
  }
  Case offset;
  offset.position = TiledPositionBias::kAlibi;
  offset.queries = 9;
  offset.keys = 150;
  offset.query_start = 141;
  offset.causal = true;
  offset.window = 40;
  offset.kv_heads = 2;
  expect_matches_math_path(offset);
}

TEST(TiledAttention, RelativeBiasAndItsTableGradientMatchT5) {
  // Encoder (bidirectional, padding) and decoder (one-sided, causal); 200 positions reach past
  // max_distance (64), where buckets saturate.
  for (int64_t t : {63, 129, 200}) {
    Case encoder;
    encoder.position = TiledPositionBias::kRelative;
    encoder.queries = encoder.keys = t;
    encoder.padding = true;
    expect_matches_math_path(encoder);
    Case decoder = encoder;
    decoder.bidirectional = false;
    decoder.padding = false;
    decoder.causal = true;
    expect_matches_math_path(decoder);
  }
  Case cross;  // cross-attention shape: other key length, no mask
  cross.position = TiledPositionBias::kRelative;
  cross.queries = 40;
  cross.keys = 150;
  expect_matches_math_path(cross);
  Case offset;
  offset.position = TiledPositionBias::kRelative;
  offset.bidirectional = false;
  offset.causal = true;
  offset.queries = 3;
  offset.keys = 131;
  offset.query_start = 128;
  expect_matches_math_path(offset);
}

TEST(TiledAttention, BFloat16AccumulatesInFloat32) {
  std::vector<Case> cases;
  for (const auto& c : mask_combinations([] {
         Case b;
         b.queries = b.keys = 129;
         return b;
       }())) {
    cases.push_back(c);
  }
  Case gqa;
  gqa.kv_heads = 1;
  gqa.causal = true;
  gqa.queries = 65;
  gqa.keys = 200;
  gqa.query_start = 135;
  cases.push_back(gqa);
  Case alibi;
  alibi.position = TiledPositionBias::kAlibi;
  alibi.causal = true;
  cases.push_back(alibi);
  Case t5;
  t5.position = TiledPositionBias::kRelative;
  t5.padding = true;
  t5.queries = t5.keys = 129;
  cases.push_back(t5);
  Case padded;
  padded.padded_sequence = true;
  cases.push_back(padded);
  for (Case c : cases) {
    c.dtype = torch::kBFloat16;
    expect_matches_math_path(c);
  }
}

TEST(TiledAttention, ReadsHeadsTransposedFromTheProjectionLayout) {
  // q, k, v as attention makes them: (B, T, H, D) projections viewed as (B, H, T, D), rows
  // H * D apart; and a gradient with the same layout.
  Case c;
  c.kv_heads = 2;
  c.causal = true;
  c.padding = true;
  c.queries = c.keys = 129;
  const auto in = make_inputs(c);
  Inputs strided = in;
  strided.q = in.q.transpose(1, 2).contiguous().transpose(1, 2);
  strided.k = in.k.transpose(1, 2).contiguous().transpose(1, 2);
  strided.v = in.v.transpose(1, 2).contiguous().transpose(1, 2);
  strided.d_out = in.d_out.transpose(1, 2).contiguous().transpose(1, 2);
  ASSERT_FALSE(strided.q.is_contiguous());
  const auto a = tiled_path(c, in), b = tiled_path(c, strided);
  for (auto [x, y] : {std::pair{a.out, b.out}, {a.lse, b.lse}, {a.dq, b.dq}, {a.dk, b.dk}, {a.dv, b.dv}}) {
    EXPECT_TRUE(torch::equal(x, y));
  }
}

TEST(TiledAttention, KeysOutsideEveryWindowAreNeverRead) {
  // NaN in the values of keys that no query can see (before the first query's window, after the
  // last query): had a skipped tile been visited, 0 * NaN would reach the output.
  Case c;
  c.batch = 1;
  c.queries = 64;
  c.keys = 1000;
  c.query_start = 900;
  c.causal = true;
  c.window = 32;
  auto in = make_inputs(c);
  in.v.narrow(2, 0, 869).fill_(std::numeric_limits<float>::quiet_NaN());
  in.v.narrow(2, 964, 36).fill_(std::numeric_limits<float>::quiet_NaN());
  in.k.narrow(2, 0, 869).fill_(std::numeric_limits<float>::quiet_NaN());
  const auto got = tiled_path(c, in);
  for (const auto& t : {got.out, got.dq}) EXPECT_FALSE(t.isnan().any().item<bool>());
  EXPECT_FALSE(got.dk.narrow(2, 869, 95).isnan().any().item<bool>());

  // A two-sided window: queries 500..563 see keys 469..594 only.
  Case band = c;
  band.causal = false, band.query_start = 500;
  auto band_in = make_inputs(band);
  band_in.v.narrow(2, 0, 469).fill_(std::numeric_limits<float>::quiet_NaN());
  band_in.v.narrow(2, 595, 405).fill_(std::numeric_limits<float>::quiet_NaN());
  band_in.k.narrow(2, 595, 405).fill_(std::numeric_limits<float>::quiet_NaN());
  const auto band_got = tiled_path(band, band_in);
  for (const auto& t : {band_got.out, band_got.dq}) EXPECT_FALSE(t.isnan().any().item<bool>());
  EXPECT_FALSE(band_got.dk.narrow(2, 469, 126).isnan().any().item<bool>());
  expect_matches_math_path(band);
}

TEST(TiledAttention, DropoutInsideTilesMatchesTheMathPathWithItsMask) {
  // The same mask applied to the math path's weights: outputs and every gradient agree, across
  // block edges, with every mask, GQA, position terms and bfloat16.
  Case base;
  base.dropout = 0.25;
  base.queries = base.keys = 131;
  for (const auto& c : mask_combinations(base)) expect_matches_math_path(c);
  Case alibi = base;
  alibi.causal = true, alibi.padding = true, alibi.position = TiledPositionBias::kAlibi, alibi.kv_heads = 2;
  expect_matches_math_path(alibi);
  Case t5 = base;
  t5.position = TiledPositionBias::kRelative, t5.queries = 70;
  expect_matches_math_path(t5);
  Case bf16 = alibi;
  bf16.dtype = torch::kBFloat16;
  expect_matches_math_path(bf16);
}

TEST(TiledAttention, DropoutKeepsOneMinusPAndDrawsItsSeedFromTorchsGenerator) {
  // 1 x 4 x 300 x 300 draws: the kept fraction is 1 - p within 5 standard deviations.
  const double p = 0.1;
  const auto keep = tiled_dropout_keep_mask(3, p, 1, 4, 300, 300);
  const double n = static_cast<double>(keep.numel());
  const double kept = keep.to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(kept, 1 - p, 5 * std::sqrt(p * (1 - p) / n));
  EXPECT_FALSE(torch::equal(keep[0][0][0], keep[0][0][1]));  // rows draw apart
  EXPECT_FALSE(torch::equal(keep, tiled_dropout_keep_mask(4, p, 1, 4, 300, 300)));

  // Unseeded calls take their seed from torch::manual_seed's generator: the same seed gives the
  // same output (so resume and recomputation redraw it), another seed another one.
  auto q = torch::randn({1, 2, 40, 16}), k = torch::randn({1, 2, 40, 16}), v = torch::randn({1, 2, 40, 16});
  const auto options = TiledAttentionOptions().causal(true).dropout(0.3);
  auto run = [&](uint64_t seed) {
    torch::manual_seed(seed);
    return tiled_attention(q, k, v, options);
  };
  EXPECT_TRUE(torch::equal(run(5), run(5)));
  EXPECT_FALSE(torch::equal(run(5), run(6)));
  // Without a seed, the plain forward refuses rather than draw a fixed mask.
  EXPECT_THROW(tiled_attention_forward(q, k, v, options), c10::Error);
}

TEST(TiledAttention, RefusesWhatItCannotCompute) {
  auto q = torch::randn({1, 3, 8, 16}), k = torch::randn({1, 2, 8, 16});
  EXPECT_THROW(tiled_attention_forward(q, k, k, TiledAttentionOptions()), c10::Error);  // 3 heads over 2
  auto q4 = torch::randn({1, 4, 8, 16});
  EXPECT_THROW(tiled_attention_forward(q4.to(torch::kDouble), k.to(torch::kDouble), k.to(torch::kDouble),
                                       TiledAttentionOptions()),
               c10::Error);
  EXPECT_THROW(tiled_attention_forward(q4, k, k, TiledAttentionOptions().key_padding_mask(torch::ones({1, 9}, torch::kBool))),
               c10::Error);
  EXPECT_THROW(tiled_attention_forward(q4, k, k, TiledAttentionOptions().position_bias(TiledPositionBias::kRelative)),
               c10::Error);
  try {
    tiled_attention_forward(q, k, k, TiledAttentionOptions());
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("query heads (3) must be a multiple of key/value heads (2)"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace zoo
