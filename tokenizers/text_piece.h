#pragma once
// A piece of input text on its way through a Hugging Face pipeline: added tokens are cut out
// first, then normalizers rewrite and pre-tokenizers split what is left, and the model turns
// each remaining piece into ids (tokenizers' PreTokenizedString and its splits).

#include <cstdint>
#include <string>
#include <vector>

namespace zoo {

struct TextPiece {
  std::string text;  // UTF-8
  // Whether the piece begins where the original input began. Metaspace's "first" prepend
  // scheme adds its marker only there (tokenizers tracks this through offset alignments).
  bool at_input_start = false;
  // The id of the added token this piece is, or -1 for text still to be tokenized.
  int64_t added_token = -1;

  bool is_token() const { return added_token >= 0; }
};

using TextPieces = std::vector<TextPiece>;

}  // namespace zoo
