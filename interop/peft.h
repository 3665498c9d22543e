#pragma once
// LoRA adapters in Hugging Face PEFT's layout: a directory with adapter_config.json and
// adapter_model.safetensors, whose tensors are named after the base model's Hugging Face modules
// (base_model.model.<module>.lora_A.weight (r, in) and .lora_B.weight (out, r)) and whose update is
// (lora_alpha / r) · B A, per module where rank_pattern / alpha_pattern say so.
//
// zoo's adapters map onto those modules through the Hugging Face tensor tables
// (interop/hugging_face.h): an adapter on a part of zoo's fused q/k/v is PEFT's q_proj / query
// adapter where Hugging Face keeps q, k and v apart (LLaMA, BERT, T5). GPT-2 keeps them fused
// (c_attn), so its q and v adapters become one c_attn adapter of their summed rank, A stacked and
// B block-diagonal over the q and v rows: the same update, exactly.

#include <string>
#include <vector>

#include "models/lora.h"
#include "models/model.h"

namespace zoo {

// Writes DIR (atomically, a directory zoo recognises as its own export) from a model with
// adapters attached. Base-model tensors trained in full (a fresh classifier) go in as PEFT's
// modules_to_save.
void export_peft(const Model& model, const std::string& dir);

// The PEFT adapter directory `dir` on the base checkpoint `base_dir` (a plain zoo checkpoint of
// the model the adapters were trained on): the base model with adapters attached and loaded,
// its `lora` naming the base by path and hash. Errors name the file and the tensor or key:
// another PEFT method, DoRA, trained biases, a module the model does not have, shapes that do not
// fit it.
Model import_peft(const std::string& dir, const std::string& base_dir);

// The PEFT adapter directory `dir`'s updates onto `base`'s projections (each scale folded into its
// B), for serving beside others on that base (serve/adapter_bank.h). Refused as import_peft
// refuses, and when the adapter trains base tensors in full (modules_to_save) or a mixture's
// experts, which one base cannot share.
std::vector<ProjectionUpdate> read_peft_updates(const std::string& dir, Model& base);

// Whether DIR holds a PEFT adapter (adapter_config.json).
bool is_peft_directory(const std::string& dir);

}  // namespace zoo
