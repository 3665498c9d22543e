#pragma once
// Any family behind one handle, for what does not care which: parameter counts, moving between
// devices, training, checkpoints and export.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "kernels/quantized_weight.h"
#include "models/bert.h"
#include "models/config.h"
#include "models/gpt.h"
#include "models/lora.h"
#include "models/t5.h"

namespace zoo {

struct Model {
  ModelConfig config;
  GPT gpt{nullptr};                  // family gpt
  Bert bert{nullptr};                // family bert
  EncoderDecoder seq2seq{nullptr};   // families t5, transformer
  // Set when LoRA adapters are attached: what a checkpoint of the model records about them.
  std::optional<LoraState> lora;
  // Set when its weights are quantized (quantize_model): what a checkpoint of it records.
  std::optional<WeightQuantization> quantization;

  std::shared_ptr<torch::nn::Module> module() const;
  // Activation checkpointing of every block stack in training (kernels/recompute.h).
  void set_activation_checkpointing(bool on);
};

// Throws ConfigError stating the size, and the key that makes it, when the weights of `config`
// alone (float32) exceed `memory` bytes (this machine's, physical_memory_bytes(); 0 = unknown):
// said before anything is allocated, rather than by the allocator.
void check_fits_in_memory(const ModelConfig& config, int64_t memory);

// Builds the family `config` names. The one place a config is validated before modules are
// built (the modules trust it), and its size checked against memory.
Model build_model(const ModelConfig& config);

// Quantizes the model's weights in place (quantize_model_weights) and records how in
// model.quantization (a model with adapters keeps them, on the quantized base). A model quantized
// already is refused.
QuantizeSummary quantize_model(Model& model, const WeightQuantization& quantization);

// A quantized model's float32 twin: a fresh model of its config (with its LoRA adapters), every
// weight dequantized into it and every other tensor copied (what the exports write of a
// quantized checkpoint).
Model dequantized_model(const Model& model);

// Distinct parameters (a tied matrix counts once).
int64_t count_parameters(const torch::nn::Module& module);
// Parameters under each top-level child, and in the module itself, in registration order.
std::vector<std::pair<std::string, int64_t>> parameter_breakdown(const torch::nn::Module& module);
// A few lines naming the architecture: family, sizes, variants.
std::string describe(const ModelConfig& config);

}  // namespace zoo
