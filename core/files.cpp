#include "core/files.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <iostream>
#include <optional>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <memory>
#include <vector>

#include <xxhash.h>

namespace zoo {
namespace {

namespace fs = std::filesystem;

// The nearest part of `path` that exists (the path itself, a parent, or "." for a relative one).
fs::path existing_ancestor(const fs::path& path) {
  fs::path p = path;
  std::error_code ec;
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  return p.empty() ? fs::path(".") : p;
}

}  // namespace

std::string describe_write_error(const std::string& path, int error) {
  const fs::path folder = existing_ancestor(fs::path(path).parent_path());
  switch (error) {
    case ENOSPC: return "the disk is full";
    case EDQUOT: return "the disk quota is exhausted";
    case EFBIG: return "the file-size limit (ulimit -f) was reached";
    case EROFS: return "the file system of " + folder.string() + " is read-only";
    case EACCES:
    case EPERM: return "permission denied: the directory " + folder.string() + " is not writable";
    case ENOTDIR: return "a part of the path is a file, not a directory";
    case EISDIR: return "it is a directory";
    case ENOENT: return "the directory " + fs::path(path).parent_path().string() + " does not exist";
    default: return std::strerror(error);
  }
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw std::runtime_error(path + ": is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error(path + ": cannot open (" + std::string(errno == ENOENT ? "no such file" : std::strerror(errno)) + ")");
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw std::runtime_error(path + ": read error");
  return buffer.str();
}

namespace {

// The writer's PID when `name` is a temporary zoo made (BASE.tmp.PID.N, maybe with a suffix such
// as .index) for `base`, or for any base when `base` is empty.
std::optional<pid_t> temporary_owner(const std::string& name, const std::string& base) {
  const size_t marker = base.empty() ? name.rfind(".tmp.") : base.size();
  if (marker == std::string::npos || marker == 0) return std::nullopt;
  if (name.compare(0, base.size(), base) != 0 || name.compare(marker, 5, ".tmp.") != 0) return std::nullopt;
  size_t i = marker + 5, digits = 0;  // (no starts_with: the fuzzers build this file as C++17)
  pid_t pid = 0;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && digits < 9) {
    pid = pid * 10 + (name[i++] - '0'), ++digits;
  }
  if (digits == 0 || i >= name.size() || name[i] != '.') return std::nullopt;
  if (++i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return std::nullopt;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i < name.size() && name[i] != '.') return std::nullopt;
  return pid;
}

bool process_ended(pid_t pid) { return pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH; }

// Removes the temporaries in `dir` made for `base` (any base when empty) whose writer no longer
// runs, saying so on `log` when given.
int64_t remove_stale_in(const fs::path& dir, const std::string& base, std::ostream* log) {
  std::error_code ec;
  int64_t removed = 0;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto pid = temporary_owner(entry.path().filename().string(), base);
    if (!pid || !process_ended(*pid)) continue;  // not one of zoo's, or its writer still runs
    std::error_code ignored;
    if (fs::remove_all(entry.path(), ignored) > 0 && !ignored) {
      ++removed;
      if (log != nullptr) {
        *log << "zoo: removed " << entry.path().string() << ", left by zoo process " << *pid
             << " (no longer running) while it wrote "
             << (dir / base).string() << "\n";
      }
    }
  }
  return removed;
}

}  // namespace

int64_t remove_stale_temporaries_of(const std::string& path, std::ostream* log) {
  const fs::path p(path);
  const std::string base = p.filename().string();
  if (base.empty()) return 0;
  return remove_stale_in(p.has_parent_path() ? p.parent_path() : fs::path("."), base, log);
}

int64_t remove_stale_temporaries(const std::string& dir) { return remove_stale_in(dir, "", nullptr); }

std::string temporary_path_for(const std::string& path) {
  static std::atomic<int> counter{0};
  static std::mutex mutex;
  static std::set<std::string> cleaned;
  {
    // A writer killed earlier (SIGKILL, power loss) left its temporary here: nothing reuses it.
    // Looked for once per target and process: a folder such as /tmp can be large.
    std::lock_guard<std::mutex> lock(mutex);
    if (cleaned.insert(path).second) remove_stale_temporaries_of(path, &std::cerr);
  }
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

namespace {

// Creates `dir`; errors start with `named` (the path the user gave: the folder itself, or a file
// to be written in it).
void create_directories_named(const std::string& dir, const std::string& named) {
  if (dir.empty()) return;
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return;
  // Find what is in the way before asking the file system, to say it in words.
  const fs::path target(dir);
  const fs::path existing = existing_ancestor(target);
  if (fs::exists(existing, ec) && !fs::is_directory(existing, ec)) {
    if (existing.string() == named) throw std::runtime_error(named + ": exists and is a file, not a directory");
    throw std::runtime_error(named + ": cannot create the directory: " + existing.string() + " is a file, not a directory");
  }
  fs::create_directories(target, ec);
  if (ec) {
    throw std::runtime_error(named + ": cannot create the directory: " + describe_write_error(dir, ec.value()));
  }
}

}  // namespace

void create_directories(const std::string& dir) { create_directories_named(dir, dir); }

void create_parent_directories(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) create_directories_named(parent.string(), path);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  if (fs::is_directory(path_, ec)) throw std::runtime_error(path_ + ": is a directory, not a file");
  temporary_ = temporary_path_for(path_);
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot write", errno);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
}

void AtomicFile::fail(const std::string& doing, int error) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
  temporary_.clear();
  throw std::runtime_error(path_ + ": " + doing + ": " + describe_write_error(path_, error));
}

void AtomicFile::write(const void* data, size_t size) {
  if (fd_ < 0) throw std::logic_error(path_ + ": written after it was committed or failed");
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", errno);
    }
    p += n, size -= static_cast<size_t>(n), size_ += static_cast<uint64_t>(n);
  }
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t size) {
  if (fd_ < 0) throw std::logic_error(path_ + ": written after it was committed or failed");
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(fd_, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", errno);
    }
    p += n, size -= static_cast<size_t>(n), offset += static_cast<uint64_t>(n);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw std::logic_error(path_ + ": committed twice or after a failure");
  // The data reaches the disk before the name does: a crash leaves the old file or the new one.
  if (::fsync(fd_) != 0) fail("cannot write", errno);
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("cannot write", errno);
  }
  fd_ = -1;
  std::error_code ec;
  if (fs::is_directory(path_, ec)) {
    ::unlink(temporary_.c_str());
    throw std::runtime_error(path_ + ": is a directory, not a file");
  }
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary_.c_str());
    temporary_.clear();
    throw std::runtime_error(path_ + ": cannot move the finished file into place: " + describe_write_error(path_, error));
  }
  temporary_.clear();
}

void replace_directory(const std::string& finished, const std::string& target) {
  std::error_code ec;
  auto move = [&](const std::string& from, const std::string& to) {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      const int error = errno;
      fs::remove_all(finished, ec);
      throw std::runtime_error(target + ": cannot move the finished directory into place: " +
                               describe_write_error(target, error));
    }
  };
  if (fs::exists(fs::symlink_status(target, ec))) {
    const std::string old = temporary_path_for(target + ".old");
    move(target, old);
    move(finished, target);
    fs::remove_all(old, ec);
  } else {
    move(finished, target);
  }
}

void remove_whole(const std::string& path) {
  const std::string doomed = temporary_path_for(path);
  std::error_code ec;
  if (::rename(path.c_str(), doomed.c_str()) == 0) fs::remove_all(doomed, ec);
  else fs::remove_all(path, ec);
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  AtomicFile file(path);
  file.write(bytes);
  file.commit();
}

std::string file_hash(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  XXH3_128bits_reset(state.get());
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    XXH3_128bits_update(state.get(), buffer.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw std::runtime_error(path + ": read error");
  const XXH128_hash_t hash = XXH3_128bits_digest(state.get());
  char hex[40];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(hash.high64),
                static_cast<unsigned long long>(hash.low64));
  return std::string("xxh3-128:") + hex;
}

}  // namespace zoo
