#include "tokenizers/sentencepiece_tokenizer.h"

#include <algorithm>
#include <stdexcept>

#include "core/unicode.h"
#include "tokenizers/tokenizer.h"

namespace zoo {

SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceProcessor processor,
                                               std::vector<std::pair<int64_t, AddedToken>> with_ids,
                                               std::vector<AddedToken> by_content, SentencePieceSpecials specials)
    : processor_(std::move(processor)), specials_(specials) {
  const int64_t n = processor_.size();
  pieces_.reserve(n);
  for (int64_t id = 0; id < n; ++id) {
    pieces_.push_back(processor_.piece(id));
    ids_.emplace(pieces_.back(), id);
  }
  for (auto& [id, token] : with_ids) token.normalized = false;
  for (auto& token : by_content) token.normalized = false;
  added_.add_with_ids(with_ids, AddedVocabulary::Normalize());
  added_.add(
      by_content,
      [this](const std::string& piece) -> std::optional<int64_t> {
        const auto it = ids_.find(piece);
        if (it == ids_.end()) return std::nullopt;
        return it->second;
      },
      n, AddedVocabulary::Normalize());
  if (specials_.bos_token) bos_ = token_to_id(*specials_.bos_token);
  if (specials_.eos_token) eos_ = token_to_id(*specials_.eos_token);
}

std::shared_ptr<const SentencePieceTokenizer> SentencePieceTokenizer::zoo(SentencePieceProcessor processor) {
  SentencePieceSpecials specials;
  specials.convention = SentencePieceConvention::kZoo;
  specials.special_below = SpecialTokens::kCount;
  return std::make_shared<const SentencePieceTokenizer>(std::move(processor), std::vector<std::pair<int64_t, AddedToken>>{},
                                                        std::vector<AddedToken>{}, specials);
}

bool SentencePieceTokenizer::has_zoo_layout(const SentencePieceProcessor& processor, std::string* why) {
  const std::pair<int64_t, const char*> expected[] = {
      {SpecialTokens::kPad, "<pad>"}, {SpecialTokens::kUnk, "<unk>"}, {SpecialTokens::kBos, "<s>"},
      {SpecialTokens::kEos, "</s>"},  {SpecialTokens::kCls, "[CLS]"}, {SpecialTokens::kSep, "[SEP]"},
      {SpecialTokens::kMask, "[MASK]"}, {SpecialTokens::kFirstSentinel, "<extra_id_0>"},
      {SpecialTokens::kCount - 1, "<extra_id_99>"}};
  for (const auto& [id, piece] : expected) {
    if (id >= processor.size() || processor.piece(id) != piece) {
      if (why != nullptr) *why = std::string("special token ") + piece + " is not at id " + std::to_string(id);
      return false;
    }
  }
  return true;
}

std::vector<int64_t> SentencePieceTokenizer::encode_sequence(const std::string& text) const {
  if (added_.empty()) return processor_.encode(text);
  unicode::require_valid_utf8(text, "tokenizer input");
  TextPieces pieces{{text, true, -1}};
  added_.split(pieces, false);
  std::vector<int64_t> ids;
  for (const auto& piece : pieces) {
    if (piece.is_token()) {
      ids.push_back(piece.added_token);
    } else {
      const auto part = processor_.encode(piece.text);
      ids.insert(ids.end(), part.begin(), part.end());
    }
  }
  return ids;
}

Encoding SentencePieceTokenizer::with_specials(std::vector<int64_t> ids, bool add_special_tokens, int64_t type_id) const {
  Encoding e;
  const auto push = [&e, type_id](int64_t id, uint8_t special) {
    e.ids.push_back(id);
    e.type_ids.push_back(type_id);
    e.special_mask.push_back(special);
  };
  const bool bos = add_special_tokens && specials_.add_bos && bos_;
  bool eos = add_special_tokens && specials_.add_eos && eos_;
  switch (specials_.convention) {
    case SentencePieceConvention::kT5:
      // T5Tokenizer's _add_eos_if_not_present.
      if (eos && !ids.empty() && ids.back() == *eos_) eos = false;
      break;
    case SentencePieceConvention::kLlama:
    case SentencePieceConvention::kZoo:
      break;
  }
  if (bos) push(*bos_, 1);
  for (int64_t id : ids) push(id, 0);
  if (eos) push(*eos_, 1);
  return e;
}

Encoding SentencePieceTokenizer::encode(const std::string& text, bool add_special_tokens) const {
  return with_specials(encode_sequence(text), add_special_tokens, 0);
}

Encoding SentencePieceTokenizer::encode_pair(const std::string& first, const std::string& second,
                                             bool add_special_tokens) const {
  int64_t second_type = 1;
  switch (specials_.convention) {
    case SentencePieceConvention::kT5: second_type = 0; break;  // T5 has no token types
    case SentencePieceConvention::kLlama:
    case SentencePieceConvention::kZoo: break;
  }
  Encoding e = with_specials(encode_sequence(first), add_special_tokens, 0);
  e.append(with_specials(encode_sequence(second), add_special_tokens, second_type));
  return e;
}

std::vector<std::string> SentencePieceTokenizer::encode_tokens(const std::string& text) const {
  if (added_.empty()) return processor_.encode_pieces(text);
  std::vector<std::string> tokens;
  for (int64_t id : encode_sequence(text)) tokens.push_back(*id_to_token(id));
  return tokens;
}

std::string SentencePieceTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  // Stretches of model ids are decoded by SentencePiece, added tokens are their text: as if
  // SentencePiece decoded the whole sequence with the added tokens' text spliced in, so a
  // stretch after other text keeps the space its first piece's word mark stands for.
  std::string out;
  std::vector<int64_t> run;
  const auto flush = [&] {
    if (run.empty()) return;
    std::string text = processor_.decode(run);
    if (!out.empty() && pieces_[run.front()].rfind("\xE2\x96\x81", 0) == 0 && text.rfind(' ', 0) != 0) {
      text.insert(0, 1, ' ');
    }
    out += text;
    run.clear();
  };
  for (int64_t id : ids) {
    if (const AddedToken* token = added_.token(id)) {
      if (skip_special_tokens && token->special) continue;
      flush();
      out += token->content;
      continue;
    }
    if (id < 0 || id >= model_size()) {
      throw std::runtime_error("tokenizer: id " + std::to_string(id) + " is outside the vocabulary (" +
                               std::to_string(vocab_size()) + ")");
    }
    if (skip_special_tokens && is_special(id)) continue;
    run.push_back(id);
  }
  flush();
  return out;
}

std::optional<int64_t> SentencePieceTokenizer::token_to_id(const std::string& token) const {
  if (const auto id = added_.token_to_id(token)) return id;
  const auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* SentencePieceTokenizer::id_to_token(int64_t id) const {
  if (const AddedToken* token = added_.token(id)) return &token->content;
  if (id < 0 || id >= model_size()) return nullptr;
  return &pieces_[id];
}

int64_t SentencePieceTokenizer::vocab_size() const { return std::max(model_size(), added_.max_id() + 1); }

bool SentencePieceTokenizer::is_special(int64_t id) const {
  if (id >= 0 && id < specials_.special_below) return true;
  const AddedToken* token = added_.token(id);
  return token != nullptr && token->special;
}

bool SentencePieceTokenizer::starts_word(int64_t id) const {
  if (added_.token(id) != nullptr || id < 0 || id >= model_size()) return false;
  return pieces_[id].rfind("\xE2\x96\x81", 0) == 0;
}

}  // namespace zoo
