#include "core/large_blocks.h"

#include <sys/mman.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

namespace zoo {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Maps `length` bytes (a multiple of 2 MiB) at a 2 MiB boundary, advised for 2 MiB pages:
// the kernel backs only aligned 2 MiB ranges with huge pages.
void* map_aligned(size_t length) {
  void* raw = mmap(nullptr, length + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t tail = aligned + length, end = start + length + kHugePage;
  if (end > tail) munmap(reinterpret_cast<void*>(tail), end - tail);
  // Advice only: where the kernel gives no huge pages the block is still its own mapping.
  madvise(reinterpret_cast<void*>(aligned), length, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

class LargeBlockAllocator final : public c10::Allocator {
 public:
  explicit LargeBlockAllocator(c10::Allocator* small) : small_(small), small_deleter_(small->raw_deleter()) {}

  c10::DataPtr allocate(size_t n) override { return allocate_block(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

  // For raw_allocate's pointers (data == context for both sizes): ours are looked up, the rest
  // go to the small allocator's deleter.
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  LargeBlockStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void release_cached() const {
    std::vector<Block> unmap;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      unmap.swap(cached_);
      stats_.cached_bytes = 0;
    }
    for (const auto& b : unmap) munmap(b.address, b.length);
  }

  static LargeBlockAllocator* instance;

 private:
  struct Block {
    void* address;
    size_t length;
  };

  c10::DataPtr allocate_block(size_t n) const {
    if (n < static_cast<size_t>(kLargeBlockBytes)) return small_->allocate(n);  // with its own deleter
    const size_t length = (n + kHugePage - 1) / kHugePage * kHugePage;
    void* address = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The smallest kept block that fits without wasting more than an eighth of it.
      auto best = cached_.end();
      for (auto it = cached_.begin(); it != cached_.end(); ++it) {
        if (it->length >= length && it->length <= length + length / 8 &&
            (best == cached_.end() || it->length < best->length)) {
          best = it;
        }
      }
      if (best != cached_.end()) {
        address = best->address;
        live_[address] = best->length;
        stats_.cached_bytes -= static_cast<int64_t>(best->length);
        stats_.in_use_bytes += static_cast<int64_t>(best->length);
        stats_.reused += 1;
        cached_.erase(best);
      }
    }
    if (address == nullptr) {
      address = map_aligned(length);
      if (address == nullptr) {
        release_cached();  // the kept blocks may be what stands in the way
        address = map_aligned(length);
      }
      TORCH_CHECK_WITH(OutOfMemoryError, address != nullptr, "zoo: out of memory mapping ", n, " bytes");
      std::lock_guard<std::mutex> lock(mutex_);
      live_[address] = length;
      stats_.in_use_bytes += static_cast<int64_t>(length);
      stats_.mapped += 1;
    }
    return {address, address, &release, c10::Device(c10::DeviceType::CPU)};
  }

  static void release(void* data) { instance->release_block(data); }

  void release_block(void* data) {
    std::vector<Block> unmap;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = live_.find(data);
      if (it == live_.end()) {
        small_deleter_(data);
        return;
      }
      const Block block{data, it->second};
      live_.erase(it);
      stats_.in_use_bytes -= static_cast<int64_t>(block.length);
      // Kept, newest last; the oldest go while over the limit.
      cached_.push_back(block);
      stats_.cached_bytes += static_cast<int64_t>(block.length);
      while (stats_.cached_bytes > kLargeBlockCacheBytes) {
        unmap.push_back(cached_.front());
        stats_.cached_bytes -= static_cast<int64_t>(cached_.front().length);
        cached_.erase(cached_.begin());
      }
    }
    for (const auto& b : unmap) munmap(b.address, b.length);
  }

  c10::Allocator* small_;
  c10::DeleterFnPtr small_deleter_;
  mutable std::mutex mutex_;
  mutable std::map<void*, size_t> live_;
  mutable std::vector<Block> cached_;
  mutable LargeBlockStats stats_;
};

LargeBlockAllocator* LargeBlockAllocator::instance = nullptr;

}  // namespace

bool install_large_block_allocator() {
#ifdef __linux__
  static std::once_flag once;
  std::call_once(once, [] {
    // Never destroyed: tensors may outlive every static destructor.
    LargeBlockAllocator::instance = new LargeBlockAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(LargeBlockAllocator::instance, /*priority=*/1);
  });
  return c10::GetCPUAllocator() == LargeBlockAllocator::instance;
#else
  return false;
#endif
}

LargeBlockStats large_block_stats() {
  return LargeBlockAllocator::instance != nullptr ? LargeBlockAllocator::instance->stats() : LargeBlockStats{};
}

void release_cached_large_blocks() {
  if (LargeBlockAllocator::instance != nullptr) LargeBlockAllocator::instance->release_cached();
}

}  // namespace zoo
