#include "data/chat_format.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "core/files.h"
#include "reference_texts.h"

namespace zoo {
namespace {

using testing::error_of;
namespace fs = std::filesystem;

// GPT-2's vocabulary (the reference files from openai-whisper's package) with a tokenizer_config.json naming its special
// tokens as GPT-2's does, and `chat_template` when given.
std::string gpt2_with_template(const std::string& name, const std::string& chat_template) {
  const fs::path dir = testing::scratch_path(name);
  fs::create_directories(dir);
  for (const char* file : {"vocab.json", "merges.txt"}) {
    fs::copy_file(testing::reference_file(std::string("gpt2-files/") + file), dir / file, fs::copy_options::overwrite_existing);
  }
  nlohmann::ordered_json config = {{"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}, {"unk_token", "<|endoftext|>"}};
  if (!chat_template.empty()) config["chat_template"] = chat_template;
  write_file_atomically((dir / "tokenizer_config.json").string(), config.dump(2));
  return dir.string();
}

const char* const kTurns =
    "{% for m in messages %}{{ m.role }}: {{ m.content }}{{ eos_token if m.role == 'assistant' else '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";

TEST(ChatFormat, RendersWithTheTokenizersSpecialTokens) {
  const auto dir = gpt2_with_template("chat_gpt2_tokens", "{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}|"
                                                          "{{ tools is none }}|{{ messages[0].content }}|{{ add_generation_prompt }}");
  const ChatFormat chat(Tokenizer::load(dir), dir);
  EXPECT_EQ(chat.render({{"user", "hi"}}, true), "<|endoftext|>|<|endoftext|>|False|True|hi|True");
}

// Worked by hand: the assistant's turns are the text between the conversation before them with
// the generation prompt and the conversation through them.
TEST(ChatFormat, AssistantTurnsAreTheTextEachAddsAfterTheGenerationPrompt) {
  const auto dir = gpt2_with_template("chat_gpt2_turns", kTurns);
  const ChatFormat chat(Tokenizer::load(dir), dir);
  const std::vector<ChatMessage> messages = {{"system", "Be kind."}, {"user", "Hi"}, {"assistant", "Hello!"},
                                             {"user", "Bye"}, {"assistant", "Goodbye."}};
  const auto t = chat.render_for_training(messages, "data.jsonl:1");
  EXPECT_EQ(t.text, "system: Be kind.\nuser: Hi\nassistant: Hello!<|endoftext|>user: Bye\nassistant: Goodbye.<|endoftext|>");
  ASSERT_EQ(t.assistant_spans.size(), 2u);
  auto span = [&](size_t i) { return t.text.substr(t.assistant_spans[i].first, t.assistant_spans[i].second - t.assistant_spans[i].first); };
  EXPECT_EQ(span(0), " Hello!<|endoftext|>");
  EXPECT_EQ(span(1), " Goodbye.<|endoftext|>");
}

TEST(ChatFormat, TemplatesThatRewriteEarlierTurnsAndMissingTemplatesAreErrors) {
  // Marks the last message: rendering a prefix changes text the whole conversation has otherwise.
  const auto dir = gpt2_with_template("chat_gpt2_last", "{% for m in messages %}{{ m.content }}{% if loop.last %}.{% endif %}{% endfor %}");
  const ChatFormat chat(Tokenizer::load(dir), dir);
  EXPECT_EQ(error_of([&] { chat.render_for_training({{"user", "a"}, {"assistant", "b"}}, "d.jsonl:4"); }),
            "d.jsonl:4: " + dir + "/tokenizer_config.json does not render this conversation turn by turn: the text before "
            "messages[1] with the generation prompt is not the start of the text through it, so its assistant turns "
            "cannot be told apart");
  // Issue 31: one conversation of 20,000 turns rendered every prefix (hours); now a named bound.
  std::vector<ChatMessage> long_talk;
  for (int i = 0; i < 20000; ++i) long_talk.push_back({i % 2 ? "assistant" : "user", "x"});
  const ChatFormat turns(Tokenizer::load(gpt2_with_template("chat_gpt2_long", kTurns)), "long");
  EXPECT_EQ(error_of([&] { turns.render_for_training(long_talk, "d.jsonl:9"); }),
            "d.jsonl:9: the conversation has 20000 messages; an example holds at most 1024 (split it into several)");
  EXPECT_EQ(error_of([&] { turns.render_for_training({{"user", std::string(5 << 20, 'x')}, {"assistant", "y"}}, "d.jsonl:10"); }),
            "d.jsonl:10: the conversation holds 5242881 bytes of text; an example holds at most 4194304 (split it into several)");
  // Within both bounds, but 256 turns of 16 KB each: the prefixes to render add up to 501 MiB
  // (over the bound of 256), refused before any rendering.
  std::vector<ChatMessage> wide_talk;
  for (int i = 0; i < 256; ++i) wide_talk.push_back({i % 2 ? "assistant" : "user", std::string(16000, 'x')});
  EXPECT_EQ(error_of([&] { turns.render_for_training(wide_talk, "d.jsonl:12"); }),
            "d.jsonl:12: finding the conversation's assistant turns means rendering 501 MiB of text (the messages up "
            "to each turn); an example may need at most 256 MiB (split it into several)");
  long_talk.resize(1024);
  EXPECT_EQ(turns.render_for_training(long_talk, "d.jsonl:11").assistant_spans.size(), 512u);
  const auto plain = gpt2_with_template("chat_gpt2_plain", "");
  EXPECT_EQ(error_of([&] { ChatFormat(Tokenizer::load(plain), plain); }),
            plain + " has no chat_template; use prompt/completion data or a tokenizer with one");
  const auto raising = gpt2_with_template("chat_gpt2_raise", "{{ raise_exception('no system messages') }}");
  EXPECT_EQ(error_of([&] { ChatFormat(Tokenizer::load(raising), raising).render({{"system", "x"}}, false); }),
            raising + "/tokenizer_config.json:1: the template raised: no system messages");
}

// Issue 52: what a conversation makes the template do is the conversation's doing: a
// raise_exception on its roles, or a long message that the template repeats past the 64 MiB
// bound of a string, named only the template (and, for a checkpoint, a tokenizer_config.json
// beside its tokenizer/ folder rather than in it).
TEST(ChatFormat, ErrorsAConversationCausesNameItsDataLine) {
  const auto dir = gpt2_with_template(
      "chat_gpt2_system", "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system messages') }}"
                          "{% endif %}{{ m.content * 20 }}{% endfor %}");
  const ChatFormat chat(Tokenizer::load(dir), dir);
  EXPECT_EQ(error_of([&] { chat.render_for_training({{"system", "x"}, {"assistant", "y"}}, "d.jsonl:3"); }),
            "d.jsonl:3: " + dir + "/tokenizer_config.json:1: the template raised: no system messages");
  const std::string long_message(4000000, 'x');  // within an example's 4 MiB; 20 times past a string's 64 MiB
  EXPECT_EQ(error_of([&] { chat.render_for_training({{"user", long_message}, {"assistant", "y"}}, "d.jsonl:4"); }),
            "d.jsonl:4: " + dir + "/tokenizer_config.json:1: repeating a str 20 times makes it too large");
  const auto checkpoint = testing::scratch_path("chat_checkpoint");
  fs::create_directories(checkpoint);
  store_tokenizer(Tokenizer::load(dir), checkpoint.string());
  const ChatFormat stored(Tokenizer::load(checkpoint.string()), checkpoint.string());
  EXPECT_EQ(error_of([&] { stored.render_for_training({{"system", "x"}, {"assistant", "y"}}, "d.jsonl:5"); }),
            "d.jsonl:5: " + checkpoint.string() +
                "/tokenizer/tokenizer_config.json:1: the template raised: no system messages");
}

}  // namespace
}  // namespace zoo
