#pragma once
// Process-wide LibTorch settings: the one place zoo chooses its intra-op thread count.

#include <cstdint>
#include <string>

#include <c10/core/Device.h>

namespace torch::nn {
class Module;
}

namespace zoo {

// Version of zoo itself (the CMake project version).
std::string version();

// A line naming the LibTorch version zoo was built against, whether it has CUDA compiled in
// (and which) and how many CUDA devices this process sees: "LibTorch 2.15.0, CUDA 13.2
// compiled in, no CUDA device".
std::string torch_description();

// The BLAS LibTorch was built with and the vector instructions its CPU kernels use here:
// "BLAS mkl (LibTorch's), CPU kernels AVX2".
std::string cpu_kernels_description();

// CPUs this process may run on: the affinity mask (taskset, cgroup cpusets), not just the
// machine's core count, so a container limited to 2 of 64 cores gets 2 threads.
int64_t available_cpus();

// The intra-op thread count zoo uses: `requested` if > 0, else ZOO_NUM_THREADS if set and valid,
// else available_cpus() shared among LOCAL_WORLD_SIZE processes (torchrun) when that is set.
// A count above available_cpus() is capped to it (more threads than CPUs only contend, and a
// huge count would start that many threads); `note` then says so. Throws
// std::invalid_argument naming ZOO_NUM_THREADS if it is not a positive integer.
int64_t resolve_num_threads(int64_t requested = 0, std::string* note = nullptr);

// Tunes glibc's allocator for training's allocate-free-reallocate pattern (large blocks kept
// for reuse instead of being unmapped and faulted in again every step). Returns false where it
// does not apply (not glibc). LibTorch's CPU blocks of 32 MiB and more go to the large-block
// allocator (core/large_blocks.h). Set ZOO_MALLOC_DEFAULTS=1 to keep glibc's defaults and
// LibTorch's allocator.
bool configure_allocator();

// Moves every CPU parameter and buffer of `module` into one anonymous mapping that the kernel is
// asked to back with 2 MiB pages (madvise MADV_HUGEPAGE, honoured where transparent huge pages
// are "always" or "madvise"). Decoding reads every weight once per token: with 4 KiB pages that
// is a TLB miss every 4 KiB, 60,000 a token for gpt2-small in bf16, and 2 MiB pages made bf16
// decoding about 20% faster here (docs/performance-libtorch-1.13.md). Tensors that shared
// storage (tied weights) still share it; values, types and requires_grad are kept. Returns the bytes placed:
// 0 where it does not apply (not Linux, a tensor not on the CPU, or nothing to place).
int64_t place_in_huge_pages(torch::nn::Module& module);

// Applies resolve_num_threads(requested) with at::set_num_threads and returns the count.
// LibTorch starts with 1 intra-op thread on some builds (Debian's), which wastes the machine.
int64_t configure_threads(int64_t requested = 0, std::string* note = nullptr);

// Physical memory of this machine in bytes (0 when unknown).
int64_t physical_memory_bytes();

// "cpu", "cuda", "cuda:N" or "auto" as a device; CUDA requested but absent is an error.
c10::Device resolve_device(const std::string& name);

}  // namespace zoo
