#include "tokenizers/tokenizer_files.h"

#include <filesystem>
#include <stdexcept>

#include "core/files.h"

namespace zoo {
namespace {

const std::string kMagic = "ZOO-TOKENIZER-FILES 1\n";

}  // namespace

bool is_tokenizer_files(const std::string& bytes) { return bytes.compare(0, kMagic.size(), kMagic) == 0; }

std::string serialize_tokenizer_files(const TokenizerFiles& files) {
  std::string out = kMagic;
  for (const auto& [name, bytes] : files) out += name + "\n" + std::to_string(bytes.size()) + "\n" + bytes + "\n";
  return out;
}

TokenizerFiles parse_tokenizer_files(const std::string& bytes, const std::string& source) {
  if (!is_tokenizer_files(bytes)) throw std::runtime_error(source + ": not a zoo tokenizer file container");
  TokenizerFiles files;
  size_t at = kMagic.size();
  const auto line = [&](const char* what) {
    const size_t end = bytes.find('\n', at);
    if (end == std::string::npos) {
      throw std::runtime_error(source + ": truncated tokenizer file container (no " + std::string(what) +
                               " at byte " + std::to_string(at) + ")");
    }
    std::string s = bytes.substr(at, end - at);
    at = end + 1;
    return s;
  };
  while (at < bytes.size()) {
    const std::string name = line("file name");
    if (name.empty() || name.find('/') != std::string::npos) {
      throw std::runtime_error(source + ": bad file name '" + name + "' in the tokenizer file container");
    }
    const std::string size_text = line("size");
    if (size_text.empty() || size_text.size() > 15 || size_text.find_first_not_of("0123456789") != std::string::npos) {
      throw std::runtime_error(source + ": bad size '" + size_text + "' for " + name + " in the tokenizer file container");
    }
    const size_t size = std::stoull(size_text);
    if (size + 1 > bytes.size() - at || bytes[at + size] != '\n') {
      throw std::runtime_error(source + ": truncated tokenizer file container (" + name + " should have " +
                               size_text + " bytes)");
    }
    files[name] = bytes.substr(at, size);
    at += size + 1;
  }
  return files;
}

TokenizerFiles read_tokenizer_files(const std::string& dir, const std::vector<std::string>& names) {
  TokenizerFiles files;
  for (const auto& name : names) {
    const auto path = std::filesystem::path(dir) / name;
    if (std::filesystem::is_regular_file(path)) files[name] = read_file(path.string());
  }
  return files;
}

void write_tokenizer_files(const TokenizerFiles& files, const std::string& dir) {
  std::filesystem::create_directories(dir);
  for (const auto& [name, bytes] : files) write_file_atomically((std::filesystem::path(dir) / name).string(), bytes);
}

}  // namespace zoo
