#include "data/finetune_data.h"

#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/files.h"
#include "reference_texts.h"
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
  static const Tokenizer t = testing::train_tokenizer("ft_tok", 200000, 1000);
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
  // A UTF-8 byte order mark (Excel's "CSV UTF-8") is not part of the first column's name
  // (it made the header's 'text' column invisible: "no 'text' column (columns: \ufefftext, ...)").
  for (const auto* name : {"bom.csv", "bom.tsv", "bom.jsonl"}) {
    SCOPED_TRACE(name);
    const bool jsonl = std::string(name).ends_with(".jsonl");
    const std::string body = jsonl ? "{\"text\": \"a\", \"label\": 1}\n"
                             : std::string(name).ends_with(".csv") ? "text,label\na,1\n" : "text\tlabel\na\t1\n";
    auto ex = read_classification(write(name, "\xEF\xBB\xBF" + body));
    ASSERT_EQ(ex.size(), 1u);
    EXPECT_EQ(ex[0].text, "a");
    EXPECT_EQ(ex[0].label, "1");
  }
  EXPECT_EQ(read_classification(jsonl)[2].line, 4);  // blank lines still count
}

TEST(FinetuneData, MalformedInputNamesFileLineAndExpectation) {
  // file, its content, and the error after "FILE": the whole message, or its start.
  const struct {
    const char* file;
    std::string content, error;
  } cases[] = {
      {"bad.csv", "text,label\nfine,pos\nthree,fields,here\n", ":3: expected 2 fields, got 3"},
      {"missing.csv", "text,labels\nx,y\n", ":1: the header has no 'label' column (columns: text, labels)"},
      // Found by the example_files fuzzer: a repeated column made a row of fewer fields read past its end.
      {"twice.csv", "text,text,label\na,b\n", ":1: column 'text' appears twice"},
      {"quote.csv", "text,label\n\"never closed,pos\n", ":2: unterminated quoted field"},
      {"bad.jsonl", "{\"text\": \"a\", \"label\": \"x\"}\n{\"text\": \"b\", \"label\": 1.5}\n",
       ":2: field 'label' must be a string, got number"},
      {"broken.jsonl", "{\"text\": \"a\", \"label\": \"x\"}\n{\"text\": \"b\",\n", ":2: malformed JSON"},
      // The fuzzer's too: a number out of range is nlohmann's out_of_range, not a parse error.
      {"huge.jsonl", "{\"text\": \"a\", \"label\": 1e99999}\n", ":1: malformed JSON"},
      {"nolabel.jsonl", "{\"text\": \"a\"}\n", ":1: missing field 'label'"},
      // Text fields are strings: a number was taken as its digits (issue 31).
      {"numtext.jsonl", "{\"text\": 5, \"label\": \"x\"}\n", ":1: field 'text' must be a string, got number"},
      {"numpair.jsonl", "{\"text\": \"a\", \"text_pair\": 5, \"label\": \"x\"}\n",
       ":1: field 'text_pair' must be a string, got number"},
      {"utf8.tsv", "text\tlabel\nbad \xC3 byte\tpos\n", ":2: invalid UTF-8 at byte offset 4 of a field"},
      {"empty.csv", "", ": empty file (expected a header row and examples)"},
      // Lines are bounded (issue 31: a 100 MB line aborted zoo at 3-11 GB): the file and line are
      // named, also for a quoted CSV field that spans many short lines.
      {"long.jsonl", "{\"text\": \"a\", \"label\": \"x\"}\n{\"text\": \"" + std::string(9 << 20, 'a') + "\"}\n",
       ":2: the line is longer than 8 MiB, the most zoo reads as one line"},
      {"long.tsv", "text\tlabel\n" + std::string(9 << 20, 'a') + "\tx\n", ":2: the line is longer than 8 MiB"},
      {"long.csv", "text,label\na,x\n\"" + [] {
         std::string many;
         for (int i = 0; i < (1 << 20); ++i) many += "line " + std::to_string(i) + "\n";
         return many;
       }() + "\",x\n",
       ":3: the line is longer than 8 MiB"},
      {"x.xml", "<a/>", ": unknown data format (expected a .csv, .tsv or .jsonl file)"},
  };
  for (const auto& c : cases) {
    const auto path = write(c.file, c.content);
    const auto error = error_of([&] { read_classification(path); });
    EXPECT_EQ(error.substr(0, path.size() + c.error.size()), path + c.error);
  }
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

// Worked by hand from the tokenizer's own ids: the sequence is prompt + completion + </s>; the
// inputs drop its last token, the labels its first, and every label before the completion is
// ignored, so the loss is on the completion and </s> alone. Rows are right-padded.
TEST(FinetuneData, InstructionsTrainOnTheCompletionOnly) {
  const auto& t = tokenizer();
  auto path = write("instructions.jsonl",
                    "{\"prompt\": \"Question: what is a list?\\nAnswer:\", \"completion\": \" a sequence\"}\n"
                    "{\"prompt\": \"Say hi.\", \"completion\": \" hi\"}\n");
  const auto examples = read_instructions(path);
  ASSERT_EQ(examples.size(), 2u);
  EXPECT_EQ(examples[0].prompt, "Question: what is a list?\nAnswer:");
  InstructionDataset data(examples, t, 64, path);
  const auto batch = data.batch({0, 1});
  auto expect_row = [&](int64_t row, const InstructionExample& e) {
    const auto prompt = t.encode(e.prompt, true), completion = t.encode(e.completion);
    std::vector<int64_t> ids = prompt;
    ids.insert(ids.end(), completion.begin(), completion.end());
    ids.push_back(SpecialTokens::kEos);
    const auto n = static_cast<int64_t>(ids.size()) - 1, width = batch.input_ids.size(1);
    std::vector<int64_t> inputs(ids.begin(), ids.end() - 1), labels(ids.begin() + 1, ids.end());
    std::fill(labels.begin(), labels.begin() + static_cast<int64_t>(prompt.size()) - 1, kIgnoreIndex);
    inputs.resize(width, SpecialTokens::kPad);
    labels.resize(width, kIgnoreIndex);
    EXPECT_TRUE(batch.input_ids[row].equal(torch::tensor(inputs))) << batch.input_ids[row];
    EXPECT_TRUE(batch.labels[row].equal(torch::tensor(labels))) << batch.labels[row];
    EXPECT_EQ(batch.attention_mask[row].sum().item<int64_t>(), n);
    EXPECT_EQ(batch.labels[row].ne(kIgnoreIndex).sum().item<int64_t>(), static_cast<int64_t>(completion.size()) + 1);
  };
  expect_row(0, examples[0]);
  expect_row(1, examples[1]);
  // A prompt that fills the block leaves nothing to learn: the example is left out, and counted.
  const auto long_prompt = static_cast<int64_t>(t.encode(examples[0].prompt, true).size());
  const auto short_prompt = static_cast<int64_t>(t.encode(examples[1].prompt, true).size());
  ASSERT_GT(long_prompt, short_prompt + 1);
  InstructionDataset short_block(examples, t, short_prompt + 1, path);
  EXPECT_EQ(short_block.size(), 1);
  EXPECT_EQ(short_block.skipped(), 1);
  EXPECT_EQ(error_of([&] { InstructionDataset(examples, t, 1, path); }),
            path + ": no example's completion fits in block_size 1 after its prompt");
}

// GPT-2's vocabulary (the reference files from openai-whisper's package) with GPT-2's special tokens and a chat template
// that ends each assistant turn with <|endoftext|>.
std::string gpt2_chat_dir(const std::string& name, bool with_template) {
  namespace fs = std::filesystem;
  const fs::path dir = testing::scratch_path(name);
  fs::create_directories(dir);
  for (const char* file : {"vocab.json", "merges.txt"}) {
    fs::copy_file(testing::reference_file(std::string("gpt2-files/") + file), dir / file, fs::copy_options::overwrite_existing);
  }
  nlohmann::ordered_json config = {{"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}};
  if (with_template) {
    config["chat_template"] =
        "{% for m in messages %}{{ m.role }}: {{ m.content }}{{ eos_token if m.role == 'assistant' else '\n' }}"
        "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";
  }
  write_file_atomically((dir / "tokenizer_config.json").string(), config.dump());
  return dir.string();
}

// Worked by hand from the template: the text is "user: Hi\nassistant: Hello<|endoftext|>user:
// Bye\nassistant: See you<|endoftext|>", each piece tokenized on its own and no special tokens
// added; the labels are the assistant's pieces (" Hello<|endoftext|>", " See you<|endoftext|>").
TEST(FinetuneData, ConversationsTrainOnTheAssistantTurnsOnly) {
  const auto dir = gpt2_chat_dir("chat_gpt2", true);
  const auto t = Tokenizer::load(dir);
  auto path = write("chat.jsonl",
                    "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello\"},"
                    " {\"role\": \"user\", \"content\": \"Bye\"}, {\"role\": \"assistant\", \"content\": \"See you\"}]}\n"
                    "{\"prompt\": \"Say hi.\", \"completion\": \" hi\"}\n");
  const auto examples = read_instructions(path);
  ASSERT_EQ(examples.size(), 2u);
  ASSERT_EQ(examples[0].messages.size(), 4u);
  EXPECT_EQ(examples[0].messages[3].content, "See you");
  EXPECT_TRUE(examples[1].messages.empty());
  InstructionDataset data(examples, t, 64, path, dir);
  const int64_t eot = *t.token_to_id("<|endoftext|>");
  std::vector<int64_t> ids, labels;  // labels[t] for ids[t]: the token or kIgnoreIndex
  for (const auto& [text, target] : std::vector<std::pair<std::string, bool>>{
           {"user: Hi\nassistant:", false}, {" Hello", true}, {"<|endoftext|>", true},
           {"user: Bye\nassistant:", false}, {" See you", true}, {"<|endoftext|>", true}}) {
    for (int64_t id : t.encode(text)) ids.push_back(id), labels.push_back(target ? id : kIgnoreIndex);
  }
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eot), 2);  // the template's, not added again
  const auto batch = data.batch({0});
  const std::vector<int64_t> inputs(ids.begin(), ids.end() - 1), shifted(labels.begin() + 1, labels.end());
  EXPECT_TRUE(batch.input_ids[0].equal(torch::tensor(inputs))) << batch.input_ids[0];
  EXPECT_TRUE(batch.labels[0].equal(torch::tensor(shifted))) << batch.labels[0];
  // Prompt/completion lines in the same file keep their meaning.
  const auto pair = data.batch({1});
  EXPECT_EQ(pair.labels[0].ne(kIgnoreIndex).sum().item<int64_t>(), static_cast<int64_t>(t.encode(" hi").size()) + 1);
  // A block that ends inside the first assistant turn keeps what fits of it.
  const auto prompt = static_cast<int64_t>(t.encode("user: Hi\nassistant:").size());
  InstructionDataset short_block({examples[0]}, t, prompt, path, dir);
  EXPECT_EQ(short_block.batch({0}).labels[0].ne(kIgnoreIndex).sum().item<int64_t>(), 1);
}

TEST(FinetuneData, ConversationsNeedWellFormedMessagesAndAChatTemplate) {
  const std::pair<const char*, const char*> cases[] = {
      {"{\"messages\": []}", ":1: 'messages' is empty"},
      {"{\"messages\": \"hi\"}", ":1: 'messages' must be a list of {role, content} objects, got string"},
      {"{\"messages\": [{\"role\": \"user\"}]}", ":1: messages[0]: missing 'content'"},
      {"{\"messages\": [{\"content\": \"x\"}]}", ":1: messages[0]: missing 'role'"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": 3}]}", ":1: messages[0].content must be a string, got number"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"name\": \"n\"}]}",
       ":1: messages[0]: unknown key 'name' (expected: role, content)"},
      {"{\"messages\": [\"hi\"]}", ":1: messages[0] must be a {role, content} object, got string"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", ":1: the conversation has no 'assistant' message to learn from"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": \"y\"}], \"prompt\": \"p\"}",
       ":1: a line with 'messages' cannot also have 'prompt'"},
      {"{\"prompt\": \"p\"}", ":1: missing field 'completion' (or give 'messages')"},
      {"{\"chat\": []}", ":1: unknown field 'chat' (expected: prompt, completion, messages)"},
  };
  for (const auto& [content, expected] : cases) {
    const auto path = write("bad_chat.jsonl", content);
    EXPECT_EQ(error_of([&] { read_instructions(path); }), path + expected) << content;
  }
  // 'messages' nested 2 million levels deep, within a line's 8 MiB: nlohmann-json parses it
  // without recursion, and copying it (recursively) overflowed the stack; it is moved now.
  const auto deep = write("deep_chat.jsonl", "{\"messages\": [" + std::string(2000000, '[') + std::string(2000001, ']') + "}\n");
  EXPECT_EQ(error_of([&] { read_instructions(deep); }), deep + ":1: messages[0] must be a {role, content} object, got array");
  const auto plain = gpt2_chat_dir("plain_gpt2", false);
  const auto path = write("ok_chat.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": \"y\"}]}\n");
  EXPECT_EQ(error_of([&] { InstructionDataset(read_instructions(path), Tokenizer::load(plain), 64, path, plain); }),
            plain + " has no chat_template; use prompt/completion data or a tokenizer with one");
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
