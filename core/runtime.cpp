#include "core/runtime.h"

#include "core/large_blocks.h"

#include <malloc.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <ATen/Version.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/torch.h>
#include <torch/version.h>

namespace zoo {

std::string version() { return ZOO_VERSION; }

std::string torch_description() {
  std::string s = std::string("LibTorch ") + TORCH_VERSION;
  if (at::globalContext().hasCUDART()) {
    // versionCUDART() is major * 1000 + minor * 10, e.g. 13020 for 13.2.
    const long cuda = at::detail::getCUDAHooks().versionCUDART();
    s += ", CUDA " + std::to_string(cuda / 1000) + "." + std::to_string(cuda % 1000 / 10) + " compiled in";
    const auto devices = torch::cuda::device_count();
    s += devices > 0 ? ", " + std::to_string(devices) + (devices == 1 ? " CUDA device" : " CUDA devices")
                     : ", no CUDA device";
  } else {
    s += ", CPU-only build";
  }
  return s;
}

std::string cpu_kernels_description() {
  // LibTorch's build configuration names its BLAS (BLAS_INFO=mkl for PyPI's wheels).
  const std::string config = at::show_config();
  std::string blas = "unknown";
  if (const auto at = config.find("BLAS_INFO="); at != std::string::npos) {
    const auto start = at + 10;
    blas = config.substr(start, config.find_first_of(", \n", start) - start);
  }
  return "BLAS " + blas + " (LibTorch's), CPU kernels " + at::get_cpu_capability();
}

int64_t available_cpus() {
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int64_t>(n) : 1;
}

int64_t resolve_num_threads(int64_t requested, std::string* note) {
  const int64_t cpus = available_cpus();
  auto capped = [&](int64_t n, const std::string& what) {
    if (n <= cpus) return n;
    if (note != nullptr) {
      *note = what + " " + std::to_string(n) + " exceeds the " + std::to_string(cpus) +
              " CPUs this process may use; using " + std::to_string(cpus) + " threads";
    }
    return cpus;
  };
  if (requested > 0) return capped(requested, "--threads");
  if (const char* env = std::getenv("ZOO_NUM_THREADS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    long n = std::strtol(env, &end, 10);
    if (*end != '\0' || n <= 0) {
      throw std::invalid_argument(std::string("ZOO_NUM_THREADS must be a positive integer, got '") +
                                  env + "'");
    }
    return capped(n, "ZOO_NUM_THREADS");
  }
  // Several processes per machine (torchrun --nproc_per_node): share the CPUs between them.
  if (const char* local = std::getenv("LOCAL_WORLD_SIZE"); local != nullptr && *local != '\0') {
    char* end = nullptr;
    long n = std::strtol(local, &end, 10);
    if (*end == '\0' && n > 1) return std::max<int64_t>(1, available_cpus() / n);
  }
  return available_cpus();
}

bool configure_allocator() {
#ifdef __GLIBC__
  if (const char* keep = std::getenv("ZOO_MALLOC_DEFAULTS"); keep != nullptr && std::string(keep) == "1") return false;
  // Each step frees and reallocates the same activations. By default glibc serves blocks of a
  // few MiB with fresh mmaps and trims the heap at 128 KiB, so every step pays for munmap, mmap
  // and page faults again; keeping freed memory for reuse removes that (PERF_NOTES: +40%
  // training throughput at T=64). The peak stays the peak: nothing is held beyond it.
  bool ok = mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024) == 1;  // glibc's largest
  ok = mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1 && ok;
  ok = mallopt(M_TOP_PAD, 64 * 1024 * 1024) == 1 && ok;
  // Blocks from 32 MiB up, which glibc always maps afresh: 2 MiB pages, kept for reuse.
  return install_large_block_allocator() && ok;
#else
  return false;
#endif
}

namespace {

// One anonymous mapping, unmapped when the last tensor placed in it is freed.
struct HugePageMapping {
  void* address = nullptr;
  size_t length = 0;
  ~HugePageMapping() {
    if (address != nullptr) munmap(address, length);
  }
};

void release_mapping_reference(void* holder) { delete static_cast<std::shared_ptr<HugePageMapping>*>(holder); }

}  // namespace

int64_t place_in_huge_pages(torch::nn::Module& module) {
#ifdef __linux__
  std::vector<torch::Tensor> tensors = module.parameters();
  for (auto& buffer : module.buffers()) tensors.push_back(buffer);
  // The tensors of each storage (a tensor registered twice is one TensorImpl; tied weights and
  // views share a storage), and each storage's 64-byte aligned offset in the mapping.
  struct Group {
    size_t offset = 0;
    std::vector<torch::Tensor> tensors;
  };
  std::map<const c10::StorageImpl*, Group> groups;
  std::map<const c10::TensorImpl*, bool> seen;
  size_t total = 0;
  for (const auto& t : tensors) {
    if (!t.defined() || !seen.emplace(t.unsafeGetTensorImpl(), true).second) continue;
    if (!t.device().is_cpu()) return 0;
    auto [it, added] = groups.try_emplace(t.storage().unsafeGetStorageImpl());
    if (added) it->second.offset = total, total += (t.storage().nbytes() + 63) / 64 * 64;
    it->second.tensors.push_back(t);
  }
  tensors.clear();
  if (total == 0) return 0;
  constexpr size_t kHugePage = size_t{2} << 20;
  auto mapping = std::make_shared<HugePageMapping>();
  mapping->length = (total + kHugePage - 1) / kHugePage * kHugePage + kHugePage;  // room to align
  void* address = mmap(nullptr, mapping->length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (address == MAP_FAILED) return 0;
  mapping->address = address;
  auto* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(address) + kHugePage - 1) / kHugePage * kHugePage);
  // Advice only: where the kernel has no huge pages to give, the weights are still in one mapping.
  madvise(base, mapping->length - kHugePage, MADV_HUGEPAGE);

  // One storage at a time, its old memory freed and handed back to the system before the next,
  // so that the process never holds two copies of the weights (a 7B model in float32 is 28 GB).
  torch::NoGradGuard no_grad;
  for (auto& [old_impl, group] : groups) {
    c10::Storage old = group.tensors.front().storage();
    const size_t nbytes = old.nbytes();
    char* data = base + group.offset;
    if (nbytes > 0) std::memcpy(data, old.data(), nbytes);
    auto* holder = new std::shared_ptr<HugePageMapping>(mapping);
    c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes,
                         c10::DataPtr(data, holder, &release_mapping_reference, c10::Device(c10::kCPU)),
                         /*allocator=*/nullptr, /*resizable=*/false);
    for (auto& t : group.tensors) {
      auto moved = torch::empty({0}, t.options().requires_grad(false));
      moved.set_(storage, t.storage_offset(), t.sizes(), t.strides());
      t.set_data(moved);
    }
    group.tensors.clear();
    old = c10::Storage();
#ifdef __GLIBC__
    if (nbytes >= (size_t{1} << 20)) malloc_trim(0);  // freed heap pages back to the system
#endif
  }
  return static_cast<int64_t>(total);
#else
  (void)module;
  return 0;
#endif
}

int64_t configure_threads(int64_t requested, std::string* note) {
  int64_t n = resolve_num_threads(requested, note);
  if (at::get_num_threads() != n) at::set_num_threads(static_cast<int>(n));
  return n;
}

int64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

c10::Device resolve_device(const std::string& name) {
  if (name == "auto") return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  if (name == "cpu") return torch::kCPU;
  if (name.rfind("cuda", 0) == 0) {
    if (!torch::cuda::is_available()) {
      throw std::runtime_error("device " + name + ": CUDA is not available (" +
                               std::string(TORCH_VERSION) + " here; build against a CUDA LibTorch, or use --device cpu)");
    }
    try {
      return torch::Device(name);
    } catch (const c10::Error&) {
      throw std::runtime_error("device '" + name + "': expected cuda or cuda:N");
    }
  }
  throw std::runtime_error("device '" + name + "': expected cpu, cuda, cuda:N or auto");
}

}  // namespace zoo
