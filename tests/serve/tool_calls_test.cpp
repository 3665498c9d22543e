#include "serve/tool_calls.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base_test_util.h"
#include "reference_texts.h"
#include "templates/chat_template.h"

namespace zoo {
namespace {

using ordered = nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

ordered tools() {
  auto tool = [](const char* name, const ordered& properties) {
    return ordered{{"type", "function"},
                   {"function",
                    {{"name", name},
                     {"description", std::string("The tool ") + name + "."},
                     {"parameters", {{"type", "object"}, {"properties", properties}}}}}};
  };
  return ordered::array(
      {tool("get_weather", {{"city", {{"type", "string"}}},
                            {"days", {{"type", "integer"}}},
                            {"metric", {{"type", "boolean"}}},
                            {"scale", {{"type", "number"}}},
                            {"tags", {{"type", "array"}, {"items", {{"type", "string"}}}}},
                            {"where", {{"type", "object"}}},
                            {"code", {{"type", "string"}}}}),
       tool("search", {{"query", {{"type", "string"}}}})});
}

// Arguments that tell the formats' readings apart: text with quotes, braces, newlines and
// non-ASCII; a string that looks like a number; numbers, booleans, a list and an object.
const ordered kWeather = {{"city", "Zürich \"centre\" {x}\nline two"}, {"days", 2},      {"metric", true},
                          {"scale", 0.5},                             {"tags", {"a", "b c"}}, {"where", {{"lat", 47.4}}},
                          {"code", "12"}};
const ordered kSearch = {{"query", "news"}};

struct TemplateCase {
  std::string file;
  ToolCallFormat format;
  std::string end_of_turn;
  bool one_call;  // Llama 3's templates refuse several calls in one turn
};

const std::vector<TemplateCase> kTemplates = {
    {"qwen2_5", ToolCallFormat::kHermes, "<|im_end|>", false},
    {"qwen3", ToolCallFormat::kHermes, "<|im_end|>", false},
    {"qwen3_instruct_2507", ToolCallFormat::kHermes, "<|im_end|>", false},
    {"qwen3_5_nothink", ToolCallFormat::kQwenXml, "<|im_end|>", false},
    {"qwen3_6", ToolCallFormat::kQwenXml, "<|im_end|>", false},
    {"nemotron_3_nano", ToolCallFormat::kQwenXml, "<|im_end|>", false},
    {"llama3_1", ToolCallFormat::kLlama3Json, "<|eot_id|>", true},
    {"llama3_2", ToolCallFormat::kLlama3Json, "<|eot_id|>", true},
};

ordered call(const char* name, const ordered& arguments) {
  return {{"id", std::string("call_") + name}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

ordered variables(const ordered& messages, bool generation) {
  return {{"messages", messages}, {"tools", tools()}, {"add_generation_prompt", generation}, {"bos_token", "<s>"},
          {"eos_token", "</s>"}};
}

// Each real template writes an assistant turn of calls (rendered by zoo's template engine, and
// checked against transformers' rendering of the same conversation); the turn's text, read back in
// the format the template is detected to show, gives the calls and the content it was written from.
TEST(ToolCalls, EachTemplatesOwnCallsReadBack) {
  ordered cases = ordered::array();
  std::vector<std::string> turns;
  for (const auto& t : kTemplates) {
    SCOPED_TRACE(t.file);
    const std::string source = read_file(testing::reference_file("chat-templates/" + t.file + ".jinja"));
    ASSERT_EQ(tool_call_format_of(source), t.format);
    const ChatTemplate chat(source, t.file);
    const ordered user = {{"role", "user"}, {"content", "Weather in Zürich?"}};
    ordered calls = ordered::array({call("get_weather", kWeather)});
    if (!t.one_call) calls.push_back(call("search", kSearch));
    const ordered assistant = {{"role", "assistant"}, {"content", t.one_call ? "" : "Let me look."}, {"tool_calls", calls}};
    const ordered before = ordered::array({user}), through = ordered::array({user, assistant});
    const std::string prompt = chat.render(variables(before, true)), whole = chat.render(variables(through, false));
    cases.push_back({{"template", source}, {"variables", variables(before, true)}});
    cases.push_back({{"template", source}, {"variables", variables(through, false)}});
    // The turn is what follows the generation prompt (Nemotron's opens a reasoning block there
    // that a finished turn writes closed: the turn starts where they part).
    size_t common = 0;
    while (common < prompt.size() && prompt[common] == whole[common]) ++common;
    ASSERT_GE(common + 16, prompt.size());
    std::string turn = whole.substr(common);
    turn = turn.substr(0, turn.find(t.end_of_turn));
    turns.push_back(turn);

    ToolCallReader reader({ToolChoiceKind::kAuto, ""}, t.format, tools());
    std::string content = reader.add(turn);
    auto end = reader.finish();
    content += end.content;
    // Thinking templates open the turn with an (empty) reasoning block: the content follows it.
    if (const size_t think = content.find("</think>"); think != std::string::npos) content.erase(0, think + 8);
    const size_t first = content.find_first_not_of('\n'), last = content.find_last_not_of('\n');
    content = first == std::string::npos ? "" : content.substr(first, last + 1 - first);
    EXPECT_EQ(content, assistant["content"].get<std::string>()) << turn;
    ASSERT_EQ(end.calls.size(), calls.size()) << turn;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(end.calls[i].name, calls[i]["function"]["name"]);
      EXPECT_EQ(ordered::parse(end.calls[i].arguments), calls[i]["function"]["arguments"]) << turn;
      EXPECT_EQ(end.calls[i].id.size(), 29u);
      EXPECT_EQ(end.calls[i].id.substr(0, 5), "call_");
    }
  }
  // zoo's renderings are transformers' own.
  const auto reference = testing::run_reference_json(
      testing::reference_python() + " '" + ZOO_SOURCE_DIR + "/tests/reference/chat_template_reference.py'", cases);
  ASSERT_EQ(reference.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(reference[i].contains("output")) << reference[i].dump();
    EXPECT_EQ(ChatTemplate(cases[i]["template"].get<std::string>(), "t").render(cases[i]["variables"]),
              reference[i]["output"].get<std::string>())
        << kTemplates[i / 2].file;
  }
}

// Streamed a piece at a time (every piece length), an answer reads as it does whole; content
// before a call is sent as it comes, all but what may begin "<tool_call>".
TEST(ToolCalls, StreamedAnswersReadAsWholeOnes) {
  const std::vector<std::pair<ToolCallFormat, std::string>> answers = {
      {ToolCallFormat::kHermes, "I will <tool look.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"a<b\"}}\n</tool_call>\n"
                                "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n</tool_call>"},
      {ToolCallFormat::kHermes, "No call here, only <tool talk <tool_"},
      {ToolCallFormat::kHermes, " \n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}"},  // left open at EOS
      {ToolCallFormat::kHermes, " \n  a reply"},
      {ToolCallFormat::kQwenXml, "<tool_call>\n<function=search>\n<parameter=query>\n two\nlines \n</parameter>\n</function>\n</tool_call>"},
      {ToolCallFormat::kLlama3Json, "{\"name\": \"search\", \"parameters\": {\"query\": \"}{\"}}; {\"name\": \"search\", \"parameters\": {}}"},
      {ToolCallFormat::kLlama3Json, "<|python_tag|>{\"name\": \"search\", \"arguments\": {\"query\": \"q\"}}"},
      {ToolCallFormat::kLlama3Json, "  The answer is {not a call}."},
      {ToolCallFormat::kMistral, "Checking. [TOOL_CALLS] [{\"name\": \"search\", \"arguments\": {\"query\": \"[TOOL\"}}, "
                                 "{\"name\": \"get_weather\", \"arguments\": \"{\\\"days\\\": 1}\"}]"},
      {ToolCallFormat::kMistral, "[{\"name\": \"search\", \"arguments\": {}}]"},  // the marker dropped as a special token
      {ToolCallFormat::kMistral, "[TOOL_CALLS]search[ARGS]{\"query\": \"a}\"}[TOOL_CALLS]get_weather[ARGS]{}"},
      {ToolCallFormat::kMistral, "[1] is a citation, [TOOL not a call"},
  };
  const std::vector<std::pair<std::string, size_t>> expected = {
      {"I will <tool look.\n", 2}, {"No call here, only <tool talk <tool_", 0}, {"", 1}, {" \n  a reply", 0}, {"", 1},
      {"", 2}, {"", 1},
      {"  The answer is {not a call}.", 0}, {"Checking. ", 2}, {"", 1}, {"", 2},
      {"[1] is a citation, [TOOL not a call", 0}};
  for (size_t a = 0; a < answers.size(); ++a) {
    const auto& [format, text] = answers[a];
    SCOPED_TRACE(text);
    std::vector<std::string> arguments;
    for (size_t piece = 1; piece <= text.size(); ++piece) {
      ToolCallReader reader({ToolChoiceKind::kAuto, ""}, format, tools());
      std::string content;
      for (size_t at = 0; at < text.size(); at += piece) {
        const std::string sent = reader.add(text.substr(at, piece));
        content += sent;
        // What was sent is never a call's: the content so far is a prefix of the expected content.
        ASSERT_EQ(expected[a].first.compare(0, content.size(), content), 0) << "piece " << piece;
      }
      auto end = reader.finish();
      content += end.content;
      ASSERT_EQ(content, expected[a].first) << "piece " << piece;
      ASSERT_EQ(end.calls.size(), expected[a].second) << "piece " << piece;
      std::vector<std::string> now;
      for (const auto& c : end.calls) now.push_back(c.name + c.arguments);
      if (piece == 1) arguments = now;
      ASSERT_EQ(now, arguments) << "piece " << piece;
    }
  }
  // The XML value keeps its inner blanks, less the newline on each side the template writes.
  EXPECT_EQ(*parse_tool_calls(ToolCallFormat::kQwenXml, answers[4].second, tools()),
            (std::vector<ApiToolCall>{{"", "search", "{\"query\":\" two\\nlines \"}"}}));
}

// Mistral's templates (none among the reference files) write [TOOL_CALLS] before a turn's calls.
TEST(ToolCalls, MistralsFormatIsFoundFromItsMarker) {
  EXPECT_EQ(tool_call_format_of("{%- if message.tool_calls %}{{- '[TOOL_CALLS][' }}{%- endif %}"), ToolCallFormat::kMistral);
  EXPECT_EQ(tool_call_format_of("{{ messages[0]['content'] }}"), std::nullopt);
  // --tool-call-parser: the template's format, or one named for a template that shows none.
  EXPECT_EQ(tool_call_format_for("auto", std::string("[TOOL_CALLS]")), ToolCallFormat::kMistral);
  EXPECT_EQ(tool_call_format_for("auto", std::nullopt), std::nullopt);
  EXPECT_EQ(tool_call_format_for("qwen-xml", std::string("plain")), ToolCallFormat::kQwenXml);
  EXPECT_EQ(testing::error_of([] { tool_call_format_for("json", std::nullopt); }),
            "--tool-call-parser: 'json' is not auto, hermes, qwen-xml, llama3-json, mistral");
  EXPECT_EQ(tool_call_parser_names(), (std::vector<std::string>{"auto", "hermes", "qwen-xml", "llama3-json", "mistral"}));
  const auto calls = parse_tool_calls(ToolCallFormat::kMistral, "[TOOL_CALLS]search[ARGS]{\"query\": \"x\"}", tools());
  ASSERT_TRUE(calls);
  EXPECT_EQ(*calls, (std::vector<ApiToolCall>{{"", "search", "{\"query\":\"x\"}"}}));
}

// Text shaped like calls but not well formed is the answer's content, whole.
TEST(ToolCalls, MalformedCallsAreContent) {
  const std::vector<std::pair<ToolCallFormat, std::string>> malformed = {
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": }\n</tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>\n{\"arguments\": {}}\n</tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"search\", \"arguments\": [1]}\n</tool_call>"},
      {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"search\"}\n</tool_call> and then text"},
      {ToolCallFormat::kQwenXml, "<tool_call>\n<function=search>\n<parameter=query>\nunclosed\n</function>\n</tool_call>"},
      {ToolCallFormat::kQwenXml, "<tool_call>\n{\"name\": \"search\"}\n</tool_call>"},
      {ToolCallFormat::kLlama3Json, "{\"name\": \"search\", \"parameters\": {\"query\": \"x\"}"},
      {ToolCallFormat::kLlama3Json, "{\"name\": \"search\", \"parameters\": {}} trailing words"},
      {ToolCallFormat::kLlama3Json, "{\"name\": \"s\\u00e9\", \"parameters\": {\"q\": \"\xff\"}}"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS] [{\"name\": \"search\", \"arguments\": [1]}]"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]search[ARGS]{\"query\": "},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]search[ARGS][1]"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS][]"},
  };
  for (const auto& [format, text] : malformed) {
    SCOPED_TRACE(text);
    ToolCallReader reader({ToolChoiceKind::kAuto, ""}, format, tools());
    std::string content = reader.add(text);
    auto end = reader.finish();
    EXPECT_EQ(content + end.content, text);
    EXPECT_TRUE(end.calls.empty());
  }
}

// A forced choice's answer is JSON under forced_tool_schema's schema; the reader makes calls of it,
// or content of what does not parse (an answer cut by max_tokens).
TEST(ToolCalls, ForcedChoicesReadTheirJson) {
  const ToolChoice named{ToolChoiceKind::kNamed, "search"}, required{ToolChoiceKind::kRequired, ""};
  EXPECT_EQ(ordered::parse(forced_tool_schema(tools(), named, true)), tools()[1]["function"]["parameters"]);
  const auto schema = ordered::parse(forced_tool_schema(tools(), required, false));
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_EQ(schema["maxItems"], 1);
  ASSERT_EQ(schema["items"]["anyOf"].size(), 2u);
  EXPECT_EQ(schema["items"]["anyOf"][0]["properties"]["name"]["enum"], ordered::array({"get_weather"}));
  EXPECT_EQ(schema["items"]["anyOf"][0]["properties"]["parameters"], tools()[0]["function"]["parameters"]);
  EXPECT_FALSE(ordered::parse(forced_tool_schema(tools(), required, true)).contains("maxItems"));
  auto read = [&](const ToolChoice& choice, const std::string& text) {
    ToolCallReader reader(choice, std::nullopt, tools());
    EXPECT_EQ(reader.add(text), "");  // nothing is sent before the end
    return reader.finish();
  };
  auto end = read(named, "{\"query\": \"x\"}");
  ASSERT_EQ(end.calls.size(), 1u);
  EXPECT_EQ(end.calls[0].name, "search");
  EXPECT_EQ(end.calls[0].arguments, "{\"query\":\"x\"}");
  end = read(required, "[{\"name\": \"search\", \"parameters\": {\"query\": \"y\"}}, {\"name\": \"get_weather\", \"parameters\": {}}]");
  ASSERT_EQ(end.calls.size(), 2u);
  EXPECT_EQ(end.calls[1].name, "get_weather");
  EXPECT_EQ(end.calls[1].arguments, "{}");
  EXPECT_NE(end.calls[0].id, end.calls[1].id);
  for (const auto& [choice, cut] : std::vector<std::pair<ToolChoice, std::string>>{
           {named, "{\"query\": \"x"}, {required, "[{\"name\": \"search\", \"param"}, {required, "[]"}}) {
    end = read(choice, cut);
    EXPECT_EQ(end.content, cut);
    EXPECT_TRUE(end.calls.empty());
  }
}

}  // namespace
}  // namespace zoo
