#pragma once
// The policy of zoo serve's continuous batching, apart from the model: which waiting sequences
// take rows at a token boundary, which prompts are prefilled whole and which a chunk a turn,
// where each running sequence's row is, when a sequence has run out of room, and what state each
// sequence is in (as llama.cpp's slot_state and vLLM's RequestStatus). Torch-free: the scheduler
// (serve/batch_scheduler.h) asks it for each turn's plan and runs the model on it, and its tests
// build no model. Not thread-safe: the scheduler calls it under its lock, and only its own
// thread changes the rows; that thread alone reads rows(), chunked() and the pure rules
// (ends_by_length) without the lock.

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "inference/prompt_rules.h"

namespace zoo {

using SequenceId = uint64_t;

enum class SequenceState {
  kWaiting,     // queued for a row
  kPrefilling,  // admitted: its prompt is being read (whole this turn, or a chunk a turn)
  kRunning,     // in a row of the batch, decoding a token a step
  kFinished,    // ended (eos, stop, length, cancelled, error); forgotten by the planner
};

struct PlannerOptions {
  int64_t max_batch = 8;      // rows of the batch
  int64_t max_queue = 64;     // sequences waiting beyond the rows
  int64_t prefill_chunk = 0;  // a decoder's prompt longer than this is read this many tokens a turn; 0: whole
  ContextLimits limits;       // what fits (inference/prompt_rules.h); its context is the --max-context
  // A prompt longer than this is read whole, never in chunks: longrope's trained context, past
  // which every key takes the long factors, which the first chunks could not know. 0: none.
  int64_t whole_past = 0;
  // The tokens of a decoder's waiting prompt already cached (serve/prefix_cache.h), asked once at
  // its admission: the prompt is then read from there, as one read in chunks is (in one chunk
  // when prefill_chunk is 0). Unset: no cache.
  std::function<int64_t(SequenceId)> cached_tokens;
  // With a prefix cache on a model whose layers keep a recurrent state (linear attention), whose
  // state the cache can keep only where a read ends: a decoder's prompt longer than this is read
  // in chunks, one of them ending at its last multiple of this short of its last token (the
  // furthest a later prompt's match can reach). 0: no such cut.
  int64_t state_block = 0;
};

// One turn of the loop, in the order the scheduler runs it.
struct StepPlan {
  // Admitted sequences whose prompt and max_new_tokens do not fit the context, with the error.
  std::vector<std::pair<SequenceId, std::string>> refused;
  std::vector<SequenceId> prefill;  // admitted now: prompts read together this turn, then placed in rows
  // Admitted now to generate nothing (max_new_tokens 0: a prompt scored for its log-probabilities,
  // as evaluation harnesses ask): read alone this turn and finished, never given a row.
  std::vector<SequenceId> scored;
  struct Chunk {
    SequenceId id = 0;
    int64_t begin = 0, length = 0;  // the prompt tokens [begin, begin + length)
    bool last = false;              // the prompt is read after it: the sequence is then placed
  };
  std::optional<Chunk> chunk;  // the next chunk of the oldest prompt read in chunks
};

class StepPlanner {
 public:
  explicit StepPlanner(PlannerOptions options);

  // Whether `n` more sequences fit beside the running and waiting ones: the rows and the queue.
  bool accepts(int64_t n) const;
  void enqueue(SequenceId id, int64_t prompt_tokens, int64_t max_new_tokens);

  // Admission at a token boundary: as many waiting sequences (oldest first) as there are rows not
  // taken (a prompt still read in chunks holds the row it will take); the prompts that do not fit
  // are refused, a decoder's long prompts go to the chunked queue, the rest are read together
  // now. Then the next chunk of the oldest chunked prompt.
  StepPlan plan();

  // A sequence whose prompt is read (and whose first token did not end it) takes the next row.
  void placed(SequenceId id);
  // A sequence ended, in any state. A running one leaves its row, and the last row moves into it
  // to keep the rows packed: the row it left is returned, for the runner to do the same
  // (ModelRunner::remove_row).
  std::optional<int64_t> finished(SequenceId id);

  SequenceState state(SequenceId id) const;
  // Sequence ids by row of the batch (row i of the cache holds rows()[i]).
  const std::vector<SequenceId>& rows() const { return rows_; }
  // Oldest first: the sequences waiting, and those read in chunks.
  const std::deque<SequenceId>& waiting() const { return waiting_; }
  const std::deque<SequenceId>& chunked() const { return chunked_; }
  // Rows and prompts being read: the sequences past the queue.
  int64_t admitted() const;

  // Whether a sequence of `prompt_tokens` ends by length with `generated` of its
  // `max_new_tokens`: those reached, or the last token would need a position past the context
  // when fed back (a decoder's row holds its prompt and its tokens, an encoder-decoder's its
  // start token and its tokens). Reads the options alone: the scheduler's thread asks it for
  // every token without the lock, while submit() changes the queue under it.
  bool ends_by_length(int64_t prompt_tokens, int64_t max_new_tokens, int64_t generated) const;

  const PlannerOptions& options() const { return options_; }

 private:
  struct Sequence {
    SequenceState state = SequenceState::kWaiting;
    int64_t prompt_tokens = 0, max_new_tokens = 0;
    int64_t read = 0;  // prompt tokens read so far (chunked)
  };
  PlannerOptions options_;
  std::unordered_map<SequenceId, Sequence> sequences_;
  std::deque<SequenceId> waiting_, chunked_;
  std::vector<SequenceId> rows_;
  int64_t reading_ = 0;  // admitted, read whole this turn, not yet placed
};

}  // namespace zoo
