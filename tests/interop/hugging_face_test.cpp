#include "interop/hugging_face.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/files.h"
#include "interop/safetensors.h"
#include "test_util.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

struct Flavor {
  std::string name;
  bool sharded = false;
};

std::string flavor_dir(const Flavor& f, const std::string& tag = "hf") {
  return testing::scratch_path(tag + "-" + f.name + (f.sharded ? "-sharded" : "")).string();
}

// The model's outputs on the reference inputs, named like the reference script's.
std::map<std::string, torch::Tensor> outputs(Model& model, const std::map<std::string, torch::Tensor>& ref) {
  torch::NoGradGuard no_grad;
  model.module()->eval();
  std::map<std::string, torch::Tensor> out;
  const auto& ids = ref.at("input_ids");
  const auto& mask = ref.at("attention_mask");
  switch (model.config.family) {
    case Family::kGpt: out["logits"] = model.gpt->forward(ids); break;
    case Family::kBert: {
      const auto r = model.bert->forward(ids, mask, ref.at("token_type_ids"));
      out["sequence_output"] = r.sequence_output;
      if (r.pooled_output.defined()) out["pooled_output"] = r.pooled_output;
      if (r.logits.defined()) out["logits"] = r.logits;
      break;
    }
    default: out["logits"] = model.seq2seq->forward(ids, mask, ref.at("decoder_input_ids"));
  }
  return out;
}

void PrintTo(const Flavor& f, std::ostream* os) { *os << f.name << (f.sharded ? " (sharded)" : ""); }

class HuggingFace : public ::testing::TestWithParam<Flavor> {};

// A model written in Hugging Face's naming by python3-torch, with a reference forward from the
// published architecture, imports and matches; exported back, the reference forward reading
// zoo's files gives the same outputs.
TEST_P(HuggingFace, ImportsMatchesAndExportsBack) {
  const auto& f = GetParam();
  const auto dir = flavor_dir(f);
  std::vector<std::string> args = {"write", f.name, dir};
  if (f.sharded) args.push_back("--sharded");
  const auto ref = testing::python_reference("hf_models.py", args);

  HfImportReport report;
  Model model = import_hf(dir, &report);
  EXPECT_TRUE(report.unexpected.empty()) << report.unexpected.front();
  auto got = outputs(model, ref);
  for (const char* key : {"logits", "sequence_output", "pooled_output"}) {
    const bool in_ref = ref.count(key) > 0, in_zoo = got.count(key) > 0;
    ASSERT_EQ(in_ref, in_zoo) << key;
    if (in_ref) EXPECT_ALLCLOSE(got[key], ref.at(key), 2e-5) << key;
  }
  if (f.name == "gpt2") {
    EXPECT_NE(std::find(report.ignored.begin(), report.ignored.end(), "transformer.h.0.attn.bias"), report.ignored.end());
  }

  const auto exported = flavor_dir(f, "export");
  export_hf(model, exported);
  EXPECT_TRUE(fs::exists(fs::path(exported) / "config.json"));
  const auto again = testing::python_reference("hf_models.py", {"check", f.name, exported});
  for (const char* key : {"logits", "sequence_output", "pooled_output"}) {
    if (ref.count(key)) EXPECT_ALLCLOSE(again.at(key), ref.at(key), 1e-6) << key;
  }
  // And zoo reads its own export back to the same model.
  Model back = import_hf(exported);
  auto got_back = outputs(back, ref);
  for (const auto& [key, value] : got) EXPECT_ALLCLOSE(got_back.at(key), value, 0.0) << key;
}

INSTANTIATE_TEST_SUITE_P(Families, HuggingFace,
                         ::testing::Values(Flavor{"gpt2"}, Flavor{"gpt2", true}, Flavor{"bert"}, Flavor{"bert_mlm"},
                                           Flavor{"bert_cls"}, Flavor{"t5"}, Flavor{"t5_v1_1", true}),
                         [](const auto& info) { return info.param.name + (info.param.sharded ? "_sharded" : ""); });

TEST(HuggingFaceErrors, NameTheTensorTheShapesAndTheKeys) {
  const auto dir = testing::scratch_path("hf-errors").string();
  testing::python_reference("hf_models.py", {"write", "gpt2", dir});
  const auto weights_path = (fs::path(dir) / "model.safetensors").string();
  auto weights = load_safetensors(weights_path).tensors;

  // A tensor the model needs is missing.
  auto fewer = weights;
  fewer.erase("transformer.h.1.ln_2.weight");
  save_safetensors(weights_path, fewer);
  auto message = error_of([&] { import_hf(dir); });
  EXPECT_NE(message.find("missing tensors the model needs: transformer.h.1.ln_2.weight"), std::string::npos) << message;

  // An extra tensor is reported by name.
  auto more = weights;
  more["transformer.extra.weight"] = torch::zeros({2});
  save_safetensors(weights_path, more);
  HfImportReport report;
  import_hf(dir, &report);
  EXPECT_EQ(report.unexpected, std::vector<std::string>{"transformer.extra.weight"});

  // A shape that disagrees with config.json names the tensor and both shapes.
  auto wrong = weights;
  wrong["transformer.wpe.weight"] = torch::zeros({10, 32});
  save_safetensors(weights_path, wrong);
  message = error_of([&] { import_hf(dir); });
  EXPECT_NE(message.find("tensor 'transformer.wpe.weight' has shape [10, 32] but zoo's positions.learned.embedding.weight "
                         "needs [64, 32]"),
            std::string::npos)
      << message;

  // Config problems name config.json and the key.
  const auto config = (fs::path(dir) / "config.json").string();
  write_file_atomically(config, R"({"model_type": "gpt_neox"})");
  EXPECT_NE(error_of([&] { import_hf(dir); }).find("config.json: model_type 'gpt_neox' is not supported"), std::string::npos);
  write_file_atomically(config, R"({"model_type": "gpt2", "vocab_size": 96})");
  EXPECT_NE(error_of([&] { import_hf(dir); }).find("config.json: missing key 'n_embd'"), std::string::npos);
  fs::remove(weights_path);
  write_file_atomically(config, R"({"model_type": "gpt2"})");
  EXPECT_NE(error_of([&] { read_hf_weights(dir); }).find("no model.safetensors nor model.safetensors.index.json"),
            std::string::npos);
}

TEST(HuggingFaceErrors, ExportRefusesConfigsWithoutAnEquivalent) {
  for (const char* name : {"llama-tiny", "transformer-base"}) {
    const auto config = load_config(find_config(name));
    EXPECT_NE(error_of([&] { config_to_hf(config); }).find("has no Hugging Face equivalent"), std::string::npos) << name;
  }
  for (const char* name : {"gpt-tiny", "gpt2-small", "bert-base", "t5-small", "t5-v1_1-small"}) {
    const auto config = load_config(find_config(name));
    EXPECT_NO_THROW(config_to_hf(config)) << name;
    // The Hugging Face config reads back to the same architecture.
    const auto back = config_from_hf(config_to_hf(config), name);
    EXPECT_EQ(back.d_model, config.d_model) << name;
    EXPECT_EQ(back.n_heads, config.n_heads) << name;
    EXPECT_EQ(back.d_ff, config.d_ff) << name;
    EXPECT_EQ(back.activation, config.activation) << name;
    EXPECT_EQ(back.tie_embeddings, config.tie_embeddings) << name;
  }
}

}  // namespace
}  // namespace zoo
