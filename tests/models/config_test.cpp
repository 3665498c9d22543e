#include "models/config.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "models/model.h"
#include "models/parameter_count.h"
#include "test_util.h"

namespace zoo {
namespace {

const char* kGood = R"(family: gpt
vocab_size: 100
d_model: 32
n_layers: 2
n_heads: 4
d_ff: 64
)";

// The error message of parsing `yaml` (as file "x.yaml"), or "no error".
std::string error_of(const std::string& yaml) {
  try {
    parse_config(yaml, "x.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ModelConfig, FamilyDefaultsFillWhatTheFileLeavesOut) {
  auto c = parse_config(kGood, "x.yaml");
  EXPECT_EQ(c.family, Family::kGpt);
  EXPECT_EQ(c.norm_position, NormPosition::kPre);
  EXPECT_EQ(c.activation, Activation::kGELUTanh);
  EXPECT_EQ(c.max_positions, 1024);
  auto t5 = parse_config("family: t5\nvocab_size: 10\nd_model: 8\nn_layers: 1\nn_heads: 2\nd_ff: 16\n");
  EXPECT_EQ(t5.norm, NormKind::kRMSNorm);
  EXPECT_EQ(t5.position, PositionKind::kRelative);
  EXPECT_FALSE(t5.bias);
  EXPECT_FALSE(t5.scale_attention);
  auto bert = parse_config("family: bert\nvocab_size: 10\nd_model: 8\nn_layers: 1\nn_heads: 2\nd_ff: 16\n");
  EXPECT_DOUBLE_EQ(bert.norm_eps, 1e-12);
  EXPECT_EQ(bert.norm_position, NormPosition::kPost);
}

TEST(ModelConfig, UnknownKeyNamesFileLineAndSuggestion) {
  EXPECT_EQ(error_of(std::string(kGood) + "n_head: 4\n"),
            "x.yaml:7: unknown key 'n_head' (did you mean 'n_heads'?)");
  EXPECT_EQ(error_of(std::string(kGood) + "flux_capacitor: 1\n"), "x.yaml:7: unknown key 'flux_capacitor'");
}

TEST(ModelConfig, WrongTypesSayWhatWasExpected) {
  EXPECT_EQ(error_of("family: gpt\nvocab_size: lots\n"),
            "x.yaml:2: vocab_size: expected an integer, got 'lots'");
  EXPECT_EQ(error_of(std::string(kGood) + "bias: maybe\n"), "x.yaml:7: bias: expected true or false, got 'maybe'");
  EXPECT_EQ(error_of(std::string(kGood) + "dropout: [0.1]\n"), "x.yaml:7: dropout: expected a number, got 'a list'");
  EXPECT_EQ(error_of(std::string(kGood) + "norm: batchnorm\n"),
            "x.yaml:7: norm: expected one of: layernorm, rmsnorm, rmsnorm_plus_one, got 'batchnorm'");
  EXPECT_EQ(error_of("family: lstm\n"),
            "x.yaml:1: family: expected one of: bert, gpt, t5, transformer, got 'lstm'");
}

TEST(ModelConfig, MissingRequiredKeysAreNamed) {
  EXPECT_EQ(error_of("vocab_size: 10\n"), "x.yaml: missing required key 'family' (one of: bert, gpt, t5, transformer)");
  EXPECT_EQ(error_of("family: gpt\nvocab_size: 10\nn_layers: 1\nn_heads: 2\nd_ff: 16\n"),
            "x.yaml: missing required key 'd_model' (integer: width of the residual stream)");
}

TEST(ModelConfig, InconsistentValuesAreNamed) {
  EXPECT_EQ(error_of("family: gpt\nvocab_size: 10\nd_model: 1000\nn_layers: 1\nn_heads: 12\nd_ff: 16\n"),
            "x.yaml: n_heads (12) must divide d_model (1000), or set head_dim");
  EXPECT_EQ(error_of(std::string(kGood) + "n_kv_heads: 3\n"), "x.yaml: n_kv_heads (3) must divide n_heads (4)");
  EXPECT_EQ(error_of("family: t5\nvocab_size: 10\nd_model: 8\nn_layers: 1\nn_heads: 2\nd_ff: 16\nwindow: 4\n"),
            "x.yaml: window applies to family gpt (causal) and bert (two-sided), not family t5");
  EXPECT_EQ(error_of(std::string(kGood) + "window: 0\n"), "x.yaml: window (0) must be >= 1");
  EXPECT_EQ(error_of(std::string(kGood) + "dropout: 1.5\n"), "x.yaml: dropout (1.5) must be in [0, 1)");
  EXPECT_EQ(error_of(std::string(kGood) + "head: mlm\n"), "x.yaml: head applies to family bert, not gpt");
  EXPECT_EQ(error_of(std::string(kGood) + "pad_id: 100\n"),
            "x.yaml: pad_id (100) must be a token id below vocab_size (100)");
  EXPECT_EQ(error_of(std::string(kGood) + "encoder_layers: 2\n"),
            "x.yaml: encoder_layers / decoder_layers apply to encoder-decoders, not family gpt (use n_layers)");
  EXPECT_EQ(error_of("family: gpt\nvocab_size: 10\nd_model: 12\nn_layers: 1\nn_heads: 2\nhead_dim: 3\nd_ff: 8\nposition: rope\n"),
            "x.yaml: position rope needs an even head dimension, got 3");
  EXPECT_EQ(error_of(std::string(kGood) + "n_layers: 3\n"), "x.yaml:7: key 'n_layers' appears twice");
  // A negative layer count is refused, not silently replaced by n_layers.
  const std::string t5 = "family: t5\nvocab_size: 200\nd_model: 16\nn_layers: 2\nn_heads: 2\nd_ff: 32\n";
  EXPECT_EQ(error_of(t5 + "encoder_layers: -3\n"), "x.yaml: encoder_layers (-3) must not be negative");
  EXPECT_EQ(error_of(t5 + "decoder_layers: -1\n"), "x.yaml: decoder_layers (-1) must not be negative");
}

// Linformer (kernels/linformer_attention.h): encoders only, and what it cannot take, by name.
TEST(ModelConfig, LinformerAppliesToEncodersAndNamesWhatItCannotTake) {
  const std::string bert =
      "family: bert\nvocab_size: 10\nd_model: 8\nn_layers: 1\nn_heads: 2\nd_ff: 16\nmax_positions: 32\n"
      "attention: linformer\n";
  EXPECT_EQ(error_of(bert + "linformer_k: 8\n"), "no error");
  EXPECT_EQ(error_of(std::string(kGood) + "attention: linformer\n"),
            "x.yaml: attention linformer projects keys along the sequence, which mixes future positions into every key: "
            "a decoder's causal self-attention (family gpt) cannot take it; it applies to encoders (family bert)");
  EXPECT_EQ(error_of(std::string(kGood) + "attention_layers: [softmax, linformer]\n").rfind(
                "x.yaml: attention linformer projects keys along the sequence", 0),
            0u);
  const std::string t5 = "family: t5\nvocab_size: 200\nd_model: 16\nn_layers: 2\nn_heads: 2\nd_ff: 32\n";
  for (const auto& [yaml, message] : std::vector<std::pair<std::string, std::string>>{
           {t5 + "attention: linformer\n", "attention linformer applies to encoders (family bert), not family t5"},
           {bert + "linformer_k: 33\n",
            "linformer_k (33) must be in [1, max_positions (32)]: its projections take at most max_positions tokens"},
           {bert + "linformer_k: 8\nwindow: 4\n", "window bounds keys by position, and linformer's projected keys have none"},
           {bert + "linformer_k: 8\nposition: alibi\n",
            "position alibi adds a term per (query, key) token pair, and linformer's keys are projected rows: use "
            "learned, sinusoidal, rope or none"}}) {
    EXPECT_EQ(error_of(yaml), "x.yaml: " + message);
  }
  EXPECT_EQ(error_of(bert + "linformer_k: 8\nlinformer_sharing: layerwise\n"),
            "x.yaml:10: linformer_sharing: expected one of: per_head, headwise, key_value, got 'layerwise'");
}

// Longformer (kernels/longformer_attention.h): encoders only, its windows and dilations, and what
// it cannot take, by name.
TEST(ModelConfig, LongformerAppliesToEncodersAndNamesWhatItCannotTake) {
  const std::string bert =
      "family: bert\nvocab_size: 10\nd_model: 8\nn_layers: 2\nn_heads: 2\nd_ff: 16\nmax_positions: 32\n"
      "attention: longformer\n";
  EXPECT_EQ(error_of(bert + "attention_window: [4, 8]\nattention_dilation: [1, 2]\n"), "no error");
  EXPECT_EQ(error_of(std::string(kGood) + "attention: longformer\n"),
            "x.yaml: attention longformer's global tokens see every token, future ones included: a decoder's causal "
            "self-attention (family gpt) cannot take it; it applies to encoders (family bert)");
  const std::string t5 = "family: t5\nvocab_size: 200\nd_model: 16\nn_layers: 2\nn_heads: 2\nd_ff: 32\n";
  for (const auto& [yaml, message] : std::vector<std::pair<std::string, std::string>>{
           {t5 + "attention: longformer\n", "attention longformer applies to encoders (family bert), not family t5"},
           {bert + "attention_window: [4, 4, 4]\n", "attention_window has 3 values: one, or one per layer (2)"},
           {bert + "attention_window: [5]\n", "attention_window values must be even and >= 2 (w / 2 tokens to each side), got 5"},
           {bert + "attention_window: []\n", "attention_window: longformer needs a window (one, or one per layer)"},
           {bert + "attention_dilation: [1, 2, 3]\n", "attention_dilation has 3 values: one, or one per head (2)"},
           {bert + "attention_dilation: [0]\n", "attention_dilation values must be >= 1, got 0"},
           {bert + "window: 4\n", "window: longformer has its own (attention_window)"},
           {bert + "position: rope\n",
            "position rope: longformer takes learned, sinusoidal or none (its global projections take no position term)"},
           {bert + "n_kv_heads: 1\n", "n_kv_heads (1): longformer has one key head per query head (n_heads 2)"}}) {
    EXPECT_EQ(error_of(yaml), "x.yaml: " + message);
  }
  EXPECT_EQ(context_parallel_refusal(parse_config(bert + "head: mlm\n", "x.yaml")),
            "longformer's global tokens see the whole sequence, which ring attention splits across ranks (model.attention)");
}

// Linear and gated linear attention (layers/linear_attention.h): where they apply and their keys.
TEST(ModelConfig, AttentionKindsAreCheckedAndNamed) {
  const std::string gla = std::string(kGood) + "attention: gated_linear\n";
  EXPECT_EQ(error_of(std::string(kGood) + "attention: flash\n"),
            "x.yaml:7: attention: expected one of: softmax, linear, gated_linear, linformer, longformer, got 'flash'");
  EXPECT_EQ(error_of("family: bert\nvocab_size: 10\nd_model: 8\nn_layers: 1\nn_heads: 2\nd_ff: 16\nattention: linear\n"),
            "x.yaml: attention linear applies to decoder-only models (family gpt), not family bert");
  EXPECT_EQ(error_of(std::string(kGood) + "attention_layers: [linear]\n"),
            "x.yaml: attention_layers lists 1 kinds for n_layers (2) layers");
  EXPECT_EQ(error_of(std::string(kGood) + "attention_layers: [linear, gated]\n"),
            "x.yaml:7: attention_layers: expected a list of: softmax, linear, gated_linear, linformer, longformer (item 2 is "
            "'gated'), got 'a list'");
  EXPECT_EQ(error_of(gla + "position: rope\n"),
            "x.yaml: position rope acts inside softmax attention and this model has no softmax attention layer "
            "(attention: gated_linear): use learned, sinusoidal or none");
  EXPECT_EQ(error_of(gla + "window: 8\n"),
            "x.yaml: window bounds softmax attention and this model has no softmax attention layer (attention: "
            "gated_linear)");
  EXPECT_EQ(error_of(gla + "gla_expand_k: 0.3\n"),
            "x.yaml: gla_expand_k (0.3) times d_model (32) must be a whole multiple of n_heads (4)");
  EXPECT_EQ(error_of(gla + "gla_gate_rank: 0\n"), "x.yaml: gla_gate_rank (0) must be positive");
  EXPECT_EQ(error_of(std::string(kGood) + "attention: linear\nfeature_map: performer\nlinear_normalize: false\n"),
            "x.yaml: feature_map performer needs linear_normalize: true (its features approximate softmax's numerator "
            "and denominator together)");
  EXPECT_EQ(error_of(std::string(kGood) + "attention: linear\nfeature_map: performer\nperformer_features: 0\n"),
            "x.yaml: performer_features (0) must be in [1, 65536]");
  // A hybrid keeps rope and a window for its softmax layers.
  EXPECT_EQ(error_of(std::string(kGood) + "attention_layers: [gated_linear, softmax]\nposition: rope\nwindow: 8\n"),
            "no error");
  auto c = parse_config(std::string(kGood) + "attention_layers: [gated_linear, softmax]\n", "x.yaml");
  EXPECT_TRUE(c.has_recurrent_layers());
  EXPECT_EQ(c.attention_of(0), AttentionKind::kGatedLinear);
  EXPECT_EQ(c.attention_of(1), AttentionKind::kSoftmax);
  EXPECT_EQ(to_yaml(parse_config(to_yaml(c), "resolved")), to_yaml(c));
  EXPECT_NE(context_parallel_refusal(c).find("linear or gated_linear layers"), std::string::npos);
  EXPECT_FALSE(parse_config(kGood, "x.yaml").has_recurrent_layers());
}

// Which models ring attention trains: every family's softmax attention, but not a BERT head that
// reads the pooled [CLS] token (one rank holds it).
TEST(ModelConfig, ContextParallelRefusalByFamilyAndHead) {
  const std::string bert = "family: bert\nvocab_size: 512\nd_model: 32\nn_layers: 2\nn_heads: 4\nd_ff: 64\n";
  EXPECT_EQ(context_parallel_refusal(parse_config(bert + "head: mlm\n", "x.yaml")), "");
  EXPECT_EQ(context_parallel_refusal(parse_config(bert + "head: pretraining\npooler: true\n", "x.yaml")), "");
  EXPECT_EQ(context_parallel_refusal(parse_config(bert + "head: mlm\nattention: linformer\nlinformer_k: 16\n", "x.yaml")),
            "linformer projects the whole sequence's keys, which ring attention splits across ranks (model.attention)");
  EXPECT_EQ(context_parallel_refusal(parse_config(bert + "head: sequence_classification\npooler: true\n", "x.yaml")),
            "ring attention trains bert's masked LM (model.head mlm, or pretraining without sentence_pairs), not head "
            "sequence_classification");
  EXPECT_EQ(context_parallel_refusal(parse_config(
                "family: t5\nvocab_size: 512\nd_model: 32\nn_layers: 2\nn_heads: 4\nd_ff: 64\n", "x.yaml")),
            "");
  EXPECT_NE(context_parallel_refusal(parse_config(std::string(kGood) + "attention_backend: math\n", "x.yaml"))
                .find("must be auto or tiled"),
            std::string::npos);
}

// RoPE scaling (LLaMA 3.1) and q/k/v biases alone (Qwen2): read, and refused where they do not fit.
TEST(ModelConfig, RopeScalingAndQkvBias) {
  const std::string rope = std::string(kGood) + "position: rope\n";
  auto c = parse_config(rope + "rope_scaling: llama3\nrope_scaling_factor: 32\nrope_original_max_positions: 4096\n"
                               "bias: false\nqkv_bias: true\n", "x.yaml");
  EXPECT_EQ(c.rope_scaling.kind, RopeScalingKind::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_positions, 4096);
  EXPECT_TRUE(c.qkv_bias);
  const std::string llama3 = rope + "rope_scaling: llama3\n";
  const std::pair<std::string, std::string> refused[] = {
      {rope + "rope_scaling: ntk\n",
       "x.yaml:8: rope_scaling: expected one of: none, linear, llama3, yarn, longrope, got 'ntk'"},
      {rope + "rope_short_factor: [1, 2]\n", "x.yaml: rope_short_factor applies to rope_scaling longrope, not none"},
      {rope + "rope_scaling: longrope\nrope_short_factor: [1, 2, 3, 4]\nrope_long_factor: [1, 2]\n",
       "x.yaml: rope_short_factor and rope_long_factor must be lists of one number per rotated pair, of the same "
       "length (got 4 and 2)"},
      {rope + "rope_scaling: longrope\nrope_short_factor: [1, x]\n",
       "x.yaml:9: rope_short_factor: expected a list of numbers (item 2 is 'x'), got 'a list'"},
      {rope + "rope_scaling: longrope\nrope_short_factor: [1, 2, 3, -4]\nrope_long_factor: [1, 2, 3, 4]\n",
       "x.yaml: rope_short_factor holds -4: each factor must be a positive number"},
      {rope + "rope_scaling: longrope\nrope_short_factor: [1, 2, 3]\nrope_long_factor: [1, 2, 3]\n",
       "x.yaml: rope_short_factor and rope_long_factor hold 3 factors; rope_scaling longrope needs one per rotated "
       "pair (4)"},
      {rope + "rotary_dim: 10\n", "x.yaml: rotary_dim (10) must be even and at most the head dimension (8), or 0 for all of it"},
      {rope + "rotary_dim: 3\n", "x.yaml: rotary_dim (3) must be even and at most the head dimension (8), or 0 for all of it"},
      {std::string(kGood) + "rotary_dim: 4\n", "x.yaml: rotary_dim applies to position rope, not learned"},
      {std::string(kGood) + "hf_fused_projections: true\n",
       "x.yaml: hf_fused_projections (Phi-3's qkv_proj and gate_up_proj) is for family gpt with position rope"},
      {llama3 + "rope_beta_fast: 16\n", "x.yaml: rope_beta_fast applies to rope_scaling yarn, not llama3"},
      {rope + "rope_scaling: yarn\nrope_beta_slow: 40\n",
       "x.yaml: rope_beta_fast (32) must exceed rope_beta_slow (40), which must be positive"},
      {std::string(kGood) + "rope_scaling: linear\n", "x.yaml: rope_scaling linear applies to position rope, not learned"},
      {rope + "rope_scaling_factor: 8\n",
       "x.yaml: rope_scaling_factor (8) applies to rope_scaling linear, llama3, yarn or longrope, not none"},
      {rope + "rope_scaling: linear\nrope_low_freq_factor: 2\n",
       "x.yaml: rope_low_freq_factor applies to rope_scaling llama3, not linear"},
      {rope + "rope_scaling: linear\nrope_scaling_factor: 0.5\n",
       "x.yaml: rope_scaling_factor (0.5) must be >= 1 for rope_scaling linear"},
      {llama3 + "rope_high_freq_factor: 0.5\n", "x.yaml: rope_high_freq_factor (0.5) must exceed rope_low_freq_factor (1)"},
      {llama3 + "rope_low_freq_factor: 0\n", "x.yaml: rope_low_freq_factor (0) must be positive"},
      {llama3 + "rope_original_max_positions: -1\n", "x.yaml: rope_original_max_positions (-1) must be positive"},
      {std::string(kGood) + "qkv_bias: true\n",
       "x.yaml: qkv_bias adds query/key/value biases to a model without biases; bias: true has them already"},
  };
  for (const auto& [yaml, message] : refused) EXPECT_EQ(error_of(yaml), message);
}

// A mixture of experts' keys: which layers are sparse (every moe_layer_step-th, less dense_layers),
// and each key's refusal named.
TEST(ModelConfig, MixtureOfExpertsKeysAreCheckedAndNamed) {
  const std::string moe = std::string(kGood) + "position: rope\nactivation: swiglu\nbias: false\n";
  auto c = parse_config(moe + "experts: 4\n", "x.yaml");
  apply_overrides(c, {"n_layers=6", "moe_layer_step=2", "dense_layers=[3]"});
  std::vector<int64_t> sparse;
  for (int64_t i = 0; i < c.n_layers; ++i)
    if (c.is_moe_layer(i)) sparse.push_back(i);
  EXPECT_EQ(sparse, (std::vector<int64_t>{1, 5}));  // (i + 1) % 2 == 0: 1, 3, 5; 3 kept dense
  EXPECT_EQ(c.resolved_expert_d_ff(), 64);
  EXPECT_EQ(to_yaml(parse_config(to_yaml(c))), to_yaml(c));
  EXPECT_NE(to_yaml(c).find("dense_layers: [3]"), std::string::npos);
  const std::pair<std::string, std::string> refused[] = {
      {moe + "experts_per_token: 3\n", "x.yaml: experts_per_token, expert_d_ff, normalize_expert_weights, "
                                       "round_expert_weights, moe_layer_step and dense_layers apply to a mixture of "
                                       "experts: set experts"},
      {moe + "experts: 1\n", "x.yaml: experts (1) must be 0 (dense) or at least 2"},
      {moe + "experts: 4\nexperts_per_token: 5\n", "x.yaml: experts_per_token (5) must be in [1, experts (4)]"},
      {moe + "experts: 4\nexpert_d_ff: -1\n", "x.yaml: expert_d_ff (-1) must be >= 0"},
      {std::string(kGood) + "bias: false\nexperts: 4\n",
       "x.yaml: experts are gated feed-forwards (swiglu, geglu, geglu_tanh), not activation gelu_tanh"},
      {std::string(kGood) + "activation: swiglu\nexperts: 4\n",
       "x.yaml: experts have no biases (Mixtral, Qwen3-MoE): set bias: false"},
      {moe + "experts: 4\nmoe_layer_step: 0\n", "x.yaml: moe_layer_step (0) must be >= 1"},
      {moe + "experts: 4\ndense_layers: [2]\n", "x.yaml: dense_layers holds 2, not a layer of n_layers (2)"},
      {moe + "experts: 4\nrouter_aux_loss_coef: -0.1\n", "x.yaml: router_aux_loss_coef (-0.1) must be >= 0"},
      {moe + "experts: 4\ndense_layers: [0, x]\n",
       "x.yaml:11: dense_layers: expected a list of layer indices (item 2 is 'x'), got 'a list'"},
      {"family: bert\nvocab_size: 100\nd_model: 32\nn_layers: 2\nn_heads: 4\nd_ff: 64\nactivation: swiglu\n"
       "bias: false\nexperts: 4\n",
       "x.yaml: experts applies to decoder-only models (family gpt), not family bert"},
  };
  for (const auto& [yaml, message] : refused) EXPECT_EQ(error_of(yaml), message);
}

// Gemma's keys: windows in some layers only, their RoPE base, the scores' scale and the caps,
// each refusal named.
TEST(ModelConfig, GemmaKeysAreCheckedAndNamed) {
  const std::string gemma = std::string(kGood) + "position: rope\nactivation: geglu_tanh\nbias: false\n";
  auto c = parse_config(gemma + "window: 4\nwindow_layers: [1]\nwindow_rope_base: 100\nattention_scale_dim: 12\n"
                                "attention_softcap: 50\nlogit_softcap: 30\nnorm: rmsnorm_plus_one\nnorm_position: sandwich\n",
                        "x.yaml");
  EXPECT_EQ(c.window_of(0), std::nullopt);
  EXPECT_EQ(c.window_of(1), 4);
  EXPECT_TRUE(c.has_mixed_windows());
  EXPECT_EQ(to_yaml(parse_config(to_yaml(c))), to_yaml(c));
  EXPECT_NE(to_yaml(c).find("window_layers: [1]"), std::string::npos);
  EXPECT_EQ(parse_config(gemma + "window: 4\n").window_of(1), 4);  // no list: every layer
  const std::pair<std::string, std::string> refused[] = {
      {gemma + "window_layers: [0]\n", "x.yaml: window_layers applies to a sliding window: set window"},
      {gemma + "window: 4\nwindow_layers: [2]\n", "x.yaml: window_layers holds 2, not a layer of n_layers (2)"},
      {gemma + "window_rope_base: 100\n", "x.yaml: window_rope_base applies to a window with position rope"},
      {gemma + "window: 4\nwindow_rope_base: 1\n", "x.yaml: window_rope_base (1) must be > 1"},
      {gemma + "attention_scale_dim: -1\n",
       "x.yaml: attention_scale_dim (-1) must be positive, with scale_attention, or 0 for the head dimension"},
      {gemma + "attention_softcap: -1\n",
       "x.yaml: attention_softcap (-1) and logit_softcap (0) must be >= 0 (0: none)"},
      {gemma + "attention_softcap: 50\nattention_backend: fused\n",
       "x.yaml: attention_softcap needs zoo's kernels (attention_backend auto, tiled or math): LibTorch's fused kernel "
       "does not soft-cap"},
      {"family: bert\nvocab_size: 100\nd_model: 32\nn_layers: 2\nn_heads: 4\nd_ff: 64\nnorm_position: sandwich\n",
       "x.yaml: norm_position sandwich applies to decoder-only models (family gpt), not family bert"},
      {"family: t5\nvocab_size: 100\nd_model: 32\nn_layers: 2\nn_heads: 4\nd_ff: 64\nlogit_softcap: 30\n",
       "x.yaml: logit_softcap applies to decoder-only models (family gpt), not family t5"},
  };
  for (const auto& [yaml, message] : refused) EXPECT_EQ(error_of(yaml), message);
}

// LongRoPE's factors and a partial rotation read as written and write back exactly: a factor as a
// float32 checkpoint stores it keeps every digit.
// ModernBERT's keys (a bert config): where each applies.
TEST(ModelConfig, ModernBertKeysAreCheckedAndNamed) {
  const std::string bert = "family: bert\nvocab_size: 10\nd_model: 8\nn_layers: 2\nn_heads: 2\nd_ff: 16\n";
  const std::pair<std::string, std::string> refused[] = {
      {std::string(kGood) + "pooling: mean\n", "x.yaml: pooling applies to family bert, not gpt"},
      {std::string(kGood) + "first_attention_norm: false\n", "x.yaml: first_attention_norm applies to family bert, not gpt"},
      {bert + "first_attention_norm: false\n", "x.yaml: first_attention_norm: false applies to norm_position pre"},
      {bert + "head: mlm\nhead_transform: true\n",
       "x.yaml: head_transform applies to heads sequence_classification and token_classification, not mlm"},
      {bert + "head: sequence_classification\npooler: false\n",
       "x.yaml: head sequence_classification reads the pooled tokens through a pooler or a head_transform: set one"},
      {bert + "type_vocab_size: 0\nhead: pretraining\n",
       "x.yaml: head pretraining reads sentence pairs by their token types: type_vocab_size must be positive"},
      {bert + "type_vocab_size: -1\n", "x.yaml: type_vocab_size (-1) must be >= 0 (0: none)"},
      {bert + "pooling: max\n", "x.yaml:7: pooling: expected one of: cls, mean, got 'max'"},
  };
  for (const auto& [yaml, message] : refused) EXPECT_EQ(error_of(yaml), message) << yaml;
  // Accepted: a two-sided window in some layers with their own RoPE base, no segments, mean
  // pooling through a head transform, no norm before layer 0's attention.
  const auto c = parse_config(bert + "norm_position: pre\nfirst_attention_norm: false\ntype_vocab_size: 0\n"
                                     "position: rope\nwindow: 3\nwindow_layers: [1]\nwindow_rope_base: 100\n"
                                     "head: sequence_classification\npooler: false\nhead_transform: true\n"
                                     "pooling: mean\n");
  EXPECT_EQ(c.window_of(0), std::nullopt);
  EXPECT_EQ(c.window_of(1), 3);
  EXPECT_EQ(parse_config(to_yaml(c)).pooling, Pooling::kMean);
  EXPECT_NE(context_parallel_refusal(parse_config(bert + "head: mlm\nwindow: 3\n")).find("two-sided"), std::string::npos);
}

TEST(ModelConfig, LongropeFactorsAndPartialRotationRoundTrip) {
  const std::string yaml = std::string(kGood) +
                           "position: rope\nrotary_dim: 4\nrope_scaling: longrope\nrope_original_max_positions: 16\n"
                           "rope_short_factor: [1, 1.0299999713897705]\nrope_long_factor: [4, 8.125]\n";
  const auto c = parse_config(yaml, "x.yaml");
  EXPECT_EQ(c.rotary_dim, 4);
  EXPECT_EQ(c.rope_scaling.kind, RopeScalingKind::kLongrope);
  EXPECT_EQ(c.rope_scaling.short_factor, (std::vector<double>{1.0, 1.0299999713897705}));
  EXPECT_EQ(c.rope_scaling.long_factor, (std::vector<double>{4.0, 8.125}));
  const auto back = parse_config(to_yaml(c), "back.yaml");
  EXPECT_EQ(back.rope_scaling.short_factor, c.rope_scaling.short_factor);
  EXPECT_EQ(back.rope_scaling.long_factor, c.rope_scaling.long_factor);
  EXPECT_EQ(to_yaml(back), to_yaml(c));
  EXPECT_NE(to_yaml(c).find("rope_short_factor: [1, 1.0299999713897705]"), std::string::npos) << to_yaml(c);
}

// The weights' size is stated before anything is allocated, with the key that makes it.
TEST(ModelConfig, AModelLargerThanMemoryIsRefusedBeforeAllocating) {
  ModelConfig huge = parse_config(std::string(kGood), "x.yaml");
  huge.name = "huge", huge.vocab_size = 50000, huge.d_model = 16384, huge.n_heads = 128, huge.d_ff = 65536;
  huge.n_layers = 200;  // ~650 billion parameters
  const auto message = testing::error_of([&] { build_model(huge); });
  EXPECT_EQ(message.rfind("huge: d_model (16384): " + std::to_string(count_parameters(huge)) + " parameters need ", 0),
            0u) << message;
  EXPECT_NE(message.find("in float32 for the weights alone, more than this machine's"), std::string::npos) << message;
  EXPECT_EQ(testing::error_of([&] { check_fits_in_memory(huge, int64_t{64} << 30); }),
            "huge: d_model (16384): 645123702784 parameters need 2.6 TB in float32 for the weights alone, more than "
            "this machine's 68.7 GB of memory");
  huge.vocab_size = int64_t{1} << 40, huge.n_layers = 1;
  EXPECT_EQ(testing::error_of([&] { check_fits_in_memory(huge, int64_t{64} << 30); }).rfind("huge: vocab_size (1099511627776): ", 0), 0u);
  check_fits_in_memory(huge, 0);  // memory unknown: nothing to compare with
}

// Sizes whose weights no 64-bit count holds are refused naming the key, rather than ending in
// LibTorch's "Storage size calculation overflowed" (or a parameter count wrapped negative).
TEST(ModelConfig, SizesBeyondA64BitCountAreRefusedNamingTheKey) {
  const std::string gpt2 = "family: gpt\nn_heads: 12\nd_model: 768\nmax_positions: 1024\n";
  EXPECT_EQ(error_of(gpt2 + "vocab_size: 9223372036854775807\nn_layers: 12\nd_ff: 3072\n"),
            "x.yaml: vocab_size (9223372036854775807): the model would hold 7.1e+21 parameters (2.8e+22 bytes in "
            "float32), more than 64-bit sizes can count");
  EXPECT_EQ(error_of(gpt2 + "vocab_size: 50257\nn_layers: 4611686018427387904\nd_ff: 3072\n").rfind(
                "x.yaml: n_layers (4611686018427387904): the model would hold ", 0),
            0u);
  EXPECT_EQ(error_of(gpt2 + "vocab_size: 50257\nn_layers: 12\nd_ff: 9000000000000000000\n").rfind(
                "x.yaml: d_ff (9000000000000000000): ", 0),
            0u);
  // A sinusoidal table is built with the model: max_positions rows of d_model.
  EXPECT_EQ(error_of("family: transformer\nvocab_size: 100\nd_model: 8\nn_layers: 1\nn_heads: 2\nd_ff: 16\n"
                     "position: sinusoidal\nmax_positions: 4611686018427387904\n")
                .rfind("x.yaml: max_positions (4611686018427387904): ", 0),
            0u);
  // Issue 52: gated linear attention's own sizes were blamed on d_model (256), and a width
  // factor of 1e300 was cast to a 64-bit integer on the way.
  const std::string gla = "family: gpt\nvocab_size: 100\nd_model: 256\nn_layers: 1\nn_heads: 4\nd_ff: 64\n"
                          "attention: gated_linear\n";
  EXPECT_EQ(error_of(gla + "gla_gate_rank: 9223372036854775807\n")
                .rfind("x.yaml: gla_gate_rank (9223372036854775807): the model would hold ", 0),
            0u);
  EXPECT_EQ(error_of(gla + "gla_expand_k: 1e300\n").rfind("x.yaml: gla_expand_k (1e+300): the model would hold ", 0), 0u);
  EXPECT_EQ(error_of(gla + "gla_expand_v: 1e18\n").rfind("x.yaml: gla_expand_v (1e+18): the model would hold ", 0), 0u);
  // Far beyond this machine, yet countable: described (zoo info), not refused.
  EXPECT_EQ(error_of(gpt2 + "vocab_size: 1099511627776\nn_layers: 12\nd_ff: 3072\n"), "no error");
}

TEST(ModelConfig, MalformedAndEmptyInput) {
  EXPECT_EQ(error_of("family: gpt\n  d_model: [1, 2\n").rfind("x.yaml:", 0), 0u);
  EXPECT_NE(error_of("family: gpt\n  d_model: [1, 2\n").find("malformed YAML"), std::string::npos);
  EXPECT_EQ(error_of(""), "x.yaml: expected a mapping of config keys, got an empty document");
  EXPECT_EQ(error_of("- a\n- b\n"), "x.yaml:1: expected a mapping of config keys, got a list");
  try {
    load_config("/nonexistent/model.yaml");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/model.yaml: cannot open config file");
  }
  const auto empty = std::filesystem::temp_directory_path() / "zoo_empty_config.yaml";
  std::ofstream(empty) << "  \n";
  try {
    load_config(empty.string());
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), empty.string() + ": config file is empty");
  }
  std::filesystem::remove(empty);
}

TEST(ModelConfig, OverridesUseTheSameChecks) {
  auto c = parse_config(kGood, "x.yaml");
  apply_override(c, "n_layers=6");
  EXPECT_EQ(c.n_layers, 6);
  apply_override(c, "window=8");
  EXPECT_EQ(c.window.value_or(-1), 8);
  apply_override(c, "window=null");
  EXPECT_FALSE(c.window.has_value());
  auto message = [&](const std::string& o) {
    try {
      apply_override(c, o, "override");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("n_heads=5"), "override: n_heads (5) must divide d_model (32), or set head_dim");
  EXPECT_EQ(message("d_modle=3"), "override: unknown key 'd_modle' (did you mean 'd_model'?)");
  EXPECT_EQ(message("n_layers"), "override: expected key=value, got 'n_layers'");
  EXPECT_EQ(message("bias=sure"), "override: bias: expected true or false, got 'sure'");
}

TEST(ModelConfig, ResolvedYamlRoundTrips) {
  auto c = parse_config(std::string(kGood) + "window: 16\nposition: rope\nnorm: rmsnorm\nrope_scaling: llama3\n"
                                               "rope_high_freq_factor: 8\nbias: false\nqkv_bias: true\n", "x.yaml");
  auto again = parse_config(to_yaml(c), "resolved");
  EXPECT_EQ(to_yaml(again), to_yaml(c));
  EXPECT_EQ(again.window.value_or(-1), 16);
  EXPECT_EQ(again.norm, NormKind::kRMSNorm);
  EXPECT_EQ(again.rope_scaling.kind, RopeScalingKind::kLlama3);
  EXPECT_DOUBLE_EQ(again.rope_scaling.high_freq_factor, 8.0);
  EXPECT_TRUE(again.qkv_bias);
}

TEST(ModelConfig, SchemaDocumentsEveryKeyWithDefaults) {
  auto doc = schema_documentation();
  for (const char* key : {"family", "d_model", "n_kv_heads", "window", "norm_position", "init", "rope_scaling",
                          "rope_original_max_positions", "qkv_bias"}) {
    EXPECT_NE(doc.find(std::string("\n") + key + " ("), std::string::npos) << key;
  }
  // Per-family defaults where they differ: bert / gpt / t5 / transformer.
  EXPECT_NE(doc.find("default: post / pre / pre / post"), std::string::npos) << doc;
}

TEST(ModelConfig, NamedConfigsAreFound) {
  EXPECT_NE(find_config("gpt2-small").find("gpt2-small.yaml"), std::string::npos);
  try {
    find_config("gpt3-huge");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no config 'gpt3-huge'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("gpt-tiny"), std::string::npos);  // lists what exists
  }
}

}  // namespace
}  // namespace zoo
