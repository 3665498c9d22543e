#include "bench/report.h"

#include <gtest/gtest.h>

namespace zoo::bench {
namespace {

using json = nlohmann::json;

// Every row a workload is compared with exists and runs before it in the registry's order, and
// so does the matmul row of its MFU.
TEST(BenchReport, BaselinesAndMatmulRowsComeFirst) {
  const auto& all = workloads();
  auto position = [&](const std::string& name) {
    for (size_t i = 0; i < all.size(); ++i)
      if (all[i].name == name) return static_cast<int64_t>(i);
    return int64_t{-1};
  };
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& w = all[i];
    EXPECT_EQ(w.baseline == Baseline::kNone, w.baseline_rows.empty()) << w.name;
    for (const auto& row : w.baseline_rows) {
      const int64_t at = position(row);
      EXPECT_GE(at, 0) << w.name << " compares with unknown " << row;
      EXPECT_LT(at, static_cast<int64_t>(i)) << w.name << " runs before " << row;
    }
    if (!w.matmul_row.empty()) EXPECT_LT(position(w.matmul_row), static_cast<int64_t>(i)) << w.name;
  }
}

// LoRA against full fine-tuning and MFU against the gemm row, worked by hand from made-up results.
TEST(BenchReport, RatiosFromTheRowsMeasuredBefore) {
  MeasuredRows earlier;
  earlier["gemm"] = {{"value", 100.0}};  // GFLOP/s
  earlier["train-gpt2-small"] = {{"value", 50.0}, {"peak_rss_mb", 2000.0}};
  const json lora = {{"unit", "tokens/s"},    {"value", 40.0},          {"peak_rss_mb", 1000.0},
                     {"trainable_parameters", 1234}, {"flops_per_token", 1e9}};
  const auto row = make_row(find_workload("finetune-gpt2-small-lora"), lora, json(), earlier, false);
  EXPECT_DOUBLE_EQ(row.fields["speed_vs_full"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(row.fields["peak_rss_vs_full"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(row.fields["mfu"].get<double>(), 40.0 * 1e9 / 100e9);
  EXPECT_FALSE(row.fields.contains("pytorch"));
  EXPECT_NE(row.notes.find("1234 trainable; 0.80x full fine-tuning's tokens/s, peak RSS 1000 MB = 50% of its"),
            std::string::npos)
      << row.notes;
  // Without its baseline in this run (--only), the row has no ratio.
  const auto alone = make_row(find_workload("finetune-gpt2-small-lora"), lora, json(), {}, false);
  EXPECT_FALSE(alone.fields.contains("speed_vs_full"));
  // PyTorch's side: the ratio of the two values.
  const json torch_side = {{"value", 80.0}, {"peak_rss_mb", 900.0}};
  const auto compared = make_row(find_workload("train-gpt2-small"), lora, torch_side, earlier, false);
  EXPECT_DOUBLE_EQ(compared.fields["ratio"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(compared.fields["pytorch_mfu"].get<double>(), 80.0 * 1e9 / 100e9);
}

// A training row's ops per step and host synchronisations beside PyTorch's, counted by the same
// rules: ATen ops only, and what ATen's CPU AdamW kernel alone reads (its step counts, read on the
// device on CUDA) left out on both sides.
TEST(BenchReport, OpsAndSynchronisationsBesidePyTorchs) {
  const json zoo = {{"unit", "tokens/s"},
                    {"value", 10.0},
                    {"peak_rss_mb", 100.0},
                    {"flops_per_token", 1e6},
                    {"op_calls", {{"aten::mm", 5}, {"aten::add_", 3}, {"autograd::engine::evaluate_function: MmBackward0", 2},
                                  {"aten::item (in aten::_fused_adamw_)", 4}, {"aten::_fused_adamw_", 2}}}};
  // PyTorch's events as torch.profiler gives them: name and the index of the op each ran in.
  const json pytorch = {{"value", 8.0},
                        {"peak_rss_mb", 120.0},
                        {"op_events", json::array({json::array({"aten::mm", -1}), json::array({"aten::_fused_adamw_", -1}),
                                                   json::array({"aten::item", 1}), json::array({"aten::_local_scalar_dense", 2}),
                                                   json::array({"aten::item", -1}), json::array({"aten::_local_scalar_dense", 4})})}};
  const auto row = make_row(find_workload("train-gpt-tiny"), zoo, pytorch, {}, false);
  EXPECT_EQ(row.fields["zoo_ops"].get<int64_t>(), 14);  // 5 + 3 + 4 + 2: the autograd node is not an op
  EXPECT_EQ(row.fields["zoo_syncs"].get<int64_t>(), 0);
  EXPECT_EQ(row.fields["pytorch_ops"].get<int64_t>(), 6);
  EXPECT_EQ(row.fields["pytorch_syncs"].get<int64_t>(), 2);  // the item outside the optimizer, and its dense read
  EXPECT_NE(row.notes.find("ops/step 14 (pytorch 6), syncs 0 (pytorch 2)"), std::string::npos) << row.notes;
}

// A mixture of experts against the dense model of its active size: the dense tokens/s over the
// mixture's is its time a token relative to the dense one.
TEST(BenchReport, MixtureAgainstTheDenseModelOfItsActiveSize) {
  MeasuredRows earlier;
  earlier["train-qwen3-0.6b"] = {{"value", 20.0}, {"peak_rss_mb", 10000.0}};
  const json moe = {{"unit", "tokens/s"}, {"value", 16.0}, {"peak_rss_mb", 14000.0}, {"flops_per_token", 1e9}};
  const auto row = make_row(find_workload("train-qwen3-0.6b-moe"), moe, json(), earlier, false);
  EXPECT_DOUBLE_EQ(row.fields["time_vs_dense"].get<double>(), 1.25);
  EXPECT_NE(row.notes.find("1.25x the dense model's time a token at the same active size"), std::string::npos)
      << row.notes;
}

// A decoding row beside llama.cpp's result of the same row (--llama-cpp), and its bandwidth bound.
TEST(BenchReport, DecodingBesideLlamaCpp) {
  MeasuredRows earlier;
  earlier["bandwidth"] = {{"value", 10.0}};  // GB/s
  const json zoo = {{"unit", "tokens/s"}, {"value", 60.0}, {"peak_rss_mb", 300.0}, {"bytes_per_token", 1.25e8}};
  const json llama = {{"value", 48.0}, {"type", "Q8_0"}, {"peak_rss_mb", 250.0}};
  const auto row = make_row(find_workload("generate-gpt2-small-int8"), zoo, json(), earlier, false, llama);
  EXPECT_DOUBLE_EQ(row.fields["vs_llama_cpp"].get<double>(), 1.25);
  EXPECT_EQ(row.fields["llama_cpp_type"], "Q8_0");
  EXPECT_DOUBLE_EQ(row.fields["bound"].get<double>(), 80.0);
  EXPECT_NE(row.notes.find("bandwidth bound 80.0 tokens/s: 75%; llama.cpp Q8_0 48.0 tokens/s: zoo 1.25x"),
            std::string::npos)
      << row.notes;
  // Without llama.cpp's side the row says nothing of it.
  const auto alone = make_row(find_workload("generate-gpt2-small-int8"), zoo, json(), earlier, false);
  EXPECT_FALSE(alone.fields.contains("vs_llama_cpp"));
  EXPECT_EQ(alone.notes.find("llama.cpp"), std::string::npos);
}

}  // namespace
}  // namespace zoo::bench
