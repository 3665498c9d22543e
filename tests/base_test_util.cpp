#include "base_test_util.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <algorithm>
#include <stdexcept>

#include "core/files.h"
#include "data/corpus.h"
#include "tokenizers/tokenizer.h"

namespace zoo::testing {

std::filesystem::path scratch_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("zoo_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir / name;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

size_t stack_bytes_used(const std::function<void()>& f, size_t stack_bytes, std::string* error) {
  constexpr unsigned char kPaint = 0xA5;
  void* memory = ::mmap(nullptr, stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (memory == MAP_FAILED) throw std::runtime_error("stack_bytes_used: cannot map a stack");
  auto* stack = static_cast<unsigned char*>(memory);
  std::fill(stack, stack + stack_bytes, kPaint);
  struct Job {
    const std::function<void()>* f;
    std::string message;
  } job{&f, {}};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstack(&attr, stack, stack_bytes);
  pthread_t thread;
  const int started = pthread_create(
      &thread, &attr,
      [](void* p) -> void* {
        auto* j = static_cast<Job*>(p);
        j->message = error_of(*j->f);
        return nullptr;
      },
      &job);
  pthread_attr_destroy(&attr);
  if (started != 0) {
    ::munmap(memory, stack_bytes);
    throw std::runtime_error("stack_bytes_used: cannot start a thread");
  }
  pthread_join(thread, nullptr);
  if (error != nullptr) *error = job.message;
  // The stack grows down from the end: the lowest changed byte marks the deepest point reached.
  size_t untouched = 0;
  while (untouched < stack_bytes && stack[untouched] == kPaint) ++untouched;
  ::munmap(memory, stack_bytes);
  return stack_bytes - untouched;
}

std::string reference_python() {
  if (const char* python = std::getenv("ZOO_PYTHON"); python != nullptr && *python != '\0') return python;
  const char* home = std::getenv("HOME");
  const auto fallback = std::filesystem::path(home != nullptr ? home : "/") / ".cache/zoo/venv/bin/python";
  if (std::filesystem::exists(fallback)) return fallback.string();
  throw std::runtime_error("no reference Python: set ZOO_PYTHON to the Python of scripts/setup.sh's environment "
                           "(ctest sets it), or run scripts/setup.sh");
}

std::string shared_corpus() {
  const auto path = std::filesystem::path(ZOO_TEST_BINARY_DIR) / "python-docs.txt";
  if (!std::filesystem::exists(path)) zoo::build_default_corpus(path.string());  // atomic: safe in parallel
  return path.string();
}

Tokenizer train_tokenizer(const std::string& name, size_t corpus_bytes, int64_t vocab_size) {
  const std::string text = zoo::read_file(shared_corpus()).substr(0, corpus_bytes);
  const auto slice = scratch_path(name + "-slice.txt");
  zoo::write_file_atomically(slice.string(), text.substr(0, text.rfind('\n') + 1));
  zoo::TokenizerTrainOptions o;
  o.inputs = {slice.string()};
  o.vocab_size = vocab_size;
  return zoo::Tokenizer::train(o, scratch_path(name).string());
}

const Tokenizer& shared_tokenizer() {
  static const Tokenizer tokenizer = [] {
    const auto dir = std::filesystem::path(ZOO_TEST_BINARY_DIR);
    const auto model = dir / "shared-tokenizer-512.model";
    if (!std::filesystem::exists(model)) {
      // Trained in this process's scratch directory, then renamed: safe when tests start in parallel.
      train_tokenizer("shared-tokenizer-512", 200000, 512);
      std::filesystem::rename(scratch_path("shared-tokenizer-512.model"), model);
    }
    return zoo::Tokenizer::load(model.string());
  }();
  return tokenizer;
}

ScopedFileSizeLimit::ScopedFileSizeLimit(uint64_t bytes) {
  // Writes past the limit then fail with EFBIG (as zoo's programs see them) instead of a signal.
  std::signal(SIGXFSZ, SIG_IGN);
  ::getrlimit(RLIMIT_FSIZE, &old_);
  struct rlimit limit = old_;
  limit.rlim_cur = static_cast<rlim_t>(bytes);
  ::setrlimit(RLIMIT_FSIZE, &limit);
}

ScopedFileSizeLimit::~ScopedFileSizeLimit() { ::setrlimit(RLIMIT_FSIZE, &old_); }

}  // namespace zoo::testing
