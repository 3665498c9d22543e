#include "tokenizers/pre_tokenizers.h"

#include <algorithm>

#include "core/unicode.h"
#include "tokenizers/byte_level.h"
#include "tokenizers/normalizers.h"

namespace zoo {
namespace {

// Each character `is_delimiter` accepts is a match of its own; the runs between are gaps
// (tokenizers' Pattern for Fn(char) -> bool).
template <typename IsDelimiter>
std::vector<MatchSpan> char_spans(const std::string& text, IsDelimiter is_delimiter) {
  if (text.empty()) return {{0, 0, false}};
  std::vector<MatchSpan> spans;
  size_t gap_start = 0;
  for (size_t i = 0; i < text.size();) {
    const auto [c, n] = unicode::decode_at(text, i);
    if (is_delimiter(c)) {
      if (gap_start < i) spans.push_back({gap_start, i, false});
      spans.push_back({i, i + n, true});
      gap_start = i + n;
    }
    i += n;
  }
  if (gap_start < text.size()) spans.push_back({gap_start, text.size(), false});
  return spans;
}

std::vector<MatchSpan> inverted(std::vector<MatchSpan> spans) {
  for (auto& s : spans) s.is_match = !s.is_match;
  return spans;
}

// Applies `split_piece` to every piece that is not an added token (PreTokenizedString::split).
template <typename SplitPiece>
void split_each(TextPieces& pieces, SplitPiece split_piece) {
  TextPieces out;
  out.reserve(pieces.size());
  for (auto& piece : pieces) {
    if (piece.is_token()) {
      out.push_back(std::move(piece));
      continue;
    }
    split_piece(piece, out);
  }
  pieces = std::move(out);
}

bool is_punctuation_char(char32_t c) { return unicode::is_ascii_punctuation(c) || unicode::is_punctuation(c); }

const Regex& gpt2_regex() {
  static const Regex regex(kGpt2SplitPattern, "GPT-2's split pattern");
  return regex;
}

const Regex& whitespace_regex() {
  // tokenizers' Whitespace pre-tokenizer: words and runs of other non-space characters.
  static const Regex regex(R"(\w+|[^\w\s]+)", "the Whitespace pre-tokenizer's pattern");
  return regex;
}

void apply_byte_level(const PreTokenizer& p, TextPieces& pieces) {
  split_each(pieces, [&](TextPiece& piece, TextPieces& out) {
    if (p.add_prefix_space && piece.text.rfind(' ', 0) != 0) piece.text.insert(0, 1, ' ');
    if (p.use_regex) {
      split_spans(piece, gpt2_regex().spans(piece.text), SplitBehavior::kIsolated, out);
    } else if (!piece.text.empty()) {
      out.push_back(std::move(piece));
    }
  });
  for (auto& piece : pieces) {
    if (!piece.is_token()) piece.text = to_byte_level(piece.text);
  }
}

void apply_metaspace(const PreTokenizer& p, TextPieces& pieces) {
  split_each(pieces, [&](TextPiece& piece, TextPieces& out) {
    std::string text;
    text.reserve(piece.text.size() + 8);
    for (char c : piece.text) {
      if (c == ' ') text += p.replacement_utf8;
      else text += c;
    }
    const bool starts_with_marker = text.rfind(p.replacement_utf8, 0) == 0;
    switch (p.prepend_scheme) {
      case PrependScheme::kAlways:
        if (!starts_with_marker) text.insert(0, p.replacement_utf8);
        break;
      case PrependScheme::kFirst:
        if (!starts_with_marker && piece.at_input_start) text.insert(0, p.replacement_utf8);
        break;
      case PrependScheme::kNever:
        break;
    }
    piece.text = std::move(text);
    if (p.split) {
      const char32_t marker = p.replacement;
      split_spans(piece, char_spans(piece.text, [marker](char32_t c) { return c == marker; }),
                  SplitBehavior::kMergedWithNext, out);
    } else if (!piece.text.empty()) {
      out.push_back(std::move(piece));
    }
  });
}

PreTokenizerKind kind_from_json(const JsonView& type) {
  return enum_from_json<PreTokenizerKind>(type);
}

PrependScheme prepend_scheme_from_json(const JsonView& json) {
  return enum_from_json<PrependScheme>(json);
}

}  // namespace

SplitBehavior split_behavior_from_json(const JsonView& json) {
  return enum_from_json<SplitBehavior>(json);
}

void split_spans(const TextPiece& piece, const std::vector<MatchSpan>& spans, SplitBehavior behavior,
                 TextPieces& out) {
  // (begin, end, remove) after the behavior has merged delimiters into their neighbours.
  struct Cut {
    size_t begin, end;
    bool remove;
  };
  std::vector<Cut> cuts;
  cuts.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const auto& s : spans) cuts.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::kRemoved:
      for (const auto& s : spans) cuts.push_back({s.begin, s.end, s.is_match});
      break;
    case SplitBehavior::kContiguous:
      for (const auto& s : spans) {
        if (s.is_match == previous_match && !cuts.empty()) cuts.back().end = s.end;
        else cuts.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& s : spans) {
        if (s.is_match && !previous_match && !cuts.empty()) cuts.back().end = s.end;
        else cuts.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      // A delimiter joins the piece after it: the same fold, walking backwards.
      for (auto s = spans.rbegin(); s != spans.rend(); ++s) {
        if (s->is_match && !previous_match && !cuts.empty()) cuts.back().begin = s->begin;
        else cuts.push_back({s->begin, s->end, false});
        previous_match = s->is_match;
      }
      std::reverse(cuts.begin(), cuts.end());
      break;
  }
  for (const auto& cut : cuts) {
    if (cut.remove || cut.begin == cut.end) continue;
    TextPiece p;
    p.text = piece.text.substr(cut.begin, cut.end - cut.begin);
    p.at_input_start = piece.at_input_start && cut.begin == 0;
    out.push_back(std::move(p));
  }
}

PreTokenizer PreTokenizer::from_json(const JsonView& json) {
  PreTokenizer p;
  p.kind = kind_from_json(json.at("type"));
  switch (p.kind) {
    case PreTokenizerKind::kByteLevel:
      p.add_prefix_space = json.bool_at("add_prefix_space");
      json.bool_at("trim_offsets");  // required by tokenizers; it only moves offsets
      p.use_regex = json.bool_or("use_regex", true);
      break;
    case PreTokenizerKind::kBert:
    case PreTokenizerKind::kWhitespace:
    case PreTokenizerKind::kWhitespaceSplit:
      break;
    case PreTokenizerKind::kMetaspace: {
      p.replacement = json.at("replacement").as_char();
      p.replacement_utf8 = unicode::to_utf8(p.replacement);
      p.prepend_scheme = json.has("prepend_scheme") ? prepend_scheme_from_json(json.at("prepend_scheme"))
                                                    : PrependScheme::kAlways;
      // Files written before prepend_scheme existed say add_prefix_space instead.
      if (json.has("add_prefix_space") && !json.bool_at("add_prefix_space")) {
        if (p.prepend_scheme != PrependScheme::kNever) {
          json.at("add_prefix_space").fail("false contradicts prepend_scheme (which must then be 'never')");
        }
        p.prepend_scheme = PrependScheme::kNever;
      }
      p.split = json.bool_or("split", true);
      break;
    }
    case PreTokenizerKind::kDigits:
      p.individual_digits = json.bool_at("individual_digits");
      break;
    case PreTokenizerKind::kPunctuation:
      p.behavior = json.has("behavior") ? split_behavior_from_json(json.at("behavior")) : SplitBehavior::kIsolated;
      break;
    case PreTokenizerKind::kSplit:
      p.pattern = read_pattern(json.at("pattern"));
      p.behavior = split_behavior_from_json(json.at("behavior"));
      p.invert = json.bool_at("invert");
      break;
    case PreTokenizerKind::kSequence:
      for (const auto& child : json.at("pretokenizers").elements()) p.children.push_back(from_json(child));
      break;
  }
  return p;
}

void PreTokenizer::apply(TextPieces& pieces) const {
  switch (kind) {
    case PreTokenizerKind::kByteLevel:
      apply_byte_level(*this, pieces);
      break;
    case PreTokenizerKind::kBert:
      split_each(pieces, [](const TextPiece& piece, TextPieces& out) {
        split_spans(piece, char_spans(piece.text, unicode::is_white_space), SplitBehavior::kRemoved, out);
      });
      split_each(pieces, [](const TextPiece& piece, TextPieces& out) {
        split_spans(piece, char_spans(piece.text, is_punctuation_char), SplitBehavior::kIsolated, out);
      });
      break;
    case PreTokenizerKind::kWhitespace:
      split_each(pieces, [](const TextPiece& piece, TextPieces& out) {
        split_spans(piece, inverted(whitespace_regex().spans(piece.text)), SplitBehavior::kRemoved, out);
      });
      break;
    case PreTokenizerKind::kWhitespaceSplit:
      split_each(pieces, [](const TextPiece& piece, TextPieces& out) {
        split_spans(piece, char_spans(piece.text, unicode::is_white_space), SplitBehavior::kRemoved, out);
      });
      break;
    case PreTokenizerKind::kMetaspace:
      apply_metaspace(*this, pieces);
      break;
    case PreTokenizerKind::kDigits: {
      const auto behavior = individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
      split_each(pieces, [behavior](const TextPiece& piece, TextPieces& out) {
        split_spans(piece, char_spans(piece.text, unicode::is_number), behavior, out);
      });
      break;
    }
    case PreTokenizerKind::kPunctuation:
      split_each(pieces, [this](const TextPiece& piece, TextPieces& out) {
        split_spans(piece, char_spans(piece.text, is_punctuation_char), behavior, out);
      });
      break;
    case PreTokenizerKind::kSplit:
      split_each(pieces, [this](const TextPiece& piece, TextPieces& out) {
        auto spans = pattern->spans(piece.text);
        split_spans(piece, invert ? inverted(std::move(spans)) : spans, behavior, out);
      });
      break;
    case PreTokenizerKind::kSequence:
      for (const auto& child : children) child.apply(pieces);
      break;
  }
}

}  // namespace zoo
