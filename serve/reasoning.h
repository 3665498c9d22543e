#pragma once
// A reasoning model's thinking, read apart from its answer, as vLLM's reasoning parsers (qwen3,
// deepseek_r1) and DeepSeek's API give it: the text inside <think>...</think> at the start of the
// answer is `reasoning_content`, what follows the content. A template that writes such blocks
// (Qwen3, DeepSeek-R1, Nemotron 3, ...) is found from its text; its generation prompt may open
// the block itself (DeepSeek-R1's ends with "<think>\n"), and then the answer starts inside it
// (and is all reasoning until "</think>"). Torch-free.

#include <string>

namespace zoo {

// Whether `chat_template` (its source) writes reasoning blocks.
bool template_reasons(const std::string& chat_template);

// Whether the rendered prompt ends inside an open <think> block.
bool prompt_opens_reasoning(const std::string& prompt);

// One choice's answer split as it streams; text that may be part of a tag is held back.
class ReasoningReader {
 public:
  explicit ReasoningReader(bool opened) : state_(opened ? State::kReasoning : State::kStart) {}
  struct Piece {
    std::string reasoning, content;
  };
  // The next piece of the answer: what may be sent now of each.
  Piece add(const std::string& text);
  // The answer's end: what was held.
  Piece finish();

 private:
  // kStart: nothing but blanks yet, which may precede "<think>"; kReasoning: inside the block;
  // kAfter: past "</think>", its blanks dropped until the content's first character; kContent.
  enum class State { kStart, kReasoning, kAfter, kContent };
  State state_;
  std::string held_;
};

}  // namespace zoo
