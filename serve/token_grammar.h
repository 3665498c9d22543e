#pragma once
// Structured output (response_format): an answer held to a grammar over the tokenizer's tokens,
// as vLLM and SGLang hold theirs, through xgrammar's C++ core. A JSON schema, or any JSON value,
// is compiled once per server and schema (TokenGrammars caches them); each row decoding under it
// keeps a matcher (TokenConstraint) that fills the bitmask of the tokens allowed next and takes
// the token chosen. The mask is applied where rows' tokens are chosen (choose_row_tokens).
// Torch-free.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/token_bitmask.h"
#include "serve/openai_api.h"
#include "tokenizers/tokenizer.h"

namespace zoo {

class TokenGrammar;  // a compiled grammar: shared by the rows decoding under it

class TokenGrammars {
 public:
  // `vocab`: the model's logits width (ids the tokenizer lacks are never allowed); `stop_ids`:
  // the tokens that end an answer (EOS), allowed once the grammar is complete. Throws
  // std::invalid_argument for a tokenizer whose tokens do not spell bytes (BERT's WordPiece).
  TokenGrammars(const Tokenizer& tokenizer, int64_t vocab, std::vector<int64_t> stop_ids);
  ~TokenGrammars();
  // The grammar of `format` (kJsonObject or kJsonSchema), compiled once per schema text. Throws
  // std::invalid_argument with xgrammar's reason for a schema it cannot compile.
  std::shared_ptr<const TokenGrammar> compile(const ResponseFormat& format);
  // Each token's bytes as the grammar reads them: empty for special tokens, which no grammar allows.
  const std::vector<std::string>& token_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One row's place in its grammar.
class TokenConstraint {
 public:
  explicit TokenConstraint(std::shared_ptr<const TokenGrammar> grammar);
  ~TokenConstraint();
  TokenConstraint(TokenConstraint&&) noexcept;
  TokenConstraint& operator=(TokenConstraint&&) noexcept;
  // The tokens allowed next (core/token_bitmask.h), over the model's vocab.
  const std::vector<int32_t>& allowed();
  // Takes `token`; false when the grammar does not allow it.
  bool accept(int64_t token);
  // The grammar is complete and its stop token taken (or, with no stop token, complete).
  bool terminated() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zoo
