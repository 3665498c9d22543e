#include "data/chat_format.h"

#include <stdexcept>

#include "tokenizers/hf_config.h"

namespace zoo {
namespace {

ChatTemplate template_of(const Tokenizer& tokenizer, const std::string& tokenizer_name) {
  if (!tokenizer.chat_template()) {
    throw std::runtime_error(tokenizer_name + " has no chat_template; use prompt/completion data or a tokenizer with one");
  }
  // chat_template.jinja wins over tokenizer_config.json's entry (tokenizers/hf_config.h); a
  // checkpoint keeps them in its tokenizer/ folder.
  const char* file = tokenizer.files().count(kChatTemplateJinja) ? kChatTemplateJinja : kTokenizerConfigJson;
  return ChatTemplate(*tokenizer.chat_template(), tokenizer_directory(tokenizer_name) + "/" + file);
}

}  // namespace

ChatFormat::ChatFormat(const Tokenizer& tokenizer, const std::string& tokenizer_name)
    : template_(template_of(tokenizer, tokenizer_name)), tokens_(nlohmann::ordered_json::object()) {
  for (const auto& [role, text] : tokenizer.special_token_texts()) tokens_[role + "_token"] = text;
}

std::string ChatFormat::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  auto list = nlohmann::ordered_json::array();
  for (const auto& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  return render(list, add_generation_prompt, nullptr);
}

std::string ChatFormat::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                               const nlohmann::ordered_json& tools, const nlohmann::ordered_json& extra) const {
  nlohmann::ordered_json variables = tokens_;
  if (extra.is_object()) {
    for (const auto& [name, value] : extra.items()) variables[name] = value;
  }
  variables["messages"] = messages;
  variables["add_generation_prompt"] = add_generation_prompt;
  variables["tools"] = tools;  // transformers passes None when there are none
  variables["documents"] = nullptr;
  return template_.render(variables);
}

ChatFormat::Training ChatFormat::render_for_training(const std::vector<ChatMessage>& messages,
                                                     const std::string& where) const {
  // Each assistant turn is found by rendering the conversation up to it (a template may render
  // a turn differently by what follows), so the work grows with the square of the turns: one
  // example holds at most kMaxTrainingMessages messages and kMaxTrainingBytes of text.
  if (messages.size() > kMaxTrainingMessages) {
    throw std::runtime_error(where + ": the conversation has " + std::to_string(messages.size()) +
                             " messages; an example holds at most " + std::to_string(kMaxTrainingMessages) +
                             " (split it into several)");
  }
  size_t bytes = 0, rendered = 0;
  for (const auto& m : messages) {
    if (m.role == "assistant") rendered += 2 * bytes + m.content.size();
    bytes += m.content.size();
  }
  if (bytes > kMaxTrainingBytes) {
    throw std::runtime_error(where + ": the conversation holds " + std::to_string(bytes) +
                             " bytes of text; an example holds at most " + std::to_string(kMaxTrainingBytes) +
                             " (split it into several)");
  }
  if (rendered > kMaxTrainingRenderedBytes) {
    throw std::runtime_error(where + ": finding the conversation's assistant turns means rendering " +
                             std::to_string(rendered >> 20) + " MiB of text (the messages up to each turn); an "
                             "example may need at most " + std::to_string(kMaxTrainingRenderedBytes >> 20) +
                             " MiB (split it into several)");
  }
  // What the template does with this conversation is this example's doing too: its errors (a
  // raise_exception on the roles, a bound that a long message reaches) name the data line first.
  auto render_part = [&](const std::vector<ChatMessage>& part, bool add_generation_prompt) {
    try {
      return render(part, add_generation_prompt);
    } catch (const ChatTemplateError& e) {
      throw ChatTemplateError(where + ": " + e.what());
    }
  };
  Training out;
  out.text = render_part(messages, false);
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != "assistant") continue;
    const std::vector<ChatMessage> before(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(i));
    const std::vector<ChatMessage> through(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    const std::string prompt = render_part(before, true), turn = render_part(through, false);
    auto prefix = [](const std::string& a, const std::string& b) { return b.compare(0, a.size(), a) == 0; };
    if (!prefix(prompt, turn) || !prefix(turn, out.text)) {
      throw std::runtime_error(where + ": " + template_.name() + " does not render this conversation turn by turn: " +
                               (prefix(prompt, turn) ? "the text through messages[" + std::to_string(i) +
                                                           "] is not the start of the whole conversation's"
                                                     : "the text before messages[" + std::to_string(i) +
                                                           "] with the generation prompt is not the start of the "
                                                           "text through it") +
                               ", so its assistant turns cannot be told apart");
    }
    if (turn.size() > prompt.size()) out.assistant_spans.emplace_back(prompt.size(), turn.size());
  }
  return out;
}

}  // namespace zoo
