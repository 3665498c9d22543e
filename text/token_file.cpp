#include "text/token_file.h"

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

uint64_t mix(uint64_t x) {  // splitmix64: a well-spread hash of (seed, index)
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace

void write_token_file(const std::string& path, const std::vector<std::vector<int64_t>>& documents,
                      int64_t vocab_size, uint64_t tokenizer_hash) {
  const uint64_t vocab = static_cast<uint64_t>(vocab_size);
  const uint32_t width = vocab <= 65536 ? 2 : 4;
  uint64_t total = 0;
  for (const auto& d : documents) total += d.size() + 1;
  std::string out;
  out.reserve(kHeaderBytes + total * width + (documents.size() + 1) * 8);
  out.append(kMagic, 8);
  put<uint32_t>(out, 1);
  put<uint32_t>(out, width);
  put<uint64_t>(out, vocab);
  put<uint64_t>(out, tokenizer_hash);
  put<uint64_t>(out, total);
  put<uint64_t>(out, documents.size());
  out.append(kHeaderBytes - out.size(), '\0');
  std::vector<uint64_t> offsets;
  uint64_t position = 0;
  auto put_token = [&](int64_t t) {
    if (t < 0 || static_cast<uint64_t>(t) >= vocab) {
      throw std::runtime_error(path + ": token " + std::to_string(t) + " outside the vocabulary");
    }
    if (width == 2) put<uint16_t>(out, static_cast<uint16_t>(t));
    else put<uint32_t>(out, static_cast<uint32_t>(t));
  };
  for (const auto& d : documents) {
    offsets.push_back(position);
    for (int64_t t : d) put_token(t);
    put_token(SpecialTokens::kEos);
    position += d.size() + 1;
  }
  offsets.push_back(position);
  for (uint64_t o : offsets) put<uint64_t>(out, o);
  write_file_atomically(path, out);
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
  if (i.num_tokens > body / i.token_bytes || i.num_documents + 1 > (body - i.num_tokens * i.token_bytes) / 8 ||
      kHeaderBytes + i.num_tokens * i.token_bytes + (i.num_documents + 1) * 8 != size) {
    throw std::runtime_error(path + ": truncated or corrupt token file (" + std::to_string(size) +
                             " bytes for " + std::to_string(i.num_tokens) + " tokens and " +
                             std::to_string(i.num_documents) + " documents)");
  }
  f.offsets_ = reinterpret_cast<const uint64_t*>(f.data_ + kHeaderBytes + i.num_tokens * i.token_bytes);
  if (f.offsets_[i.num_documents] != i.num_tokens) throw std::runtime_error(path + ": corrupt document index");
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
  return info_.token_bytes == 2 ? get<uint16_t>(p) : get<uint32_t>(p);
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
}

std::vector<int64_t> TokenFile::tokens(int64_t start, int64_t n) const {
  std::vector<int64_t> out(static_cast<size_t>(n));
  read(start, n, out.data());
  return out;
}

std::pair<int64_t, int64_t> TokenFile::document(int64_t d) const {
  if (d < 0 || d >= num_documents()) throw std::out_of_range(path_ + ": document " + std::to_string(d) + " out of range");
  return {static_cast<int64_t>(offsets_[d]), static_cast<int64_t>(offsets_[d + 1]) - 1};
}

TokenizeStats tokenize_to_files(const std::vector<std::string>& inputs, const Tokenizer& tokenizer,
                                const std::string& out_dir, const TokenizeOptions& o) {
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0)) {
    throw std::runtime_error("val_fraction (" + std::to_string(o.val_fraction) + ") must be in [0, 1)");
  }
  std::vector<std::vector<int64_t>> train, val;
  TokenizeStats stats;
  int64_t index = 0;
  std::vector<int64_t> doc;
  auto finish = [&] {
    if (doc.empty()) return;
    const double u = static_cast<double>(mix(o.seed ^ mix(static_cast<uint64_t>(index++)))) / 18446744073709551616.0;
    (u < o.val_fraction ? val : train).push_back(std::move(doc));
    doc.clear();
  };
  for (const auto& file : list_text_files(inputs)) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw std::runtime_error(file + ": cannot open");
    std::string line;
    int64_t line_number = 0, offset = 0;
    while (std::getline(in, line)) {
      ++line_number;
      const int64_t line_offset = offset;
      offset += static_cast<int64_t>(line.size()) + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) {
        finish();
        continue;
      }
      if (int64_t bad = invalid_utf8_offset(line); bad >= 0) {
        const std::string where = file + ":" + std::to_string(line_number) + ": invalid UTF-8 at byte offset " +
                                  std::to_string(line_offset + bad);
        if (!o.skip_invalid_utf8) throw std::runtime_error(where);
        std::fprintf(stderr, "warning: skipping line, %s\n", where.c_str());
        continue;
      }
      auto ids = tokenizer.encode(line);
      doc.insert(doc.end(), ids.begin(), ids.end());
    }
    finish();  // a file ends its last document
  }
  if (train.empty() && val.empty()) throw std::runtime_error("the inputs contain no text");
  if (train.empty()) throw std::runtime_error("every document went to validation: lower val_fraction");
  std::filesystem::create_directories(out_dir);
  const auto dir = std::filesystem::path(out_dir);
  write_token_file((dir / "train.tokens").string(), train, tokenizer.vocab_size(), tokenizer.hash());
  write_token_file((dir / "val.tokens").string(), val, tokenizer.vocab_size(), tokenizer.hash());
  stats.train_documents = static_cast<int64_t>(train.size());
  stats.val_documents = static_cast<int64_t>(val.size());
  for (const auto& d : train) stats.train_tokens += static_cast<int64_t>(d.size()) + 1;
  for (const auto& d : val) stats.val_tokens += static_cast<int64_t>(d.size()) + 1;
  return stats;
}

}  // namespace zoo
