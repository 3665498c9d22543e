#include "tokenizers/precompiled_charsmap.h"

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "core/files.h"
#include "reference_texts.h"

namespace zoo {
namespace {

using testing::error_of;

// SentencePiece's nmt_nfkc rules from a model trained by the sentencepiece package, worked by hand
// against NFKC and the NMT additions (whitespace controls become spaces).
TEST(PrecompiledCharsmap, NmtNfkcRules) {
  const std::string path = testing::spm_references() + "/t5/charsmap.bin";
  const PrecompiledCharsmap charsmap(read_file(path), path);
  EXPECT_EQ(charsmap.normalize("plain text"), "plain text");
  EXPECT_EQ(charsmap.normalize("\xEF\xAC\x81" "ne"), "fine");                 // ﬁ ligature
  EXPECT_EQ(charsmap.normalize("\xEF\xBC\xA1\xEF\xBC\xA2"), "AB");           // fullwidth
  EXPECT_EQ(charsmap.normalize("\xE2\x91\xA0"), "1");                        // circled one
  EXPECT_EQ(charsmap.normalize("a\tb\nc"), "a b c");                         // NMT: controls to spaces
  EXPECT_EQ(charsmap.normalize("e\xCC\x81"), "\xC3\xA9");                    // composed, as NFKC does
  EXPECT_EQ(charsmap.normalize("\xC3\xA9"), "\xC3\xA9");
  EXPECT_FALSE(charsmap.transform("q").has_value());
}

TEST(PrecompiledCharsmap, MalformedCharsmapsAreErrors) {
  EXPECT_EQ(error_of([] { PrecompiledCharsmap("\x01\x00", "t.json: normalizer.precompiled_charsmap"); }),
            "t.json: normalizer.precompiled_charsmap: precompiled_charsmap is truncated (no trie size)");
  EXPECT_EQ(error_of([] { PrecompiledCharsmap(std::string("\x10\x00\x00\x00\x00\x00", 6), "m"); }),
            "m: precompiled_charsmap is truncated (its trie needs 16 bytes)");
  EXPECT_EQ(error_of([] { PrecompiledCharsmap::from_base64("AAA", "m"); }), "m: not base64 (length 3)");
  EXPECT_EQ(error_of([] { PrecompiledCharsmap::from_base64("AA=A", "m"); }), "m: not base64 (at character 3)");
  // A trie whose root points outside itself: an error when used, not a crash.
  const PrecompiledCharsmap broken(std::string("\x04\x00\x00\x00\x00\xFC\xFF\xFF", 8), "m");
  EXPECT_EQ(error_of([&] { broken.normalize("x"); }), "m: precompiled_charsmap's trie is malformed");
}

}  // namespace
}  // namespace zoo
