#include "train/evaluation.h"

#include <cmath>
#include <filesystem>
#include <memory>

#include <torch/torch.h>

#include "core/files.h"
#include "core/runtime.h"
#include "models/generation.h"
#include "train/autocast.h"
#include "train/checkpoint.h"
#include "train/run_config.h"
#include "train/run_directory.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;

// Rows of a padded batch without their padding.
std::vector<std::vector<int64_t>> unpadded_rows(const torch::Tensor& ids, const torch::Tensor& mask) {
  std::vector<std::vector<int64_t>> rows;
  const auto i = ids.to(torch::kCPU).contiguous();
  const auto m = mask.to(torch::kCPU).to(torch::kLong).contiguous();
  for (int64_t b = 0; b < i.size(0); ++b) {
    std::vector<int64_t> row;
    for (int64_t t = 0; t < i.size(1); ++t)
      if (m[b][t].item<int64_t>() != 0) row.push_back(i[b][t].item<int64_t>());
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

EvalResult evaluate(Model& model, const TaskData& data, int64_t batch_size, int64_t max_batches,
                    const torch::Device& device, int64_t max_target_length, Precision precision,
                    const std::shared_ptr<RingExchange>& ring) {
  EvalResult result;
  const int64_t n = data.val_size();
  if (n == 0) return result;
  const int64_t limit = max_batches > 0 ? std::min(n, max_batches * batch_size) : n;
  auto module = model.module();
  const bool was_training = module->is_training();
  module->eval();
  torch::NoGradGuard no_grad;
  AutocastScope autocast(precision, device);
  double loss_sum = 0;
  int64_t correct = 0, exact = 0, examples = 0;
  for (int64_t start = 0; start < limit; start += batch_size) {
    std::vector<int64_t> indices;
    for (int64_t i = start; i < std::min(limit, start + batch_size); ++i) indices.push_back(i);
    const Batch batch = data.val_batch(indices);
    const auto out = compute_loss(model, batch, data.objective(), device, {.with_accuracy = true, .ring = ring});
    if (out.targets == 0) continue;
    loss_sum += out.loss.item<double>() * static_cast<double>(out.targets);
    result.targets += out.targets;
    correct += out.correct;
    if (data.objective() == Objective::kSeq2Seq) {
      GenerationOptions options;
      options.max_new_tokens = max_target_length;
      const int64_t eos = BatchTokens::require(data.tokens().eos, "end-of-sequence", "seq2seq evaluation");
      options.eos_ids = {eos};
      const auto generated = generate(model.seq2seq, unpadded_rows(batch.input_ids, batch.attention_mask), options);
      const auto labels = batch.labels.to(torch::kCPU);
      for (size_t b = 0; b < generated.tokens.size(); ++b) {
        std::vector<int64_t> target;
        for (int64_t t = 0; t < labels.size(1); ++t) {
          const int64_t id = labels[b][t].item<int64_t>();
          if (id == kIgnoreIndex || id == eos) break;
          target.push_back(id);
        }
        exact += generated.tokens[b] == target;
        ++examples;
      }
    }
  }
  if (was_training) module->train();
  if (result.targets == 0) return result;
  result.loss = loss_sum / static_cast<double>(result.targets);
  result.perplexity = std::exp(result.loss);
  result.accuracy = static_cast<double>(correct) / static_cast<double>(result.targets);
  if (examples > 0) result.exact_match = static_cast<double>(exact) / static_cast<double>(examples);
  return result;
}

EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::vector<std::string>& data,
                               int64_t batch_size, int64_t max_batches, const std::string& device_name,
                               std::ostream& log, const std::optional<WeightQuantization>& quantization) {
  const std::string dir = resolve_checkpoint(checkpoint);
  Checkpoint c = load_checkpoint(dir);
  if (!c.tokenizer) throw std::runtime_error(dir + ": the checkpoint has no tokenizer");
  const Tokenizer& tokenizer = *c.tokenizer;
  // Ids past the embedding would reach it from any data: refused before the data is read.
  if (const auto mismatch = vocabulary_mismatch(tokenizer, c.model.config.vocab_size); !mismatch.empty()) {
    throw std::runtime_error(dir + ": " + mismatch + " (ids from " + std::to_string(c.model.config.vocab_size) +
                             " on have no embedding row)");
  }
  RunConfig config;
  const fs::path run_yaml = fs::path(dir) / "run.yaml";
  if (fs::exists(run_yaml)) config = load_run_config(run_yaml.string());
  config.model_config = c.model.config;
  config.data = data;
  config.val_data = data;
  const Purpose purpose = is_example_file(data) ? Purpose::kFineTuning : Purpose::kPretraining;
  const Objective objective = resolve_objective(Objective::kAuto, c.model.config, purpose);
  // Token objectives tokenize into a scratch directory removed afterwards.
  const fs::path scratch = temporary_path_for((fs::temp_directory_path() / "zoo-eval").string());
  create_directories(scratch.string());
  try {
    std::unique_ptr<LabelSet> labels;
    const fs::path labels_path = fs::path(dir) / "labels.json";
    if (objective == Objective::kClassification && fs::exists(labels_path)) {
      labels = std::make_unique<LabelSet>(LabelSet::load(labels_path.string()));
    }
    const auto task = make_task_data(config, objective, tokenizer, scratch.string(), log, labels.get());
    const torch::Device device = resolve_device(device_name);
    c.model.module()->to(device);
    if (quantization) log << quantize_model(c.model, *quantization).describe(*quantization) << "\n";
    EvalResult r = evaluate(c.model, *task, batch_size, max_batches, device, config.target_length);
    r.step = c.state.value("step", int64_t{0});
    fs::remove_all(scratch);
    return r;
  } catch (...) {
    fs::remove_all(scratch);
    throw;
  }
}

}  // namespace zoo
