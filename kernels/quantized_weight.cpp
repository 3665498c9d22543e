#include "kernels/quantized_weight.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <vector>

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "core/large_blocks.h"
#include "kernels/f32_rows_dot.h"
#include "kernels/linear.h"
#include "kernels/parallel.h"
#include "kernels/quantized_rows_dot.h"

namespace zoo {
namespace {

// torchao's clamps on a scale: float32's epsilon for int8 (Int8Tensor.from_hp), the smallest
// normal float32 for int4 (_choose_qparams_affine_tinygemm's default).
constexpr double kInt8MinScale = std::numeric_limits<float>::epsilon();
constexpr double kInt4MinScale = std::numeric_limits<float>::min();
constexpr int64_t kInt4Block = 32;  // inputs per 16 packed bytes

std::invalid_argument error(const std::string& name, const std::string& what) {
  return std::invalid_argument(name + ": " + what);
}

// The first NaN or infinity of a 2-D tensor, named with its place.
void check_finite(const torch::Tensor& t, const std::string& name, const std::string& what) {
  const auto bad = torch::logical_not(torch::isfinite(t));
  if (!bad.any().item<bool>()) return;
  const auto first = bad.reshape({-1}).nonzero()[0].item<int64_t>();
  const int64_t columns = t.dim() == 2 ? t.size(1) : 1;
  const double value = t.reshape({-1})[first].item<double>();
  throw error(name, c10::str(what, " has ", std::isnan(value) ? "NaN" : (value > 0 ? "inf" : "-inf"), " at (",
                             first / columns, ", ", first % columns, ")"));
}

}  // namespace

bool is_int4_group_size(int64_t group_size) { return group_size == 32 || group_size == 64 || group_size == 128; }

int64_t QuantizedWeight::in_features() const {
  switch (format) {
    case WeightFormat::kInt8:
      return data.size(1);
    case WeightFormat::kInt4:
      return data.size(1) * 2;
  }
  return 0;
}

QuantizedWeight QuantizedWeight::rows(int64_t start, int64_t n) const {
  QuantizedWeight part = *this;
  part.data = data.narrow(0, start, n);
  part.scale = scale.narrow(0, start, n);
  if (zero.defined()) part.zero = zero.narrow(0, start, n);
  return part;
}

int64_t QuantizedWeight::bytes() const {
  int64_t total = data.numel() * static_cast<int64_t>(data.element_size());
  for (const auto* t : {&scale, &zero}) {
    if (t->defined()) total += t->numel() * static_cast<int64_t>(t->element_size());
  }
  return total;
}

namespace {

// The tensors an (out, in) weight quantizes into, their contents unset (zero integers, unit
// scales, zero zeros): the one statement of the layout, which quantize_weight fills and a
// checkpoint's weights are read into. Throws, naming `name`, for a group size int4 does not take.
QuantizedWeight quantized_layout(int64_t out, int64_t in, WeightFormat format, int64_t group_size,
                                 const std::string& name) {
  QuantizedWeight q;
  q.format = format;
  const auto f32 = torch::dtype(torch::kFloat);
  switch (format) {
    case WeightFormat::kInt8:
      q.data = torch::zeros({out, in}, torch::dtype(torch::kChar));
      q.scale = torch::ones({out}, f32);
      break;
    case WeightFormat::kInt4:
      if (!is_int4_group_size(group_size)) {
        throw error(name, c10::str("int4 group size ", group_size, " (takes 32, 64 or 128)"));
      }
      if (in % group_size != 0) {
        throw error(name, c10::str("int4 group size ", group_size, " does not divide the weight's ", in,
                                   " inputs (", out, " x ", in, ")"));
      }
      q.group_size = group_size;
      q.data = torch::zeros({out, in / 2}, torch::dtype(torch::kByte));
      q.scale = torch::ones({out, in / group_size}, f32);
      q.zero = torch::zeros({out, in / group_size}, f32);
      break;
  }
  return q;
}

}  // namespace

QuantizedWeight quantize_weight(const torch::Tensor& weight, WeightFormat format, int64_t group_size,
                                const std::string& name) {
  if (weight.dim() != 2 || !weight.is_floating_point()) {
    throw error(name, c10::str("only a 2-D floating-point weight is quantized, got ", weight.dim(), "-D ",
                               weight.scalar_type()));
  }
  torch::NoGradGuard no_grad;
  const auto w = weight.detach().to(torch::kCPU, torch::kFloat).contiguous();
  check_finite(w, name, "the weight");
  const int64_t out = w.size(0), in = w.size(1);
  QuantizedWeight q = quantized_layout(out, in, format, group_size, name);
  switch (format) {
    case WeightFormat::kInt8: {
      // Symmetric over [-128, 127]: the largest magnitude over half the range's width, 255 / 2.
      const auto largest = torch::maximum(-w.amin(1).clamp_max(0), w.amax(1).clamp_min(0));
      q.scale.copy_((largest / 127.5).clamp_min(kInt8MinScale));
      q.data.copy_(torch::round(w * (1.0 / q.scale).unsqueeze(1)).clamp(-128, 127));
      break;
    }
    case WeightFormat::kInt4: {
      const auto groups = w.view({out, in / group_size, group_size});
      const auto low = groups.amin(-1), high = groups.amax(-1);
      q.scale.copy_(((high - low) / 15.0).clamp_min(kInt4MinScale));
      q.zero.copy_(low + q.scale * 8.0);  // the range's middle, (0 + 15 + 1) / 2
      const auto bottom = (q.zero - q.scale * 8.0).unsqueeze(-1);
      const auto values = torch::round((groups - bottom) / q.scale.unsqueeze(-1)).clamp(0, 15);
      q.data.copy_(pack_int4(values.to(torch::kByte).view({out, in})));
      break;
    }
  }
  return q;
}

namespace {

// The float32 weight of a block of rows.
torch::Tensor dequantize_block(const QuantizedWeight& weight) {
  switch (weight.format) {
    case WeightFormat::kInt8:
      return weight.data.to(torch::kFloat) * weight.scale.unsqueeze(1);
    case WeightFormat::kInt4: {
      const int64_t out = weight.out_features(), in = weight.in_features(), g = weight.group_size;
      const auto values = unpack_int4(weight.data).to(torch::kFloat).view({out, in / g, g});
      return ((values - 8.0) * weight.scale.unsqueeze(-1) + weight.zero.unsqueeze(-1)).view({out, in});
    }
  }
  return {};
}

}  // namespace

torch::Tensor dequantize_weight(const QuantizedWeight& weight, torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  const int64_t out = weight.out_features(), in = weight.in_features();
  auto result = torch::empty({out, in}, weight.data.options().dtype(dtype));
  // In blocks of rows (4 MiB of float32 each): a whole table's float32 intermediates would be
  // several times the result (an embedding's: 545 MB apiece for Qwen2-0.5B's).
  const int64_t rows = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, in));
  for (int64_t start = 0; start < out; start += rows) {
    const int64_t n = std::min(rows, out - start);
    result.narrow(0, start, n).copy_(dequantize_block(weight.rows(start, n)));
  }
  return result;
}

void check_quantized_weight(const QuantizedWeight& weight, const std::string& name, int64_t out, int64_t in) {
  const auto shape_of = [](const torch::Tensor& t) { return t.defined() ? c10::str(t.sizes()) : std::string("none"); };
  if (!weight.data.defined() || weight.data.dim() != 2 || !weight.scale.defined()) {
    throw error(name, "a quantized weight needs 2-D integers and scales, got integers " + shape_of(weight.data) +
                          ", scales " + shape_of(weight.scale));
  }
  const int64_t rows = weight.data.size(0);
  switch (weight.format) {
    case WeightFormat::kInt8:
      if (weight.data.scalar_type() != torch::kChar || weight.scale.scalar_type() != torch::kFloat ||
          weight.scale.sizes() != torch::IntArrayRef{rows} || weight.zero.defined()) {
        throw error(name, c10::str("int8 weight: expected int8 integers (out, in) and float32 scales (out), got ",
                                   weight.data.scalar_type(), " ", weight.data.sizes(), " and ",
                                   weight.scale.scalar_type(), " ", weight.scale.sizes()));
      }
      break;
    case WeightFormat::kInt4: {
      const int64_t g = weight.group_size, columns = weight.data.size(1) * 2;
      if (!is_int4_group_size(g) || columns % g != 0) {
        throw error(name, c10::str("int4 weight: group size ", g, " with ", columns,
                                   " inputs (takes 32, 64 or 128, dividing the inputs)"));
      }
      const std::vector<int64_t> groups{rows, columns / g};
      if (weight.data.scalar_type() != torch::kByte || weight.scale.scalar_type() != torch::kFloat ||
          !weight.zero.defined() || weight.zero.scalar_type() != torch::kFloat ||
          weight.scale.sizes() != torch::IntArrayRef(groups) || weight.zero.sizes() != torch::IntArrayRef(groups)) {
        throw error(name, c10::str("int4 weight: expected uint8 integers (out, in / 2) and float32 scales and zeros (",
                                   rows, ", ", columns / g, "), got ", weight.data.scalar_type(), " ",
                                   weight.data.sizes(), ", scales ", shape_of(weight.scale), ", zeros ",
                                   shape_of(weight.zero)));
      }
      check_finite(weight.zero.view({rows, -1}), name, "the zeros");
      break;
    }
  }
  check_finite(weight.scale.view({rows, -1}), name, "the scales");
  if (!(weight.scale > 0).all().item<bool>()) throw error(name, "a scale is zero or negative");
  if ((out >= 0 && weight.out_features() != out) || (in >= 0 && weight.in_features() != in)) {
    throw error(name, c10::str("quantized weight of ", weight.out_features(), " x ", weight.in_features(),
                               ", expected ", out, " x ", in));
  }
}

torch::Tensor pack_int4(const torch::Tensor& values) {
  TORCH_CHECK(values.dim() == 2 && values.size(1) % kInt4Block == 0 && values.scalar_type() == torch::kByte,
              "pack_int4: expected uint8 values (out, in) with in a multiple of 32, got ", values.scalar_type(), " ",
              values.sizes());
  const int64_t out = values.size(0), in = values.size(1);
  const auto halves = values.view({out, in / kInt4Block, 2, kInt4Block / 2});  // (out, blocks, low|high, 16)
  const auto low = halves.select(2, 0), high = halves.select(2, 1);
  return low.bitwise_or(high.bitwise_left_shift(4)).reshape({out, in / 2});
}

torch::Tensor unpack_int4(const torch::Tensor& packed) {
  TORCH_CHECK(packed.dim() == 2 && packed.size(1) % (kInt4Block / 2) == 0 && packed.scalar_type() == torch::kByte,
              "unpack_int4: expected uint8 bytes (out, in / 2) with in a multiple of 32, got ", packed.scalar_type(),
              " ", packed.sizes());
  const int64_t out = packed.size(0), in = packed.size(1) * 2;
  const auto bytes = packed.view({out, in / kInt4Block, kInt4Block / 2});
  return torch::stack({bytes.bitwise_and(15), bytes.bitwise_right_shift(4)}, 2).reshape({out, in});
}

namespace {

// y = x W^T + b for rows that need gradients (QLoRA's frozen base): the weight is dequantized for
// the product and again for the input's gradient, so autograd keeps the packed integers, not a
// float copy of every layer's weight until the backward pass. The weight takes no gradient.
struct QuantizedLinearFunction : torch::autograd::Function<QuantizedLinearFunction> {
  // `bias` has no elements when there is none (autograd takes no undefined inputs).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& bias,
                               const QuantizedWeight& q) {
    ctx->saved_data["data"] = q.data;  // frozen: no version to track
    ctx->saved_data["scale"] = q.scale;
    ctx->saved_data["zero"] = q.zero;
    ctx->saved_data["format"] = static_cast<int64_t>(q.format);
    ctx->saved_data["group_size"] = q.group_size;
    ctx->saved_data["bias"] = bias.numel() > 0;
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.scalar_type());
    return project(x, dequantize_weight(q, x.scalar_type()).to(x.device()),
                   bias.numel() > 0 ? bias.to(x.scalar_type()) : torch::Tensor());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto& saved = ctx->saved_data;
    const QuantizedWeight q{static_cast<WeightFormat>(saved["format"].toInt()), saved["group_size"].toInt(),
                            saved["data"].toTensor(), saved["scale"].toTensor(),
                            saved["zero"].isNone() ? torch::Tensor() : saved["zero"].toTensor()};
    const auto& grad = grads[0];
    const auto grad_x = torch::matmul(grad, dequantize_weight(q, grad.scalar_type()).to(grad.device()));
    torch::Tensor grad_bias;
    if (saved["bias"].toBool()) {
      const auto dtype = static_cast<torch::ScalarType>(saved["bias_dtype"].toInt());
      grad_bias = grad.reshape({-1, q.out_features()}).sum(0, false, torch::kFloat).to(dtype);
    }
    return {grad_x, grad_bias, {}};
  }
};

}  // namespace

namespace {

// Many float32 rows on the CPU (prefill): the weight dequantized a tile of outputs at a time into
// 1 MiB of float32, which the cache holds (*_dequantize_rows: dequantize_weight's bits at the
// kernels' speed, not ATen's several passes), each tile's products through LibTorch's matmul. No
// float32 copy of the whole weight is made (GPT-2's tied head would be 154 MB a forward).
torch::Tensor tiled_project(const torch::Tensor& rows, const QuantizedWeight& weight, const torch::Tensor& bias) {
  const int64_t in = weight.in_features(), out = weight.out_features(), n = rows.size(0);
  const int64_t tile = std::min<int64_t>(out, std::max<int64_t>(16, (int64_t{1} << 18) / in));
  auto yt = torch::empty({out, n}, rows.options());
  auto buffer = torch::empty({tile, in}, rows.options());
  float* tile_data = buffer.data_ptr<float>();
  const float* scale = weight.scale.data_ptr<float>();
  const auto xt = rows.t();
  for (int64_t start = 0; start < out; start += tile) {
    const int64_t count = std::min(tile, out - start);
    parallel_for(0, count, 8, [&](int64_t begin, int64_t end) {
      switch (weight.format) {
        case WeightFormat::kInt8:
          int8_dequantize_rows(weight.data.data_ptr<int8_t>(), scale, in, start + begin, start + end,
                               tile_data + begin * in);
          break;
        case WeightFormat::kInt4:
          int4_dequantize_rows(weight.data.data_ptr<uint8_t>(), scale, weight.zero.data_ptr<float>(), in,
                               weight.group_size, start + begin, start + end, tile_data + begin * in);
          break;
      }
    });
    auto products = yt.narrow(0, start, count);
    torch::mm_out(products, buffer.narrow(0, 0, count), xt);
  }
  const auto y = yt.t();
  return bias.defined() ? y + bias.to(torch::kFloat) : y.contiguous();
}

}  // namespace

torch::Tensor quantized_project(const torch::Tensor& x, const QuantizedWeight& weight, const torch::Tensor& bias) {
  const int64_t in = weight.in_features(), out = weight.out_features();
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == in, "quantized_project: expected (..., ", in, "), got ", x.sizes());
  auto out_sizes = x.sizes().vec();  // (..., out)
  out_sizes.back() = out;
  const bool wants_grad =
      torch::GradMode::is_enabled() && (x.requires_grad() || (bias.defined() && bias.requires_grad()));
  const bool float_rows = x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16;
  const bool few_rows = x.numel() > 0 && x.numel() <= kFewRowsMax * in;
  if (wants_grad) {
    return QuantizedLinearFunction::apply(x, bias.defined() ? bias : torch::empty({0}, x.options()), weight);
  }
  const bool kernels = x.device().is_cpu() && weight.data.device().is_cpu() && cpu_runs_quantized_rows_dot();
  torch::NoGradGuard no_grad;
  if (kernels && x.scalar_type() == torch::kFloat && !few_rows && x.numel() > 0) {
    return tiled_project(x.reshape({-1, in}).contiguous(), weight, bias).view(out_sizes);
  }
  if (!float_rows || !few_rows || !kernels) {
    return project(x, dequantize_weight(weight, x.scalar_type()).to(x.device()),
                   bias.defined() ? bias.to(x.scalar_type()) : bias);
  }
  const auto b = bias.defined() ? bias.to(torch::kFloat).contiguous() : bias;
  const float* b_data = b.defined() ? b.data_ptr<float>() : nullptr;
  // Columns in blocks of at least 8 KiB of packed weights, whole blocks of 24 (the kernels' widths).
  const int64_t bytes_per_column = weight.format == WeightFormat::kInt8 ? in : in / 2;
  const int64_t grain = ((std::max<int64_t>(24, (int64_t{8} << 10) / std::max<int64_t>(1, bytes_per_column)) + 23) / 24) * 24;
  if (weight.format == WeightFormat::kInt8 && x.scalar_type() == torch::kBFloat16 && cpu_runs_int8_bf16_rows_dot()) {
    // bf16 rows as they are, a dot instruction per two weights (a bf16 model's decoding).
    const auto rows = x.reshape({-1, in}).contiguous();
    auto y = torch::empty({rows.size(0), out}, rows.options().dtype(torch::kFloat));
    const auto* x_data = reinterpret_cast<const uint16_t*>(rows.data_ptr<at::BFloat16>());
    const auto* w = weight.data.data_ptr<int8_t>();
    const float* scale = weight.scale.data_ptr<float>();
    float* y_data = y.data_ptr<float>();
    parallel_for(0, out, grain, [&](int64_t begin, int64_t end) {
      int8_bf16_rows_dot(x_data, rows.size(0), w, scale, in, b_data, begin, end, y_data, out);
    });
    return y.to(torch::kBFloat16).view(out_sizes);
  }
  const auto rows = x.reshape({-1, in}).to(torch::kFloat).contiguous();
  const int64_t n = rows.size(0);
  auto y = torch::empty({n, out}, rows.options());
  const float* x_data = rows.data_ptr<float>();
  float* y_data = y.data_ptr<float>();
  switch (weight.format) {
    case WeightFormat::kInt8: {
      const auto* w = weight.data.data_ptr<int8_t>();
      const float* scale = weight.scale.data_ptr<float>();
      parallel_for(0, out, grain, [&](int64_t begin, int64_t end) {
        int8_rows_dot(x_data, n, w, scale, in, b_data, begin, end, y_data, out);
      });
      break;
    }
    case WeightFormat::kInt4: {
      const auto* w = weight.data.data_ptr<uint8_t>();
      const float* scale = weight.scale.data_ptr<float>();
      const float* zero = weight.zero.data_ptr<float>();
      parallel_for(0, out, grain, [&](int64_t begin, int64_t end) {
        int4_rows_dot(x_data, n, w, scale, zero, in, weight.group_size, b_data, begin, end, y_data, out);
      });
      break;
    }
  }
  return y.to(x.scalar_type()).view(out_sizes);
}

namespace {

// The buffers standing for a quantized parameter `name`: name_quantized, name_scale, name_zero.
std::string integers_buffer(const std::string& name) { return name + "_quantized"; }
std::string scale_buffer(const std::string& name) { return name + "_scale"; }
std::string zero_buffer(const std::string& name) { return name + "_zero"; }

// The name `weight` has among `owner`'s own parameters; empty if it is none of them.
std::string parameter_name(const torch::nn::Module& owner, const torch::Tensor& weight) {
  for (const auto& p : owner.named_parameters(/*recurse=*/false)) {
    if (p.value().is_same(weight)) return p.key();
  }
  return {};
}

// Registers q's tensors as the buffers of parameter `name` and empties `weight`, on its device.
void hold_quantized(torch::nn::Module& owner, torch::Tensor& weight, const std::string& name, const QuantizedWeight& q) {
  const auto device = weight.device();
  owner.register_buffer(integers_buffer(name), q.data.to(device));
  owner.register_buffer(scale_buffer(name), q.scale.to(device));
  if (q.zero.defined()) owner.register_buffer(zero_buffer(name), q.zero.to(device));
  // Every reference to the parameter sees it emptied, and its memory is freed.
  weight.set_(torch::empty({0}, weight.options()));
  weight.requires_grad_(false);
}

}  // namespace

void quantize_in_place(torch::nn::Module& owner, torch::Tensor& weight, WeightFormat format, int64_t group_size,
                       const std::string& name) {
  if (quantized_weight_of(owner, weight)) throw error(name, "the weight is quantized already");
  const std::string own = parameter_name(owner, weight);
  if (own.empty()) throw std::logic_error(name + ": quantize_in_place: not a parameter of the module given");
  torch::NoGradGuard no_grad;
  // A stack (experts, out, in) quantizes as its rows, (experts * out, in).
  const auto rows = weight.dim() > 2 ? weight.reshape({-1, weight.size(-1)}) : weight;
  hold_quantized(owner, weight, own, quantize_weight(rows, format, group_size, name));
}

std::optional<QuantizedWeight> quantized_weight_of(const torch::nn::Module& owner, const torch::Tensor& weight) {
  if (weight.defined() && weight.numel() > 0) return std::nullopt;
  const std::string name = parameter_name(owner, weight);
  if (name.empty()) return std::nullopt;
  const auto buffers = owner.named_buffers(/*recurse=*/false);
  const auto* integers = buffers.find(integers_buffer(name));
  const auto* scale = buffers.find(scale_buffer(name));
  if (integers == nullptr || scale == nullptr) return std::nullopt;
  QuantizedWeight q;
  q.data = *integers, q.scale = *scale;
  if (q.data.scalar_type() == torch::kByte) {
    const auto* zero = buffers.find(zero_buffer(name));
    q.format = WeightFormat::kInt4;
    if (zero != nullptr) q.zero = *zero;
    q.group_size = q.scale.dim() == 2 && q.scale.size(1) > 0 ? q.data.size(1) * 2 / q.scale.size(1) : 0;
  }
  return q;
}

torch::Tensor dequantize_rows(const QuantizedWeight& table, const torch::Tensor& ids, torch::ScalarType dtype) {
  const auto flat = ids.reshape({-1}).to(table.data.device(), torch::kLong);
  QuantizedWeight rows = table;
  rows.data = table.data.index_select(0, flat);
  rows.scale = table.scale.index_select(0, flat);
  if (table.zero.defined()) rows.zero = table.zero.index_select(0, flat);
  auto sizes = ids.sizes().vec();
  sizes.push_back(table.in_features());
  return dequantize_weight(rows, dtype).view(sizes);
}

WeightQuantization WeightQuantization::every_weight(WeightFormat format, int64_t int4_group_size) {
  switch (format) {
    case WeightFormat::kInt8: return {format, 0, true};
    case WeightFormat::kInt4: return {format, int4_group_size, true};
  }
  return {};
}

std::string WeightQuantization::describe() const {
  std::string s = to_string(format);
  if (format == WeightFormat::kInt4) s += " (groups of " + std::to_string(group_size) + ")";
  return token_embeddings ? s : s + "; the token embedding kept";
}

std::string QuantizeSummary::describe(const WeightQuantization& quantization) const {
  const auto mib = [](int64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / 1048576.0);
    return std::string(text);
  };
  return c10::str("quantized ", linears, " linear layers",
                  stacks > 0 ? c10::str(", ", stacks, " stacks of experts' weights") : std::string(),
                  tables > 0 ? " and the token embedding" : "", " to ",
                  to_string(quantization.format),
                  quantization.format == WeightFormat::kInt4 ? c10::str(" (groups of ", quantization.group_size, ")")
                                                             : std::string(),
                  ": ", mib(bytes_before), " MiB of weights to ", mib(bytes_after), " MiB");
}

namespace {

// What a quantized weight belongs to, for the summary.
enum class QuantizedKind { kLinear, kTokenTable, kStack };

// Every weight quantize_model_weights takes, with its module and name: f(owner, weight, name,
// kind).
template <typename F>
void for_each_quantizable(torch::nn::Module& model, bool token_embeddings, F&& f) {
  for (const auto& item : model.named_modules()) {
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    if (auto* linear = item.value()->as<torch::nn::Linear>()) {
      f(*linear, linear->weight, prefix + "weight", QuantizedKind::kLinear);
      continue;
    }
    auto* table = item.value()->as<torch::nn::Embedding>();
    if (table != nullptr && token_embeddings &&
        (item.key() == "token_embedding" || item.key().ends_with(".token_embedding"))) {
      f(*table, table->weight, prefix + "weight", QuantizedKind::kTokenTable);
      continue;
    }
    if (const auto* stacks = dynamic_cast<const QuantizableStacks*>(item.value().get())) {
      auto parameters = item.value()->named_parameters(/*recurse=*/false);
      for (const auto& name : stacks->quantizable_stacks()) {
        auto* weight = parameters.find(name);
        TORCH_CHECK(weight != nullptr, item.key(), ": no parameter ", name, " to quantize");
        f(*item.value(), *weight, prefix + name, QuantizedKind::kStack);
      }
    }
  }
}

// Every quantized weight under `model` with its module: f(owner, weight, name, q).
template <typename F>
void for_each_quantized(const torch::nn::Module& model, F&& f) {
  for (const auto& item : model.named_modules()) {
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) {
      if (const auto q = quantized_weight_of(*item.value(), p.value())) {
        f(*item.value(), p.value(), (item.key().empty() ? "" : item.key() + ".") + p.key(), *q);
      }
    }
  }
}

}  // namespace

QuantizeSummary quantize_model_weights(torch::nn::Module& model, const WeightQuantization& quantization) {
  QuantizeSummary summary;
  for_each_quantizable(
      model, quantization.token_embeddings,
      [&](torch::nn::Module& owner, torch::Tensor& weight, const std::string& name, QuantizedKind kind) {
        const int64_t before = weight.numel() * static_cast<int64_t>(weight.element_size());
        quantize_in_place(owner, weight, quantization.format, quantization.group_size, name);
        switch (kind) {
          case QuantizedKind::kLinear: ++summary.linears; break;
          case QuantizedKind::kTokenTable: ++summary.tables; break;
          case QuantizedKind::kStack: ++summary.stacks; break;
        }
        summary.bytes_before += before;
        summary.bytes_after += quantized_weight_of(owner, weight)->bytes();
      });
  release_cached_large_blocks();  // the float weights' large blocks, rather than kept for reuse
  return summary;
}

void prepare_quantized_weights(torch::nn::Module& model, const WeightQuantization& quantization) {
  torch::NoGradGuard no_grad;
  for_each_quantizable(model, quantization.token_embeddings,
                       [&](torch::nn::Module& owner, torch::Tensor& weight, const std::string& name, QuantizedKind) {
                         if (quantized_weight_of(owner, weight)) throw error(name, "the weight is quantized already");
                         const int64_t in = weight.size(-1), out = weight.numel() / std::max<int64_t>(1, in);
                         hold_quantized(owner, weight, parameter_name(owner, weight),
                                        quantized_layout(out, in, quantization.format, quantization.group_size, name));
                       });
  release_cached_large_blocks();
}

void check_quantized_weights(const torch::nn::Module& model, const std::string& where) {
  for_each_quantized(model, [&](const torch::nn::Module&, const torch::Tensor&, const std::string& name,
                                const QuantizedWeight& q) { check_quantized_weight(q, where + ": " + name); });
}

void place_weights(torch::nn::Module& model, const torch::Device& device, torch::ScalarType dtype) {
  // LibTorch's Module::to casts every tensor, integers too, replacing each one's data in place;
  // an alias (detach) keeps the quantized buffers' own.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> kept;
  for_each_quantized(model, [&](const torch::nn::Module&, const torch::Tensor&, const std::string&,
                                const QuantizedWeight& q) {
    for (const auto* t : {&q.data, &q.scale, &q.zero}) {
      if (t->defined()) kept.emplace_back(*t, t->detach());
    }
  });
  model.to(device, dtype);
  for (auto& [buffer, value] : kept) buffer.set_data(value.to(device));
}

void copy_dequantized(const torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  const auto sources = from.named_modules();
  for (const auto& item : to.named_modules()) {
    const auto* source = sources.find(item.key());
    if (source == nullptr) throw std::invalid_argument("copy_dequantized: no module " + item.key() + " to copy from");
    const auto parameters = (*source)->named_parameters(/*recurse=*/false);
    const auto buffers = (*source)->named_buffers(/*recurse=*/false);
    const auto copy = [&](const torch::OrderedDict<std::string, torch::Tensor>& values, const std::string& name,
                          torch::Tensor& target) {
      const auto* value = values.find(name);
      if (value == nullptr) throw std::invalid_argument("copy_dequantized: no tensor " + item.key() + "." + name);
      const auto q = quantized_weight_of(**source, *value);
      target.copy_(q ? dequantize_weight(*q, target.scalar_type()).view(target.sizes()) : *value);
    };
    for (auto& p : item.value()->named_parameters(/*recurse=*/false)) copy(parameters, p.key(), p.value());
    for (auto& b : item.value()->named_buffers(/*recurse=*/false)) copy(buffers, b.key(), b.value());
  }
}

}  // namespace zoo
