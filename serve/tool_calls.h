#pragma once
// Tool calls (OpenAI's `tools` and `tool_choice`) read out of a chat answer, as vLLM's tool
// parsers read them. A model writes its calls in the format its chat template shows it:
// - kHermes (Qwen2.5, Qwen3, Hermes): <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, each;
// - kQwenXml (Qwen3.5 and later, Qwen3-Coder, Nemotron 3): <tool_call>\n<function=N>\n
//   <parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>, each; a value is read by
//   its parameter's type in the tool's schema (a string as written, numbers, booleans, objects
//   and arrays as JSON);
// - kLlama3Json (Llama 3.1-3.3): the whole answer is {"name": N, "parameters": {...}} (several
//   joined by ";"), after <|python_tag|> when the decoder keeps it;
// - kMistral (Mistral's tokenizers): [TOOL_CALLS] then a JSON list of {"name", "arguments"} (v3;
//   the list alone when the decoder drops the special token), or NAME[ARGS]{...} per call (v11+).
// A forced choice (tool_choice "required", or one function by name) is held by a grammar to JSON,
// as vLLM holds it: an array of {"name", "parameters"}, or the named function's arguments alone.
// Text before the first call is the answer's content (none when it is only blanks); an answer
// whose calls do not parse is content whole. Torch-free.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/enum_names.h"
#include "serve/openai_api.h"

namespace zoo {

enum class ToolCallFormat { kHermes, kQwenXml, kLlama3Json, kMistral };
ZOO_ENUM_NAMES(ToolCallFormat, "tool-call format", {"hermes", ToolCallFormat::kHermes},
               {"qwen-xml", ToolCallFormat::kQwenXml}, {"llama3-json", ToolCallFormat::kLlama3Json},
               {"mistral", ToolCallFormat::kMistral});

// The format `chat_template` (its source) writes assistant tool calls in; nullopt when it writes
// none zoo reads.
std::optional<ToolCallFormat> tool_call_format_of(const std::string& chat_template);

// zoo serve's --tool-call-parser: "auto" (tool_call_format_of the template) or a format by its
// name, as vLLM's flag names one for a model whose template does not show it. Throws
// std::invalid_argument listing the names.
std::vector<std::string> tool_call_parser_names();  // "auto" and each format's
std::optional<ToolCallFormat> tool_call_format_for(const std::string& parser, const std::optional<std::string>& chat_template);

// The calls `text` holds, written in `format` from its start (leading blanks aside); nullopt when
// it holds none or they do not parse. `tools` (the request's) types kQwenXml's values. Each
// call's arguments are a JSON object's text; ids are empty (ToolCallReader gives them).
std::optional<std::vector<ApiToolCall>> parse_tool_calls(ToolCallFormat format, const std::string& text,
                                                         const nlohmann::ordered_json& tools);

// The JSON schema (its text) a forced choice holds the answer to: kRequired, an array of one or
// more calls (at most one unless `parallel`), each {"name": one of the tools, "parameters": its
// schema}; kNamed, the named tool's parameters. A tool without parameters takes any object.
std::string forced_tool_schema(const nlohmann::ordered_json& tools, const ToolChoice& choice, bool parallel);

// One choice's answer read as it streams: content is passed on as it comes, except text that may
// begin a call, which is held until the answer ends and then read as calls (or, not parsing as
// calls, passed on as content). Under a forced choice everything is held and read as its JSON.
class ToolCallReader {
 public:
  // `format` is needed for ToolChoiceKind::kAuto; kNone is not read (no reader).
  ToolCallReader(const ToolChoice& choice, std::optional<ToolCallFormat> format, nlohmann::ordered_json tools);
  // The next piece of the answer; returns the content that may be sent now.
  std::string add(const std::string& piece);
  struct End {
    std::string content;             // held text that was not calls
    std::vector<ApiToolCall> calls;  // with ids, "call_" and 24 letters and digits
  };
  End finish();

 private:
  ToolChoice choice_;
  std::optional<ToolCallFormat> format_;
  nlohmann::ordered_json tools_;
  std::string held_;
  bool calls_ = false;    // held_ starts a call: everything after is held
  bool content_ = false;  // the answer began as text in a format whose calls only begin one
  bool texted_ = false;   // the answer began as text
};

}  // namespace zoo
