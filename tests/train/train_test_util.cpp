#include "train/train_test_util.h"

#include <filesystem>
#include <sstream>

#include <gtest/gtest.h>

#include "core/files.h"
#include "test_util.h"
#include "train/progress.h"

namespace zoo::train_testing {

namespace fs = std::filesystem;

const Slice& slice() {
  static const Slice s = [] {
    const fs::path dir(ZOO_TEST_BINARY_DIR);
    Slice out{(dir / "train-slice.txt").string(), (dir / "train-slice-512.model").string()};
    if (!fs::exists(out.text)) {
      const std::string corpus = read_file(testing::shared_corpus());
      const size_t cut = corpus.find("\n\n", 250000);
      write_file_atomically(out.text, corpus.substr(0, cut == std::string::npos ? corpus.size() : cut + 1));
    }
    if (!fs::exists(out.tokenizer)) {
      TokenizerTrainOptions t;
      t.inputs = {out.text};
      t.vocab_size = 512;
      Tokenizer::train(t, (dir / "train-slice-512").string());
    }
    return out;
  }();
  return s;
}

const char* const kLinformerModel =
    "{family: bert, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, max_positions: 64, head: mlm, "
    "attention: linformer, linformer_k: 16}";

const char* const kLongformerModel =
    "{family: bert, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, max_positions: 64, head: mlm, "
    "attention: longformer, attention_window: [6], attention_dilation: [1, 2, 1, 2]}";

const char* const kModels[8] = {
    "{family: gpt, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, max_positions: 64}",
    "{family: bert, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, max_positions: 64, head: mlm}",
    "{family: t5, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64}",
    // Linear attention (layers/linear_attention.h): gated, and a hybrid with performer features.
    "{family: gpt, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, max_positions: 64, "
    "attention: gated_linear}",
    "{family: gpt, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, max_positions: 64, "
    "attention_layers: [linear, softmax], feature_map: performer, performer_features: 16}",
    // Phi-3's layout: half of each head rotated, LongRoPE past a trained context of 8, which the
    // blocks of 32 cross (training takes the long factors).
    "{family: gpt, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 1, d_ff: 64, max_positions: 64, "
    "position: rope, norm: rmsnorm, activation: swiglu, bias: false, rotary_dim: 4, rope_scaling: longrope, "
    "rope_original_max_positions: 8, rope_short_factor: [1, 1.5], rope_long_factor: [3, 9], "
    "hf_fused_projections: true}",
    // Qwen3-MoE's layout: layer 0 dense, layer 1 a mixture of 4 experts of 16, top 2, with the
    // router's load-balancing loss in the objective.
    "{family: gpt, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, d_ff: 64, max_positions: 64, "
    "position: rope, norm: rmsnorm, activation: swiglu, bias: false, qk_norm: true, experts: 4, experts_per_token: 2, "
    "expert_d_ff: 16, dense_layers: [0], router_aux_loss_coef: 0.01}",
    // Gemma's layout, 2's terms and 3's together: (1 + weight) norms before and after each branch,
    // GeGLU, scaled embeddings, q/k norms, scores over 12 (head_dim 16) soft-capped at 5, logits
    // at 10, a window of 8 (the blocks of 32 cross it) in layer 0 with its own RoPE base.
    "{family: gpt, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, head_dim: 16, d_ff: 64, "
    "max_positions: 64, position: rope, norm: rmsnorm_plus_one, norm_position: sandwich, activation: geglu_tanh, "
    "bias: false, scale_embeddings: true, qk_norm: true, attention_scale_dim: 12, attention_softcap: 5, "
    "logit_softcap: 10, window: 8, window_layers: [0], window_rope_base: 1000}"};

// A short run on the slice; `changes` ("key: value" lines) go through apply_run_override.
RunConfig tiny_run(const std::string& model, const std::string& changes) {
  auto config = parse_run_config("model: " + model + "\ndata: " + slice().text + "\ntokenizer: " + slice().tokenizer +
                                     "\nsteps: 12\nbatch_size: 4\nblock_size: 32\nwarmup_steps: 2\nlr: 0.003\n"
                                     "eval_every: 4\neval_batches: 2\nlog_every: 100\nval_fraction: 0.2\n"
                                     // fp32 unless a test asks: auto would follow the machine's bf16 speed.
                                     "precision: fp32\n",
                                 "test run");
  std::istringstream lines(changes);
  for (std::string line; std::getline(lines, line);) {
    const auto colon = line.find(": ");
    if (colon != std::string::npos) apply_run_override(config, line.substr(0, colon) + "=" + line.substr(colon + 2));
  }
  return config;
}

TrainerOptions quiet(const std::string& run_dir, std::ostream& log) {
  TrainerOptions o;
  o.run_dir = run_dir;
  o.log = &log;
  o.live = 0;
  return o;
}

std::map<std::string, torch::Tensor> weights(Model& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model.module()->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

ResumeRuns expect_resume_equals_straight_run(const RunConfig& config, const std::string& name) {
  std::ostringstream log;
  ResumeRuns runs;
  runs.split_dir = testing::scratch_path(name + "/split").string();
  Trainer straight(config, quiet(testing::scratch_path(name + "/straight").string(), log));
  runs.full = straight.run();
  EXPECT_EQ(runs.full.losses.size(), 12u);

  auto first_options = quiet(runs.split_dir, log);
  Trainer* first_trainer = nullptr;
  first_options.on_step = [&](int64_t step, double) {
    if (step == 6) first_trainer->request_stop();
  };
  Trainer first(config, first_options);
  first_trainer = &first;
  const auto part1 = first.run();
  EXPECT_TRUE(part1.interrupted);
  EXPECT_EQ(part1.losses.size(), 6u);
  EXPECT_TRUE(fs::exists(fs::path(runs.split_dir) / "checkpoints" / "step-6"));

  auto resume_options = quiet(runs.split_dir, log);
  resume_options.resume = true;
  Trainer second(load_run_config((fs::path(runs.split_dir) / "run.yaml").string()), resume_options);
  EXPECT_EQ(second.current_step(), 6);
  runs.part2 = second.run();
  if (runs.full.losses.size() != 12u || part1.losses.size() != 6u || runs.part2.losses.size() != 6u) {
    ADD_FAILURE() << "runs of the wrong length";
    return runs;
  }
  for (size_t i = 0; i < 12; ++i) {
    const double resumed = i < 6 ? part1.losses[i] : runs.part2.losses[i - 6];
    EXPECT_EQ(runs.full.losses[i], resumed) << "step " << i + 1;
  }
  auto a = weights(straight.model()), b = weights(second.model());
  for (const auto& [tensor, value] : a) EXPECT_TRUE(torch::equal(value, b.at(tensor))) << tensor;
  return runs;
}

}  // namespace zoo::train_testing
