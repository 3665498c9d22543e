#include "data/tokenize.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/files.h"
#include "test_util.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using testing::error_of;


TEST(Tokenize, TextIntoSplitsAndRefusesAnotherTokenizer) {
  auto slice = read_file(testing::shared_corpus()).substr(0, 300000);
  auto text = testing::scratch_path("text.txt");
  write_file_atomically(text.string(), slice.substr(0, slice.rfind('\n') + 1));
  TokenizerTrainOptions o;
  o.inputs = {text.string()};
  o.vocab_size = 1000;
  auto tokenizer = Tokenizer::train(o, testing::scratch_path("tok").string());
  TokenizeOptions t;
  t.val_fraction = 0.2;
  auto out = testing::scratch_path("data").string();
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
  auto again = tokenize_to_files({text.string()}, tokenizer, testing::scratch_path("data2").string(), t);
  // Inputs without text are named, each of them, and nothing is written.
  const auto empties = testing::scratch_path("empties");
  fs::create_directories(empties);
  write_file_atomically((empties / "a.txt").string(), "");
  write_file_atomically((empties / "b.txt").string(), "\n  \n");
  EXPECT_EQ(error_of([&] { tokenize_to_files({empties.string()}, tokenizer, testing::scratch_path("empties-out").string(), t); }),
            "the inputs contain no text: " + (empties / "a.txt").string() + " and " + (empties / "b.txt").string() +
                " are empty (or only blank lines)");
  EXPECT_FALSE(fs::exists(testing::scratch_path("empties-out") / "train.tokens"));
  EXPECT_EQ(again.val_documents, stats.val_documents);
  t.seed = 99;
  EXPECT_NE(tokenize_to_files({text.string()}, tokenizer, testing::scratch_path("data3").string(), t).val_tokens, stats.val_tokens);
  // A token file made with this tokenizer is refused by another.
  o.vocab_size = 900;
  auto other = Tokenizer::train(o, testing::scratch_path("other").string());
  auto message = error_of([&] { TokenFile::open(out + "/train.tokens", &other); });
  EXPECT_NE(message.find("made with another tokenizer"), std::string::npos) << message;
  EXPECT_NE(message.find(tokenizer.hash_hex()), std::string::npos) << message;
  // Invalid UTF-8 names the file, the line and the byte offset.
  auto broken = testing::scratch_path("broken.txt");
  std::ofstream(broken) << "good\n\nok \xE2\x82 bad\n";
  EXPECT_EQ(error_of([&] { tokenize_to_files({broken.string()}, tokenizer, testing::scratch_path("data4").string(), {}); }),
            broken.string() + ":3: invalid UTF-8 at byte offset 9");
  EXPECT_FALSE(fs::exists(testing::scratch_path("data4") / "train.tokens"));
}

}  // namespace
}  // namespace zoo
