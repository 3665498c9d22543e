#pragma once
// Evaluation: a model's loss, perplexity and accuracy (and exact match for seq2seq, by greedy
// generation) on the validation split of a task's data, and the same for a saved checkpoint
// with the objective its family and head imply (`zoo eval`). The trainer evaluates through
// evaluate() every eval_every steps.

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "models/model.h"
#include "train/precision.h"
#include "train/task.h"
#include "train/trainer_state.h"

namespace zoo {

// The checkpoint's model on `data` with the objective of its family and head (causal LM for
// gpt, MLM or classification for bert, span corruption or seq2seq for t5). Token objectives
// read text (or a token directory's val.tokens); classification and seq2seq read their files.
// With `quantization`, its weights are quantized once placed on the device (zoo eval --quantize).
EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::vector<std::string>& data,
                               int64_t batch_size, int64_t max_batches, const std::string& device,
                               std::ostream& log, const std::optional<WeightQuantization>& quantization = std::nullopt);

// Model on the validation split of `data`, batch by batch (max_batches 0 = all), its forward
// passes in `precision` (a bf16 run evaluates under autocast, as it trains). With `ring`
// (context parallelism), every rank of the ring must call it together: each scores its zigzag
// share of every sequence around the ring, and the result is this rank's share alone (the
// trainer sums the ranks').
EvalResult evaluate(Model& model, const TaskData& data, int64_t batch_size, int64_t max_batches,
                    const torch::Device& device, int64_t max_target_length = 64,
                    Precision precision = Precision::kFp32, const std::shared_ptr<RingExchange>& ring = nullptr);

}  // namespace zoo
