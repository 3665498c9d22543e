#include "tokenizers/bpe.h"

#include <cmath>
#include <cstdio>
#include <queue>
#include <stdexcept>

#include "core/unicode.h"

namespace zoo {
namespace {

// One symbol of a word being merged: a doubly linked list in a vector, as in tokenizers.
struct Symbol {
  int64_t id;
  int32_t prev;
  int32_t next;
  uint32_t length;  // bytes of the word it covers; 0 once merged into its left neighbour
};

struct Candidate {
  int32_t rank;
  int32_t position;
  int32_t new_id;
  // std::priority_queue is a max-heap: the lowest rank, then the leftmost position, on top.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : position > o.position; }
};

std::string byte_token(unsigned char b) {
  char buffer[8];
  std::snprintf(buffer, sizeof(buffer), "<0x%02X>", b);
  return buffer;
}

}  // namespace

BpeModel::BpeModel(Vocabulary vocab, const Merges& merges, BpeOptions options, const std::string& vocab_name,
                   const MergeLocator& merge_at)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  const size_t prefix = options_.continuing_subword_prefix.size();
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [a, b] = merges[i];
    const auto find = [&](const std::string& token) {
      const auto id = vocab_.find(token);
      if (!id) throw std::runtime_error(merge_at(i) + ": '" + token + "' is not in " + vocab_name);
      return *id;
    };
    const int64_t a_id = find(a), b_id = find(b);
    // The merged token drops the second part's continuing prefix ("##"), as tokenizers does.
    const std::string merged = a + (b.size() >= prefix ? b.substr(prefix) : std::string());
    const int64_t new_id = find(merged);
    // A pair listed twice keeps its later rank (tokenizers collects the list into a map).
    merges_[pair_key(a_id, b_id)] = {static_cast<int32_t>(i), static_cast<int32_t>(new_id)};
  }
  if (options_.unk_token) {
    unk_id_ = vocab_.find(*options_.unk_token);
    if (!unk_id_) throw std::runtime_error(vocab_name + ": the unk token '" + *options_.unk_token + "' is not in it");
  }
}

BpeModel BpeModel::from_json(const JsonView& model) {
  if (const auto dropout = model.find("dropout"); dropout && dropout->as_number() != 0.0) {
    dropout->fail("BPE dropout (" + std::to_string(dropout->as_number()) +
                  ") samples different merges on each call; zoo encodes deterministically and needs null or 0");
  }
  BpeOptions options;
  options.unk_token = model.optional_string("unk_token");
  options.continuing_subword_prefix = model.optional_string("continuing_subword_prefix").value_or("");
  options.end_of_word_suffix = model.optional_string("end_of_word_suffix").value_or("");
  options.fuse_unk = model.bool_or("fuse_unk", false);
  options.byte_fallback = model.bool_or("byte_fallback", false);
  options.ignore_merges = model.bool_or("ignore_merges", false);
  auto vocab = Vocabulary::from_json(model.at("vocab"));
  const auto merges_json = model.at("merges").elements();
  Merges merges;
  merges.reserve(merges_json.size());
  for (const auto& m : merges_json) {
    if (m.value().is_string()) {
      // The older "a b" form: exactly two tokens around one space.
      const std::string line = m.as_string();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        m.fail("expected two tokens separated by one space, found '" + line + "'");
      }
      merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    } else {
      const auto pair = m.elements();
      if (pair.size() != 2) m.fail("expected a pair of tokens, found " + std::to_string(pair.size()) + " elements");
      merges.emplace_back(pair[0].as_string(), pair[1].as_string());
    }
  }
  const std::string file = model.file(), path = model.path();
  return BpeModel(std::move(vocab), merges, options, file + ": " + path + ".vocab",
                  [&](size_t i) { return file + ": " + path + ".merges[" + std::to_string(i) + "]"; });
}

BpeModel BpeModel::from_gpt2_files(const std::string& vocab_json, const std::string& vocab_file,
                                   const std::string& merges_txt, const std::string& merges_file) {
  const auto json = JsonView::parse(vocab_json, vocab_file);
  auto vocab = Vocabulary::from_json(JsonView(json, vocab_file));
  Merges merges;
  std::vector<size_t> line_numbers;
  size_t start = 0, line_number = 0;
  while (start < merges_txt.size()) {
    size_t end = merges_txt.find('\n', start);
    if (end == std::string::npos) end = merges_txt.size();
    std::string line = merges_txt.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("#version", 0) == 0) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      throw std::runtime_error(merges_file + ":" + std::to_string(line_number) +
                               ": expected two tokens separated by one space, found '" + line + "'");
    }
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    line_numbers.push_back(line_number);
  }
  return BpeModel(std::move(vocab), merges, BpeOptions{}, vocab_file,
                  [&](size_t i) { return merges_file + ":" + std::to_string(line_numbers[i]); });
}

void BpeModel::tokenize(const std::string& word, std::vector<int64_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (const auto id = vocab_.find(word)) {
      out.push_back(*id);
      return;
    }
  }
  if (cache_.lookup(word, out)) return;
  const size_t first = out.size();
  merge_word(word, out);
  cache_.store(word, out.data() + first, out.size() - first);
}

void BpeModel::merge_word(const std::string& word, std::vector<int64_t>& out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const auto add = [&](int64_t id, size_t length) {
    const auto n = static_cast<int32_t>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, static_cast<uint32_t>(length)});
  };
  // The pending unknown symbol's bytes (0: none), added when a known symbol follows.
  size_t unk_length = 0;
  std::string symbol;
  for (size_t i = 0; i < word.size();) {
    const size_t length = unicode::decode_at(word, i).length;
    symbol.clear();
    if (i > 0) symbol += options_.continuing_subword_prefix;
    symbol.append(word, i, length);
    if (i + length == word.size()) symbol += options_.end_of_word_suffix;
    i += length;
    if (const auto id = vocab_.find(symbol)) {
      if (unk_length > 0) add(*unk_id_, unk_length);
      unk_length = 0;
      add(*id, length);
      continue;
    }
    if (options_.byte_fallback) {
      std::vector<int64_t> bytes;
      for (size_t k = 0; k < symbol.size(); ++k) {
        const auto id = vocab_.find(byte_token(static_cast<unsigned char>(symbol[k])));
        if (!id) break;
        bytes.push_back(*id);
      }
      if (bytes.size() == symbol.size()) {
        // Like tokenizers, a pending unk is not flushed before these bytes.
        for (int64_t id : bytes) add(id, 1);
        continue;
      }
    }
    if (!unk_id_) continue;  // tokenizers drops what it cannot represent when there is no unk
    if (unk_length > 0 && !options_.fuse_unk) {
      add(*unk_id_, unk_length);
      unk_length = 0;
    }
    unk_length += length;
  }
  if (unk_length > 0) add(*unk_id_, unk_length);

  std::priority_queue<Candidate> queue;
  const auto merge_of = [&](int64_t a, int64_t b) -> const Merge* {
    const auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const Merge* m = merge_of(symbols[k].id, symbols[k + 1].id)) {
      queue.push({m->rank, static_cast<int32_t>(k), m->new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.position];
    if (left.length == 0 || left.next < 0) continue;
    const Symbol right = symbols[left.next];
    // Skip entries made stale by earlier merges: the pair must still produce the same token.
    const Merge* current = merge_of(left.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;
    const int32_t right_position = left.next;
    left.id = top.new_id;
    left.length += right.length;
    left.next = right.next;
    symbols[right_position].length = 0;
    if (right.next >= 0) symbols[right.next].prev = top.position;
    if (left.prev >= 0) {
      if (const Merge* m = merge_of(symbols[left.prev].id, left.id)) queue.push({m->rank, left.prev, m->new_id});
    }
    if (left.next >= 0) {
      if (const Merge* m = merge_of(left.id, symbols[left.next].id)) queue.push({m->rank, top.position, m->new_id});
    }
  }
  for (const auto& s : symbols) {
    if (s.length > 0) out.push_back(s.id);
  }
}

}  // namespace zoo
