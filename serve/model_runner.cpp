#include "serve/model_runner.h"

#include <algorithm>
#include <stdexcept>

#include <torch/torch.h>

namespace zoo {

namespace {

KVCache make_cache(const Model& model) {
  switch (model.config.family) {
    case Family::kGpt: return model.gpt->make_cache();
    case Family::kT5:
    case Family::kTransformer: return model.seq2seq->make_cache();
    case Family::kBert: break;
  }
  throw std::invalid_argument("zoo serve: a bert model makes embeddings, not text");
}

}  // namespace

ModelRunner::ModelRunner(Model model, int64_t max_batch, int64_t reserved_positions)
    : model_(std::move(model)),
      max_batch_(max_batch),
      reserved_positions_(reserved_positions),
      cache_(make_cache(model_)),
      adapter_rows_(std::make_shared<AdapterRows>()) {
  cache_.reserve(reserved_positions_);
  read_adapter_rows(model_, adapter_rows_);
}

void ModelRunner::use_adapters(const std::vector<int64_t>& slots) { *adapter_rows_ = AdapterRows(slots); }

std::optional<int64_t> ModelRunner::decoder_start() const {
  return model_.gpt ? std::nullopt : std::optional<int64_t>(model_.config.decoder_start_id);
}

torch::Device ModelRunner::device() const { return model_.module()->parameters().front().device(); }

PrefilledPrompts ModelRunner::prefill(const std::vector<const std::vector<int64_t>*>& prompts,
                                      const std::vector<int64_t>& adapters) {
  const auto n = static_cast<int64_t>(prompts.size());
  use_adapters(adapters.empty() ? std::vector<int64_t>(prompts.size(), -1) : adapters);
  int64_t longest = 0;
  bool equal = true;
  for (const auto* p : prompts) {
    equal = equal && p->size() == prompts.front()->size();
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p->size()));
  }
  const bool decoder = !encoder_decoder();
  auto ids = torch::full({n, longest}, model_.config.pad_id, torch::kLong);
  auto mask = torch::zeros({n, longest}, torch::kLong);
  PrefilledPrompts out;
  for (int64_t i = 0; i < n; ++i) {
    const auto& prompt = *prompts[i];
    const auto p = static_cast<int64_t>(prompt.size());
    // A decoder's prompts are left-padded (each ends where its next token goes), an encoder's
    // sources right-padded.
    const int64_t at = decoder ? longest - p : 0;
    ids[i].narrow(0, at, p).copy_(torch::tensor(prompt, torch::kLong));
    mask[i].narrow(0, at, p).fill_(1);
    out.positions.push_back(decoder ? p : 1);  // an encoder-decoder's row holds its start token
    out.memory_lengths.push_back(decoder ? 0 : p);
  }
  ids = ids.to(device()), mask = mask.to(device());
  out.cache = make_cache(model_);
  if (decoder) {
    // Prompts of one length need no mask (the causal kernel alone); the head at each prompt's
    // last position only.
    out.logits = model_.gpt->next_token_logits(ids, equal ? torch::Tensor() : mask, &out.cache).to(torch::kFloat);
    return out;
  }
  // The sources encoded together, then the decoder's first step from its start token: each
  // row's decoder keys (one position) and its memory's projections.
  const auto memory = model_.seq2seq->encode(ids, mask);
  const auto start = torch::full({n, 1}, model_.config.decoder_start_id, torch::kLong).to(device());
  out.logits = model_.seq2seq->decode(start, memory, mask, &out.cache).select(1, -1).to(torch::kFloat);
  return out;
}

KVCache ModelRunner::chunk_cache() const { return make_cache(model_); }

torch::Tensor ModelRunner::read_chunk(const std::vector<int64_t>& tokens, KVCache& cache, int64_t adapter) {
  if (encoder_decoder()) throw std::logic_error("ModelRunner: an encoder-decoder's source is read whole");
  use_adapters({adapter});
  const auto ids = torch::tensor(tokens, torch::kLong).unsqueeze(0).to(device());
  return model_.gpt->next_token_logits(ids, {}, &cache).to(torch::kFloat);
}

std::vector<TokenLogprob> ModelRunner::prompt_logprobs(const std::vector<int64_t>& prompt, int64_t top,
                                                       int64_t adapter) {
  if (encoder_decoder()) throw std::logic_error("ModelRunner: an encoder-decoder's source has no log-probabilities");
  std::vector<TokenLogprob> out(1);
  if (prompt.empty()) return {};
  out[0].token = prompt[0];
  use_adapters({adapter});
  const auto ids = torch::tensor(prompt, torch::kLong).unsqueeze(0).to(device());
  const auto hidden = model_.gpt->hidden_states(ids)[0];  // (T, d)
  constexpr int64_t kPositions = 256;
  const auto t = static_cast<int64_t>(prompt.size());
  for (int64_t begin = 0; begin + 1 < t; begin += kPositions) {
    const int64_t length = std::min(kPositions, t - 1 - begin);
    const auto logits = model_.gpt->logits(hidden.narrow(0, begin, length));
    const std::vector<int64_t> next(prompt.begin() + begin + 1, prompt.begin() + begin + 1 + length);
    for (auto& entry : token_logprobs(logits, next, top)) out.push_back(std::move(entry));
  }
  return out;
}

void ModelRunner::place(KVCache& cache, int64_t index, int64_t positions, int64_t memory_length, int64_t adapter) {
  if (rows() == max_batch_) throw std::logic_error("ModelRunner: every row of the batch is taken");
  // The row holds its positions at the end of the shared axis, and an encoder-decoder's memory.
  if (cache_.seen() < positions) cache_.grow_front(positions - cache_.seen());
  cache_.place_row(rows(), max_batch_, cache, index, positions, encoder_decoder() ? memory_length : -1);
  positions_.push_back(positions);
  memory_lengths_.push_back(memory_length);
  adapters_.push_back(adapter);
}

torch::Tensor ModelRunner::step(const std::vector<int64_t>& tokens) {
  const int64_t n = rows();
  if (static_cast<int64_t>(tokens.size()) != n) throw std::logic_error("ModelRunner: one token a row");
  // Positions no row holds are dropped, so each step attends over the longest one.
  const int64_t longest = *std::max_element(positions_.begin(), positions_.end());
  if (cache_.seen() > longest) cache_.drop_front(cache_.seen() - longest);
  const int64_t width = cache_.seen() + 1;
  std::vector<int64_t> first(n);
  for (int64_t i = 0; i < n; ++i) first[i] = width - positions_[i] - 1;  // the left padding before the row
  // (n, width): 1 from each row's first position to the new token. Rows that all start at the
  // axis's first position (one alone, or prompts of one length) need none: no mask, no bias.
  const bool padded = std::any_of(first.begin(), first.end(), [](int64_t f) { return f > 0; });
  const auto mask = padded ? torch::arange(width, torch::kLong)
                                 .unsqueeze(0)
                                 .ge(torch::tensor(first, torch::kLong).unsqueeze(1))
                                 .to(torch::kLong)
                                 .to(device())
                           : torch::Tensor();
  cache_.use_rows(n);
  use_adapters(adapters_);
  const auto input = torch::tensor(tokens, torch::kLong).view({n, 1}).to(device());
  torch::Tensor logits;
  if (!encoder_decoder()) {
    logits = model_.gpt->next_token_logits(input, mask, &cache_);
  } else {
    // The memories' projections are in the cache, right-padded to the longest placed so far.
    const int64_t memory_width = cache_.cross_attention(0).length();
    const auto memory_mask = torch::arange(memory_width, torch::kLong)
                                 .unsqueeze(0)
                                 .lt(torch::tensor(memory_lengths_, torch::kLong).unsqueeze(1))
                                 .to(torch::kLong)
                                 .to(device());
    logits = model_.seq2seq->decode(input, {}, memory_mask, &cache_, mask).select(1, -1);
  }
  for (auto& p : positions_) ++p;
  return logits.to(torch::kFloat);
}

bool ModelRunner::rereads(int64_t row) const {
  return !encoder_decoder() && rereads_at(model_.config.rope_scaling, positions_.at(static_cast<size_t>(row)));
}

torch::Tensor ModelRunner::reread(int64_t row, const std::vector<int64_t>& context) {
  auto read = prefill({&context}, {adapters_.at(static_cast<size_t>(row))});
  const auto positions = static_cast<int64_t>(context.size());
  if (cache_.seen() < positions) cache_.grow_front(positions - cache_.seen());
  cache_.place_row(row, max_batch_, read.cache, 0, positions, -1);
  positions_.at(static_cast<size_t>(row)) = positions;
  return read.logits;
}

void ModelRunner::remove_row(int64_t row) {
  const int64_t last = rows() - 1;
  if (row < 0 || row > last) throw std::logic_error("ModelRunner: no row " + std::to_string(row));
  if (row != last) {
    cache_.copy_row(last, row);
    positions_[row] = positions_[last], memory_lengths_[row] = memory_lengths_[last], adapters_[row] = adapters_[last];
  }
  positions_.pop_back(), memory_lengths_.pop_back(), adapters_.pop_back();
  if (positions_.empty()) cache_.drop_front(cache_.seen());  // nothing left to attend to
}

void ModelRunner::reset() {
  positions_.clear(), memory_lengths_.clear(), adapters_.clear();
  cache_.clear();
  cache_.reserve(reserved_positions_);
}

}  // namespace zoo
