#pragma once
// zoo serve's automatic prefix caching, as vLLM's: the keys and values of prompts already read,
// kept in blocks of kBlockTokens tokens keyed by a hash chained from the prompt's start (a
// block's key covers every token before it), so that a later prompt with the same beginning
// (a chat's next turn resends the whole conversation) reads only what follows. Blocks are shared
// by every prompt that reaches them and evicted least recently used, a block only once no cached
// block continues it (the chains stay whole), within a budget of bytes.
//
// Only a decoder's self-attention keys are kept, and only of rows that kept every key of their
// prompt (a sliding window that dropped some is not cached). A recurrent layer (linear
// attention) keeps a state, not keys: its state is kept at the end of a block where a read
// ended (the scheduler cuts prompts there), and a prompt resumes only from such a block. The
// scheduler's thread alone uses it.

#include <cstdint>
#include <unordered_map>
#include <vector>

#include <torch/types.h>

#include "layers/kv_cache.h"

namespace zoo {

struct PrefixCacheCounts {
  int64_t lookups = 0;        // prompts looked up
  int64_t lookup_tokens = 0;  // their tokens
  int64_t hit_tokens = 0;     // tokens found cached (not read again)
  int64_t evicted_blocks = 0;
  int64_t blocks = 0, bytes = 0;  // held now
};

class PrefixCache {
 public:
  static constexpr int64_t kBlockTokens = 32;

  explicit PrefixCache(int64_t budget_bytes) : budget_(budget_bytes) {}
  bool enabled() const { return budget_ > 0; }

  // How many of `prompt`'s first tokens are cached: whole blocks, always leaving at least its
  // last token to be read (its logits are the first new token's), ending at a block that holds
  // every recurrent layer's state where the model has such layers. Marks them used. `root` starts
  // the chain: a served LoRA adapter's salt (serve/adapter_bank.h), whose keys are not the
  // base's; 0 for the base.
  int64_t match(const std::vector<int64_t>& prompt, uint64_t root = 0);
  // Appends the keys and values of `prompt`'s first `tokens` (a match()) to `cache`, an empty one
  // of the model's layers, as if it had read them.
  void fill(const std::vector<int64_t>& prompt, int64_t tokens, KVCache& cache, uint64_t root = 0) const;
  // Keeps the whole blocks of `prompt`, which row `row` of `cache` holds as its last
  // prompt.size() positions (a prefill's, left-padded, or a prompt read in chunks), then evicts
  // down to the budget. Nothing when a layer kept fewer positions. A recurrent layer's state is
  // the one after the whole prompt: kept with its last block when the prompt ends where a block
  // does, else nothing is kept for such a model.
  void insert(const std::vector<int64_t>& prompt, const KVCache& cache, int64_t row, uint64_t root = 0);

  const PrefixCacheCounts& counts() const { return counts_; }

 private:
  struct Block {
    uint64_t parent = 0;  // the key of the block before it; 0 for a prompt's first
    std::vector<int64_t> tokens;
    std::vector<torch::Tensor> keys, values;  // per layer, (Hkv, kBlockTokens, D); undefined for a recurrent one
    std::vector<torch::Tensor> states;        // per layer, (H, Dk, Dv) after the block, where kept; else empty
    bool resumes = true;                      // a prompt can go on from its end: no recurrent layer, or states kept
    int64_t children = 0;
    int64_t bytes = 0;
    uint64_t used = 0;  // tick of the last match or insert
  };
  // The key of the block of prompt tokens [begin, begin + kBlockTokens) after the block `parent`.
  static uint64_t key(uint64_t parent, const std::vector<int64_t>& prompt, int64_t begin);
  // The block that holds those tokens, or nullptr.
  const Block* find(uint64_t key, uint64_t parent, const std::vector<int64_t>& prompt, int64_t begin) const;
  void evict();

  int64_t budget_;
  uint64_t tick_ = 0;
  std::unordered_map<uint64_t, Block> blocks_;
  PrefixCacheCounts counts_;
};

}  // namespace zoo
