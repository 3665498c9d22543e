#pragma once
// Helpers for every test, including the torch-free ones (zoo_text_tests): scratch files,
// error messages, the shared corpus, and running reference programs.

#include <sys/resource.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace zoo {
class Tokenizer;
}

namespace zoo::testing {

// `name` inside a folder of this test process under the system's temporary directory.
std::filesystem::path scratch_path(const std::string& name);

// The message of the exception `f` throws, or "no error".
std::string error_of(const std::function<void()>& f);

// What running `f` costs in stack: `f` runs on a thread whose `stack_bytes` of stack are painted
// first, and the bytes it changed are counted. `*error` (when given) gets error_of(f). A stack
// overflow is a crash, as it is for zoo: the caller picks a stack with room to spare.
size_t stack_bytes_used(const std::function<void()>& f, size_t stack_bytes, std::string* error = nullptr);

// The Python that runs the reference scripts: $ZOO_PYTHON (ctest sets it to scripts/setup.sh's
// environment, which has PyTorch 2.15, transformers, tokenizers, peft, sentencepiece), else that
// environment at its default place (~/.cache/zoo/venv/bin/python). Throws, saying so, when
// neither exists.
std::string reference_python();

// The default corpus, built once per build tree (tests share it; building takes seconds).
std::string shared_corpus();

// A zoo tokenizer of `vocab_size` pieces trained on the first `corpus_bytes` of the shared corpus
// (whole lines), written as scratch NAME.model.
Tokenizer train_tokenizer(const std::string& name, size_t corpus_bytes, int64_t vocab_size);

// A 512-piece zoo tokenizer trained on a slice of the shared corpus, made once per build tree
// (tests in other processes read the same file).
const Tokenizer& shared_tokenizer();

// Lowers the file-size limit (ulimit -f) of this process while it lives: writes past `bytes`
// fail with EFBIG, as on a full disk.
class ScopedFileSizeLimit {
 public:
  explicit ScopedFileSizeLimit(uint64_t bytes);
  ~ScopedFileSizeLimit();

 private:
  struct rlimit old_ {};
};

}  // namespace zoo::testing
