#pragma once
// LibTorch's CPU allocations of 32 MiB and more, in mappings of their own backed by 2 MiB pages
// and kept for reuse.
//
// glibc serves every block of 32 MiB or more (its largest mmap threshold) with a fresh mmap and
// unmaps it on free, so each one is faulted in again, 4 KiB at a time, every time. A GPT's
// (vocabulary, d_model) tensors are such blocks: gpt2-small's tied embedding in float32 is
// 154 MB, and one training step makes a dozen of them (its bf16 copy under autocast, the
// output projection's gradient, the embedding's, their sum). On this project's machine those
// page faults were half of a bf16 training step (docs/performance-libtorch-1.13.md). Smaller
// blocks stay with the allocator LibTorch had.

#include <cstdint>

namespace zoo {

// Blocks from this size up are large.
constexpr int64_t kLargeBlockBytes = int64_t{32} << 20;

// Freed large blocks kept for reuse at most, in bytes, beyond what is in use: one step's
// pattern of (V, d) tensors for a GPT-2 or LLaMA-sized vocabulary. Beyond it the blocks freed
// longest ago are unmapped.
constexpr int64_t kLargeBlockCacheBytes = int64_t{1} << 30;

// Makes LibTorch's CPU allocator the large-block one, wrapping the allocator it had for small
// blocks. Idempotent; returns false where it does not apply (not Linux).
bool install_large_block_allocator();

struct LargeBlockStats {
  int64_t mapped = 0;        // large blocks mapped fresh
  int64_t reused = 0;        // large blocks served from the freed ones kept
  int64_t cached_bytes = 0;  // bytes freed and kept for reuse now
  int64_t in_use_bytes = 0;  // bytes of large blocks in tensors now
};
LargeBlockStats large_block_stats();

// Unmaps every freed block kept for reuse (before a phase that needs the memory otherwise).
void release_cached_large_blocks();

}  // namespace zoo
