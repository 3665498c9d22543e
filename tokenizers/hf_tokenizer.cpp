#include "tokenizers/hf_tokenizer.h"

#include <algorithm>
#include <stdexcept>

#include "core/unicode.h"
#include "tokenizers/byte_level.h"

namespace zoo {
namespace {

HfModelKind model_kind_from_json(const JsonView& type) {
  return enum_from_json<HfModelKind>(type);
}

// Whether a pre-tokenizer (or one of its children) is of `kind`; the first such one.
const PreTokenizer* find_pre_tokenizer(const PreTokenizer& p, PreTokenizerKind kind) {
  if (p.kind == kind) return &p;
  for (const auto& child : p.children) {
    if (const PreTokenizer* found = find_pre_tokenizer(child, kind)) return found;
  }
  return nullptr;
}

// The marker a normalizer writes for spaces (Replace " " -> "▁" or Prepend "▁"), if any.
std::string normalizer_space_marker(const Normalizer& n) {
  switch (n.kind) {
    case NormalizerKind::kReplace:
      return n.pattern->pattern() == " " ? n.content : "";
    case NormalizerKind::kPrepend:
      return n.prepend;
    case NormalizerKind::kSequence:
      for (const auto& child : n.children) {
        if (std::string m = normalizer_space_marker(child); !m.empty()) return m;
      }
      return "";
    case NormalizerKind::kNfc: case NormalizerKind::kNfd: case NormalizerKind::kNfkc: case NormalizerKind::kNfkd:
    case NormalizerKind::kLowercase: case NormalizerKind::kStripAccents: case NormalizerKind::kBert:
    case NormalizerKind::kStrip: case NormalizerKind::kPrecompiled:
      return "";
  }
  return "";
}

AddedToken added_token_from_json(const JsonView& json) {
  AddedToken t;
  t.content = json.string_at("content");
  t.single_word = json.bool_at("single_word");
  t.lstrip = json.bool_at("lstrip");
  t.rstrip = json.bool_at("rstrip");
  t.normalized = json.bool_at("normalized");
  t.special = json.bool_at("special");
  json.int_at("id");  // tokenizers recomputes the id (and only warns when they differ)
  return t;
}

}  // namespace

HfModel HfModel::from_json(const JsonView& json) {
  HfModel m;
  m.kind = model_kind_from_json(json.at("type"));
  switch (m.kind) {
    case HfModelKind::kBpe: m.bpe = std::make_shared<const BpeModel>(BpeModel::from_json(json)); break;
    case HfModelKind::kWordPiece:
      m.wordpiece = std::make_shared<const WordPieceModel>(WordPieceModel::from_json(json));
      break;
    case HfModelKind::kUnigram: m.unigram = std::make_shared<const UnigramModel>(UnigramModel::from_json(json)); break;
  }
  return m;
}

void HfModel::tokenize(const std::string& piece, std::vector<int64_t>& out) const {
  switch (kind) {
    case HfModelKind::kBpe: bpe->tokenize(piece, out); break;
    case HfModelKind::kWordPiece: wordpiece->tokenize(piece, out); break;
    case HfModelKind::kUnigram: unigram->tokenize(piece, out); break;
  }
}

std::optional<int64_t> HfModel::token_to_id(const std::string& token) const {
  switch (kind) {
    case HfModelKind::kBpe: return bpe->vocabulary().find(token);
    case HfModelKind::kWordPiece: return wordpiece->vocabulary().find(token);
    case HfModelKind::kUnigram: return unigram->token_to_id(token);
  }
  return std::nullopt;
}

const std::string* HfModel::id_to_token(int64_t id) const {
  switch (kind) {
    case HfModelKind::kBpe: return bpe->vocabulary().token(id);
    case HfModelKind::kWordPiece: return wordpiece->vocabulary().token(id);
    case HfModelKind::kUnigram: return unigram->id_to_token(id);
  }
  return nullptr;
}

int64_t HfModel::size() const {
  switch (kind) {
    case HfModelKind::kBpe: return bpe->vocabulary().size();
    case HfModelKind::kWordPiece: return wordpiece->vocabulary().size();
    case HfModelKind::kUnigram: return unigram->size();
  }
  return 0;
}

int64_t HfModel::max_id() const {
  switch (kind) {
    case HfModelKind::kBpe: return bpe->vocabulary().max_id();
    case HfModelKind::kWordPiece: return wordpiece->vocabulary().max_id();
    case HfModelKind::kUnigram: return unigram->size() - 1;
  }
  return -1;
}

std::optional<std::string> HfModel::unk_token() const {
  switch (kind) {
    case HfModelKind::kBpe: return bpe->options().unk_token;
    case HfModelKind::kWordPiece: return wordpiece->options().unk_token;
    case HfModelKind::kUnigram:
      if (!unigram->unk_id()) return std::nullopt;
      return *unigram->id_to_token(*unigram->unk_id());
  }
  return std::nullopt;
}

HfTokenizer::HfTokenizer(HfPipelineParts parts) : parts_(std::move(parts)) {
  const Normalizer* normalizer = parts_.normalizer ? &*parts_.normalizer : nullptr;
  AddedVocabulary::Normalize normalize;
  if (normalizer != nullptr) {
    normalize = [normalizer](const std::string& content) {
      TextPiece piece{content, true, -1};
      normalizer->apply(piece);
      return piece.text;
    };
  }
  // Tokens at stated ids first (transformers registers its added_tokens_decoder before the
  // special tokens); a tokenizer.json has only tokens by content.
  if (!parts_.added_tokens_with_ids.empty()) added_.add_with_ids(parts_.added_tokens_with_ids, normalize);
  added_.add(
      parts_.added_tokens, [this](const std::string& t) { return parts_.model.token_to_id(t); }, parts_.model.size(),
      normalize);
  switch (parts_.model.kind) {
    case HfModelKind::kWordPiece:
      continuation_prefix_ = parts_.model.wordpiece->options().continuing_subword_prefix;
      break;
    case HfModelKind::kBpe:
      continuation_prefix_ = parts_.model.bpe->options().continuing_subword_prefix;
      break;
    case HfModelKind::kUnigram:
      break;
  }
  if (continuation_prefix_.empty()) {
    if (parts_.pre_tokenizer) {
      if (find_pre_tokenizer(*parts_.pre_tokenizer, PreTokenizerKind::kByteLevel)) {
        word_start_marker_ = byte_level_chars()[' '];
      } else if (const PreTokenizer* m = find_pre_tokenizer(*parts_.pre_tokenizer, PreTokenizerKind::kMetaspace)) {
        word_start_marker_ = m->replacement_utf8;
      }
    }
    if (word_start_marker_.empty() && normalizer != nullptr) word_start_marker_ = normalizer_space_marker(*normalizer);
  }
}

HfTokenizer HfTokenizer::from_json(const std::string& json_text, const std::string& file) {
  const nlohmann::json document = JsonView::parse(json_text, file);
  const JsonView root(document, file);
  if (!document.is_object()) root.fail("expected an object");
  if (const auto version = root.find("version"); version && version->as_string() != "1.0") {
    version->fail("unknown tokenizer.json version '" + version->as_string() + "' (zoo reads 1.0)");
  }
  HfPipelineParts parts;
  parts.model = HfModel::from_json(root.at("model"));
  if (const auto n = root.find("normalizer")) parts.normalizer = Normalizer::from_json(*n);
  if (const auto p = root.find("pre_tokenizer")) parts.pre_tokenizer = PreTokenizer::from_json(*p);
  if (const auto p = root.find("post_processor")) parts.post_processor = PostProcessor::from_json(*p);
  if (const auto d = root.find("decoder")) parts.decoder = Decoder::from_json(*d);
  if (const auto added = root.find("added_tokens")) {
    for (const auto& t : added->elements()) parts.added_tokens.push_back(added_token_from_json(t));
  }
  return HfTokenizer(std::move(parts));
}

TextPieces HfTokenizer::pre_tokenize(const std::string& text) const {
  unicode::require_valid_utf8(text, "tokenizer input");
  TextPieces pieces{{text, true, -1}};
  added_.split(pieces, false);
  if (parts_.normalizer) {
    for (auto& piece : pieces) {
      if (!piece.is_token()) parts_.normalizer->apply(piece);
    }
  }
  added_.split(pieces, true);
  if (parts_.pre_tokenizer) parts_.pre_tokenizer->apply(pieces);
  return pieces;
}

std::vector<int64_t> HfTokenizer::encode_sequence(const std::string& text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3 + 1);
  for (const auto& piece : pre_tokenize(text)) {
    if (piece.is_token()) ids.push_back(piece.added_token);
    else parts_.model.tokenize(piece.text, ids);
  }
  return ids;
}

Encoding HfTokenizer::encode(const std::string& text, bool add_special_tokens) const {
  Encoding e;
  e.ids = encode_sequence(text);
  return post_process(parts_.post_processor ? &*parts_.post_processor : nullptr, std::move(e), nullptr,
                      add_special_tokens);
}

Encoding HfTokenizer::encode_pair(const std::string& first, const std::string& second, bool add_special_tokens) const {
  Encoding a, b;
  a.ids = encode_sequence(first);
  b.ids = encode_sequence(second);
  return post_process(parts_.post_processor ? &*parts_.post_processor : nullptr, std::move(a), &b, add_special_tokens);
}

std::vector<std::string> HfTokenizer::encode_tokens(const std::string& text) const {
  std::vector<std::string> tokens;
  for (int64_t id : encode_sequence(text)) tokens.push_back(*id_to_token(id));
  return tokens;
}

std::string HfTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    const std::string* token = id_to_token(id);
    if (token == nullptr) {
      throw std::runtime_error("tokenizer: id " + std::to_string(id) + " is not in the vocabulary (" +
                               std::to_string(vocab_size()) + " ids)");
    }
    // tokenizers skips by text: whatever reads as a special token's content.
    if (skip_special_tokens && added_.is_special_content(*token)) continue;
    tokens.push_back(*token);
  }
  return decode_tokens(parts_.decoder ? &*parts_.decoder : nullptr, std::move(tokens));
}

std::optional<int64_t> HfTokenizer::token_to_id(const std::string& token) const {
  if (const auto id = added_.token_to_id(token)) return id;
  return parts_.model.token_to_id(token);
}

const std::string* HfTokenizer::id_to_token(int64_t id) const {
  if (const std::string* t = added_.id_to_token(id)) return t;
  return parts_.model.id_to_token(id);
}

int64_t HfTokenizer::vocab_size() const { return std::max(parts_.model.max_id(), added_.max_id()) + 1; }

bool HfTokenizer::is_special(int64_t id) const {
  const AddedToken* t = added_.token(id);
  return t != nullptr && t->special;
}

bool HfTokenizer::starts_word(int64_t id) const {
  if (added_.token(id) != nullptr) return false;
  const std::string* token = parts_.model.id_to_token(id);
  if (token == nullptr) return false;
  if (!continuation_prefix_.empty()) return token->compare(0, continuation_prefix_.size(), continuation_prefix_) != 0;
  if (!word_start_marker_.empty()) return token->compare(0, word_start_marker_.size(), word_start_marker_) == 0;
  return false;
}

}  // namespace zoo
