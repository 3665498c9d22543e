#include "data/token_lines.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace zoo {

std::string encode_line(const Tokenizer& tokenizer, const std::string& line, bool pieces, const std::string& where) {
  if (const int64_t bad = invalid_utf8_offset(line); bad >= 0) {
    throw std::runtime_error(where + ": invalid UTF-8 at byte offset " + std::to_string(bad) + " of the line");
  }
  std::string out;
  if (pieces) {
    for (const auto& p : tokenizer.encode_pieces(line)) out += (out.empty() ? "" : " ") + p;
  } else {
    for (int64_t id : tokenizer.encode(line)) out += (out.empty() ? "" : " ") + std::to_string(id);
  }
  return out;
}

std::vector<int64_t> parse_token_ids(const std::string& line, int64_t vocab_size, const std::string& where) {
  std::vector<int64_t> ids;
  std::istringstream in(line);
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(word.c_str(), &end, 10);
    if (*end != '\0' || errno == ERANGE) throw std::runtime_error(where + ": '" + word + "' is not a token id");
    if (v < 0 || v >= vocab_size) {
      throw std::runtime_error(where + ": token id " + word + " is outside the vocabulary (0.." +
                               std::to_string(vocab_size - 1) + ")");
    }
    ids.push_back(v);
  }
  return ids;
}

}  // namespace zoo
