#include "tokenizers/post_processors.h"

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "json_test_util.h"

namespace zoo {
namespace {

using testing::error_of;
using Ids = std::vector<int64_t>;

PostProcessor parse(const std::string& json) { return testing::from_json_text<PostProcessor>(json, "post_processor"); }

Encoding ids(const Ids& i) {
  Encoding e;
  e.ids = i;
  return e;
}

const char* kBertTemplate = R"({"type":"TemplateProcessing",
  "single":[{"SpecialToken":{"id":"[CLS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}},
            {"SpecialToken":{"id":"[SEP]","type_id":0}}],
  "pair":[{"SpecialToken":{"id":"[CLS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}},
          {"SpecialToken":{"id":"[SEP]","type_id":0}},{"Sequence":{"id":"B","type_id":1}},
          {"SpecialToken":{"id":"[SEP]","type_id":1}}],
  "special_tokens":{"[CLS]":{"id":"[CLS]","ids":[101],"tokens":["[CLS]"]},
                    "[SEP]":{"id":"[SEP]","ids":[102],"tokens":["[SEP]"]}}})";

// BERT's layout worked by hand: [CLS] A [SEP] B [SEP], type ids 0 up to the first [SEP], then 1.
TEST(PostProcessor, BertTemplateAndBertProcessingAgree) {
  for (const auto& p : {parse(kBertTemplate),
                        parse(R"({"type":"BertProcessing","sep":["[SEP]",102],"cls":["[CLS]",101]})")}) {
    const Ids a{7, 8}, b{9};
    const Encoding single = post_process(&p, ids(a), nullptr, true);
    EXPECT_EQ(single.ids, (Ids{101, 7, 8, 102}));
    EXPECT_EQ(single.type_ids, (Ids{0, 0, 0, 0}));
    EXPECT_EQ(single.special_mask, (std::vector<uint8_t>{1, 0, 0, 1}));
    const Encoding second = ids(b);
    const Encoding pair = post_process(&p, ids(a), &second, true);
    EXPECT_EQ(pair.ids, (Ids{101, 7, 8, 102, 9, 102}));
    EXPECT_EQ(pair.type_ids, (Ids{0, 0, 0, 0, 1, 1}));
    const Encoding plain = post_process(&p, ids(a), &second, false);
    EXPECT_EQ(plain.ids, (Ids{7, 8, 9}));
    EXPECT_EQ(plain.type_ids, (Ids{0, 0, 1}));
  }
}

TEST(PostProcessor, RobertaByteLevelAndSequence) {
  const auto roberta = parse(R"({"type":"RobertaProcessing","sep":["</s>",2],"cls":["<s>",0],
                                 "trim_offsets":true,"add_prefix_space":true})");
  const Encoding b = ids({9});
  const Encoding pair = post_process(&roberta, ids({7}), &b, true);
  EXPECT_EQ(pair.ids, (Ids{0, 7, 2, 2, 9, 2}));
  EXPECT_EQ(pair.type_ids, (Ids{0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(post_process(&roberta, ids({7}), &b, false).type_ids, (Ids{0, 0}));
  const auto byte_level = parse(R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false})");
  EXPECT_EQ(post_process(&byte_level, ids({7}), &b, true).type_ids, (Ids{0, 1}));
  const auto sequence = parse(std::string(R"({"type":"Sequence","processors":[
      {"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false},)") + kBertTemplate + "]}");
  EXPECT_EQ(post_process(&sequence, ids({7}), nullptr, true).ids, (Ids{101, 7, 102}));
  EXPECT_EQ(post_process(nullptr, ids({7}), &b, true).type_ids, (Ids{0, 1}));
}

TEST(PostProcessor, TemplateTypeIdsAndMultiTokenSpecials) {
  // Funnel's template gives [CLS] type id 2; a special token may stand for several ids.
  const auto p = parse(R"({"type":"TemplateProcessing",
      "single":[{"SpecialToken":{"id":"[CLS]","type_id":2}},{"Sequence":{"id":"A","type_id":0}},
                {"SpecialToken":{"id":"<eos2>","type_id":0}}],
      "pair":[{"Sequence":{"id":"A","type_id":0}},{"Sequence":{"id":"B","type_id":1}}],
      "special_tokens":{"[CLS]":{"id":"[CLS]","ids":[1],"tokens":["[CLS]"]},
                        "<eos2>":{"id":"<eos2>","ids":[3,4],"tokens":["<e>","<os>"]}}})");
  const Encoding e = post_process(&p, ids({7}), nullptr, true);
  EXPECT_EQ(e.ids, (Ids{1, 7, 3, 4}));
  EXPECT_EQ(e.type_ids, (Ids{2, 0, 0, 0}));
}

TEST(PostProcessor, BadTemplatesAreErrors) {
  EXPECT_EQ(error_of([] {
              parse(R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"[X]","type_id":0}}],
                        "pair":[],"special_tokens":{}})");
            }),
            "t.json: post_processor.single[0]: special token '[X]' is not in special_tokens");
  EXPECT_EQ(error_of([] {
              parse(R"({"type":"TemplateProcessing","single":[{"Sequence":{"id":"B","type_id":0}}],
                        "pair":[],"special_tokens":{}})");
            }),
            "t.json: post_processor.single[0]: the single-sequence template refers to $B");
  EXPECT_EQ(error_of([] { parse(R"({"type":"BertProcessing","sep":["[SEP]"],"cls":["[CLS]",101]})"); }),
            "t.json: post_processor.sep: expected [token, id]");
  EXPECT_EQ(error_of([] { parse(R"({"type":"Forward"})"); }),
            "t.json: post_processor.type: unsupported 'Forward' (zoo reads TemplateProcessing, BertProcessing, "
            "RobertaProcessing, ByteLevel, Sequence)");
}

}  // namespace
}  // namespace zoo
