#include "tokenizers/unigram.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "core/unicode.h"

namespace zoo {
namespace {

// SentencePiece's penalty below the lowest piece score for an unknown character.
constexpr double kUnknownPenalty = 10.0;

}  // namespace

UnigramModel::UnigramModel(std::vector<std::pair<std::string, double>> pieces, std::optional<int64_t> unk_id,
                           bool byte_fallback, const std::string& where)
    : pieces_(std::move(pieces)), unk_id_(unk_id), byte_fallback_(byte_fallback), where_(where) {
  if (unk_id_ && (*unk_id_ < 0 || *unk_id_ >= static_cast<int64_t>(pieces_.size()))) {
    throw std::runtime_error(where + ": unk_id " + std::to_string(*unk_id_) + " is outside the vocabulary (" +
                             std::to_string(pieces_.size()) + " pieces)");
  }
  min_score_ = std::numeric_limits<double>::infinity();
  for (size_t id = 0; id < pieces_.size(); ++id) {
    const auto& [piece, score] = pieces_[id];
    ids_[piece] = static_cast<int64_t>(id);
    min_score_ = std::min(min_score_, score);
  }
  // The trie maps each piece to the id the piece's lookup gives (a repeated piece: the last).
  for (const auto& [piece, id] : ids_) {
    if (!piece.empty()) trie_.insert(piece, id);
  }
}

UnigramModel UnigramModel::from_json(const JsonView& model) {
  std::vector<std::pair<std::string, double>> pieces;
  for (const auto& entry : model.at("vocab").elements()) {
    const auto pair = entry.elements();
    if (pair.size() != 2) entry.fail("expected [piece, score], found " + std::to_string(pair.size()) + " elements");
    pieces.emplace_back(pair[0].as_string(), pair[1].as_number());
  }
  std::optional<int64_t> unk_id;
  if (const auto u = model.find("unk_id")) unk_id = u->as_int();
  return UnigramModel(std::move(pieces), unk_id, model.bool_or("byte_fallback", false),
                      model.file() + ": " + model.path());
}

std::optional<int64_t> UnigramModel::token_to_id(const std::string& token) const {
  const auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* UnigramModel::id_to_token(int64_t id) const {
  if (id < 0 || id >= size()) return nullptr;
  return &pieces_[id].first;
}

std::vector<std::string> UnigramModel::segment(const std::string& word) const {
  struct Best {
    double score = 0.0;
    int64_t starts_at = -1;  // -1: no path ends here yet
    int64_t id = 0;
  };
  const size_t n = word.size();
  const double unk_score = min_score_ - kUnknownPenalty;
  std::vector<Best> best(n + 1);
  for (size_t start = 0; start < n;) {
    const double score_here = best[start].score;
    const size_t char_length = unicode::decode_at(word, start).length;
    bool has_single_char_piece = false;
    // Candidates replace the best path only when strictly better, so ties keep the first.
    trie_.for_each_prefix(word, start, [&](size_t length, int64_t id) {
      Best& target = best[start + length];
      const double candidate = pieces_[id].second + score_here;
      if (target.starts_at < 0 || candidate > target.score) target = {candidate, static_cast<int64_t>(start), id};
      if (length == char_length) has_single_char_piece = true;
    });
    if (!has_single_char_piece) {
      Best& target = best[start + char_length];
      const double candidate = unk_score + score_here;
      if (target.starts_at < 0 || candidate > target.score) {
        if (!unk_id_) {
          throw std::runtime_error(where_ + ": no piece covers '" + word.substr(start, char_length) +
                                   "' and the model has no unk_id");
        }
        target = {candidate, static_cast<int64_t>(start), *unk_id_};
      }
    }
    start += char_length;
  }
  // Walk back from the end; unknown characters next to each other become one string.
  std::vector<std::string> pieces;
  std::string unknown;
  for (size_t end = n; end > 0;) {
    const Best& node = best[end];
    const auto start = static_cast<size_t>(node.starts_at);
    if (unk_id_ && node.id == *unk_id_) {
      unknown.insert(0, word, start, end - start);
    } else {
      if (!unknown.empty()) pieces.push_back(std::move(unknown));
      unknown.clear();
      pieces.push_back(word.substr(start, end - start));
    }
    end = start;
  }
  if (!unknown.empty()) pieces.push_back(std::move(unknown));
  std::reverse(pieces.begin(), pieces.end());
  return pieces;
}

void UnigramModel::tokenize(const std::string& word, std::vector<int64_t>& out) const {
  if (word.empty()) return;
  if (cache_.lookup(word, out)) return;
  const size_t first = out.size();
  for (const auto& piece : segment(word)) {
    if (const auto it = ids_.find(piece); it != ids_.end()) {
      out.push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int64_t> bytes;
      for (unsigned char b : piece) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        const auto it = ids_.find(name);
        if (it == ids_.end()) break;
        bytes.push_back(it->second);
      }
      if (bytes.size() == piece.size()) {
        out.insert(out.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (!unk_id_) throw std::runtime_error(where_ + ": '" + piece + "' is not a piece and the model has no unk_id");
    out.push_back(*unk_id_);
  }
  cache_.store(word, out.data() + first, out.size() - first);
}

}  // namespace zoo
