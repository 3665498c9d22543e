#pragma once
// Weight-only quantization: a projection's weight stored as int8 or int4 with float32 scales,
// its activations and results in float32 or bf16. The formats are torchao's weight-only ones
// (quant_primitives.py), so that the same tensor quantizes to the same integers and scales:
// - int8: symmetric, one scale per output (row): scale = max|w| / 127.5 (at least float32's
//   epsilon), q = clamp(round(w * (1 / scale)), -128, 127), w ~ q * scale (Int8WeightOnlyConfig).
// - int4: asymmetric, a scale and a zero per group of `group_size` inputs of an output
//   (torchao's "tinygemm" parameters, which its Int4WeightOnlyConfig and ATen's int4 CPU and
//   CUDA products take): scale = (max - min) / 15 (at least float32's smallest normal),
//   zero = min + 8 scale, q = clamp(round((w - (zero - 8 scale)) / scale), 0, 15),
//   w ~ (q - 8) * scale + zero. Two values a byte, laid out for the kernel
//   (kernels/quantized_rows_dot.h): each 32 inputs in 16 bytes, byte j holding input j in its
//   low half and input j + 16 in its high half.
// dequantize_weight is the plain reference every product is checked against.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include "core/enum_names.h"

namespace zoo {

enum class WeightFormat { kInt8, kInt4 };
ZOO_ENUM_NAMES(WeightFormat, "weight format", {"int8", WeightFormat::kInt8}, {"int4", WeightFormat::kInt4});

// The group sizes int4 takes (llama.cpp's Q4_0 groups 32; torchao's default is 128).
bool is_int4_group_size(int64_t group_size);

struct QuantizedWeight {
  WeightFormat format = WeightFormat::kInt8;
  int64_t group_size = 0;  // int4: inputs per scale; int8: 0 (a scale per output)
  torch::Tensor data;      // int8: (out, in) int8; int4: (out, in / 2) uint8
  torch::Tensor scale;     // float32: int8 (out); int4 (out, in / group_size)
  torch::Tensor zero;      // int4: float32 (out, in / group_size); int8: undefined

  int64_t out_features() const { return data.size(0); }
  int64_t in_features() const;
  // Outputs start .. start + n (views): one expert's weight of a stacked one.
  QuantizedWeight rows(int64_t start, int64_t n) const;
  // Bytes the weight takes: its integers, scales and zeros.
  int64_t bytes() const;
};

// Quantizes a 2-D floating-point weight (out, in). `name` (a parameter's name) starts every
// error: a weight that is not 2-D or not floating point, NaN or infinity in it (with the first
// one's place), an int4 group size that is not 32, 64 or 128 or does not divide `in`.
QuantizedWeight quantize_weight(const torch::Tensor& weight, WeightFormat format, int64_t group_size,
                                const std::string& name);

// The float weight the integers stand for, (out, in), in `dtype` (computed in float32).
torch::Tensor dequantize_weight(const QuantizedWeight& weight, torch::ScalarType dtype = torch::kFloat);

// Throws, naming `name`, unless `weight` is a well-formed quantized weight of `out` x `in`
// (out, in: -1 for any): the dtypes and shapes above, finite positive scales, finite zeros.
// What a loader checks of a packed tensor read from a file.
void check_quantized_weight(const QuantizedWeight& weight, const std::string& name, int64_t out = -1, int64_t in = -1);

// int4 values q (out, in) in [0, 15] (uint8) into the packed layout above, and back.
torch::Tensor pack_int4(const torch::Tensor& values);
torch::Tensor unpack_int4(const torch::Tensor& packed);

// y = x W^T + b with W quantized: x (..., in) float32 or bf16, bias (out) or undefined; the
// result has x's dtype. Without gradients on the CPU, 1 to kFewRowsMax rows read the packed
// weights (kernels/quantized_rows_dot.h: AVX-512, or AVX2; bf16 rows through int8 weights by
// AVX-512 BF16's dot instruction where the CPU has it, else widened to float32 for those kernels),
// and more float32 rows (prefill)
// multiply tiles of the weight dequantized by those kernels (1 MiB at a time, never the whole
// weight); otherwise (bf16 rows, a CPU without AVX2, a GPU) the weight is dequantized into x's
// dtype for one product. Rows that need gradients (QLoRA)
// go through an autograd function that keeps the packed weight and dequantizes it again for the
// input's gradient.
torch::Tensor quantized_project(const torch::Tensor& x, const QuantizedWeight& weight,
                                const torch::Tensor& bias = {});

// Rows `ids` of a quantized table (out, in), as dequantize_weight gives them: ids.sizes() + (in),
// in `dtype`.
torch::Tensor dequantize_rows(const QuantizedWeight& table, const torch::Tensor& ids, torch::ScalarType dtype);

// A module holds a quantized weight (a torch::nn::Linear's, an Embedding's table, a mixture of
// experts' stacks) as three buffers beside the rest of its state, named after the parameter:
// weight_quantized (the integers), weight_scale and (int4) weight_zero, so that its state and a
// checkpoint carry them; the parameter is emptied (no elements, frozen, its device and dtype
// kept), and every product and lookup of it goes through kernels/linear.h (project, embed) or
// quantized_project, which find them. A parameter of more than 2 dimensions (experts, out, in)
// quantizes as the 2-D weight of all its rows, (experts * out, in): each expert's weight is
// rows(e * out, out) of it, as every scale and zero belongs to one output.
// Quantizes `weight`, a parameter of `owner`, in place (errors start with `name`).
void quantize_in_place(torch::nn::Module& owner, torch::Tensor& weight, WeightFormat format, int64_t group_size,
                       const std::string& name);
// What `owner` holds in place of `weight`, or nullopt when `weight` is a float one.
std::optional<QuantizedWeight> quantized_weight_of(const torch::nn::Module& owner, const torch::Tensor& weight);

// A module whose parameters besides torch::nn::Linear's quantize with the model's: a mixture of
// experts' stacked weights (layers/mixture_of_experts.h). The model walks below quantize, lay out
// and check the parameters it names.
class QuantizableStacks {
 public:
  virtual ~QuantizableStacks() = default;
  // Names of the module's own parameters, each (..., out, in).
  virtual std::vector<std::string> quantizable_stacks() const = 0;
};

// How a model's weights are quantized: what --quantize asks and a quantized checkpoint records
// (train/checkpoint.h, quantization.json).
struct WeightQuantization {
  WeightFormat format = WeightFormat::kInt8;
  int64_t group_size = 0;         // int4: 32, 64 or 128; int8: 0
  bool token_embeddings = true;   // the token embedding (and a head tied to it) too
  // "int8", or "int4 (groups of 32)", with "; the token embedding kept" when it is.
  std::string describe() const;
  // `format` for every weight and the token embedding, int4 in groups of `int4_group_size`.
  static WeightQuantization every_weight(WeightFormat format, int64_t int4_group_size = 32);
};

struct QuantizeSummary {
  int64_t linears = 0, tables = 0;            // linear layers and token embeddings quantized
  int64_t stacks = 0;                         // stacked weights (QuantizableStacks: experts')
  int64_t bytes_before = 0, bytes_after = 0;  // their weights' bytes
  // "quantized 12 linear layers and the token embedding to int4 (groups of 32): 300.0 MiB of
  // weights to 84.4 MiB", with ", 8 stacks of experts' weights" after the linear layers
  std::string describe(const WeightQuantization& quantization) const;
};
// Quantizes every torch::nn::Linear under `model` (as torchao's quantize_ does), every
// QuantizableStacks module's stacks, and, with
// `token_embeddings`, every module named token_embedding (a head tied to it with it: every
// family looks it up and projects onto it through kernels/linear.h). The float weights' memory is
// returned (core/large_blocks.h keeps no freed block of theirs).
QuantizeSummary quantize_model_weights(torch::nn::Module& model, const WeightQuantization& quantization);

// The layout alone, for a quantized checkpoint's weights to be read into: every weight
// quantize_model_weights would quantize is emptied and its buffers registered with their shapes
// and types (their contents unset).
void prepare_quantized_weights(torch::nn::Module& model, const WeightQuantization& quantization);

// Throws unless every weight `model` holds quantized is well-formed (check_quantized_weight),
// the message starting with `where` (a file) and the weight's name: what is checked of packed
// tensors read from a file, beyond their shapes.
void check_quantized_weights(const torch::nn::Module& model, const std::string& where);

// Module::to(device, dtype), except that quantized weights keep their integers' types and
// float32 scales and zeros (LibTorch's Module::to casts integer tensors too).
void place_weights(torch::nn::Module& model, const torch::Device& device, torch::ScalarType dtype);

// Copies every parameter and buffer of `to` from `from`, a quantized model of the same
// architecture: a weight `from` holds quantized is dequantized (dequantize_weight, in the type
// of `to`'s weight). What an export of a quantized model in float writes.
void copy_dequantized(const torch::nn::Module& from, torch::nn::Module& to);

}  // namespace zoo
