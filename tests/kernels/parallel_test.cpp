#include "kernels/parallel.h"

#include <atomic>
#include <set>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace zoo {
namespace {

// Two intra-op threads for one test (the suite runs one per process), then back.
struct TwoThreads {
  TwoThreads() : before(at::get_num_threads()) { at::set_num_threads(2); }
  ~TwoThreads() { at::set_num_threads(before); }
  int before;
};

TEST(ParallelFor, WorkersRunInTheCallersInferenceModeAndGradMode) {
  TwoThreads two;
  c10::InferenceMode inference;
  auto out = torch::zeros({256});  // an inference tensor: in-place writes need InferenceMode
  std::mutex mutex;
  std::set<std::thread::id> threads;
  std::atomic<int> outside{0};
  parallel_for(0, 256, 1, [&](int64_t begin, int64_t end) {
    if (!c10::InferenceMode::is_enabled() || c10::GradMode::is_enabled()) ++outside;
    out.narrow(0, begin, end - begin).fill_(1.0);
    std::lock_guard lock(mutex);
    threads.insert(std::this_thread::get_id());
  });
  // With one thread the test would prove nothing: the caller's own thread has its state anyway.
  ASSERT_GE(threads.size(), 2u) << "the work never reached a second thread";
  EXPECT_EQ(outside.load(), 0);
  EXPECT_TRUE(out.eq(1.0).all().item<bool>());
}

}  // namespace
}  // namespace zoo
