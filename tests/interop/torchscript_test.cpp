#include "interop/torchscript.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>
#include <torch/torch.h>

#include "interop/script_files.h"
#include "models/generation.h"
#include "test_util.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::max_abs_diff;

// Tokens each generate call of the parity tests adds (tests/reference/torchscript_check.py too).
constexpr int64_t kNewTokens = 6;

// Forward outputs of the export against the native model's, by dtype: float32 and float64 differ
// in the order of a few sums; bfloat16 keeps 8 significant bits (0.125 is 4 of its units at the
// outputs' magnitude of about 4), and the native attention kernel and the script round at
// different steps.
double tolerance(torch::ScalarType dtype) {
  if (dtype == torch::kDouble) return 1e-12;
  if (dtype == torch::kBFloat16) return 0.125;
  return 1e-5;
}

// A config of configs/ (or one changed by `overrides`), shrunk to test size with its variants
// kept: attention kind (heads : kv heads), positions, norms, activation, window, heads.
ModelConfig shrunk(const std::string& name, const std::vector<std::string>& overrides) {
  ModelConfig c = load_config(find_config(name));
  apply_overrides(c, overrides);
  c.vocab_size = 97;
  c.pad_id = std::min<int64_t>(c.pad_id, c.vocab_size - 1);  // a real vocabulary's pad (Phi-3's 32000)
  c.d_model = 32;
  c.head_dim = 8;
  if (c.n_kv_heads == 0) c.n_heads = 4;
  c.d_ff = 48;
  c.n_layers = 2;
  if (c.encoder_layers > 0) c.encoder_layers = 2;
  if (c.decoder_layers > 0) c.decoder_layers = 3;
  c.max_positions = std::min<int64_t>(c.max_positions, 40);
  c.relative_max_distance = std::min<int64_t>(c.relative_max_distance, 20);
  if (c.window) c.window = 5;
  if (!c.window_layers.empty()) c.window_layers = {0};  // Gemma: layer 0 slides, layer 1 sees every key
  c.init_std = 0.2;  // clear argmax margins for the greedy comparisons
  c.validate(name);
  return c;
}

struct Variant {
  std::string name;
  std::string config;
  std::vector<std::string> overrides;
  torch::ScalarType dtype = torch::kFloat;  // the model's, converted before export
  uint64_t seed = 7;                        // of the model's initialisation
  // Export in float32 and convert the loaded module to `dtype` (Module.to in Python): stacked
  // weights and computed tables move with it.
  bool convert_loaded = false;
  // Weights quantized after the conversion (the export keeps them packed); int4 widens d_ff to 64
  // so that every input dimension holds whole groups of 32.
  std::optional<WeightQuantization> quantization = std::nullopt;
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

torch::Tensor token_ids(int64_t batch, int64_t length, int64_t multiplier, int64_t offset, int64_t vocab) {
  return (torch::arange(batch * length, torch::kLong) * multiplier + offset).remainder(vocab).view({batch, length});
}

// The gap between the two most likely tokens at each step of a greedy generation, (steps, B).
torch::Tensor margins(const GenerationResult& g) {
  std::vector<torch::Tensor> steps;
  for (const auto& scores : g.scores) {
    auto top = std::get<0>(scores.topk(2, -1));
    steps.push_back(top.select(1, 0) - top.select(1, 1));
  }
  return torch::stack(steps);
}

std::vector<int64_t> row(const torch::Tensor& t, int64_t r, int64_t from = 0) {
  auto x = t[r].narrow(0, from, t.size(1) - from).contiguous();
  return std::vector<int64_t>(x.data_ptr<int64_t>(), x.data_ptr<int64_t>() + x.numel());
}

std::string flat(std::string name) {
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

// The archived tensor of a native parameter, by interop/torchscript.h's naming:
// `blocks.3.ff.up.weight` is row 3 of blocks.ff_up_weight, `positions.learned.embedding.weight`
// is positions.learned_embedding_weight, `token_embedding.weight` is token_embedding_weight.
torch::Tensor archived(const torch::jit::Module& module, const std::string& name) {
  const auto dot = name.find('.');
  const std::string child = name.substr(0, dot), rest = name.substr(dot + 1);
  const auto ends_with = [&](const std::string& tail) {
    return child.size() >= tail.size() && child.compare(child.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (ends_with("blocks")) {
    const auto layer_end = rest.find('.');
    const auto layer = std::stoll(rest.substr(0, layer_end));
    const auto blocks = module.attr(child).toModule();
    std::string key = flat(rest.substr(layer_end + 1));
    int64_t row = layer;
    // A token mixer's tensors are stacked over the layers of its kind, under the kind's prefix.
    if (key.rfind("self_attn_", 0) == 0 && key.rfind("self_attn_norm_", 0) != 0) {
      const std::string kind = blocks.attr("layer_kinds").toList().get(layer).toStringRef();
      row = blocks.attr("kind_rows").toList().get(layer).toInt();
      if (kind == "linear") key = "linear_attn_" + key.substr(10);
      if (kind == "gated_linear") key = "gla_attn_" + key.substr(10);
    }
    // The norms before the attention over the layers that have one (not ModernBERT's first).
    if (key.rfind("self_attn_norm_", 0) == 0) row = blocks.attr("attention_norm_rows").toList().get(layer).toInt();
    // A feed-forward's over the dense or the mixture-of-experts layers.
    if ((key.rfind("ff_", 0) == 0 && key.rfind("ff_norm_", 0) != 0) || key.rfind("moe_", 0) == 0) {
      row = blocks.attr("ff_rows").toList().get(layer).toInt();
    }
    return blocks.attr(key).toTensor()[row];
  }
  if (ends_with("positions")) return module.attr(child).toModule().attr(flat(rest)).toTensor();
  return module.attr(flat(name)).toTensor();
}

class TorchScriptExport : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    torch::manual_seed(GetParam().seed);
    config_ = shrunk(GetParam().config, GetParam().overrides);
    const auto& quantization = GetParam().quantization;
    if (quantization && quantization->format == WeightFormat::kInt4) config_.d_ff = 64;
    model_ = build_model(config_);
    model_.module()->eval();
    if (!GetParam().convert_loaded) model_.module()->to(GetParam().dtype);
    if (quantization) quantize_model(model_, *quantization);
    path_ = testing::scratch_path("torchscript-" + GetParam().name).string() + ".pt";
    export_torchscript(model_, path_, &testing::shared_tokenizer());
    loaded_ = torch::jit::load(path_);
    if (GetParam().convert_loaded) {
      place_weights(*model_.module(), torch::kCPU, GetParam().dtype);
      // As Python's Module.to does: torch::jit::Module::to would convert relative_buckets too.
      for (auto module : loaded_.modules()) {
        for (const auto& a : module.named_attributes(/*recurse=*/false)) {
          if (a.value.isTensor() && a.value.toTensor().is_floating_point()) {
            module.setattr(a.name, a.value.toTensor().to(GetParam().dtype));
          }
        }
      }
    }
  }

  // tests/reference/torchscript_check.py's arguments for this variant.
  std::vector<std::string> python_arguments(const std::string& mode = {}) const {
    std::vector<std::string> args = {path_};
    if (!mode.empty()) args.push_back(mode);
    if (GetParam().convert_loaded) {
      const auto dtype = GetParam().dtype;
      args.insert(args.end(), {"--to", dtype == torch::kDouble ? "float64" : dtype == torch::kBFloat16 ? "bfloat16" : "float32"});
    }
    return args;
  }

  // The inputs tests/reference/torchscript_check.py builds: (2, 7) ids, (2, 5) decoder ids.
  torch::Tensor encoder_ids() const { return token_ids(2, 7, 7, 3, config_.vocab_size); }
  torch::Tensor decoder_input_ids() const { return token_ids(2, 5, 5, 1, config_.vocab_size); }

  // Native outputs on those inputs.
  std::map<std::string, torch::Tensor> native() {
    torch::NoGradGuard no_grad;
    const auto ids = encoder_ids(), decoder_ids = decoder_input_ids();
    std::map<std::string, torch::Tensor> out;
    if (model_.gpt) {
      auto mask = torch::ones_like(ids);
      mask[0].narrow(0, 0, 2).fill_(0);
      out["logits"] = model_.gpt->forward(ids);
      out["masked_logits"] = model_.gpt->forward(ids, mask);
      GenerationOptions o;
      o.max_new_tokens = kNewTokens;
      o.output_scores = true;
      auto full = generate(model_.gpt, {row(ids, 0), row(ids, 1)}, o);
      auto padded = generate(model_.gpt, {row(ids, 0, 2), row(ids, 1)}, o);
      margins_["generated"] = margins(full);
      margins_["generated_masked"] = margins(padded);
      out["generated"] = torch::cat({ids, torch::stack({torch::tensor(full.tokens[0]), torch::tensor(full.tokens[1])})}, 1);
      out["generated_masked"] =
          torch::cat({ids, torch::stack({torch::tensor(padded.tokens[0]), torch::tensor(padded.tokens[1])})}, 1);
    } else if (model_.bert) {
      auto mask = torch::ones_like(ids);
      mask[1].narrow(0, 5, 2).fill_(0);
      auto types = torch::zeros_like(ids);
      types.narrow(1, 4, 3).fill_(1);
      auto o = model_.bert->forward(ids, mask, types);
      out["sequence_output"] = o.sequence_output;
      out["pooled_output"] = o.pooled_output.defined() ? o.pooled_output : torch::zeros({0});
      if (o.logits.defined()) out["logits"] = o.logits;
      if (o.nsp_logits.defined()) out["nsp_logits"] = o.nsp_logits;
    } else {
      auto mask = torch::ones_like(ids);
      mask[1].narrow(0, 5, 2).fill_(0);
      out["logits"] = model_.seq2seq->forward(ids, mask, decoder_ids);
      out["memory"] = model_.seq2seq->encode(ids, mask);
      out["decoded"] = model_.seq2seq->decode(decoder_ids, out["memory"], mask);
      GenerationOptions o;
      o.max_new_tokens = kNewTokens;
      o.output_scores = true;
      auto second = row(ids, 1);
      second.resize(5);  // the masked tail is padding
      auto g = generate(model_.seq2seq, {row(ids, 0), second}, o);
      margins_["generated"] = margins(g);
      auto start = torch::full({2, 1}, config_.decoder_start_id, torch::kLong);
      out["generated"] = torch::cat({start, torch::stack({torch::tensor(g.tokens[0]), torch::tensor(g.tokens[1])})}, 1);
    }
    return out;
  }

  // The same through the loaded TorchScript module, in C++.
  std::map<std::string, torch::Tensor> scripted() {
    torch::NoGradGuard no_grad;
    const auto ids = encoder_ids(), decoder_ids = decoder_input_ids();
    std::map<std::string, torch::Tensor> out;
    auto method = [&](const char* name, std::vector<c10::IValue> args, const torch::jit::Kwargs& kwargs = {}) {
      return loaded_.get_method(name)(std::move(args), kwargs);
    };
    if (model_.gpt) {
      auto mask = torch::ones_like(ids);
      mask[0].narrow(0, 0, 2).fill_(0);
      out["logits"] = loaded_.forward({ids}).toTensor();
      out["masked_logits"] = loaded_.forward({ids, mask}).toTensor();
      out["generated"] = method("generate", {ids, kNewTokens}).toTensor();
      out["generated_masked"] = method("generate", {ids, kNewTokens}, {{"attention_mask", mask}}).toTensor();
    } else if (model_.bert) {
      auto mask = torch::ones_like(ids);
      mask[1].narrow(0, 5, 2).fill_(0);
      auto types = torch::zeros_like(ids);
      types.narrow(1, 4, 3).fill_(1);
      auto outputs = loaded_.forward({ids, mask, types}).toTuple()->elements();
      const char* names[] = {"sequence_output", "pooled_output", "logits", "nsp_logits"};
      for (size_t i = 0; i < outputs.size(); ++i) out[names[i]] = outputs[i].toTensor();
    } else {
      auto mask = torch::ones_like(ids);
      mask[1].narrow(0, 5, 2).fill_(0);
      out["logits"] = loaded_.forward({ids, mask, decoder_ids}).toTensor();
      out["memory"] = method("encode", {ids, mask}).toTensor();
      out["decoded"] = method("decode", {decoder_ids, out["memory"], mask}).toTensor();
      out["generated"] = method("generate", {ids, kNewTokens}, {{"attention_mask", mask}}).toTensor();
    }
    return out;
  }

  // The native outputs of the same model in float64 (its weights are float32 values, held
  // exactly), leaving margins_ as they were.
  std::map<std::string, torch::Tensor> native_in_float64() {
    const auto margins = margins_;
    place_weights(*model_.module(), torch::kCPU, torch::kDouble);  // quantized weights stay packed
    auto out = native();
    place_weights(*model_.module(), torch::kCPU, torch::kFloat);
    margins_ = margins;
    return out;
  }

  // The masked logits at the real tokens only: a left-padded query sees no key at all, which the
  // tiled kernel (soft-capped scores take it) answers with zeros and the math path, the export's,
  // with a uniform softmax over the masked keys. Nothing reads those positions.
  static torch::Tensor at_real_queries(const std::string& name, const torch::Tensor& t) {
    if (name != "masked_logits") return t;
    auto real = torch::ones({t.size(0), t.size(1), 1}, t.options());
    real[0].narrow(0, 0, 2).fill_(0);  // the padding native() and scripted() put in row 0
    return t * real;
  }

  void expect_equal_outputs(const std::map<std::string, torch::Tensor>& expected,
                            const std::map<std::string, torch::Tensor>& got, const std::string& where) {
    const double tol = tolerance(GetParam().dtype);
    double largest = 0;  // difference of the forward outputs
    std::map<std::string, torch::Tensor> exact;  // float64, computed only when needed
    for (const auto& [name, value] : expected) {
      ASSERT_TRUE(got.count(name)) << where << ": no " << name;
      if (name.rfind("generated", 0) == 0) continue;
      if (value.numel() == 0) {
        EXPECT_EQ(got.at(name).numel(), 0) << where << ": " << name;
        continue;
      }
      EXPECT_EQ(got.at(name).scalar_type(), value.scalar_type()) << where << ": " << name;
      const double difference = max_abs_diff(at_real_queries(name, got.at(name)), at_real_queries(name, value));
      largest = std::max(largest, difference);
      if (difference <= tol || GetParam().dtype != torch::kFloat || GetParam().convert_loaded) {
        EXPECT_LE(difference, tol) << where << ": " << name;
        continue;
      }
      // Past 1e-5 in float32 (issue #52 saw 1.79e-4 once, on gated linear attention, and never
      // again): the two sides sum in different orders, so each is off the exact result by the
      // computation's own rounding. The yardstick is the native side's distance from the same
      // model in float64; the export may be off by up to four times it (twice the native error
      // on each of two sides).
      if (exact.empty()) exact = native_in_float64();
      const auto reference = at_real_queries(name, exact.at(name));
      const double native_error = max_abs_diff(at_real_queries(name, value.to(torch::kDouble)), reference);
      const double export_error = max_abs_diff(at_real_queries(name, got.at(name).to(torch::kDouble)), reference);
      EXPECT_LE(export_error, std::max(tol, 4 * native_error))
          << where << ": " << name << " differs by " << difference << " from the native output; against float64 "
          << "the native output is off by " << native_error << ", the export by " << export_error;
    }
    // Generated tokens match as far as each native step is a clear call: its two most likely
    // tokens further apart than twice the largest forward difference. Past a close call the
    // export may rightly pick the other token, and all after it differs; at float32 and float64
    // every call is clear, in bfloat16 the model's seed is chosen so that at least half are.
    for (const auto& [name, value] : expected) {
      if (name.rfind("generated", 0) != 0) continue;
      ASSERT_EQ(got.at(name).sizes(), value.sizes()) << where << ": " << name;
      const int64_t prompt = value.size(1) - kNewTokens;
      const auto clear = (margins_.at(name) > 2 * largest).to(torch::kLong).cumprod(0).sum(0);  // (B)
      for (int64_t r = 0; r < value.size(0); ++r) {
        const int64_t n = clear[r].item<int64_t>();
        EXPECT_GE(n, kNewTokens / 2) << where << ": " << name << " row " << r << ": inputs too close to call";
        EXPECT_TRUE(got.at(name)[r].narrow(0, 0, prompt + n).equal(value[r].narrow(0, 0, prompt + n)))
            << where << ": " << name << " row " << r << ", its first " << n << " new tokens\nexpected\n"
            << value << "\ngot\n" << got.at(name);
      }
    }
    for (const auto& [name, value] : got) {
      EXPECT_TRUE(expected.count(name)) << where << ": unexpected " << name;
    }
  }

  ModelConfig config_;
  Model model_;
  std::string path_;
  torch::jit::Module loaded_;
  // Per generated output, the margins of native generation (native() sets them).
  std::map<std::string, torch::Tensor> margins_;
};

TEST_P(TorchScriptExport, MatchesTheNativeModelInCpp) {
  expect_equal_outputs(native(), scripted(), "C++");
}

TEST_P(TorchScriptExport, MatchesTheNativeModelInPython) {
  auto python = testing::python_reference("torchscript_check.py", python_arguments());
  expect_equal_outputs(native(), python, "PyTorch");
}

// The files of interop/script run as plain Python over the export's weights: what a user reads
// is the program that runs.
TEST_P(TorchScriptExport, MatchesTheNativeModelAsEagerPython) {
  auto python = testing::python_reference("torchscript_check.py", python_arguments("--eager"));
  expect_equal_outputs(native(), python, "interop/script in eager PyTorch");
}

TEST_P(TorchScriptExport, CarriesItsConfigAndTokenizer) {
  torch::jit::ExtraFilesMap extra{{"config.yaml", ""}, {"zoo.json", ""}, {"tokenizer.model", ""}};
  torch::jit::load(path_, torch::kCPU, extra);
  EXPECT_EQ(to_yaml(parse_config(extra["config.yaml"], "config.yaml")), to_yaml(config_));
  EXPECT_EQ(extra["tokenizer.model"], testing::shared_tokenizer().model_bytes());
  auto meta = nlohmann::json::parse(extra["zoo.json"]);
  EXPECT_EQ(meta["family"], to_string(config_.family));
  EXPECT_EQ(meta["vocab_size"], config_.vocab_size);
  for (const auto& method : meta["methods"]) {
    EXPECT_TRUE(loaded_.find_method(method.get<std::string>())) << method;
  }
  for (const auto& [name, files] : meta["script_files"].items()) {
    for (const auto& file : files) {
      EXPECT_TRUE(fs::is_regular_file(fs::path(ZOO_SOURCE_DIR) / "interop" / "script" / file.get<std::string>()))
          << name << ": " << file;
    }
  }
  // Every parameter of the model is in the archive where the header says, with its values, and
  // the archive holds no other parameter.
  int64_t native_elements = 0, archived_elements = 0;
  for (const auto& p : model_.module()->named_parameters()) {
    if (p.value().numel() == 0) continue;  // a quantized weight's, below
    auto value = archived(loaded_, p.key());
    ASSERT_TRUE(value.defined()) << p.key();
    EXPECT_TRUE(value.equal(p.value().to(value.scalar_type()))) << p.key();  // the archive: before any conversion
    native_elements += p.value().numel();
  }
  for (const auto& p : loaded_.named_parameters()) archived_elements += p.value.numel();
  EXPECT_EQ(archived_elements, native_elements);
  // A quantized weight is one integer tensor under its name (interop/script/common.py): each
  // output's integers, then its float32 scales' (and zeros') bytes.
  int64_t quantized = 0;
  for (const auto& m : model_.module()->named_modules()) {
    for (const auto& p : m.value()->named_parameters(/*recurse=*/false)) {
      const auto q = quantized_weight_of(*m.value(), p.value());
      if (!q) continue;
      const std::string name = (m.key().empty() ? "" : m.key() + ".") + p.key();
      const auto stored = archived(loaded_, name);  // a stack of experts: (experts, out, packed)
      const auto packed = stored.reshape({-1, stored.size(-1)});
      const int64_t n = q->data.size(1);
      ASSERT_EQ(packed.scalar_type(), q->data.scalar_type()) << name;
      EXPECT_TRUE(packed.narrow(1, 0, n).equal(q->data)) << name;
      const auto floats = packed.narrow(1, n, packed.size(1) - n).contiguous().view(torch::kFloat);
      EXPECT_TRUE(floats.equal(q->zero.defined() ? torch::cat({q->scale, q->zero}, 1) : q->scale.unsqueeze(1))) << name;
      ++quantized;
    }
  }
  EXPECT_EQ(quantized > 0, GetParam().quantization.has_value());
}

std::vector<Variant> variants() {
  std::vector<Variant> v;
  // Every config of configs/.
  for (const auto& entry : fs::directory_iterator(fs::path(ZOO_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() != ".yaml") continue;
    std::string name = entry.path().stem().string();
    std::string id = name;
    std::replace(id.begin(), id.end(), '-', '_');
    std::replace(id.begin(), id.end(), '.', '_');
    v.push_back({id, name, {}});
  }
  std::sort(v.begin(), v.end(), [](const Variant& a, const Variant& b) { return a.name < b.name; });
  // Variants configs/ does not use: the remaining position kinds, MQA, post-norm decoders,
  // interleaved RoPE, activations, every BERT head.
  v.push_back({"gpt_alibi_post_norm_relu", "gpt-tiny", {"position=alibi", "norm_position=post", "activation=relu"}});
  v.push_back({"gpt_sinusoidal_scaled_gelu", "gpt-tiny", {"position=sinusoidal", "scale_embeddings=true", "activation=gelu"}});
  v.push_back({"gpt_relative_geglu", "gpt-tiny", {"position=relative", "activation=geglu"}});
  v.push_back({"gpt_no_positions_untied", "gpt-tiny", {"position=none", "tie_embeddings=false"}});
  v.push_back({"llama_mqa_interleaved_rope", "llama-tiny", {"n_kv_heads=1", "rope_layout=interleaved"}});
  v.push_back({"bert_rope_rmsnorm_pretraining", "bert-tiny", {"position=rope", "norm=rmsnorm", "head=pretraining"}});
  v.push_back({"bert_alibi_nsp", "bert-tiny", {"position=alibi", "head=nsp"}});
  v.push_back({"bert_sequence_classification", "bert-tiny", {"head=sequence_classification", "num_labels=3"}});
  v.push_back({"bert_token_classification_no_pooler", "bert-tiny", {"head=token_classification", "pooler=false"}});
  v.push_back({"t5_gqa", "t5-tiny", {"n_kv_heads=2", "n_heads=4"}});
  v.push_back({"transformer_rope_swiglu", "transformer-base", {"position=rope", "activation=swiglu"}});
  // LayerNorm without bias (the masked-LM head's keeps it), plain SiLU.
  v.push_back({"gpt_no_bias_silu", "gpt-tiny", {"bias=false", "activation=silu"}});
  // YaRN: the script's rotation tables carry the attention factor (layers/rotary.h).
  v.push_back({"llama_yarn", "llama-tiny", {"rope_scaling=yarn", "rope_scaling_factor=4", "rope_original_max_positions=32"}});
  // Phi-3: half of each head rotated; LongRoPE past a trained context of 8, which generation
  // crosses (the padded row later), the script reading every row again there as zoo does.
  v.push_back({"phi3_longrope_partial", "llama-tiny",
               {"rotary_dim=4", "rope_scaling=longrope", "rope_original_max_positions=8", "rope_short_factor=[1, 1.5]",
                "rope_long_factor=[3, 9]", "hf_fused_projections=true"}});
  v.push_back({"bert_mlm_no_bias", "bert-tiny", {"bias=false"}});
  // Linformer (kernels/linformer_attention.h): E and F per key head with RoPE and a classifier, and
  // one matrix for both under a masked LM.
  v.push_back({"bert_linformer_per_head_rope_classification", "bert-tiny",
               {"attention=linformer", "linformer_k=8", "linformer_sharing=per_head", "position=rope",
                "head=sequence_classification", "num_labels=3"}});
  v.push_back({"bert_linformer_key_value", "bert-tiny", {"attention=linformer", "linformer_k=16", "linformer_sharing=key_value"}});
  // Longformer (kernels/longformer_attention.h): a window per layer, a dilated head and the
  // classifier's global first token; a masked LM with two global tokens.
  v.push_back({"bert_longformer_dilated_classification", "bert-tiny",
               {"n_heads=4", "attention=longformer", "attention_window=[4, 6]", "attention_dilation=[1, 2, 1, 3]",
                "head=sequence_classification", "num_labels=3"}});
  v.push_back({"bert_longformer_global_mlm", "bert-tiny",
               {"attention=longformer", "attention_window=[4]", "longformer_global_tokens=2"}});
  // Gemma 2 with caps that bend these scores and logits, scores over 12, and Gemma 3's local RoPE base.
  v.push_back({"gemma2_small_caps_local_rope", "gemma-2-2b",
               {"attention_softcap=1", "logit_softcap=2", "attention_scale_dim=12", "window_rope_base=100"}});
  // ModernBERT's classifiers: a head transform over the mean of the real tokens, or over each token
  // (the masked LM, without layer 0's attention norm and with a two-sided window, is configs/').
  v.push_back({"modernbert_mean_sequence_classification", "modernbert-base",
               {"head=sequence_classification", "head_transform=true", "num_labels=3"}});
  v.push_back({"modernbert_token_classification", "modernbert-base",
               {"head=token_classification", "head_transform=true", "pooling=cls"}});
  // Mixtures of experts (layers/mixture_of_experts.h): Qwen3-MoE's raw top-1 weights with a dense
  // layer between (each kind's feed-forward stacked apart), Mixtral's renormalised top 2.
  v.push_back({"llama_experts_top1_dense_layer", "llama-tiny",
               {"experts=4", "experts_per_token=1", "expert_d_ff=24", "normalize_expert_weights=false",
                "dense_layers=[1]", "qk_norm=true", "round_expert_weights=true"}});
  // In bfloat16, seed 4 gives clear calls (3 of seeds 1-14 do: routing adds near ties).
  v.push_back({"llama_experts_top2_rounded_bfloat16", "llama-tiny",
               {"experts=4", "experts_per_token=2", "round_expert_weights=true"}, torch::kBFloat16, 4});
  // Linear and gated linear attention (layers/linear_attention.h): every layer gated, and hybrids
  // mixing the three kinds (each kind's weights stacked apart), performer features, relu without
  // normalisation; a LLaMA layout; in bfloat16 too.
  v.push_back({"gpt_gated_linear", "gpt-tiny", {"attention=gated_linear"}});
  v.push_back({"gpt_linear_performer_gated", "gpt-tiny",
               {"n_layers=2", "attention_layers=[linear, gated_linear]", "feature_map=performer", "performer_features=32"}});
  v.push_back({"gpt_hybrid_gated_softmax_rope", "gpt-tiny", {"n_layers=2", "attention_layers=[gated_linear, softmax]", "position=rope"}});
  v.push_back({"gpt_linear_relu_unnormalised", "gpt-tiny", {"attention=linear", "feature_map=relu", "linear_normalize=false"}});
  v.push_back({"llama_gated_linear", "llama-tiny", {"position=none", "n_kv_heads=0", "attention=gated_linear"}});
  v.push_back({"gpt_gated_linear_bfloat16", "gpt-tiny", {"attention=gated_linear"}, torch::kBFloat16, 7});
  // In float64 the chunked sums of gated linear attention leave nothing to rounding: 1e-12.
  v.push_back({"gpt_gated_linear_float64", "gpt-tiny", {"attention=gated_linear"}, torch::kDouble});
  // Models in other dtypes than float32, converted before export. In bfloat16 a greedy step of
  // these tiny random models is often too close to call; seed 5 gives models whose generations
  // are clear calls for at least half of their 6 tokens (1 of seeds 1-22 does, since decoding
  // attention sums in float32: kernels/decode_attention.h).
  for (const auto& name : {"gpt-tiny", "llama-tiny", "bert-tiny", "t5-tiny"}) {
    std::string id = name;
    std::replace(id.begin(), id.end(), '-', '_');
    v.push_back({id + "_float64", name, {}, torch::kDouble});
    v.push_back({id + "_bfloat16", name, {}, torch::kBFloat16, 5});
  }
  v.push_back({"llama_tiny_float64_after_loading", "llama-tiny", {}, torch::kDouble, 7, true});
  // Quantized weights (#49), packed in the export and dequantized by its scripts: int8 and int4
  // in each kind of stack, a tied head and a masked-LM head on a quantized embedding, bf16
  // activations, and float64 after loading (the packed integers and scales stay as they are).
  const auto int8 = WeightQuantization::every_weight(WeightFormat::kInt8);
  const auto int4 = WeightQuantization::every_weight(WeightFormat::kInt4);
  v.push_back({"gpt_tiny_int8", "gpt-tiny", {}, torch::kFloat, 7, false, int8});
  v.push_back({"llama_tiny_int4", "llama-tiny", {}, torch::kFloat, 7, false, int4});
  v.push_back({"bert_pretraining_int4", "bert-tiny", {"head=pretraining"}, torch::kFloat, 7, false, int4});
  v.push_back({"t5_tiny_int8", "t5-tiny", {}, torch::kFloat, 7, false, int8});
  v.push_back({"gpt_tiny_int4_bfloat16", "gpt-tiny", {}, torch::kBFloat16, 5, false, int4});
  v.push_back({"llama_tiny_int8_float64_after_loading", "llama-tiny", {}, torch::kDouble, 7, true, int8});
  // Quantized experts beside a dense layer; seed 1 (the default 7 routes one token of row 0 on a
  // near tie of two experts, too close to call).
  v.push_back({"llama_experts_int4", "llama-tiny", {"experts=4", "experts_per_token=2", "dense_layers=[1]"},
               torch::kFloat, 1, false, int4});
  v.push_back({"t5_tiny_float64_after_loading", "t5-tiny", {}, torch::kDouble, 7, true});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Variants, TorchScriptExport, ::testing::ValuesIn(variants()),
                         [](const auto& info) { return info.param.name; });

class TorchScriptGeneration : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(3);
    model_ = build_model(shrunk("gpt-tiny", {}));
    model_.module()->eval();
    path_ = testing::scratch_path("torchscript-generation").string() + ".pt";
    export_torchscript(model_, path_);
    loaded_ = torch::jit::load(path_);
  }
  torch::Tensor generate_scripted(const torch::Tensor& ids, int64_t n, double temperature, int64_t top_k,
                                  double top_p, int64_t eos) {
    torch::NoGradGuard no_grad;
    return loaded_.get_method("generate")({ids, n, temperature, top_k, top_p, eos}).toTensor();
  }
  Model model_;
  std::string path_;
  torch::jit::Module loaded_;
};

TEST_F(TorchScriptGeneration, StopsAtEosAndPadsFinishedRows) {
  const auto ids = token_ids(2, 5, 11, 2, model_.config.vocab_size);
  auto greedy = generate_scripted(ids, 8, 0.0, 0, 1.0, -1);
  ASSERT_EQ(greedy.size(1), 13);
  // Row 0's first new token as EOS: row 0 ends at once, row 1 goes on until it meets it.
  const int64_t eos = greedy[0][5].item<int64_t>();
  auto out = generate_scripted(ids, 8, 0.0, 0, 1.0, eos);
  GenerationOptions o;
  o.max_new_tokens = 8;
  o.eos_ids = {eos};
  auto native = generate(model_.gpt, {row(ids, 0), row(ids, 1)}, o);
  for (int64_t r = 0; r < 2; ++r) {
    auto produced = row(out, r, 5);
    const auto& expected = native.tokens[r];
    ASSERT_GE(produced.size(), expected.size());
    EXPECT_EQ(std::vector<int64_t>(produced.begin(), produced.begin() + expected.size()), expected) << r;
    if (native.finish_reasons[r] == FinishReason::kEos) {
      ASSERT_GT(produced.size(), expected.size());
      EXPECT_EQ(produced[expected.size()], eos);
      for (size_t i = expected.size() + 1; i < produced.size(); ++i) EXPECT_EQ(produced[i], model_.config.pad_id);
    }
  }
  // It stops once every row is done: no column past the last row's EOS.
  const size_t longest = std::max(native.tokens[0].size() + (native.finish_reasons[0] == FinishReason::kEos),
                                  native.tokens[1].size() + (native.finish_reasons[1] == FinishReason::kEos));
  EXPECT_EQ(out.size(1), 5 + static_cast<int64_t>(longest));
}

TEST_F(TorchScriptGeneration, SamplingFiltersReduceToGreedyAtTheirLimits) {
  const auto ids = token_ids(2, 5, 11, 2, model_.config.vocab_size);
  auto greedy = generate_scripted(ids, 8, 0.0, 0, 1.0, -1);
  torch::manual_seed(1);
  EXPECT_TRUE(generate_scripted(ids, 8, 1.0, 1, 1.0, -1).equal(greedy));     // top-k 1
  EXPECT_TRUE(generate_scripted(ids, 8, 1.0, 0, 1e-9, -1).equal(greedy));    // nucleus of one token
  auto sampled = generate_scripted(ids, 8, 1.5, 0, 1.0, -1);
  EXPECT_TRUE(sampled.narrow(1, 0, 5).equal(ids));
  EXPECT_GE(sampled.min().item<int64_t>(), 0);
  EXPECT_LT(sampled.max().item<int64_t>(), model_.config.vocab_size);
  // Seeded sampling repeats; a high temperature wanders from greedy.
  torch::manual_seed(5);
  auto a = generate_scripted(ids, 8, 2.0, 0, 1.0, -1);
  torch::manual_seed(5);
  EXPECT_TRUE(generate_scripted(ids, 8, 2.0, 0, 1.0, -1).equal(a));
  EXPECT_FALSE(a.equal(greedy));
}

TEST_F(TorchScriptGeneration, RefusesInputsBeyondItsLimits) {
  const auto ids = token_ids(1, 30, 3, 1, model_.config.vocab_size);
  auto message = error_of([&] { generate_scripted(ids, 20, 0.0, 0, 1.0, -1); });
  EXPECT_NE(message.find("prompt (30 tokens) plus max_new_tokens (20) exceeds max_positions (40)"), std::string::npos)
      << message;
  message = error_of([&] { loaded_.forward({token_ids(1, 41, 3, 1, 97)}); });
  EXPECT_NE(message.find("41 tokens, more than max_positions (40)"), std::string::npos) << message;
}

TEST(TorchScriptFiles, WritesAtomicallyAndNamesBadPaths) {
  torch::manual_seed(0);
  Model model = build_model(shrunk("gpt-tiny", {}));
  const fs::path dir = testing::scratch_path("torchscript-files");
  fs::create_directories(dir);
  // Into a directory that does not exist yet: created.
  export_torchscript(model, (dir / "nested" / "model.pt").string());
  EXPECT_TRUE(fs::is_regular_file(dir / "nested" / "model.pt"));
  // A directory as the target: refused, nothing written.
  auto message = error_of([&] { export_torchscript(model, (dir / "nested").string()); });
  EXPECT_NE(message.find("is a directory"), std::string::npos) << message;
  // A parent that is a file: refused, and no temporary file is left behind.
  std::ofstream(dir / "plain") << "x";
  message = error_of([&] { export_torchscript(model, (dir / "plain" / "model.pt").string()); });
  EXPECT_NE(message, "no error");
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
  }
}

TEST(TorchScriptSource, EmbedsTheFilesOfInteropScript) {
  std::map<std::string, std::string> on_disk;
  for (const auto& entry : fs::directory_iterator(fs::path(ZOO_SOURCE_DIR) / "interop" / "script")) {
    std::ifstream in(entry.path());
    on_disk[entry.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::map<std::string, std::string> embedded;
  for (const auto& file : script_files()) embedded[std::string(file.name)] = std::string(file.text);
  EXPECT_EQ(embedded, on_disk);
}

TEST(TorchScriptSource, IsTheFilesTheFamilyUses) {
  auto file = [](const std::string& name) {
    std::ifstream in(fs::path(ZOO_SOURCE_DIR) / "interop" / "script" / name);
    return "# interop/script/" + name + "\n" + std::string(std::istreambuf_iterator<char>(in), {});
  };
  const auto gpt = torchscript_source(shrunk("gpt-tiny", {}));
  for (const auto* name : {"common.py", "positions.py", "blocks.py", "generation.py", "decoder.py"}) {
    EXPECT_NE(gpt.find(file(name)), std::string::npos) << name;
  }
  EXPECT_EQ(gpt.find("encoder.py"), std::string::npos);
  const auto t5 = torchscript_source(shrunk("t5-tiny", {}));
  EXPECT_NE(t5.find(file("encoder_decoder.py")), std::string::npos);
  EXPECT_EQ(t5.find("# interop/script/decoder.py"), std::string::npos);
  // Batch-1 projections take the matrix-vector path, as the native layers do.
  EXPECT_NE(gpt.find("torch.addmv(bias, weight, x.reshape(-1))"), std::string::npos);
}

// A weight the config lacks is None, so TorchScript compiles the branch the config takes and
// no test of it runs per token.
TEST(TorchScriptSource, CompilesOnlyTheBranchesTheConfigTakes) {
  torch::manual_seed(0);
  auto gpt = to_torchscript(build_model(shrunk("gpt-tiny", {})));
  auto llama = to_torchscript(build_model(shrunk("llama-tiny", {})));
  EXPECT_TRUE(gpt.attr("lm_head_weight").isNone());  // tied
  EXPECT_TRUE(llama.attr("lm_head_weight").isTensor());
  auto gpt_blocks = gpt.attr("blocks").toModule(), llama_blocks = llama.attr("blocks").toModule();
  EXPECT_TRUE(gpt_blocks.attr("ff_gate_weight").isNone());
  EXPECT_TRUE(gpt_blocks.attr("self_attn_qkv_bias").isTensor());
  EXPECT_TRUE(llama_blocks.attr("ff_gate_weight").isTensor());
  EXPECT_TRUE(llama_blocks.attr("self_attn_qkv_bias").isNone());
  for (auto* blocks : {&gpt_blocks, &llama_blocks}) {
    const auto graph = blocks->get_method("_feed_forward").graph()->toString();
    EXPECT_EQ(graph.find("prim::If"), std::string::npos) << graph;
  }
}

// A tensor of the model that no script reads means a variant the export does not know: refused
// at export, naming it.
TEST(TorchScriptVariants, RefusesTensorsNoScriptReads) {
  torch::manual_seed(0);
  Model model = build_model(shrunk("gpt-tiny", {}));
  model.gpt->blocks[0]->register_parameter("mystery", torch::zeros({3}));
  auto message = error_of([&] { to_torchscript(model); });
  EXPECT_NE(message.find("blocks.1 has no mystery but blocks.0 has"), std::string::npos) << message;
  model.gpt->blocks[1]->register_parameter("mystery", torch::zeros({3}));
  message = error_of([&] { to_torchscript(model); });
  EXPECT_NE(message.find("blocks: the model's mystery is read by no script"), std::string::npos) << message;

  Model other = build_model(shrunk("gpt-tiny", {}));
  other.gpt->final_norm->register_parameter("scale", torch::ones({1}));
  message = error_of([&] { to_torchscript(other); });
  EXPECT_NE(message.find("GPT: the model's final_norm_scale is read by no script"), std::string::npos) << message;
}

// A spelling the scripts do not know fails when it is met, naming it.
TEST(TorchScriptVariants, ScriptsRefuseUnknownSpellings) {
  torch::manual_seed(0);
  const auto ids = token_ids(1, 4, 3, 1, 97);
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"norm", "batchnorm", "unknown norm batchnorm"},
      {"norm_position", "sandwich", "unknown norm_position sandwich"},
      {"activation", "gelu_exact", "unknown activation gelu_exact"},
      {"rope_layout", "spiral", "unknown rope_layout spiral"}};
  for (const auto& [attribute, value, expected] : cases) {
    auto script = to_torchscript(build_model(shrunk("llama-tiny", {})));
    script.attr("blocks").toModule().setattr(attribute, value);
    auto message = error_of([&] { script.forward({ids}); });
    EXPECT_NE(message.find(expected), std::string::npos) << attribute << ": " << message;
  }
}

}  // namespace
}  // namespace zoo
