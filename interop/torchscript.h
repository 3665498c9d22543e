#pragma once
// TorchScript export: a torch::jit::Module that holds a model's weights and runs the program in
// interop/script, so the file runs under torch::jit::load (C++) or torch.jit.load (Python) with
// no zoo code at all. The program is checked-in Python that is also TorchScript, one file per
// concern (common.py, positions.py, blocks.py, generation.py, and decoder.py, encoder.py or
// encoder_decoder.py for the family), embedded at build time and defined on the module with
// Module::define; it branches on the config's variants, which the module holds as attributes.
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
// Names. Each PositionEncoding child of the model (positions; encoder_positions and
// decoder_positions) and each stack of blocks (blocks; encoder_blocks and decoder_blocks) is a
// submodule of the same name. In a stack, a per-layer tensor is stacked over the layers:
// blocks.3.ff.up.weight is row 3 of the (n_layers, d_ff, d_model) parameter blocks.ff_up_weight.
// Where layers differ in kind, each kind's tensors are stacked over its own layers: a token
// mixer's by layer_kinds / kind_rows (linear_attn_*, gla_attn_*), a feed-forward's by ff_kinds /
// ff_rows (ff_* dense, moe_* a mixture of experts: blocks.3.moe.gate_up is row ff_rows[3] of
// blocks.moe_gate_up).
// Every other name keeps zoo's path with '.' written '_' inside its module:
// token_embedding.weight is token_embedding_weight, positions.learned.embedding.weight is
// positions.learned_embedding_weight. A weight the config does not have (a bias, an untied head)
// is an attribute set to None. The positions submodules also hold the tables the native layers
// compute (sinusoidal_table, rope_cos and rope_sin, alibi_slopes, relative_buckets) as buffers.
// A quantized weight (kernels/quantized_weight.h) stays packed: one integer tensor under the
// weight's name, each output's integers followed by the bytes of its float32 scales (and
// int4's zeros), which the scripts dequantize for each product (interop/script/common.py says
// the layout); int4_group_size is an attribute, and float_like an empty tensor of the dtype a
// quantized token embedding's rows are looked up in.
// The export refuses a model with a tensor no script reads: a variant the scripts do not know.
// Python's module.to(torch.float64) converts the floating-point weights and tables; LibTorch's
// torch::jit::Module::to(dtype) would convert the integer relative_buckets too, so in C++
// convert the floating-point tensors only.
//
// The archive carries extra files: config.yaml (the zoo config), zoo.json (family, methods,
// the tokenizer's special token ids, the script files of each class) and the tokenizer when the
// checkpoint has one: tokenizer.model for zoo's own (a SentencePiece model), tokenizer.files for
// a Hugging Face tokenizer (its files in one container, tokenizers/tokenizer_files.h).

#include <string>

#include <torch/csrc/jit/api/module.h>

#include "models/model.h"
#include "tokenizers/tokenizer.h"

namespace zoo {

// The files of interop/script that the export of `config` runs, each whole under a
// "# interop/script/<file>" line.
std::string torchscript_source(const ModelConfig& config);

// The scripted module over `model`'s weights (shared with it, but for the blocks', which are
// stacked per layer into new tensors), in eval mode.
torch::jit::Module to_torchscript(const Model& model);

// Writes the module and its extra files to `path` atomically (temporary file, then rename).
void export_torchscript(const Model& model, const std::string& path, const Tokenizer* tokenizer = nullptr);

}  // namespace zoo
