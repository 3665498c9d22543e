#pragma once
// Lines of text to lines of token ids (or pieces) and back, as `zoo tokenizer encode|decode`
// read and write them: one output line per input line, ids separated by spaces.

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizers/tokenizer.h"

namespace zoo {

// "412 9 77" (or the pieces with `pieces`). `where` ("file:line") names a line that is not
// UTF-8, with the byte offset.
std::string encode_line(const Tokenizer& tokenizer, const std::string& line, bool pieces, const std::string& where);

// The ids of a line of whitespace-separated integers; throws naming `where` and the word that is
// not a token id of the tokenizer's vocabulary.
std::vector<int64_t> parse_token_ids(const std::string& line, int64_t vocab_size, const std::string& where);

}  // namespace zoo
