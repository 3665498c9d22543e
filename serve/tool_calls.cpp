#include "serve/tool_calls.h"

#include "serve/stop_texts.h"

#include <algorithm>
#include <cctype>
#include <random>
#include <stdexcept>

namespace zoo {
namespace {

using ordered = nlohmann::ordered_json;

constexpr const char* kCallOpen = "<tool_call>";
constexpr const char* kCallClose = "</tool_call>";
constexpr const char* kPythonTag = "<|python_tag|>";
constexpr const char* kMistralCalls = "[TOOL_CALLS]";
constexpr const char* kMistralArgs = "[ARGS]";

// How a format's calls show in an answer, for reading it as it streams: the marker a call
// begins with (anywhere, or only at the answer's start), and the character that begins a call
// at the answer's start when the decoder drops the marker (a special token).
struct Shape {
  std::string marker;
  bool marker_anywhere;
  char opening;
};

Shape shape_of(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
    case ToolCallFormat::kQwenXml: return {kCallOpen, true, 0};
    case ToolCallFormat::kLlama3Json: return {kPythonTag, false, '{'};
    case ToolCallFormat::kMistral: return {kMistralCalls, true, '['};
  }
  throw std::logic_error("unhandled tool call format");
}

bool blank(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

std::string trimmed(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && blank(s[b])) ++b;
  while (e > b && blank(s[e - 1])) --e;
  return s.substr(b, e - b);
}

bool starts_with(const std::string& s, size_t at, const std::string& prefix) {
  return s.compare(at, prefix.size(), prefix) == 0;
}

// JSON text, or discarded (nlohmann's value_t::discarded) when it is not JSON.
ordered parsed(const std::string& text) { return ordered::parse(text, nullptr, /*allow_exceptions=*/false); }

// A call from a JSON object with a name and its arguments under `arguments_key` (an object, or an
// object's text); nullopt when it is not one.
std::optional<ApiToolCall> call_of(const ordered& j, const char* arguments_key) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  ApiToolCall call;
  call.name = j["name"].get<std::string>();
  const auto it = j.find(arguments_key);
  if (it == j.end()) {
    call.arguments = "{}";
  } else if (it->is_object()) {
    call.arguments = it->dump();
  } else if (const auto text = it->is_string() ? parsed(it->get<std::string>()) : ordered(); text.is_object()) {
    call.arguments = text.dump();
  } else {
    return std::nullopt;
  }
  return call;
}

// The bodies of <tool_call>...</tool_call> blocks from the start of `text` (blanks between them;
// the last may be left open, as a model stopped at its end token leaves it).
std::optional<std::vector<std::string>> call_blocks(const std::string& text) {
  std::vector<std::string> bodies;
  size_t at = 0;
  const std::string open = kCallOpen, close = kCallClose;
  while (true) {
    while (at < text.size() && blank(text[at])) ++at;
    if (at == text.size()) break;
    if (!starts_with(text, at, open)) return std::nullopt;
    at += open.size();
    const size_t end = text.find(close, at);
    bodies.push_back(text.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + close.size();
  }
  if (bodies.empty()) return std::nullopt;
  return bodies;
}

// The type a tool's schema gives one of its parameters ("" when it gives none).
std::string parameter_type(const ordered& tools, const std::string& function, const std::string& parameter) {
  if (!tools.is_array()) return "";
  for (const auto& t : tools) {
    const auto& f = t["function"];
    if (f["name"] != function) continue;
    const auto p = f.find("parameters");
    if (p == f.end() || !p->is_object() || !p->contains("properties")) return "";
    const auto& properties = (*p)["properties"];
    if (!properties.is_object() || !properties.contains(parameter)) return "";
    const auto& type = properties[parameter].value("type", ordered());
    if (type.is_string()) return type.get<std::string>();
    // ["integer", "null"] and the like: the first that is not null.
    if (type.is_array()) {
      for (const auto& k : type) {
        if (k.is_string() && k != "null") return k.get<std::string>();
      }
    }
    return "";
  }
  return "";
}

// A kQwenXml value, as its parameter's type reads it: a string as written (so are values of
// unknown parameters, and values that do not parse as their type), else as JSON, with Python's
// True/False/None (what the template's `| string` prints) as JSON's.
ordered xml_value(const std::string& text, const std::string& type) {
  if (type.empty() || type == "string") return text;
  const std::string t = trimmed(text);
  if (t == "True") return true;
  if (t == "False") return false;
  if (t == "None") return nullptr;
  ordered v = parsed(t);
  const bool fits = (type == "integer" && v.is_number_integer()) || (type == "number" && v.is_number()) ||
                    (type == "boolean" && v.is_boolean()) || (type == "null" && v.is_null() && !v.is_discarded()) ||
                    (type == "object" && v.is_object()) || (type == "array" && v.is_array());
  return fits ? v : ordered(text);
}

std::optional<ApiToolCall> xml_call(const std::string& body, const ordered& tools) {
  const std::string open = "<function=";
  const std::string b = trimmed(body);
  if (!starts_with(b, 0, open)) return std::nullopt;
  const size_t name_end = b.find('>', open.size());
  if (name_end == std::string::npos) return std::nullopt;
  ApiToolCall call;
  call.name = b.substr(open.size(), name_end - open.size());
  if (call.name.empty()) return std::nullopt;
  ordered arguments = ordered::object();
  size_t at = name_end + 1;
  const std::string p_open = "<parameter=", p_close = "</parameter>";
  while (true) {
    while (at < b.size() && blank(b[at])) ++at;
    if (at == b.size() || starts_with(b, at, "</function>")) break;
    if (!starts_with(b, at, p_open)) return std::nullopt;
    const size_t key_end = b.find('>', at + p_open.size());
    if (key_end == std::string::npos) return std::nullopt;
    const std::string key = b.substr(at + p_open.size(), key_end - at - p_open.size());
    const size_t value_end = b.find(p_close, key_end + 1);
    if (key.empty() || value_end == std::string::npos) return std::nullopt;
    std::string value = b.substr(key_end + 1, value_end - key_end - 1);
    // The template writes "\nVALUE\n" between the tags.
    if (!value.empty() && value.front() == '\n') value.erase(0, 1);
    if (!value.empty() && value.back() == '\n') value.pop_back();
    arguments[key] = xml_value(value, parameter_type(tools, call.name, key));
    at = value_end + p_close.size();
  }
  call.arguments = arguments.dump();
  return call;
}

// Where the JSON value starting at `at` ends (one past its last byte), or npos: brackets and
// braces counted outside strings.
size_t json_value_end(const std::string& s, size_t at) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = at; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string::npos;
}

std::string call_id() {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 random(std::random_device{}());
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[random() % (sizeof kAlphabet - 1)];
  return id;
}

}  // namespace

std::optional<ToolCallFormat> tool_call_format_of(const std::string& chat_template) {
  // Each template shows its models the calls' format; these are the strings that tell them apart.
  if (chat_template.find("<function=") != std::string::npos) return ToolCallFormat::kQwenXml;
  if (chat_template.find(kMistralCalls) != std::string::npos) return ToolCallFormat::kMistral;
  if (chat_template.find(kCallOpen) != std::string::npos) return ToolCallFormat::kHermes;
  if (chat_template.find("<|start_header_id|>") != std::string::npos &&
      chat_template.find("\"parameters\": ") != std::string::npos) {
    return ToolCallFormat::kLlama3Json;
  }
  return std::nullopt;
}

std::vector<std::string> tool_call_parser_names() {
  std::vector<std::string> names = {"auto"};
  for (const auto& name : enum_names<ToolCallFormat>()) names.push_back(name);
  return names;
}

std::optional<ToolCallFormat> tool_call_format_for(const std::string& parser, const std::optional<std::string>& chat_template) {
  if (parser == "auto") return chat_template ? tool_call_format_of(*chat_template) : std::nullopt;
  if (const auto format = find_enum<ToolCallFormat>(parser)) return format;
  throw std::invalid_argument("--tool-call-parser: '" + parser + "' is not auto, " + enum_names_joined<ToolCallFormat>());
}

std::optional<std::vector<ApiToolCall>> parse_tool_calls(ToolCallFormat format, const std::string& text,
                                                         const ordered& tools) {
  std::vector<ApiToolCall> calls;
  switch (format) {
    case ToolCallFormat::kHermes:
    case ToolCallFormat::kQwenXml: {
      const auto bodies = call_blocks(text);
      if (!bodies) return std::nullopt;
      for (const auto& body : *bodies) {
        auto call = format == ToolCallFormat::kHermes ? call_of(parsed(trimmed(body)), "arguments") : xml_call(body, tools);
        if (!call) return std::nullopt;
        calls.push_back(std::move(*call));
      }
      return calls;
    }
    case ToolCallFormat::kLlama3Json: {
      std::string t = trimmed(text);
      if (starts_with(t, 0, kPythonTag)) t = trimmed(t.substr(std::string(kPythonTag).size()));
      size_t at = 0;
      while (at < t.size()) {
        if (t[at] != '{') return std::nullopt;
        const size_t end = json_value_end(t, at);
        if (end == std::string::npos) return std::nullopt;
        const ordered j = parsed(t.substr(at, end - at));
        auto call = call_of(j, j.contains("parameters") ? "parameters" : "arguments");
        if (!call) return std::nullopt;
        calls.push_back(std::move(*call));
        at = end;
        while (at < t.size() && blank(t[at])) ++at;
        if (at < t.size() && t[at] == ';') ++at;  // several calls: "{...}; {...}"
        while (at < t.size() && blank(t[at])) ++at;
      }
      if (calls.empty()) return std::nullopt;
      return calls;
    }
    case ToolCallFormat::kMistral: {
      // [TOOL_CALLS][{"name", "arguments"}, ...] (v3 tokenizers; the marker may have been
      // dropped as a special token), or [TOOL_CALLS]NAME[ARGS]{...} for each call (v11 and later).
      std::string t = trimmed(text);
      const std::string marker = kMistralCalls, args = kMistralArgs;
      if (starts_with(t, 0, marker)) t = trimmed(t.substr(marker.size()));
      if (!t.empty() && t[0] == '[') {
        const ordered list = parsed(t);
        if (!list.is_array() || list.empty()) return std::nullopt;
        for (const auto& c : list) {
          auto call = call_of(c, "arguments");
          if (!call) return std::nullopt;
          calls.push_back(std::move(*call));
        }
        return calls;
      }
      size_t at = 0;
      while (at < t.size()) {
        const size_t name_end = t.find(args, at);
        if (name_end == std::string::npos) return std::nullopt;
        const std::string name = trimmed(t.substr(at, name_end - at));
        const size_t value = name_end + args.size(), value_end = json_value_end(t, value);
        if (name.empty() || value >= t.size() || t[value] != '{' || value_end == std::string::npos) return std::nullopt;
        const ordered arguments = parsed(t.substr(value, value_end - value));
        if (!arguments.is_object()) return std::nullopt;
        calls.push_back({"", name, arguments.dump()});
        at = value_end;
        while (at < t.size() && blank(t[at])) ++at;
        if (starts_with(t, at, marker)) at += marker.size();
      }
      if (calls.empty()) return std::nullopt;
      return calls;
    }
  }
  throw std::logic_error("unhandled tool call format");
}

std::string forced_tool_schema(const ordered& tools, const ToolChoice& choice, bool parallel) {
  auto parameters_of = [](const ordered& function) {
    const auto p = function.find("parameters");
    return p == function.end() || p->is_null() ? ordered{{"type", "object"}} : *p;
  };
  switch (choice.kind) {
    case ToolChoiceKind::kNamed:
      for (const auto& t : tools) {
        if (t["function"]["name"] == choice.name) return parameters_of(t["function"]).dump();
      }
      throw std::invalid_argument("tool_choice names '" + choice.name + "', which is not among the tools");
    case ToolChoiceKind::kRequired: {
      ordered any_of = ordered::array();
      for (const auto& t : tools) {
        any_of.push_back({{"type", "object"},
                          {"properties",
                           {{"name", {{"type", "string"}, {"enum", ordered::array({t["function"]["name"]})}}},
                            {"parameters", parameters_of(t["function"])}}},
                          {"required", ordered::array({"name", "parameters"})},
                          {"additionalProperties", false}});
      }
      ordered schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", std::move(any_of)}}}};
      if (!parallel) schema["maxItems"] = 1;
      return schema.dump();
    }
    case ToolChoiceKind::kNone:
    case ToolChoiceKind::kAuto: break;
  }
  throw std::logic_error("forced_tool_schema: tool_choice is neither required nor a function");
}

ToolCallReader::ToolCallReader(const ToolChoice& choice, std::optional<ToolCallFormat> format, ordered tools)
    : choice_(choice), format_(format), tools_(std::move(tools)) {
  if (choice_.kind == ToolChoiceKind::kAuto && !format_) {
    throw std::logic_error("ToolCallReader: tool_choice auto needs the template's format");
  }
}

std::string ToolCallReader::add(const std::string& piece) {
  if (calls_ || choice_.kind != ToolChoiceKind::kAuto) {
    held_ += piece;
    return "";
  }
  if (content_) return piece;
  held_ += piece;
  const auto shape = shape_of(*format_);
  const std::string& marker = shape.marker;
  if (!texted_) {
    // The answer's start: blanks tell nothing yet, and blanks before a call are dropped
    // (SentencePiece's word marker makes a call's first token " <").
    size_t at = 0;
    while (at < held_.size() && blank(held_[at])) ++at;
    if (at == held_.size()) return "";
    const std::string rest = held_.substr(at);
    if ((shape.opening != 0 && rest[0] == shape.opening) || starts_with(rest, 0, marker)) {
      held_ = rest;
      calls_ = true;
      return "";
    }
    if (rest.size() < marker.size() && marker.compare(0, rest.size(), rest) == 0) return "";
    texted_ = true;
    if (!shape.marker_anywhere) content_ = true;
  }
  std::string out;
  if (content_) {
    out.swap(held_);
    return out;
  }
  // Text before a call is content; so is all but what may be the start of the marker.
  if (const size_t at = held_.find(marker); at != std::string::npos) {
    out = held_.substr(0, at);
    held_.erase(0, at);
    calls_ = true;
    return out;
  }
  const size_t keep = marker_start_at_end(held_, marker);
  out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

ToolCallReader::End ToolCallReader::finish() {
  End end;
  std::optional<std::vector<ApiToolCall>> calls;
  switch (choice_.kind) {
    case ToolChoiceKind::kAuto:
      if (calls_) calls = parse_tool_calls(*format_, held_, tools_);
      break;
    case ToolChoiceKind::kNamed: {
      const ordered j = parsed(held_);
      if (j.is_object()) calls = std::vector<ApiToolCall>{{"", choice_.name, j.dump()}};
      break;
    }
    case ToolChoiceKind::kRequired: {
      const ordered j = parsed(held_);
      if (!j.is_array() || j.empty()) break;
      calls.emplace();
      for (const auto& c : j) {
        auto call = call_of(c, "parameters");
        if (!call) {
          calls.reset();
          break;
        }
        calls->push_back(std::move(*call));
      }
      break;
    }
    case ToolChoiceKind::kNone: break;
  }
  if (calls) {
    for (auto& c : *calls) c.id = call_id();
    end.calls = std::move(*calls);
  } else {
    end.content = std::move(held_);
  }
  held_.clear();
  return end;
}

}  // namespace zoo
