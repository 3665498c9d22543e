#pragma once
// Checkpoints: a directory per save, written whole under a temporary name and renamed into
// place, so a crash never leaves a half-written checkpoint where a resume would look.
//   model.pt        weights by registered name (torch::serialize archive)
//   optimizer.pt    optimizer state (when given)
//   config.yaml     the resolved model config
//   tokenizer.model the tokenizer the model was trained with, when it is zoo's own; a Hugging Face
//                   tokenizer's files are in tokenizer/ instead (tokenizers/tokenizer.h, store_tokenizer)
//   lora.json       LoRA runs only: the adapters' config and the base checkpoint they adapt (path
//                   and hash); model.pt then holds the adapters (and any tensor trained besides)
//   quantization.json  quantized checkpoints only (zoo quantize, import-hf --quantize): the
//                   format, group size and whether the token embedding is quantized; model.pt
//                   then holds each quantized weight as its integers, scales and zeros
//                   (kernels/quantized_weight.h) in place of the float one
//   state.json      what the trainer needs to continue (step, data position, RNG, schedule, ...)

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <vector>
#include <string>

#include <c10/util/Optional.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "core/enum_names.h"
#include "models/model.h"
#include "tokenizers/tokenizer.h"

namespace zoo {

// The weights' type a command decodes or writes with. auto keeps the checkpoint's own: bf16 where
// its model.pt stores bf16 (an import of a bf16 Hugging Face model), float32 otherwise. Training
// always holds float32 master weights, whatever the checkpoint stores.
enum class WeightsDtype { kAuto, kFloat32, kBFloat16 };
ZOO_ENUM_NAMES(WeightsDtype, "weights dtype", {"auto", WeightsDtype::kAuto}, {"fp32", WeightsDtype::kFloat32},
               {"bf16", WeightsDtype::kBFloat16});

// `requested`, or for auto the type `stored` (kBFloat16 or kFloat).
torch::ScalarType resolve_weights_dtype(WeightsDtype requested, torch::ScalarType stored);

// `extra_files` (name -> contents) go into the directory too: the run config, a label set.
void save_checkpoint(const std::string& dir, const Model& model, const torch::optim::Optimizer* optimizer,
                     const Tokenizer* tokenizer, const nlohmann::json& state,
                     const std::map<std::string, std::string>& extra_files = {});

struct Checkpoint {
  std::string dir;
  Model model;
  nlohmann::json state;
  std::shared_ptr<const Tokenizer> tokenizer;  // null when the checkpoint has none
  // What model.pt stores its weights in (a LoRA checkpoint: its base's): kBFloat16 when every
  // floating parameter is bf16, else kFloat. The model itself is loaded in float32.
  torch::ScalarType stored_dtype = torch::kFloat;
};

// Rebuilds the model from config.yaml and loads its weights. With `expected`, a checkpoint of
// another family is refused. Errors name the file and the mismatch: a missing or corrupt file,
// missing or unexpected tensors, a tensor whose shape differs from the model's, a quantized
// weight's bad scales or zeros (check_quantized_weights).
Checkpoint load_checkpoint(const std::string& dir, std::optional<Family> expected = std::nullopt);

// What quantization.json says, or nullopt for a checkpoint without one (float weights). Errors
// name the file and the key: corrupt JSON, an unknown key, a format or group size zoo lacks.
std::optional<WeightQuantization> read_quantization(const std::string& dir);

// A line on what DIR/model.pt holds, for zoo info: its tensors' bytes, and for a model of
// `parameters` parameters (those of its config) the bytes per parameter, with the quantization
// (or the float type) they are stored in.
std::string describe_stored_weights(const std::string& dir, int64_t parameters);

// Throws naming the checkpoint when it is quantized: for what needs float weights (`what`, such
// as "training all its weights"), with the ways round it.
void refuse_quantized(const Checkpoint& checkpoint, const std::string& what);

// Restores optimizer.pt into an optimizer built over the loaded model's parameters.
// Its tensors go to `device` (the parameters').
void load_optimizer_state(const std::string& dir, torch::optim::Optimizer& optimizer,
                          const torch::Device& device = torch::kCPU);

// The CPU generator's state (what dropout draws from) as hex, the form state.json keeps it in, so
// a resumed run draws the same masks; restore_cpu_generator sets it back, naming `where` when
// the text is not hex or not a state this LibTorch's generator takes.
std::string cpu_generator_state();
void restore_cpu_generator(const std::string& hex, const std::string& where);

// Throws naming `what` (a file and a tensor) when the floating tensor `value` holds NaN or
// infinity: weights like that are refused as they are read, rather than found by generation.
void check_finite(const torch::Tensor& value, const std::string& what);

// The weights file alone: every parameter and buffer by name (those `keep` accepts).
void save_weights(const std::string& path, const torch::nn::Module& module,
                  const std::function<bool(const std::string&)>& keep = nullptr);
// Loads the module's tensors that `wanted` accepts (all by default): each must be in the file
// with the module's shape and finite (check_finite), and is converted to the module's type; other tensors in the file are
// an error unless `extra_allowed`. Returns the type the file stores them in (as stored_dtype).
torch::ScalarType load_weights(const std::string& path, torch::nn::Module& module,
                  const std::function<bool(const std::string&)>& wanted = nullptr, bool extra_allowed = false);

// A LoRA checkpoint's weights into `model`, whose adapters are attached and whose `lora` is the
// checkpoint's lora.json: the base's tensors from its model.pt (refused when its hash differs
// from the recorded one, or it is gone), then the adapters and trained tensors from DIR/model.pt.
// Returns the type the base stores its weights in.
torch::ScalarType load_lora_weights(const std::string& dir, Model& model);

// Starts `model` from the checkpoint at `path` (a LoRA checkpoint merged into its base first):
// copies every tensor the two share. Head tensors whose shape changed (another number of labels)
// and tensors the checkpoint lacks keep their fresh init, and are returned; another family, or
// another shape of any other tensor, is an error naming the checkpoint and the tensor. Says to
// `log` what it initialized and what it did not use.
// With `frozen_base` (a LoRA run), a quantized checkpoint is taken as it is: `model` gets its
// layout and integers (QLoRA); without, or for a LoRA checkpoint on one, it is refused.
std::vector<std::string> initialize_from_checkpoint(Model& model, const std::string& path, std::ostream& log,
                                                    bool frozen_base = false);

}  // namespace zoo
