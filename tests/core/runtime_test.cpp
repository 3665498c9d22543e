#include "core/runtime.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>

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

// The /proc/self/smaps entry of the mapping that holds `address`: its range line and VmFlags.
std::string mapping_of(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(address);
  bool inside = false;
  std::string entry;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-' && line.find(':') > line.find(' ')) {
      if (inside) return entry;
      inside = begin <= at && at < end;
      entry = line;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) entry += "\n" + line;
  }
  return inside ? entry : "";
}

struct TiedPair : torch::nn::Module {
  TiedPair() {
    up = register_module("up", torch::nn::Linear(64, 300));
    down = register_module("down", torch::nn::Linear(300, 64));
    tied = register_parameter("tied", up->weight);                     // the same tensor twice
    rows = register_buffer("rows", down->weight.detach().narrow(0, 2, 8));  // a view of another's storage
    steps = register_buffer("steps", torch::arange(5));
  }
  torch::Tensor forward(const torch::Tensor& x) { return down(torch::relu(up(x))) + rows.sum(); }
  torch::nn::Linear up{nullptr}, down{nullptr};
  torch::Tensor tied, rows, steps;
};

// Weights moved into one mapping advised for 2 MiB pages compute what they computed, stay tied
// and trainable, and the mapping is unmapped with the last of them.
TEST(Runtime, PlacesWeightsInOneHugePageMapping) {
  torch::manual_seed(0);
  auto model = std::make_shared<TiedPair>();
  const auto x = torch::randn({3, 64});
  const auto before = model->forward(x).detach();
  const int64_t placed = place_in_huge_pages(*model);
  // Each storage once: up (weight, bias), down (weight, bias), steps; tied and rows add nothing.
  EXPECT_GE(placed, (64 * 300 + 300 + 300 * 64 + 64) * 4 + 5 * 8);
  EXPECT_LT(placed, (64 * 300 + 300 + 300 * 64 + 64) * 4 + 5 * 8 + 5 * 64);
  EXPECT_TRUE(torch::equal(model->forward(x).detach(), before));
  EXPECT_EQ(model->tied.data_ptr(), model->up->weight.data_ptr());
  EXPECT_EQ(static_cast<char*>(model->rows.data_ptr()),
            static_cast<char*>(model->down->weight.data_ptr()) + 2 * 300 * sizeof(float));
  const auto mapping = mapping_of(model->up->weight.data_ptr());
  EXPECT_EQ(mapping, mapping_of(model->steps.data_ptr()));
  EXPECT_NE(mapping.find("VmFlags:"), std::string::npos) << mapping;
  EXPECT_NE(mapping.find(" hg"), std::string::npos) << mapping;  // madvise(MADV_HUGEPAGE)
  EXPECT_TRUE(model->up->weight.requires_grad());
  EXPECT_FALSE(model->steps.requires_grad());
  model->forward(x).sum().backward();
  EXPECT_TRUE(model->up->weight.grad().defined());

  const void* address = model->up->weight.data_ptr();
  model.reset();
  EXPECT_EQ(mapping_of(address), "");

  torch::nn::Module empty;
  EXPECT_EQ(place_in_huge_pages(empty), 0);
}

}  // namespace
}  // namespace zoo
