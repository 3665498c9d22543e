#include "tokenizers/wordpiece.h"

#include <algorithm>
#include <stdexcept>

#include "core/unicode.h"

namespace zoo {

WordPieceModel::WordPieceModel(Vocabulary vocab, WordPieceOptions options, const std::string& vocab_name)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  const auto unk = vocab_.find(options_.unk_token);
  if (!unk) throw std::runtime_error(vocab_name + ": the unk token '" + options_.unk_token + "' is not in it");
  unk_id_ = *unk;
}

WordPieceModel WordPieceModel::from_json(const JsonView& model) {
  WordPieceOptions options;
  options.unk_token = model.string_at("unk_token");
  options.continuing_subword_prefix = model.string_at("continuing_subword_prefix");
  options.max_input_chars_per_word = model.int_at("max_input_chars_per_word");
  if (options.max_input_chars_per_word < 0) model.at("max_input_chars_per_word").fail("must not be negative");
  return WordPieceModel(Vocabulary::from_json(model.at("vocab")), options, model.file() + ": " + model.path() + ".vocab");
}

WordPieceModel WordPieceModel::from_vocab_txt(const std::string& text, const std::string& file,
                                              WordPieceOptions options) {
  // transformers' load_vocab: every line is a token, numbered from 0, read with Python's
  // universal newlines (\n, \r\n or \r end a line); a token seen again takes the later number.
  std::unordered_map<std::string, int64_t> vocab;
  int64_t id = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find_first_of("\r\n", start);
    if (end == std::string::npos) end = text.size();
    vocab[text.substr(start, end - start)] = id++;
    start = end + (text.compare(end, 2, "\r\n") == 0 ? 2 : 1);
  }
  return WordPieceModel(Vocabulary(std::move(vocab)), std::move(options), file);
}

void WordPieceModel::tokenize(const std::string& word, std::vector<int64_t>& out) const {
  if (word.empty()) return;
  if (static_cast<int64_t>(unicode::count_code_points(word)) > options_.max_input_chars_per_word) {
    out.push_back(unk_id_);
    return;
  }
  const std::string& prefix = options_.continuing_subword_prefix;
  const size_t first = out.size();
  std::string candidate;
  for (size_t start = 0; start < word.size();) {
    // No entry is longer than the longest token, so shorter candidates are all that can match
    // (an exact shortcut of tokenizers' loop, which starts from the whole rest of the word).
    const size_t longest = vocab_.longest_token();
    const size_t budget = longest - std::min(longest, start > 0 ? prefix.size() : 0);
    size_t end = std::min(word.size(), start + budget);
    while (end < word.size() && end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) --end;
    int64_t found = -1;
    while (end > start) {
      candidate.clear();
      if (start > 0) candidate += prefix;
      candidate.append(word, start, end - start);
      if (const auto id = vocab_.find(candidate)) {
        found = *id;
        break;
      }
      do --end;
      while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
    }
    if (found < 0) {
      out.resize(first);
      out.push_back(unk_id_);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

}  // namespace zoo
