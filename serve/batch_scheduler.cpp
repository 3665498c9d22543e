#include "serve/batch_scheduler.h"

#include <algorithm>

#include <torch/torch.h>

#include "inference/prompt_rules.h"
#include "inference/text_generation.h"
#include "models/decoding.h"
#include "serve/stop_texts.h"

namespace zoo {

using Clock = std::chrono::steady_clock;

namespace {

int64_t adapter_slot(const SequenceRequest& r) { return r.adapter ? r.adapter->slot : -1; }
uint64_t adapter_salt(const SequenceRequest& r) { return r.adapter ? r.adapter->salt : 0; }

// Positions the batch's cache holds before it first grows: every row's longest context, with
// slack so that trimming the front moves the keys rarely; but no more than 4096 up front (a model
// of 128k positions grows its buffers by doubling as its sequences do).
int64_t reserved_positions(const SchedulerOptions& o) {
  if (o.cache_positions > 0) return o.cache_positions;
  return std::min<int64_t>(o.max_context + std::max<int64_t>(64, o.max_context / 4), 4096);
}

// --max-context and the other options checked against `config`, defaults filled in.
SchedulerOptions checked(SchedulerOptions o, const ModelConfig& config) {
  const int64_t limit = config.max_length();
  if (o.max_context <= 0) o.max_context = limit;
  auto refuse = [](const std::string& what) { throw std::invalid_argument("zoo serve: " + what); };
  if (o.max_batch < 1) refuse("--max-batch must be at least 1, got " + std::to_string(o.max_batch));
  if (o.max_context > limit) {
    refuse("--max-context " + std::to_string(o.max_context) + " is more than the model's max_positions (" +
           std::to_string(limit) + ")");
  }
  if (o.max_context < 2) refuse("--max-context must be at least 2, got " + std::to_string(o.max_context));
  if (o.max_queue < 0) refuse("--max-queue must be >= 0, got " + std::to_string(o.max_queue));
  if (o.prefill_chunk < 0) refuse("--prefill-chunk must be >= 0 (0: prompts whole), got " + std::to_string(o.prefill_chunk));
  if (o.prefix_cache_bytes < 0) refuse("--prefix-cache-mb must be >= 0 (0: no prefix cache)");
  if (o.cache_positions < 0) {
    refuse("--kv-cache-positions must be >= 0 (0: the default), got " + std::to_string(o.cache_positions));
  }
  return o;
}

// LibTorch's errors carry a C++ backtrace that a client has no use for.
std::string message_of(const std::exception& e) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e)) return torch_error->what_without_backtrace();
  return e.what();
}

}  // namespace

void ResponseChannel::push(SequenceEvent event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

std::vector<SequenceEvent> ResponseChannel::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  std::vector<SequenceEvent> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

// A sequence past the queue: its request, and its own sampling state and streamed text (where
// its keys are is the runner's).
struct BatchScheduler::Slot {
  // A decoder-only model continues the prompt; an encoder-decoder's decoder starts afresh from
  // its start token, the prompt being the encoder's source.
  Slot(SequenceId i, SequenceRequest r, const Tokenizer& tokenizer, std::optional<int64_t> decoder_start)
      : id(i),
        request(std::move(r)),
        decoder(tokenizer, decoder_start ? std::vector<int64_t>{} : request.prompt),
        stops(request.stop_texts),
        generator(make_generator(request.options.seed)),
        context(decoder_start ? std::vector<int64_t>{*decoder_start} : request.prompt) {
    if (request.grammar) constraint.emplace(request.grammar);
  }
  // The row as its next token is chosen: with its grammar's mask filled for this step.
  DecodingRow decoding() {
    return {&request.options, &generator, &context, generated, request.logprobs,
            constraint ? &constraint->allowed() : nullptr};
  }

  SequenceId id;
  SequenceRequest request;
  StreamDecoder decoder;
  StopTexts stops;
  at::Generator generator;
  std::vector<int64_t> context;  // prompt and tokens so far (the repetition penalty reads it)
  int64_t next = 0;              // the token the next step feeds
  int64_t generated = 0;
  std::vector<TokenLogprob> logprobs;  // not yet handed to the request
  std::optional<TokenConstraint> constraint;  // the request's grammar, where it has one
  Clock::time_point last_token;
};

// A prompt read in chunks: its slot and its own cache (the planner counts the tokens read).
struct BatchScheduler::Chunked {
  std::unique_ptr<Slot> slot;
  KVCache cache;
};

BatchScheduler::BatchScheduler(Model model, const Tokenizer& tokenizer, SchedulerOptions options, ServerMetrics* metrics)
    : tokenizer_(tokenizer),
      options_(checked(options, model.config)),
      metrics_(metrics),
      runner_(std::move(model), options_.max_batch, reserved_positions(options_)),
      prefix_cache_(runner_.encoder_decoder() ? 0 : options_.prefix_cache_bytes),
      planner_(PlannerOptions{options_.max_batch, options_.max_queue, options_.prefill_chunk,
                              {runner_.encoder_decoder(), runner_.config().max_length(), options_.max_context},
                              uses_long_factors(runner_.config().rope_scaling, runner_.config().max_length())
                                  ? runner_.config().rope_scaling.original_max_positions
                                  : 0,
                              [this](SequenceId id) { return cached_prefix(id); },
                              prefix_cache_.enabled() && runner_.config().has_recurrent_layers()
                                  ? PrefixCache::kBlockTokens
                                  : 0}) {
  thread_ = std::thread([this] { loop(); });
}

BatchScheduler::~BatchScheduler() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    cancel_all_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

int64_t BatchScheduler::cached_prefix(SequenceId id) {
  const auto& r = waiting_.at(id);
  const int64_t n = prefix_cache_.match(r.prompt, adapter_salt(r));
  if (n > 0) matched_[id] = n;
  return n;
}

bool BatchScheduler::submit(std::vector<SequenceRequest> sequences) {
  {
    std::lock_guard lock(mutex_);
    // A sequence whose client has gone (cancelled before the loop took it from the queue) holds
    // no place.
    for (const SequenceId id : std::vector<SequenceId>(planner_.waiting().begin(), planner_.waiting().end())) {
      if (waiting_.at(id).channel->cancelled()) planner_.finished(id), waiting_.erase(id);
    }
    if (stop_ || !planner_.accepts(static_cast<int64_t>(sequences.size()))) return false;
    for (auto& s : sequences) {
      const SequenceId id = next_id_++;
      planner_.enqueue(id, static_cast<int64_t>(s.prompt.size()), s.options.max_new_tokens);
      waiting_.emplace(id, std::move(s));
    }
  }
  wake_.notify_all();
  return true;
}

void BatchScheduler::between_turns(const std::function<void()>& job) {
  std::exception_ptr failure;
  bool done = false;
  std::condition_variable finished;
  {
    std::unique_lock lock(mutex_);
    if (stop_) throw std::runtime_error("the server is stopping");
    jobs_.push_back([&] {
      try {
        job();
      } catch (...) {
        failure = std::current_exception();
      }
      std::lock_guard done_lock(mutex_);
      done = true;
      finished.notify_all();
    });
    wake_.notify_all();
    finished.wait(lock, [&] { return done; });
  }
  if (failure) std::rethrow_exception(failure);
}

void BatchScheduler::cancel_all() {
  {
    std::lock_guard lock(mutex_);
    cancel_all_ = true;
  }
  wake_.notify_all();
}

int64_t BatchScheduler::queued() const {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(planner_.waiting().size());
}

int64_t BatchScheduler::running() const { return running_; }

void BatchScheduler::loop() {
  // The model's thread: no autograd state, ever.
  c10::InferenceMode inference;
  while (true) {
    StepPlan plan;
    std::vector<std::pair<SequenceRequest, std::string>> refused;
    std::vector<std::unique_ptr<Slot>> whole, scored;
    bool cancel = false;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] {
        return stop_ || cancel_all_ || !jobs_.empty() || !planner_.waiting().empty() || planner_.admitted() > 0;
      });
      // Jobs run between turns, outside the lock (they take it to say they are done).
      while (!jobs_.empty()) {
        auto job = std::move(jobs_.front());
        jobs_.pop_front();
        lock.unlock();
        job();
        lock.lock();
      }
      cancel = cancel_all_;
      cancel_all_ = false;
      const std::vector<SequenceId> waiting(planner_.waiting().begin(), planner_.waiting().end());
      for (const SequenceId id : waiting) {
        const auto& r = waiting_.at(id);
        if (cancel) {
          r.channel->push({r.index, "", FinishReason::kCancelled, "", static_cast<int64_t>(r.prompt.size()), 0, {}});
        }
        // A client that went away before its sequence ran holds no place.
        if (cancel || r.channel->cancelled()) planner_.finished(id), waiting_.erase(id);
      }
      // Admission at a token boundary, as the planner decides.
      plan = planner_.plan();
      auto take = [&](SequenceId id) {
        auto request = std::move(waiting_.at(id));
        waiting_.erase(id);
        return request;
      };
      for (const auto& [id, message] : plan.refused) refused.emplace_back(take(id), message);
      const auto start = runner_.decoder_start();
      for (const SequenceId id : plan.prefill) whole.push_back(std::make_unique<Slot>(id, take(id), tokenizer_, start));
      for (const SequenceId id : plan.scored) scored.push_back(std::make_unique<Slot>(id, take(id), tokenizer_, start));
      for (const SequenceId id : planner_.chunked()) {
        if (!chunked_.count(id)) {
          Chunked entry{std::make_unique<Slot>(id, take(id), tokenizer_, start), runner_.chunk_cache()};
          // Its cached prefix, copied now: nothing is evicted between the planner's asking and here.
          if (const auto m = matched_.find(id); m != matched_.end()) {
            prefix_cache_.fill(entry.slot->request.prompt, m->second, entry.cache, adapter_salt(entry.slot->request));
            matched_.erase(m);
          }
          chunked_.emplace(id, std::move(entry));
        }
      }
      running_ = planner_.admitted();  // counted as running from here, so that submit() never sees it nowhere
      if (stop_ && planner_.waiting().empty() && planner_.admitted() == 0) break;
    }
    if (cancel) {
      while (!planner_.rows().empty()) cancel_row(planner_.rows().size() - 1);
      for (const SequenceId id : std::vector<SequenceId>(planner_.chunked().begin(), planner_.chunked().end())) {
        finish(*chunked_.at(id).slot, "", FinishReason::kCancelled);
        release(id);
      }
      plan.chunk.reset();
    }
    for (const auto& [request, message] : refused) fail(request, message);
    for (auto& slot : scored) score(std::move(slot));
    if (!whole.empty()) prefill(std::move(whole));
    if (plan.chunk) prefill_chunk(*plan.chunk);
    // A client that went away frees its row now.
    for (size_t i = planner_.rows().size(); i-- > 0;) {
      if (row(i).request.channel->cancelled()) cancel_row(i);
    }
    if (!planner_.rows().empty()) {
      try {
        decode_step();
      } catch (const std::exception& e) {
        fail_running(message_of(e));
      }
    }
    int64_t waiting = 0;
    {
      std::lock_guard lock(mutex_);
      running_ = planner_.admitted();
      waiting = static_cast<int64_t>(planner_.waiting().size());
    }
    if (metrics_ != nullptr) {
      metrics_->batch(waiting, static_cast<int64_t>(planner_.rows().size()), options_.max_batch);
      const auto& c = prefix_cache_.counts();
      metrics_->prefix_cache(c.lookup_tokens, c.hit_tokens, c.evicted_blocks, c.bytes, c.blocks);
    }
  }
}

void BatchScheduler::prefill(std::vector<std::unique_ptr<Slot>> slots) {
  PrefilledPrompts prompts;
  try {
    std::vector<const std::vector<int64_t>*> ids;
    std::vector<int64_t> adapters;
    for (const auto& s : slots) ids.push_back(&s->request.prompt), adapters.push_back(adapter_slot(s->request));
    prompts = runner_.prefill(ids, adapters);
  } catch (const std::exception& e) {
    if (slots.size() == 1) {
      fail(slots[0]->request, message_of(e));
      release(slots[0]->id);
      return;
    }
    for (auto& s : slots) {
      std::vector<std::unique_ptr<Slot>> alone;
      alone.push_back(std::move(s));
      prefill(std::move(alone));
    }
    return;
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    const auto row = static_cast<int64_t>(i);
    place(std::move(slots[i]), prompts.cache, row, prompts.positions[i], prompts.memory_lengths[i],
          prompts.logits.narrow(0, row, 1));
  }
}

std::vector<TokenLogprob> BatchScheduler::echoed(const SequenceRequest& r) {
  if (r.echoed && !r.echoed->empty()) return *r.echoed;
  auto values = runner_.prompt_logprobs(r.prompt, r.logprobs.value_or(0), adapter_slot(r));
  if (r.echoed) *r.echoed = values;
  return values;
}

void BatchScheduler::score(std::unique_ptr<Slot> slot) {
  const SequenceId id = slot->id;
  try {
    const auto& r = slot->request;
    if (r.echo && !runner_.encoder_decoder()) slot->logprobs = echoed(r);
    finish(*slot, "", FinishReason::kLength);
  } catch (const std::exception& e) {
    fail(slot->request, message_of(e));
  }
  release(id);
}

void BatchScheduler::place(std::unique_ptr<Slot> slot, KVCache& cache, int64_t index, int64_t positions,
                           int64_t memory_length, const torch::Tensor& logits) {
  const SequenceId id = slot->id;
  try {
    const auto first = choose_row_tokens(logits, {slot->decoding()}).front();
    if (!first.error.empty()) {
      fail(slot->request, first.error);
      release(id);
      return;
    }
    const auto& r = slot->request;
    if (!runner_.encoder_decoder()) prefix_cache_.insert(r.prompt, cache, index, adapter_salt(r));
    if (r.echo && !runner_.encoder_decoder()) slot->logprobs = echoed(r);
    if (first.logprob) slot->logprobs.push_back(*first.logprob);
    if (metrics_ != nullptr) {
      metrics_->time_to_first_token(std::chrono::duration<double>(Clock::now() - slot->request.arrival).count());
    }
    if (deliver(*slot, first.token)) {
      release(id);
      return;
    }
    runner_.place(cache, index, positions, memory_length, adapter_slot(r));
  } catch (const std::exception& e) {
    fail(slot->request, message_of(e), slot->generated);
    release(id);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    planner_.placed(id);
  }
  slots_.emplace(id, std::move(slot));
}

void BatchScheduler::prefill_chunk(const StepPlan::Chunk& chunk) {
  auto& entry = chunked_.at(chunk.id);
  if (entry.slot->request.channel->cancelled()) {
    finish(*entry.slot, "", FinishReason::kCancelled);
    release(chunk.id);
    return;
  }
  const auto& prompt = entry.slot->request.prompt;
  torch::Tensor logits;
  try {
    const std::vector<int64_t> tokens(prompt.begin() + chunk.begin, prompt.begin() + chunk.begin + chunk.length);
    logits = runner_.read_chunk(tokens, entry.cache, adapter_slot(entry.slot->request));  // (1, V)
  } catch (const std::exception& e) {
    fail(entry.slot->request, message_of(e));
    release(chunk.id);
    return;
  }
  if (!chunk.last) {
    // A read that ends where a block does offers what it has read: a recurrent layer's state is
    // known there alone (the planner cuts such a model's prompts at their last block).
    const int64_t read = chunk.begin + chunk.length;
    if (read % PrefixCache::kBlockTokens == 0 && !runner_.encoder_decoder()) {
      prefix_cache_.insert(std::vector<int64_t>(prompt.begin(), prompt.begin() + read), entry.cache, 0,
                           adapter_salt(entry.slot->request));
    }
    return;
  }
  Chunked ready = std::move(entry);
  chunked_.erase(chunk.id);
  place(std::move(ready.slot), ready.cache, 0, static_cast<int64_t>(prompt.size()), 0, logits);
}

void BatchScheduler::decode_step() {
  const auto n = planner_.rows().size();
  std::vector<int64_t> next(n);
  for (size_t i = 0; i < n; ++i) next[i] = row(i).next;
  auto logits = runner_.step(next);  // (n, V)
  for (size_t i = 0; i < n; ++i) {
    const auto r = static_cast<int64_t>(i);
    if (runner_.rereads(r)) logits[r].copy_(runner_.reread(r, row(i).context)[0]);
  }
  ++steps_;
  std::vector<DecodingRow> rows;
  for (size_t i = 0; i < n; ++i) rows.push_back(row(i).decoding());
  auto chosen = choose_row_tokens(logits, rows);
  // A row that cannot go on (its logits not finite: corrupt weights, an overflow in bf16; or its
  // sampling or stop texts throwing) ends with an error, and the others go on.
  std::vector<bool> ended(n);
  for (size_t i = 0; i < n; ++i) {
    auto& [token, error, logprob] = chosen[i];
    if (logprob) row(i).logprobs.push_back(std::move(*logprob));
    if (error.empty()) {
      try {
        ended[i] = deliver(row(i), token);
      } catch (const std::exception& e) {
        error = message_of(e);
      }
    }
    if (!error.empty()) {
      fail(row(i).request, error, row(i).generated);
      ended[i] = true;
    }
  }
  // Finished rows leave from the bottom up, so that each move fills a row already handled.
  for (size_t i = n; i-- > 0;) {
    if (ended[i]) release(planner_.rows()[i]);
  }
}

bool BatchScheduler::deliver(Slot& s, int64_t token) {
  const auto now = Clock::now();
  if (metrics_ != nullptr && s.generated > 0) {
    metrics_->time_per_output_token(std::chrono::duration<double>(now - s.last_token).count());
  }
  s.last_token = now;
  ++s.generated;
  s.context.push_back(token);
  s.next = token;
  if (s.constraint && !s.constraint->accept(token)) {
    throw std::runtime_error("token " + std::to_string(token) + " is not allowed by the response format's grammar");
  }
  const auto& o = s.request.options;
  if (std::find(o.eos_ids.begin(), o.eos_ids.end(), token) != o.eos_ids.end()) {
    finish(s, s.stops.flush(), FinishReason::kEos);
    return true;
  }
  std::string text = s.stops.add(s.decoder.add(token));
  if (s.stops.stopped()) {
    finish(s, std::move(text), FinishReason::kStop);
    return true;
  }
  if (s.constraint && s.constraint->terminated()) {  // complete, with no stop token to wait for
    finish(s, text + s.stops.flush(), FinishReason::kStop);
    return true;
  }
  // max_tokens is reached, or the next token would need a position past the context.
  if (planner_.ends_by_length(static_cast<int64_t>(s.request.prompt.size()), o.max_new_tokens, s.generated)) {
    finish(s, text + s.stops.flush(), FinishReason::kLength);
    return true;
  }
  if (!text.empty() || !s.logprobs.empty()) {
    s.request.channel->push({s.request.index, std::move(text), std::nullopt, "", 0, 0, std::move(s.logprobs)});
    s.logprobs.clear();
  }
  return false;
}

void BatchScheduler::finish(Slot& s, std::string text, FinishReason reason) {
  const int64_t prompt = static_cast<int64_t>(s.request.prompt.size());
  if (metrics_ != nullptr) {
    metrics_->tokens(prompt, s.generated);
    metrics_->request_latency(std::chrono::duration<double>(Clock::now() - s.request.arrival).count());
  }
  s.request.channel->push({s.request.index, std::move(text), reason, "", prompt, s.generated, std::move(s.logprobs)});
  s.logprobs.clear();
}

void BatchScheduler::cancel_row(size_t index) {
  finish(row(index), "", FinishReason::kCancelled);
  release(planner_.rows()[index]);
}

void BatchScheduler::release(SequenceId id) {
  std::optional<int64_t> row;
  {
    std::lock_guard lock(mutex_);
    row = planner_.finished(id);
  }
  if (row) runner_.remove_row(*row);  // the last row moves into it, as in the planner
  slots_.erase(id);
  chunked_.erase(id);
}

void BatchScheduler::fail(const SequenceRequest& request, const std::string& message, int64_t generated) {
  if (metrics_ != nullptr) metrics_->sequence_failed();
  request.channel->push(
      {request.index, "", FinishReason::kError, message, static_cast<int64_t>(request.prompt.size()), generated, {}});
}

void BatchScheduler::fail_running(const std::string& message) {
  // The batch's forward failed (an allocation): no row can be trusted, the cache starts afresh.
  while (!planner_.rows().empty()) {
    auto& s = row(planner_.rows().size() - 1);
    fail(s.request, message, s.generated);
    release(s.id);
  }
  runner_.reset();
}

}  // namespace zoo
