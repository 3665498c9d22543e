#include "tokenizers/added_vocabulary.h"

#include <algorithm>

#include "core/regex.h"
#include "core/unicode.h"

namespace zoo {
namespace {

// Rust regex's \w (tokenizers tests single_word with ^\w and \w$).
bool is_word_char(const std::string& text, size_t at) {
  static const Regex word(R"(\A\w)", "the word-character pattern");
  const size_t length = unicode::decode_at(text, at).length;
  return !word.find_all(text.substr(at, length)).empty();
}

bool ends_with_word(const std::string& text, size_t end) {
  if (end == 0) return false;
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return is_word_char(text, start);
}

// Start of the whitespace run that ends at `end`.
size_t whitespace_run_start(const std::string& text, size_t end) {
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    if (!unicode::is_white_space(unicode::decode_at(text, start).code_point)) break;
    end = start;
  }
  return end;
}

// End of the whitespace run that starts at `begin`.
size_t whitespace_run_end(const std::string& text, size_t begin) {
  while (begin < text.size()) {
    const auto [c, n] = unicode::decode_at(text, begin);
    if (!unicode::is_white_space(c)) break;
    begin += n;
  }
  return begin;
}

}  // namespace

void AddedVocabulary::add(const std::vector<AddedToken>& tokens, const ModelLookup& model_lookup, int64_t model_size,
                          const Normalize& normalize) {
  int64_t next_id = model_size;
  if (!tokens_.empty() && (max_id_ >= model_size || model_size == 0)) next_id = max_id_ + 1;
  for (const auto& token : tokens) {
    if (token.content.empty()) continue;
    int64_t id;
    if (const auto known = token_to_id(token.content)) {
      id = *known;
    } else if (const auto in_model = model_lookup(token.content)) {
      id = *in_model;
    } else {
      id = next_id++;
    }
    insert(id, token, normalize);
  }
  rebuild_tries();
}

void AddedVocabulary::add_with_ids(const std::vector<std::pair<int64_t, AddedToken>>& tokens,
                                   const Normalize& normalize) {
  for (const auto& [id, token] : tokens) {
    if (!token.content.empty()) insert(id, token, normalize);
  }
  rebuild_tries();
}

void AddedVocabulary::insert(int64_t id, const AddedToken& token, const Normalize& normalize) {
  if (token.normalized && normalize) {
    if (std::string normalized = normalize(token.content); normalized != token.content) {
      normalized_[id] = std::move(normalized);
    }
  }
  ids_[token.content] = id;
  if (token.special) special_contents_.insert(token.content);
  tokens_[id] = token;
  max_id_ = std::max(max_id_, id);
}

void AddedVocabulary::rebuild_tries() {
  raw_trie_ = ByteTrie();
  normalized_trie_ = ByteTrie();
  for (const auto& [id, token] : tokens_) {
    if (!token.normalized) {
      raw_trie_.insert(token.content, id);
      continue;
    }
    const auto n = normalized_.find(id);
    const std::string& pattern = n == normalized_.end() ? token.content : n->second;
    if (!pattern.empty()) normalized_trie_.insert(pattern, id);
  }
}

void AddedVocabulary::split(TextPieces& pieces, bool normalized_text) const {
  const ByteTrie& trie = normalized_text ? normalized_trie_ : raw_trie_;
  TextPieces out;
  out.reserve(pieces.size());
  const auto emit = [&out](const TextPiece& from, size_t begin, size_t end, int64_t token) {
    if (begin >= end) return;
    TextPiece p;
    p.text = from.text.substr(begin, end - begin);
    p.at_input_start = from.at_input_start && begin == 0;
    p.added_token = token;
    out.push_back(std::move(p));
  };
  for (auto& piece : pieces) {
    if (piece.is_token() || trie.empty()) {
      if (!piece.text.empty()) out.push_back(std::move(piece));
      continue;
    }
    const std::string& text = piece.text;
    size_t consumed = 0;  // end of the last emitted piece
    for (size_t at = 0; at < text.size();) {
      const auto [length, id] = trie.longest_prefix(text, at);
      if (length == 0) {
        ++at;
        continue;
      }
      size_t begin = at, end = at + length;
      at = end;  // the next match is searched after this one, whatever becomes of it
      const AddedToken& token = tokens_.at(id);
      if (token.single_word) {
        const bool space_before = begin == 0 || !ends_with_word(text, begin);
        const bool space_after = end == text.size() || !is_word_char(text, end);
        if (!space_before || !space_after) continue;
      }
      if (token.lstrip) begin = std::max(whitespace_run_start(text, begin), consumed);
      if (token.rstrip) end = whitespace_run_end(text, end);
      // A previous rstrip can reach past this match's start; tokenizers would then emit
      // overlapping pieces (or fail), so the match starts where that one ended.
      begin = std::max(begin, consumed);
      end = std::max(end, begin);
      emit(piece, consumed, begin, -1);
      emit(piece, begin, end, id);
      consumed = end;
    }
    emit(piece, consumed, text.size(), -1);
  }
  pieces = std::move(out);
}

std::optional<int64_t> AddedVocabulary::token_to_id(const std::string& content) const {
  const auto it = ids_.find(content);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* AddedVocabulary::id_to_token(int64_t id) const {
  if (const auto n = normalized_.find(id); n != normalized_.end()) return &n->second;
  const auto it = tokens_.find(id);
  return it == tokens_.end() ? nullptr : &it->second.content;
}

const AddedToken* AddedVocabulary::token(int64_t id) const {
  const auto it = tokens_.find(id);
  return it == tokens_.end() ? nullptr : &it->second;
}

std::vector<int64_t> AddedVocabulary::ids() const {
  std::vector<int64_t> out;
  out.reserve(tokens_.size());
  for (const auto& [id, token] : tokens_) out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace zoo
