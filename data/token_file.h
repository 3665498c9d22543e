#pragma once
// Binary token files: text is tokenized once, training reads tokens by memory mapping and never
// re-tokenizes. Layout (little-endian):
//   header (64 bytes): magic "ZOOTOKEN", version u32, bytes per token u32 (2 or 4, by
//     vocabulary size), vocab_size u64, tokenizer hash u64 (FNV-1a of the model), token count
//     u64, document count u64, 16 reserved bytes;
//   tokens; then document start offsets (u64, one per document, plus the total at the end).
// Each document's tokens are followed by </s> in the stream, so packed blocks carry document
// separators.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizers/tokenizer.h"

namespace zoo {

struct TokenFileInfo {
  uint32_t version = 1;
  uint32_t token_bytes = 2;
  uint64_t vocab_size = 0;
  uint64_t tokenizer_hash = 0;
  uint64_t num_tokens = 0;
  uint64_t num_documents = 0;
};

// Writes a token file as tokens arrive, holding neither the tokens nor the document index in
// memory (a corpus far larger than memory streams through). The file appears at `path` only
// at commit(); a writer destroyed before that leaves nothing behind.
class TokenFileWriter {
 public:
  // `separator` ends every document in the stream (the tokenizer's </s>).
  TokenFileWriter(const std::string& path, int64_t vocab_size, uint64_t tokenizer_hash,
                  int64_t separator = SpecialTokens::kEos);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // Tokens of the current document (a new one starts after end_document).
  void add(const std::vector<int64_t>& tokens);
  void end_document();
  int64_t documents() const { return documents_; }
  int64_t tokens() const { return tokens_; }
  void commit();

 private:
  struct Files;
  std::unique_ptr<Files> files_;
  std::string path_;
  uint64_t vocab_;
  uint64_t hash_;
  int64_t separator_;
  uint32_t width_;
  int64_t documents_ = 0, tokens_ = 0;
  bool open_document_ = false;
  std::string buffer_;  // tokens waiting to be written
};

// Writes documents (each a token list, without the separator) to `path` atomically, recording
// the vocabulary size and the hash of the tokenizer that made them.
void write_token_file(const std::string& path, const std::vector<std::vector<int64_t>>& documents,
                      int64_t vocab_size, uint64_t tokenizer_hash);

// A read-only, memory-mapped token file.
class TokenFile {
 public:
  // Throws std::runtime_error naming the file for a missing, truncated or corrupt file, and for
  // a file made with a tokenizer other than `expected` (when given).
  static TokenFile open(const std::string& path, const Tokenizer* expected = nullptr);
  ~TokenFile();
  TokenFile(TokenFile&&) noexcept;
  TokenFile& operator=(TokenFile&&) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const TokenFileInfo& info() const { return info_; }
  int64_t size() const { return static_cast<int64_t>(info_.num_tokens); }
  int64_t token(int64_t i) const;
  // Copies tokens [start, start + n) into out.
  void read(int64_t start, int64_t n, int64_t* out) const;
  std::vector<int64_t> tokens(int64_t start, int64_t n) const;
  int64_t num_documents() const { return static_cast<int64_t>(info_.num_documents); }
  // [begin, end) of document d in the stream, its separator excluded.
  std::pair<int64_t, int64_t> document(int64_t d) const;
  const std::string& path() const { return path_; }

 private:
  TokenFile() = default;
  std::string path_;
  TokenFileInfo info_;
  const unsigned char* data_ = nullptr;  // the whole mapped file
  size_t mapped_size_ = 0;
  const unsigned char* offsets_ = nullptr;  // u64 document starts, not necessarily 8-byte aligned
  uint64_t offset(uint64_t d) const;
  [[noreturn]] void outside_vocabulary(int64_t i, int64_t id) const;
};

}  // namespace zoo
