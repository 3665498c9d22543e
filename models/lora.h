#pragma once
// LoRA on a whole model: which projections get adapters (targets matched against projection
// names such as "blocks.3.self_attn.q" or "encoder_blocks.0.ff.up"), attaching them, freezing
// the rest, merging them back into the weights, and what a LoRA checkpoint records about the
// base it adapts. The adapter itself is layers/lora.h.

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "layers/lora.h"
#include "models/lora_config.h"

namespace zoo {

struct Model;

// One adaptable projection of a model, by its name: a linear's rows, or one weight of every
// expert of a mixture (gate_up, down; part.projection null, `in` their input width).
struct NamedProjection {
  std::string name;  // e.g. blocks.3.self_attn.q, blocks.1.moe.gate_up
  std::shared_ptr<torch::nn::Module> owner;
  ProjectionPart part;
  bool experts = false;
  int64_t in = 0;
};
std::vector<NamedProjection> projection_names(const Model& model);
// The projections `config.targets` selects, in the model's order. Throws ConfigError naming
// lora.targets (listing the model's projection names) for a pattern that matches nothing.
std::vector<const NamedProjection*> lora_targets(const std::vector<NamedProjection>& projections,
                                                 const LoraConfig& config);

// Attaches adapters to every projection `config.targets` selects and returns their names.
// Throws ConfigError naming lora.targets (listing the model's projection names) for a pattern
// that matches nothing, and lora.rank for a rank the smallest adapted projection cannot hold.
std::vector<std::string> attach_lora(Model& model, const LoraConfig& config);

// Whether `name` (a parameter's registered name) belongs to an adapter.
bool is_adapter_tensor(const std::string& name);

// Adds every adapter's update into its weights and removes the adapters: the model computes
// the same, as a plain model (export).
void merge_lora(Model& model);

// A new LoRA run's state: adapters on the checkpoint `base_dir` (refused when it holds adapters
// itself), recorded by its canonical path (the step directory, not a moving `last` link) and
// its model.pt's hash; `trained` lists the model's tensors trained in full besides.
LoraState new_lora_state(const std::string& base_dir, const LoraConfig& config, std::vector<std::string> trained);

// Serving several adapters on one base (serve/adapter_bank.h) ---------------------------------

// One adapter's update of one projection: A (r, in), B (rows, r) with its scale folded in.
struct ProjectionUpdate {
  std::string name;  // the projection's (blocks.0.self_attn.q)
  torch::Tensor A, B;
};

// Every adaptable module of `model` reads its served adapters' slots from `rows`.
void read_adapter_rows(Model& model, const std::shared_ptr<const AdapterRows>& rows);
// The served adapters' stacks by projection name (A (S, r, in), B (rows, S, r)); a projection
// not named serves none.
void serve_adapter_stacks(Model& model, const std::map<std::string, std::pair<torch::Tensor, torch::Tensor>>& stacks);

// Attaches `state`'s adapters, freezes every tensor but the adapters and state.trained, sets
// model.lora and says what it did to `log`.
void train_lora(Model& model, LoraState state, std::ostream& log);


}  // namespace zoo
