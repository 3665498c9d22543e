#include "core/line_reader.h"

#include <algorithm>
#include <iterator>
#include <sstream>
#include <streambuf>

#include <gtest/gtest.h>

#include "base_test_util.h"

namespace zoo {
namespace {

std::vector<std::string> all_lines(const std::string& text, size_t bound = LineReader::kMaxLineBytes) {
  std::istringstream in(text);
  LineReader lines(in, "t.txt", bound);
  std::vector<std::string> out;
  for (std::string line; lines.next(line);) out.push_back(line);
  return out;
}

// The same lines std::getline gives, with numbers and byte offsets, across buffer refills.
TEST(LineReader, SplitsAsGetlineDoes) {
  EXPECT_EQ(all_lines(""), std::vector<std::string>{});
  EXPECT_EQ(all_lines("a"), std::vector<std::string>{"a"});
  EXPECT_EQ(all_lines("a\n"), std::vector<std::string>{"a"});
  EXPECT_EQ(all_lines("a\n\nb\r\n"), (std::vector<std::string>{"a", "", "b\r"}));
  std::string text;
  for (int i = 0; i < 50000; ++i) text += std::string(static_cast<size_t>(i % 7), 'x') + std::to_string(i) + "\n";
  std::istringstream reference(text);
  std::vector<std::string> expected;
  for (std::string line; std::getline(reference, line);) expected.push_back(line);
  EXPECT_EQ(all_lines(text), expected);

  std::istringstream in("ab\ncde\nf");
  LineReader lines(in, "t.txt");
  std::string line;
  ASSERT_TRUE(lines.next(line));
  ASSERT_TRUE(lines.next(line));
  EXPECT_EQ(line, "cde");
  EXPECT_EQ(lines.number(), 2);
  EXPECT_EQ(lines.offset(), 3);
  EXPECT_EQ(lines.where(), "t.txt:2");
  ASSERT_TRUE(lines.next(line));
  EXPECT_EQ(line, "f");
  EXPECT_EQ(lines.offset(), 7);
  EXPECT_FALSE(lines.next(line));
}

// "first\n", then an endless line: std::getline would grow until memory ran out (issue 31: a
// 100 MB line aborted zoo at 3-11 GB). The reader stops at its bound and names file and line.
class EndlessLine : public std::streambuf {
 public:
  EndlessLine() {
    std::fill(std::begin(chunk_), std::end(chunk_), 'a');
    std::copy_n("first\n", 6, chunk_);
    setg(chunk_, chunk_, chunk_ + sizeof chunk_);
  }

 protected:
  int_type underflow() override {
    served_ += sizeof chunk_;
    std::fill(std::begin(chunk_), std::end(chunk_), 'a');
    setg(chunk_, chunk_, chunk_ + sizeof chunk_);
    return traits_type::to_int_type(chunk_[0]);
  }

 public:
  size_t served_ = 0;

 private:
  char chunk_[4096];
};

TEST(LineReader, ALineBeyondTheBoundIsAnErrorBeforeItIsRead) {
  EndlessLine source;
  std::istream in(&source);
  LineReader lines(in, "big.jsonl", size_t{1} << 20);
  std::string line;
  ASSERT_TRUE(lines.next(line));
  EXPECT_EQ(line, "first");
  EXPECT_EQ(testing::error_of([&] { lines.next(line); }),
            "big.jsonl:2: the line is longer than 1 MiB, the most zoo reads as one line (one example or "
            "document per line: split it)");
  EXPECT_LT(source.served_, size_t{2} << 20);
  EXPECT_LE(line.capacity(), size_t{2} << 20);
}

}  // namespace
}  // namespace zoo
