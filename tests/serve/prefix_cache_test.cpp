#include "serve/prefix_cache.h"

#include <algorithm>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace zoo {
namespace {

constexpr int64_t kBlock = PrefixCache::kBlockTokens;

// A cache of `layers` layers holding `rows` rows, left-padded: row r's prompt of `lengths[r]`
// tokens is its last lengths[r] positions, each key the value 1000 * layer + 100 * row + position
// in the prompt (so that every copy can be checked), values its negative.
KVCache filled(int64_t layers, const std::vector<int64_t>& lengths) {
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  const auto rows = static_cast<int64_t>(lengths.size());
  KVCache cache(layers);
  for (int64_t layer = 0; layer < layers; ++layer) {
    auto keys = torch::zeros({rows, 2, longest, 3});
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = lengths[r];
      auto positions = torch::arange(n, torch::kFloat).view({1, n, 1}).expand({2, n, 3});
      keys[r].narrow(1, longest - n, n).copy_(positions + 1000.0 * layer + 100.0 * r);
    }
    cache.self_attention(layer).append(keys, -keys);
  }
  return cache;
}

std::vector<int64_t> tokens(int64_t n, int64_t first) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(first + i);
  return out;
}

// A prompt's whole blocks are kept and found again by a prompt that begins the same way, its
// last token always left to read; fill appends exactly the keys the first prompt's row held.
TEST(PrefixCache, KeepsWholeBlocksAndFillsTheirKeys) {
  PrefixCache cache(int64_t{1} << 30);
  const auto a = tokens(2 * kBlock + 5, 10), b = tokens(kBlock + 3, 500);
  cache.insert(a, filled(2, {2 * kBlock + 5, kBlock + 3}), 0);
  cache.insert(b, filled(2, {2 * kBlock + 5, kBlock + 3}), 1);
  EXPECT_EQ(cache.counts().blocks, 3);
  EXPECT_EQ(cache.counts().bytes, 3 * 2 * 2 * (2 * kBlock * 3) * 4);  // blocks, layers, keys and values
  auto longer = a;
  longer.push_back(7);
  EXPECT_EQ(cache.match(longer), 2 * kBlock);
  EXPECT_EQ(cache.match(a), 2 * kBlock);
  EXPECT_EQ(cache.match(std::vector<int64_t>(a.begin(), a.begin() + 2 * kBlock)), kBlock);  // its last token read again
  auto changed = a;
  changed[kBlock + 1] = 9999;
  EXPECT_EQ(cache.match(changed), kBlock);  // the second block differs
  changed[0] = 9999;
  EXPECT_EQ(cache.match(changed), 0);
  EXPECT_EQ(cache.match(b), kBlock);  // one block and 3 tokens more
  KVCache out(2);
  cache.fill(longer, 2 * kBlock, out);
  auto want = filled(2, {2 * kBlock + 5, kBlock + 3});
  for (int64_t layer = 0; layer < 2; ++layer) {
    auto& self = out.self_attention(layer);
    EXPECT_EQ(self.seen(), 2 * kBlock);
    EXPECT_TRUE(self.keys().equal(want.self_attention(layer).keys().narrow(0, 0, 1).narrow(2, 0, 2 * kBlock)));
    EXPECT_TRUE(self.values().equal(-self.keys()));
  }
  EXPECT_THROW(cache.fill(changed, kBlock, out), std::logic_error);  // out is not empty, and no such match
}

// A recurrent layer's state (layer 0 here, beside layer 1's keys) is kept only with the block at
// whose end it was taken: a prompt ending where a block does. A prompt resumes from such a block
// alone (an earlier block of its chain holds no state), fill sets the state the row had, and a
// prompt that ends inside a block keeps nothing. The state's bytes count against the budget.
TEST(PrefixCache, KeepsARecurrentStateAtTheBlockWhereItWasTaken) {
  const auto prompt = tokens(2 * kBlock, 10);
  auto read = [&](int64_t n, double shift) {  // a row that read the prompt's first n tokens
    KVCache cache(2);
    cache.self_attention(0).set_state(torch::arange(2 * 3 * 4, torch::kFloat).view({1, 2, 3, 4}) + shift, n);
    auto keys = torch::arange(n, torch::kFloat).view({1, 1, n, 1}).expand({1, 2, n, 3}).contiguous();
    cache.self_attention(1).append(keys, -keys);
    return cache;
  };
  PrefixCache cache(int64_t{1} << 30);
  auto longer = prompt;
  longer.push_back(7);
  cache.insert(std::vector<int64_t>(longer.begin(), longer.begin() + 2 * kBlock + 1), read(2 * kBlock + 1, 0.0), 0);
  EXPECT_EQ(cache.counts().blocks, 0);  // the state is after a block and a token
  cache.insert(prompt, read(2 * kBlock, 0.5), 0);
  EXPECT_EQ(cache.counts().blocks, 2);
  EXPECT_EQ(cache.counts().bytes, 2 * (2 * 2 * kBlock * 3 * 4) + 2 * 3 * 4 * 4);  // two blocks' keys, one state
  EXPECT_EQ(cache.match(longer), 2 * kBlock);
  auto branch = std::vector<int64_t>(prompt.begin(), prompt.begin() + kBlock + 5);
  EXPECT_EQ(cache.match(branch), 0);  // its first block is cached, but holds no state
  KVCache out(2);
  cache.fill(longer, 2 * kBlock, out);
  EXPECT_TRUE(out.self_attention(0).state().equal(read(2 * kBlock, 0.5).self_attention(0).state()));
  EXPECT_EQ(out.self_attention(0).seen(), 2 * kBlock);
  EXPECT_TRUE(out.self_attention(1).keys().equal(read(2 * kBlock, 0.5).self_attention(1).keys()));
  EXPECT_EQ(out.seen(), 2 * kBlock);
  // Read again to its first block's end, the chain's first block takes that state.
  cache.insert(std::vector<int64_t>(prompt.begin(), prompt.begin() + kBlock), read(kBlock, 2.0), 0);
  EXPECT_EQ(cache.counts().blocks, 2);
  EXPECT_EQ(cache.match(branch), kBlock);
  KVCache first(2);
  cache.fill(branch, kBlock, first);
  EXPECT_TRUE(first.self_attention(0).state().equal(read(kBlock, 2.0).self_attention(0).state()));
  EXPECT_EQ(cache.counts().bytes, 2 * (2 * 2 * kBlock * 3 * 4) + 2 * (2 * 3 * 4 * 4));
}

// Within the budget, whatever the load: the least recently used blocks go first, a chain's later
// blocks before its earlier ones, and a chain in use stays whole.
TEST(PrefixCache, EvictsLeastRecentlyUsedLeavesWithinTheBudget) {
  const int64_t block_bytes = 2 * 2 * kBlock * 3 * 4;  // one layer: keys and values
  PrefixCache cache(5 * block_bytes);
  const auto a = tokens(3 * kBlock + 1, 0), b = tokens(3 * kBlock + 1, 1000);
  cache.insert(a, filled(1, {3 * kBlock + 1}), 0);
  cache.insert(b, filled(1, {3 * kBlock + 1}), 0);
  EXPECT_EQ(cache.counts().blocks, 5);  // a's last block went
  EXPECT_EQ(cache.counts().evicted_blocks, 1);
  EXPECT_EQ(cache.match(a), 2 * kBlock);
  EXPECT_EQ(cache.match(b), 3 * kBlock);
  EXPECT_EQ(cache.match(a), 2 * kBlock);  // a used last: b's chain loses its last block next
  const auto c = tokens(kBlock + 1, 5000);
  cache.insert(c, filled(1, {kBlock + 1}), 0);
  EXPECT_EQ(cache.match(b), 2 * kBlock);
  EXPECT_EQ(cache.match(a), 2 * kBlock);
  EXPECT_EQ(cache.match(c), kBlock);
  // A bounded load of random prompts never holds more than the budget.
  auto g = at::make_generator<at::CPUGeneratorImpl>(3);
  for (int i = 0; i < 200; ++i) {
    const int64_t n = torch::randint(1, 6 * kBlock, {1}, g).item<int64_t>();
    const auto first = torch::randint(0, 4, {1}, g).item<int64_t>() * 1000;
    cache.insert(tokens(n, first), filled(1, {n}), 0);
    EXPECT_LE(cache.counts().bytes, 5 * block_bytes);
    cache.match(tokens(n, first));
  }
  EXPECT_GT(cache.counts().evicted_blocks, 10);
  // No budget: nothing kept, nothing found.
  PrefixCache off(0);
  off.insert(a, filled(1, {3 * kBlock + 1}), 0);
  EXPECT_EQ(off.counts().blocks, 0);
  EXPECT_EQ(off.match(a), 0);
}

}  // namespace
}  // namespace zoo
