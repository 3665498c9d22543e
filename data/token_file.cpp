#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/files.h"

namespace zoo {
namespace {

constexpr char kMagic[8] = {'Z', 'O', 'O', 'T', 'O', 'K', 'E', 'N'};
constexpr size_t kHeaderBytes = 64;

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
T get(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}


}  // namespace

// The tokens go to the target's temporary file as they arrive; the document index goes to a
// second temporary file and is appended at commit, when the header is completed too.
struct TokenFileWriter::Files {
  explicit Files(const std::string& path) : tokens(path), index(temporary_path_for(path) + ".index") {}
  AtomicFile tokens;
  AtomicFile index;  // never committed: read back at the end, then removed with the writer
};

TokenFileWriter::TokenFileWriter(const std::string& path, int64_t vocab_size, uint64_t tokenizer_hash,
                                 int64_t separator)
    : files_(std::make_unique<Files>(path)),
      path_(path),
      vocab_(static_cast<uint64_t>(vocab_size)),
      hash_(tokenizer_hash),
      separator_(separator),
      width_(static_cast<uint64_t>(vocab_size) <= 65536 ? 2 : 4) {
  files_->tokens.write(std::string(kHeaderBytes, '\0'));  // completed at commit
}

TokenFileWriter::~TokenFileWriter() = default;

void TokenFileWriter::add(const std::vector<int64_t>& tokens) {
  if (!open_document_) {
    std::string start;
    put<uint64_t>(start, static_cast<uint64_t>(tokens_));
    files_->index.write(start);
    open_document_ = true;
  }
  for (int64_t t : tokens) {
    if (t < 0 || static_cast<uint64_t>(t) >= vocab_) {
      throw std::runtime_error(path_ + ": token " + std::to_string(t) + " outside the vocabulary of " +
                               std::to_string(vocab_));
    }
    if (width_ == 2) put<uint16_t>(buffer_, static_cast<uint16_t>(t));
    else put<uint32_t>(buffer_, static_cast<uint32_t>(t));
  }
  tokens_ += static_cast<int64_t>(tokens.size());
  if (buffer_.size() >= (1u << 20)) {
    files_->tokens.write(buffer_);
    buffer_.clear();
  }
}

void TokenFileWriter::end_document() {
  add({separator_});
  open_document_ = false;
  ++documents_;
}

void TokenFileWriter::commit() {
  if (open_document_) end_document();
  files_->tokens.write(buffer_);
  buffer_.clear();
  std::string end;
  put<uint64_t>(end, static_cast<uint64_t>(tokens_));
  files_->index.write(end);
  // Append the index, read back in chunks from its temporary file.
  const std::string index_path = files_->index.temporary();
  std::ifstream index(index_path, std::ios::binary);
  if (!index) throw std::runtime_error(path_ + ": cannot read back its document index");
  std::string chunk(1 << 20, '\0');
  while (index) {
    index.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    files_->tokens.write(chunk.data(), static_cast<size_t>(index.gcount()));
  }
  std::string header;
  header.append(kMagic, 8);
  put<uint32_t>(header, 1);
  put<uint32_t>(header, width_);
  put<uint64_t>(header, vocab_);
  put<uint64_t>(header, hash_);
  put<uint64_t>(header, static_cast<uint64_t>(tokens_));
  put<uint64_t>(header, static_cast<uint64_t>(documents_));
  files_->tokens.write_at(0, header.data(), header.size());
  files_->tokens.commit();
}

void write_token_file(const std::string& path, const std::vector<std::vector<int64_t>>& documents,
                      int64_t vocab_size, uint64_t tokenizer_hash) {
  TokenFileWriter writer(path, vocab_size, tokenizer_hash);
  for (const auto& d : documents) {
    writer.add(d);
    writer.end_document();
  }
  writer.commit();
}

TokenFile TokenFile::open(const std::string& path, const Tokenizer* expected) {
  TokenFile f;
  f.path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error(path + ": cannot open token file (" + std::strerror(errno) + ")");
  struct stat st {};
  ::fstat(fd, &st);
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < kHeaderBytes) {
    ::close(fd);
    throw std::runtime_error(path + ": not a token file (" + std::to_string(size) + " bytes, shorter than the header)");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) throw std::runtime_error(path + ": cannot map token file");
  f.data_ = static_cast<const unsigned char*>(map);
  f.mapped_size_ = size;
  if (std::memcmp(f.data_, kMagic, 8) != 0) throw std::runtime_error(path + ": not a token file (bad magic number)");
  auto& i = f.info_;
  i.version = get<uint32_t>(f.data_ + 8);
  i.token_bytes = get<uint32_t>(f.data_ + 12);
  i.vocab_size = get<uint64_t>(f.data_ + 16);
  i.tokenizer_hash = get<uint64_t>(f.data_ + 24);
  i.num_tokens = get<uint64_t>(f.data_ + 32);
  i.num_documents = get<uint64_t>(f.data_ + 40);
  if (i.version != 1) throw std::runtime_error(path + ": token file version " + std::to_string(i.version) + " is not supported (expected 1)");
  if (i.token_bytes != 2 && i.token_bytes != 4) throw std::runtime_error(path + ": corrupt token file (token width " + std::to_string(i.token_bytes) + ")");
  // Sizes are checked before any token is touched; the divisions guard against overflow.
  const size_t body = size - kHeaderBytes;
  // (num_documents first: 2^64 - 1 of them made num_documents + 1 wrap to 0 and pass.)
  if (i.num_tokens > body / i.token_bytes || i.num_documents >= body / 8 ||
      i.num_documents + 1 > (body - i.num_tokens * i.token_bytes) / 8 ||
      kHeaderBytes + i.num_tokens * i.token_bytes + (i.num_documents + 1) * 8 != size) {
    throw std::runtime_error(path + ": truncated or corrupt token file (" + std::to_string(size) +
                             " bytes for " + std::to_string(i.num_tokens) + " tokens and " +
                             std::to_string(i.num_documents) + " documents)");
  }
  // The index follows 2- or 4-byte tokens, so it is read with memcpy, never through a uint64_t*.
  f.offsets_ = f.data_ + kHeaderBytes + i.num_tokens * i.token_bytes;
  if (f.offset(i.num_documents) != i.num_tokens) throw std::runtime_error(path + ": corrupt document index");
  if (expected != nullptr && expected->hash() != i.tokenizer_hash) {
    char have[17], want[17];
    std::snprintf(have, sizeof(have), "%016llx", static_cast<unsigned long long>(i.tokenizer_hash));
    std::snprintf(want, sizeof(want), "%016llx", static_cast<unsigned long long>(expected->hash()));
    throw std::runtime_error(path + ": made with another tokenizer (hash " + have + ", this run's tokenizer is " +
                             want + "); tokenize the data again with this tokenizer");
  }
  return f;
}

TokenFile::~TokenFile() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), mapped_size_);
}

TokenFile::TokenFile(TokenFile&& o) noexcept { *this = std::move(o); }

TokenFile& TokenFile::operator=(TokenFile&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), mapped_size_);
    path_ = std::move(o.path_);
    info_ = o.info_;
    data_ = o.data_;
    mapped_size_ = o.mapped_size_;
    offsets_ = o.offsets_;
    o.data_ = nullptr;
    o.offsets_ = nullptr;
  }
  return *this;
}

int64_t TokenFile::token(int64_t i) const {
  if (i < 0 || i >= size()) throw std::out_of_range(path_ + ": token index " + std::to_string(i) + " out of range");
  const unsigned char* p = data_ + kHeaderBytes + static_cast<size_t>(i) * info_.token_bytes;
  const int64_t id = info_.token_bytes == 2 ? get<uint16_t>(p) : get<uint32_t>(p);
  if (static_cast<uint64_t>(id) >= info_.vocab_size) outside_vocabulary(i, id);
  return id;
}

// A token file is read as it is mapped, so each id is checked as it is read: one past the
// header's vocabulary would index past the model's embedding table.
void TokenFile::outside_vocabulary(int64_t i, int64_t id) const {
  throw std::runtime_error(path_ + ": token " + std::to_string(i) + " is id " + std::to_string(id) +
                           ", outside the header's vocabulary of " + std::to_string(info_.vocab_size) +
                           " (a corrupt token file)");
}

void TokenFile::read(int64_t start, int64_t n, int64_t* out) const {
  if (start < 0 || n < 0 || start + n > size()) {
    throw std::out_of_range(path_ + ": tokens [" + std::to_string(start) + ", " + std::to_string(start + n) +
                            ") out of range (" + std::to_string(size()) + " tokens)");
  }
  const unsigned char* p = data_ + kHeaderBytes + static_cast<size_t>(start) * info_.token_bytes;
  if (info_.token_bytes == 2) {
    for (int64_t k = 0; k < n; ++k) out[k] = get<uint16_t>(p + 2 * k);
  } else {
    for (int64_t k = 0; k < n; ++k) out[k] = get<uint32_t>(p + 4 * k);
  }
  for (int64_t k = 0; k < n; ++k) {
    if (static_cast<uint64_t>(out[k]) >= info_.vocab_size) outside_vocabulary(start + k, out[k]);
  }
}

std::vector<int64_t> TokenFile::tokens(int64_t start, int64_t n) const {
  std::vector<int64_t> out(static_cast<size_t>(n));
  read(start, n, out.data());
  return out;
}

uint64_t TokenFile::offset(uint64_t d) const { return get<uint64_t>(offsets_ + 8 * d); }

std::pair<int64_t, int64_t> TokenFile::document(int64_t d) const {
  if (d < 0 || d >= num_documents()) throw std::out_of_range(path_ + ": document " + std::to_string(d) + " out of range");
  const auto begin = offset(static_cast<uint64_t>(d)), end = offset(static_cast<uint64_t>(d) + 1);
  if (begin >= end || end > info_.num_tokens) throw std::runtime_error(path_ + ": corrupt document index at document " + std::to_string(d));
  return {static_cast<int64_t>(begin), static_cast<int64_t>(end) - 1};
}

}  // namespace zoo
