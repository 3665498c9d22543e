#include "data/objectives.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <torch/torch.h>

#include "core/splitmix.h"

namespace zoo {
namespace {

// Portable draws (the standard distributions differ between library implementations).
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }
int64_t uniform_int(std::mt19937_64& rng, int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); }

// n items cut into k non-empty segments, uniformly over the cut points; segment lengths.
std::vector<int64_t> random_segmentation(int64_t n, int64_t k, std::mt19937_64& rng) {
  std::vector<int64_t> gaps(n - 1);
  for (int64_t i = 0; i < n - 1; ++i) gaps[i] = i;
  for (int64_t i = 0; i < k - 1; ++i) std::swap(gaps[i], gaps[i + uniform_int(rng, n - 1 - i)]);
  std::vector<int64_t> cuts(gaps.begin(), gaps.begin() + (k - 1));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int64_t> lengths;
  int64_t previous = 0;
  for (int64_t c : cuts) {
    lengths.push_back(c + 1 - previous);
    previous = c + 1;
  }
  lengths.push_back(n - previous);
  return lengths;
}

}  // namespace

std::mt19937_64 example_rng(uint64_t seed, int64_t epoch, int64_t index) {
  const uint64_t place = static_cast<uint64_t>(epoch) * 0x100000001B3ULL + static_cast<uint64_t>(index);
  return std::mt19937_64(splitmix64(splitmix64(seed) ^ splitmix64(place)));
}

ShuffledSampler::ShuffledSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  if (n <= 0) throw std::runtime_error("sampler: the dataset is empty (no examples to draw)");
  shuffle();
}

void ShuffledSampler::shuffle() {
  order_.resize(n_);
  for (int64_t i = 0; i < n_; ++i) order_[i] = i;
  auto rng = example_rng(seed_, state_.epoch, -1);
  for (int64_t i = n_ - 1; i > 0; --i) std::swap(order_[i], order_[uniform_int(rng, i + 1)]);
}

std::vector<int64_t> ShuffledSampler::next(int64_t count) {
  std::vector<int64_t> out;
  while (static_cast<int64_t>(out.size()) < count) {
    if (state_.index == n_) {
      ++state_.epoch;
      state_.index = 0;
      shuffle();
    }
    out.push_back(order_[state_.index++]);
  }
  return out;
}

void ShuffledSampler::restore(const State& state) {
  if (state.index < 0 || state.index > n_ || state.epoch < 0) {
    throw std::runtime_error("sampler: cannot restore position (epoch " + std::to_string(state.epoch) + ", index " +
                             std::to_string(state.index) + ") over " + std::to_string(n_) + " examples");
  }
  state_ = state;
  shuffle();
}

torch::Tensor pad_rows(const std::vector<std::vector<int64_t>>& rows, int64_t pad, torch::Tensor* mask) {
  size_t longest = 0;
  for (const auto& r : rows) longest = std::max(longest, r.size());
  const auto b = static_cast<int64_t>(rows.size()), l = static_cast<int64_t>(longest);
  auto ids = torch::full({b, l}, pad, torch::kLong);
  auto m = torch::zeros({b, l}, torch::kLong);
  auto ids_a = ids.accessor<int64_t, 2>();
  auto m_a = m.accessor<int64_t, 2>();
  for (int64_t i = 0; i < b; ++i) {
    for (size_t j = 0; j < rows[i].size(); ++j) ids_a[i][j] = rows[i][j], m_a[i][j] = 1;
  }
  if (mask != nullptr) *mask = m;
  return ids;
}

BatchTokens BatchTokens::of(const Tokenizer& tokenizer) {
  const auto& s = tokenizer.special();
  BatchTokens t;
  t.eos = s.eos, t.cls = s.cls, t.sep = s.sep, t.mask = s.mask;
  t.sentinels = s.sentinels;
  t.pad = s.pad ? *s.pad : s.eos ? *s.eos : s.unk ? *s.unk : 0;
  t.decoder_start = t.pad;
  for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(id)) t.ordinary.push_back(id);
  }
  return t;
}

int64_t BatchTokens::require(const std::optional<int64_t>& id, const char* role, const std::string& what) {
  if (!id) throw std::runtime_error(what + " needs a " + role + " token, and the tokenizer has none");
  return *id;
}

// ---- causal LM

CausalLMDataset::CausalLMDataset(const TokenFile& file, int64_t block_size, int64_t pad)
    : file_(file), block_size_(block_size), pad_(pad) {
  if (block_size < 1) throw std::runtime_error("block_size (" + std::to_string(block_size) + ") must be >= 1");
  if (file.size() < 2) throw std::runtime_error(file.path() + ": too few tokens for language modelling");
  num_blocks_ = (file.size() - 1 + block_size - 1) / block_size;
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> CausalLMDataset::example(int64_t b) const {
  if (b < 0 || b >= num_blocks_) throw std::out_of_range("block " + std::to_string(b) + " out of range");
  const int64_t start = b * block_size_;
  const int64_t n = std::min(block_size_ + 1, file_.size() - start);
  auto tokens = file_.tokens(start, n);
  std::vector<int64_t> inputs(tokens.begin(), tokens.end() - 1), labels(tokens.begin() + 1, tokens.end());
  return {inputs, labels};
}

Batch CausalLMDataset::batch(const std::vector<int64_t>& indices) const {
  std::vector<std::vector<int64_t>> inputs, labels;
  for (int64_t i : indices) {
    auto [x, y] = example(i);
    x.resize(block_size_, pad_);  // only the last block is short
    y.resize(block_size_, kIgnoreIndex);
    inputs.push_back(std::move(x));
    labels.push_back(std::move(y));
  }
  Batch batch;
  batch.input_ids = pad_rows(inputs, pad_);
  batch.labels = pad_rows(labels, kIgnoreIndex);
  batch.attention_mask = batch.labels.ne(kIgnoreIndex).to(torch::kLong);
  return batch;
}

// ---- masked LM

std::pair<std::vector<int64_t>, std::vector<int64_t>> mask_tokens(const std::vector<int64_t>& ids,
                                                                  const Tokenizer& tokenizer,
                                                                  const BatchTokens& tokens,
                                                                  const MaskingOptions& o,
                                                                  std::mt19937_64& rng) {
  std::vector<int64_t> inputs = ids, labels(ids.size(), kIgnoreIndex);
  const int64_t mask = BatchTokens::require(tokens.mask, "mask", "masked LM");
  const auto ordinary = static_cast<int64_t>(tokens.ordinary.size());
  size_t i = 0;
  while (i < ids.size()) {
    if (tokenizer.is_special(ids[i])) {
      ++i;
      continue;
    }
    // A unit is one token, or with whole-word masking a word: a word-start piece and the
    // pieces that continue it.
    size_t end = i + 1;
    if (o.whole_word) {
      while (end < ids.size() && !tokenizer.is_special(ids[end]) && !tokenizer.starts_word(ids[end])) ++end;
    }
    if (uniform01(rng) < o.probability) {
      const double action = uniform01(rng);
      for (size_t k = i; k < end; ++k) {
        labels[k] = ids[k];
        if (action < o.mask_fraction) {
          inputs[k] = mask;
        } else if (action < o.mask_fraction + o.random_fraction && ordinary > 0) {
          inputs[k] = tokens.ordinary[uniform_int(rng, ordinary)];
        }
      }
    }
    i = end;
  }
  return {inputs, labels};
}

MaskedLMDataset::MaskedLMDataset(const TokenFile& file, const Tokenizer& tokenizer, int64_t block_size,
                                 MaskingOptions masking, SentencePairs pairs, uint64_t seed)
    : file_(file), tokenizer_(tokenizer), tokens_(BatchTokens::of(tokenizer)), block_size_(block_size),
      masking_(masking), pairs_(pairs), seed_(seed) {
  // [CLS] A [SEP] (B [SEP]), masked: refused now, by name, when the tokenizer lacks one.
  for (const auto& [id, role] : {std::pair<std::optional<int64_t>, const char*>{tokens_.mask, "mask"},
                                 {tokens_.cls, "cls"}, {tokens_.sep, "sep"}}) {
    BatchTokens::require(id, role, "masked LM");
  }
  if (block_size < 8) throw std::runtime_error("block_size (" + std::to_string(block_size) + ") must be >= 8 for masked LM");
  if (static_cast<int64_t>(file.info().vocab_size) != tokenizer.vocab_size()) {
    throw std::runtime_error(file.path() + ": vocabulary size differs from the tokenizer's");
  }
  if (pairs_ != SentencePairs::kNone) {
    for (int64_t d = 0; d < file.num_documents(); ++d) {
      auto [b, e] = file.document(d);
      if (e - b >= 2) documents_.push_back(d);
    }
    if (documents_.size() < 2) throw std::runtime_error(file.path() + ": sentence pairs need at least two documents of two tokens");
  }
}

int64_t MaskedLMDataset::size() const {
  if (pairs_ != SentencePairs::kNone) return static_cast<int64_t>(documents_.size());
  return std::max<int64_t>(1, (file_.size() + block_size_ - 3) / (block_size_ - 2));
}

MaskedLMDataset::Example MaskedLMDataset::example(int64_t index, int64_t epoch) const {
  auto rng = example_rng(seed_, epoch, index);
  Example ex;
  std::vector<int64_t> a, b;
  if (pairs_ == SentencePairs::kNone) {
    const int64_t span = block_size_ - 2;
    const int64_t start = index * span;
    a = file_.tokens(start, std::min(span, file_.size() - start));
    for (auto& t : a) {
      if (t == tokens_.eos) t = *tokens_.sep;  // document boundaries inside a block
    }
  } else {
    auto [begin, end] = file_.document(documents_[index]);
    const int64_t budget = block_size_ - 3;
    end = std::min(end, begin + budget);
    const int64_t cut = begin + 1 + uniform_int(rng, end - begin - 1);  // both halves non-empty
    a = file_.tokens(begin, cut - begin);
    b = file_.tokens(cut, end - cut);
    ex.next_sentence_label = 0;
    if (uniform01(rng) < 0.5) {
      ex.next_sentence_label = 1;
      if (pairs_ == SentencePairs::kSentenceOrder) {
        std::swap(a, b);
      } else {  // a span of another document, as long as B was
        int64_t other = documents_[uniform_int(rng, static_cast<int64_t>(documents_.size()))];
        if (other == documents_[index]) other = documents_[(index + 1) % documents_.size()];
        auto [ob, oe] = file_.document(other);
        const int64_t len = std::min<int64_t>(static_cast<int64_t>(b.size()), oe - ob);
        const int64_t start = ob + uniform_int(rng, oe - ob - len + 1);
        b = file_.tokens(start, len);
      }
    }
  }
  std::vector<int64_t> ids{*tokens_.cls};
  ids.insert(ids.end(), a.begin(), a.end());
  ids.push_back(*tokens_.sep);
  ex.token_type_ids.assign(ids.size(), 0);
  if (!b.empty()) {
    ids.insert(ids.end(), b.begin(), b.end());
    ids.push_back(*tokens_.sep);
    ex.token_type_ids.resize(ids.size(), 1);
  }
  std::tie(ex.input_ids, ex.labels) = mask_tokens(ids, tokenizer_, tokens_, masking_, rng);
  return ex;
}

Batch MaskedLMDataset::batch(const std::vector<int64_t>& indices, int64_t epoch) const {
  std::vector<std::vector<int64_t>> ids, labels, types;
  std::vector<int64_t> nsp;
  for (int64_t i : indices) {
    auto ex = example(i, epoch);
    ids.push_back(std::move(ex.input_ids));
    labels.push_back(std::move(ex.labels));
    types.push_back(std::move(ex.token_type_ids));
    nsp.push_back(ex.next_sentence_label);
  }
  Batch batch;
  batch.input_ids = pad_rows(ids, tokens_.pad, &batch.attention_mask);
  batch.labels = pad_rows(labels, kIgnoreIndex);
  batch.token_type_ids = pad_rows(types, 0);
  if (pairs_ != SentencePairs::kNone) batch.next_sentence_labels = torch::tensor(nsp, torch::kLong);
  return batch;
}

// ---- span corruption

namespace {

void require_sentinels(const BatchTokens& specials) {
  if (specials.sentinels.empty()) {
    throw std::runtime_error("span corruption needs sentinel tokens (<extra_id_0>, ...), and the tokenizer has none");
  }
}

}  // namespace

std::pair<std::vector<int64_t>, std::vector<int64_t>> corrupt_spans(const std::vector<int64_t>& tokens,
                                                                    const SpanCorruptionOptions& o,
                                                                    const BatchTokens& specials,
                                                                    std::mt19937_64& rng) {
  const int64_t eos = BatchTokens::require(specials.eos, "end-of-sequence", "span corruption");
  require_sentinels(specials);
  const auto length = static_cast<int64_t>(tokens.size());
  if (length < 2) {
    std::vector<int64_t> in = tokens;
    in.push_back(eos);
    return {in, {eos}};
  }
  // As in T5's random_spans_noise_mask: round, keep at least one noise and one kept token.
  int64_t noise = std::llround(static_cast<double>(length) * o.noise_density);
  noise = std::clamp<int64_t>(noise, 1, length - 1);
  int64_t spans = std::llround(static_cast<double>(noise) / o.mean_span_length);
  spans = std::clamp<int64_t>(spans, 1, std::min<int64_t>({noise, length - noise, static_cast<int64_t>(specials.sentinels.size())}));
  auto noise_lengths = random_segmentation(noise, spans, rng);
  auto keep_lengths = random_segmentation(length - noise, spans, rng);
  std::vector<int64_t> inputs, targets;
  int64_t pos = 0;
  for (int64_t s = 0; s < spans; ++s) {
    inputs.insert(inputs.end(), tokens.begin() + pos, tokens.begin() + pos + keep_lengths[s]);
    pos += keep_lengths[s];
    const int64_t sentinel = specials.sentinels[s];
    inputs.push_back(sentinel);
    targets.push_back(sentinel);
    targets.insert(targets.end(), tokens.begin() + pos, tokens.begin() + pos + noise_lengths[s]);
    pos += noise_lengths[s];
  }
  inputs.push_back(eos);
  targets.push_back(eos);
  return {inputs, targets};
}

SpanCorruptionDataset::SpanCorruptionDataset(const TokenFile& file, int64_t raw_length,
                                             SpanCorruptionOptions options, uint64_t seed, BatchTokens specials)
    : file_(file), raw_length_(raw_length), options_(options), seed_(seed), specials_(std::move(specials)) {
  BatchTokens::require(specials_.eos, "end-of-sequence", "span corruption");
  require_sentinels(specials_);
  if (specials_.sentinels.empty()) {
    throw std::runtime_error("span corruption needs sentinel tokens (<extra_id_0>, ...), and the tokenizer has none");
  }
  if (raw_length < 2) throw std::runtime_error("span corruption length (" + std::to_string(raw_length) + ") must be >= 2");
  if (!(options.noise_density > 0 && options.noise_density < 1)) throw std::runtime_error("noise_density must be in (0, 1)");
  if (!(options.mean_span_length >= 1)) throw std::runtime_error("mean_span_length must be >= 1");
  num_examples_ = std::max<int64_t>(1, (file.size() + raw_length - 1) / raw_length);
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> SpanCorruptionDataset::example(int64_t index,
                                                                                      int64_t epoch) const {
  if (index < 0 || index >= num_examples_) throw std::out_of_range("example " + std::to_string(index) + " out of range");
  const int64_t start = index * raw_length_;
  auto tokens = file_.tokens(start, std::min(raw_length_, file_.size() - start));
  auto rng = example_rng(seed_, epoch, index);
  return corrupt_spans(tokens, options_, specials_, rng);
}

Batch SpanCorruptionDataset::batch(const std::vector<int64_t>& indices, int64_t epoch) const {
  std::vector<std::vector<int64_t>> inputs, targets;
  for (int64_t i : indices) {
    auto [x, y] = example(i, epoch);
    inputs.push_back(std::move(x));
    targets.push_back(std::move(y));
  }
  return seq2seq_batch(inputs, targets, specials_);
}

Batch seq2seq_batch(const std::vector<std::vector<int64_t>>& sources,
                    const std::vector<std::vector<int64_t>>& targets, const BatchTokens& tokens) {
  std::vector<std::vector<int64_t>> decoder_inputs;
  for (const auto& y : targets) {
    std::vector<int64_t> shifted{tokens.decoder_start};
    shifted.insert(shifted.end(), y.begin(), y.end() - 1);
    decoder_inputs.push_back(std::move(shifted));
  }
  Batch batch;
  batch.input_ids = pad_rows(sources, tokens.pad, &batch.attention_mask);
  batch.labels = pad_rows(targets, kIgnoreIndex);
  batch.decoder_input_ids = pad_rows(decoder_inputs, tokens.pad);
  return batch;
}

}  // namespace zoo
