#include "bench/workloads.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>
#include <stdexcept>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base_test_util.h"
#include "bench/workers.h"
#include "core/files.h"
#include "models/parameter_count.h"

namespace zoo::bench {
namespace {

namespace fs = std::filesystem;

// A GPT small enough to count by hand (GPT-2's layout: learned positions, biases, LayerNorm,
// the head tied to the token embedding).
ModelConfig tiny_gpt() {
  return parse_config(R"(family: gpt
name: bench-tiny
vocab_size: 64
d_model: 16
n_layers: 2
n_heads: 2
d_ff: 32
max_positions: 16
dropout: 0.0
attention_dropout: 0.0
)");
}

// tiny_gpt's parameters, by hand: the token embedding 64·16 = 1024; per block two LayerNorms
// 2·(2·16) = 64, q, k, v and the output projection 4·(16·16 + 16) = 1088, the feed-forward
// (16·32 + 32) + (32·16 + 16) = 1072, so 2224; the final LayerNorm 32. The position table,
// 16·16 = 256, is looked up rather than multiplied.
constexpr int64_t kTinyMatmulParameters = 1024 + 2 * 2224 + 32;  // 5504
constexpr int64_t kTinyPositions = 16 * 16;

// The workload names scripts/bench_pytorch.py's main() dispatches on.
std::set<std::string> pytorch_script_workloads() {
  const std::string script = read_file((fs::path(ZOO_SOURCE_DIR) / "scripts" / "bench_pytorch.py").string());
  const auto start = script.find("workloads = {");
  const auto end = script.find("\n    }", start);
  EXPECT_NE(start, std::string::npos);
  EXPECT_NE(end, std::string::npos);
  const std::string table = script.substr(start, end - start);
  std::set<std::string> names;
  const std::regex key(R"re(\n\s*"([^"]+)"\s*:)re");
  for (std::sregex_iterator m(table.begin(), table.end(), key), none; m != none; ++m) names.insert((*m)[1].str());
  return names;
}

// The names of the default run, in order, and whether `name` is a workload of `family`.
std::vector<std::string> default_names() {
  std::vector<std::string> names;
  for (const auto& w : workloads())
    if (w.default_run) names.push_back(w.name);
  return names;
}

bool in_family(const std::string& name, WorkloadFamily family) {
  for (const auto& w : workloads())
    if (w.name == name) return w.family == family;
  return false;
}

bool compares_with_pytorch(const std::string& name) { return find_workload(name).pytorch_twin; }
bool in_family_long(const std::string& name) { return in_family(name, WorkloadFamily::kLongSequence); }
bool in_family_decode(const std::string& name) { return in_family(name, WorkloadFamily::kDecode); }
bool in_family_ring(const std::string& name) { return in_family(name, WorkloadFamily::kRing); }

std::vector<std::string> family_names(WorkloadFamily family) {
  std::vector<std::string> names;
  for (const auto& w : workloads())
    if (w.family == family) names.push_back(w.name);
  return names;
}

TEST(BenchWorkloadNames, ThePyTorchScriptRunsEveryComparedWorkload) {
  // The script's table names each compared row, but for the families it makes by pattern or by
  // loop (long-*, serve-*).
  std::set<std::string> compared;
  for (const auto& w : workloads()) {
    if (w.pytorch_twin && w.family != WorkloadFamily::kLongSequence && w.family != WorkloadFamily::kServe) {
      compared.insert(w.name);
    }
  }
  EXPECT_EQ(pytorch_script_workloads(), compared);
  // The rows without a PyTorch side are the tokenizers and those compared with zoo's own training.
  for (const auto& name : {"tokenize-zoo", "tokenize-gpt2", "finetune-gpt2-small-lora",
                           "finetune-gpt2-small-lora-bf16", "finetune-gpt2-small-lora-recompute",
                           "train-gpt2-small-1024", "train-gpt2-small-1024-recompute"}) {
    EXPECT_FALSE(compares_with_pytorch(name)) << name;
  }
}

// scripts/bench_llama_cpp.py runs exactly the rows with a llama.cpp twin: each model's decoding
// and prefill in each weight type.
TEST(BenchWorkloadNames, TheLlamaCppScriptRunsEveryTwinRow) {
  const auto listed =
      run_child({testing::reference_python(), (fs::path(ZOO_SOURCE_DIR) / "scripts" / "bench_llama_cpp.py").string(),
                 "--rows"},
                {});
  const auto rows = listed["rows"].get<std::vector<std::string>>();
  std::set<std::string> twins;
  for (const auto& w : workloads())
    if (w.llama_cpp_twin) twins.insert(w.name);
  EXPECT_EQ(std::set<std::string>(rows.begin(), rows.end()), twins);
  for (const auto& name : {"generate-gpt2-small-int4", "prefill-llama-0.5b-int8", "generate-llama-0.5b-bf16"}) {
    EXPECT_TRUE(twins.count(name)) << name;
  }
}

TEST(BenchWorkloadNames, EachOnceAndComparedRowsAfterWhatTheyCompareWith) {
  const auto names = default_names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  auto position = [&](const std::string& name) { return std::find(names.begin(), names.end(), name) - names.begin(); };
  EXPECT_LT(position("gemm"), position("train-gpt2-small"));
  EXPECT_LT(position("gemm-bf16"), position("train-gpt2-small-bf16"));
  EXPECT_LT(position("bandwidth"), position("generate-gpt2-small"));
  EXPECT_LT(position("train-gpt2-small"), position("finetune-gpt2-small-lora"));
  EXPECT_LT(position("train-gpt2-small-bf16"), position("finetune-gpt2-small-lora-bf16"));
  EXPECT_LT(position("train-gpt2-small-1024"), position("train-gpt2-small-1024-recompute"));
  EXPECT_LT(position("tokenize-zoo"), position("tokenize-gpt2"));
}

TEST(BenchWorkloadNames, AnUnknownNameIsRefusedListingTheKnown) {
  try {
    run_workload("gemm-fp8", {});
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown workload 'gemm-fp8' (known: gemm, gemm-bf16, bandwidth"),
              std::string::npos)
        << e.what();
  }
}

TEST(BenchMatmulParameters, TinyGptCountedByHand) {
  const Model model = build_model(tiny_gpt());
  EXPECT_EQ(matmul_parameters(model), kTinyMatmulParameters);
  EXPECT_EQ(count_parameters(*model.module()), kTinyMatmulParameters + kTinyPositions);
}

// The mixture the -moe rows measure reads per token what Qwen3-0.6B does, plus its routers (4
// by 1024 in each of 28 layers); it holds twice the feed-forward weights.
TEST(BenchMatmulParameters, TheMixtureOfTheSameActiveSize) {
  const ModelConfig dense = bench_config("qwen3-0.6b"), moe = bench_config("qwen3-0.6b", qwen3_moe_overrides());
  EXPECT_EQ(count_active_parameters(moe), count_parameters(dense) + 28 * 4 * 1024);
  EXPECT_EQ(count_parameters(moe) - count_parameters(dense), 28 * (4 * 1024 + 3 * 1024 * (4 * 1536 - 3072)));
}

// GPT-2 small has 124,439,808 parameters (Radford et al.; transformers' GPT2LMHeadModel), of
// which its 1024 x 768 position table is looked up, not multiplied.
TEST(BenchMatmulParameters, Gpt2SmallIsThePublishedCountLessItsPositions) {
  const Model model = build_model(bench_config("gpt2-small"));
  EXPECT_EQ(matmul_parameters(model), 124439808 - 1024 * 768);
}

// 6N + 12·L·T·d per token: tiny_gpt at T = 8 is 6·5504 + 12·2·8·16 = 33024 + 3072.
TEST(BenchTrainingFlops, TinyGptWorkedByHand) {
  const ModelConfig c = tiny_gpt();
  EXPECT_EQ(training_flops_per_token(kTinyMatmulParameters, c, 8, /*frozen_base=*/false), 36096.0);
  // A frozen base (LoRA) costs no weight gradients: 4·5504 + 3072.
  EXPECT_EQ(training_flops_per_token(kTinyMatmulParameters, c, 8, /*frozen_base=*/true), 25088.0);
  // The attention term grows with the length: T = 16 doubles it.
  EXPECT_EQ(training_flops_per_token(kTinyMatmulParameters, c, 16, false), 33024.0 + 6144.0);
}

// Every field the table and --json read from a training row (apps/bench_commands.cpp), with
// values that follow from each other and from the hand count.
TEST(BenchTrainWorkload, ATinyStepGivesEveryFieldTheRowNeeds) {
  const TrainWorkload w{tiny_gpt(), /*b=*/2, /*t=*/8};
  const auto row = train_workload(w, /*steps=*/1, /*profile_rows=*/0, torch::kCPU);
  EXPECT_EQ(row.at("unit"), "tokens/s");
  EXPECT_GT(row.at("value").get<double>(), 0.0);
  EXPECT_NEAR(row.at("value").get<double>(), 2 * 8 / (row.at("step_ms").get<double>() / 1000.0),
              1e-9 * row.at("value").get<double>());
  EXPECT_TRUE(row.at("activation_mb").is_number());
  EXPECT_EQ(row.at("trainable_parameters").get<int64_t>(), kTinyMatmulParameters + kTinyPositions);
  EXPECT_EQ(row.at("flops_per_token").get<double>(), 36096.0);
  for (const char* part : {"forward", "backward", "optimizer"}) {
    EXPECT_GT(row.at("split_ms").at(part).get<double>(), 0.0) << part;
  }
  EXPECT_TRUE(row.at("profile").is_array() && row.at("profile").empty());
}

// LoRA rank 2 on q and v: 2 layers x 2 projections x (A 2x16 + B 16x2) = 256 trainable, and
// the FLOPs count 4N with the adapters in N.
TEST(BenchTrainWorkload, LoraTrainsOnlyItsAdapters) {
  const TrainWorkload w{tiny_gpt(), /*b=*/2, /*t=*/8, Precision::kFp32, /*lora_rank=*/2};
  const auto row = train_workload(w, /*steps=*/1, /*profile_rows=*/3, torch::kCPU);
  EXPECT_EQ(row.at("trainable_parameters").get<int64_t>(), 256);
  EXPECT_EQ(row.at("flops_per_token").get<double>(), 4.0 * (kTinyMatmulParameters + 256) + 3072.0);
  // --profile 3: the whole step, then three ops by self time, the most first.
  const auto& profile = row.at("profile");
  ASSERT_EQ(profile.size(), 4u);
  EXPECT_EQ(profile[0].at("name"), "(whole step)");
  EXPECT_GE(profile[1].at("self_ms").get<double>(), profile[3].at("self_ms").get<double>());
}

// What a worker prints: the workload's own fields, its name and its peak memory.
TEST(BenchRunWorkload, TrainGptTinyRowNamesItselfAndItsPeakMemory) {
  WorkloadOptions o;
  o.steps = 1;
  const auto row = run_workload("train-gpt-tiny", o);
  EXPECT_EQ(row.at("name"), "train-gpt-tiny");
  EXPECT_GT(row.at("peak_rss_mb").get<double>(), 0.0);
  EXPECT_GT(row.at("value").get<double>(), 0.0);
  // gpt-tiny at T = 128, N from its config (models/parameter_count.h) less its 256 x 256 positions.
  const ModelConfig c = bench_config("gpt-tiny");
  const double n = static_cast<double>(count_parameters(c) - c.max_positions * c.d_model);
  EXPECT_EQ(row.at("flops_per_token").get<double>(), 6.0 * n + 12.0 * c.n_layers * 128 * c.d_model);
}

// The long-sequence rows: every kind at every length, each after its (T, T) row, their configs,
// and the kinds scripts/bench_pytorch.py builds.
// Linear and gated linear attention's rows (layers/linear_attention.h): training at every
// length without a (T, T) row or a PyTorch side, and decoding at three contexts against softmax.
TEST(BenchLinearAttentionRows, TrainingAndDecodingRows) {
  for (const std::string kind : {"linear", "gla"}) {
    for (const int64_t t : {1024, 8192}) {
      const std::string name = "long-" + kind + "-" + std::to_string(t);
      ASSERT_TRUE(in_family_long(name)) << name;
      EXPECT_FALSE(in_family_long(name + "-math")) << name;
      EXPECT_FALSE(compares_with_pytorch(name)) << name;
      const auto w = long_sequence_workload(name);
      EXPECT_EQ(w.t, t);
      EXPECT_EQ(w.config.attention, kind == "gla" ? AttentionKind::kGatedLinear : AttentionKind::kLinear);
      EXPECT_EQ(w.config.position, PositionKind::kLearned);
      EXPECT_EQ(long_sequence_workload(name + "-gpt2").config.n_layers, 12);
    }
  }
  EXPECT_EQ(family_names(WorkloadFamily::kDecode).size(), 6u);
  for (const std::string kind : {"softmax", "gla"}) {
    for (const int64_t context : {512, 4096, 32768}) {
      const std::string name = "decode-" + kind + "-" + std::to_string(context);
      EXPECT_TRUE(in_family_decode(name)) << name;
      EXPECT_FALSE(compares_with_pytorch(name)) << name;
    }
  }
  EXPECT_FALSE(in_family_decode("decode-gla-1000"));
  EXPECT_THROW(decode_workload("decode-gla-1000", 1, torch::kCPU), std::invalid_argument);
  // A row runs: 64 steps after a cache of 512 positions, its context reported.
  const auto row = decode_workload("decode-gla-512", 1, torch::kCPU);
  EXPECT_EQ(row["unit"], "tokens/s");
  EXPECT_GT(row["value"].get<double>(), 0.0);
  EXPECT_EQ(row["context"], 512);
}

// #51's encoder rows: BERT's masked LM at gpt-tiny's widths to 64k tokens, full attention, a
// window and Linformer's 256 rows; and one runs (Linformer at 4k, one step).
TEST(BenchLongSequenceRows, EncoderRowsCompareFullWindowLinformerAndLongformer) {
  for (const std::string kind : {"full", "window", "linformer", "longformer"}) {
    for (const int64_t t : {4096, 16384, 65536}) {
      const std::string name = "long-encoder_" + kind + "-" + std::to_string(t);
      ASSERT_TRUE(in_family_long(name)) << name;
      EXPECT_FALSE(compares_with_pytorch(name)) << name;
      const auto w = long_sequence_workload(name);
      EXPECT_EQ(w.config.family, Family::kBert);
      EXPECT_EQ(w.objective, Objective::kMaskedLM);
      EXPECT_EQ(w.t, t);
      EXPECT_EQ(w.config.d_model, 256);
      EXPECT_EQ(w.config.window.has_value(), kind == "window");
      EXPECT_EQ(w.config.attention, kind == "linformer"    ? AttentionKind::kLinformer
                                    : kind == "longformer" ? AttentionKind::kLongformer
                                                           : AttentionKind::kSoftmax);
    }
  }
  const auto longformer = long_sequence_workload("long-encoder_longformer-4096").config;
  EXPECT_EQ(longformer.attention_window, (std::vector<int64_t>{512}));
  EXPECT_EQ(longformer.longformer_global_tokens, 16);
  EXPECT_FALSE(in_family_long("long-encoder_linformer-1024"));
  auto w = long_sequence_workload("long-encoder_linformer-4096");
  w.t = 512, w.config.max_positions = 512, w.config.n_layers = 1;
  const auto row = train_workload(w, 1, 0, torch::kCPU);
  EXPECT_GT(row.at("value").get<double>(), 0.0);
}

TEST(BenchLongSequenceRows, EveryKindAndLengthWithItsMathRowFirst) {
  const auto names = family_names(WorkloadFamily::kLongSequence);
  // Per model size: 4 kinds x 5 lengths, each with its math row; linear and gla without; and the
  // encoders' 4 kinds x 3 lengths.
  EXPECT_EQ(names.size(), 2u * (4u * 5u * 2u + 2u * 5u) + 4u * 3u);
  const auto defaults = default_names();
  for (const std::string kind : {"learned", "alibi", "relative", "window"}) {
    for (const int64_t t : {1024, 2048, 4096, 8192, 16384}) {
      const std::string name = "long-" + kind + "-" + std::to_string(t);
      const auto row = std::find(names.begin(), names.end(), name), math = std::find(names.begin(), names.end(), name + "-math");
      ASSERT_NE(row, names.end()) << name;
      ASSERT_NE(math, names.end()) << name;
      EXPECT_LT(math, row) << name;
      EXPECT_TRUE(compares_with_pytorch(name));
      EXPECT_FALSE(compares_with_pytorch(name + "-math"));
      // Minutes a step at 16k here: never in the default run.
      EXPECT_EQ(std::find(defaults.begin(), defaults.end(), name), defaults.end());

      const auto w = long_sequence_workload(name);
      EXPECT_EQ(w.b, 1);
      EXPECT_EQ(w.t, t);
      EXPECT_EQ(w.config.max_positions, t);
      EXPECT_EQ(w.config.d_model, 256);
      EXPECT_EQ(w.config.n_heads, 4);
      EXPECT_EQ(w.config.attention_backend, AttentionBackend::kAuto);
      EXPECT_EQ(long_sequence_workload(name + "-math").config.attention_backend, AttentionBackend::kMath);
      EXPECT_EQ(w.config.window.has_value(), kind == "window");
      EXPECT_EQ(w.config.position, kind == "learned"    ? PositionKind::kLearned
                                   : kind == "alibi"    ? PositionKind::kAlibi
                                   : kind == "relative" ? PositionKind::kRelative
                                                        : PositionKind::kRope);
      const auto wide = long_sequence_workload(name + "-gpt2");
      EXPECT_EQ(wide.config.d_model, 768);
      EXPECT_EQ(wide.config.n_layers, 12);
      EXPECT_EQ(wide.t, t);
      EXPECT_EQ(wide.config.position, w.config.position);
      EXPECT_TRUE(compares_with_pytorch(name + "-gpt2"));
      EXPECT_FALSE(compares_with_pytorch(name + "-gpt2-math"));
    }
  }
  EXPECT_FALSE(in_family_long("long-alibi-1000"));
  EXPECT_THROW(long_sequence_workload("long-rope-1024"), std::invalid_argument);
  const std::string script = read_file((fs::path(ZOO_SOURCE_DIR) / "scripts" / "bench_pytorch.py").string());
  EXPECT_NE(script.find(R"(LONG_KINDS = ("learned", "alibi", "relative", "window"))"), std::string::npos);
}

TEST(BenchRingRows, EveryLongRowOnTwoAndFourRanks) {
  const auto names = family_names(WorkloadFamily::kRing);
  EXPECT_EQ(names.size(), 4u * 5u * 2u);
  const auto defaults = default_names();
  for (const std::string kind : {"learned", "alibi", "relative", "window"}) {
    for (const int64_t t : {1024, 2048, 4096, 8192, 16384}) {
      for (const int64_t ranks : {2, 4}) {
        const std::string name = "ring-" + kind + "-" + std::to_string(t) + "-" + std::to_string(ranks);
        ASSERT_TRUE(in_family_ring(name)) << name;
        const auto ring = ring_workload(name);
        EXPECT_EQ(ring.single, "long-" + kind + "-" + std::to_string(t));
        EXPECT_TRUE(in_family_long(ring.single));
        EXPECT_EQ(ring.ranks, ranks);
        EXPECT_FALSE(compares_with_pytorch(name));
        EXPECT_EQ(std::find(defaults.begin(), defaults.end(), name), defaults.end());
      }
    }
  }
  EXPECT_FALSE(in_family_ring("ring-alibi-1024-3"));
  EXPECT_FALSE(in_family_ring("ring-alibi-1024"));
  EXPECT_THROW(ring_workload("ring-rope-1024-2"), std::invalid_argument);
  // A worker started alone (no WORLD_SIZE) refuses, saying who starts its ranks.
  try {
    run_workload("ring-alibi-1024-2", WorkloadOptions{});
    ADD_FAILURE() << "a ring row ran without its ranks";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("runs as 2 worker processes (WORLD_SIZE); zoo bench --only ring-alibi-1024-2 "
                                         "starts them"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace zoo::bench
