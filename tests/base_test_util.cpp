#include "base_test_util.h"

#include <unistd.h>

#include <csignal>
#include <stdexcept>

#include "text/corpus.h"

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

std::string shared_corpus() {
  const auto path = std::filesystem::path(ZOO_TEST_BINARY_DIR) / "python-docs.txt";
  if (!std::filesystem::exists(path)) zoo::build_default_corpus(path.string());  // atomic: safe in parallel
  return path.string();
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
