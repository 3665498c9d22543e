#pragma once
// Hugging Face pre-tokenizers (tokenizers/src/pre_tokenizers/): split normalized text into the
// pieces the model tokenizes one by one. Read from tokenizer.json's "pre_tokenizer"; a type zoo
// does not implement is refused naming its JSON path.

#include <memory>
#include <string>
#include <vector>

#include "core/enum_names.h"
#include "core/json_view.h"
#include "core/regex.h"
#include "tokenizers/text_piece.h"

namespace zoo {

// What happens to the delimiters a split finds (tokenizers' SplitDelimiterBehavior). With '-'
// on "the-final--countdown":
//   kRemoved             the | final | countdown
//   kIsolated            the | - | final | - | - | countdown
//   kMergedWithPrevious  the- | final- | - | countdown
//   kMergedWithNext      the | -final | - | -countdown
//   kContiguous          the | - | final | -- | countdown
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
ZOO_ENUM_NAMES(SplitBehavior, "split behavior",
               {"Removed", SplitBehavior::kRemoved}, {"Isolated", SplitBehavior::kIsolated},
               {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
               {"MergedWithNext", SplitBehavior::kMergedWithNext}, {"Contiguous", SplitBehavior::kContiguous});

// Where Metaspace puts its marker before a piece.
enum class PrependScheme {
  kFirst,   // only before the piece that starts the input
  kNever,
  kAlways,  // before every piece that does not already start with it
};
ZOO_ENUM_NAMES(PrependScheme, "prepend_scheme",
               {"first", PrependScheme::kFirst}, {"never", PrependScheme::kNever}, {"always", PrependScheme::kAlways});

enum class PreTokenizerKind {
  kByteLevel,        // GPT-2: optional leading space, GPT-2's regex split, bytes -> alphabet
  kBert,             // split on whitespace (removed) and punctuation (isolated)
  kWhitespace,       // runs of \w and of [^\w\s]; whitespace removed
  kWhitespaceSplit,  // split on whitespace, removed
  kMetaspace,        // spaces -> a marker (U+2581), marker prepended, split before markers
  kDigits,           // digits isolated, singly or as runs
  kPunctuation,      // punctuation (P* and ASCII punctuation) split off
  kSplit,            // split on a pattern, optionally inverted
  kSequence,         // children in order
};
ZOO_ENUM_NAMES(PreTokenizerKind, "pre-tokenizer",
               {"ByteLevel", PreTokenizerKind::kByteLevel}, {"BertPreTokenizer", PreTokenizerKind::kBert},
               {"Whitespace", PreTokenizerKind::kWhitespace},
               {"WhitespaceSplit", PreTokenizerKind::kWhitespaceSplit}, {"Metaspace", PreTokenizerKind::kMetaspace},
               {"Digits", PreTokenizerKind::kDigits}, {"Punctuation", PreTokenizerKind::kPunctuation},
               {"Split", PreTokenizerKind::kSplit}, {"Sequence", PreTokenizerKind::kSequence});

struct PreTokenizer {
  PreTokenizerKind kind = PreTokenizerKind::kSequence;

  // kByteLevel. trim_offsets only moves offsets, which zoo does not report.
  bool add_prefix_space = true;
  bool use_regex = true;
  // kMetaspace
  char32_t replacement = 0x2581;
  std::string replacement_utf8 = "\xE2\x96\x81";
  PrependScheme prepend_scheme = PrependScheme::kAlways;
  bool split = true;
  // kDigits
  bool individual_digits = false;
  // kPunctuation, kSplit
  SplitBehavior behavior = SplitBehavior::kIsolated;
  // kSplit
  std::shared_ptr<const Regex> pattern;
  bool invert = false;
  // kSequence
  std::vector<PreTokenizer> children;

  static PreTokenizer from_json(const JsonView& json);

  // Splits every piece that is not an added token; empty pieces are dropped.
  void apply(TextPieces& pieces) const;
};

// Cuts `text` at `spans` (matches and gaps covering it) as `behavior` says; the cut-off pieces
// are appended to `out`, empty ones dropped, and only a piece beginning at the text's first
// byte keeps `at_input_start`.
void split_spans(const TextPiece& piece, const std::vector<MatchSpan>& spans, SplitBehavior behavior,
                 TextPieces& out);

SplitBehavior split_behavior_from_json(const JsonView& json);

}  // namespace zoo
