#include "interop/torchscript.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>
#include <torch/torch.h>

#include "models/generation.h"
#include "test_util.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::max_abs_diff;

constexpr double kTolerance = 1e-5;

// A config of configs/ (or one changed by `overrides`), shrunk to test size with its variants
// kept: attention kind (heads : kv heads), positions, norms, activation, window, heads.
ModelConfig shrunk(const std::string& name, const std::vector<std::string>& overrides) {
  ModelConfig c = load_config(find_config(name));
  for (const auto& o : overrides) apply_override(c, o);
  c.vocab_size = 97;
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
  c.init_std = 0.2;  // clear argmax margins for the greedy comparisons
  c.validate(name);
  return c;
}

struct Variant {
  std::string name;
  std::string config;
  std::vector<std::string> overrides;
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

torch::Tensor token_ids(int64_t batch, int64_t length, int64_t multiplier, int64_t offset, int64_t vocab) {
  return (torch::arange(batch * length, torch::kLong) * multiplier + offset).remainder(vocab).view({batch, length});
}

std::vector<int64_t> row(const torch::Tensor& t, int64_t r, int64_t from = 0) {
  auto x = t[r].narrow(0, from, t.size(1) - from).contiguous();
  return std::vector<int64_t>(x.data_ptr<int64_t>(), x.data_ptr<int64_t>() + x.numel());
}

class TorchScriptExport : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    torch::manual_seed(7);
    config_ = shrunk(GetParam().config, GetParam().overrides);
    model_ = build_model(config_);
    model_.module()->eval();
    path_ = testing::scratch_path("torchscript-" + GetParam().name).string() + ".pt";
    export_torchscript(model_, path_, "not really a tokenizer");
    loaded_ = torch::jit::load(path_);
  }

  // Native outputs on the inputs tests/reference/torchscript_check.py builds.
  std::map<std::string, torch::Tensor> native() {
    torch::NoGradGuard no_grad;
    const int64_t v = config_.vocab_size;
    auto ids = token_ids(2, 7, 7, 3, v);
    std::map<std::string, torch::Tensor> out;
    if (model_.gpt) {
      auto mask = torch::ones_like(ids);
      mask[0].narrow(0, 0, 2).fill_(0);
      out["logits"] = model_.gpt->forward(ids);
      out["masked_logits"] = model_.gpt->forward(ids, mask);
      GenerationOptions o;
      o.max_new_tokens = 6;
      auto full = generate(model_.gpt, {row(ids, 0), row(ids, 1)}, o);
      auto padded = generate(model_.gpt, {row(ids, 0, 2), row(ids, 1)}, o);
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
      auto decoder_ids = token_ids(2, 5, 5, 1, v);
      out["logits"] = model_.seq2seq->forward(ids, mask, decoder_ids);
      out["memory"] = model_.seq2seq->encode(ids, mask);
      out["decoded"] = model_.seq2seq->decode(decoder_ids, out["memory"], mask);
      GenerationOptions o;
      o.max_new_tokens = 6;
      auto second = row(ids, 1);
      second.resize(5);  // the masked tail is padding
      auto g = generate(model_.seq2seq, {row(ids, 0), second}, o);
      auto start = torch::full({2, 1}, config_.decoder_start_id, torch::kLong);
      out["generated"] = torch::cat({start, torch::stack({torch::tensor(g.tokens[0]), torch::tensor(g.tokens[1])})}, 1);
    }
    return out;
  }

  // The same through the loaded TorchScript module, in C++.
  std::map<std::string, torch::Tensor> scripted() {
    torch::NoGradGuard no_grad;
    const int64_t v = config_.vocab_size;
    auto ids = token_ids(2, 7, 7, 3, v);
    std::map<std::string, torch::Tensor> out;
    auto method = [&](const char* name, std::vector<c10::IValue> args, const torch::jit::Kwargs& kwargs = {}) {
      return loaded_.get_method(name)(std::move(args), kwargs);
    };
    if (model_.gpt) {
      auto mask = torch::ones_like(ids);
      mask[0].narrow(0, 0, 2).fill_(0);
      out["logits"] = loaded_.forward({ids}).toTensor();
      out["masked_logits"] = loaded_.forward({ids, mask}).toTensor();
      out["generated"] = method("generate", {ids, 6}).toTensor();
      out["generated_masked"] = method("generate", {ids, 6}, {{"attention_mask", mask}}).toTensor();
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
      auto decoder_ids = token_ids(2, 5, 5, 1, v);
      out["logits"] = loaded_.forward({ids, mask, decoder_ids}).toTensor();
      out["memory"] = method("encode", {ids, mask}).toTensor();
      out["decoded"] = method("decode", {decoder_ids, out["memory"], mask}).toTensor();
      out["generated"] = method("generate", {ids, 6}, {{"attention_mask", mask}}).toTensor();
    }
    return out;
  }

  void expect_equal_outputs(const std::map<std::string, torch::Tensor>& expected,
                            const std::map<std::string, torch::Tensor>& got, const std::string& where) {
    for (const auto& [name, value] : expected) {
      ASSERT_TRUE(got.count(name)) << where << ": no " << name;
      if (name.rfind("generated", 0) == 0) {
        EXPECT_TRUE(got.at(name).equal(value)) << where << ": " << name << "\nexpected\n" << value << "\ngot\n" << got.at(name);
      } else if (value.numel() == 0) {
        EXPECT_EQ(got.at(name).numel(), 0) << where << ": " << name;
      } else {
        EXPECT_LE(max_abs_diff(got.at(name), value), kTolerance) << where << ": " << name;
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
};

TEST_P(TorchScriptExport, MatchesTheNativeModelInCpp) {
  expect_equal_outputs(native(), scripted(), "C++");
}

TEST_P(TorchScriptExport, MatchesTheNativeModelInPython) {
  auto python = testing::python_reference("torchscript_check.py", {path_});
  expect_equal_outputs(native(), python, "python3-torch");
}

TEST_P(TorchScriptExport, CarriesItsConfigAndTokenizer) {
  torch::jit::ExtraFilesMap extra{{"config.yaml", ""}, {"zoo.json", ""}, {"tokenizer.model", ""}};
  torch::jit::load(path_, torch::kCPU, extra);
  EXPECT_EQ(to_yaml(parse_config(extra["config.yaml"], "config.yaml")), to_yaml(config_));
  EXPECT_EQ(extra["tokenizer.model"], "not really a tokenizer");
  auto meta = nlohmann::json::parse(extra["zoo.json"]);
  EXPECT_EQ(meta["family"], family_name(config_.family));
  EXPECT_EQ(meta["vocab_size"], config_.vocab_size);
  // Every parameter of the model is in the archive, under its flattened name, with its values.
  std::map<std::string, torch::Tensor> archived;
  for (const auto& p : loaded_.named_parameters()) archived[p.name] = p.value;
  for (const auto& p : model_.module()->named_parameters()) {
    std::string name = p.key();
    std::replace(name.begin(), name.end(), '.', '_');
    ASSERT_TRUE(archived.count(name)) << name;
    EXPECT_TRUE(archived[name].equal(p.value())) << name;
  }
  EXPECT_EQ(archived.size(), model_.module()->named_parameters().size());
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
    if (native.finish_reasons[r] == "eos") {
      ASSERT_GT(produced.size(), expected.size());
      EXPECT_EQ(produced[expected.size()], eos);
      for (size_t i = expected.size() + 1; i < produced.size(); ++i) EXPECT_EQ(produced[i], model_.config.pad_id);
    }
  }
  // It stops once every row is done: no column past the last row's EOS.
  const size_t longest = std::max(native.tokens[0].size() + (native.finish_reasons[0] == "eos"),
                                  native.tokens[1].size() + (native.finish_reasons[1] == "eos"));
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
  EXPECT_NE(message.find("exceeds max_positions (40)"), std::string::npos) << message;
  message = error_of([&] { loaded_.forward({token_ids(1, 41, 3, 1, 97)}); });
  EXPECT_NE(message.find("more tokens than max_positions (40)"), std::string::npos) << message;
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

TEST(TorchScriptSource, OnlyWritesTheVariantsTheConfigUses) {
  auto gpt = torchscript_source(shrunk("gpt-tiny", {}));
  EXPECT_EQ(gpt.find("_rope"), std::string::npos);
  EXPECT_EQ(gpt.find("reshape(b, 4, 1 * t"), std::string::npos);  // no GQA folding for MHA
  EXPECT_NE(gpt.find("torch.gelu(self._project(x, up_w, up_b), approximate=\"tanh\")"), std::string::npos);
  auto llama = torchscript_source(shrunk("llama-tiny", {}));
  EXPECT_NE(llama.find("def _rope"), std::string::npos);
  EXPECT_NE(llama.find("torch.silu(self._project(x, gate_w, gate_b))"), std::string::npos);
  EXPECT_NE(llama.find("q.reshape(b, 2, 4 * t, 8)"), std::string::npos);
  // Batch-1 projections take the matrix-vector path, as the native layers do.
  EXPECT_NE(gpt.find("torch.addmv(bias, weight, x.reshape(-1))"), std::string::npos);
  auto mistral = torchscript_source(shrunk("mistral-tiny", {}));
  EXPECT_NE(mistral.find("allowed & (k > q - 5)"), std::string::npos);
}

}  // namespace
}  // namespace zoo
