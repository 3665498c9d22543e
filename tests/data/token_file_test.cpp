#include "data/token_file.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/files.h"
#include "test_util.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using testing::error_of;


TEST(TokenFile, RoundTripsDocumentsInBothWidths) {
  for (int64_t vocab : {1000, 100000}) {
    std::vector<std::vector<int64_t>> docs{{10, 11, 12}, {500, 999 % vocab}, {7}};
    if (vocab > 65536) docs[1][1] = 99999;
    auto path = testing::scratch_path("docs.tokens").string();
    write_token_file(path, docs, vocab, 0xABCDEF);
    auto f = TokenFile::open(path);
    EXPECT_EQ(f.info().token_bytes, vocab > 65536 ? 4u : 2u);
    EXPECT_EQ(f.info().tokenizer_hash, 0xABCDEFu);
    EXPECT_EQ(f.num_documents(), 3);
    // The stream is each document followed by </s>.
    std::vector<int64_t> stream;
    for (const auto& d : docs) {
      stream.insert(stream.end(), d.begin(), d.end());
      stream.push_back(SpecialTokens::kEos);
    }
    EXPECT_EQ(f.tokens(0, f.size()), stream);
    EXPECT_EQ(f.document(1), (std::pair<int64_t, int64_t>{4, 6}));
    EXPECT_EQ(fs::file_size(path), 64 + stream.size() * f.info().token_bytes + 4 * 8);
  }
}

// The layout, byte for byte, from the format's description: an odd number of 2-byte tokens puts
// the document index at an offset that is not 8-byte aligned (read with memcpy, not a cast).
TEST(TokenFile, LayoutByHandWithAnUnalignedIndex) {
  auto path = testing::scratch_path("by-hand.tokens").string();
  write_token_file(path, {{9, 10}, {11, 12, 13, 14}}, 512, 0x1122334455667788ULL);  // 8 tokens with </s>
  const auto bytes = read_file(path);
  auto u64 = [&](size_t at) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(bytes[at + i]);
    return v;
  };
  ASSERT_EQ(bytes.size(), 64u + 8 * 2 + 3 * 8);
  EXPECT_EQ(bytes.substr(0, 8), "ZOOTOKEN");
  EXPECT_EQ(u64(16), 512u);                    // vocabulary
  EXPECT_EQ(u64(24), 0x1122334455667788ULL);   // tokenizer hash
  EXPECT_EQ(u64(32), 8u);                      // tokens
  EXPECT_EQ(u64(40), 2u);                      // documents
  EXPECT_EQ(static_cast<unsigned char>(bytes[64 + 2 * 2]), SpecialTokens::kEos);  // the first document's </s>
  EXPECT_EQ(u64(80), 0u);  // document starts, then the total
  EXPECT_EQ(u64(88), 3u);
  EXPECT_EQ(u64(96), 8u);

  auto odd = testing::scratch_path("odd.tokens").string();
  write_token_file(odd, {{1, 2}, {4, 5}, {6, 7, 8, 9}}, 512, 1);  // 11 tokens: the index starts at byte 86
  const auto f = TokenFile::open(odd);
  EXPECT_EQ(f.document(0), (std::pair<int64_t, int64_t>{0, 2}));
  EXPECT_EQ(f.document(1), (std::pair<int64_t, int64_t>{3, 5}));
  EXPECT_EQ(f.document(2), (std::pair<int64_t, int64_t>{6, 10}));
}

TEST(TokenFile, CorruptFilesAreRefusedWithTheReason) {
  auto path = testing::scratch_path("good.tokens").string();
  write_token_file(path, {{5, 6, 7, 8}, {9}}, 1000, 42);
  const auto bytes = read_file(path);
  auto bad = testing::scratch_path("bad.tokens").string();
  write_file_atomically(bad, bytes.substr(0, bytes.size() - 3));
  EXPECT_NE(error_of([&] { TokenFile::open(bad); }).find("truncated or corrupt token file"), std::string::npos);
  write_file_atomically(bad, bytes.substr(0, 20));
  EXPECT_NE(error_of([&] { TokenFile::open(bad); }).find("shorter than the header"), std::string::npos);
  write_file_atomically(bad, "NOTATOKN" + bytes.substr(8));
  EXPECT_EQ(error_of([&] { TokenFile::open(bad); }), bad + ": not a token file (bad magic number)");
  auto lying = bytes;
  lying[32] = '\x7f';  // claims many more tokens than the file holds
  write_file_atomically(bad, lying);
  EXPECT_NE(error_of([&] { TokenFile::open(bad); }).find("truncated or corrupt"), std::string::npos);
  EXPECT_NE(error_of([&] { TokenFile::open(testing::scratch_path("missing.tokens").string()); }).find("cannot open token file"),
            std::string::npos);
  // Found by the token-file fuzzer: 2^64 - 1 documents made the index's size wrap to 0 bytes.
  auto wrapping = bytes.substr(0, 64 + 7 * 2);
  for (int k = 40; k < 48; ++k) wrapping[k] = '\xff';
  write_file_atomically(bad, wrapping);
  EXPECT_NE(error_of([&] { TokenFile::open(bad); }).find("truncated or corrupt token file"), std::string::npos);
  auto f = TokenFile::open(path);
  EXPECT_THROW(f.tokens(3, 10), std::out_of_range);
  // A header whose vocabulary is smaller than the ids it holds (issue 31: ids past it reached
  // the embedding as "index out of range in self").
  auto small = bytes;
  small[16] = 8, small[17] = 0;  // vocabulary 8; the file holds ids up to 9
  write_file_atomically(bad, small);
  const auto mislabelled = TokenFile::open(bad);
  EXPECT_EQ(mislabelled.tokens(0, 2), (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(error_of([&] { mislabelled.tokens(0, 6); }),
            bad + ": token 3 is id 8, outside the header's vocabulary of 8 (a corrupt token file)");
  EXPECT_EQ(error_of([&] { mislabelled.token(5); }),
            bad + ": token 5 is id 9, outside the header's vocabulary of 8 (a corrupt token file)");
}

}  // namespace
}  // namespace zoo
