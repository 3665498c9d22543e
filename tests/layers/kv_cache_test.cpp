#include "layers/kv_cache.h"

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
