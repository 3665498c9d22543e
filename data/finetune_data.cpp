#include "data/finetune_data.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include <torch/torch.h>

#include "data/chat_format.h"

namespace zoo {

ClassificationDataset::ClassificationDataset(const std::vector<ClassificationExample>& examples,
                                             const Tokenizer& tokenizer, const LabelSet& labels,
                                             int64_t max_length, const std::string& source) {
  if (max_length < 4) throw std::runtime_error("max_length (" + std::to_string(max_length) + ") must be >= 4");
  const auto tokens = BatchTokens::of(tokenizer);
  const int64_t cls = BatchTokens::require(tokens.cls, "cls", "classification");
  const int64_t sep = BatchTokens::require(tokens.sep, "sep", "classification");
  pad_ = tokens.pad;
  for (const auto& e : examples) {
    auto a = tokenizer.encode(e.text);
    auto b = e.text_pair.empty() ? std::vector<int64_t>{} : tokenizer.encode(e.text_pair);
    const int64_t room = max_length - (b.empty() ? 2 : 3);
    while (static_cast<int64_t>(a.size() + b.size()) > room) (a.size() >= b.size() ? a : b).pop_back();
    std::vector<int64_t> ids{cls};
    ids.insert(ids.end(), a.begin(), a.end());
    ids.push_back(sep);
    std::vector<int64_t> types(ids.size(), 0);
    if (!e.text_pair.empty()) {
      ids.insert(ids.end(), b.begin(), b.end());
      ids.push_back(sep);
      types.resize(ids.size(), 1);
    }
    ids_.push_back(std::move(ids));
    types_.push_back(std::move(types));
    labels_.push_back(labels.id(e.label, source.empty() ? "" : source + ":" + std::to_string(e.line)));
  }
}

Batch ClassificationDataset::batch(const std::vector<int64_t>& indices) const {
  std::vector<std::vector<int64_t>> ids, types;
  std::vector<int64_t> labels;
  for (int64_t i : indices) {
    ids.push_back(ids_.at(i));
    types.push_back(types_.at(i));
    labels.push_back(labels_.at(i));
  }
  Batch batch;
  batch.input_ids = pad_rows(ids, pad_, &batch.attention_mask);
  batch.token_type_ids = pad_rows(types, 0);
  batch.labels = torch::tensor(labels, torch::kLong);
  return batch;
}

Seq2SeqDataset::Seq2SeqDataset(const std::vector<Seq2SeqExample>& examples, const Tokenizer& tokenizer,
                               int64_t max_source_length, int64_t max_target_length, int64_t decoder_start)
    : tokens_(BatchTokens::of(tokenizer)) {
  tokens_.decoder_start = decoder_start;
  const int64_t eos = BatchTokens::require(tokens_.eos, "end-of-sequence", "seq2seq");
  auto encode = [&](const std::string& text, int64_t limit) {
    auto ids = tokenizer.encode(text);
    if (static_cast<int64_t>(ids.size()) > limit - 1) ids.resize(limit - 1);
    ids.push_back(eos);
    return ids;
  };
  for (const auto& e : examples) {
    sources_.push_back(encode(e.source, max_source_length));
    targets_.push_back(encode(e.target, max_target_length));
  }
}

Batch Seq2SeqDataset::batch(const std::vector<int64_t>& indices) const {
  std::vector<std::vector<int64_t>> sources, targets;
  for (int64_t i : indices) {
    sources.push_back(sources_.at(i));
    targets.push_back(targets_.at(i));
  }
  return seq2seq_batch(sources, targets, tokens_);
}

InstructionDataset::InstructionDataset(const std::vector<InstructionExample>& examples, const Tokenizer& tokenizer,
                                       int64_t max_length, const std::string& source, const std::string& tokenizer_name) {
  const auto tokens = BatchTokens::of(tokenizer);
  pad_ = tokens.pad;
  std::optional<ChatFormat> chat;  // parsed at the first conversation
  for (const auto& e : examples) {
    std::vector<int64_t> ids;
    std::vector<uint8_t> targets;
    auto append = [&](const std::vector<int64_t>& piece, bool target) {
      ids.insert(ids.end(), piece.begin(), piece.end());
      targets.resize(ids.size(), target ? 1 : 0);
    };
    if (e.messages.empty()) {
      const int64_t eos = BatchTokens::require(tokens.eos, "end-of-sequence", "instruction tuning");
      std::vector<int64_t> prompt = tokenizer.encode(e.prompt, /*add_special_tokens=*/true);
      // A tokenizer that appends its end-of-sequence (T5-style) closes the whole text, not the prompt.
      if (!prompt.empty() && prompt.back() == eos) prompt.pop_back();
      append(prompt, false);
      append(tokenizer.encode(e.completion), true);
      append({eos}, true);
    } else {
      if (!chat) chat.emplace(tokenizer, tokenizer_name);
      const auto rendered = chat->render_for_training(e.messages, source + ":" + std::to_string(e.line));
      size_t at = 0;
      for (const auto& [begin, end] : rendered.assistant_spans) {
        append(tokenizer.encode(rendered.text.substr(at, begin - at)), false);
        append(tokenizer.encode(rendered.text.substr(begin, end - begin)), true);
        at = end;
      }
      append(tokenizer.encode(rendered.text.substr(at)), false);
    }
    if (static_cast<int64_t>(ids.size()) > max_length + 1) {
      ids.resize(max_length + 1);
      targets.resize(max_length + 1);
    }
    // The first token is never predicted: an example needs a target after it.
    if (std::find(targets.begin() + std::min<size_t>(1, targets.size()), targets.end(), 1) == targets.end()) {
      ++skipped_;
      continue;
    }
    ids_.push_back(std::move(ids));
    targets_.push_back(std::move(targets));
  }
  if (ids_.empty()) {
    throw std::runtime_error(source + ": no example's completion fits in block_size " + std::to_string(max_length) +
                             " after its prompt");
  }
}

Batch InstructionDataset::batch(const std::vector<int64_t>& indices) const {
  std::vector<std::vector<int64_t>> inputs, labels;
  for (int64_t i : indices) {
    const auto& ids = ids_.at(i);
    const auto& targets = targets_.at(i);
    inputs.emplace_back(ids.begin(), ids.end() - 1);
    // y[t] is ids[t + 1], a label where that token is a target.
    std::vector<int64_t> y(ids.begin() + 1, ids.end());
    for (size_t t = 0; t < y.size(); ++t) {
      if (!targets[t + 1]) y[t] = kIgnoreIndex;
    }
    labels.push_back(std::move(y));
  }
  Batch batch;
  batch.input_ids = pad_rows(inputs, pad_, &batch.attention_mask);
  batch.labels = pad_rows(labels, kIgnoreIndex);
  return batch;
}

std::vector<std::vector<int64_t>> bucket_by_length(const std::vector<int64_t>& lengths, int64_t batch_size,
                                                   uint64_t seed, int64_t epoch) {
  if (batch_size < 1) throw std::runtime_error("batch_size must be >= 1");
  const auto n = static_cast<int64_t>(lengths.size());
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  auto rng = example_rng(seed, epoch, -2);
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng() % static_cast<uint64_t>(i + 1)]);
  const int64_t window = 50 * batch_size;
  for (int64_t start = 0; start < n; start += window) {
    auto end = order.begin() + std::min(n, start + window);
    std::stable_sort(order.begin() + start, end, [&](int64_t a, int64_t b) { return lengths[a] < lengths[b]; });
  }
  std::vector<std::vector<int64_t>> batches;
  for (int64_t start = 0; start < n; start += batch_size) {
    batches.emplace_back(order.begin() + start, order.begin() + std::min(n, start + batch_size));
  }
  for (int64_t i = static_cast<int64_t>(batches.size()) - 1; i > 0; --i) {
    std::swap(batches[i], batches[rng() % static_cast<uint64_t>(i + 1)]);
  }
  return batches;
}

}  // namespace zoo
