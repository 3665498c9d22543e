#pragma once
// What a checkpoint's state.json holds: everything the trainer needs to continue exactly
// (step, data position, random state, best evaluation, ...). Read from a file a user may have
// edited or a crash may have cut, so every field is checked and named. No LibTorch here: the
// fuzz target builds it alone.

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace zoo {

struct EvalResult {
  int64_t step = 0;
  double loss = NAN;
  double perplexity = NAN;
  double accuracy = NAN;     // argmax accuracy over the predicted tokens or examples
  double exact_match = NAN;  // seq2seq: greedy outputs equal to the targets
  int64_t targets = 0;       // tokens (or examples) evaluated
};

// One metrics.jsonl / state.json record of an evaluation; NaN metrics are left out.
nlohmann::json to_json(const EvalResult& result);
// Throws std::runtime_error naming `where` and the key for a malformed record.
EvalResult eval_result_from_json(const nlohmann::json& record, const std::string& where);

struct TrainerState {
  int64_t step = 0;            // updates done
  int64_t world_size = 1;      // data-parallel processes the run was trained with
  int64_t context_parallel = 1;  // ranks that shared each sequence (ring attention)
  int64_t sampler_epoch = 0;   // position of the shuffled sampler
  int64_t sampler_index = 0;
  std::string rng;             // the CPU generator's state, hex
  int64_t skipped = 0;         // updates skipped for non-finite losses
  int64_t tokens_seen = 0;
  double loss_scale = 1.0;     // fp16 dynamic loss scale
  std::string objective;
  std::optional<EvalResult> best;

  nlohmann::json to_json() const;
  // Checks every field (types, ranges) and throws std::runtime_error naming `source` and the
  // key: "checkpoints/step-4/state.json: step (-5) must be >= 0".
  static TrainerState from_json(const nlohmann::json& state, const std::string& source);
  // The text of a state.json.
  static TrainerState parse(const std::string& text, const std::string& source);
};

}  // namespace zoo
