#pragma once
// Helpers shared by the tests: tolerances, devices, and reference data from PyTorch.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base_test_util.h"
#include "layers/variants.h"
#include "models/config.h"

namespace zoo {
// Readable test names and messages for parameterised tests over variants.
inline void PrintTo(AttentionBackend v, std::ostream* os) { *os << to_string(v); }
inline void PrintTo(RopeLayout v, std::ostream* os) { *os << to_string(v); }
}  // namespace zoo

namespace zoo::testing {

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return INFINITY;
  return (a.to(torch::kDouble).cpu() - b.to(torch::kDouble).cpu()).abs().max().item<double>();
}

// gtest assertion: tensors have the same shape and differ by at most `tol` anywhere.
#define EXPECT_ALLCLOSE(a, b, tol) EXPECT_LE(::zoo::testing::max_abs_diff((a), (b)), (tol))

// Runs tests/reference/<script> with the test environment's Python (PyTorch 2.15, transformers) and returns
// the tensors it saved, by name. The script writes a TorchScript module whose buffers are the
// tensors (names with '.' stored as '__'), which C++ reads back with torch::jit::load.
std::map<std::string, torch::Tensor> python_reference(const std::string& script,
                                                      const std::vector<std::string>& args = {});

// `config` small enough to build in moments, its variants kept: at most 1000 tokens of
// vocabulary, 2 layers (3 decoder layers), d_model and d_ff halved until d_model is 1024 or less.
ModelConfig at_test_size(ModelConfig config);

// The tiny config the model, serve and layer tests build from: `family` with a vocabulary of 97,
// d_model 32, 2 layers of 4 heads, d_ff 64, 64 positions and no dropout; then `overrides`
// ("key=value", as zoo's command line takes them) in order.
ModelConfig tiny_config(const std::string& family, const std::vector<std::string>& overrides = {});

// Copies `source` into the parameter or buffer `name` of `module` (shapes must match).
void copy_into(torch::nn::Module& module, const std::string& name, const torch::Tensor& source);

// Copies every parameter and buffer of `source` into the same-named one of `target`.
void copy_parameters(torch::nn::Module& target, const torch::nn::Module& source);

// Devices to run device-parameterised tests on; CUDA tests skip themselves when absent.
std::vector<std::string> test_devices();
// Skips the current test when `device` is CUDA and no GPU is present.
#define ZOO_SKIP_IF_UNAVAILABLE(device)                                        \
  do {                                                                         \
    if ((device) == "cuda" && !torch::cuda::is_available())                    \
      GTEST_SKIP() << "CUDA is not available";                                 \
  } while (0)

}  // namespace zoo::testing
