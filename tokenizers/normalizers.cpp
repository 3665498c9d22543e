#include "tokenizers/normalizers.h"

#include <algorithm>
#include <stdexcept>

#include "core/unicode.h"
#include "tokenizers/text_piece.h"

namespace zoo {
namespace {

// Bounds on what a tokenizer.json's normalizers may do to a text: each component string is
// short (real ones are a character or a word), and the normalized text stays within a size
// relative to the input's, so 64 chained Replace a->aa or a 10 MB Prepend is a named error, not
// memory or time exhausted. Real normalizers grow a text a little (NFKC's largest expansion of
// one character is 11 times its bytes).
constexpr size_t kMaxComponentString = 4096;
constexpr size_t kMaxNormalizedBytes = size_t{1} << 26;  // 64 MiB
constexpr size_t kMaxGrowth = 16, kGrowthAllowance = 4096;

void check_normalized_size(size_t bytes, const char* normalizer, size_t max_bytes) {
  if (bytes > max_bytes) {
    throw std::runtime_error(std::string("tokenizer.json: the ") + normalizer + " normalizer makes the text larger than " +
                             std::to_string(max_bytes) + " bytes (" +
                             (max_bytes == kMaxNormalizedBytes ? std::string("64 MiB, the most a text may become")
                                                               : "16 times the input's, and 4 KiB more") +
                             ")");
  }
}

std::string component_string(const JsonView& json, const std::string& key) {
  std::string s = json.string_at(key);
  if (s.size() > kMaxComponentString) {
    json.at(key).fail(std::to_string(s.size()) + " bytes, longer than the " + std::to_string(kMaxComponentString) +
                      " a normalizer's string may be");
  }
  return s;
}

// Keeps the characters `keep` accepts; the piece no longer starts at the input's start when
// its first character goes.
template <typename Keep>
void filter_chars(TextPiece& piece, Keep keep) {
  const std::string& in = piece.text;
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size();) {
    const auto [c, n] = unicode::decode_at(in, i);
    if (keep(c)) {
      out.append(in, i, n);
    } else if (i == 0) {
      piece.at_input_start = false;
    }
    i += n;
  }
  piece.text = std::move(out);
}

void lowercase_text(std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto [c, n] = unicode::decode_at(text, i);
    unicode::append_lowercase(out, c);
    i += n;
  }
  text = std::move(out);
}

void apply_bert(const Normalizer& n, TextPiece& piece) {
  if (n.clean_text) {
    // tokenizers' is_control: C* except tab, newline and carriage return, which are whitespace.
    filter_chars(piece, [](char32_t c) {
      const bool control = c != '\t' && c != '\n' && c != '\r' && unicode::is_other(c);
      return !(c == 0 || c == 0xFFFD || control);
    });
    std::string out;
    out.reserve(piece.text.size());
    for (size_t i = 0; i < piece.text.size();) {
      const auto [c, len] = unicode::decode_at(piece.text, i);
      if (unicode::is_white_space(c)) out += ' ';
      else out.append(piece.text, i, len);
      i += len;
    }
    piece.text = std::move(out);
  }
  if (n.handle_chinese_chars) {
    std::string out;
    out.reserve(piece.text.size());
    for (size_t i = 0; i < piece.text.size();) {
      const auto [c, len] = unicode::decode_at(piece.text, i);
      if (is_bert_chinese_char(c)) out += ' ';
      out.append(piece.text, i, len);
      if (is_bert_chinese_char(c)) out += ' ';
      i += len;
    }
    piece.text = std::move(out);
  }
  if (n.strip_accents) {
    piece.text = unicode::normalize(piece.text, unicode::NormalizationForm::kNfd);
    filter_chars(piece, [](char32_t c) { return !unicode::is_nonspacing_mark(c); });
  }
  if (n.lowercase) lowercase_text(piece.text);
}

void apply_replace(const Normalizer& n, TextPiece& piece, size_t max_bytes) {
  std::string out;
  out.reserve(piece.text.size());
  for (const auto& span : n.pattern->spans(piece.text)) {
    if (!span.is_match) {
      out.append(piece.text, span.begin, span.end - span.begin);
      continue;
    }
    out += n.content;
    check_normalized_size(out.size(), "Replace", max_bytes);
    // tokenizers aligns the replacement with the last replaced character, so a replaced run
    // of several characters at the front no longer begins at the input's start; nor does the
    // text when the replacement is empty.
    if (span.begin == 0 && span.end > 0) {
      const std::string matched = piece.text.substr(0, span.end);
      if (n.content.empty() || unicode::count_code_points(matched) > 1) piece.at_input_start = false;
    }
  }
  piece.text = std::move(out);
}

void apply_strip(const Normalizer& n, TextPiece& piece) {
  const std::string& t = piece.text;
  size_t begin = 0, end = t.size();
  if (n.strip_left) {
    while (begin < end) {
      const auto [c, len] = unicode::decode_at(t, begin);
      if (!unicode::is_white_space(c)) break;
      begin += len;
    }
  }
  if (n.strip_right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(t[start]) & 0xC0) == 0x80) --start;
      if (!unicode::is_white_space(unicode::decode_at(t, start).code_point)) break;
      end = start;
    }
  }
  if (begin > 0) piece.at_input_start = false;
  piece.text = t.substr(begin, end - begin);
}

NormalizerKind kind_from_json(const JsonView& type) {
  return enum_from_json<NormalizerKind>(type);
}

}  // namespace

bool is_bert_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::shared_ptr<const Regex> read_pattern(const JsonView& json) {
  const auto members = json.members();
  if (members.size() != 1) json.fail("expected {\"String\": ...} or {\"Regex\": ...}");
  const auto& [form, value] = members.front();
  const std::string where = json.file() + ": " + value.where();
  if (form == "String") return std::make_shared<const Regex>(Regex::literal(value.as_string(), where));
  if (form == "Regex") return std::make_shared<const Regex>(value.as_string(), where);
  value.fail("unsupported pattern form '" + form + "' (expected String or Regex)");
}

Normalizer Normalizer::from_json(const JsonView& json) {
  Normalizer n;
  n.kind = kind_from_json(json.at("type"));
  switch (n.kind) {
    case NormalizerKind::kNfc:
    case NormalizerKind::kNfd:
    case NormalizerKind::kNfkc:
    case NormalizerKind::kNfkd:
    case NormalizerKind::kLowercase:
    case NormalizerKind::kStripAccents:
      break;
    case NormalizerKind::kBert: {
      n.clean_text = json.bool_at("clean_text");
      n.handle_chinese_chars = json.bool_at("handle_chinese_chars");
      n.lowercase = json.bool_at("lowercase");
      n.strip_accents = json.bool_or("strip_accents", n.lowercase);
      break;
    }
    case NormalizerKind::kReplace:
      n.pattern = read_pattern(json.at("pattern"));
      n.content = component_string(json, "content");
      break;
    case NormalizerKind::kPrepend:
      n.prepend = component_string(json, "prepend");
      break;
    case NormalizerKind::kStrip:
      n.strip_left = json.bool_at("strip_left");
      n.strip_right = json.bool_at("strip_right");
      break;
    case NormalizerKind::kPrecompiled: {
      const auto charsmap = json.at("precompiled_charsmap");
      n.charsmap = std::make_shared<const PrecompiledCharsmap>(
          PrecompiledCharsmap::from_base64(charsmap.as_string(), json.file() + ": " + charsmap.where()));
      break;
    }
    case NormalizerKind::kSequence:
      for (const auto& child : json.at("normalizers").elements()) n.children.push_back(from_json(child));
      break;
  }
  return n;
}

void Normalizer::apply(TextPiece& piece) const {
  const size_t input = piece.text.size();
  apply_within(piece, input > kMaxNormalizedBytes / kMaxGrowth ? kMaxNormalizedBytes
                                                               : std::min(kMaxNormalizedBytes, kMaxGrowth * input + kGrowthAllowance));
}

void Normalizer::apply_within(TextPiece& piece, size_t max_bytes) const {
  switch (kind) {
    case NormalizerKind::kNfc: piece.text = unicode::normalize(piece.text, unicode::NormalizationForm::kNfc); break;
    case NormalizerKind::kNfd: piece.text = unicode::normalize(piece.text, unicode::NormalizationForm::kNfd); break;
    case NormalizerKind::kNfkc: piece.text = unicode::normalize(piece.text, unicode::NormalizationForm::kNfkc); break;
    case NormalizerKind::kNfkd: piece.text = unicode::normalize(piece.text, unicode::NormalizationForm::kNfkd); break;
    case NormalizerKind::kLowercase:
      lowercase_text(piece.text);
      break;
    case NormalizerKind::kStripAccents:
      filter_chars(piece, [](char32_t c) { return !unicode::is_mark(c); });
      break;
    case NormalizerKind::kBert:
      apply_bert(*this, piece);
      break;
    case NormalizerKind::kReplace:
      apply_replace(*this, piece, max_bytes);
      break;
    case NormalizerKind::kPrepend:
      if (piece.text.empty()) break;
      check_normalized_size(prepend.size() + piece.text.size(), "Prepend", max_bytes);  // before it is built
      piece.text = prepend + piece.text;
      break;
    case NormalizerKind::kStrip:
      apply_strip(*this, piece);
      break;
    case NormalizerKind::kPrecompiled:
      // tokenizers keeps the input's start on the first output character even when the first
      // grapheme maps to nothing, so at_input_start stands.
      piece.text = charsmap->normalize(piece.text);
      break;
    case NormalizerKind::kSequence:
      for (const auto& child : children) child.apply_within(piece, max_bytes);
      return;
  }
  check_normalized_size(piece.text.size(), to_string(kind).c_str(), max_bytes);
}

}  // namespace zoo
