#include "text/tokenizer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include <dlfcn.h>

#include "core/files.h"

namespace zoo {
namespace {

// SentencePiece lives in its own module, loaded into a link-map namespace of its own: Debian's
// libsentencepiece bundles a protobuf that clashes with LibTorch's (text/sentencepiece_shim.cpp).
struct SentencePieceModule {
  std::string path;
  void (*free_buffer)(void*);
  void* (*load)(const char*, size_t, char**);
  void (*free)(void*);
  int (*vocab_size)(void*);
  char* (*piece)(void*, int);
  float (*score)(void*, int);
  int (*encode_ids)(void*, const char*, size_t, int**, size_t*, char**);
  int (*encode_pieces)(void*, const char*, size_t, char**, size_t*, char**);
  int (*decode)(void*, const int*, size_t, char**, size_t*, char**);
  int (*train)(const char*, int (*)(void*, const char**, size_t*), void*, unsigned, char**, size_t*, char**);
  void (*set_log_level)(int);

  // A malloc'd string from the module, freed on the way out.
  std::string take(char* p, size_t n) const {
    std::string s(p, n);
    free_buffer(p);
    return s;
  }
  std::string take(char* p) const { return take(p, std::strlen(p)); }
};

const SentencePieceModule& spm() {
  static const SentencePieceModule module = [] {
    // In order: an explicit choice, beside the program or in ../lib of it (an installed tree,
    // wherever it was moved), the install prefix, the build tree, the loader's search path.
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("ZOO_SENTENCEPIECE_MODULE"); env && *env) candidates.push_back(env);
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      candidates.push_back((exe.parent_path() / "libzoo_sentencepiece.so").string());
      candidates.push_back((exe.parent_path().parent_path() / "lib" / "libzoo_sentencepiece.so").string());
    }
#ifdef ZOO_SENTENCEPIECE_INSTALL_PATH
    candidates.push_back(ZOO_SENTENCEPIECE_INSTALL_PATH);
#endif
#ifdef ZOO_SENTENCEPIECE_BUILD_PATH
    candidates.push_back(ZOO_SENTENCEPIECE_BUILD_PATH);
#endif
    candidates.push_back("libzoo_sentencepiece.so");
    void* handle = nullptr;
    std::string tried, chosen;
    for (const auto& c : candidates) {
      handle = ::dlmopen(LM_ID_NEWLM, c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle != nullptr) {
        chosen = c;
        break;
      }
      tried += "\n  " + c + ": " + ::dlerror();
    }
    if (handle == nullptr) {
      throw std::runtime_error("cannot load zoo's SentencePiece module (set ZOO_SENTENCEPIECE_MODULE to "
                               "libzoo_sentencepiece.so); tried:" + tried);
    }
    SentencePieceModule m;
    m.path = chosen;
    auto bind = [&](auto& fn, const char* name) {
      void* sym = ::dlsym(handle, name);
      if (sym == nullptr) throw std::runtime_error(chosen + ": missing symbol " + name);
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(sym);
    };
    bind(m.free_buffer, "zoo_spm_free_buffer");
    bind(m.load, "zoo_spm_load");
    bind(m.free, "zoo_spm_free");
    bind(m.vocab_size, "zoo_spm_vocab_size");
    bind(m.piece, "zoo_spm_piece");
    bind(m.score, "zoo_spm_score");
    bind(m.encode_ids, "zoo_spm_encode_ids");
    bind(m.encode_pieces, "zoo_spm_encode_pieces");
    bind(m.decode, "zoo_spm_decode");
    bind(m.train, "zoo_spm_train");
    bind(m.set_log_level, "zoo_spm_set_log_level");
    return m;
  }();
  return module;
}

const char* kWordStart = "\xE2\x96\x81";  // U+2581, SentencePiece's word boundary mark

// Feeds SentencePiece the non-empty lines of the input files, checking UTF-8 as it goes.
class LineReader {
 public:
  LineReader(std::vector<std::string> files, bool skip_invalid)
      : files_(std::move(files)), skip_invalid_(skip_invalid) {}

  // The module's callback: 1 with a line, 0 at the end, -1 on an error (kept in error()).
  static int next(void* self, const char** line, size_t* length) {
    auto* r = static_cast<LineReader*>(self);
    if (!r->advance()) return r->error_.empty() ? 0 : -1;
    *line = r->line_.data();
    *length = r->line_.size();
    return 1;
  }
  int64_t sentences() const { return sentences_; }
  const std::string& error() const { return error_; }

 private:
  bool advance() {
    while (true) {
      if (!in_.is_open() || !std::getline(in_, line_)) {
        if (in_.is_open()) in_.close();
        if (next_file_ == files_.size()) return false;
        file_ = files_[next_file_++];
        in_.open(file_, std::ios::binary);
        if (!in_) {
          error_ = file_ + ": cannot open";
          return false;
        }
        line_number_ = 0;
        offset_ = 0;
        continue;
      }
      ++line_number_;
      const int64_t line_offset = offset_;
      offset_ += static_cast<int64_t>(line_.size()) + 1;
      if (!line_.empty() && line_.back() == '\r') line_.pop_back();
      if (line_.find_first_not_of(" \t") == std::string::npos) continue;
      if (int64_t bad = invalid_utf8_offset(line_); bad >= 0) {
        const std::string where = file_ + ":" + std::to_string(line_number_) +
                                  ": invalid UTF-8 at byte offset " + std::to_string(line_offset + bad);
        if (!skip_invalid_) {
          error_ = where;
          return false;
        }
        std::cerr << "warning: skipping line, " << where << "\n";
        continue;
      }
      ++sentences_;
      return true;
    }
  }

  std::vector<std::string> files_;
  bool skip_invalid_;
  size_t next_file_ = 0;
  std::ifstream in_;
  std::string file_, line_, error_;
  int64_t line_number_ = 0, offset_ = 0, sentences_ = 0;
};

std::string special_symbols() {
  std::string s = "[CLS],[SEP],[MASK]";
  for (int64_t i = 0; i < SpecialTokens::kSentinels; ++i) s += ",<extra_id_" + std::to_string(i) + ">";
  return s;
}

}  // namespace

uint64_t fnv1a64(const std::string& bytes) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

int64_t invalid_utf8_offset(const std::string& text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
    else return static_cast<int64_t>(i);
    if (i + len > n) return static_cast<int64_t>(i);
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return static_cast<int64_t>(i);
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid too.
    const bool overlong = (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return static_cast<int64_t>(i);
    i += len;
  }
  return -1;
}

std::vector<std::string> list_text_files(const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  if (inputs.empty()) throw std::runtime_error("no input files given");
  std::vector<std::string> files;
  for (const auto& input : inputs) {
    if (fs::is_regular_file(input)) {
      files.push_back(input);
    } else if (fs::is_directory(input)) {
      std::vector<std::string> found;
      for (const auto& e : fs::recursive_directory_iterator(input)) {
        if (e.is_regular_file()) found.push_back(e.path().string());
      }
      if (found.empty()) throw std::runtime_error(input + ": directory has no files");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      throw std::runtime_error(input + ": no such file or directory");
    }
  }
  return files;
}

std::string no_text_message(const std::vector<std::string>& empty_files) {
  std::string names;
  const size_t shown = std::min<size_t>(empty_files.size(), 5);
  for (size_t i = 0; i < shown; ++i) {
    names += (i == 0 ? "" : i + 1 == shown && shown == empty_files.size() ? " and " : ", ") + empty_files[i];
  }
  if (empty_files.size() > shown) names += " and " + std::to_string(empty_files.size() - shown) + " more files";
  if (empty_files.empty()) return "the inputs contain no text";
  return "the inputs contain no text: " + names + (empty_files.size() == 1 ? " is" : " are") +
         " empty (or only blank lines)";
}

Tokenizer Tokenizer::from_serialized(const std::string& model_bytes, const std::string& source) {
  const auto& m = spm();
  Tokenizer t;
  char* error = nullptr;
  void* processor = m.load(model_bytes.data(), model_bytes.size(), &error);
  if (processor == nullptr) {
    throw std::runtime_error(source + ": not a SentencePiece model (" + m.take(error) + ")");
  }
  t.processor_ = std::shared_ptr<void>(processor, m.free);
  t.model_bytes_ = model_bytes;
  t.hash_ = fnv1a64(model_bytes);
  // The special tokens must sit at their fixed ids, or batches would be built wrong.
  const std::pair<int64_t, const char*> expected[] = {
      {SpecialTokens::kPad, "<pad>"}, {SpecialTokens::kUnk, "<unk>"}, {SpecialTokens::kBos, "<s>"},
      {SpecialTokens::kEos, "</s>"},  {SpecialTokens::kCls, "[CLS]"}, {SpecialTokens::kSep, "[SEP]"},
      {SpecialTokens::kMask, "[MASK]"}, {SpecialTokens::kFirstSentinel, "<extra_id_0>"},
      {SpecialTokens::kCount - 1, "<extra_id_99>"}};
  for (const auto& [id, piece] : expected) {
    if (id >= t.vocab_size() || t.piece(id) != piece) {
      throw std::runtime_error(source + ": special token " + piece + " is not at id " + std::to_string(id) +
                               " (not a zoo tokenizer; train one with 'zoo tokenizer train')");
    }
  }
  t.starts_word_.resize(t.vocab_size());
  for (int64_t i = 0; i < t.vocab_size(); ++i) t.starts_word_[i] = t.piece(i).rfind(kWordStart, 0) == 0;
  return t;
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::string file = path;
  if (!std::filesystem::exists(file) && std::filesystem::exists(path + ".model")) file = path + ".model";
  const std::string bytes = read_file(file);
  if (bytes.empty()) throw std::runtime_error(file + ": tokenizer model is empty");
  return from_serialized(bytes, file);
}

Tokenizer Tokenizer::train(const TokenizerTrainOptions& o, const std::string& out_prefix) {
  if (o.vocab_size <= SpecialTokens::kCount + 256) {
    throw std::runtime_error("tokenizer: vocab_size (" + std::to_string(o.vocab_size) + ") must exceed " +
                             std::to_string(SpecialTokens::kCount + 256) +
                             " (special tokens and the 256 byte-fallback pieces)");
  }
  const auto files = list_text_files(o.inputs);
  LineReader lines(files, o.skip_invalid_utf8);
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  const std::pair<const char*, std::string> args[] = {
      {"model_type", o.kind == TokenizerKind::kBpe ? "bpe" : "unigram"},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"byte_fallback", "true"},
      {"pad_id", "0"}, {"unk_id", "1"}, {"bos_id", "2"}, {"eos_id", "3"},
      {"pad_piece", "<pad>"}, {"unk_piece", "<unk>"}, {"bos_piece", "<s>"}, {"eos_piece", "</s>"},
      {"user_defined_symbols", special_symbols()},
      {"input_sentence_size", std::to_string(o.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", "65536"},  // paragraphs, not sentences: allow long ones
      {"num_threads", std::to_string(threads)},
  };
  std::string arg_lines;
  for (const auto& [key, value] : args) arg_lines += std::string(key) + "=" + value + "\n";
  const auto& m = spm();
  m.set_log_level(o.verbose ? 0 : 1);
  char *model_out = nullptr, *error = nullptr;
  size_t model_length = 0;
  const int ok = m.train(arg_lines.c_str(), &LineReader::next, &lines, static_cast<unsigned>(o.seed),
                         &model_out, &model_length, &error);
  if (!lines.error().empty()) {
    if (error != nullptr) m.free_buffer(error);
    throw std::runtime_error(lines.error());
  }
  if (lines.sentences() == 0) {
    if (error != nullptr) m.free_buffer(error);
    throw std::runtime_error("tokenizer: " + no_text_message(files));
  }
  if (!ok) {
    const std::string message = m.take(error);
    if (message.find("smaller than required_chars") != std::string::npos) {
      throw std::runtime_error("tokenizer: vocab_size " + std::to_string(o.vocab_size) +
                               " is too small for this corpus's characters: " + message);
    }
    if (message.find("Vocabulary size") != std::string::npos) {
      throw std::runtime_error("tokenizer: vocab_size " + std::to_string(o.vocab_size) +
                               " is too large for this corpus: " + message);
    }
    throw std::runtime_error("tokenizer: training failed: " + message);
  }
  const std::string model = m.take(model_out, model_length);
  Tokenizer t = from_serialized(model, "trained tokenizer");
  std::string vocab;
  for (int64_t i = 0; i < t.vocab_size(); ++i) {
    vocab += t.piece(i) + "\t" + std::to_string(spm().score(t.processor_.get(), static_cast<int>(i))) + "\n";
  }
  write_file_atomically(out_prefix + ".model", model);
  write_file_atomically(out_prefix + ".vocab", vocab);
  return t;
}

std::vector<int64_t> Tokenizer::encode(const std::string& text) const {
  const auto& m = spm();
  int* ids = nullptr;
  size_t count = 0;
  char* error = nullptr;
  if (!m.encode_ids(processor_.get(), text.data(), text.size(), &ids, &count, &error)) {
    throw std::runtime_error("tokenizer: encode failed: " + m.take(error));
  }
  std::vector<int64_t> out(ids, ids + count);
  m.free_buffer(ids);
  return out;
}

std::vector<std::string> Tokenizer::encode_pieces(const std::string& text) const {
  const auto& m = spm();
  char *joined = nullptr, *error = nullptr;
  size_t length = 0;
  if (!m.encode_pieces(processor_.get(), text.data(), text.size(), &joined, &length, &error)) {
    throw std::runtime_error("tokenizer: encode failed: " + m.take(error));
  }
  const std::string all = m.take(joined, length);
  std::vector<std::string> pieces;
  size_t start = 0;
  while (start <= all.size() && !all.empty()) {
    const size_t end = std::min(all.find('\n', start), all.size());
    pieces.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return pieces;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> narrow;
  narrow.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      throw std::runtime_error("tokenizer: id " + std::to_string(id) + " is outside the vocabulary (" +
                               std::to_string(vocab_size()) + ")");
    }
    narrow.push_back(static_cast<int>(id));
  }
  const auto& m = spm();
  char *text = nullptr, *error = nullptr;
  size_t length = 0;
  if (!m.decode(processor_.get(), narrow.data(), narrow.size(), &text, &length, &error)) {
    throw std::runtime_error("tokenizer: decode failed: " + m.take(error));
  }
  return m.take(text, length);
}

int64_t Tokenizer::vocab_size() const { return spm().vocab_size(processor_.get()); }

std::string Tokenizer::piece(int64_t id) const {
  const auto& m = spm();
  return m.take(m.piece(processor_.get(), static_cast<int>(id)));
}

std::string sentencepiece_module_path() { return spm().path; }

bool Tokenizer::starts_word(int64_t id) const {
  return id >= 0 && id < static_cast<int64_t>(starts_word_.size()) && starts_word_[id];
}

std::string Tokenizer::hash_hex() const {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(hash_));
  return buf;
}

}  // namespace zoo
