#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "core/runtime.h"
#include "test_util.h"

namespace zoo::testing {

std::map<std::string, torch::Tensor> python_reference(const std::string& script,
                                                      const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  const fs::path source = fs::path(ZOO_SOURCE_DIR) / "tests" / "reference" / script;
  const fs::path out =
      fs::temp_directory_path() /
      ("zoo_ref_" + fs::path(script).stem().string() + "_" + std::to_string(::getpid()) + "_" +
       std::to_string(std::rand()) + ".pt");
  std::string cmd = reference_python() + " '" + source.string() + "' '" + out.string() + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  if (std::system(cmd.c_str()) != 0) {
    throw std::runtime_error("reference script failed: " + cmd);
  }
  auto module = torch::jit::load(out.string());
  fs::remove(out);
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& b : module.named_buffers(/*recurse=*/false)) {
    std::string name = b.name;
    for (size_t p; (p = name.find("__")) != std::string::npos;) name.replace(p, 2, ".");
    tensors[name] = b.value;
  }
  return tensors;
}

ModelConfig tiny_config(const std::string& family, const std::vector<std::string>& overrides) {
  auto config = parse_config("family: " + family + R"(
vocab_size: 97
d_model: 32
n_layers: 2
n_heads: 4
d_ff: 64
max_positions: 64
dropout: 0.0
attention_dropout: 0.0
)");
  apply_overrides(config, overrides);
  return config;
}

ModelConfig at_test_size(ModelConfig c) {
  if (c.vocab_size > 1000) c.vocab_size = 1000;
  c.pad_id = std::min(c.pad_id, c.vocab_size - 1);  // a real vocabulary's pad (Phi-3's 32000)
  while (c.d_model > 1024) c.d_model /= 2, c.d_ff /= 2;  // heads keep their count, narrower
  if (c.n_layers > 2) c.n_layers = 2;
  if (!c.window_layers.empty()) c.window_layers = {0};  // Gemma: layer 0 slides, layer 1 attends to every key
  if (c.experts > 0) {  // a few narrower experts, still sparse
    c.expert_d_ff = std::min<int64_t>(c.resolved_expert_d_ff(), 512);
    c.experts = std::min<int64_t>(c.experts, 4), c.experts_per_token = std::min<int64_t>(c.experts_per_token, 2);
    c.dense_layers.clear();
  }
  if (c.encoder_layers > 2) c.encoder_layers = 2;
  if (c.decoder_layers > 3) c.decoder_layers = 3;
  return c;
}

void copy_into(torch::nn::Module& module, const std::string& name, const torch::Tensor& source) {
  torch::NoGradGuard no_grad;
  auto params = module.named_parameters();
  if (auto* p = params.find(name)) {
    ASSERT_EQ(p->sizes(), source.sizes()) << name;
    p->copy_(source);
    return;
  }
  auto buffers = module.named_buffers();
  if (auto* b = buffers.find(name)) {
    ASSERT_EQ(b->sizes(), source.sizes()) << name;
    b->copy_(source);
    return;
  }
  FAIL() << "no parameter or buffer named " << name;
}

void copy_parameters(torch::nn::Module& target, const torch::nn::Module& source) {
  for (const auto& p : source.named_parameters()) copy_into(target, p.key(), p.value());
  for (const auto& b : source.named_buffers()) copy_into(target, b.key(), b.value());
}

std::vector<std::string> test_devices() { return {"cpu", "cuda"}; }

}  // namespace zoo::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // Writes past a file-size limit fail with EFBIG (as in zoo's main) instead of a signal.
  std::signal(SIGXFSZ, SIG_IGN);
  // ctest runs two test processes at once on a 2-core machine: one thread each.
  zoo::configure_threads(1);
  torch::manual_seed(0);
  return RUN_ALL_TESTS();
}
