#include "core/runtime.h"

#include <malloc.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <torch/torch.h>

namespace zoo {

std::string version() { return ZOO_VERSION; }

std::string torch_description() {
  std::string s = std::string("LibTorch ") + TORCH_VERSION;
  s += torch::cuda::is_available()
           ? ", CUDA available (" + std::to_string(torch::cuda::device_count()) + " devices)"
           : ", no CUDA device";
  return s;
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
  return ok;
#else
  return false;
#endif
}

int64_t configure_threads(int64_t requested, std::string* note) {
  int64_t n = resolve_num_threads(requested, note);
  if (at::get_num_threads() != n) at::set_num_threads(static_cast<int>(n));
  return n;
}

std::string describe_bytes(double bytes) {
  const char* units[] = {"bytes", "kB", "MB", "GB", "TB", "PB"};
  int unit = 0;
  while (bytes >= 1000 && unit < 5) bytes /= 1000, ++unit;
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

std::string loaded_library(const std::string& prefix) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const auto name = path.substr(path.rfind('/') + 1);
    if (name.rfind(prefix, 0) == 0) return path;
  }
  return "";
}

int64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

}  // namespace zoo
