#pragma once
// Continuous batching for decoder models (GPT, LLaMA, Mistral, Qwen2 layouts, linear and gated
// linear attention) and encoder-decoders (T5, Transformer; the prompt is the encoder's source):
// one thread owns the model and loops, as vLLM's engine and llama.cpp's server slots do: admit
// waiting sequences at a token boundary (their prompts prefilled together in one forward), then
// decode every running sequence with one batched forward, each with its own position, sampling
// state and stop conditions. Three parts, each with one job: the StepPlanner decides each turn
// (who is admitted, whose prompt is read whole or a chunk a turn, which row is whose; torch-free,
// serve/step_planner.h), the ModelRunner computes it (the model and the batch's KV cache,
// serve/model_runner.h), and this class keeps each sequence's own state in one Slot and turns
// its tokens into the events its request streams.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "models/finish_reason.h"
#include "models/decoding.h"
#include "models/generation.h"
#include "models/model.h"
#include "serve/adapter_bank.h"
#include "serve/metrics.h"
#include "serve/model_runner.h"
#include "serve/prefix_cache.h"
#include "serve/step_planner.h"
#include "serve/token_grammar.h"
#include "tokenizers/tokenizer.h"

namespace zoo {

// What a sequence hands its request: new text, and at the end why it stopped.
struct SequenceEvent {
  int64_t index = 0;          // the choice
  std::string text;           // new text (may be empty on the last event)
  std::optional<FinishReason> finish;  // on the last event alone
  std::string error;          // kError's message
  int64_t prompt_tokens = 0;  // on the last event
  int64_t completion_tokens = 0;  // on the last event
  // The log-probabilities of the tokens since the last event, when the request asks: with `echo`,
  // the first event's start with the prompt's tokens'.
  std::vector<TokenLogprob> logprobs;
};

// Where one request's sequences deliver their events; the HTTP thread waits on it.
class ResponseChannel {
 public:
  void push(SequenceEvent event);
  // Waits up to `timeout` for events and takes every one queued (none on a timeout).
  std::vector<SequenceEvent> wait(std::chrono::milliseconds timeout);
  // The client went away: its sequences leave the batch at the next step.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<SequenceEvent> events_;
  std::atomic<bool> cancelled_{false};
};

struct SequenceRequest {
  int64_t index = 0;                   // the choice it answers
  std::vector<int64_t> prompt;         // at least one token; prompt + max_new_tokens fit the context
  GenerationOptions options;           // max_new_tokens, sampling, repetition penalty, seed, eos_ids
  std::vector<std::string> stop_texts;
  std::optional<int64_t> logprobs;  // each token's log-probability and this many alternatives' (0-20)
  bool echo = false;                // a decoder's prompt tokens' too, before the first new token's
  // The echoed values, shared by the choices of one prompt: the first to need them reads the
  // prompt, the others take its values (empty until then; nullptr: not shared).
  std::shared_ptr<std::vector<TokenLogprob>> echoed;
  // response_format's grammar: each token chosen among those it allows, and the answer ending
  // (kStop) once it is complete. nullptr: free text.
  std::shared_ptr<const TokenGrammar> grammar;
  // The served LoRA adapter its rows decode with (nullptr: the base); held, it cannot be unloaded.
  std::shared_ptr<const ServedAdapter> adapter;
  std::shared_ptr<ResponseChannel> channel;
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
};

struct SchedulerOptions {
  int64_t max_batch = 8;    // sequences decoded together: the cache's rows
  int64_t max_context = 0;  // positions per sequence, prompt included; 0: the model's max_positions
  int64_t max_queue = 64;   // sequences waiting for a row; beyond it submit() refuses
  // A decoder's prompt longer than this is prefilled this many tokens a turn, each chunk between
  // the running sequences' decoding steps, which then wait one chunk at most; 0: prompts whole.
  int64_t prefill_chunk = 512;
  // Positions each row of the batch's KV cache holds before it first grows (by doubling); 0: the
  // longest context and a quarter more, at most 4096.
  int64_t cache_positions = 0;
  // The prefix cache's budget (serve/prefix_cache.h): a decoder's prompts' keys kept for later
  // prompts that begin the same way. 0: none.
  int64_t prefix_cache_bytes = 0;
};

class BatchScheduler {
 public:
  // `model` (a decoder, or an encoder-decoder whose decoder positions are relative or absent:
  // T5) is in eval mode on its device and dtype; `tokenizer` decodes the streamed text.
  // Encoder-decoders take the prompt as the encoder's source.
  BatchScheduler(Model model, const Tokenizer& tokenizer, SchedulerOptions options, ServerMetrics* metrics = nullptr);
  ~BatchScheduler();
  BatchScheduler(const BatchScheduler&) = delete;
  BatchScheduler& operator=(const BatchScheduler&) = delete;

  // Queues a request's sequences, all or none: false when the queue has no room for them.
  bool submit(std::vector<SequenceRequest> sequences);
  // Ends every queued and running sequence now (FinishReason::kCancelled).
  void cancel_all();
  // Runs `job` on the model's thread between two turns (no forward running: served adapters
  // installed or removed) and returns once it has, rethrowing what it threw.
  void between_turns(const std::function<void()>& job);
  // Sequences queued, running, and decoding steps taken so far.
  int64_t queued() const;
  int64_t running() const;
  int64_t steps() const { return steps_; }
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Slot;
  struct Chunked;
  void loop();
  // Prefills `slots` together; when that fails (an allocation), each alone, so that only the
  // prompt that cannot be prefilled fails.
  void prefill(std::vector<std::unique_ptr<Slot>> slots);
  // A sequence that generates nothing (max_new_tokens 0): its prompt's log-probabilities, if
  // asked, and its end.
  void score(std::unique_ptr<Slot> slot);
  // An echoing request's prompt values (ModelRunner::prompt_logprobs), read once per prompt.
  std::vector<TokenLogprob> echoed(const SequenceRequest& request);
  // The planned chunk of a prompt read in chunks; its last chunk places it in a row.
  void prefill_chunk(const StepPlan::Chunk& chunk);
  // A prefilled slot's first token from `logits` (1, V), then its row `index` of `cache` placed
  // in the batch, unless that token ended it. A failure ends this slot alone.
  void place(std::unique_ptr<Slot> slot, KVCache& cache, int64_t index, int64_t positions, int64_t memory_length,
             const torch::Tensor& logits);
  void decode_step();
  Slot& row(size_t index) { return *slots_.at(planner_.rows()[index]); }
  // Takes the token a slot produced; true when the slot's sequence has ended.
  bool deliver(Slot& slot, int64_t token);
  // Hands the slot's last event (its row, if it has one, is the caller's to remove).
  void finish(Slot& slot, std::string text, FinishReason reason);
  // A running row whose client went away (or every row, on cancel_all) leaves the batch.
  void cancel_row(size_t row);
  // Ends a sequence with kError and `message`, counted in the metrics; the batch goes on.
  void fail(const SequenceRequest& request, const std::string& message, int64_t generated = 0);
  // The planner forgets an ended sequence; a running one's row leaves the batch, the last row
  // moving into it, in the planner and in the runner alike.
  void release(SequenceId id);
  void fail_running(const std::string& message);
  // The planner's question at admission (under the lock, on the loop's thread): a waiting
  // prompt's cached tokens, remembered until its cache is made from them in the same turn.
  int64_t cached_prefix(SequenceId id);

  const Tokenizer& tokenizer_;
  SchedulerOptions options_;
  ServerMetrics* metrics_;
  ModelRunner runner_;
  PrefixCache prefix_cache_;  // the loop's thread's alone (the planner asks it under the lock, on that thread)
  // The sequences past the queue, each in one place: running (a row of the batch, in the
  // planner's row order), or read in chunks into a cache of its own.
  std::unordered_map<SequenceId, std::unique_ptr<Slot>> slots_;
  std::unordered_map<SequenceId, Chunked> chunked_;

  mutable std::mutex mutex_;  // guards what follows, the planner's queue and counts included
  std::condition_variable wake_;
  StepPlanner planner_;
  std::unordered_map<SequenceId, SequenceRequest> waiting_;  // the queue's requests
  std::unordered_map<SequenceId, int64_t> matched_;  // cached_prefix's answers, until used this turn
  std::deque<std::function<void()>> jobs_;  // between_turns' 
  SequenceId next_id_ = 0;
  std::atomic<int64_t> running_{0};
  std::atomic<int64_t> steps_{0};
  bool cancel_all_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace zoo
