#pragma once
// A run's task: the objective resolved for the model's family, the data it reads (token files
// for pretraining and language modelling, examples for classification and seq2seq), the
// batches, and the loss and metrics of a model on a batch.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "data/finetune_data.h"
#include "data/objectives.h"
#include "data/token_file.h"
#include "data/tokenize.h"
#include "kernels/ring_attention.h"
#include "models/model.h"
#include "tokenizers/tokenizer.h"
#include "train/run_config.h"

namespace zoo {

struct LossOutput {
  torch::Tensor loss;   // scalar: mean over the targets (what backward() sees)
  // A mixture of experts in training: the routers' load-balancing loss, which `loss` holds times
  // router_aux_loss_coef (undefined otherwise).
  torch::Tensor router_loss;
  int64_t targets = 0;  // predicted tokens, or examples for classification
  int64_t correct = 0;  // argmax == label among the targets (with_accuracy only)
  int64_t tokens = 0;   // input tokens processed (throughput)
};

// Runs `model` on `batch` (moved to `device`) and returns the cross-entropy of `objective`:
// next-token for causal LM, masked tokens (+ the pair label with a pretraining head) for MLM,
// decoder tokens for span corruption and seq2seq, the class for classification.
// With options.ring (context parallelism: causal LM, masked LM, span corruption and seq2seq), each
// sequence's tokens and targets (the encoder's and the decoder's) are padded to a multiple of 2N
// and cut into the zigzag layout, and this rank computes its own share of them around the ring
// (kernels/ring_attention.h): the loss is then the mean over this rank's targets, and causal LM's
// head runs on blocks of its rows in evaluation (no (B T, V) logits).
struct LossOptions {
  double label_smoothing = 0;
  bool with_accuracy = false;  // count argmax hits too (evaluation; training skips the vocabulary-wide argmax)
  std::shared_ptr<RingExchange> ring;  // context parallelism: this rank's ring (nullptr: none)
};
LossOutput compute_loss(Model& model, const Batch& batch, Objective objective, const torch::Device& device,
                        const LossOptions& options = {});

// A run's data, whatever the objective: training and validation examples by index, batched.
// Token objectives read token files (tokenized once into RUN_DIR/data, or a token directory as
// it is); classification and seq2seq read the user's example files.
class TaskData {
 public:
  virtual ~TaskData() = default;
  virtual Objective objective() const = 0;
  virtual int64_t train_size() const = 0;
  virtual int64_t val_size() const = 0;
  // Random parts of a batch (masks, corrupted spans) depend on (seed, epoch, example) only.
  virtual Batch train_batch(const std::vector<int64_t>& indices, int64_t epoch) const = 0;
  // Validation batches are the same at every evaluation.
  virtual Batch val_batch(const std::vector<int64_t>& indices) const = 0;
  // Classification's classes; nullptr for the other objectives.
  virtual const LabelSet* labels() const { return nullptr; }
  // The special tokens the batches are made with (the run tokenizer's).
  virtual const BatchTokens& tokens() const = 0;
  virtual std::string describe() const = 0;
};

// Prepares the data of `config` for `objective` (resolved). Classification takes its classes
// from `labels` when given (a checkpoint's), else from the training file.
std::unique_ptr<TaskData> make_task_data(const RunConfig& config, Objective objective, const Tokenizer& tokenizer,
                                         const std::string& run_dir, std::ostream& log,
                                         const LabelSet* labels = nullptr);

// Whether `data` names one file of examples (.csv, .tsv, .jsonl), not text to tokenize.
bool is_example_file(const std::vector<std::string>& data);

// Runs `inputs` through tokenize_to_files into `out_dir` unless it already holds token files
// made from the same files (paths, sizes, times), split and tokenizer (OUT_DIR/sources.json). With a separate validation set, `val_inputs` go to
// OUT_DIR/val.tokens whole and `inputs` to train.tokens whole.
void prepare_token_files(const std::vector<std::string>& inputs, const std::vector<std::string>& val_inputs,
                         double val_fraction, uint64_t seed, const Tokenizer& tokenizer,
                         const std::string& out_dir, std::ostream& log);

}  // namespace zoo
