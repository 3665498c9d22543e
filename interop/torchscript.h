#pragma once
// TorchScript export: a torch::jit::Module that holds a model's weights and methods written in
// TorchScript for its config, so the file runs under torch::jit::load (C++) or torch.jit.load
// (Python) with no zoo code at all. The source is generated per config: only the variants the
// config uses are written, and each layer is one line naming its weights.
//
// Methods, all in eval mode (no dropout):
//   gpt:  forward(input_ids, attention_mask=None) -> logits (B, T, V)
//         generate(input_ids, max_new_tokens=32, temperature=0.0, top_k=0, top_p=1.0,
//                  eos_id=-1, attention_mask=None) -> (B, T + new) prompt and new tokens
//   bert: forward(input_ids, attention_mask=None, token_type_ids=None)
//           -> (sequence_output, pooled_output[, logits][, nsp_logits]); pooled_output is
//              empty (0 elements) for a config without a pooler
//   t5, transformer:
//         forward(input_ids, attention_mask, decoder_input_ids) -> logits (B, T, V)
//         encode(input_ids, attention_mask=None) -> memory (B, S, d_model)
//         decode(decoder_input_ids, memory, attention_mask=None) -> logits
//         generate(input_ids, ..., attention_mask=None) -> (B, 1 + new) decoder start and new tokens
// generate: temperature 0 is greedy; otherwise sampling with top_k / top_p (nucleus). The KV
// cache is preallocated for prompt + max_new_tokens. After a row emits eos_id (when >= 0) it is
// padded with pad_id; generation stops when every row has finished.
//
// Parameters keep zoo's names with '.' written as '_' (blocks.0.ff.up.weight becomes
// blocks_0_ff_up_weight). The archive carries extra files: config.yaml (the zoo config),
// zoo.json (family, methods, special token ids) and tokenizer.model when the checkpoint has one.

#include <string>

#include <torch/csrc/jit/api/module.h>

#include "models/model.h"

namespace zoo {

// The TorchScript source of the module for `config` (what `to_torchscript` defines).
std::string torchscript_source(const ModelConfig& config);

// The scripted module over `model`'s weights (shared with it, not copied), in eval mode.
torch::jit::Module to_torchscript(const Model& model);

// Writes the module and its extra files to `path` atomically (temporary file, then rename).
void export_torchscript(const Model& model, const std::string& path,
                        const std::string& tokenizer_bytes = {});

}  // namespace zoo
