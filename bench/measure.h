#pragma once
// How zoo bench measures: the median time of repeated runs, each ending when the device is done,
// and memory (resident now, resident at peak, the GPU caching allocator's). The workloads
// (bench/workloads.h) time themselves with these; scripts/bench_pytorch.py measures the same way.

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include <c10/core/Device.h>

namespace zoo::bench {

using Clock = std::chrono::steady_clock;

// Seconds from `start` until now.
double seconds_since(Clock::time_point start);

// The median of `values` (not empty); of an even count the upper of the two middle values, so
// the result is always a time that was measured rather than the mean of two.
double median(std::vector<double> values);

// Waits for the work queued on `device` (a GPU runs it asynchronously), so that a timing ends
// when the work does; nothing on the CPU.
void synchronize(const c10::Device& device);

// The median of `runs` timings of `work`, in seconds, after `warmup` untimed calls; each timing
// ends when `device` is done.
double median_seconds(int64_t warmup, int64_t runs, const std::function<void()>& work,
                      const c10::Device& device = c10::Device(c10::kCPU));

// This process's resident memory now, in MB (/proc/self/statm).
double rss_mb();

// The most resident memory this process has held, in MB (VmHWM), or since reset_peak_rss.
double peak_rss_mb();
// Sets the peak to what is resident now (Linux's /proc/self/clear_refs), freed memory returned
// first (the large blocks kept for reuse, glibc's free heap pages): the peak from here on is the steps' own, not that of a float32
// model built and then converted or quantized before them.
void reset_peak_rss();

// The GPU caching allocator's bytes in use on `device` now (or with `peak`, the most it has held
// at once), in MB.
double gpu_allocated_mb(const c10::Device& device, bool peak = false);

}  // namespace zoo::bench
