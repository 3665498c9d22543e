#include "serve/batch_scheduler.h"

#include <algorithm>
#include <limits>

#include <torch/torch.h>

#include "inference/prompt_rules.h"
#include "inference/text_generation.h"
#include "serve/stop_texts.h"

namespace zoo {

using Clock = std::chrono::steady_clock;

namespace {

// Positions the batch's cache holds before it first grows: every row's longest context, with
// slack so that trimming the front moves the keys rarely; but no more than 4096 up front (a model
// of 128k positions grows its buffers by doubling as its sequences do).
int64_t reserved_positions(const SchedulerOptions& o) {
  if (o.cache_positions > 0) return o.cache_positions;
  return std::min<int64_t>(o.max_context + std::max<int64_t>(64, o.max_context / 4), 4096);
}

// Whether a row of logits (1, V) can be sampled: no NaN, no +infinity (NaN compares false).
bool finite_logits(const torch::Tensor& logits) {
  return (logits < std::numeric_limits<float>::infinity()).all().item<bool>();
}

std::string non_finite_logits(int64_t token) {
  return "the model's logits for token " + std::to_string(token) +
         " of this sequence hold NaN or infinity (corrupt weights, or activations overflowing their type)";
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

// A running sequence: its request, where it is in the cache, and its own sampling state.
struct BatchScheduler::Slot {
  // A decoder-only model continues the prompt; an encoder-decoder's decoder starts afresh from
  // its start token, the prompt being the encoder's source.
  Slot(SequenceId i, SequenceRequest r, const Tokenizer& tokenizer, std::optional<int64_t> decoder_start)
      : id(i),
        request(std::move(r)),
        decoder(tokenizer, decoder_start ? std::vector<int64_t>{} : request.prompt),
        stops(request.stop_texts),
        generator(make_generator(request.options.seed)),
        context(decoder_start ? std::vector<int64_t>{*decoder_start} : request.prompt) {}

  SequenceId id;
  SequenceRequest request;
  StreamDecoder decoder;
  StopTexts stops;
  at::Generator generator;
  std::vector<int64_t> context;  // prompt and tokens so far (the repetition penalty reads it)
  int64_t length = 0;            // positions this sequence holds in the cache (its decoder's)
  int64_t memory_length = 0;     // encoder-decoders: the source's tokens
  int64_t next = 0;              // the token the next step feeds
  int64_t generated = 0;
  Clock::time_point last_token;
};

// A prompt read in chunks: its slot and its own cache (the planner counts the tokens read).
struct BatchScheduler::Chunked {
  std::unique_ptr<Slot> slot;
  KVCache cache;
};

BatchScheduler::BatchScheduler(Model model, const Tokenizer& tokenizer, SchedulerOptions options, ServerMetrics* metrics)
    : model_(std::move(model)),
      tokenizer_(tokenizer),
      options_(options),
      metrics_(metrics),
      cache_(0),
      planner_(PlannerOptions{}) {
  switch (model_.config.family) {
    case Family::kGpt: cache_ = model_.gpt->make_cache(); break;
    case Family::kT5:
    case Family::kTransformer: cache_ = model_.seq2seq->make_cache(); break;
    case Family::kBert: throw std::invalid_argument("zoo serve: a bert model makes embeddings, not text");
  }
  const int64_t limit = model_.config.max_length();
  if (options_.max_context <= 0) options_.max_context = limit;
  auto refuse = [](const std::string& what) { throw std::invalid_argument("zoo serve: " + what); };
  if (options_.max_batch < 1) refuse("--max-batch must be at least 1, got " + std::to_string(options_.max_batch));
  if (options_.max_context > limit) {
    refuse("--max-context " + std::to_string(options_.max_context) + " is more than the model's max_positions (" +
           std::to_string(limit) + ")");
  }
  if (options_.max_context < 2) refuse("--max-context must be at least 2, got " + std::to_string(options_.max_context));
  if (options_.max_queue < 0) refuse("--max-queue must be >= 0, got " + std::to_string(options_.max_queue));
  if (options_.prefill_chunk < 0) {
    refuse("--prefill-chunk must be >= 0 (0: prompts whole), got " + std::to_string(options_.prefill_chunk));
  }
  if (options_.cache_positions < 0) {
    refuse("--kv-cache-positions must be >= 0 (0: the default), got " + std::to_string(options_.cache_positions));
  }
  cache_.reserve(reserved_positions(options_));
  planner_ = StepPlanner(PlannerOptions{options_.max_batch, options_.max_queue, options_.prefill_chunk,
                                        {!model_.gpt, limit, options_.max_context}});
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
    std::vector<std::unique_ptr<Slot>> whole;
    bool cancel = false;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || cancel_all_ || !planner_.waiting().empty() || planner_.admitted() > 0; });
      cancel = cancel_all_;
      cancel_all_ = false;
      const std::vector<SequenceId> waiting(planner_.waiting().begin(), planner_.waiting().end());
      for (const SequenceId id : waiting) {
        const auto& r = waiting_.at(id);
        if (cancel) {
          r.channel->push({r.index, "", FinishReason::kCancelled, "", static_cast<int64_t>(r.prompt.size()), 0});
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
      for (const SequenceId id : plan.prefill) whole.push_back(std::make_unique<Slot>(id, take(id), tokenizer_, decoder_start()));
      for (const SequenceId id : planner_.chunked()) {
        if (!chunked_.count(id)) {
          chunked_.emplace(id, Chunked{std::make_unique<Slot>(id, take(id), tokenizer_, decoder_start()),
                                       model_.gpt->make_cache()});
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
    if (metrics_ != nullptr) metrics_->batch(waiting, static_cast<int64_t>(planner_.rows().size()), options_.max_batch);
  }
}

void BatchScheduler::prefill(std::vector<std::unique_ptr<Slot>> slots) {
  KVCache prompts(0);
  torch::Tensor logits;
  try {
    logits = prefill_forward(slots, prompts);
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
    place(std::move(slots[i]), prompts, row, logits.narrow(0, row, 1));
  }
}

torch::Tensor BatchScheduler::prefill_forward(std::vector<std::unique_ptr<Slot>>& slots, KVCache& cache) {
  const int64_t n = static_cast<int64_t>(slots.size());
  int64_t longest = 0;
  bool equal = true;
  for (const auto& s : slots) {
    const auto p = static_cast<int64_t>(s->request.prompt.size());
    equal = equal && p == static_cast<int64_t>(slots[0]->request.prompt.size());
    longest = std::max(longest, p);
  }
  const auto& c = model_.config;
  const auto device = model_.module()->parameters().front().device();
  auto ids = torch::full({n, longest}, c.pad_id, torch::kLong);
  auto mask = torch::zeros({n, longest}, torch::kLong);
  for (int64_t i = 0; i < n; ++i) {
    auto& slot = *slots[i];
    const auto& prompt = slot.request.prompt;
    const int64_t p = static_cast<int64_t>(prompt.size());
    // A decoder's prompts are left-padded (each ends where its next token goes), an encoder's
    // sources right-padded.
    const int64_t at = model_.gpt ? longest - p : 0;
    ids[i].narrow(0, at, p).copy_(torch::tensor(prompt, torch::kLong));
    mask[i].narrow(0, at, p).fill_(1);
    slot.length = model_.gpt ? p : 1;  // an encoder-decoder's row holds its decoder's start token
    slot.memory_length = model_.gpt ? 0 : p;
  }
  ids = ids.to(device), mask = mask.to(device);
  if (model_.gpt) {
    // The weights read once for every prompt; prompts of one length need no mask (the causal
    // kernel alone); the head at each prompt's last position only.
    cache = model_.gpt->make_cache();
    return model_.gpt->next_token_logits(ids, equal ? torch::Tensor() : mask, &cache).to(torch::kFloat);
  }
  // The sources encoded together, then the decoder's first step from its start token: each
  // row's decoder keys (one position) and its memory's projections go to the batch's cache.
  const auto memory = model_.seq2seq->encode(ids, mask);
  cache = model_.seq2seq->make_cache();
  const auto start = torch::full({n, 1}, c.decoder_start_id, torch::kLong).to(device);
  return model_.seq2seq->decode(start, memory, mask, &cache).select(1, -1).to(torch::kFloat);  // (n, V)
}

void BatchScheduler::place(std::unique_ptr<Slot> slot, KVCache& prompts, int64_t index, const torch::Tensor& logits) {
  const SequenceId id = slot->id;
  try {
    if (!finite_logits(logits)) {
      fail(slot->request, non_finite_logits(1));
      release(id);
      return;
    }
    if (first_token(*slot, logits)) {
      release(id);
      return;
    }
    // The row holds the prompt's positions (an encoder-decoder's: its start token), the last of
    // the shared axis, and an encoder-decoder's memory.
    if (cache_.seen() < slot->length) cache_.grow_front(slot->length - cache_.seen());
    cache_.place_row(static_cast<int64_t>(planner_.rows().size()), options_.max_batch, prompts, index, slot->length,
                     model_.gpt ? -1 : slot->memory_length);
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
  const auto device = model_.gpt->token_embedding->weight.device();
  torch::Tensor logits;
  try {
    const auto ids = torch::tensor(std::vector<int64_t>(prompt.begin() + chunk.begin,
                                                        prompt.begin() + chunk.begin + chunk.length),
                                   torch::kLong)
                         .unsqueeze(0)
                         .to(device);
    // The chunk's positions continue from its cache; its head only at the last position.
    logits = model_.gpt->next_token_logits(ids, {}, &entry.cache).to(torch::kFloat);  // (1, V)
  } catch (const std::exception& e) {
    fail(entry.slot->request, message_of(e));
    release(chunk.id);
    return;
  }
  if (!chunk.last) return;
  Chunked ready = std::move(entry);
  chunked_.erase(chunk.id);
  ready.slot->length = static_cast<int64_t>(prompt.size());
  place(std::move(ready.slot), ready.cache, 0, logits);
}

bool BatchScheduler::first_token(Slot& slot, const torch::Tensor& logits) {
  const auto device = logits.device();
  auto processed = process_logits(logits, torch::tensor(slot.context, torch::kLong).unsqueeze(0).to(device), {},
                                  slot.request.options);
  const int64_t token = choose_tokens(processed, slot.request.options, slot.generator).item<int64_t>();
  if (metrics_ != nullptr) {
    metrics_->time_to_first_token(std::chrono::duration<double>(Clock::now() - slot.request.arrival).count());
  }
  return deliver(slot, token);
}

std::optional<int64_t> BatchScheduler::decoder_start() const {
  return model_.gpt ? std::nullopt : std::optional<int64_t>(model_.config.decoder_start_id);
}

void BatchScheduler::decode_step() {
  const int64_t n = static_cast<int64_t>(planner_.rows().size());
  int64_t longest = 0;
  for (int64_t i = 0; i < n; ++i) longest = std::max(longest, row(i).length);
  // Positions no running sequence holds are dropped, so each step attends over the longest one.
  if (cache_.seen() > longest) cache_.drop_front(cache_.seen() - longest);
  const int64_t width = cache_.seen() + 1;
  const auto device = model_.module()->parameters().front().device();
  std::vector<int64_t> next(n), first(n);
  for (int64_t i = 0; i < n; ++i) {
    next[i] = row(i).next;
    first[i] = width - row(i).length - 1;  // the row's first position; the left padding before it
  }
  // (n, width): 1 from each row's first position to the new token.
  auto mask = torch::arange(width, torch::kLong).unsqueeze(0).ge(torch::tensor(first, torch::kLong).unsqueeze(1));
  cache_.use_rows(n);
  auto input = torch::tensor(next, torch::kLong).view({n, 1}).to(device);
  torch::Tensor logits;
  if (model_.gpt) {
    logits = model_.gpt->next_token_logits(input, mask.to(torch::kLong).to(device), &cache_);
  } else {
    // The memories' projections are in the cache, right-padded to the longest placed so far.
    const int64_t memory_width = cache_.cross_attention(0).length();
    std::vector<int64_t> lengths(n);
    for (int64_t i = 0; i < n; ++i) lengths[i] = row(i).memory_length;
    auto memory_mask =
        torch::arange(memory_width, torch::kLong).unsqueeze(0).lt(torch::tensor(lengths, torch::kLong).unsqueeze(1));
    logits = model_.seq2seq->decode(input, {}, memory_mask.to(torch::kLong).to(device), &cache_,
                                    mask.to(torch::kLong).to(device)).select(1, -1);
  }
  logits = logits.to(torch::kFloat);  // (n, V)
  ++steps_;
  for (int64_t i = 0; i < n; ++i) ++row(i).length;

  // A row that cannot go on (its logits not finite: corrupt weights, an overflow in bf16; or its
  // sampling or stop texts throwing) ends with an error, and the others go on.
  std::vector<std::string> failure(n);
  const auto finite = (logits < std::numeric_limits<float>::infinity()).all(-1).cpu();  // (n); NaN is false
  for (int64_t i = 0; i < n; ++i) {
    if (!finite[i].item<bool>()) failure[i] = non_finite_logits(row(i).generated + 1);
  }
  bool plain_greedy = true;
  for (int64_t i = 0; i < n; ++i) {
    const auto& o = row(i).request.options;
    plain_greedy = plain_greedy && !o.sample && o.repetition_penalty == 1.0;
  }
  std::vector<int64_t> tokens(n);
  const auto chosen = plain_greedy ? logits.argmax(-1).cpu() : torch::Tensor();
  for (int64_t i = 0; i < n; ++i) {
    if (!failure[i].empty()) continue;
    try {
      if (plain_greedy) {
        tokens[i] = chosen[i].item<int64_t>();
        continue;
      }
      auto& s = row(i);
      const auto& o = s.request.options;
      torch::Tensor context;
      if (o.repetition_penalty != 1.0) context = torch::tensor(s.context, torch::kLong).unsqueeze(0).to(device);
      auto processed = process_logits(logits.narrow(0, i, 1), context, {}, o);
      tokens[i] = choose_tokens(processed, o, s.generator).item<int64_t>();
    } catch (const std::exception& e) {
      failure[i] = message_of(e);
    }
  }
  // Finished rows leave from the bottom up, so that each move fills a row already handled.
  std::vector<bool> ended(n);
  for (int64_t i = 0; i < n; ++i) {
    if (failure[i].empty()) {
      try {
        ended[i] = deliver(row(i), tokens[i]);
      } catch (const std::exception& e) {
        failure[i] = message_of(e);
      }
    }
    if (!failure[i].empty()) {
      fail(row(i).request, failure[i], row(i).generated);
      ended[i] = true;
    }
  }
  for (int64_t i = n; i-- > 0;) {
    if (ended[i]) remove_row(static_cast<size_t>(i));
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
  // The next token would need a position past the context, or max_tokens is reached.
  if (planner_.ends_by_length(s.generated, o.max_new_tokens, s.length)) {
    finish(s, text + s.stops.flush(), FinishReason::kLength);
    return true;
  }
  if (!text.empty()) s.request.channel->push({s.request.index, std::move(text), std::nullopt, "", 0, 0});
  return false;
}

void BatchScheduler::finish(Slot& s, std::string text, FinishReason reason) {
  const int64_t prompt = static_cast<int64_t>(s.request.prompt.size());
  if (metrics_ != nullptr) {
    metrics_->tokens(prompt, s.generated);
    metrics_->request_latency(std::chrono::duration<double>(Clock::now() - s.request.arrival).count());
  }
  s.request.channel->push({s.request.index, std::move(text), reason, "", prompt, s.generated});
}

void BatchScheduler::cancel_row(size_t index) {
  finish(row(index), "", FinishReason::kCancelled);
  remove_row(index);
}

void BatchScheduler::release(SequenceId id) {
  std::optional<std::pair<int64_t, int64_t>> move;
  {
    std::lock_guard lock(mutex_);
    move = planner_.finished(id);
  }
  if (move) cache_.copy_row(move->first, move->second);
  slots_.erase(id);
  chunked_.erase(id);
}

void BatchScheduler::remove_row(size_t index) {
  release(planner_.rows()[index]);
  if (planner_.rows().empty()) cache_.drop_front(cache_.seen());  // nothing left to attend to
}

void BatchScheduler::fail(const SequenceRequest& request, const std::string& message, int64_t generated) {
  if (metrics_ != nullptr) metrics_->sequence_failed();
  request.channel->push(
      {request.index, "", FinishReason::kError, message, static_cast<int64_t>(request.prompt.size()), generated});
}

void BatchScheduler::fail_running(const std::string& message) {
  // The batch's forward failed (an allocation): no row can be trusted, the cache starts afresh.
  while (!planner_.rows().empty()) {
    auto& s = row(planner_.rows().size() - 1);
    fail(s.request, message, s.generated);
    release(s.id);
  }
  cache_.clear();
  cache_.reserve(reserved_positions(options_));
}

}  // namespace zoo
