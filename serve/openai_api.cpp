#include "serve/openai_api.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace zoo {
namespace {

using nlohmann::json;

std::string shortest(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", x);
  return buffer;
}

ApiError bad(const std::string& field, const std::string& what) { return ApiError(400, field + ": " + what, field); }

// Reads a body again to place a number no 64-bit type holds (nlohmann's out_of_range.406 names
// neither the field nor the byte): the member it is the value of, and where it ends.
class NumberLocator : public nlohmann::json_sax<json> {
 public:
  std::string field;  // "max_tokens", "prompt[2]", ... ; empty at the top level
  size_t byte = 0;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(true); }
  bool key(string_t& k) override {
    path_.back().key = k;
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) override {
    byte = position;
    field = where();
    return false;
  }

 private:
  struct Level {
    bool object;
    std::string key;
    int64_t index = -1;
  };
  std::vector<Level> path_;

  // The place the next value takes: an object's member or an array's next element.
  std::string where() const {
    std::string out;
    for (size_t i = 0; i < path_.size(); ++i) {
      const auto& l = path_[i];
      if (l.object) {
        out += (out.empty() ? "" : ".") + l.key;
      } else {
        // The innermost array has not yet counted the element that failed.
        out += "[" + std::to_string(l.index + (i + 1 == path_.size() ? 1 : 0)) + "]";
      }
    }
    return out;
  }
  bool value() {
    if (!path_.empty() && !path_.back().object) ++path_.back().index;
    return true;
  }
  bool open(bool object) {
    value();
    path_.push_back({object, "", -1});
    return true;
  }
  bool close() {
    path_.pop_back();
    return true;
  }
};

json parse_object(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    // nlohmann's message names the byte and what it expected.
    throw ApiError(400, std::string("request body is not valid JSON: ") + e.what());
  } catch (const json::out_of_range&) {
    // A number past every 64-bit type (a thousand digits, 1e400).
    NumberLocator where;
    json::sax_parse(body, &where);
    const std::string field = where.field.empty() ? "(top level)" : where.field;
    throw ApiError(400, field + ": a number at byte " + std::to_string(where.byte) +
                            " is too large for any 64-bit type", where.field);
  }
  if (!j.is_object()) throw ApiError(400, std::string("request body must be a JSON object, got ") + j.type_name());
  return j;
}

template <class Json>
const Json* field(const Json& j, const char* name) {
  auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string string_field(const json& j, const char* name) {
  const json* v = field(j, name);
  if (v == nullptr) return "";
  if (!v->is_string()) throw bad(name, std::string("must be a string, got ") + v->type_name());
  return v->get<std::string>();
}

bool bool_field(const json& j, const char* name, bool fallback) {
  const json* v = field(j, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) throw bad(name, std::string("must be true or false, got ") + v->type_name());
  return v->get<bool>();
}

double number_field(const json& j, const char* name, double fallback, double lo, double hi, bool lo_open = false) {
  const json* v = field(j, name);
  if (v == nullptr) return fallback;
  if (!v->is_number()) throw bad(name, std::string("must be a number, got ") + v->type_name());
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
    throw bad(name, "must be in " + std::string(lo_open ? "(" : "[") + shortest(lo) + ", " + shortest(hi) +
                        "], got " + v->dump());
  }
  return x;
}

std::optional<int64_t> integer_field(const json& j, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(j, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) throw bad(name, std::string("must be an integer, got ") + v->dump());
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    throw bad(name, "must be at most " + std::to_string(hi) + ", got " + v->dump());
  }
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) {
    throw bad(name, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v->dump());
  }
  return x;
}

// Features zoo does not have: refused when asked for, accepted at their "off" values.
void refuse_unsupported(const json& j, bool chat) {
  auto asked = [&](const char* name) {
    const json* v = field(j, name);
    if (v == nullptr) return false;
    if (v->is_boolean()) return v->get<bool>();
    if (v->is_number()) return v->get<double>() != 0.0;
    if (v->is_object() || v->is_array()) return !v->empty();
    return true;
  };
  for (const char* name : {"suffix", "logit_bias", "frequency_penalty", "presence_penalty", "functions",
                           "function_call"}) {
    if (asked(name)) throw bad(name, std::string("is not supported by zoo serve") +
                                         (name[0] == 'f' ? " (the legacy form: use tools and tool_choice)" : ""));
  }
  if (!chat) {
    for (const char* name : {"tools", "tool_choice"}) {
      if (asked(name)) throw bad(name, "is a /v1/chat/completions field");
    }
  }
  if (chat && asked("echo")) throw bad("echo", "is a /v1/completions field: a chat's answer never repeats its prompt");
  if (const json* best_of = field(j, "best_of"); best_of != nullptr && *best_of != json(1)) {
    if (!(best_of->is_number_integer() && field(j, "n") != nullptr && *best_of == j["n"])) {
      throw bad("best_of", "is not supported by zoo serve (only best_of = n)");
    }
  }
}

// A schema's keywords, checked where structured output would silently ignore them: `where` is the
// schema's path, as response_format.json_schema.schema.properties.NAME; `param` the request field.
template <class Json>
void check_schema(const Json& s, const std::string& where, const std::string& param, int depth) {
  constexpr int kMaxDepth = 64;
  if (s.is_boolean()) return;  // true: anything; false: nothing
  if (!s.is_object()) throw ApiError(400, where + ": must be a schema (an object), got " + s.type_name(), param);
  if (depth > kMaxDepth) {
    throw ApiError(400, where + ": schemas nest deeper than " + std::to_string(kMaxDepth), param);
  }
  auto sub = [&](const Json& v, const std::string& at) { check_schema(v, at, param, depth + 1); };
  auto each_of_object = [&](const std::string& key, const Json& v) {
    if (!v.is_object()) throw ApiError(400, where + "." + key + ": must be an object of schemas", param);
    for (const auto& [name, schema] : v.items()) sub(schema, where + "." + key + "." + name);
  };
  auto each_of_array = [&](const std::string& key, const Json& v) {
    if (!v.is_array() || v.empty()) throw ApiError(400, where + "." + key + ": must be a non-empty array of schemas", param);
    for (size_t i = 0; i < v.size(); ++i) sub(v[i], where + "." + key + "[" + std::to_string(i) + "]");
  };
  for (const auto& [key, value] : s.items()) {
    if (!json_schema_keyword_supported(key)) {
      throw ApiError(400, where + ": the keyword '" + key + "' is not supported by zoo serve's structured output",
                     param);
    }
    if (key == "properties" || key == "$defs" || key == "definitions") each_of_object(key, value);
    else if (key == "anyOf" || key == "prefixItems") each_of_array(key, value);
    else if (key == "items" || (key == "additionalProperties" && !value.is_boolean())) sub(value, where + "." + key);
  }
}

ResponseFormat response_format_field(const json& j) {
  ResponseFormat format;
  const json* v = field(j, "response_format");
  if (v == nullptr) return format;
  if (!v->is_object()) throw bad("response_format", std::string("must be an object, got ") + v->type_name());
  const json* type = field(*v, "type");
  if (type == nullptr || !type->is_string()) throw bad("response_format.type", "must be text, json_object or json_schema");
  const auto name = type->get<std::string>();
  if (name == "text") return format;
  if (name == "json_object") {
    format.kind = ResponseFormatKind::kJsonObject;
    return format;
  }
  if (name != "json_schema") throw bad("response_format.type", "must be text, json_object or json_schema, got '" + name + "'");
  const json* spec = field(*v, "json_schema");
  if (spec == nullptr || !spec->is_object()) throw bad("response_format.json_schema", "must be an object with a schema");
  if (const json* strict = field(*spec, "strict"); strict != nullptr && !strict->is_boolean()) {
    throw bad("response_format.json_schema.strict", std::string("must be true or false, got ") + strict->type_name());
  }
  const json* schema = field(*spec, "schema");
  if (schema == nullptr) throw bad("response_format.json_schema.schema", "is required");
  check_schema(*schema, "response_format.json_schema.schema", "response_format", 0);
  format.kind = ResponseFormatKind::kJsonSchema;
  format.schema = schema->dump();
  return format;
}

std::vector<std::string> stop_field(const json& j) {
  const json* v = field(j, "stop");
  if (v == nullptr) return {};
  std::vector<std::string> stops;
  if (v->is_string()) {
    stops.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > 4) throw bad("stop", "at most 4 sequences, got " + std::to_string(v->size()));
    for (const auto& s : *v) {
      if (!s.is_string()) throw bad("stop", std::string("must be a string or an array of strings, holds ") + s.type_name());
      stops.push_back(s.get<std::string>());
    }
  } else {
    throw bad("stop", std::string("must be a string or an array of strings, got ") + v->type_name());
  }
  for (const auto& s : stops) {
    if (s.empty()) throw bad("stop", "an empty stop sequence would end every completion at once");
  }
  return stops;
}

ApiSampling sampling_fields(const json& j, bool chat) {
  ApiSampling s;
  const int64_t kMaxTokens = int64_t{1} << 31;
  s.max_tokens = integer_field(j, "max_tokens", 0, kMaxTokens);
  if (chat) {
    if (auto m = integer_field(j, "max_completion_tokens", 1, kMaxTokens)) s.max_tokens = m;
  }
  s.temperature = number_field(j, "temperature", 1.0, 0.0, 100.0);
  s.top_p = number_field(j, "top_p", 1.0, 0.0, 1.0, /*lo_open=*/true);
  s.top_k = integer_field(j, "top_k", -1, kMaxTokens).value_or(0);
  if (s.top_k < 0) s.top_k = 0;
  s.repetition_penalty = number_field(j, "repetition_penalty", 1.0, 0.0, 100.0, /*lo_open=*/true);
  s.ignore_eos = bool_field(j, "ignore_eos", false);
  s.stop = stop_field(j);
  if (auto seed = integer_field(j, "seed", 0, std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(*seed);
  }
  // OpenAI's completions take at most 5 alternatives and its chats 20; vLLM takes 20 for both.
  constexpr int64_t kMaxTopLogprobs = 20;
  if (chat) {
    const bool logprobs = bool_field(j, "logprobs", false);
    const auto top = integer_field(j, "top_logprobs", 0, kMaxTopLogprobs);
    if (top && !logprobs) throw bad("top_logprobs", "needs logprobs: true");
    if (logprobs) s.logprobs = top.value_or(0);
  } else {
    s.logprobs = integer_field(j, "logprobs", 0, kMaxTopLogprobs);
    s.echo = bool_field(j, "echo", false);
  }
  if (s.max_tokens == 0 && !s.echo) {
    throw bad("max_tokens", "must be at least 1 (0 only with echo: the prompt scored, nothing generated)");
  }
  s.n = integer_field(j, "n", 1, kMaxChoices).value_or(1);
  s.stream = bool_field(j, "stream", false);
  if (const json* o = field(j, "stream_options")) {
    if (!o->is_object()) throw bad("stream_options", std::string("must be an object, got ") + o->type_name());
    if (!s.stream) throw bad("stream_options", "is only allowed with stream: true");
    s.include_usage = bool_field(*o, "include_usage", false);
  }
  return s;
}

std::vector<ApiPrompt> prompt_field(const json& j) {
  const json* v = field(j, "prompt");
  if (v == nullptr) throw bad("prompt", "is required");
  auto token_ids = [](const json& a, const std::string& where) {
    ApiPrompt p;
    p.is_ids = true;
    for (const auto& t : a) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || (t.is_number_unsigned() && t.get<uint64_t>() > (1u << 31))) {
        throw bad(where, "token ids must be non-negative integers, got " + t.dump());
      }
      p.ids.push_back(t.get<int64_t>());
    }
    if (p.ids.empty()) throw bad(where, "an empty list of token ids");
    return p;
  };
  std::vector<ApiPrompt> prompts;
  if (v->is_string()) {
    prompts.push_back({v->get<std::string>(), {}, false});
  } else if (v->is_array() && !v->empty() && (*v)[0].is_number()) {
    prompts.push_back(token_ids(*v, "prompt"));
  } else if (v->is_array() && !v->empty()) {
    for (size_t i = 0; i < v->size(); ++i) {
      const auto& p = (*v)[i];
      const std::string where = "prompt[" + std::to_string(i) + "]";
      if (p.is_string()) prompts.push_back({p.get<std::string>(), {}, false});
      else if (p.is_array()) prompts.push_back(token_ids(p, where));
      else throw bad(where, std::string("must be a string or a list of token ids, got ") + p.type_name());
    }
  } else {
    throw bad("prompt", std::string("must be a string, a list of strings or a list of token ids, got ") +
                            (v->is_array() ? "an empty list" : v->type_name()));
  }
  return prompts;
}

std::string string_field_at(const json& j, const char* name, const std::string& where) {
  const json* v = field(j, name);
  if (v == nullptr) return "";
  if (!v->is_string()) throw bad(where + "." + name, std::string("must be a string, got ") + v->type_name());
  return v->get<std::string>();
}

// A function's name, as OpenAI allows them: 1-64 letters, digits, '_' and '-'.
template <class Json>
std::string function_name(const Json* v, const std::string& where) {
  if (v == nullptr || !v->is_string()) throw bad(where, "must be a function's name (a string)");
  const auto name = v->template get<std::string>();
  const bool ok = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
  if (!ok) throw bad(where, "a function's name is 1 to 64 letters, digits, '_' or '-', got " + v->dump());
  return name;
}

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}],
// the arguments a JSON object's text (or, as some clients send them, the object).
std::vector<ApiToolCall> message_tool_calls(const json& m, const std::string& message_where) {
  const json* v = field(m, "tool_calls");
  if (v == nullptr) return {};
  const std::string where = message_where + ".tool_calls";
  if (!v->is_array()) throw bad(where, std::string("must be an array of tool calls, got ") + v->type_name());
  std::vector<ApiToolCall> calls;
  for (size_t i = 0; i < v->size(); ++i) {
    const auto& c = (*v)[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!c.is_object()) throw bad(at, std::string("must be an object, got ") + c.type_name());
    if (const json* type = field(c, "type"); type != nullptr && *type != json("function")) {
      throw bad(at + ".type", "must be \"function\", got " + type->dump());
    }
    const json* function = field(c, "function");
    if (function == nullptr || !function->is_object()) throw bad(at + ".function", "must be an object with name and arguments");
    ApiToolCall call;
    call.id = string_field_at(c, "id", at);
    call.name = function_name(field(*function, "name"), at + ".function.name");
    const json* arguments = field(*function, "arguments");
    if (arguments == nullptr) {
      call.arguments = "{}";
    } else if (arguments->is_string()) {
      call.arguments = arguments->get<std::string>();
    } else if (arguments->is_object()) {
      call.arguments = arguments->dump();
    } else {
      throw bad(at + ".function.arguments", std::string("must be a JSON object's text, got ") + arguments->type_name());
    }
    calls.push_back(std::move(call));
  }
  return calls;
}

// tools: [{"type": "function", "function": {"name", "description", "parameters", "strict"}}], read
// from the body kept in its keys' order (a template prints each tool with tojson).
nlohmann::ordered_json tools_field(const nlohmann::ordered_json& j) {
  using ordered = nlohmann::ordered_json;
  const ordered* v = field(j, "tools");
  if (v == nullptr) return nullptr;
  if (!v->is_array()) throw bad("tools", std::string("must be an array of tools, got ") + v->type_name());
  if (v->size() > kMaxTools) {
    throw bad("tools", "at most " + std::to_string(kMaxTools) + " tools, got " + std::to_string(v->size()));
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < v->size(); ++i) {
    const auto& t = (*v)[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) throw bad(at, std::string("must be an object, got ") + t.type_name());
    if (t.value("type", ordered()) != ordered("function")) {
      throw bad(at + ".type", "must be \"function\" (the only kind of tool zoo serve calls)");
    }
    const ordered* function = field(t, "function");
    if (function == nullptr || !function->is_object()) throw bad(at + ".function", "must be an object");
    const auto name = function_name(field(*function, "name"), at + ".function.name");
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      throw bad(at + ".function.name", "'" + name + "' names an earlier tool too");
    }
    names.push_back(name);
    if (const ordered* d = field(*function, "description"); d != nullptr && !d->is_string()) {
      throw bad(at + ".function.description", std::string("must be a string, got ") + d->type_name());
    }
    if (const ordered* p = field(*function, "parameters"); p != nullptr && !p->is_object()) {
      throw bad(at + ".function.parameters", std::string("must be a JSON schema (an object), got ") + p->type_name());
    }
    if (const ordered* s = field(*function, "strict"); s != nullptr && !s->is_boolean()) {
      throw bad(at + ".function.strict", std::string("must be true or false, got ") + s->type_name());
    }
  }
  return *v;
}

// tool_choice: "none", "auto", "required", or {"type": "function", "function": {"name"}} naming a tool.
ToolChoice tool_choice_field(const json& j, const nlohmann::ordered_json& tools) {
  const json* v = field(j, "tool_choice");
  ToolChoice choice;
  choice.kind = tools.is_null() ? ToolChoiceKind::kNone : ToolChoiceKind::kAuto;
  if (v == nullptr) return choice;
  if (v->is_string()) {
    const auto s = v->get<std::string>();
    if (s == "none") choice.kind = ToolChoiceKind::kNone;
    else if (s == "auto") choice.kind = ToolChoiceKind::kAuto;
    else if (s == "required") choice.kind = ToolChoiceKind::kRequired;
    else throw bad("tool_choice", "must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}, got '" + s + "'");
  } else if (v->is_object()) {
    if (v->value("type", json()) != json("function")) throw bad("tool_choice.type", "must be \"function\"");
    const json* function = field(*v, "function");
    if (function == nullptr || !function->is_object()) throw bad("tool_choice.function", "must be an object with a name");
    choice.kind = ToolChoiceKind::kNamed;
    choice.name = function_name(field(*function, "name"), "tool_choice.function.name");
  } else {
    throw bad("tool_choice", std::string("must be a string or an object, got ") + v->type_name());
  }
  if (choice.kind != ToolChoiceKind::kNone && tools.is_null()) {
    throw bad("tool_choice", "needs tools to choose among");
  }
  if (choice.kind == ToolChoiceKind::kNamed) {
    bool known = false;
    for (const auto& t : tools) known = known || t["function"]["name"] == choice.name;
    if (!known) throw bad("tool_choice.function.name", "'" + choice.name + "' is not one of the request's tools");
  }
  // A forced choice holds the answer to the tools' schemas: each is checked as response_format's is.
  if (choice.kind == ToolChoiceKind::kRequired || choice.kind == ToolChoiceKind::kNamed) {
    for (size_t i = 0; i < tools.size(); ++i) {
      const auto& function = tools[i]["function"];
      if (choice.kind == ToolChoiceKind::kNamed && function["name"] != choice.name) continue;
      if (const auto* p = field(function, "parameters")) {
        check_schema(*p, "tools[" + std::to_string(i) + "].function.parameters", "tools", 0);
      }
    }
  }
  return choice;
}

std::vector<ApiMessage> messages_field(const json& j) {
  const json* v = field(j, "messages");
  if (v == nullptr) throw bad("messages", "is required");
  if (!v->is_array() || v->empty()) throw bad("messages", "must be a non-empty array of messages");
  std::vector<ApiMessage> messages;
  for (size_t i = 0; i < v->size(); ++i) {
    const auto& m = (*v)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad(where, std::string("must be an object, got ") + m.type_name());
    ApiMessage message;
    const json* role = field(m, "role");
    if (role == nullptr || !role->is_string()) throw bad(where + ".role", "must be a string");
    message.role = role->get<std::string>();
    static const char* const kRoles[] = {"system", "developer", "user", "assistant", "tool"};
    bool known = false;
    for (const char* r : kRoles) known = known || message.role == r;
    if (!known) throw bad(where + ".role", "must be system, developer, user, assistant or tool, got '" + message.role + "'");
    message.name = string_field_at(m, "name", where);
    if (message.role == "assistant") {
      message.tool_calls = message_tool_calls(m, where);
      message.reasoning_content = string_field_at(m, "reasoning_content", where);
    }
    if (message.role == "tool") {
      message.tool_call_id = string_field_at(m, "tool_call_id", where);
      if (message.tool_call_id.empty()) throw bad(where + ".tool_call_id", "is required in a tool message");
    }
    const json* content = field(m, "content");
    if (content == nullptr && !message.tool_calls.empty()) {
      message.null_content = true;
    } else if (content == nullptr) {
      throw bad(where + ".content", "is required");
    } else if (content->is_string()) {
      message.content = content->get<std::string>();
    } else if (content->is_array()) {
      // Content parts: zoo's models read text only.
      for (size_t k = 0; k < content->size(); ++k) {
        const auto& part = (*content)[k];
        const std::string part_where = where + ".content[" + std::to_string(k) + "]";
        if (!part.is_object() || part.value("type", json()) != json("text") || !part.contains("text") ||
            !part["text"].is_string()) {
          throw bad(part_where, "only {\"type\": \"text\", \"text\": STRING} parts are supported");
        }
        message.content += part["text"].get<std::string>();
      }
    } else {
      throw bad(where + ".content", std::string("must be a string or an array of text parts, got ") + content->type_name());
    }
    messages.push_back(std::move(message));
  }
  return messages;
}

}  // namespace

nlohmann::ordered_json chat_template_messages(const std::vector<ApiMessage>& messages) {
  using ordered = nlohmann::ordered_json;
  ordered out = ordered::array();
  for (const auto& m : messages) {
    ordered message = {{"role", m.role}, {"content", m.null_content ? ordered() : ordered(m.content)}};
    if (!m.name.empty()) message["name"] = m.name;
    if (!m.reasoning_content.empty()) message["reasoning_content"] = m.reasoning_content;
    if (!m.tool_calls.empty()) {
      ordered calls = ordered::array();
      for (const auto& c : m.tool_calls) {
        // vLLM's reading: arguments that are an object's text are passed as the object.
        ordered arguments = ordered::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
        if (!arguments.is_object()) arguments = c.arguments;
        ordered call = ordered::object();
        if (!c.id.empty()) call["id"] = c.id;
        call["type"] = "function";
        call["function"] = {{"name", c.name}, {"arguments", std::move(arguments)}};
        calls.push_back(std::move(call));
      }
      message["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id.empty()) message["tool_call_id"] = m.tool_call_id;
    out.push_back(std::move(message));
  }
  return out;
}

bool json_schema_keyword_supported(const std::string& keyword) {
  static const char* const kKeywords[] = {
      // structure
      "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
      "enum", "const", "anyOf", "$ref", "$defs", "definitions",
      // values
      "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern",
      // annotations
      "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
      "writeOnly"};
  for (const char* k : kKeywords) {
    if (keyword == k) return true;
  }
  return false;
}

std::string ApiError::body() const {
  return json{{"error",
               {{"message", what()}, {"type", type}, {"param", param.empty() ? json() : json(param)}, {"code", status}}}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

CompletionRequest parse_completion_request(const std::string& body, bool chat) {
  const json j = parse_object(body);
  CompletionRequest r;
  r.chat = chat;
  r.model = string_field(j, "model");
  refuse_unsupported(j, chat);
  r.sampling = sampling_fields(j, chat);
  r.response_format = response_format_field(j);
  if (r.response_format.kind != ResponseFormatKind::kText && r.sampling.ignore_eos) {
    throw bad("ignore_eos", "cannot be combined with response_format: a structured answer ends when its value does");
  }
  if (chat) {
    r.messages = messages_field(j);
    // Tools and template variables are printed by templates in the request's key order.
    std::optional<nlohmann::ordered_json> ordered_body;
    auto ordered = [&]() -> const nlohmann::ordered_json& {
      if (!ordered_body) ordered_body = nlohmann::ordered_json::parse(body);
      return *ordered_body;
    };
    if (field(j, "tools") != nullptr) r.tools = tools_field(ordered());
    r.tool_choice = tool_choice_field(j, r.tools);
    r.parallel_tool_calls = bool_field(j, "parallel_tool_calls", true);
    if (const json* kwargs = field(j, "chat_template_kwargs")) {
      if (!kwargs->is_object()) throw bad("chat_template_kwargs", std::string("must be an object, got ") + kwargs->type_name());
      // The variables the server sets itself are not the request's to replace.
      for (const char* name : {"messages", "tools", "documents", "add_generation_prompt"}) {
        if (kwargs->contains(name)) throw bad(std::string("chat_template_kwargs.") + name, "is set by the server from the request");
      }
      r.template_kwargs = ordered()["chat_template_kwargs"];
    }
    const auto forced = r.tool_choice.kind == ToolChoiceKind::kRequired || r.tool_choice.kind == ToolChoiceKind::kNamed;
    if (forced && r.response_format.kind != ResponseFormatKind::kText) {
      throw bad("tool_choice", "a forced tool call cannot be combined with response_format: the call is the answer");
    }
    if (forced && r.sampling.ignore_eos) {
      throw bad("ignore_eos", "cannot be combined with a forced tool call: the answer ends when the call does");
    }
  } else {
    r.prompts = prompt_field(j);
  }
  const int64_t choices = r.sampling.n * static_cast<int64_t>(chat ? 1 : r.prompts.size());
  if (choices > kMaxChoices) {
    throw bad(chat ? "n" : "prompt", "asks for " + std::to_string(choices) + " completions, at most " +
                                         std::to_string(kMaxChoices) + " per request");
  }
  return r;
}

EmbeddingRequest parse_embedding_request(const std::string& body) {
  const json j = parse_object(body);
  EmbeddingRequest r;
  r.model = string_field(j, "model");
  if (const json* format = field(j, "encoding_format"); format != nullptr) {
    if (*format != json("float") && *format != json("base64")) {
      throw bad("encoding_format", "must be \"float\" or \"base64\", got " + format->dump());
    }
    r.base64 = *format == json("base64");
  }
  if (field(j, "dimensions") != nullptr) throw bad("dimensions", "is not supported by zoo serve");
  const json* v = field(j, "input");
  if (v == nullptr) throw bad("input", "is required");
  if (v->is_string()) {
    r.inputs.push_back(v->get<std::string>());
  } else if (v->is_array() && !v->empty()) {
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) {
        throw bad("input[" + std::to_string(i) + "]", std::string("must be a string, got ") + (*v)[i].type_name());
      }
      r.inputs.push_back((*v)[i].get<std::string>());
    }
  } else {
    throw bad("input", "must be a string or a non-empty array of strings");
  }
  if (static_cast<int64_t>(r.inputs.size()) > kMaxChoices) {
    throw bad("input", "at most " + std::to_string(kMaxChoices) + " texts per request, got " + std::to_string(r.inputs.size()));
  }
  return r;
}

json ApiUsage::to_json() const {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

std::optional<std::string> openai_finish_reason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled:
    case FinishReason::kError: return std::nullopt;
  }
  throw std::logic_error("unhandled finish reason");
}

int64_t utf8_characters(const std::string& text) {
  int64_t n = 0;
  for (const char c : text) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

namespace {

json utf8_bytes(const std::string& text) {
  json bytes = json::array();
  for (const char c : text) bytes.push_back(static_cast<unsigned char>(c));
  return bytes;
}

// The "logprobs" of a choice: a completion's parallel lists (tokens, token_logprobs, top_logprobs
// as {token: logprob} with the chosen token among them, as vLLM's, text_offset), or a chat's
// "content" list of {token, logprob, bytes, top_logprobs}.
json logprobs_json(const ApiChoice& c, bool chat) {
  if (!c.logprobs) return nullptr;
  if (chat) {
    json content = json::array();
    for (const auto& t : *c.logprobs) {
      json top = json::array();
      for (const auto& [token, value] : t.top) top.push_back({{"token", token}, {"logprob", value}, {"bytes", utf8_bytes(token)}});
      content.push_back({{"token", t.token}, {"logprob", t.logprob.value_or(0.0)}, {"bytes", utf8_bytes(t.token)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
  int64_t offset = c.text_offset;
  for (const auto& t : *c.logprobs) {
    tokens.push_back(t.token);
    values.push_back(t.logprob ? json(*t.logprob) : json());
    if (t.logprob) {
      json top = json::object();
      for (const auto& [token, value] : t.top) {
        if (!top.contains(token)) top[token] = value;
      }
      if (!top.contains(t.token)) top[t.token] = *t.logprob;
      tops.push_back(std::move(top));
    } else {
      tops.push_back(nullptr);
    }
    offsets.push_back(offset);
    offset += utf8_characters(t.token);
  }
  return {{"tokens", std::move(tokens)}, {"token_logprobs", std::move(values)}, {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

// A message's tool_calls; a streamed delta's carry each call's index, and each call comes whole.
json tool_calls_json(const std::vector<ApiToolCall>& calls, bool indexed) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json call = {{"id", calls[i].id},
                 {"type", "function"},
                 {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (indexed) call["index"] = i;
    out.push_back(std::move(call));
  }
  return out;
}

}  // namespace

json completion_response(const std::string& id, int64_t created, const std::string& model, bool chat,
                         const std::vector<ApiChoice>& choices, const ApiUsage& usage) {
  json list = json::array();
  for (const auto& c : choices) {
    json choice = {{"index", c.index}, {"finish_reason", c.finish_reason}, {"logprobs", logprobs_json(c, chat)}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (!c.reasoning.empty()) choice["message"]["reasoning_content"] = c.reasoning;
      if (!c.tool_calls.empty()) {
        if (c.text.empty()) choice["message"]["content"] = nullptr;  // as OpenAI answers a turn of calls alone
        choice["message"]["tool_calls"] = tool_calls_json(c.tool_calls, /*indexed=*/false);
      }
    } else {
      choice["text"] = c.text;
    }
    list.push_back(std::move(choice));
  }
  return {{"id", id},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", std::move(list)},
          {"usage", usage.to_json()}};
}

json completion_chunk(const std::string& id, int64_t created, const std::string& model, bool chat,
                      const ApiChoice& choice, bool first) {
  json c = {{"index", choice.index},
            {"finish_reason", choice.finish_reason.empty() ? json() : json(choice.finish_reason)},
            {"logprobs", logprobs_json(choice, chat)}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!choice.text.empty() || (first && choice.finish_reason.empty())) delta["content"] = choice.text;
    if (!choice.reasoning.empty()) delta["reasoning_content"] = choice.reasoning;
    if (!choice.tool_calls.empty()) delta["tool_calls"] = tool_calls_json(choice.tool_calls, /*indexed=*/true);
    c["delta"] = std::move(delta);
  } else {
    c["text"] = choice.text;
  }
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({std::move(c)})}};
}

json usage_chunk(const std::string& id, int64_t created, const std::string& model, bool chat, const ApiUsage& usage) {
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array()},
          {"usage", usage.to_json()}};
}

std::string base64_encode(const std::string& bytes) {
  static const char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = v << 8 | (k < n ? static_cast<uint8_t>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kDigits[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

json embedding_response(const std::string& model, const std::vector<std::vector<float>>& embeddings,
                        int64_t prompt_tokens, bool base64) {
  json data = json::array();
  for (size_t i = 0; i < embeddings.size(); ++i) {
    // base64: the float32 values' bytes, little-endian, as OpenAI's API sends them.
    const auto& e = embeddings[i];
    json value = base64 ? json(base64_encode(std::string(reinterpret_cast<const char*>(e.data()), e.size() * sizeof(float))))
                        : json(e);
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", std::move(value)}});
  }
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", model},
          {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

json models_response(const std::string& model, int64_t created,
                     const std::vector<std::pair<std::string, std::string>>& adapters) {
  auto data = json::array({{{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "zoo"},
                            {"root", model}, {"parent", nullptr}}});
  for (const auto& [name, path] : adapters) {
    data.push_back({{"id", name}, {"object", "model"}, {"created", created}, {"owned_by", "zoo"}, {"root", path},
                    {"parent", model}});
  }
  return {{"object", "list"}, {"data", data}};
}

std::string sse_event(const json& data) {
  // Text the model produced may end inside a multi-byte character only if the decoder let it;
  // the replacement character keeps the event valid JSON either way.
  return "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace zoo
