#include "serve/reasoning.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "reference_texts.h"
#include "templates/chat_template.h"

namespace zoo {
namespace {

using ordered = nlohmann::ordered_json;

ReasoningReader::Piece read_whole(bool opened, const std::string& text, size_t piece) {
  ReasoningReader reader(opened);
  ReasoningReader::Piece all;
  for (size_t at = 0; at < text.size(); at += piece) {
    const auto p = reader.add(text.substr(at, piece));
    all.reasoning += p.reasoning, all.content += p.content;
  }
  const auto p = reader.finish();
  all.reasoning += p.reasoning, all.content += p.content;
  return all;
}

// Worked examples, each streamed at every piece size: the thinking inside the block, the answer
// after it less its leading blanks; no block, all answer; a block the prompt opened, or never
// closed, all thinking.
TEST(Reasoning, AnswersSplitAtTheirThinkingBlock) {
  struct Case {
    bool opened;
    std::string text, reasoning, content;
  };
  const std::vector<Case> cases = {
      {false, "<think>\nPlan: call.\n</think>\n\nThe answer.", "\nPlan: call.\n", "The answer."},
      {false, " \n<think>a < b </thin</think>x", "a < b </thin", "x"},
      {false, "No thinking, <think> later is text.", "", "No thinking, <think> later is text."},
      {false, "<thin", "", "<thin"},
      {false, "<think>never closed", "never closed", ""},
      {true, "opened by the prompt\n</think>\n\nanswer <think>", "opened by the prompt\n", "answer <think>"},
      {true, "all thinking", "all thinking", ""},
      {false, "", "", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    for (size_t piece = 1; piece <= std::max<size_t>(1, c.text.size()); ++piece) {
      const auto got = read_whole(c.opened, c.text, piece);
      ASSERT_EQ(got.reasoning, c.reasoning) << "piece " << piece;
      ASSERT_EQ(got.content, c.content) << "piece " << piece;
    }
  }
  // Nothing of the closing tag is ever sent as thinking, even split over pieces.
  ReasoningReader reader(true);
  EXPECT_EQ(reader.add("plan</th").reasoning, "plan");
  EXPECT_EQ(reader.add("ink>").reasoning, "");
}

std::string read_template(const std::string& name) {
  std::ifstream in(testing::reference_file("chat-templates/" + name + ".jinja"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Real templates: which write thinking blocks, which generation prompts open one (DeepSeek-R1's;
// not Qwen3's, which with thinking off writes a closed, empty one), and a turn the template
// writes from reasoning_content reads back to it and the content.
TEST(Reasoning, RealTemplatesBlocksReadBack) {
  EXPECT_FALSE(template_reasons(read_template("qwen2_5")));
  EXPECT_FALSE(template_reasons(read_template("llama3_1")));
  const ordered user = {{"role", "user"}, {"content", "2+2?"}};
  struct Case {
    std::string name;
    ordered extra;
    bool opens;
  };
  for (const auto& c : std::vector<Case>{{"qwen3", ordered::object(), false},
                                         {"qwen3", {{"enable_thinking", false}}, false},
                                         {"deepseek_r1_distill", ordered::object(), true}}) {
    SCOPED_TRACE(c.name + " " + c.extra.dump());
    const std::string source = read_template(c.name);
    EXPECT_TRUE(template_reasons(source));
    const ChatTemplate chat(source, c.name);
    auto variables = [&](const ordered& messages, bool generation) {
      ordered v = {{"messages", messages}, {"add_generation_prompt", generation}, {"bos_token", "<s>"}, {"eos_token", "</s>"}};
      for (const auto& [k, value] : c.extra.items()) v[k] = value;
      return v;
    };
    const std::string prompt = chat.render(variables(ordered::array({user}), true));
    EXPECT_EQ(prompt_opens_reasoning(prompt), c.opens) << prompt;
  }
  // Qwen3 writes the last turn's reasoning_content into a block before its content.
  const ChatTemplate qwen3(read_template("qwen3"), "qwen3");
  const ordered assistant = {{"role", "assistant"}, {"content", "4."}, {"reasoning_content", "Two and two."}};
  const auto vars = [](const ordered& messages, bool generation) {
    return ordered{{"messages", messages}, {"add_generation_prompt", generation}};
  };
  const std::string prompt = qwen3.render(vars(ordered::array({user}), true));
  const std::string whole = qwen3.render(vars(ordered::array({user, assistant}), false));
  ASSERT_EQ(whole.compare(0, prompt.size(), prompt), 0);
  std::string turn = whole.substr(prompt.size());
  turn = turn.substr(0, turn.find("<|im_end|>"));
  const auto got = read_whole(prompt_opens_reasoning(prompt), turn, 3);
  EXPECT_EQ(got.reasoning, "\nTwo and two.\n") << turn;
  EXPECT_EQ(got.content, "4.");
}

}  // namespace
}  // namespace zoo
