#include "tokenizers/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <thread>

#include "core/files.h"
#include "core/line_reader.h"
#include "tokenizers/hf_directory.h"
#include "tokenizers/sentencepiece_tokenizer.h"

namespace zoo {
namespace {

// Feeds SentencePiece the non-empty lines of the input files, checking UTF-8 as it goes.
class SentenceFeed {
 public:
  SentenceFeed(std::vector<std::string> files, bool skip_invalid)
      : files_(std::move(files)), skip_invalid_(skip_invalid) {}

  // The module's callback: 1 with a line, 0 at the end, -1 on an error (kept in error()).
  static int next(void* self, const char** line, size_t* length) {
    auto* r = static_cast<SentenceFeed*>(self);
    bool more = false;
    try {
      more = r->advance();
    } catch (const std::exception& e) {  // a line past the bound, a read error
      r->error_ = e.what();
    }
    if (!more) return r->error_.empty() ? 0 : -1;
    *line = r->line_.data();
    *length = r->line_.size();
    return 1;
  }
  int64_t sentences() const { return sentences_; }
  const std::string& error() const { return error_; }

 private:
  bool advance() {
    while (true) {
      if (!lines_ || !lines_->next(line_)) {
        lines_.reset();
        if (in_.is_open()) in_.close();
        if (next_file_ == files_.size()) return false;
        const std::string& file = files_[next_file_++];
        in_.open(file, std::ios::binary);
        if (!in_) {
          error_ = file + ": cannot open";
          return false;
        }
        lines_.emplace(in_, file);
        continue;
      }
      if (!line_.empty() && line_.back() == '\r') line_.pop_back();
      if (line_.find_first_not_of(" \t") == std::string::npos) continue;
      if (int64_t bad = invalid_utf8_offset(line_); bad >= 0) {
        const std::string where = lines_->where() + ": invalid UTF-8 at byte offset " + std::to_string(lines_->offset() + bad);
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
  std::optional<LineReader> lines_;
  std::string line_, error_;
  int64_t sentences_ = 0;
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

Tokenizer Tokenizer::from_zoo_model(const std::string& bytes, const std::string& source) {
  auto processor = SentencePieceProcessor::load(bytes, source);
  // The special tokens must sit at their fixed ids, or batches would be built wrong.
  if (std::string why; !SentencePieceTokenizer::has_zoo_layout(processor, &why)) {
    throw std::runtime_error(source + ": " + why +
                             " (not a zoo tokenizer; train one with 'zoo tokenizer train', or load a Hugging Face "
                             "tokenizer by its directory)");
  }
  Tokenizer t;
  t.kind_ = TokenizerBackend::kZooSentencePiece;
  t.engine_ = SentencePieceTokenizer::zoo(std::move(processor));
  t.files_ = {{"tokenizer.model", bytes}};
  t.model_bytes_ = bytes;
  t.hash_ = fnv1a64(bytes);
  auto& s = t.special_;
  s.pad = SpecialTokens::kPad;
  s.unk = SpecialTokens::kUnk;
  s.bos = SpecialTokens::kBos;
  s.eos = SpecialTokens::kEos;
  s.cls = SpecialTokens::kCls;
  s.sep = SpecialTokens::kSep;
  s.mask = SpecialTokens::kMask;
  for (int64_t i = 0; i < SpecialTokens::kSentinels; ++i) s.sentinels.push_back(SpecialTokens::kFirstSentinel + i);
  t.special_token_texts_ = {{"pad", "<pad>"}, {"unk", "<unk>"}, {"bos", "<s>"}, {"eos", "</s>"},
                            {"cls", "[CLS]"}, {"sep", "[SEP]"}, {"mask", "[MASK]"}};
  return t;
}

Tokenizer Tokenizer::from_files(TokenizerFiles files, const std::string& dir, const std::string& json_name) {
  HfDirectory d = read_hf_directory(files, dir, json_name);
  if (d.kind == TokenizerBackend::kZooSentencePiece) return from_zoo_model(d.files.begin()->second, dir);
  Tokenizer t;
  t.kind_ = d.kind;
  t.engine_ = std::move(d.engine);
  t.files_ = std::move(d.files);
  t.model_bytes_ = serialize_tokenizer_files(t.files_);
  t.hash_ = fnv1a64(t.model_bytes_);
  t.special_ = std::move(d.special);
  t.chat_template_ = std::move(d.chat_template);
  t.special_token_texts_ = std::move(d.special_token_texts);
  t.model_max_length_ = d.model_max_length;
  return t;
}

Tokenizer Tokenizer::from_serialized(const std::string& model_bytes, const std::string& source) {
  if (is_tokenizer_files(model_bytes)) return from_files(parse_tokenizer_files(model_bytes, source), source);
  // A tokenizer.json on its own is a JSON object; a SentencePiece model (a protobuf) never
  // starts with '{'.
  const size_t first = model_bytes.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && model_bytes[first] == '{') {
    return from_files({{"tokenizer.json", model_bytes}}, std::filesystem::path(source).parent_path().string(), source);
  }
  return from_zoo_model(model_bytes, source);
}

Tokenizer Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) {
    const std::string dir = tokenizer_directory(path);
    if (!has_hf_tokenizer(dir)) {
      throw std::runtime_error(path + ": no tokenizer (looked for tokenizer.json, vocab.json + merges.txt, vocab.txt, "
                                      "spiece.model, tokenizer.model, and the tokenizer/ folder of a zoo checkpoint "
                                      "or run directory)");
    }
    return from_files(read_tokenizer_files(dir, hf_tokenizer_file_names()), dir);
  }
  std::string file = path;
  if (!fs::exists(file) && fs::exists(path + ".model")) file = path + ".model";
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
  SentenceFeed lines(files, o.skip_invalid_utf8);
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  const std::pair<const char*, std::string> args[] = {
      {"model_type", to_string(o.kind)},  // zoo's names are SentencePiece's
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
  const auto result = SentencePieceProcessor::train(arg_lines, &SentenceFeed::next, &lines,
                                                    static_cast<unsigned>(o.seed), o.verbose);
  if (!lines.error().empty()) throw std::runtime_error(lines.error());
  if (lines.sentences() == 0) throw std::runtime_error("tokenizer: " + no_text_message(files));
  if (!result.ok) {
    const std::string& message = result.message;
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
  Tokenizer t = from_zoo_model(result.model, "trained tokenizer");
  const auto processor = SentencePieceProcessor::load(result.model, "trained tokenizer");
  std::string vocab;
  for (int64_t i = 0; i < processor.size(); ++i) {
    vocab += processor.piece(i) + "\t" + std::to_string(processor.score(i)) + "\n";
  }
  write_file_atomically(out_prefix + ".model", result.model);
  write_file_atomically(out_prefix + ".vocab", vocab);
  return t;
}

std::vector<int64_t> Tokenizer::encode(const std::string& text) const { return encode(text, false); }

std::vector<int64_t> Tokenizer::encode(const std::string& text, bool add_special_tokens) const {
  return engine_->encode(text, add_special_tokens).ids;
}

Encoding Tokenizer::encode_with_types(const std::string& text, bool add_special_tokens) const {
  return engine_->encode(text, add_special_tokens);
}

Encoding Tokenizer::encode_pair(const std::string& first, const std::string& second, bool add_special_tokens) const {
  return engine_->encode_pair(first, second, add_special_tokens);
}

std::vector<std::string> Tokenizer::encode_pieces(const std::string& text) const {
  return engine_->encode_tokens(text);
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const { return decode(ids, false); }

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  return engine_->decode(ids, skip_special_tokens);
}

int64_t Tokenizer::vocab_size() const { return engine_->vocab_size(); }

std::string Tokenizer::piece(int64_t id) const {
  const std::string* token = engine_->id_to_token(id);
  if (token == nullptr) {
    throw std::runtime_error("tokenizer: id " + std::to_string(id) + " is not in the vocabulary (" +
                             std::to_string(vocab_size()) + " ids)");
  }
  return *token;
}

std::optional<int64_t> Tokenizer::token_to_id(const std::string& token) const { return engine_->token_to_id(token); }

int64_t Tokenizer::sentinel(int64_t i) const {
  if (i < 0 || i >= static_cast<int64_t>(special_.sentinels.size())) {
    throw std::runtime_error("tokenizer: no sentinel <extra_id_" + std::to_string(i) + "> (it has " +
                             std::to_string(special_.sentinels.size()) + ")");
  }
  return special_.sentinels[i];
}

bool Tokenizer::is_special(int64_t id) const { return engine_->is_special(id); }

bool Tokenizer::starts_word(int64_t id) const { return engine_->starts_word(id); }

void Tokenizer::save(const std::string& dir) const { write_tokenizer_files(files_, dir); }

bool has_hf_tokenizer(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const char* name : {"tokenizer.json", "vocab.json", "vocab.txt", "spiece.model", "tokenizer.model"}) {
    if (fs::is_regular_file(fs::path(dir) / name, ec)) return true;
  }
  return false;
}

std::string tokenizer_directory(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path folder = fs::path(path) / "tokenizer";
  std::error_code ec;
  if (!has_hf_tokenizer(path) && fs::is_directory(folder, ec)) return folder.string();
  return path;
}

void store_tokenizer(const Tokenizer& tokenizer, const std::string& dir) {
  namespace fs = std::filesystem;
  switch (tokenizer.kind()) {
    case TokenizerBackend::kZooSentencePiece: {
      const auto path = (fs::path(dir) / "tokenizer.model").string();
      if (!fs::exists(path) || read_file(path) != tokenizer.model_bytes()) write_file_atomically(path, tokenizer.model_bytes());
      fs::remove_all(fs::path(dir) / "tokenizer");  // another tokenizer's, replaced
      return;
    }
    case TokenizerBackend::kTokenizerJson:
    case TokenizerBackend::kGpt2Files:
    case TokenizerBackend::kBertVocab:
    case TokenizerBackend::kHfSentencePiece: {
      const auto folder = fs::path(dir) / "tokenizer";
      if (auto existing = stored_tokenizer(dir); existing && existing->model_bytes() == tokenizer.model_bytes()) return;
      // Whole or not at all: another tokenizer's leftover files must not mix in.
      const std::string staging = temporary_path_for(folder.string());
      tokenizer.save(staging);
      replace_directory(staging, folder.string());
      fs::remove(fs::path(dir) / "tokenizer.model");  // another tokenizer's, replaced
      fs::remove(fs::path(dir) / "tokenizer.vocab");
      return;
    }
  }
}

std::unique_ptr<Tokenizer> stored_tokenizer(const std::string& dir) {
  namespace fs = std::filesystem;
  const auto model = fs::path(dir) / "tokenizer.model", folder = fs::path(dir) / "tokenizer";
  std::error_code ec;
  if (fs::is_regular_file(model, ec)) return std::make_unique<Tokenizer>(Tokenizer::load(model.string()));
  if (fs::is_directory(folder, ec)) return std::make_unique<Tokenizer>(Tokenizer::load(folder.string()));
  return nullptr;
}

std::string vocabulary_mismatch(const Tokenizer& tokenizer, int64_t vocab_size) {
  if (tokenizer.vocab_size() <= vocab_size) return "";
  return "the tokenizer has " + std::to_string(tokenizer.vocab_size()) + " pieces but the model's vocab_size is " +
         std::to_string(vocab_size);
}

std::string Tokenizer::hash_hex() const {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(hash_));
  return buf;
}

}  // namespace zoo
