#include "core/large_blocks.h"
#include "core/op_profile.h"
#include "core/runtime.h"

#include <dlfcn.h>

#include <cstdint>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/autograd/profiler_legacy.h>
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
  // The build says whether it has CUDA, whatever the machine has.
  const std::string cuda = at::globalContext().hasCUDART() ? " compiled in" : "CPU-only build";
  EXPECT_NE(torch_description().find(cuda), std::string::npos) << torch_description();
  EXPECT_NE(cpu_kernels_description().find("CPU kernels "), std::string::npos);
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

const OpTime* find_op(const std::vector<OpTime>& rows, const std::string& name) {
  for (const auto& row : rows)
    if (row.name == name) return &row;
  return nullptr;
}

// A worked example: a 2-D matmul is aten::matmul calling aten::mm once, three times over, then
// one add; the profile counts those calls, nests mm's time inside matmul's, and its self times
// add up to no more than the wall time.
TEST(OpProfile, CountsCallsAndNestsTimes) {
  auto a = torch::randn({256, 256}), b = torch::randn({256, 256});
  const auto start = std::chrono::steady_clock::now();
  const auto rows = profile_ops([&] {
    auto c = at::matmul(a, b);
    c = at::matmul(c, b);
    c = at::matmul(c, b);
    c = c + a;
  });
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const OpTime* matmul = find_op(rows, "aten::matmul");
  const OpTime* mm = find_op(rows, "aten::mm");
  const OpTime* add = find_op(rows, "aten::add");
  ASSERT_NE(matmul, nullptr);
  ASSERT_NE(mm, nullptr);
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(matmul->calls, 3);
  EXPECT_EQ(mm->calls, 3);
  EXPECT_EQ(add->calls, 1);
  EXPECT_GT(mm->self_ms, 0.0);
  EXPECT_GE(matmul->total_ms, mm->total_ms);
  EXPECT_NEAR(matmul->self_ms, matmul->total_ms - mm->total_ms, 1e-6);
  double self_sum = 0;
  for (const auto& row : rows) self_sum += row.self_ms;
  EXPECT_LE(self_sum, wall_ms);
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_GE(rows[i - 1].self_ms, rows[i].self_ms);
}

// Backward runs under the profile too (autograd's nodes and the ops they call).
TEST(OpProfile, FollowsBackward) {
  auto w = torch::randn({64, 64}, torch::requires_grad());
  auto x = torch::randn({8, 64});
  const auto rows = profile_ops([&] { at::mm(x, w).sum().backward(); });
  const OpTime* node = find_op(rows, "autograd::engine::evaluate_function: MmBackward0");
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->calls, 1);
  // x @ w: only w needs a gradient, so backward's one mm is x^T times the incoming gradient.
  EXPECT_EQ(find_op(rows, "aten::mm")->calls, 2);
}

// Reading a value back counts as a synchronisation (item and the _local_scalar_dense it calls),
// as does an op whose output size depends on the values; what ATen's CPU AdamW kernel alone
// reads (its step counts, which CUDA's reads on the device) is named after it and does not count.
TEST(OpProfile, CountsWhatWouldMakeTheHostWait) {
  const auto x = torch::tensor({1.0f, 0.0f, 2.0f});
  auto rows = profile_ops([&] { (void)x.sum().item<float>(); });
  EXPECT_EQ(synchronizing_calls(rows), 2) << describe_synchronizing(rows);
  rows = profile_ops([&] { (void)x.nonzero(); });
  EXPECT_EQ(synchronizing_calls(rows), 1) << describe_synchronizing(rows);
  rows = profile_ops([&] { (void)(x * 2).exp(); });
  EXPECT_EQ(synchronizing_calls(rows), 0);
  EXPECT_EQ(describe_synchronizing(rows), "none");
  EXPECT_GE(aten_calls(rows), 2);  // mul and exp, and what they call
  std::vector<torch::Tensor> p = {torch::randn({4})}, g = {torch::randn({4})}, m = {torch::zeros({4})},
                             v = {torch::zeros({4})}, steps = {torch::ones({})};
  rows = profile_ops([&] { torch::_fused_adamw_(p, g, m, v, {}, steps, 1e-3, 0.9, 0.99, 0.1, 1e-8, false, false); });
  EXPECT_EQ(synchronizing_calls(rows), 0) << describe_synchronizing(rows);
  EXPECT_NE(find_op(rows, "aten::item (in aten::_fused_adamw_)"), nullptr);
}

// Work that throws leaves the profiler off, and the error reaches the caller.
TEST(OpProfile, ThrowingWorkLeavesTheProfilerOff) {
  EXPECT_THROW(profile_ops([] { throw std::runtime_error("boom"); }), std::runtime_error);
  EXPECT_FALSE(torch::profiler::impl::profilerEnabled());
  EXPECT_NO_THROW(profile_ops([] { torch::ones({2}).sum(); }));
}

// Large blocks come in 2 MiB-aligned mappings, and a freed one is what the next request of its
// size gets; small ones stay with LibTorch's allocator; what is kept stays under its limit.
TEST(LargeBlocks, ReusesFreedBlocksAlignedForHugePages) {
  ASSERT_TRUE(install_large_block_allocator());
  ASSERT_TRUE(install_large_block_allocator());  // once is enough; again changes nothing
  release_cached_large_blocks();
  const LargeBlockStats start = large_block_stats();
  const int64_t n = (kLargeBlockBytes + (int64_t{3} << 20)) / 4;  // 35 MiB of floats
  const void* first = nullptr;
  {
    auto t = torch::full({n}, 2.0f);
    first = t.data_ptr();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % (uintptr_t{2} << 20), 0u);
    EXPECT_EQ(t.sum().item<double>(), 2.0 * static_cast<double>(n));
    EXPECT_EQ(large_block_stats().mapped, start.mapped + 1);
    EXPECT_EQ(large_block_stats().in_use_bytes, start.in_use_bytes + (int64_t{36} << 20));
  }
  EXPECT_EQ(large_block_stats().cached_bytes, int64_t{36} << 20);
  {
    auto t = torch::ones({n});  // a little smaller or larger would do too: within an eighth
    EXPECT_EQ(t.data_ptr(), first);
    EXPECT_EQ(t.sum().item<double>(), static_cast<double>(n));
    EXPECT_EQ(large_block_stats().reused, start.reused + 1);
    EXPECT_EQ(large_block_stats().cached_bytes, 0);
  }
  {
    auto small = torch::ones({1000});  // 4 kB: LibTorch's own allocator
    EXPECT_EQ(large_block_stats().in_use_bytes, start.in_use_bytes);
    EXPECT_EQ(large_block_stats().mapped, start.mapped + 1);
  }
  {
    auto twice = torch::empty({2 * n});  // 72 MiB: no kept block is within an eighth of it
    EXPECT_NE(twice.data_ptr(), first);
    EXPECT_EQ(large_block_stats().mapped, start.mapped + 2);
  }
  // Freed blocks beyond the limit are unmapped, the oldest first.
  {
    std::vector<torch::Tensor> many;
    for (int i = 0; i < 40; ++i) many.push_back(torch::empty({n}));  // 40 x 36 MiB, never touched
  }
  EXPECT_LE(large_block_stats().cached_bytes, kLargeBlockCacheBytes);
  EXPECT_GT(large_block_stats().cached_bytes, kLargeBlockCacheBytes - (int64_t{36} << 20));
  // raw_allocate's pointers of both sizes go back through raw_deleter.
  c10::Allocator* allocator = c10::GetCPUAllocator();
  for (size_t bytes : {size_t{64}, static_cast<size_t>(kLargeBlockBytes)}) {
    void* p = allocator->raw_allocate(bytes);
    ASSERT_NE(p, nullptr);
    static_cast<char*>(p)[bytes - 1] = 1;
    allocator->raw_deleter()(p);
  }
  release_cached_large_blocks();
  EXPECT_EQ(large_block_stats().cached_bytes, 0);
  EXPECT_EQ(large_block_stats().in_use_bytes, start.in_use_bytes);
}

// PyPI's LibTorch exports copies of std::filesystem (2.11 from libtorch.so, 2.15 from
// libtorch_cpu.so); zoo's programs must bind the system libstdc++'s (2.11's remove_all jumped to
// address 0 on a failed run's cleanup). A program's calls bind to the first definition in the
// global scope, which is what dlvsym(RTLD_DEFAULT) finds.
TEST(Runtime, StdFilesystemBindsToTheSystemLibstdcxx) {
  for (const char* symbol : {"_ZNSt10filesystem10remove_allERKNS_7__cxx114pathERSt10error_code",
                             "_ZNSt10filesystem18create_directoriesERKNS_7__cxx114pathE"}) {
    SCOPED_TRACE(symbol);
    void* address = dlvsym(RTLD_DEFAULT, symbol, "GLIBCXX_3.4.26");
    ASSERT_NE(address, nullptr);
    Dl_info info{};
    ASSERT_NE(dladdr(address, &info), 0);
    EXPECT_NE(std::string(info.dli_fname).find("libstdc++"), std::string::npos) << info.dli_fname;
  }
}

}  // namespace
}  // namespace zoo
