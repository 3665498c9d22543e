#pragma once
// Hugging Face model directories (config.json + model.safetensors, or shards with
// model.safetensors.index.json) for GPT-2, BERT (base, masked LM, next sentence, pretraining,
// sequence and token classification) and T5 (v1.0, v1.1), to and from zoo models.
//
// One table per family says which Hugging Face tensors make each zoo parameter: several
// concatenated along rows (BERT's and T5's separate q/k/v into zoo's fused projection), or one
// transposed (GPT-2's Conv1D stores (in, out)). Import reads it one way, export the other.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "interop/hf_model_config.h"
#include "models/model.h"
#include "tokenizers/tokenizer.h"

namespace zoo {

// One zoo parameter made of Hugging Face tensors: concatenated along rows, each transposed
// first when `transpose` (Conv1D). `rows` gives each part's rows where they differ (grouped-
// query q, k, v); empty for equal parts. Or the other way: with `of` > 1, the parameter is block
// `block` of `of` equal row blocks of the one tensor in `hf` (Phi-3's gate_up_proj holds gate
// then up). With `stacked`, the parts' concatenation is viewed in the parameter's shape: a
// mixture's (E, 2F, D) gate_up from each expert's gate and up, in expert order. `whole`, where
// set, names one tensor that holds the whole parameter as it is (transformers 5's fused
// experts.gate_up_proj), which import reads when the parts are not there. `skip_rows`: the file's
// tensor has that many leading rows more than the parameter, which import drops and export
// writes as zeros (RoBERTa's and Longformer's position tables, whose rows up to pad_token_id no
// real token reads).
struct HfTensorMap {
  std::string zoo;
  std::vector<std::string> hf;
  bool transpose = false;
  std::vector<int64_t> rows;
  int64_t block = 0, of = 1;
  bool stacked = false;
  std::string whole;
  int64_t skip_rows = 0;
};

// The table export_hf writes `config` by (the base model under its head's prefix: GPT2LMHeadModel's
// "transformer.", BERT's "bert." with a head).
std::vector<HfTensorMap> hf_tensor_maps(const ModelConfig& config);

// The prefix hf_tensor_maps puts the base model's tensors under ("transformer.", "bert.",
// "model.", or none).
std::string hf_base_prefix(const ModelConfig& config);

// Every tensor of DIR/model.safetensors, or of the shards DIR/model.safetensors.index.json lists.
std::map<std::string, torch::Tensor> read_hf_weights(const std::string& dir);

struct HfImportReport {
  std::vector<std::string> unexpected;  // in the files, not used by the model
  std::vector<std::string> ignored;     // known extras: tied copies, mask buffers
  // kBFloat16 when every tensor the model took was stored in bf16 (the model holds float32
  // copies either way), else kFloat.
  torch::ScalarType stored_dtype = torch::kFloat;
};

// Builds the model config.json describes and fills it from the weights. A tensor the model
// needs and the files lack is an error naming it; a shape mismatch names the tensor and both
// shapes; tensors the model does not use are listed in `report`.
Model import_hf(const std::string& dir, HfImportReport* report = nullptr);

// Writes DIR/config.json and DIR/model.safetensors in Hugging Face's layout (atomically each).
// With a tokenizer, its files go beside the weights (a Hugging Face tokenizer's as it read them,
// zoo's own as tokenizer.model) and config.json names its special tokens' ids. The tensors are
// written in `dtype` (kFloat or kBFloat16), which config.json's torch_dtype names.
void export_hf(const Model& model, const std::string& dir, const Tokenizer* tokenizer = nullptr,
               torch::ScalarType dtype = torch::kFloat);

}  // namespace zoo
