#include "tokenizers/sentencepiece_module.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <type_traits>

#include <dlfcn.h>

namespace zoo {
namespace {

// The module's C interface (tokenizers/sentencepiece_shim.cpp).
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

}  // namespace

std::string sentencepiece_module_path() { return spm().path; }

SentencePieceProcessor SentencePieceProcessor::load(const std::string& model_bytes, const std::string& source) {
  const auto& m = spm();
  char* error = nullptr;
  void* processor = m.load(model_bytes.data(), model_bytes.size(), &error);
  if (processor == nullptr) {
    throw std::runtime_error(source + ": not a SentencePiece model (" + m.take(error) + ")");
  }
  SentencePieceProcessor p;
  p.processor_ = std::shared_ptr<void>(processor, m.free);
  return p;
}

SentencePieceProcessor::TrainResult SentencePieceProcessor::train(const std::string& arguments, NextLine next_line,
                                                                  void* context, unsigned seed, bool verbose) {
  const auto& m = spm();
  m.set_log_level(verbose ? 0 : 1);
  char *model = nullptr, *error = nullptr;
  size_t length = 0;
  if (!m.train(arguments.c_str(), next_line, context, seed, &model, &length, &error)) {
    return {false, "", error != nullptr ? m.take(error) : ""};
  }
  return {true, m.take(model, length), ""};
}

int64_t SentencePieceProcessor::size() const { return spm().vocab_size(processor_.get()); }

std::string SentencePieceProcessor::piece(int64_t id) const {
  const auto& m = spm();
  return m.take(m.piece(processor_.get(), static_cast<int>(id)));
}

float SentencePieceProcessor::score(int64_t id) const { return spm().score(processor_.get(), static_cast<int>(id)); }

std::vector<int64_t> SentencePieceProcessor::encode(const std::string& text) const {
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

std::vector<std::string> SentencePieceProcessor::encode_pieces(const std::string& text) const {
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

std::string SentencePieceProcessor::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> narrow(ids.begin(), ids.end());
  const auto& m = spm();
  char *text = nullptr, *error = nullptr;
  size_t length = 0;
  if (!m.decode(processor_.get(), narrow.data(), narrow.size(), &text, &length, &error)) {
    throw std::runtime_error("tokenizer: decode failed: " + m.take(error));
  }
  return m.take(text, length);
}

}  // namespace zoo
