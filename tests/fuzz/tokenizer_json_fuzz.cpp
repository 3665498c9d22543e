// libFuzzer target for the tokenizer.json reader and the pipeline it builds: the input is a
// tokenizer.json, a NUL byte, then text to encode. Whatever the bytes, reading either throws
// std::runtime_error or gives a tokenizer that encodes the text (or refuses it with
// std::runtime_error), and decodes its own ids; ASan and UBSan watch everything on the way.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "tokenizers/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string json = input.substr(0, nul);
  const std::string text = nul == std::string::npos ? "" : input.substr(nul + 1);
  try {
    const auto tokenizer = zoo::HfTokenizer::from_json(json, "fuzz.json");
    const auto encoding = tokenizer.encode(text, true);
    tokenizer.encode_pair(text, text, false);
    tokenizer.decode(encoding.ids, false);
    tokenizer.decode(encoding.ids, true);
  } catch (const std::runtime_error&) {
  }
  return 0;
}
