#include "serve/openai_api.h"

#include <gtest/gtest.h>

namespace zoo {
namespace {

using nlohmann::json;

// The error a body gets: its status, the field it names, and its message.
ApiError error_of(const std::string& body, bool chat = false) {
  try {
    parse_completion_request(body, chat);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "");
}

TEST(OpenAiApi, CompletionRequestFields) {
  const auto r = parse_completion_request(
      R"({"model": "m", "prompt": "Hello", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
          "stop": ["\n", "END"], "seed": 42, "n": 2, "stream": true, "stream_options": {"include_usage": true},
          "ignore_eos": true, "user": "ignored", "some_future_field": {"x": 1}})",
      false);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "Hello");
  EXPECT_EQ(r.sampling.max_tokens, 7);
  EXPECT_DOUBLE_EQ(r.sampling.temperature, 0.5);
  EXPECT_DOUBLE_EQ(r.sampling.top_p, 0.9);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(r.sampling.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.sampling.n, 2);
  EXPECT_TRUE(r.sampling.stream);
  EXPECT_TRUE(r.sampling.include_usage);
  EXPECT_TRUE(r.sampling.ignore_eos);
  // Defaults, and the prompt's other shapes: several texts, token ids.
  const auto d = parse_completion_request(R"({"prompt": ["a", [5, 6]]})", false);
  EXPECT_FALSE(d.sampling.max_tokens.has_value());
  EXPECT_DOUBLE_EQ(d.sampling.temperature, 1.0);
  ASSERT_EQ(d.prompts.size(), 2u);
  EXPECT_TRUE(d.prompts[1].is_ids);
  EXPECT_EQ(d.prompts[1].ids, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(parse_completion_request(R"({"prompt": [1, 2, 3]})", false).prompts[0].ids.size(), 3u);
  // A single stop string; top_k -1 means every token; null is "not given".
  const auto s = parse_completion_request(R"({"prompt": "x", "stop": "##", "top_k": -1, "seed": null})", false);
  EXPECT_EQ(s.sampling.stop, std::vector<std::string>{"##"});
  EXPECT_EQ(s.sampling.top_k, 0);
  EXPECT_FALSE(s.sampling.seed.has_value());
}

// Log-probabilities: a completion's logprobs N and echo (max_tokens 0 with echo scores the prompt
// alone), a chat's logprobs with top_logprobs; none unless asked.
// response_format: text (the default), any JSON object, or a schema kept as its serialization;
// completions take it as chats do (vLLM's extension).
TEST(OpenAiApi, ResponseFormatFields) {
  EXPECT_EQ(parse_completion_request(R"({"prompt": "x"})", false).response_format.kind, ResponseFormatKind::kText);
  EXPECT_EQ(parse_completion_request(R"({"prompt": "x", "response_format": {"type": "text"}})", false).response_format.kind,
            ResponseFormatKind::kText);
  const auto object = parse_completion_request(
      R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})", true);
  EXPECT_EQ(object.response_format.kind, ResponseFormatKind::kJsonObject);
  const json schema = {{"$defs", {{"p", {{"type", "integer"}, {"minimum", 0}}}}},
                       {"type", "object"},
                       {"properties", {{"a", {{"$ref", "#/$defs/p"}}}, {"b", {{"anyOf", {{{"type", "null"}}, true}}}}}},
                       {"required", {"a"}},
                       {"additionalProperties", false},
                       {"title", "T"}};
  const json body = {{"prompt", "x"},
                     {"response_format", {{"type", "json_schema"},
                                          {"json_schema", {{"name", "n"}, {"strict", true}, {"schema", schema}}}}}};
  const auto r = parse_completion_request(body.dump(), false);
  EXPECT_EQ(r.response_format.kind, ResponseFormatKind::kJsonSchema);
  EXPECT_EQ(json::parse(r.response_format.schema), schema);
  for (const char* keyword : {"type", "enum", "const", "anyOf", "$ref", "$defs", "pattern", "maxItems", "description"}) {
    EXPECT_TRUE(json_schema_keyword_supported(keyword)) << keyword;
  }
  for (const char* keyword : {"allOf", "oneOf", "not", "if", "uniqueItems", "contains", "patternProperties",
                              "propertyNames", "multipleOf", "minProperties", "dependentRequired", "propertes",
                              "minLength", "maxLength", "format"}) {
    EXPECT_FALSE(json_schema_keyword_supported(keyword)) << keyword;
  }
}

TEST(OpenAiApi, LogprobsFields) {
  const auto r = parse_completion_request(R"({"prompt": [1, 2], "logprobs": 5, "echo": true, "max_tokens": 0})", false);
  EXPECT_EQ(r.sampling.logprobs, 5);
  EXPECT_TRUE(r.sampling.echo);
  EXPECT_EQ(r.sampling.max_tokens, 0);
  EXPECT_EQ(parse_completion_request(R"({"prompt": "x", "logprobs": 0})", false).sampling.logprobs, 0);
  EXPECT_FALSE(parse_completion_request(R"({"prompt": "x", "logprobs": null})", false).sampling.logprobs.has_value());
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}], )";
  EXPECT_EQ(parse_completion_request(chat + R"("logprobs": true, "top_logprobs": 3})", true).sampling.logprobs, 3);
  EXPECT_EQ(parse_completion_request(chat + R"("logprobs": true})", true).sampling.logprobs, 0);
  EXPECT_FALSE(parse_completion_request(chat + R"("logprobs": false})", true).sampling.logprobs.has_value());
}

// The two shapes, on a worked example: a completion's parallel lists, the prompt's first token
// null, the chosen token among its alternatives, offsets in characters (é is one) from the
// choice's text_offset; a chat's content entries with their UTF-8 bytes.
TEST(OpenAiApi, LogprobsShapes) {
  ApiChoice c;
  c.text = "\xc3\xa9t\xc3\xa9!";
  c.finish_reason = "length";
  c.text_offset = 2;
  c.logprobs = std::vector<ApiTokenLogprob>{{"\xc3\xa9t", std::nullopt, {}},
                                            {"\xc3\xa9", -0.5, {{"a", -0.25}, {"b", -1.0}}},
                                            {"!", -2.0, {{"!", -2.0}}}};
  const auto completion = completion_response("cmpl-1", 1, "m", false, {c}, {3, 2})["choices"][0]["logprobs"];
  EXPECT_EQ(completion["tokens"], json({"\xc3\xa9t", "\xc3\xa9", "!"}));
  EXPECT_EQ(completion["token_logprobs"], json({nullptr, -0.5, -2.0}));
  EXPECT_EQ(completion["top_logprobs"], json::parse(R"([null, {"a": -0.25, "b": -1.0, "\u00e9": -0.5}, {"!": -2.0}])"));
  EXPECT_EQ(completion["text_offset"], json({2, 4, 5}));
  const auto content = completion_response("chatcmpl-1", 1, "m", true, {c}, {3, 2})["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  EXPECT_EQ(content[1]["token"], "\xc3\xa9");
  EXPECT_EQ(content[1]["logprob"], -0.5);
  EXPECT_EQ(content[1]["bytes"], json({0xc3, 0xa9}));
  EXPECT_EQ(content[1]["top_logprobs"][0], json::parse(R"({"token": "a", "logprob": -0.25, "bytes": [97]})"));
  EXPECT_EQ(utf8_characters("\xc3\xa9t\xf0\x9f\x99\x82"), 3);
  // Not asked: null in both.
  EXPECT_TRUE(completion_chunk("c", 1, "m", false, {0, "a", ""}, false)["choices"][0]["logprobs"].is_null());
}

// Tools, tool_choice and a conversation with calls and their results; the messages as a chat
// template reads them (vLLM's reading: arguments that are an object's text become the object).
TEST(OpenAiApi, ToolFieldsAndMessages) {
  const auto r = parse_completion_request(
      R"({"messages": [{"role": "user", "content": "Weather?"},
                       {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"z\": 1, \"a\": [true]}"}},
                        {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "not json"}}]},
                       {"role": "tool", "tool_call_id": "call_1", "content": "12°C"}],
          "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
                     "parameters": {"type": "object", "properties": {"z": {"type": "integer"}, "a": {"type": "array"}}}}}],
          "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "parallel_tool_calls": false})",
      true);
  EXPECT_EQ(r.tool_choice.kind, ToolChoiceKind::kNamed);
  EXPECT_EQ(r.tool_choice.name, "get_weather");
  EXPECT_FALSE(r.parallel_tool_calls);
  // The tools keep the request's key order (z before a), as a template's tojson prints them.
  EXPECT_EQ(r.tools.dump(), R"([{"type":"function","function":{"name":"get_weather","description":"d",)"
                            R"("parameters":{"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"array"}}}}}])");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_TRUE(r.messages[1].null_content);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 2u);
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"z": 1, "a": [true]})");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
  EXPECT_EQ(chat_template_messages(r.messages).dump(),
            R"([{"role":"user","content":"Weather?"},)"
            R"({"role":"assistant","content":null,"tool_calls":[)"
            R"({"id":"call_1","type":"function","function":{"name":"get_weather","arguments":{"z":1,"a":[true]}}},)"
            R"({"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"not json"}}]},)"
            R"({"role":"tool","content":"12°C","tool_call_id":"call_1"}])");
  // Defaults: auto with tools, none without; "none" and "required" by name.
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  const std::string hi = R"("messages": [{"role": "user", "content": "hi"}])";
  EXPECT_EQ(parse_completion_request("{" + hi + ", " + tools + "}", true).tool_choice.kind, ToolChoiceKind::kAuto);
  EXPECT_EQ(parse_completion_request("{" + hi + "}", true).tool_choice.kind, ToolChoiceKind::kNone);
  EXPECT_EQ(parse_completion_request("{" + hi + ", " + tools + R"(, "tool_choice": "none"})", true).tool_choice.kind,
            ToolChoiceKind::kNone);
  EXPECT_EQ(parse_completion_request("{" + hi + ", " + tools + R"(, "tool_choice": "required"})", true).tool_choice.kind,
            ToolChoiceKind::kRequired);
  // Calls in a whole answer (content null when they are all of it) and in a streamed delta.
  ApiChoice choice{0, "", "tool_calls"};
  choice.tool_calls = {{"call_a", "f", "{\"x\":1}"}, {"call_b", "g", "{}"}};
  const auto whole = completion_response("c", 1, "m", true, {choice}, ApiUsage{1, 2});
  const auto& message = whole["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  EXPECT_EQ(message["tool_calls"], json::parse(R"([{"id": "call_a", "type": "function", "function": {"name": "f",
      "arguments": "{\"x\":1}"}}, {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}}])"));
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");
  choice.finish_reason.clear();
  const auto delta = completion_chunk("c", 1, "m", true, choice, false)["choices"][0]["delta"];
  EXPECT_EQ(delta["tool_calls"][1]["index"], 1);
  EXPECT_EQ(delta["tool_calls"][1]["function"]["name"], "g");
  EXPECT_FALSE(delta.contains("content"));
  // Thinking: reasoning_content beside the content, in whole answers and deltas; an assistant
  // turn's own passed back to the template; chat_template_kwargs as more template variables.
  ApiChoice thought{0, "4.", "stop"};
  thought.reasoning = "Two and two.";
  EXPECT_EQ(completion_response("c", 1, "m", true, {thought}, {})["choices"][0]["message"]["reasoning_content"],
            "Two and two.");
  thought.text.clear(), thought.finish_reason.clear();
  EXPECT_EQ(completion_chunk("c", 1, "m", true, thought, false)["choices"][0]["delta"],
            json::parse(R"({"reasoning_content": "Two and two."})"));
  const auto with_kwargs = parse_completion_request(
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "4.",
          "reasoning_content": "Sum."}], "chat_template_kwargs": {"enable_thinking": false, "z": 1, "a": 2}})", true);
  EXPECT_EQ(with_kwargs.template_kwargs.dump(), R"({"enable_thinking":false,"z":1,"a":2})");
  EXPECT_EQ(chat_template_messages(with_kwargs.messages)[1]["reasoning_content"], "Sum.");
}

TEST(OpenAiApi, ChatRequestMessages) {
  const auto r = parse_completion_request(
      R"({"messages": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}],
          "max_completion_tokens": 9})",
      true);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "Hi there");
  EXPECT_EQ(r.sampling.max_tokens, 9);
}

// Every malformed body is a 400 naming the field, never an exception of another kind.
TEST(OpenAiApi, BadRequestsNameTheField) {
  struct Case {
    std::string body;
    bool chat;
    std::string param;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"{", false, "", "not valid JSON"},
      {"[1, 2]", false, "", "must be a JSON object"},
      {"{}", false, "prompt", "is required"},
      {R"({"prompt": 5})", false, "prompt", "must be a string"},
      {R"({"prompt": []})", false, "prompt", "an empty list"},
      {R"({"prompt": [[]]})", false, "prompt[0]", "empty list of token ids"},
      {R"({"prompt": [-1]})", false, "prompt", "non-negative"},
      {R"({"prompt": "x", "max_tokens": -1})", false, "max_tokens", "must be in [0"},
      {R"({"prompt": "x", "max_tokens": 0})", false, "max_tokens", "0 only with echo"},
      {R"({"prompt": "x", "max_tokens": 2.5})", false, "max_tokens", "must be an integer"},
      {R"({"prompt": "x", "max_tokens": "9"})", false, "max_tokens", "must be an integer"},
      {R"({"prompt": "x", "max_tokens": 18446744073709551615})", false, "max_tokens", "at most"},
      {R"({"prompt": "x", "temperature": -0.1})", false, "temperature", "must be in [0, 100]"},
      {R"({"prompt": "x", "temperature": "hot"})", false, "temperature", "must be a number"},
      {R"({"prompt": "x", "top_p": 0})", false, "top_p", "must be in (0, 1]"},
      {R"({"prompt": "x", "top_p": 1.5})", false, "top_p", "must be in (0, 1]"},
      {R"({"prompt": "x", "n": 0})", false, "n", "must be in [1, 64]"},
      {R"({"prompt": "x", "n": 40, "max_tokens": 1, "seed": 1, "stop": "a"})", true, "messages", "is required"},
      {R"({"prompt": ["a", "b", "c"], "n": 30})", false, "prompt", "at most 64"},
      {R"({"prompt": "x", "stop": ""})", false, "stop", "empty stop sequence"},
      {R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", false, "stop", "at most 4"},
      {R"({"prompt": "x", "stop": [1]})", false, "stop", "must be a string or an array of strings"},
      {R"({"prompt": "x", "seed": -3})", false, "seed", "must be in [0"},
      {R"({"prompt": "x", "stream": "yes"})", false, "stream", "must be true or false"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", false, "stream_options", "only allowed with stream"},
      {R"({"prompt": "x", "logprobs": 21})", false, "logprobs", "must be at most 20"},
      {R"({"prompt": "x", "logprobs": true})", false, "logprobs", "must be an integer"},
      {R"({"prompt": "x", "echo": 1})", false, "echo", "must be true or false"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "echo": true})", true, "echo", "/v1/completions field"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": 2})", true, "logprobs", "must be true or false"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", true, "top_logprobs",
       "needs logprobs: true"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 21})", true,
       "top_logprobs", "must be at most 20"},
      {R"({"prompt": "x", "presence_penalty": 0.5})", false, "presence_penalty", "not supported"},
      {R"({"prompt": "x", "model": 3})", false, "model", "must be a string"},
      {R"({"messages": "hi"})", true, "messages", "non-empty array"},
      {R"({"messages": [{"content": "hi"}]})", true, "messages[0].role", "must be a string"},
      {R"({"messages": [{"role": "wizard", "content": "hi"}]})", true, "messages[0].role", "must be system"},
      {R"({"messages": [{"role": "user"}]})", true, "messages[0].content", "is required"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", true, "messages[0].content[0]", "text"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]})", true, "tools[0].function",
       "must be an object"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": {"type": "function"}})", true, "tools", "must be an array"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "retrieval", "function": {"name": "f"}}]})",
       true, "tools[0].type", "must be \"function\""},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "a b"}}]})",
       true, "tools[0].function.name", "1 to 64 letters"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}},
           {"type": "function", "function": {"name": "f"}}]})", true, "tools[1].function.name", "names an earlier tool"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f",
           "parameters": "none"}}]})", true, "tools[0].function.parameters", "must be a JSON schema"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "auto"})", true, "tool_choice", "needs tools"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}],
           "tool_choice": "always"})", true, "tool_choice", "got 'always'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}],
           "tool_choice": {"type": "function", "function": {"name": "g"}}})", true, "tool_choice.function.name",
       "'g' is not one of the request's tools"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f",
           "parameters": {"type": "object", "properties": {"a": {"type": "string", "minLength": 2}}}}}],
           "tool_choice": "required"})", true, "tools", "tools[0].function.parameters.properties.a: the keyword 'minLength'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}],
           "tool_choice": "required", "response_format": {"type": "json_object"}})", true, "tool_choice",
       "cannot be combined with response_format"},
      {R"({"prompt": "x", "tools": [{"type": "function", "function": {"name": "f"}}]})", false, "tools",
       "/v1/chat/completions field"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "functions": [{"name": "f"}]})", true, "functions",
       "use tools and tool_choice"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]}]})",
       true, "messages[0].tool_calls[0].function.name", "must be a function's name"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f",
           "arguments": 3}}]}]})", true, "messages[0].tool_calls[0].function.arguments", "a JSON object's text"},
      {R"({"messages": [{"role": "tool", "content": "12"}]})", true, "messages[0].tool_call_id", "is required"},
      {R"({"messages": [{"role": "assistant"}]})", true, "messages[0].content", "is required"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": [1]})", true, "chat_template_kwargs",
       "must be an object"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"messages": []}})", true,
       "chat_template_kwargs.messages", "set by the server"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "response_format": "json"})", true, "response_format",
       "must be an object"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "yaml"}})", true,
       "response_format.type", "got 'yaml'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema"}})", true,
       "response_format.json_schema", "must be an object"},
      {R"({"messages": [{"role": "user", "content": "hi"}],
           "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})", true,
       "response_format.json_schema.schema", "is required"},
      {R"({"messages": [{"role": "user", "content": "hi"}],
           "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": 1, "schema": {}}}})", true,
       "response_format.json_schema.strict", "true or false"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema",
           "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "array",
           "items": {"type": "string", "pattern": "^a+$", "uniqueItems": true}}}}}}})", true, "response_format",
       "response_format.json_schema.schema.properties.a.items: the keyword 'uniqueItems' is not supported"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema",
           "json_schema": {"name": "x", "schema": {"$defs": {"d": {"not": {"type": "null"}}}, "$ref": "#/$defs/d"}}}})",
       true, "response_format", "schema.$defs.d: the keyword 'not'"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema",
           "json_schema": {"name": "x", "schema": {"anyOf": [{"type": "string"}, 3]}}}})", true, "response_format",
       "schema.anyOf[1]: must be a schema"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"},
           "ignore_eos": true})", true, "ignore_eos", "cannot be combined with response_format"},
  };
  for (const auto& c : cases) {
    const auto e = error_of(c.body, c.chat);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_NE(std::string(e.what()).find(c.message_part), std::string::npos) << c.body << " -> " << e.what();
    // The body is OpenAI's error object.
    const auto body = json::parse(e.body());
    EXPECT_EQ(body["error"]["message"], e.what());
    EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  }
  // Numbers no 64-bit type holds, of any length: 400 naming the member and the byte.
  const std::string digits(5000, '9');
  struct Huge {
    std::string body;
    std::string param;
  };
  for (const auto& h : std::vector<Huge>{{R"({"prompt": "a", "max_tokens": 1)" + digits + "}", "max_tokens"},
                                         {R"({"prompt": "a", "temperature": -1e400})", "temperature"},
                                         {R"({"prompt": [[1, 2], [3, )" + digits + "]]}", "prompt[1][1]"},
                                         {R"({"messages": [{"role": "user", "content": "x"}], "seed": 1e999})", "seed"}}) {
    const auto e = error_of(h.body, h.param == "seed");
    EXPECT_EQ(e.status, 400) << h.param;
    EXPECT_EQ(e.param, h.param);
    EXPECT_NE(std::string(e.what()).find(h.param + ": a number at byte "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("too large for any 64-bit type"), std::string::npos) << e.what();
  }
  // Not UTF-8: the JSON reader refuses it.
  EXPECT_EQ(error_of(std::string("{\"prompt\": \"a\xff\"}")).status, 400);
}

TEST(OpenAiApi, EmbeddingRequests) {
  EXPECT_EQ(parse_embedding_request(R"({"input": "a", "model": "m"})").inputs, std::vector<std::string>{"a"});
  EXPECT_EQ(parse_embedding_request(R"({"input": ["a", "b"], "encoding_format": "float"})").inputs.size(), 2u);
  EXPECT_TRUE(parse_embedding_request(R"({"input": "a", "encoding_format": "base64"})").base64);
  for (const auto* body : {R"({})", R"({"input": []})", R"({"input": [1]})", R"({"input": "a", "encoding_format": "hex"})",
                           R"({"input": "a", "dimensions": 8})"}) {
    EXPECT_THROW(parse_embedding_request(body), ApiError) << body;
  }
}

// OpenAI's API knows "stop" (an EOS token or a stop text) and "length"; a cancelled or failed
// sequence is answered with an error instead.
TEST(OpenAiApi, FinishReasons) {
  EXPECT_EQ(openai_finish_reason(FinishReason::kEos), "stop");
  EXPECT_EQ(openai_finish_reason(FinishReason::kStop), "stop");
  EXPECT_EQ(openai_finish_reason(FinishReason::kLength), "length");
  EXPECT_EQ(openai_finish_reason(FinishReason::kCancelled), std::nullopt);
  EXPECT_EQ(openai_finish_reason(FinishReason::kError), std::nullopt);
}

// The responses have the fields the openai client reads.
TEST(OpenAiApi, ResponsesAndChunks) {
  ApiUsage usage{5, 3};
  const auto whole = completion_response("cmpl-1", 100, "m", false, {{0, "abc", "length"}}, usage);
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["choices"][0]["text"], "abc");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(whole["usage"]["total_tokens"], 8);
  const auto chat = completion_response("chatcmpl-1", 100, "m", true, {{0, "hi", "stop"}}, usage);
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "hi");
  const auto first = completion_chunk("c", 1, "m", true, {0, "", ""}, true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const auto last = completion_chunk("c", 1, "m", true, {0, "", "stop"}, false);
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(usage_chunk("c", 1, "m", false, usage)["choices"].size(), 0u);
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  // Text that is not UTF-8 still makes valid JSON.
  EXPECT_NO_THROW(json::parse(sse_event(completion_chunk("c", 1, "m", false, {0, "a\xe2\x82", ""}, false)).substr(6)));
  // RFC 4648's examples, and a float32's bytes as OpenAI's base64 embeddings carry them.
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(embedding_response("m", {{1.0f}}, 1, true)["data"][0]["embedding"], "AACAPw==");  // 0x3f800000
  const auto embeddings = embedding_response("m", {{1.0f, 0.0f}}, 4);
  EXPECT_EQ(embeddings["data"][0]["embedding"].size(), 2u);
  EXPECT_EQ(embeddings["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(models_response("m", 1)["data"][0]["id"], "m");
}

}  // namespace
}  // namespace zoo
