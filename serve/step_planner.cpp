#include "serve/step_planner.h"

#include <algorithm>
#include <stdexcept>

namespace zoo {

StepPlanner::StepPlanner(PlannerOptions options) : options_(options) {}

int64_t StepPlanner::admitted() const {
  return static_cast<int64_t>(rows_.size() + chunked_.size()) + reading_;
}

bool StepPlanner::accepts(int64_t n) const {
  const int64_t outstanding = admitted() + static_cast<int64_t>(waiting_.size()) + n;
  return outstanding <= options_.max_batch + options_.max_queue;
}

void StepPlanner::enqueue(SequenceId id, int64_t prompt_tokens, int64_t max_new_tokens) {
  if (!sequences_.emplace(id, Sequence{SequenceState::kWaiting, prompt_tokens, max_new_tokens, 0}).second) {
    throw std::logic_error("step planner: sequence " + std::to_string(id) + " queued twice");
  }
  waiting_.push_back(id);
}

StepPlan StepPlanner::plan() {
  StepPlan plan;
  const bool chunking = options_.prefill_chunk > 0 && !options_.limits.encoder_decoder;
  while (!waiting_.empty() && admitted() < options_.max_batch) {
    const SequenceId id = waiting_.front();
    waiting_.pop_front();
    auto& s = sequences_.at(id);
    const int64_t room = new_token_room(s.prompt_tokens, options_.limits);
    if (s.prompt_tokens < 1 || s.max_new_tokens > room) {
      plan.refused.emplace_back(id, "a prompt of " + std::to_string(s.prompt_tokens) + " tokens with max_new_tokens " +
                                        std::to_string(s.max_new_tokens) + " does not fit the context of " +
                                        std::to_string(options_.limits.context));
      sequences_.erase(id);
      continue;
    }
    s.state = SequenceState::kPrefilling;
    if (s.max_new_tokens == 0) {
      plan.scored.push_back(id);
      ++reading_;
      continue;
    }
    const bool whole = options_.whole_past > 0 && s.prompt_tokens > options_.whole_past;
    const bool decoder = !options_.limits.encoder_decoder;
    s.read = decoder && !whole && options_.cached_tokens ? options_.cached_tokens(id) : 0;
    const bool cut = decoder && !whole && options_.state_block > 0 && s.prompt_tokens > options_.state_block;
    if (s.read > 0 || cut || (chunking && s.prompt_tokens > options_.prefill_chunk && !whole)) {
      chunked_.push_back(id);
    } else {
      plan.prefill.push_back(id);
      ++reading_;
    }
  }
  if (!chunked_.empty()) {
    auto& s = sequences_.at(chunked_.front());
    const int64_t step = options_.prefill_chunk > 0 ? options_.prefill_chunk : s.prompt_tokens;
    int64_t length = std::min(step, s.prompt_tokens - s.read);
    if (options_.state_block > 0) {
      const int64_t last_block = (s.prompt_tokens - 1) / options_.state_block * options_.state_block;
      if (s.read < last_block && s.read + length > last_block) length = last_block - s.read;
    }
    plan.chunk = StepPlan::Chunk{chunked_.front(), s.read, length, s.read + length == s.prompt_tokens};
    s.read += length;
  }
  return plan;
}

void StepPlanner::placed(SequenceId id) {
  auto& s = sequences_.at(id);
  if (s.state != SequenceState::kPrefilling) {
    throw std::logic_error("step planner: sequence " + std::to_string(id) + " placed while not prefilling");
  }
  if (const auto c = std::find(chunked_.begin(), chunked_.end(), id); c != chunked_.end()) {
    chunked_.erase(c);
  } else {
    --reading_;
  }
  s.state = SequenceState::kRunning;
  rows_.push_back(id);
  if (static_cast<int64_t>(rows_.size()) > options_.max_batch) {
    throw std::logic_error("step planner: more running sequences than rows");
  }
}

std::optional<int64_t> StepPlanner::finished(SequenceId id) {
  const auto found = sequences_.find(id);
  if (found == sequences_.end()) return std::nullopt;
  const SequenceState state = found->second.state;
  sequences_.erase(found);
  switch (state) {
    case SequenceState::kWaiting:
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
      return std::nullopt;
    case SequenceState::kPrefilling:
      if (const auto c = std::find(chunked_.begin(), chunked_.end(), id); c != chunked_.end()) {
        chunked_.erase(c);
      } else {
        --reading_;
      }
      return std::nullopt;
    case SequenceState::kRunning: {
      const auto row = static_cast<int64_t>(std::find(rows_.begin(), rows_.end(), id) - rows_.begin());
      const auto last = static_cast<int64_t>(rows_.size()) - 1;
      rows_[row] = rows_[last];
      rows_.pop_back();
      return row;
    }
    case SequenceState::kFinished: return std::nullopt;
  }
  return std::nullopt;
}

SequenceState StepPlanner::state(SequenceId id) const {
  const auto found = sequences_.find(id);
  return found == sequences_.end() ? SequenceState::kFinished : found->second.state;
}

bool StepPlanner::ends_by_length(int64_t prompt_tokens, int64_t max_new_tokens, int64_t generated) const {
  const int64_t positions = (options_.limits.encoder_decoder ? 1 : prompt_tokens) + generated;
  return generated >= max_new_tokens || positions > options_.limits.context;
}

}  // namespace zoo
