#include "tokenizers/unigram.h"

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "json_test_util.h"

namespace zoo::testing {
namespace {

UnigramModel parse(const std::string& json) { return model_from_json<UnigramModel>(json); }


const char* kPieces = R"([["<unk>",0.0],["a",-1.0],["b",-1.0],["ab",-1.5],["abc",-5.0],["c",-2.0])";

// Viterbi by hand: "abc" = ab + c (-3.5) beats a + b + c (-4) and abc (-5).
TEST(UnigramModel, BestSegmentationByScore) {
  const auto m = parse(std::string(R"({"type":"Unigram","unk_id":0,"vocab":)") + kPieces + "]}");
  EXPECT_EQ(tokenize(m, "abc"), (Ids{3, 5}));
  EXPECT_EQ(tokenize(m, "ba"), (Ids{2, 1}));
  // An unknown character costs the lowest score minus 10 (-15 here) and is the unk id;
  // unknown neighbours fuse into one.
  EXPECT_EQ(tokenize(m, "axb"), (Ids{1, 0, 2}));
  EXPECT_EQ(tokenize(m, "xyc"), (Ids{0, 5}));
  // Equal scores keep the path found first (ending a piece earlier in the lattice walk).
  const auto tie = parse(R"({"type":"Unigram","unk_id":0,"vocab":[["<unk>",0.0],["a",-1.0],["b",-1.0],["ab",-2.0]]})");
  EXPECT_EQ(tokenize(tie, "ab"), (Ids{3}));
}

TEST(UnigramModel, ByteFallbackSpellsUnknownRuns) {
  const auto m = parse(R"({"type":"Unigram","unk_id":0,"byte_fallback":true,"vocab":[["<unk>",0.0],["a",-1.0],
                           ["<0x78>",0.0],["<0x79>",0.0],["<0xC3>",0.0],["<0xA9>",0.0]]})");
  EXPECT_EQ(tokenize(m, "xya"), (Ids{2, 3, 1}));
  EXPECT_EQ(tokenize(m, "\xC3\xA9"), (Ids{4, 5}));
  EXPECT_EQ(tokenize(m, "z"), (Ids{0}));  // no byte piece for 'z': the unk id
}

TEST(UnigramModel, BadModelsAreErrors) {
  EXPECT_EQ(error_of([] { parse(R"({"type":"Unigram","unk_id":5,"vocab":[["a",-1.0]]})"); }),
            "t.json: model: unk_id 5 is outside the vocabulary (1 pieces)");
  EXPECT_EQ(error_of([] { parse(R"({"type":"Unigram","vocab":[["a",-1.0,3]]})"); }),
            "t.json: model.vocab[0]: expected [piece, score], found 3 elements");
  const auto no_unk = parse(R"({"type":"Unigram","unk_id":null,"vocab":[["a",-1.0]]})");
  EXPECT_EQ(error_of([&] { tokenize(no_unk, "ax"); }), "t.json: model: no piece covers 'x' and the model has no unk_id");
}

}  // namespace
}  // namespace zoo::testing
