#pragma once
// File helpers with the project's error conventions: every message starts with the path the user
// gave and says in words what is wrong with it ("runs/x: cannot create the directory: runs is a
// file, not a directory"; "model.pt: cannot write: the file-size limit was reached").

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace zoo {

// The whole file. Throws std::runtime_error naming the path when it cannot be read.
std::string read_file(const std::string& path);

// The content hash of a file: "xxh3-128:" and 32 hex digits (XXH3, 128 bits). Throws naming
// the path when it cannot be read.
std::string file_hash(const std::string& path);

// Writes `bytes` to `path` through a temporary file in the same folder (synced, then renamed),
// so no reader ever sees a half-written file and a failure leaves no partial file behind.
void write_file_atomically(const std::string& path, const std::string& bytes);

// A file being written under a temporary name beside its target (whose folder must exist). `commit` syncs it and renames
// it into place; destruction without `commit` removes the temporary. Every failure throws
// std::runtime_error naming the target (never the temporary) and the reason in words.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);
  void write(const std::string& bytes) { write(bytes.data(), bytes.size()); }
  // Overwrites bytes already written (a header completed at the end).
  void write_at(uint64_t offset, const void* data, size_t size);
  uint64_t size() const { return size_; }
  void commit();
  const std::string& path() const { return path_; }
  // Where the bytes are until commit (readable while the file is open).
  const std::string& temporary() const { return temporary_; }

 private:
  [[noreturn]] void fail(const std::string& doing, int error);
  std::string path_, temporary_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A unique temporary name beside `path` (PATH.tmp.PID.N) for writers that produce a file or
// directory themselves; the caller renames it into place or removes it. Temporaries of `path`
// that a zoo process no longer running left behind are removed first, saying so on stderr.
std::string temporary_path_for(const std::string& path);

// Removes PATH.tmp.PID.N[.suffix] beside `path` whose process PID no longer runs; says so on
// `log` when given. Returns how many it removed.
int64_t remove_stale_temporaries_of(const std::string& path, std::ostream* log = nullptr);

// Moves the finished directory `finished` (written under a temporary name) to `target`,
// replacing a directory there only once the new one is complete: the old one is moved aside,
// the new one renamed into place, the old one removed. On failure `finished` is removed and the
// error names `target`.
void replace_directory(const std::string& finished, const std::string& target);

// Removes the file or directory `path` so that no part of it is ever left under its name: it is
// renamed to a temporary first (a process killed while removing leaves a stale temporary, which
// the next write beside it clears), then removed. Errors are ignored, as with remove_all.
void remove_whole(const std::string& path);

// Creates `dir` and its missing parents. Throws naming `dir` and what is in the way: a file
// where a folder is needed, a read-only or missing parent.
void create_directories(const std::string& dir);

// The folder a new file `path` goes into, created when missing (create_directories' errors).
void create_parent_directories(const std::string& path);

// Why writing under `path` failed, in words, for the errno a system call returned: "the disk is
// full", "the file-size limit (ulimit -f) was reached", "the directory X is read-only", ...
std::string describe_write_error(const std::string& path, int error);

// Removes files or directories named like temporary_path_for(...) inside `dir` left by a
// process that no longer runs (killed while writing). Returns how many it removed.
int64_t remove_stale_temporaries(const std::string& dir);

}  // namespace zoo
