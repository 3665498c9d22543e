#include "serve/stop_texts.h"

#include <gtest/gtest.h>

namespace zoo {
namespace {

// Streams `pieces` through StopTexts: what the client receives, and whether a stop text ended it.
std::pair<std::string, bool> run(const std::vector<std::string>& stops, const std::vector<std::string>& pieces,
                                 std::vector<std::string>* sent = nullptr) {
  StopTexts s(stops);
  std::string out;
  for (const auto& p : pieces) {
    const auto piece = s.add(p);
    if (sent != nullptr) sent->push_back(piece);
    out += piece;
    if (s.stopped()) break;
  }
  out += s.flush();
  return {out, s.stopped()};
}

TEST(StopTexts, CutsAtTheFirstStopEvenWhenSplitOverPieces) {
  EXPECT_EQ(run({"END"}, {"ab", "cE", "N", "Dxyz"}), std::make_pair(std::string("abc"), true));
  EXPECT_EQ(run({"\n\n", "##"}, {"one\n", "two#", "#three"}), std::make_pair(std::string("one\ntwo"), true));
  // The earliest of several stop texts wins.
  EXPECT_EQ(run({"cd", "b"}, {"abcd"}), std::make_pair(std::string("a"), true));
  // No stop text: everything arrives, what was held back at the end.
  EXPECT_EQ(run({"END"}, {"aE", "N", "d"}), std::make_pair(std::string("aENd"), false));
  EXPECT_EQ(run({"xyz"}, {"abc", "xy"}), std::make_pair(std::string("abcxy"), false));
  EXPECT_EQ(run({}, {"a", "b"}), std::make_pair(std::string("ab"), false));
}

// Only what might begin a stop text is held back; the rest goes out at once.
TEST(StopTexts, HoldsBackOnlyAPossibleStart) {
  std::vector<std::string> sent;
  run({"STOP"}, {"hello S", "T", "x"}, &sent);
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0], "hello ");
  EXPECT_EQ(sent[1], "");
  EXPECT_EQ(sent[2], "STx");
  // A multi-byte stop text: the cut never splits a character.
  sent.clear();
  run({"é!"}, {"caf\xc3", "\xa9", "?"}, &sent);
  EXPECT_EQ(sent[0] + sent[1] + sent[2], "caf\xc3\xa9?");
  EXPECT_EQ(sent[0], "caf");
}

}  // namespace
}  // namespace zoo
