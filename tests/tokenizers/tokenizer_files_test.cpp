#include "tokenizers/tokenizer_files.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "core/files.h"

namespace zoo {
namespace {

using testing::error_of;

TEST(TokenizerFiles, SerializedFormRoundTrips) {
  const TokenizerFiles files{{"tokenizer.json", "{\"a\":\n1}"}, {"vocab.txt", std::string("x\0y\n", 4)}, {"empty", ""}};
  const std::string bytes = serialize_tokenizer_files(files);
  EXPECT_TRUE(is_tokenizer_files(bytes));
  EXPECT_EQ(bytes.rfind("ZOO-TOKENIZER-FILES 1\nempty\n0\n\ntokenizer.json\n8\n", 0), 0u);  // name order
  EXPECT_EQ(parse_tokenizer_files(bytes, "ckpt"), files);
  EXPECT_FALSE(is_tokenizer_files("\x0a\x0b<unk>"));
}

TEST(TokenizerFiles, DamagedContainersAreErrors) {
  const std::string bytes = serialize_tokenizer_files({{"tokenizer.json", "{}"}});
  EXPECT_EQ(error_of([&] { parse_tokenizer_files(bytes.substr(0, bytes.size() - 2), "ckpt"); }),
            "ckpt: truncated tokenizer file container (tokenizer.json should have 2 bytes)");
  EXPECT_EQ(error_of([&] { parse_tokenizer_files(bytes.substr(0, 38), "ckpt"); }),
            "ckpt: truncated tokenizer file container (no size at byte 37)");
  EXPECT_EQ(error_of([] { parse_tokenizer_files("ZOO-TOKENIZER-FILES 1\nx\n-3\n", "ckpt"); }),
            "ckpt: bad size '-3' for x in the tokenizer file container");
  EXPECT_EQ(error_of([] { parse_tokenizer_files("ZOO-TOKENIZER-FILES 1\n../x\n1\na\n", "ckpt"); }),
            "ckpt: bad file name '../x' in the tokenizer file container");
  EXPECT_EQ(error_of([] { parse_tokenizer_files("nope", "ckpt"); }), "ckpt: not a zoo tokenizer file container");
}

TEST(TokenizerFiles, WrittenAndReadBack) {
  const auto dir = testing::scratch_path("files_dir");
  write_tokenizer_files({{"a.json", "1"}, {"b.txt", "2"}}, dir.string());
  EXPECT_EQ(read_tokenizer_files(dir.string(), {"a.json", "b.txt", "missing"}),
            (TokenizerFiles{{"a.json", "1"}, {"b.txt", "2"}}));
}

}  // namespace
}  // namespace zoo
