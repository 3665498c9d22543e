#include "serve/token_grammar.h"

#include <array>
#include <mutex>
#include <optional>
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

// Where an answer's bytes stand in UTF-8: at a character boundary, or inside a character with the
// continuation bytes it still needs (the first of them narrowed after E0, ED, F0 and F4, which
// rules out overlong forms, surrogates and code points past U+10FFFF, as RFC 3629's table does).
// xgrammar 0.2.9 reads a pattern's `.` or `[^...]` as a character but lets overlong forms through
// (F0 80 93 9A came out of a walk), so every row under a grammar is also held to these states.
enum class Utf8State : uint8_t { kBoundary, kTail1, kTail2, kTail3, kAfterE0, kAfterED, kAfterF0, kAfterF4 };
constexpr int kUtf8States = 8;

// The state after `byte`, or nullopt where UTF-8 has no such byte.
std::optional<Utf8State> utf8_step(Utf8State state, uint8_t byte) {
  const bool tail = byte >= 0x80 && byte <= 0xBF;
  switch (state) {
    case Utf8State::kBoundary:
      if (byte <= 0x7F) return Utf8State::kBoundary;
      if (byte >= 0xC2 && byte <= 0xDF) return Utf8State::kTail1;
      if (byte == 0xE0) return Utf8State::kAfterE0;
      if (byte == 0xED) return Utf8State::kAfterED;
      if (byte >= 0xE1 && byte <= 0xEF) return Utf8State::kTail2;
      if (byte == 0xF0) return Utf8State::kAfterF0;
      if (byte >= 0xF1 && byte <= 0xF3) return Utf8State::kTail3;
      if (byte == 0xF4) return Utf8State::kAfterF4;
      return std::nullopt;
    case Utf8State::kTail1: return tail ? std::optional(Utf8State::kBoundary) : std::nullopt;
    case Utf8State::kTail2: return tail ? std::optional(Utf8State::kTail1) : std::nullopt;
    case Utf8State::kTail3: return tail ? std::optional(Utf8State::kTail2) : std::nullopt;
    case Utf8State::kAfterE0: return byte >= 0xA0 && byte <= 0xBF ? std::optional(Utf8State::kTail1) : std::nullopt;
    case Utf8State::kAfterED: return byte >= 0x80 && byte <= 0x9F ? std::optional(Utf8State::kTail1) : std::nullopt;
    case Utf8State::kAfterF0: return byte >= 0x90 && byte <= 0xBF ? std::optional(Utf8State::kTail2) : std::nullopt;
    case Utf8State::kAfterF4: return byte >= 0x80 && byte <= 0x8F ? std::optional(Utf8State::kTail2) : std::nullopt;
  }
  return std::nullopt;
}

// The state after a token's bytes; a token without bytes (a special one, the stop token) only
// at a boundary, so that no answer ends inside a character.
std::optional<Utf8State> utf8_after(Utf8State state, const std::string& bytes) {
  if (bytes.empty()) return state == Utf8State::kBoundary ? std::optional(state) : std::nullopt;
  std::optional<Utf8State> at = state;
  for (const char c : bytes) {
    at = utf8_step(*at, static_cast<uint8_t>(c));
    if (!at) break;
  }
  return at;
}

// Whitespace between a value's tokens is free, as in any JSON, but at most this many blanks in a
// row (llama.cpp's JSON grammar allows a newline and 20): a weak model spends no tokens on more.
constexpr int kMaxBlanks = 20;

}  // namespace

// For each UTF-8 state, the tokens that may follow it (a bitmask over the vocab): one table per
// tokenizer, shared by its grammars.
struct Utf8Tokens {
  Utf8Tokens(std::vector<std::string> token_bytes, int32_t vocab) : bytes(std::move(token_bytes)) {
    for (int s = 0; s < kUtf8States; ++s) {
      auto& mask = allowed[static_cast<size_t>(s)];
      mask.assign(static_cast<size_t>(xgrammar::GetBitmaskSize(vocab)), 0);
      for (int32_t t = 0; t < vocab; ++t) {
        const std::string none;
        const auto& token = t < static_cast<int32_t>(bytes.size()) ? bytes[static_cast<size_t>(t)] : none;
        if (utf8_after(static_cast<Utf8State>(s), token)) mask[static_cast<size_t>(t / 32)] |= int32_t(1u << (t % 32));
      }
    }
  }
  std::vector<std::string> bytes;  // each token's, as the grammar reads them
  std::array<std::vector<int32_t>, kUtf8States> allowed;
};

class TokenGrammar {
 public:
  TokenGrammar(xgrammar::CompiledGrammar compiled, std::vector<int32_t> stop_ids, int32_t vocab,
               std::shared_ptr<const Utf8Tokens> utf8)
      : compiled(std::move(compiled)), stop_ids(std::move(stop_ids)), vocab(vocab), utf8(std::move(utf8)) {}
  xgrammar::CompiledGrammar compiled;
  std::vector<int32_t> stop_ids;
  int32_t vocab;
  std::shared_ptr<const Utf8Tokens> utf8;
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
  std::shared_ptr<const Utf8Tokens> utf8;
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
  auto bytes = impl_->info.GetDecodedVocab();
  for (int32_t id : impl_->info.GetSpecialTokenIds()) {
    if (id < static_cast<int32_t>(bytes.size())) bytes[static_cast<size_t>(id)].clear();
  }
  impl_->utf8 = std::make_shared<const Utf8Tokens>(std::move(bytes), impl_->vocab);
}

TokenGrammars::~TokenGrammars() = default;

const std::vector<std::string>& TokenGrammars::token_bytes() const { return impl_->utf8->bytes; }

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
            impl_->stop_ids, impl_->vocab, impl_->utf8);
      case ResponseFormatKind::kJsonSchema:
        return std::make_shared<TokenGrammar>(
            impl_->compiler.CompileJSONSchema(format.schema, true, std::nullopt, std::nullopt, true, kMaxBlanks),
            impl_->stop_ids, impl_->vocab, impl_->utf8);
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
  Utf8State utf8 = Utf8State::kBoundary;  // where the answer's bytes stand
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
  const auto& utf8 = impl_->grammar->utf8->allowed[static_cast<size_t>(impl_->utf8)];
  for (size_t i = 0; i < impl_->mask.size(); ++i) impl_->mask[i] &= utf8[i];
  return impl_->mask;
}

bool TokenConstraint::accept(int64_t token) {
  if (token < 0 || token >= impl_->grammar->vocab) return false;
  const auto& bytes = impl_->grammar->utf8->bytes;
  const auto next = utf8_after(impl_->utf8, token < static_cast<int64_t>(bytes.size()) ? bytes[static_cast<size_t>(token)] : std::string());
  if (!next || !impl_->matcher.AcceptToken(static_cast<int32_t>(token))) return false;
  impl_->utf8 = *next;
  return true;
}

bool TokenConstraint::terminated() const { return impl_->matcher.IsTerminated(); }

}  // namespace zoo
