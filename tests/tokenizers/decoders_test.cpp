#include "tokenizers/decoders.h"

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "json_test_util.h"

namespace zoo {
namespace {

using testing::error_of;
using Strings = std::vector<std::string>;

Decoder parse(const std::string& json) { return testing::from_json_text<Decoder>(json, "decoder"); }

std::string decode(const std::string& json, const Strings& tokens) {
  const Decoder d = parse(json);
  return decode_tokens(&d, tokens);
}

const std::string kSpace = "\xE2\x96\x81";  // U+2581

TEST(Decoder, ByteLevel) {
  const char* json = R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true})";
  EXPECT_EQ(decode(json, {"Hello", "\xC4\xA0my", "\xC4\xA0" "friend", ","}), "Hello my friend,");
  EXPECT_EQ(decode(json, {"\xC3\x83", "\xC2\xA9"}), "\xC3\xA9");   // 'Ã' '©' are the bytes of é
  EXPECT_EQ(decode(json, {"\xC3\x83"}), "\xEF\xBF\xBD");          // half of it: U+FFFD
  EXPECT_EQ(decode(json, {"a", kSpace}), "a" + kSpace);           // not in the alphabet: kept as is
}

TEST(Decoder, WordPieceMetaspaceAndBpe) {
  EXPECT_EQ(decode(R"({"type":"WordPiece","prefix":"##","cleanup":true})",
                   {"hello", "##world", ",", "how", "are", "you", "?", "don", "'", "t"}),
            "helloworld, how are you? don ' t");
  EXPECT_EQ(decode(R"({"type":"WordPiece","prefix":"##","cleanup":false})", {"a", "##b", "."}), "ab .");
  EXPECT_EQ(decode(R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"always","split":true})",
                   {kSpace + "Hey", kSpace + "friend", "!"}),
            "Hey friend!");
  EXPECT_EQ(decode(R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"never","split":true})",
                   {kSpace + "Hey"}),
            " Hey");
  EXPECT_EQ(decode(R"({"type":"BPEDecoder","suffix":"</w>"})", {"hel", "lo</w>", "world</w>"}), "hello world");
  EXPECT_EQ(decode_tokens(nullptr, {"a", "b"}), "a b");
}

TEST(Decoder, ByteFallbackFuseStripReplace) {
  // Consecutive byte tokens decode together; invalid UTF-8 becomes one U+FFFD per byte.
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(parse(R"({"type":"ByteFallback"})").decode_chain({"<0x61>", "b", "<0xE2>", "<0x96>", "<0x81>", "c", "<0xFF>", "<0x6g>"}),
            (Strings{"a", "b", kSpace, "c", r, "<0x6g>"}));
  EXPECT_EQ(parse(R"({"type":"ByteFallback"})").decode_chain({"<0xE2>", "<0x96>", "<0xFF>"}), (Strings{r, r, r}));
  EXPECT_EQ(parse(R"({"type":"Fuse"})").decode_chain({"a", "b"}), (Strings{"ab"}));
  EXPECT_EQ(parse(R"({"type":"Strip","content":" ","start":1,"stop":0})").decode_chain({" a", "  b", "c "}),
            (Strings{"a", " b", "c "}));
  EXPECT_EQ(parse(R"({"type":"Replace","pattern":{"String":"\u2581"},"content":" "})").decode_chain({kSpace + "a" + kSpace}),
            (Strings{" a "}));
  // LLaMA-2's decoder chain.
  EXPECT_EQ(decode(R"({"type":"Sequence","decoders":[
                        {"type":"Replace","pattern":{"String":"\u2581"},"content":" "},
                        {"type":"ByteFallback"},{"type":"Fuse"},
                        {"type":"Strip","content":" ","start":1,"stop":0}]})",
                   {kSpace + "Hey", "<0x21>", kSpace + "there"}),
            "Hey! there");
}

TEST(Decoder, UnsupportedIsAnError) {
  EXPECT_EQ(error_of([] { parse(R"({"type":"Sequence","decoders":[{"type":"CTC"}]})"); }),
            "t.json: decoder.decoders[0].type: unsupported 'CTC' (zoo reads ByteLevel, WordPiece, Metaspace, "
            "ByteFallback, Fuse, Strip, Replace, BPEDecoder, Sequence)");
  EXPECT_EQ(error_of([] { parse(R"({"type":"Strip","content":"ab","start":1,"stop":0})"); }),
            "t.json: decoder.content: expected one character, found 'ab'");
}

}  // namespace
}  // namespace zoo
