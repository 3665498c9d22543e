#include "tokenizers/byte_level.h"

#include <set>

#include <gtest/gtest.h>

#include "core/unicode.h"

namespace zoo {
namespace {

// openai/gpt-2's bytes_to_unicode, worked by hand at its landmarks.
TEST(ByteLevel, AlphabetMatchesGpt2) {
  const auto& chars = byte_level_chars();
  EXPECT_EQ(chars['A'], "A");
  EXPECT_EQ(chars['!'], "!");
  EXPECT_EQ(chars[0xE9], "\xC3\xA9");                 // é stands for itself
  EXPECT_EQ(chars[0], unicode::to_utf8(0x100));       // the first byte that is not printable
  EXPECT_EQ(chars[' '], unicode::to_utf8(0x120));     // 'Ġ'
  EXPECT_EQ(chars['\n'], unicode::to_utf8(0x10A));    // 'Ċ'
  EXPECT_EQ(chars[0xAD], unicode::to_utf8(0x143));    // the soft hyphen is the last one moved
  std::set<std::string> distinct(chars.begin(), chars.end());
  EXPECT_EQ(distinct.size(), 256u);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(byte_level_byte(unicode::decode_at(chars[b], 0).code_point), b);
  }
  EXPECT_FALSE(byte_level_byte(0x144).has_value());
  EXPECT_FALSE(byte_level_byte(0x2581).has_value());
  EXPECT_EQ(to_byte_level(" h\xC3\xA9"), "\xC4\xA0h\xC3\x83\xC2\xA9");
}

}  // namespace
}  // namespace zoo
