#pragma once
// What the training tests share: a slice of the default corpus with its tokenizer, tiny models of
// each family, a short run on the slice, quiet trainer options, and the resume check.

#include <map>
#include <ostream>
#include <string>

#include <torch/torch.h>

#include "train/trainer.h"

namespace zoo::train_testing {

// A 250 kB slice of the default corpus and a 512-piece tokenizer trained on it, made once per
// build tree (ctest runs each test in its own process).
struct Slice {
  std::string text, tokenizer;
};
const Slice& slice();

// Tiny models of 512 tokens: gpt, bert (mlm), t5, a gated-linear gpt, a linear/softmax hybrid gpt
// with performer features.
extern const char* const kModels[8];
// A BERT masked LM whose layers attend through Linformer's projections (16 rows of 64).
extern const char* const kLinformerModel;
// A BERT masked LM whose layers attend through Longformer's window of 3 to each side, two heads dilated by 2.
extern const char* const kLongformerModel;

// A short run on the slice; `changes` ("key: value" lines) go through apply_run_override.
RunConfig tiny_run(const std::string& model, const std::string& changes = "");

// Options for a run in RUN_DIR that logs to `log`, with no live line.
TrainerOptions quiet(const std::string& run_dir, std::ostream& log);

// Copies of the model's parameters by name.
std::map<std::string, torch::Tensor> weights(Model& model);

// Runs `config` straight to its end, and again stopped after step 6 and resumed from its run
// directory; expects the same loss at every step and the same final weights.
struct ResumeRuns {
  TrainSummary full, part2;
  std::string split_dir;
};
ResumeRuns expect_resume_equals_straight_run(const RunConfig& config, const std::string& name);

}  // namespace zoo::train_testing
