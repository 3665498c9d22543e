#include "core/runtime.h"

#include <cstdlib>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace zoo {
namespace {

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(Runtime, ThreadsDefaultToTheAvailableCpus) {
  ScopedEnv env("ZOO_NUM_THREADS", nullptr);
  EXPECT_GE(available_cpus(), 1);
  EXPECT_EQ(resolve_num_threads(), available_cpus());
}

TEST(Runtime, ExplicitRequestBeatsEnvironment) {
  ScopedEnv env("ZOO_NUM_THREADS", "1");
  EXPECT_EQ(resolve_num_threads(), 1);
  EXPECT_EQ(resolve_num_threads(available_cpus()), available_cpus());
}

// More threads than CPUs only contend; 100000 would start 100000 threads (it hung before).
TEST(Runtime, CountsAboveTheCpusAreCappedWithANote) {
  ScopedEnv env("ZOO_NUM_THREADS", nullptr);
  std::string note;
  EXPECT_EQ(resolve_num_threads(100000, &note), available_cpus());
  EXPECT_EQ(note, "--threads 100000 exceeds the " + std::to_string(available_cpus()) +
                      " CPUs this process may use; using " + std::to_string(available_cpus()) + " threads");
  ScopedEnv lots("ZOO_NUM_THREADS", "5000");
  note.clear();
  EXPECT_EQ(resolve_num_threads(0, &note), available_cpus());
  EXPECT_NE(note.find("ZOO_NUM_THREADS 5000 exceeds"), std::string::npos) << note;
  note.clear();
  EXPECT_EQ(resolve_num_threads(1, &note), 1);
  EXPECT_TRUE(note.empty()) << note;
}

TEST(Runtime, ConfigureSetsLibTorchThreads) {
  ScopedEnv env("ZOO_NUM_THREADS", nullptr);
  const int64_t all = available_cpus();
  EXPECT_EQ(configure_threads(all), all);
  EXPECT_EQ(at::get_num_threads(), all);
  configure_threads(1);
  EXPECT_EQ(at::get_num_threads(), 1);
}

TEST(Runtime, BadEnvironmentValueIsNamed) {
  for (const char* bad : {"0", "-2", "two", "4x"}) {
    ScopedEnv env("ZOO_NUM_THREADS", bad);
    try {
      resolve_num_threads();
      FAIL() << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("ZOO_NUM_THREADS must be a positive integer, got '") + bad + "'");
    }
  }
}

TEST(Runtime, DescribesVersions) {
  EXPECT_FALSE(version().empty());
  EXPECT_NE(torch_description().find(TORCH_VERSION), std::string::npos);
}

}  // namespace
}  // namespace zoo
