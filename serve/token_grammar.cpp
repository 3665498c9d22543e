#include "serve/token_grammar.h"

#include <mutex>
#include <stdexcept>
#include <utility>

#include <dlpack/dlpack.h>
#include <xgrammar/xgrammar.h>

namespace zoo {

namespace {

// How the tokenizer's pieces spell bytes, as xgrammar reads a vocabulary: byte-level BPE's
// alphabet (GPT-2's 'Ġ' for a space), SentencePiece's U+2581 for a space with <0xHH> byte
// tokens, or the bytes themselves.
xgrammar::VocabType vocab_type(const Tokenizer& tokenizer) {
  switch (tokenizer.kind()) {
    case TokenizerBackend::kZooSentencePiece:
    case TokenizerBackend::kHfSentencePiece:
      return xgrammar::VocabType::BYTE_FALLBACK;
    case TokenizerBackend::kGpt2Files:
      return xgrammar::VocabType::BYTE_LEVEL;
    case TokenizerBackend::kBertVocab:
      throw std::invalid_argument(
          "structured output needs a tokenizer whose tokens spell bytes; a WordPiece vocab.txt's do not");
    case TokenizerBackend::kTokenizerJson:
      // Every byte-level BPE vocabulary has the alphabet's space; SentencePiece-style ones the
      // byte tokens or the word marker.
      if (tokenizer.token_to_id("\xC4\xA0")) return xgrammar::VocabType::BYTE_LEVEL;
      if (tokenizer.token_to_id("<0x0A>") || tokenizer.token_to_id("\xE2\x96\x81")) {
        return xgrammar::VocabType::BYTE_FALLBACK;
      }
      return xgrammar::VocabType::RAW;
  }
  throw std::logic_error("vocab_type: unknown tokenizer backend");
}

std::vector<int32_t> int32_ids(const std::vector<int64_t>& ids) { return {ids.begin(), ids.end()}; }

// Whitespace between a value's tokens is free, as in any JSON, but at most this many blanks in a
// row (llama.cpp's JSON grammar allows a newline and 20): a weak model spends no tokens on more.
constexpr int kMaxBlanks = 20;

}  // namespace

class TokenGrammar {
 public:
  TokenGrammar(xgrammar::CompiledGrammar compiled, std::vector<int32_t> stop_ids, int32_t vocab)
      : compiled(std::move(compiled)), stop_ids(std::move(stop_ids)), vocab(vocab) {}
  xgrammar::CompiledGrammar compiled;
  std::vector<int32_t> stop_ids;
  int32_t vocab;
};

struct TokenGrammars::Impl {
  Impl(xgrammar::TokenizerInfo info, std::vector<int32_t> stops, int32_t vocab)
      : info(std::move(info)), stop_ids(std::move(stops)), vocab(vocab),
        // One thread: a schema compiles on the request's own thread, beside the decoding one.
        compiler(this->info, 1, true) {}
  xgrammar::TokenizerInfo info;
  std::vector<int32_t> stop_ids;
  int32_t vocab;
  std::mutex mutex;  // compiler and cache
  xgrammar::GrammarCompiler compiler;
  std::vector<std::string> bytes;
};

TokenGrammars::TokenGrammars(const Tokenizer& tokenizer, int64_t vocab, std::vector<int64_t> stop_ids) {
  const auto type = vocab_type(tokenizer);
  const int64_t tokens = std::min(tokenizer.vocab_size(), vocab);
  std::vector<std::string> pieces(static_cast<size_t>(tokens));
  // A token that adds no text after another (SentencePiece's control and unused pieces) is
  // special too, whatever the tokenizer's config says.
  const auto anchor = tokenizer.encode("a");
  const std::string before = anchor.size() == 1 ? tokenizer.decode(anchor) : "";
  for (int64_t id = 0; id < tokens; ++id) {
    // Special tokens (and ids with no token) are empty: xgrammar never allows an empty token.
    if (tokenizer.is_special(id)) continue;
    if (anchor.size() == 1 && tokenizer.decode({anchor[0], id}).size() == before.size()) continue;
    try {
      pieces[static_cast<size_t>(id)] = tokenizer.piece(id);
    } catch (const std::exception&) {
    }
  }
  auto stops = int32_ids(stop_ids);
  xgrammar::TokenizerInfo info(pieces, type, static_cast<int>(vocab), stops);
  impl_ = std::make_unique<Impl>(std::move(info), std::move(stops), static_cast<int32_t>(vocab));
  impl_->bytes = impl_->info.GetDecodedVocab();
  for (int32_t id : impl_->info.GetSpecialTokenIds()) {
    if (id < static_cast<int32_t>(impl_->bytes.size())) impl_->bytes[static_cast<size_t>(id)].clear();
  }
}

TokenGrammars::~TokenGrammars() = default;

const std::vector<std::string>& TokenGrammars::token_bytes() const { return impl_->bytes; }

std::shared_ptr<const TokenGrammar> TokenGrammars::compile(const ResponseFormat& format) {
  std::lock_guard lock(impl_->mutex);
  try {
    switch (format.kind) {
      case ResponseFormatKind::kText:
        throw std::invalid_argument("TokenGrammars::compile: plain text has no grammar");
      case ResponseFormatKind::kJsonObject:
        // An object with any members (OpenAI's json_object), not any JSON value: a schema that
        // leaves additional properties open (xgrammar's strict mode would close them).
        return std::make_shared<TokenGrammar>(
            impl_->compiler.CompileJSONSchema(R"({"type": "object"})", true, std::nullopt, std::nullopt, false,
                                              kMaxBlanks),
            impl_->stop_ids, impl_->vocab);
      case ResponseFormatKind::kJsonSchema:
        return std::make_shared<TokenGrammar>(
            impl_->compiler.CompileJSONSchema(format.schema, true, std::nullopt, std::nullopt, true, kMaxBlanks),
            impl_->stop_ids, impl_->vocab);
    }
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const std::exception& e) {
    throw std::invalid_argument(e.what());
  }
  throw std::logic_error("TokenGrammars::compile: unknown response format");
}

struct TokenConstraint::Impl {
  explicit Impl(std::shared_ptr<const TokenGrammar> g)
      : grammar(std::move(g)),
        matcher(grammar->compiled,
                grammar->stop_ids.empty() ? std::nullopt : std::optional<std::vector<int32_t>>(grammar->stop_ids),
                grammar->stop_ids.empty()),
        mask(static_cast<size_t>(xgrammar::GetBitmaskSize(grammar->vocab))) {}
  std::shared_ptr<const TokenGrammar> grammar;
  xgrammar::GrammarMatcher matcher;
  std::vector<int32_t> mask;
};

TokenConstraint::TokenConstraint(std::shared_ptr<const TokenGrammar> grammar)
    : impl_(std::make_unique<Impl>(std::move(grammar))) {}
TokenConstraint::~TokenConstraint() = default;
TokenConstraint::TokenConstraint(TokenConstraint&&) noexcept = default;
TokenConstraint& TokenConstraint::operator=(TokenConstraint&&) noexcept = default;

const std::vector<int32_t>& TokenConstraint::allowed() {
  int64_t shape = static_cast<int64_t>(impl_->mask.size());
  DLTensor tensor{};
  tensor.data = impl_->mask.data();
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = 1;
  tensor.dtype = DLDataType{kDLInt, 32, 1};
  tensor.shape = &shape;
  tensor.strides = nullptr;
  tensor.byte_offset = 0;
  impl_->matcher.FillNextTokenBitmask(&tensor);
  return impl_->mask;
}

bool TokenConstraint::accept(int64_t token) {
  if (token < 0 || token >= impl_->grammar->vocab) return false;
  return impl_->matcher.AcceptToken(static_cast<int32_t>(token));
}

bool TokenConstraint::terminated() const { return impl_->matcher.IsTerminated(); }

}  // namespace zoo
