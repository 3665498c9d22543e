#pragma once
// Hugging Face decoders (tokenizers/src/decoders/): turn the tokens of ids back into text.
// Each decoder rewrites the list of token strings; the result is joined without separators.
// Read from tokenizer.json's "decoder"; a type zoo does not implement is refused naming its
// JSON path.

#include <memory>
#include <string>
#include <vector>

#include "core/enum_names.h"
#include "core/json_view.h"
#include "core/regex.h"
#include "tokenizers/pre_tokenizers.h"

namespace zoo {

enum class DecoderKind {
  kByteLevel,     // alphabet characters -> bytes, decoded as UTF-8 (invalid bytes -> U+FFFD)
  kWordPiece,     // "##" continuations joined, spaces between words, optional clean-up
  kMetaspace,     // the marker -> a space (dropped at the very start unless prepend is never)
  kByteFallback,  // runs of <0xHH> tokens -> their UTF-8 text (U+FFFD per byte if invalid)
  kFuse,          // all tokens -> one
  kStrip,         // up to `start`/`stop` copies of a character cut from each token's ends
  kReplace,       // every match of a pattern replaced
  kBpe,           // the end-of-word suffix -> a space (nothing after the last token)
  kSequence,      // children in order
};
ZOO_ENUM_NAMES(DecoderKind, "decoder",
               {"ByteLevel", DecoderKind::kByteLevel}, {"WordPiece", DecoderKind::kWordPiece},
               {"Metaspace", DecoderKind::kMetaspace}, {"ByteFallback", DecoderKind::kByteFallback},
               {"Fuse", DecoderKind::kFuse}, {"Strip", DecoderKind::kStrip}, {"Replace", DecoderKind::kReplace},
               {"BPEDecoder", DecoderKind::kBpe}, {"Sequence", DecoderKind::kSequence});

struct Decoder {
  DecoderKind kind = DecoderKind::kSequence;

  // kWordPiece: prefix; kBpe: suffix.
  std::string affix;
  bool cleanup = true;  // kWordPiece: " ." -> ".", " n't" -> "n't" and the like
  // kMetaspace
  char32_t replacement = 0x2581;
  PrependScheme prepend_scheme = PrependScheme::kAlways;
  // kStrip
  char32_t strip_char = ' ';
  size_t strip_start = 0, strip_stop = 0;
  // kReplace
  std::shared_ptr<const Regex> pattern;
  std::string content;
  // kSequence
  std::vector<Decoder> children;

  static Decoder from_json(const JsonView& json);

  // tokenizers' decode_chain: the tokens after this decoder.
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const;
};

// Decodes tokens to text: through `decoder` and joined, or joined with spaces without one.
std::string decode_tokens(const Decoder* decoder, std::vector<std::string> tokens);

// The clean-up of WordPiece decoding (and of transformers' clean_up_tokenization).
std::string wordpiece_cleanup(std::string text);

}  // namespace zoo
