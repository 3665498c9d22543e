#pragma once
// A run's task: the objective resolved for the model's family, the data it reads (token files
// for pretraining and language modelling, examples for classification and seq2seq), the
// batches, and the loss and metrics of a model on a batch.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "models/model.h"
#include "text/finetune_data.h"
#include "text/objectives.h"
#include "text/token_file.h"
#include "text/tokenizer.h"
#include "train/run_config.h"

namespace zoo {

// kAuto resolved: by family, for pretraining or (fine_tuning) for fine-tuning.
Objective resolve_objective(Objective requested, Family family, bool fine_tuning);

struct LossOutput {
  torch::Tensor loss;   // scalar: mean over the targets (what backward() sees)
  int64_t targets = 0;  // predicted tokens, or examples for classification
  int64_t correct = 0;  // argmax == label among the targets (with_accuracy only)
  int64_t tokens = 0;   // input tokens processed (throughput)
};

// Runs `model` on `batch` (moved to `device`) and returns the cross-entropy of `objective`:
// next-token for causal LM, masked tokens (+ the pair label with a pretraining head) for MLM,
// decoder tokens for span corruption and seq2seq, the class for classification.
// `with_accuracy` also counts argmax hits (evaluation; training skips the vocabulary-wide argmax).
LossOutput compute_loss(Model& model, const Batch& batch, Objective objective, double label_smoothing,
                        const torch::Device& device, bool with_accuracy = false);

class TaskData {
 public:
  // Prepares the data of `config` for `objective` (resolved). Text for token objectives is
  // tokenized once into RUN_DIR/data and reused while the tokenizer is the same; a directory
  // with train.tokens is read as it is. Fine-tuning files are read and tokenized in memory.
  // Classification takes its classes from `labels` when given (a checkpoint's), else from the
  // training file.
  TaskData(const RunConfig& config, Objective objective, const Tokenizer& tokenizer, const std::string& run_dir,
           std::ostream& log, const LabelSet* labels = nullptr);

  Objective objective() const { return objective_; }
  int64_t train_size() const;
  int64_t val_size() const;
  Batch train_batch(const std::vector<int64_t>& indices, int64_t epoch) const;
  Batch val_batch(const std::vector<int64_t>& indices) const;
  // Classification: the classes (inferred from the training file, or the checkpoint's).
  const LabelSet& labels() const { return labels_; }
  std::string describe() const;

 private:
  Objective objective_;
  std::unique_ptr<TokenFile> train_tokens_, val_tokens_;
  std::unique_ptr<CausalLMDataset> train_lm_, val_lm_;
  std::unique_ptr<MaskedLMDataset> train_mlm_, val_mlm_;
  std::unique_ptr<SpanCorruptionDataset> train_spans_, val_spans_;
  LabelSet labels_;
  std::unique_ptr<ClassificationDataset> train_cls_, val_cls_;
  std::unique_ptr<Seq2SeqDataset> train_s2s_, val_s2s_;
  std::string description_;
};

// Runs `inputs` through tokenize_to_files into `out_dir` unless it already holds token files
// made from the same files (paths, sizes, times), split and tokenizer (OUT_DIR/sources.json). With a separate validation set, `val_inputs` go to
// OUT_DIR/val.tokens whole and `inputs` to train.tokens whole.
void prepare_token_files(const std::vector<std::string>& inputs, const std::vector<std::string>& val_inputs,
                         double val_fraction, uint64_t seed, const Tokenizer& tokenizer,
                         const std::string& out_dir, std::ostream& log);

}  // namespace zoo
