#include "tokenizers/sentencepiece_module.h"

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "core/files.h"
#include "reference_texts.h"

namespace zoo {
namespace {

using testing::error_of;

// The module's model, next to the sentencepiece package's with the same file.
TEST(SentencePieceProcessor, AgreesWithPythonSentencePiece) {
  const std::string path = testing::spm_references() + "/llama/m.model";
  const auto p = SentencePieceProcessor::load(read_file(path), path);
  EXPECT_EQ(p.size(), 2000);
  EXPECT_EQ(p.piece(1), "<s>");
  EXPECT_EQ(p.piece(3), "<0x00>");
  const std::vector<std::string> texts{"Hello world", "tabs\tand \xE2\x82\xBF"};
  const auto expected = testing::spm_encode(path, texts);
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto ids = p.encode(texts[i]);
    EXPECT_EQ(ids, expected[i]);
    EXPECT_EQ(p.decode(ids), texts[i]);
    const auto pieces = p.encode_pieces(texts[i]);
    ASSERT_EQ(pieces.size(), ids.size());
    for (size_t k = 0; k < ids.size(); ++k) EXPECT_EQ(pieces[k], p.piece(ids[k]));
  }
  EXPECT_EQ(p.score(10), 0.0f);  // a byte piece
  EXPECT_LT(p.score(259), 0.0f);  // the first learned piece (after 3 special and 256 byte pieces)
  EXPECT_NE(sentencepiece_module_path().find("libzoo_sentencepiece.so"), std::string::npos);
}

TEST(SentencePieceProcessor, NotAModelIsAnError) {
  EXPECT_NE(error_of([] { SentencePieceProcessor::load("definitely not a protobuf", "x.model"); })
                .rfind("x.model: not a SentencePiece model (", 0),
            std::string::npos);
}

}  // namespace
}  // namespace zoo
