#pragma once
// Hugging Face normalizers (tokenizers/src/normalizers/): rewrite text before pre-tokenization.
// Read from tokenizer.json's "normalizer"; a type zoo does not implement is refused naming its
// JSON path, never approximated.

#include <memory>
#include <string>
#include <vector>

#include "core/enum_names.h"
#include "core/json_view.h"
#include "core/regex.h"
#include "tokenizers/precompiled_charsmap.h"
#include "tokenizers/text_piece.h"

namespace zoo {

enum class NormalizerKind {
  kNfc, kNfd, kNfkc, kNfkd,  // Unicode normalization forms
  kLowercase,
  kStripAccents,  // removes combining marks (M*); meant to follow NFD/NFKD
  kBert,          // BERT's clean-up, CJK spacing, accent stripping and lowercasing
  kReplace,       // every match of a pattern replaced by a string
  kPrepend,       // a string put before non-empty text
  kStrip,         // White_Space removed from the left and/or right end
  kPrecompiled,   // a SentencePiece model's compiled rules (precompiled_charsmap)
  kSequence,      // children in order
};
ZOO_ENUM_NAMES(NormalizerKind, "normalizer",
               {"NFC", NormalizerKind::kNfc}, {"NFD", NormalizerKind::kNfd}, {"NFKC", NormalizerKind::kNfkc},
               {"NFKD", NormalizerKind::kNfkd}, {"Lowercase", NormalizerKind::kLowercase},
               {"StripAccents", NormalizerKind::kStripAccents}, {"BertNormalizer", NormalizerKind::kBert},
               {"Replace", NormalizerKind::kReplace}, {"Prepend", NormalizerKind::kPrepend},
               {"Strip", NormalizerKind::kStrip}, {"Precompiled", NormalizerKind::kPrecompiled},
               {"Sequence", NormalizerKind::kSequence});

struct Normalizer {
  NormalizerKind kind = NormalizerKind::kSequence;

  // kBert. strip_accents follows lowercase when the file leaves it null.
  bool clean_text = true;            // drop NUL, U+FFFD and controls; whitespace becomes ' '
  bool handle_chinese_chars = true;  // spaces around CJK ideographs
  bool strip_accents = true;
  bool lowercase = true;
  // kStrip
  bool strip_left = false, strip_right = false;
  // kReplace: `pattern` (a literal String or a Regex) replaced by `content`.
  std::shared_ptr<const Regex> pattern;
  std::string content;
  // kPrepend
  std::string prepend;
  // kPrecompiled
  std::shared_ptr<const PrecompiledCharsmap> charsmap;
  // kSequence
  std::vector<Normalizer> children;

  // Reads one normalizer object (tokenizers' serialized form, "type" naming the kind).
  static Normalizer from_json(const JsonView& json);

  // Normalizes `piece.text` (valid UTF-8) in place; `piece.at_input_start` becomes false when
  // the text's first character is dropped. The text may grow to 16 times its size and 4 KiB more
  // (at most 64 MiB): past that (64 chained Replace a -> aa) is an error naming the normalizer.
  void apply(TextPiece& piece) const;
  // apply() with that bound given: a Sequence's children share their parent's.
  void apply_within(TextPiece& piece, size_t max_bytes) const;
};

// A pattern as tokenizers serializes it: {"String": "literal"} or {"Regex": "pattern"} (read by
// the Replace normalizer and decoder and the Split pre-tokenizer).
std::shared_ptr<const Regex> read_pattern(const JsonView& json);

// BERT's CJK ideograph blocks (the code point ranges of tokenizers' normalizers/bert.rs and of
// google-research/bert's tokenization.py, which define the BERT tokenizers).
bool is_bert_chinese_char(char32_t c);

}  // namespace zoo
