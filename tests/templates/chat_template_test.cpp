#include "templates/chat_template.h"

#include <filesystem>

#include <cstdio>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base_test_util.h"
#include "core/files.h"
#include "reference_texts.h"
#include "templates/template_test_util.h"

namespace zoo {
namespace {

using json = nlohmann::ordered_json;
using testing::error_of;
using testing::render;
using testing::template_fixture;

json conversation(std::initializer_list<std::pair<const char*, const char*>> turns) {
  json messages = json::array();
  for (const auto& [role, content] : turns) messages.push_back({{"role", role}, {"content", content}});
  return messages;
}

// ---- worked by hand ----

TEST(ChatTemplate, ChatMlWorkedByHand) {
  const std::string chatml = template_fixture("chatml");
  const json messages = conversation({{"system", "Be brief."}, {"user", "Hi!"}});
  EXPECT_EQ(render(chatml, {{"messages", messages}, {"add_generation_prompt", true}}),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render(chatml, {{"messages", messages}, {"add_generation_prompt", false}}),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n");
}

// trim_blocks drops the newline after a block tag, lstrip_blocks the indentation before one
// alone on its line; "-" strips all whitespace on its side, "+" keeps it; {{ }} is never
// stripped but by "-"; one trailing newline of the template goes.
TEST(ChatTemplate, WhitespaceControlWorkedByHand) {
  EXPECT_EQ(render("{% for m in messages %}\n  {% if m.role == 'user' %}\n  U: {{ m.content }}\n  {% endif %}\n{% endfor %}\n",
                   {{"messages", conversation({{"user", "a"}, {"assistant", "b"}, {"user", "c"}})}}),
            "  U: a\n  U: c\n");
  EXPECT_EQ(render("a  {%- if true -%}  \n b \n {%- endif %}"), "ab");
  EXPECT_EQ(render("a\n  {%+ if true %}b{% endif +%}\nc"), "a\n  b\nc");
  EXPECT_EQ(render("x {{- ' y ' -}} \n z"), "x y z");
  EXPECT_EQ(render("{# comment #}\n  {# another #}\nkept  {# inline #} too\n\n"), "kept   too\n");
  EXPECT_EQ(render("{{ 'a' }}\n{{ 'b' }}\r\n"), "a\nb");
}

// Statements, scopes and printing (operators, containers, methods and filters: their own tests
// in this folder).
TEST(ChatTemplate, StatementsWorkedByHand) {
  const json v = {{"d", {{"role", "user"}, {"n", 3}}}, {"l", {1, 2, 3, 4}}, {"s", "  Hello World  "}};
  const std::pair<const char*, const char*> cases[] = {
      {"{{ 'ab' ~ 1 ~ none }} {{ [1, 'x', none, true, 1.0] }} {{ {'k': 'it\\'s'} }}", "ab1None [1, 'x', None, True, 1.0] {'k': \"it's\"}"},
      {"{% set ns = namespace(n=0) %}{% for x in l if x is even %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}", "6"},
      {"{% for x in l %}{% if x == 3 %}{% break %}{% endif %}{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}{% endfor %}", "1/4,2/4,"},
      {"{% macro tag(name, body='-') %}<{{ name }}>{{ body }}</{{ name }}>{% endmacro %}{{ tag('a') }}{{ tag('b', body='x') }}", "<a>-</a><b>x</b>"},
      {"{% set x %}  inner {{ 1 }} {% endset %}[{{ x }}]{% filter upper %}shout{% endfilter %}", "[  inner 1 ]SHOUT"},
      {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d | items | list | length }}", "role=user;n=3;2"},
  };
  for (const auto& [source, expected] : cases) EXPECT_EQ(render(source, v), expected) << source;
}

// Hostile templates (issue 31): each of these crashed (stack overflow), hung or grew without
// bound before; now each is an error naming the template, its line and the limit.
TEST(ChatTemplate, HostileTemplatesEndInNamedErrors) {
  auto chain = [](const std::string& first, const std::string& link, int n) {
    std::string s = "{{ " + first;
    for (int i = 0; i < n; ++i) s += link;
    return s + " }}";
  };
  const std::string deep = "t.jinja:1: nested more than 200 levels deep";
  // Long chains parse in a loop but make trees as deep as the chain: 20,000 links each.
  for (const auto& [first, link] : std::vector<std::pair<std::string, std::string>>{
           {"'a'", "|upper"}, {"'a'", " ~ 'a'"}, {"1", " + 1"}, {"x", " and x"}, {"x", " or x"},
           {"2", " * 2"}, {"2", " ** 2"}, {"x", ".a"}, {"x", "[0]"}, {"x", "()"}, {"1", " if x else 1"}}) {
    EXPECT_EQ(error_of([&] { ChatTemplate(chain(first, link, 20000), "t.jinja"); }).substr(0, deep.size()), deep) << link;
  }
  // Chains within the bound still render.
  EXPECT_EQ(render(chain("'a'", "|upper", 150)), "A");
  EXPECT_EQ(render(chain("1", " + 1", 150)), "151");

  auto error = [](const std::string& source, const json& variables = json::object()) {
    return error_of([&] { ChatTemplate(source, "t.jinja").render(variables); });
  };
  // A list wrapped in itself 100,000 times, then printed: refused at 256 levels, whether stored
  // in a namespace or built in an expression.
  EXPECT_EQ(error("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                  "{{ ns.x|tojson }}"),
            "t.jinja:1: cannot set 'ns.x': the value is nested 256 levels deep");
  EXPECT_EQ(error("{% set ns = namespace(x=[]) %}{% for i in range(254) %}{% set ns.x = [ns.x] %}{% endfor %}"
                  "{{ [ns.x]|length }}{{ [[ns.x]] }}"),
            "t.jinja:1: a value nested more than 256 levels deep (lists and dicts inside each other)");
  // A value doubled 64 times: 2^64 leaves in 64 lists. Printing stops at 64 MiB; comparing it
  // with itself is immediate.
  const std::string doubled = "{% set ns = namespace(x=[1]) %}{% for i in range(64) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}";
  EXPECT_EQ(error(doubled + "{{ ns.x|string }}"), "t.jinja:1: printing a value makes a string larger than 64 MiB");
  EXPECT_EQ(error(doubled + "\n{{ ns.x }}"), "t.jinja:2: printing a value makes a string larger than 64 MiB");
  EXPECT_EQ(error(doubled + "{{ ns.x|tojson }}"), "t.jinja:1: tojson makes a string larger than 64 MiB");
  EXPECT_EQ(render(doubled + "{{ ns.x == ns.x }}"), "True");
  // Strings and lists doubled through a namespace, and a large replacement.
  EXPECT_EQ(error("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
            "t.jinja:1: '~' makes a string larger than 64 MiB");
  EXPECT_EQ(error("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"),
            "t.jinja:1: '+' makes a string larger than 64 MiB");
  EXPECT_EQ(error("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}"),
            "t.jinja:1: '+' makes a list of more than 4194304 items");
  EXPECT_EQ(error("{{ ('a' * 1000000).replace('a', 'b' * 1000) }}"), "t.jinja:1: replace makes a string larger than 64 MiB");
  EXPECT_EQ(error("{{ ('a' * 1000000)|replace('a', 'b' * 1000) }}"), "t.jinja:1: replace makes a string larger than 64 MiB");
  // Each value within its bound, but many of them: one budget for everything a rendering
  // builds (a list of 60 MB strings grown by + reached 8 GB; a large replacement made again and
  // again is the same work).
  EXPECT_EQ(error("{% set big = 'a' * 60000000 %}{% set ns = namespace(l=[]) %}{% for i in range(1000) %}"
                  "{% set ns.l = ns.l + [big] %}{% endfor %}{{ ns.l|length }}"),
            "t.jinja:1: the template builds more than 1 GiB of strings and lists in one rendering");
  EXPECT_EQ(error("{% for i in range(100) %}{% set x = ('a' * 1000).replace('a', 'b' * 60000) %}{% endfor %}"),
            "t.jinja:1: the template builds more than 1 GiB of strings and lists in one rendering");
  // The budget is the rendering's, not the template's: each rendering starts afresh.
  const ChatTemplate busy("{% set x = ('a' * 1000).replace('a', 'b' * 60000) %}{{ x|length }}", "t.jinja");
  for (int i = 0; i < 20; ++i) EXPECT_EQ(busy.render(json::object()), "60000000");
  // strftime_now's result in full, past its old 255-byte buffer (it printed an empty string).
  EXPECT_EQ(render("{{ strftime_now('x' * 300) }}"), std::string(300, 'x'));
  EXPECT_EQ(render("{{ strftime_now('%Y' * 100)|length }}"), "400");
  // Variables nested 100,000 deep (parsed by nlohmann-json without recursion).
  // (Moved, never copied: nlohmann-json copies recursively, which ASan's frames overflow.)
  json nested_variables = json::object();
  nested_variables["messages"] = json::parse(std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_EQ(error("{{ messages }}", nested_variables),
            "t.jinja: variable 'messages': JSON nested more than 256 levels deep");
  // Macros calling each other 48 deep, each through a 150-deep expression: rendering recurses
  // 7,200 expressions deep, which ends in the named stack error (or renders, with small frames).
  std::string tilde;
  for (int i = 0; i < 150; ++i) tilde += " ~ ''";
  const std::string macros =
      "{% macro m(n) %}{% if n > 0 %}{{ m(n - 1)" + tilde + " }}{% else %}x{% endif %}{% endmacro %}{{ m(48) }}";
  std::string rendered, failure;
  try {
    rendered = render(macros);
  } catch (const ChatTemplateError& e) {
    failure = e.what();
  }
  EXPECT_TRUE(rendered == "x" || failure.find("too deeply (over 1 MiB of stack)") != std::string::npos) << failure;
}

// The stack the bounds leave room for, measured: the deepest templates the parser accepts and
// the recursions the renderer stops, each run on a thread whose stack is painted, use at most
// a quarter of the usual 8 MiB (scripts/test.sh --sanitize measures ASan's larger frames too).
TEST(ChatTemplate, TheDeepestTemplatesUseAQuarterOfTheStack) {
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  const std::vector<std::string> deepest = {
      "{{ 'a'" + repeat("|upper", 199) + " }}",
      "{{ 1" + repeat(" + 1", 199) + " }}",
      "{{ x" + repeat(".a", 199) + " }}",
      "{{ 1" + repeat(" if x else 1", 199) + " }}",
      "{{ " + repeat("(", 199) + "1" + repeat(")", 199) + " }}",
      "{{ " + repeat("[", 199) + repeat("]", 199) + " }}",
      repeat("{% if true %}", 199) + "x" + repeat("{% endif %}", 199),
      repeat("{% for i in [1] %}", 199) + "x" + repeat("{% endfor %}", 199),
      // Unbounded recursion, stopped by the renderer's own measure of its stack.
      "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
      "{% macro f(n) %}{{ f(n + 1)" + repeat(" ~ ''", 150) + " }}{% endmacro %}{{ f(0) }}",
  };
  size_t most = 0;
  for (const auto& source : deepest) {
    std::string error;
    const size_t used = testing::stack_bytes_used([&] { ChatTemplate(source, "t.jinja").render(json::object()); },
                                                  size_t{8} << 20, &error);
    EXPECT_LT(used, size_t{2} << 20) << source.substr(0, 60);
    EXPECT_TRUE(error == "no error" || error.rfind("t.jinja:", 0) == 0) << error;
    most = std::max(most, used);
  }
  std::printf("deepest template: %zu KiB of stack\n", most >> 10);
}

// Errors of statements and scopes (operators', containers', methods' and filters': their own
// tests in this folder).
TEST(ChatTemplate, RenderErrorsNameFileAndLine) {
  const std::string alternation = template_fixture("roles_must_alternate");
  const json bad = {{"messages", conversation({{"user", "a"}, {"user", "b"}})}};
  EXPECT_EQ(error_of([&] { ChatTemplate(alternation, "llama/tokenizer_config.json").render(bad); }),
            "llama/tokenizer_config.json:3: the template raised: Conversation roles must alternate "
            "user/assistant/user/assistant/...");
  const std::pair<const char*, const char*> cases[] = {
      {"{% set x = 1 %}{% set x.y = 2 %}", "t.jinja:1: cannot set 'x.y': 'x' is a int, not a namespace()"},
      // A namespace inside itself, directly or through a list, a dict or another namespace (a
      // leak chat_template_fuzz found): a cycle, refused.
      {"{% set ns = namespace(n=0) %}{% set ns.n = ns %}", "t.jinja:1: cannot set 'ns.n': the value holds 'ns' itself"},
      {"{% set ns = namespace() %}{% set other = namespace(a=[1, {'b': ns}]) %}\n{% set ns.x = [other] %}",
       "t.jinja:2: cannot set 'ns.x': the value holds 'ns' itself"},
      {"{{ undefined_function() }}", "t.jinja:1: 'undefined_function' is undefined (not a variable, macro or function chat "
                                     "templates here know)"},
      {"{{ messages | tojson }}{{ nothing | tojson }}", "t.jinja:1: 'nothing' is undefined"},
  };
  const json v = {{"messages", conversation({{"user", "hi"}})}};
  for (const auto& [source, expected] : cases) EXPECT_EQ(error_of([&] { render(source, v); }), expected) << source;
  EXPECT_EQ(error_of([&] { render("{{ x }}", json::array()); }), "t.jinja: the variables must be a JSON object");
  EXPECT_EQ(error_of([&] { ChatTemplate("ok \xC3", "t.jinja"); }), "t.jinja: invalid UTF-8 at byte offset 3");
  EXPECT_EQ(error_of([&] { ChatTemplate("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "t.jinja").render(json::object()); }),
            "t.jinja:1: the template runs more than 10000000 loop iterations and macro calls");
}

// ---- against transformers' own rendering (tests/reference/chat_template_reference.py) ----

struct Case {
  std::string label;  // which template and conversation
  std::string source;
  json variables;
};

// Renders every case with zoo and with the reference (`command IN OUT`) and expects the same
// bytes; where the reference fails, zoo must fail too (with the template's own message when the
// reference says it raised one).
void expect_same_as(const std::string& command, const std::string& reference_name, const std::vector<Case>& cases) {
  json input = json::array();
  for (const auto& c : cases) input.push_back({{"template", c.source}, {"variables", c.variables}});
  const nlohmann::json reference = testing::run_reference_json(command, input);
  ASSERT_EQ(reference.size(), cases.size());
  int rendered = 0, raised = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const nlohmann::json& r = reference[i];
    std::string output, error;
    try {
      output = ChatTemplate(c.source, c.label).render(c.variables);
    } catch (const ChatTemplateError& e) {
      error = e.what();
    }
    if (r.contains("output")) {
      EXPECT_EQ(error, "") << c.label;
      EXPECT_EQ(output, r["output"].get<std::string>()) << c.label;
      ++rendered;
    } else {
      EXPECT_NE(error, "") << c.label << ": " << reference_name << " failed (" << r["error"] << ") but zoo rendered:\n" << output;
      if (r.contains("raised")) {
        EXPECT_NE(error.find("the template raised: " + r["raised"].get<std::string>()), std::string::npos)
            << c.label << ": " << error;
        ++raised;
      }
    }
  }
  std::cout << cases.size() << " renderings: " << rendered << " the same as " << reference_name << "'s, " << raised
            << " raising the template's own error as " << reference_name << " does\n";
}

void expect_same_as_transformers(const std::vector<Case>& cases) {
  expect_same_as(testing::reference_python() + " '" + ZOO_SOURCE_DIR + "/tests/reference/chat_template_reference.py'",
                 "transformers", cases);
}

// Conversations every template is rendered with: with and without a system prompt, one and
// several turns, Unicode, text that looks like Jinja, whitespace at the ends, a broken
// alternation; each with and without the generation prompt.
std::vector<std::pair<std::string, json>> conversations() {
  const std::vector<std::pair<std::string, json>> base = {
      {"user", conversation({{"user", "Hello!"}})},
      {"system+user", conversation({{"system", "You are terse."}, {"user", "What is 2+2?"}})},
      {"multi-turn", conversation({{"system", "Answer in French."},
                                   {"user", "Hi"},
                                   {"assistant", "Bonjour !"},
                                   {"user", "How are you?"},
                                   {"assistant", "Très bien, merci."}})},
      {"no-system", conversation({{"user", "Name a colour."}, {"assistant", "Blue."}, {"user", "Another?"}})},
      {"unicode", conversation({{"user", "Grüße, 世界! 🤖 — ﬁne\u00a0spaces\tand\ttabs, Straße ΟΔΟΣ ΣΑΣ."},
                                {"assistant", "Ünïcödé ✓ «quotes» \"double\" 'single' \\backslash"}})},
      {"jinja-looking", conversation({{"user", "Write {{ messages }} and {% if x %} or {# c #} literally"},
                                      {"assistant", "{{ 'ok' }} {%- raw %}"}})},
      {"padded", conversation({{"system", "  spaced system  \n"}, {"user", "\n  padded question \n\n"}})},
      {"broken-alternation", conversation({{"user", "one"}, {"user", "two"}})},
  };
  std::vector<std::pair<std::string, json>> out;
  for (const auto& [name, messages] : base) {
    for (bool generation : {false, true}) {
      out.emplace_back(name + (generation ? "+generation" : ""),
                       json{{"messages", messages}, {"add_generation_prompt", generation}, {"bos_token", "<s>"},
                            {"eos_token", "</s>"}, {"unk_token", "<unk>"}, {"tools", nullptr}, {"documents", nullptr}});
    }
  }
  return out;
}

// Templates in the style of real models' (written here from the formats they document), in
// tests/templates/fixtures/: "tools" carries state out of a loop in a namespace, prints tools and
// tool calls with tojson, and tidies up with macros and whitespace control; "kitchen-sink" uses
// everything else a template may use, in one place.
const std::vector<std::string> kModelStyleTemplates = {"chatml", "qwen2",  "llama2", "llama3", "mistral",
                                                       "zephyr", "gemma", "smollm", "tools",  "kitchen-sink"};

TEST(ChatTemplate, ModelStyleTemplatesRenderAsTransformersDoes) {
  std::vector<Case> cases;
  for (const auto& name : kModelStyleTemplates) {
    const std::string source = template_fixture(name);
    for (const auto& [label, variables] : conversations()) cases.push_back({name + " / " + label, source, variables});
  }
  // The tool template with tools and tool calls.
  json tools = json::array({{{"type", "function"},
                             {"function",
                              {{"name", "get_weather"},
                               {"description", "Current weather in a city, «quoted» & <escaped>?"},
                               {"parameters",
                                {{"type", "object"},
                                 {"properties", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}}},
                                 {"required", {"city"}}}}}}}});
  json messages = conversation({{"system", "Use tools."}, {"user", "Weather in Zürich?"}});
  messages.push_back({{"role", "assistant"},
                      {"content", ""},
                      {"tool_calls", {{{"function", {{"name", "get_weather"}, {"arguments", {{"city", "Zürich"}, {"days", 2}}}}}}}}});
  messages.push_back({{"role", "tool"}, {"content", "12°C, cloudy"}});
  messages.push_back({{"role", "assistant"}, {"content", "It is 12°C and cloudy."}});
  for (bool generation : {false, true}) {
    for (const json& t : {tools, json(nullptr), json::array()}) {
      cases.push_back({"tools / calls", template_fixture("tools"),
                       {{"messages", messages}, {"tools", t}, {"add_generation_prompt", generation}, {"bos_token", "<s>"}, {"eos_token", "</s>"}}});
    }
  }
  expect_same_as_transformers(cases);
}

// A list or dict held in several places is printed once and its text copied after that
// (templates/jinja_value.cpp); the copies must read as Python prints each place: the same at any depth
// for str, indented by where it stands for tojson(indent=...), and a namespace changed in between.
TEST(ChatTemplate, SharedContainersPrintAsTransformersDoes) {
  const std::string shared = "{% set a = [1, 'x', {'k': none}] %}{% set d = {'a': a, 'b': [a, a]} %}{% set b = [a, a, d, [d]] %}";
  const std::string doubled = "{% set ns = namespace(x=['é']) %}{% for i in range(9) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}";
  const std::vector<std::string> sources = {
      shared + "{{ b }}|{{ b|string }}|{{ b|tojson }}",
      shared + "{{ b|tojson(indent=1) }}|{{ b|tojson(indent=2, sort_keys=true) }}|{{ [d, b]|tojson(indent='\t') }}",
      shared + "{{ d|tojson(separators=(',', ':')) }}{{ [b, b]|tojson(sort_keys=true) }}",
      doubled + "{{ ns.x|length }} {{ ns.x|string|length }} {{ ns.x }} {{ ns.x|tojson(indent=1) }}",
      "{% set ns = namespace(l=[1]) %}{% set pair = [ns, ns] %}{{ pair }}{% set ns.l = [2, ns.l] %}{{ pair }}{{ [pair, ns] }}",
  };
  std::vector<Case> cases;
  for (size_t i = 0; i < sources.size(); ++i) cases.push_back({"shared " + std::to_string(i), sources[i], json::object()});
  expect_same_as_transformers(cases);
}

// Real models' chat templates, as trl ships them (trl/chat_templates/*.jinja, fetched from PyPI
// by tests/reference/fetch_references.py).
TEST(ChatTemplate, RealModelsTemplatesRenderAsTransformersDoes) {
  std::vector<Case> cases;
  size_t templates = 0;
  for (const auto& entry : std::filesystem::directory_iterator(testing::reference_file("chat-templates"))) {
    ++templates;
    const std::string source = read_file(entry.path().string());
    for (const auto& [label, variables] : conversations()) {
      cases.push_back({entry.path().filename().string() + " / " + label, source, variables});
    }
  }
  ASSERT_GE(templates, 60u);
  expect_same_as_transformers(cases);
}

// A function tool in the OpenAI form transformers passes templates.
json function_tool(const char* name, const char* description, const json& properties) {
  const json parameters = {
      {"type", "object"}, {"properties", properties}, {"required", json::array({properties.begin().key()})}};
  return {{"type", "function"},
          {"function", {{"name", name}, {"description", description}, {"parameters", parameters}}}};
}

// Qwen3's template (trl's copy of Qwen3's, the chat template of the qwen3-json reference
// directory) past what every template gets: enable_thinking, reasoning kept for the turns after the
// last user query (from reasoning_content or from <think> in the content), tools, tool calls with
// arguments as objects and as strings, runs of tool responses, a user turn that is a tool response,
// a system turn not first, and content that is not a string.
std::vector<Case> qwen3_cases() {
  const std::string source = read_file(testing::reference_file("chat-templates/qwen3.jinja"));
  const json tools = json::array({function_tool("get_weather", "Current weather in a city, «quoted» & <escaped>?",
                                                {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}}),
                                  function_tool("search", "Search the web.", {{"query", {{"type", "string"}}}})});
  json thinking = conversation({{"system", "Think first."}, {"user", "2+2?"}});
  thinking.push_back({{"role", "assistant"}, {"content", "4."}, {"reasoning_content", "\nTwo and two make four.\n"}});
  thinking.push_back({{"role", "user"}, {"content", "And 3+3?"}});
  thinking.push_back({{"role", "assistant"}, {"content", "<think>\nThree and three.\n</think>\n\n6."}});
  json calls = conversation({{"system", "Use tools."}, {"user", "Weather in Zürich, and news?"}});
  const json weather_call = {{"type", "function"},
                             {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Zürich"}, {"days", 2}}}}}};
  // Without the "function" wrapper, and the arguments as a JSON string.
  const json search_call = {{"name", "search"}, {"arguments", "{\"query\": \"news\"}"}};
  calls.push_back({{"role", "assistant"}, {"content", "Let me look."}, {"reasoning_content", "Two tools."},
                   {"tool_calls", json::array({weather_call, search_call})}});
  calls.push_back({{"role", "tool"}, {"content", "12°C, cloudy"}});
  calls.push_back({{"role", "tool"}, {"content", "{\"headline\": \"none\"}"}});
  const json empty_call = {{"function", {{"name", "search"}, {"arguments", json::object()}}}};
  calls.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({empty_call})}});
  calls.push_back({{"role", "tool"}, {"content", "nothing"}});
  calls.push_back({{"role", "assistant"}, {"content", "12°C and cloudy; no news."}});
  json odd = conversation({{"user", "<tool_response>\nold\n</tool_response>"}, {"system", "A late system turn."}});
  odd.push_back({{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "a list"}}})}});
  odd.push_back({{"role", "assistant"}, {"content", "\n\nleading newlines</think>after"}});
  const std::vector<std::pair<std::string, json>> conversations = {
      {"thinking", thinking}, {"calls", calls}, {"odd", odd}, {"user", conversation({{"user", "Hi"}})}};
  std::vector<Case> cases;
  for (const auto& [name, messages] : conversations) {
    for (const json& t : {json(nullptr), tools}) {
      for (const json& thinking_flag : {json(), json(false), json(true)}) {
        json variables = {{"messages", messages}, {"tools", t}, {"add_generation_prompt", true}};
        if (!thinking_flag.is_null()) variables["enable_thinking"] = thinking_flag;
        cases.push_back({"qwen3 / " + name + (t.is_null() ? "" : "+tools") + " enable_thinking=" + thinking_flag.dump(),
                         source, variables});
      }
      cases.push_back({"qwen3 / " + name + (t.is_null() ? "" : "+tools") + " no generation prompt", source,
                       {{"messages", messages}, {"tools", t}, {"add_generation_prompt", false}}});
    }
  }
  return cases;
}

// Gemma 3's template (trl's copy) past what every template gets: content as lists of text and
// image parts (the system turn's too), and content that is neither a string nor a list, which it
// refuses.
std::vector<Case> gemma3_cases() {
  const std::string source = read_file(testing::reference_file("chat-templates/gemma3.jinja"));
  const json text_part = {{"type", "text"}, {"text", "  You see images.  "}};
  json parts = json::array({{{"role", "system"}, {"content", json::array({text_part})}}});
  const json image = {{"type", "image"}}, question = {{"type", "text"}, {"text", " What is this? "}};
  parts.push_back({{"role", "user"}, {"content", json::array({image, question, image})}});
  parts.push_back({{"role", "assistant"}, {"content", json::array({{{"type", "text"}, {"text", "Two cats.\n"}}})}});
  parts.push_back({{"role", "user"}, {"content", "\tAnd now?\n"}});
  json number = conversation({{"user", "a"}});
  number.push_back({{"role", "assistant"}, {"content", 42}});
  json null_content = json::array({{{"role", "user"}, {"content", nullptr}}});
  std::vector<Case> cases;
  for (const auto& [name, messages] : std::vector<std::pair<std::string, json>>{
           {"parts", parts}, {"number content", number}, {"null content", null_content}}) {
    for (bool generation : {false, true}) {
      cases.push_back({"gemma3 / " + name + (generation ? "+generation" : ""), source,
                       {{"messages", messages}, {"add_generation_prompt", generation}, {"bos_token", "<bos>"}}});
    }
  }
  return cases;
}

// Qwen3's and Gemma 3's templates with what their models' conversations hold beyond plain turns.
TEST(ChatTemplate, Qwen3AndGemma3FeaturesRenderAsTransformersDoes) {
  auto cases = qwen3_cases();
  for (auto& c : gemma3_cases()) cases.push_back(std::move(c));
  expect_same_as_transformers(cases);
}

}  // namespace
}  // namespace zoo
