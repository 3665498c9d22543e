#include "core/line_reader.h"

#include <cstring>
#include <stdexcept>

namespace zoo {

namespace {

std::string binary_size(size_t bytes) {  // "8 MiB"
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (size_t{1} << 10) && bytes % (size_t{1} << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

}  // namespace

std::string LineReader::too_long(int64_t line) const {
  return name_ + ":" + std::to_string(line) + ": the line is longer than " + binary_size(max_) +
         ", the most zoo reads as one line (one example or document per line: split it)";
}

LineReader::LineReader(std::istream& in, std::string name, size_t max_line_bytes)
    : in_(in), name_(std::move(name)), max_(max_line_bytes), buffer_(size_t{1} << 16) {}

bool LineReader::fill() {
  if (!in_.good()) return false;
  in_.read(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
  begin_ = 0;
  end_ = static_cast<size_t>(in_.gcount());
  if (in_.bad()) throw std::runtime_error(name_ + ": read error");
  return end_ > 0;
}

bool LineReader::next(std::string& line) {
  line.clear();
  bool any = false;
  offset_ = next_offset_;
  while (true) {
    if (begin_ == end_ && !fill()) {
      if (!any) return false;
      ++number_;  // a last line without a newline
      return true;
    }
    any = true;
    const char* start = buffer_.data() + begin_;
    const size_t available = end_ - begin_;
    const void* newline = std::memchr(start, '\n', available);
    const size_t take = newline ? static_cast<size_t>(static_cast<const char*>(newline) - start) : available;
    if (line.size() + take > max_) {
      throw std::runtime_error(too_long(number_ + 1));
    }
    line.append(start, take);
    begin_ += newline ? take + 1 : take;
    next_offset_ += static_cast<int64_t>(newline ? take + 1 : take);
    if (newline) {
      ++number_;
      return true;
    }
  }
}

}  // namespace zoo
