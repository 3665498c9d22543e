// libFuzzer target for fine-tuning files: the first byte picks CSV, TSV or JSONL, the rest is
// the file. Reading either gives examples or throws std::runtime_error naming file and line.
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "data/example_files.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const char* extensions[] = {".csv", ".tsv", ".jsonl"};
  const std::string path = zoo::fuzz::write_input(data + 1, size - 1, extensions[data[0] % 3]);
  try {
    const auto examples = zoo::read_classification(path);
    zoo::LabelSet::from_examples(examples);
  } catch (const std::runtime_error&) {
  }
  try {
    zoo::read_seq2seq(path);
  } catch (const std::runtime_error&) {
  }
  try {
    zoo::read_instructions(path);  // prompt/completion pairs or "messages" conversations
  } catch (const std::runtime_error&) {
  }
  return 0;
}
