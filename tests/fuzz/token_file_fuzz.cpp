// libFuzzer target for token files: opening either throws std::runtime_error naming the file,
// or gives a file whose every document and token can be read (ASan checks the reads).
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "data/token_file.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = zoo::fuzz::write_input(data, size, ".tokens");
  try {
    const auto file = zoo::TokenFile::open(path);
    int64_t sum = 0;
    for (int64_t d = 0; d < file.num_documents(); ++d) {
      const auto [begin, end] = file.document(d);
      for (int64_t t : file.tokens(begin, end - begin)) sum += t;
    }
    volatile int64_t sink = sum;
    (void)sink;
  } catch (const std::runtime_error&) {
  }
  return 0;
}
