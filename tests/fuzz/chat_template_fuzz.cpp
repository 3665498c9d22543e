// libFuzzer target for chat templates (templates/chat_template.h): the input is a template, parsed and
// rendered with a small conversation. Either gives text or throws ChatTemplateError naming the
// template and line; never a crash, a hang or unbounded memory.
#include <cstddef>
#include <cstdint>
#include <string>

#include "templates/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  static const nlohmann::ordered_json variables = {
      {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi {{ x }} ü"}},
                    {{"role", "assistant"}, {"content", "Hello!"}}}},
      {"add_generation_prompt", true}, {"bos_token", "<s>"}, {"eos_token", "</s>"}, {"tools", nullptr}};
  try {
    zoo::ChatTemplate(source, "fuzz.jinja").render(variables);
  } catch (const zoo::ChatTemplateError&) {
  }
  return 0;
}
