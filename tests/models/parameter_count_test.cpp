#include "models/parameter_count.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "models/model.h"
#include "test_util.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;

// The count from the config equals the built modules' own count, row by row, for every shipped
// config (shrunk where large, keeping its variants) and for variants no shipped config uses.
void expect_same_as_built(ModelConfig c, const std::string& what) {
  const auto built = build_model(c);
  EXPECT_EQ(parameter_breakdown(c), parameter_breakdown(*built.module())) << what;
  EXPECT_EQ(count_parameters(c), count_parameters(*built.module())) << what;
}

TEST(ParameterCountFromConfig, EveryShippedConfigMatchesTheBuiltModel) {
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(ZOO_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() != ".yaml") continue;
    expect_same_as_built(testing::at_test_size(load_config(entry.path().string())), entry.path().filename().string());
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

TEST(ParameterCountFromConfig, VariantsMatchTheBuiltModel) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"gpt-tiny", {"bias=false"}},
      {"gpt-tiny", {"norm=rmsnorm", "activation=swiglu", "tie_embeddings=false", "n_kv_heads=1"}},
      {"gpt-tiny", {"position=alibi", "norm_position=post"}},
      {"gpt-tiny", {"position=relative", "head_dim=24"}},
      {"bert-tiny", {"head=pretraining"}},
      {"bert-tiny", {"head=mlm", "pooler=false", "bias=false"}},
      {"bert-tiny", {"head=token_classification", "num_labels=7", "pooler=false"}},
      {"bert-tiny", {"head=sequence_classification", "norm_position=pre", "norm=rmsnorm"}},
      {"t5-tiny", {"encoder_layers=1", "decoder_layers=3", "activation=geglu_tanh", "tie_embeddings=false"}},
      {"t5-tiny", {"n_kv_heads=2", "bias=true", "norm=layernorm"}},
      {"llama-tiny", {"qkv_bias=true", "tie_embeddings=true", "head_dim=48"}},
      {"llama-tiny", {"qk_norm=true", "head_dim=24", "n_kv_heads=2"}},
      {"gpt-tiny", {"qk_norm=true"}},  // LayerNorm heads, without their bias
      {"t5-tiny", {"qkv_bias=true"}},  // cross-attention's q and kv projections too
      {"bert-tiny", {"bias=false", "qkv_bias=true", "head=mlm", "pooler=false"}},
      {"gpt-tiny", {"attention=linear", "feature_map=performer"}},
      {"gpt-tiny", {"attention=gated_linear", "gla_expand_k=1", "gla_gate_rank=8"}},
      {"llama-tiny", {"position=none", "attention_layers=[gated_linear, linear, softmax, gated_linear]", "qkv_bias=true", "head_dim=48"}},
      {"gpt-tiny", {"attention_layers=[softmax, gated_linear, softmax, linear]"}},
      // Linformer's E and F: per key/value head, per layer, one matrix for both.
      {"bert-tiny", {"attention=linformer", "linformer_k=16", "linformer_sharing=per_head"}},
      {"bert-tiny", {"attention=linformer", "linformer_k=8"}},
      {"bert-tiny", {"attention=linformer", "linformer_k=8", "linformer_sharing=key_value", "head=sequence_classification"}},
      // Longformer's global q, k, v beside the local ones.
      {"bert-tiny", {"attention=longformer", "attention_window=[4]", "head=sequence_classification"}},
      // Mixtures of experts: every layer (Mixtral), and Qwen3-MoE's every other layer but one dense.
      {"llama-tiny", {"experts=4", "experts_per_token=1"}},
      {"llama-tiny", {"experts=8", "expert_d_ff=24", "moe_layer_step=2", "dense_layers=[3]", "qk_norm=true"}},
  };
  for (const auto& [name, overrides] : cases) {
    ModelConfig c = load_config(find_config(name));
    for (const auto& o : overrides) apply_override(c, o);
    std::string what = name;
    for (const auto& o : overrides) what += " " + o;
    expect_same_as_built(c, what);
  }
}

// Published counts, from the config alone: no weights are allocated.
TEST(ParameterCountFromConfig, KnownModelsAndAConfigFarLargerThanMemory) {
  EXPECT_EQ(count_parameters(load_config(find_config("gpt2-small"))), 124439808);
  EXPECT_EQ(count_parameters(load_config(find_config("t5-small"))), 60506624);
  // Hugging Face's counts of Llama-3.2-1B, Qwen2-0.5B (q/k/v biases) and Mistral-7B-v0.1.
  EXPECT_EQ(count_parameters(load_config(find_config("llama-3.2-1b"))), 1235814400);
  EXPECT_EQ(count_parameters(load_config(find_config("qwen2-0.5b"))), 494032768);
  // Qwen3-0.6B: transformers' Qwen3ForCausalLM(config).num_parameters(). Per block q d (16 * 128),
  // k and v d (8 * 128) each, o (16 * 128) d, the head norms 2 * 128, the SwiGLU, two norms.
  EXPECT_EQ(count_parameters(load_config(find_config("qwen3-0.6b"))), 596049920);
  EXPECT_EQ(596049920, 28 * (1024 * 2048 * 2 + 1024 * 1024 * 2 + 2 * 128 + 3 * 1024 * 3072 + 2 * 1024) +
                           151936 * 1024 + 1024);
  EXPECT_EQ(count_parameters(load_config(find_config("mistral-7b"))), 7241732096);
  // Mixtral-8x7B and Qwen3-30B-A3B: transformers' num_parameters() of MixtralForCausalLM and
  // Qwen3MoeForCausalLM built from their config.json; active, the published 12.9B and 3.3B: all
  // but the experts a token is not routed to (6 of 8 and 120 of 128 a layer, 3 d f each).
  const ModelConfig mixtral = load_config(find_config("mixtral-8x7b")), qwen = load_config(find_config("qwen3-30b-a3b"));
  EXPECT_EQ(count_parameters(mixtral), 46702792704);
  EXPECT_EQ(count_active_parameters(mixtral), 46702792704 - int64_t{32} * 6 * 3 * 4096 * 14336);
  EXPECT_EQ(count_active_parameters(mixtral), 12879925248);
  EXPECT_EQ(count_parameters(qwen), 30532122624);
  EXPECT_EQ(count_active_parameters(qwen), 3353032704);
  EXPECT_EQ(count_active_parameters(load_config(find_config("mistral-7b"))), 7241732096);  // dense: all
  // Qwen2-0.5B by the formula: per block q (d + 1) d, k and v (d + 1) kv each, o d d, a
  // three-matrix SwiGLU and two norms; then the tied embeddings and the final norm.
  const int64_t qd = 896, kv = 128, ff = 4864, v = 151936;
  EXPECT_EQ(494032768, 24 * ((qd + 1) * qd + 2 * (qd + 1) * kv + qd * qd + 3 * qd * ff + 2 * qd) + v * qd + qd);
  ModelConfig huge = load_config(find_config("gpt2-small"));
  huge.d_model = 5120, huge.n_layers = 40, huge.n_heads = 40, huge.d_ff = 20480, huge.vocab_size = 50257;
  // 40 blocks of 12 d^2 + 13 d, embeddings (V + 1024) d, a final norm: ~12.85 billion.
  const int64_t d = 5120;
  EXPECT_EQ(count_parameters(huge), 40 * (12 * d * d + 13 * d) + (50257 + 1024) * d + 2 * d);
}

// The size checks' estimates: the exact count wherever it is exact, the float32 bytes of the
// weights (and a sinusoidal table), training's 16 bytes a trained parameter, and the size key
// that makes a config large.
TEST(ParameterCountFromConfig, EstimatesAgreeWithTheCountAndNameTheLargestSize) {
  for (const char* name : {"gpt2-small", "bert-base", "t5-small", "llama-3.2-1b", "mistral-7b"}) {
    const ModelConfig c = load_config(find_config(name));
    const auto n = static_cast<double>(count_parameters(c));
    EXPECT_EQ(estimate_parameters(c), n) << name;
    EXPECT_EQ(weights_bytes_lower_bound(c), 4 * n) << name;
    EXPECT_EQ(training_bytes_lower_bound(c, true), 16 * n) << name;
    EXPECT_EQ(training_bytes_lower_bound(c, false), 4 * n) << name;
  }
  ModelConfig c = load_config(find_config("gpt2-small"));
  EXPECT_EQ(largest_size(c), "d_model (768)");
  c.vocab_size = int64_t{1} << 40;
  EXPECT_EQ(largest_size(c), "vocab_size (1099511627776)");
  c.vocab_size = 50257, c.n_layers = 100000;
  EXPECT_EQ(largest_size(c), "n_layers (100000)");
  // gpt2-small's 12 blocks each keep a (batch, length, 768) input: 2 bytes an element at least.
  EXPECT_EQ(activation_bytes_lower_bound(load_config(find_config("gpt2-small")), 8, 1024), 8.0 * 1024 * 768 * 12 * 2);
  ModelConfig transformer = load_config(find_config("transformer-base"));
  ASSERT_EQ(transformer.position, PositionKind::kSinusoidal);
  EXPECT_EQ(weights_bytes_lower_bound(transformer),
            4.0 * (static_cast<double>(count_parameters(transformer)) +
                   static_cast<double>(transformer.max_positions * transformer.d_model)));
}

}  // namespace
}  // namespace zoo
