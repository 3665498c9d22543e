#pragma once
// Text files to token files: the user's text, read line by line, tokenized and streamed into
// OUT_DIR/train.tokens and OUT_DIR/val.tokens (data/token_file.h's format).

#include <cstdint>
#include <string>
#include <vector>

#include "data/token_file.h"
#include "tokenizers/tokenizer.h"

namespace zoo {

struct TokenizeOptions {
  double val_fraction = 0.05;  // documents that go to the validation file
  uint64_t seed = 0;           // which documents those are
  bool skip_invalid_utf8 = false;
};

struct TokenizeStats {
  int64_t train_documents = 0, val_documents = 0, train_tokens = 0, val_tokens = 0;
};

// Reads plain-text inputs (files or directories; documents are separated by blank lines),
// tokenizes them and writes OUT_DIR/train.tokens and OUT_DIR/val.tokens, streaming: memory stays
// bounded whatever the corpus size. Inputs without text are an error naming each empty file. A document goes to
// validation when a hash of (seed, its index) falls under val_fraction: deterministic, and
// spread across the corpus. Errors name the file and line (invalid UTF-8 with its byte offset).
TokenizeStats tokenize_to_files(const std::vector<std::string>& inputs, const Tokenizer& tokenizer,
                                const std::string& out_dir, const TokenizeOptions& options);

}  // namespace zoo
