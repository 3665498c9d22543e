#include "text/token_file.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/files.h"
#include "test_util.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

fs::path scratch(const std::string& name) { return testing::scratch_path(name); }

TEST(TokenFile, RoundTripsDocumentsInBothWidths) {
  for (int64_t vocab : {1000, 100000}) {
    std::vector<std::vector<int64_t>> docs{{10, 11, 12}, {500, 999 % vocab}, {7}};
    if (vocab > 65536) docs[1][1] = 99999;
    auto path = scratch("docs.tokens").string();
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
  auto path = scratch("by-hand.tokens").string();
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

  auto odd = scratch("odd.tokens").string();
  write_token_file(odd, {{1, 2}, {4, 5}, {6, 7, 8, 9}}, 512, 1);  // 11 tokens: the index starts at byte 86
  const auto f = TokenFile::open(odd);
  EXPECT_EQ(f.document(0), (std::pair<int64_t, int64_t>{0, 2}));
  EXPECT_EQ(f.document(1), (std::pair<int64_t, int64_t>{3, 5}));
  EXPECT_EQ(f.document(2), (std::pair<int64_t, int64_t>{6, 10}));
}

TEST(TokenFile, CorruptFilesAreRefusedWithTheReason) {
  auto path = scratch("good.tokens").string();
  write_token_file(path, {{5, 6, 7, 8}, {9}}, 1000, 42);
  const auto bytes = read_file(path);
  auto bad = scratch("bad.tokens").string();
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
  EXPECT_NE(error_of([&] { TokenFile::open(scratch("missing.tokens").string()); }).find("cannot open token file"),
            std::string::npos);
  auto f = TokenFile::open(path);
  EXPECT_THROW(f.tokens(3, 10), std::out_of_range);
}

TEST(TokenFile, TokenizesTextIntoSplitsAndRefusesAnotherTokenizer) {
  auto slice = read_file(testing::shared_corpus()).substr(0, 300000);
  auto text = scratch("text.txt");
  write_file_atomically(text.string(), slice.substr(0, slice.rfind('\n') + 1));
  TokenizerTrainOptions o;
  o.inputs = {text.string()};
  o.vocab_size = 1000;
  auto tokenizer = Tokenizer::train(o, scratch("tok").string());
  TokenizeOptions t;
  t.val_fraction = 0.2;
  auto out = scratch("data").string();
  auto stats = tokenize_to_files({text.string()}, tokenizer, out, t);
  EXPECT_GT(stats.val_documents, 0);
  EXPECT_GT(stats.train_documents, 4 * stats.val_documents / 2);
  auto train = TokenFile::open(out + "/train.tokens", &tokenizer);
  EXPECT_EQ(train.size(), stats.train_tokens);
  // The first training document decodes back to text of the corpus (its lines are joined).
  auto [b, e] = train.document(0);
  auto first = tokenizer.decode(train.tokens(b, e - b));
  ASSERT_GT(first.size(), 20u);
  EXPECT_NE(slice.find(first.substr(0, 20)), std::string::npos) << first.substr(0, 80);
  // The same split again with the same seed; another seed moves documents.
  auto again = tokenize_to_files({text.string()}, tokenizer, scratch("data2").string(), t);
  // Inputs without text are named, each of them, and nothing is written.
  const auto empties = scratch("empties");
  fs::create_directories(empties);
  write_file_atomically((empties / "a.txt").string(), "");
  write_file_atomically((empties / "b.txt").string(), "\n  \n");
  EXPECT_EQ(error_of([&] { tokenize_to_files({empties.string()}, tokenizer, scratch("empties-out").string(), t); }),
            "the inputs contain no text: " + (empties / "a.txt").string() + " and " + (empties / "b.txt").string() +
                " are empty (or only blank lines)");
  EXPECT_FALSE(fs::exists(scratch("empties-out") / "train.tokens"));
  EXPECT_EQ(again.val_documents, stats.val_documents);
  t.seed = 99;
  EXPECT_NE(tokenize_to_files({text.string()}, tokenizer, scratch("data3").string(), t).val_tokens, stats.val_tokens);
  // A token file made with this tokenizer is refused by another.
  o.vocab_size = 900;
  auto other = Tokenizer::train(o, scratch("other").string());
  auto message = error_of([&] { TokenFile::open(out + "/train.tokens", &other); });
  EXPECT_NE(message.find("made with another tokenizer"), std::string::npos) << message;
  EXPECT_NE(message.find(tokenizer.hash_hex()), std::string::npos) << message;
  // Invalid UTF-8 names the file, the line and the byte offset.
  auto broken = scratch("broken.txt");
  std::ofstream(broken) << "good\n\nok \xE2\x82 bad\n";
  EXPECT_EQ(error_of([&] { tokenize_to_files({broken.string()}, tokenizer, scratch("data4").string(), {}); }),
            broken.string() + ":3: invalid UTF-8 at byte offset 9");
  EXPECT_FALSE(fs::exists(scratch("data4") / "train.tokens"));
}

}  // namespace
}  // namespace zoo
