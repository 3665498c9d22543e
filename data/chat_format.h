#pragma once
// Conversations through a tokenizer's chat template, as transformers' apply_chat_template
// renders them: the messages, add_generation_prompt, the special tokens by name (bos_token,
// eos_token, ...), and tools and documents as None. For training, the spans of the rendered text
// that are assistant turns, found as TRL's assistant-only loss finds them.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "data/example_files.h"
#include "templates/chat_template.h"
#include "tokenizers/tokenizer.h"

namespace zoo {

class ChatFormat {
 public:
  // The tokenizer's chat template, parsed once. `tokenizer_name` (its directory) names it in
  // errors; a tokenizer without a template is an error saying so.
  ChatFormat(const Tokenizer& tokenizer, const std::string& tokenizer_name);

  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  // Messages as the template reads them (a JSON list; zoo serve's carry tool calls), and the
  // tools it shows the model (a JSON list, or null for none).
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& tools,
                     const nlohmann::ordered_json& extra = nullptr) const;  // more variables (an object)

  // A conversation as the text a model trains on, and the [begin, end) byte ranges of it that
  // are assistant turns: turn i is the text between render(messages[:i], add_generation_prompt)
  // and render(messages[:i + 1]), each a prefix of the whole. A template that does not render
  // that way (a later turn changing earlier text) is an error naming `where` and the turn.
  struct Training {
    std::string text;
    std::vector<std::pair<size_t, size_t>> assistant_spans;
  };
  Training render_for_training(const std::vector<ChatMessage>& messages, const std::string& where) const;
  // What one training conversation may hold (the turn-by-turn rendering is quadratic in turns):
  // messages, bytes of text, and bytes of text rendered to find the assistant turns (the
  // messages up to each assistant turn, twice).
  static constexpr size_t kMaxTrainingMessages = 1024;
  static constexpr size_t kMaxTrainingBytes = size_t{4} << 20;
  static constexpr size_t kMaxTrainingRenderedBytes = size_t{256} << 20;

 private:
  ChatTemplate template_;
  nlohmann::ordered_json tokens_;  // bos_token, eos_token, ... by name
};

}  // namespace zoo
