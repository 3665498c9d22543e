#include "serve/batch_scheduler.h"

#include <algorithm>

#include <torch/torch.h>

#include "inference/text_generation.h"
#include "serve/stop_texts.h"

namespace zoo {

using Clock = std::chrono::steady_clock;

namespace {

// Positions the batch's cache holds before it first grows: every row's longest context, with
// slack so that trimming the front moves the keys rarely; but no more than 4096 up front (a model
// of 128k positions grows its buffers by doubling as its sequences do).
int64_t reserved_positions(int64_t max_context) {
  return std::min<int64_t>(max_context + std::max<int64_t>(64, max_context / 4), 4096);
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
  Slot(SequenceRequest r, const Tokenizer& tokenizer)
      : request(std::move(r)),
        decoder(tokenizer, request.prompt),
        stops(request.stop_texts),
        generator(make_generator(request.options.seed)),
        context(request.prompt) {}

  SequenceRequest request;
  StreamDecoder decoder;
  StopTexts stops;
  at::Generator generator;
  std::vector<int64_t> context;  // prompt and tokens so far (the repetition penalty reads it)
  int64_t length = 0;            // positions this sequence holds in the cache
  int64_t next = 0;              // the token the next step feeds
  int64_t generated = 0;
  Clock::time_point last_token;
};

BatchScheduler::BatchScheduler(GPT model, const Tokenizer& tokenizer, SchedulerOptions options, ServerMetrics* metrics)
    : model_(std::move(model)),
      tokenizer_(tokenizer),
      options_(options),
      metrics_(metrics),
      cache_(model_->config.n_layers) {
  const int64_t limit = model_->config.max_length();
  if (options_.max_context <= 0) options_.max_context = limit;
  auto refuse = [](const std::string& what) { throw std::invalid_argument("zoo serve: " + what); };
  if (options_.max_batch < 1) refuse("--max-batch must be at least 1, got " + std::to_string(options_.max_batch));
  if (options_.max_context > limit) {
    refuse("--max-context " + std::to_string(options_.max_context) + " is more than the model's max_positions (" +
           std::to_string(limit) + ")");
  }
  if (options_.max_context < 2) refuse("--max-context must be at least 2, got " + std::to_string(options_.max_context));
  if (options_.max_queue < 0) refuse("--max-queue must be >= 0, got " + std::to_string(options_.max_queue));
  cache_.reserve(reserved_positions(options_.max_context));
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
    // Sequences running and waiting: at most the rows and the queue's bound.
    const auto outstanding = running_ + static_cast<int64_t>(queue_.size() + sequences.size());
    if (stop_ || outstanding > options_.max_batch + options_.max_queue) return false;
    for (auto& s : sequences) queue_.push_back(std::move(s));
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
  return static_cast<int64_t>(queue_.size());
}

int64_t BatchScheduler::running() const { return running_; }

void BatchScheduler::loop() {
  // The model's thread: no autograd state, ever.
  c10::InferenceMode inference;
  while (true) {
    std::vector<SequenceRequest> admitted;
    bool cancel = false;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || cancel_all_ || !queue_.empty() || !rows_.empty(); });
      cancel = cancel_all_;
      cancel_all_ = false;
      if (cancel) {
        for (auto& r : queue_) r.channel->push({r.index, "", "cancelled", static_cast<int64_t>(r.prompt.size()), 0});
        queue_.clear();
      }
      // Admission at a token boundary: as many as there are free rows.
      while (!cancel && !queue_.empty() && static_cast<int64_t>(rows_.size() + admitted.size()) < options_.max_batch) {
        admitted.push_back(std::move(queue_.front()));
        queue_.pop_front();
        ++running_;  // counted as running from here, so that submit() never sees it nowhere
      }
      if (stop_ && queue_.empty() && rows_.empty() && admitted.empty()) break;
    }
    if (cancel) {
      while (!rows_.empty()) finish(*rows_.back(), "", "cancelled");
    }
    admit(std::move(admitted));
    // A client that went away frees its row now.
    for (size_t i = rows_.size(); i-- > 0;) {
      if (rows_[i]->request.channel->cancelled()) finish(*rows_[i], "", "cancelled");
    }
    if (!rows_.empty()) {
      try {
        decode_step();
      } catch (const std::exception& e) {
        fail_running(message_of(e));
      }
    }
    running_ = static_cast<int64_t>(rows_.size());
    if (metrics_ != nullptr) metrics_->batch(queued(), running_, options_.max_batch);
  }
}

void BatchScheduler::admit(std::vector<SequenceRequest> requests) {
  // What cannot run is answered at once; the rest are prefilled together.
  std::vector<std::unique_ptr<Slot>> slots;
  for (auto& r : requests) {
    if (r.channel->cancelled()) continue;
    const int64_t p = static_cast<int64_t>(r.prompt.size());
    if (p < 1 || p > options_.max_context || p + r.options.max_new_tokens > options_.max_context + 1) {
      r.channel->push({r.index, "", "error: a prompt of " + std::to_string(p) + " tokens with max_new_tokens " +
                                       std::to_string(r.options.max_new_tokens) + " does not fit the context of " +
                                       std::to_string(options_.max_context), 0, 0});
      continue;
    }
    slots.push_back(std::make_unique<Slot>(std::move(r), tokenizer_));
  }
  if (slots.empty()) return;
  try {
    prefill(slots);
  } catch (const std::exception& e) {
    for (auto& s : slots) {
      if (s) s->request.channel->push({s->request.index, "", "error: " + message_of(e), 0, 0});  // not yet running
    }
  }
}

void BatchScheduler::prefill(std::vector<std::unique_ptr<Slot>>& slots) {
  // The prompts left-padded into one batch, one forward (the weights read once for all of them),
  // into a cache of their own; then each row moves into a free row of the batch's cache.
  const int64_t n = static_cast<int64_t>(slots.size());
  int64_t longest = 0;
  bool equal = true;
  for (const auto& s : slots) {
    equal = equal && static_cast<int64_t>(s->request.prompt.size()) == static_cast<int64_t>(slots[0]->request.prompt.size());
    longest = std::max(longest, static_cast<int64_t>(s->request.prompt.size()));
  }
  const auto device = model_->token_embedding->weight.device();
  auto ids = torch::full({n, longest}, model_->config.pad_id, torch::kLong);
  auto mask = torch::zeros({n, longest}, torch::kLong);
  for (int64_t i = 0; i < n; ++i) {
    const auto& prompt = slots[i]->request.prompt;
    const int64_t p = static_cast<int64_t>(prompt.size());
    ids[i].narrow(0, longest - p, p).copy_(torch::tensor(prompt, torch::kLong));
    mask[i].narrow(0, longest - p, p).fill_(1);
  }
  KVCache prompts = model_->make_cache();
  // Prompts of one length need no mask (the causal kernel alone).
  auto logits = model_->forward(ids.to(device), equal ? torch::Tensor() : mask.to(device), &prompts)
                    .select(1, -1)
                    .to(torch::kFloat);  // (n, V)
  check_logits(logits, 0);
  if (cache_.seen() < longest) cache_.grow_front(longest - cache_.seen());
  for (int64_t i = 0; i < n; ++i) {
    auto slot = std::move(slots[i]);
    const int64_t p = static_cast<int64_t>(slot->request.prompt.size());
    auto processed = process_logits(logits.narrow(0, i, 1),
                                    torch::tensor(slot->context, torch::kLong).unsqueeze(0).to(device), {},
                                    slot->request.options);
    const int64_t token = choose_tokens(processed, slot->request.options, slot->generator).item<int64_t>();
    slot->length = p;
    if (metrics_ != nullptr) {
      metrics_->time_to_first_token(std::chrono::duration<double>(Clock::now() - slot->request.arrival).count());
    }
    if (deliver(*slot, token)) continue;
    // The row holds the prompt's p positions, the last of the shared axis.
    cache_.place_row(static_cast<int64_t>(rows_.size()), options_.max_batch, prompts, i, p);
    rows_.push_back(std::move(slot));
  }
}

void BatchScheduler::decode_step() {
  const int64_t n = static_cast<int64_t>(rows_.size());
  int64_t longest = 0;
  for (const auto& s : rows_) longest = std::max(longest, s->length);
  // Positions no running sequence holds are dropped, so each step attends over the longest one.
  if (cache_.seen() > longest) cache_.drop_front(cache_.seen() - longest);
  const int64_t width = cache_.seen() + 1;
  const auto device = model_->token_embedding->weight.device();
  std::vector<int64_t> next(n), first(n);
  for (int64_t i = 0; i < n; ++i) {
    next[i] = rows_[i]->next;
    first[i] = width - rows_[i]->length - 1;  // the row's first position; the left padding before it
  }
  // (n, width): 1 from each row's first position to the new token.
  auto mask = torch::arange(width, torch::kLong).unsqueeze(0).ge(torch::tensor(first, torch::kLong).unsqueeze(1));
  cache_.use_rows(n);
  auto input = torch::tensor(next, torch::kLong).view({n, 1}).to(device);
  auto logits = model_->forward(input, mask.to(torch::kLong).to(device), &cache_).select(1, -1).to(torch::kFloat);  // (n, V)
  ++steps_;
  check_logits(logits, steps_);
  for (auto& s : rows_) ++s->length;

  bool plain_greedy = true;
  for (const auto& s : rows_) {
    plain_greedy = plain_greedy && !s->request.options.sample && s->request.options.repetition_penalty == 1.0;
  }
  std::vector<int64_t> tokens(n);
  if (plain_greedy) {
    auto chosen = logits.argmax(-1).cpu();
    for (int64_t i = 0; i < n; ++i) tokens[i] = chosen[i].item<int64_t>();
  } else {
    for (int64_t i = 0; i < n; ++i) {
      auto& s = *rows_[i];
      const auto& o = s.request.options;
      torch::Tensor context;
      if (o.repetition_penalty != 1.0) context = torch::tensor(s.context, torch::kLong).unsqueeze(0).to(device);
      auto processed = process_logits(logits.narrow(0, i, 1), context, {}, o);
      tokens[i] = choose_tokens(processed, o, s.generator).item<int64_t>();
    }
  }
  // Finished rows leave from the bottom up, so that each move fills a row already handled.
  std::vector<bool> ended(n);
  for (int64_t i = 0; i < n; ++i) ended[i] = deliver(*rows_[i], tokens[i]);
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
    finish(s, s.stops.flush(), "stop");
    return true;
  }
  std::string text = s.stops.add(s.decoder.add(token));
  if (s.stops.stopped()) {
    finish(s, std::move(text), "stop");
    return true;
  }
  // The next token would need a position past the context, or max_tokens is reached.
  if (s.generated >= o.max_new_tokens || s.length + 1 > options_.max_context) {
    finish(s, text + s.stops.flush(), "length");
    return true;
  }
  if (!text.empty()) s.request.channel->push({s.request.index, std::move(text), "", 0, 0});
  return false;
}

void BatchScheduler::finish(Slot& s, std::string text, const std::string& reason) {
  const int64_t prompt = static_cast<int64_t>(s.request.prompt.size());
  if (metrics_ != nullptr) {
    metrics_->tokens(prompt, s.generated);
    metrics_->request_latency(std::chrono::duration<double>(Clock::now() - s.request.arrival).count());
  }
  s.request.channel->push({s.request.index, std::move(text), reason, prompt, s.generated});
  if (reason == "cancelled") {
    // Called on a running row: it leaves the batch here.
    for (size_t i = 0; i < rows_.size(); ++i) {
      if (rows_[i].get() == &s) {
        remove_row(i);
        break;
      }
    }
  }
}

void BatchScheduler::remove_row(size_t row) {
  const size_t last = rows_.size() - 1;
  if (row != last) {
    cache_.copy_row(static_cast<int64_t>(last), static_cast<int64_t>(row));
    rows_[row] = std::move(rows_[last]);
  }
  rows_.pop_back();
  if (rows_.empty()) cache_.drop_front(cache_.seen());  // nothing left to attend to
}

void BatchScheduler::fail_running(const std::string& message) {
  for (auto& s : rows_) s->request.channel->push({s->request.index, "", "error: " + message, 0, s->generated});
  rows_.clear();
  cache_.clear();
  cache_.reserve(reserved_positions(options_.max_context));
}

}  // namespace zoo
