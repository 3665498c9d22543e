#pragma once
// Any family behind one handle, for what does not care which: zoo info, parameter counts,
// moving between devices, and (later) training and export.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "models/bert.h"
#include "models/config.h"
#include "models/gpt.h"
#include "models/t5.h"

namespace zoo {

struct Model {
  ModelConfig config;
  GPT gpt{nullptr};                  // family gpt
  Bert bert{nullptr};                // family bert
  EncoderDecoder seq2seq{nullptr};   // families t5, transformer

  std::shared_ptr<torch::nn::Module> module() const;
};

// Builds the family `config` names (config is validated first).
Model build_model(const ModelConfig& config);

// Distinct parameters (a tied matrix counts once).
int64_t count_parameters(const torch::nn::Module& module);
// Parameters under each top-level child, and in the module itself, in registration order.
std::vector<std::pair<std::string, int64_t>> parameter_breakdown(const torch::nn::Module& module);
// A few lines naming the architecture: family, sizes, variants.
std::string describe(const ModelConfig& config);

}  // namespace zoo
