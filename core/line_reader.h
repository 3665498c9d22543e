#pragma once
// Lines of a text stream, each bounded in length. std::getline grows its string until it meets a
// newline, so one 100 MB line (or a multi-GB file with no newline at all) costs that much memory
// and more in whatever parses it; this reader stops at a stated bound and names the file and line.

#include <cstddef>
#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace zoo {

class LineReader {
 public:
  // A few MiB of text per example or document: far past any real one, small enough to parse.
  static constexpr size_t kMaxLineBytes = size_t{8} << 20;

  // `name` is the file as the user gave it (or "<stdin>"), for messages.
  LineReader(std::istream& in, std::string name, size_t max_line_bytes = kMaxLineBytes);

  // The next line, without its '\n' (a '\r' before it is the caller's to drop); false at the
  // end. Throws std::runtime_error naming `name:line` for a line past the bound (before reading
  // more of it than the bound) or a read error.
  bool next(std::string& line);

  int64_t number() const { return number_; }  // of the line `next` returned last, from 1
  int64_t offset() const { return offset_; }  // of its first byte in the stream
  std::string where() const { return name_ + ":" + std::to_string(number_); }
  const std::string& name() const { return name_; }
  size_t max_line_bytes() const { return max_; }
  // "NAME:LINE: the line is longer than 8 MiB, ...": for a record that spans lines (a quoted
  // CSV field) and outgrows the same bound.
  std::string too_long(int64_t line) const;

 private:
  bool fill();

  std::istream& in_;
  std::string name_;
  size_t max_;
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;
  int64_t number_ = 0, offset_ = 0, next_offset_ = 0;
};

}  // namespace zoo
