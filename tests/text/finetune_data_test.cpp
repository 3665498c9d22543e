#include "text/finetune_data.h"

#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/files.h"
#include "test_util.h"

namespace zoo {
namespace {

using testing::error_of;

std::string write(const std::string& name, const std::string& content) {
  auto path = testing::scratch_path(name).string();
  write_file_atomically(path, content);
  return path;
}

const Tokenizer& tokenizer() {
  static Tokenizer t = [] {
    auto slice = read_file(testing::shared_corpus()).substr(0, 200000);
    TokenizerTrainOptions o;
    o.inputs = {write("ft_text.txt", slice.substr(0, slice.rfind('\n') + 1))};
    o.vocab_size = 1000;
    return Tokenizer::train(o, testing::scratch_path("ft_tok").string());
  }();
  return t;
}

TEST(FinetuneData, ReadsTheSameExamplesFromCsvTsvAndJsonl) {
  auto csv = write("a.csv",
                   "text,text_pair,label\n"
                   "\"Hello, world\",\"a \"\"quoted\"\" pair\",pos\n"
                   "\"spans\ntwo lines\",,neg\n"
                   "plain,x,pos\n");
  auto tsv = write("a.tsv",
                   "label\ttext\ttext_pair\n"
                   "pos\tHello, world\ta \"quoted\" pair\n"
                   "neg\tspans two lines\t\n"
                   "pos\tplain\tx\n");
  auto jsonl = write("a.jsonl",
                     "{\"text\": \"Hello, world\", \"text_pair\": \"a \\\"quoted\\\" pair\", \"label\": \"pos\"}\n"
                     "\n"
                     "{\"text\": \"spans\\ntwo lines\", \"label\": \"neg\"}\n"
                     "{\"text\": \"plain\", \"text_pair\": \"x\", \"label\": \"pos\"}\n");
  for (const auto& path : {csv, tsv, jsonl}) {
    SCOPED_TRACE(path);
    auto ex = read_classification(path);
    ASSERT_EQ(ex.size(), 3u);
    EXPECT_EQ(ex[0].text, "Hello, world");
    EXPECT_EQ(ex[0].text_pair, "a \"quoted\" pair");
    EXPECT_EQ(ex[1].label, "neg");
    EXPECT_TRUE(ex[1].text_pair.empty());
    EXPECT_EQ(ex[2].text, "plain");
  }
  EXPECT_EQ(read_classification(csv)[1].text, "spans\ntwo lines");
  EXPECT_EQ(read_classification(jsonl)[2].line, 4);  // blank lines still count
}

TEST(FinetuneData, MalformedInputNamesFileLineAndExpectation) {
  auto csv = write("bad.csv", "text,label\nfine,pos\nthree,fields,here\n");
  EXPECT_EQ(error_of([&] { read_classification(csv); }), csv + ":3: expected 2 fields, got 3");
  auto missing = write("missing.csv", "text,labels\nx,y\n");
  EXPECT_EQ(error_of([&] { read_classification(missing); }),
            missing + ":1: the header has no 'label' column (columns: text, labels)");
  // Found by the example_files fuzzer: a repeated column made a row of fewer fields read past its end.
  auto twice = write("twice.csv", "text,text,label\na,b\n");
  EXPECT_EQ(error_of([&] { read_classification(twice); }), twice + ":1: column 'text' appears twice");
  auto quote = write("quote.csv", "text,label\n\"never closed,pos\n");
  EXPECT_EQ(error_of([&] { read_classification(quote); }), quote + ":2: unterminated quoted field");
  auto json = write("bad.jsonl", "{\"text\": \"a\", \"label\": \"x\"}\n{\"text\": \"b\", \"label\": 1.5}\n");
  EXPECT_EQ(error_of([&] { read_classification(json); }), json + ":2: field 'label' must be a string, got number");
  auto broken = write("broken.jsonl", "{\"text\": \"a\", \"label\": \"x\"}\n{\"text\": \"b\",\n");
  EXPECT_NE(error_of([&] { read_classification(broken); }).find(broken + ":2: malformed JSON"), std::string::npos);
  auto huge = write("huge.jsonl", "{\"text\": \"a\", \"label\": 1e99999}\n");  // the fuzzer's: out of range, not a parse error
  EXPECT_NE(error_of([&] { read_classification(huge); }).find(huge + ":1: malformed JSON"), std::string::npos);
  auto no_label = write("nolabel.jsonl", "{\"text\": \"a\"}\n");
  EXPECT_EQ(error_of([&] { read_classification(no_label); }), no_label + ":1: missing field 'label'");
  auto utf8 = write("utf8.tsv", "text\tlabel\nbad \xC3 byte\tpos\n");
  EXPECT_EQ(error_of([&] { read_classification(utf8); }), utf8 + ":2: invalid UTF-8 at byte offset 4 of a field");
  auto empty = write("empty.csv", "");
  EXPECT_EQ(error_of([&] { read_classification(empty); }), empty + ": empty file (expected a header row and examples)");
  EXPECT_EQ(error_of([&] { read_classification(write("x.xml", "<a/>")); }),
            testing::scratch_path("x.xml").string() + ": unknown data format (expected a .csv, .tsv or .jsonl file)");
  EXPECT_NE(error_of([&] { read_classification("/nonexistent/data.csv"); }).find("/nonexistent/data.csv: cannot open"),
            std::string::npos);
}

TEST(FinetuneData, LabelSetIsInferredSavedAndEnforced) {
  auto ex = read_classification(write("labels.csv", "text,label\na,spam\nb,ham\nc,spam\nd,eggs\n"));
  auto labels = LabelSet::from_examples(ex);
  EXPECT_EQ(labels.labels(), (std::vector<std::string>{"eggs", "ham", "spam"}));
  auto path = testing::scratch_path("labels.json").string();
  labels.save(path);
  auto loaded = LabelSet::load(path);
  EXPECT_EQ(loaded.labels(), labels.labels());
  EXPECT_EQ(loaded.id("spam"), 2);
  EXPECT_EQ(error_of([&] { loaded.id("bacon", "eval.csv:7"); }),
            "eval.csv:7: label 'bacon' was never seen in training (known: eggs, ham, spam)");
  auto eval = read_classification(write("eval.csv", "text,label\nx,ham\ny,bacon\n"));
  EXPECT_EQ(error_of([&] { ClassificationDataset(eval, tokenizer(), labels, 32, "eval.csv"); }),
            "eval.csv:3: label 'bacon' was never seen in training (known: eggs, ham, spam)");
  EXPECT_THROW(LabelSet::from_examples({{"a", "", "only", 2}}), std::runtime_error);
}

TEST(FinetuneData, ClassificationBatchesArePaddedWithMasksAndSegments) {
  const auto& t = tokenizer();
  std::vector<ClassificationExample> ex{{"a short one", "", "x", 2},
                                        {"a somewhat longer sentence with more words", "and its pair", "y", 3}};
  auto labels = LabelSet::from_examples(ex);
  ClassificationDataset data(ex, t, labels, 64);
  auto batch = data.batch({0, 1});
  const int64_t longest = std::max(data.length(0), data.length(1));
  EXPECT_EQ(batch.input_ids.sizes(), (std::vector<int64_t>{2, longest}));
  EXPECT_EQ(batch.attention_mask[0].sum().item<int64_t>(), data.length(0));
  EXPECT_EQ(batch.input_ids[0][0].item<int64_t>(), SpecialTokens::kCls);
  EXPECT_EQ(batch.input_ids[0][data.length(0)].item<int64_t>(), SpecialTokens::kPad);
  EXPECT_EQ(batch.labels[1].item<int64_t>(), 1);
  EXPECT_GT(batch.token_type_ids[1].sum().item<int64_t>(), 0);
  EXPECT_EQ(batch.token_type_ids[0].sum().item<int64_t>(), 0);
  // Truncation keeps [CLS] ... [SEP] ... [SEP] within max_length.
  ClassificationDataset short_data(ex, t, labels, 8);
  EXPECT_EQ(short_data.length(1), 8);
  auto b = short_data.batch({1});
  EXPECT_EQ(b.input_ids[0][7].item<int64_t>(), SpecialTokens::kSep);
}

TEST(FinetuneData, Seq2SeqBatchesShiftTargets) {
  auto path = write("pairs.tsv", "source\ttarget\ntranslate this\tdas hier\nand this one too\tund das\n");
  auto ex = read_seq2seq(path);
  ASSERT_EQ(ex.size(), 2u);
  Seq2SeqDataset data(ex, tokenizer(), 64, 64, /*decoder_start=*/SpecialTokens::kPad);
  auto batch = data.batch({0, 1});
  EXPECT_EQ(batch.decoder_input_ids.sizes(), batch.labels.sizes());
  auto n = batch.labels[0].ne(kIgnoreIndex).sum().item<int64_t>();
  EXPECT_EQ(batch.labels[0][n - 1].item<int64_t>(), SpecialTokens::kEos);
  EXPECT_TRUE(batch.decoder_input_ids[0].narrow(0, 1, n - 1).equal(batch.labels[0].narrow(0, 0, n - 1)));
  EXPECT_EQ(tokenizer().decode(std::vector<int64_t>(batch.labels[0].data_ptr<int64_t>(),
                                                    batch.labels[0].data_ptr<int64_t>() + n - 1)),
            "das hier");
  EXPECT_NE(error_of([&] { read_seq2seq(write("bad.jsonl", "{\"source\": \"x\"}\n")); }).find(":1: missing field 'target'"),
            std::string::npos);
}

TEST(FinetuneData, LengthBucketsCoverEveryExampleOnceWithLessPadding) {
  std::mt19937_64 rng(1);
  std::vector<int64_t> lengths(1000);
  for (auto& l : lengths) l = 5 + rng() % 200;
  auto batches = bucket_by_length(lengths, 16, 3, 0);
  std::multiset<int64_t> seen;
  int64_t padded = 0, random_padded = 0;
  for (const auto& b : batches) {
    int64_t longest = 0;
    for (int64_t i : b) seen.insert(i), longest = std::max(longest, lengths[i]);
    for (int64_t i : b) padded += longest - lengths[i];
  }
  for (size_t s = 0; s < lengths.size(); s += 16) {
    int64_t longest = 0;
    for (size_t i = s; i < std::min(lengths.size(), s + 16); ++i) longest = std::max(longest, lengths[i]);
    for (size_t i = s; i < std::min(lengths.size(), s + 16); ++i) random_padded += longest - lengths[i];
  }
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 1000u);
  EXPECT_LT(padded * 5, random_padded);  // far less padding than batches in arrival order
  EXPECT_EQ(bucket_by_length(lengths, 16, 3, 0), batches);  // seeded
  EXPECT_NE(bucket_by_length(lengths, 16, 3, 1), batches);  // reshuffled each epoch
}

}  // namespace
}  // namespace zoo
