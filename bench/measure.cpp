#include "bench/measure.h"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <stdexcept>
#include <string>

#include <ATen/DeviceAccelerator.h>
#include <torch/cuda.h>

#include "core/large_blocks.h"

namespace zoo::bench {
namespace {

// The GPU `device` names: "cuda" is the current one, device 0 (LibTorch refuses index -1 there).
c10::DeviceIndex gpu_index(const c10::Device& device) { return device.has_index() ? device.index() : 0; }

}  // namespace

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  if (values.empty()) throw std::invalid_argument("median of no values");
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(gpu_index(device));
}

double median_seconds(int64_t warmup, int64_t runs, const std::function<void()>& work, const c10::Device& device) {
  for (int64_t i = 0; i < warmup; ++i) work();
  synchronize(device);
  std::vector<double> times;
  for (int64_t i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    work();
    synchronize(device);
    times.push_back(seconds_since(start));
  }
  return median(std::move(times));
}

double rss_mb() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1048576.0;
}

double peak_rss_mb() {
  // VmHWM, which reset_peak_rss resets (getrusage's maximum is the same figure until then).
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  }
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

void reset_peak_rss() {
  release_cached_large_blocks();
  malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
}

double gpu_allocated_mb(const c10::Device& device, bool peak) {
  const auto stats = at::accelerator::getDeviceStats(gpu_index(device));
  const auto& bytes = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  return static_cast<double>(peak ? bytes.peak : bytes.current) / 1048576.0;
}

}  // namespace zoo::bench
