#include "layers/kv_cache.h"

#include <limits>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

torch::Tensor steps(int64_t from, int64_t n) {
  // (1, 1, n, 1) holding the absolute positions, so the kept keys are easy to read.
  return torch::arange(from, from + n, torch::kFloat).view({1, 1, n, 1});
}

TEST(AttentionCache, AppendsInPlaceAndGrows) {
  AttentionCache cache;
  cache.reserve(8);
  cache.append(steps(0, 3), steps(0, 3));
  EXPECT_EQ(cache.capacity(), 8);
  const void* buffer = cache.keys().data_ptr();
  auto [k, v] = cache.append(steps(3, 2), steps(3, 2));
  EXPECT_EQ(cache.keys().data_ptr(), buffer);  // written in place, no reallocation
  EXPECT_LE(max_abs_diff(k, steps(0, 5)), 0.0);
  cache.append(steps(5, 10), steps(5, 10));  // past the reservation: grows, keeps everything
  EXPECT_GE(cache.capacity(), 15);
  EXPECT_LE(max_abs_diff(cache.values(), steps(0, 15)), 0.0);
  EXPECT_EQ(cache.seen(), 15);
  EXPECT_EQ(cache.start(), 0);
}

TEST(AttentionCache, SlidingWindowKeepsOnlyVisibleKeysInBoundedMemory) {
  AttentionCache cache;
  const int64_t window = 4;
  for (int64_t i = 0; i < 100; ++i) {
    auto [k, v] = cache.append(steps(i, 1), steps(i, 1), window);
    // The query at position i sees keys i-3..i; they are all kept, contiguous, in order.
    ASSERT_LE(cache.length(), window);
    EXPECT_EQ(cache.start() + cache.length(), i + 1);
    EXPECT_LE(max_abs_diff(k, steps(cache.start(), cache.length())), 0.0);
    EXPECT_LE(cache.start(), std::max<int64_t>(0, i - window + 1));
  }
  EXPECT_LE(cache.capacity(), 2 * window);
}

TEST(AttentionCache, ReorderSelectsBatchRows) {
  AttentionCache cache;
  auto k = torch::arange(3, torch::kFloat).view({3, 1, 1, 1});
  cache.append(k, k);
  cache.reorder(torch::tensor({2, 2, 0}, torch::kLong));
  EXPECT_LE(max_abs_diff(cache.keys().view(-1), torch::tensor({2.0f, 2.0f, 0.0f})), 0.0);
}

// A recurrent layer's state (layers/linear_attention.h): it counts the positions it has seen,
// follows a reorder of the batch rows (beam search), and cannot share an entry with keys.
TEST(AttentionCache, RecurrentStateCountsPositionsAndFollowsReorder) {
  AttentionCache cache;
  const auto state = torch::arange(3 * 2 * 4 * 5, torch::kFloat).view({3, 2, 4, 5});
  cache.set_state(state, 7);
  cache.set_state(state, 1);
  EXPECT_EQ(cache.seen(), 8);
  EXPECT_FALSE(cache.keys().defined());
  cache.reorder(torch::tensor({2, 0, 0}, torch::kLong));
  EXPECT_TRUE(torch::equal(cache.state(), state.index_select(0, torch::tensor({2, 0, 0}, torch::kLong))));
  cache.clear();
  EXPECT_FALSE(cache.state().defined());
  EXPECT_EQ(cache.seen(), 0);
  AttentionCache with_keys;
  with_keys.append(torch::zeros({1, 2, 3, 4}), torch::zeros({1, 2, 3, 4}));
  EXPECT_THROW(with_keys.set_state(state, 1), c10::Error);
}

// Continuous batching's operations on a cache of fixed rows (serve/batch_scheduler.h): a one-row
// prefill placed as a row's last positions, the shared axis grown in front and trimmed, rows in
// use narrowed and compacted, with keys and recurrent states alike.
TEST(AttentionCache, RowsPlacedGrownTrimmedAndMoved) {
  auto keys_of = [](int64_t t, float base) { return torch::arange(t, torch::kFloat).add(base).view({1, 1, t, 1}); };
  AttentionCache a, b;
  a.append(keys_of(3, 10), keys_of(3, 10));  // a prompt of 3
  b.append(keys_of(5, 20), keys_of(5, 20));  // a prompt of 5
  AttentionCache batch;
  batch.reserve(16);
  batch.grow_front(3);
  batch.place_row(0, 4, a);
  EXPECT_EQ(batch.seen(), 3);
  batch.grow_front(2);  // row 0 gains two positions of left padding
  batch.place_row(1, 4, b);
  batch.use_rows(2);
  const auto k = batch.keys();  // (2, 1, 5, 1)
  ASSERT_EQ(k.sizes(), torch::IntArrayRef({2, 1, 5, 1}));
  EXPECT_TRUE(torch::equal(k[0].flatten(), torch::tensor({0.f, 0.f, 10.f, 11.f, 12.f})));
  EXPECT_TRUE(torch::equal(k[1].flatten(), torch::tensor({20.f, 21.f, 22.f, 23.f, 24.f})));
  // A step appends to the rows in use only.
  batch.append(torch::full({2, 1, 1, 1}, 7.f), torch::full({2, 1, 1, 1}, 7.f));
  EXPECT_EQ(batch.seen(), 6);
  // Row 1 ends; the trim keeps what row 0 holds (4 positions), row 0 moves nowhere.
  batch.drop_front(2);
  batch.use_rows(1);
  EXPECT_TRUE(torch::equal(batch.keys()[0].flatten(), torch::tensor({10.f, 11.f, 12.f, 7.f})));
  // Compaction: row 0 takes row 1's place.
  batch.use_rows(2);
  batch.copy_row(0, 1);
  EXPECT_TRUE(torch::equal(batch.keys()[1].flatten(), torch::tensor({10.f, 11.f, 12.f, 7.f})));
  EXPECT_THROW(batch.use_rows(5), c10::Error);
  EXPECT_THROW(batch.drop_front(5), c10::Error);
  AttentionCache longer;
  longer.append(keys_of(9, 0), keys_of(9, 0));
  EXPECT_THROW(batch.place_row(2, 4, longer), c10::Error);  // seen 4 < 9: grow_front first

  // Recurrent states: a row's state is replaced; set_state on the rows in use keeps the others.
  AttentionCache states;
  AttentionCache one;
  one.set_state(torch::ones({1, 2, 3, 3}), 4);
  states.grow_front(4);
  states.place_row(2, 3, one);
  EXPECT_TRUE(torch::equal(states.state()[2], torch::ones({2, 3, 3})));
  EXPECT_TRUE(torch::equal(states.state()[0], torch::zeros({2, 3, 3})));
  states.copy_row(2, 0);
  states.use_rows(1);
  states.set_state(torch::full({1, 2, 3, 3}, 5.f), 1);
  states.use_rows(3);
  EXPECT_TRUE(torch::equal(states.state()[0], torch::full({2, 3, 3}, 5.f)));
  EXPECT_TRUE(torch::equal(states.state()[2], torch::ones({2, 3, 3})));
}

// A row placed where a failed sequence left NaN keys: its left padding is zeros again, since a
// masked position still meets a weight of 0, and 0 * NaN is NaN.
TEST(AttentionCache, PlacedRowsPaddingIsZeroWhateverWasThere) {
  AttentionCache batch, nan_prompt, prompt;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  nan_prompt.append(torch::full({1, 1, 6, 1}, nan), torch::full({1, 1, 6, 1}, nan));
  prompt.append(torch::ones({1, 1, 2, 1}), torch::ones({1, 1, 2, 1}));
  batch.reserve(8);
  batch.grow_front(6);
  batch.place_row(0, 2, nan_prompt);
  batch.place_row(0, 2, prompt);  // the NaN sequence ended; a 2-token prompt takes its row
  batch.use_rows(1);
  EXPECT_TRUE(torch::equal(batch.keys()[0].flatten(), torch::tensor({0.f, 0.f, 0.f, 0.f, 1.f, 1.f})));
  EXPECT_TRUE(torch::equal(batch.values()[0].flatten(), torch::tensor({0.f, 0.f, 0.f, 0.f, 1.f, 1.f})));
}

// Trimming the front moves the kept keys back to the buffer's start when the end is reached,
// instead of allocating a larger buffer.
TEST(AttentionCache, TrimmedBufferIsReused) {
  AttentionCache cache;
  cache.reserve(8);
  for (int64_t step = 0; step < 40; ++step) {
    const auto v = torch::full({1, 1, 1, 1}, static_cast<float>(step));
    cache.append(v, v);
    if (cache.seen() > 3) cache.drop_front(cache.seen() - 3);
    EXPECT_EQ(cache.capacity(), 8);
  }
  EXPECT_TRUE(torch::equal(cache.keys().flatten(), torch::tensor({37.f, 38.f, 39.f})));
}

TEST(AttentionCache, MismatchedShapesAreErrors) {
  AttentionCache cache;
  cache.append(torch::zeros({2, 4, 1, 8}), torch::zeros({2, 4, 1, 8}));
  EXPECT_THROW(cache.append(torch::zeros({3, 4, 1, 8}), torch::zeros({3, 4, 1, 8})), c10::Error);
  EXPECT_THROW(cache.append(torch::zeros({2, 4, 1, 8}), torch::zeros({2, 4, 2, 8})), c10::Error);
  AttentionCache cross;
  cross.set_static(torch::zeros({1, 1, 3, 2}), torch::zeros({1, 1, 3, 2}));
  EXPECT_THROW(cross.append(torch::zeros({1, 1, 1, 2}), torch::zeros({1, 1, 1, 2})), c10::Error);
}

TEST(KVCache, HoldsOneEntryPerLayerAndChecksIndices) {
  KVCache cache(3);
  EXPECT_EQ(cache.n_layers(), 3);
  cache.self_attention(0).append(steps(0, 2), steps(0, 2));
  EXPECT_EQ(cache.seen(), 2);
  EXPECT_TRUE(cache.self_attention(2).empty());
  EXPECT_THROW(cache.self_attention(3), c10::Error);
  EXPECT_THROW(cache.cross_attention(-1), c10::Error);
  cache.clear();
  EXPECT_EQ(cache.seen(), 0);
}

}  // namespace
}  // namespace zoo
