#include "templates/chat_template.h"

#include <filesystem>

#include <cstdio>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base_test_util.h"
#include "core/files.h"
#include "reference_texts.h"

namespace zoo {
namespace {

using json = nlohmann::ordered_json;
using testing::error_of;

std::string render(const std::string& source, const json& variables = json::object()) {
  return ChatTemplate(source, "t.jinja").render(variables);
}

json conversation(std::initializer_list<std::pair<const char*, const char*>> turns) {
  json messages = json::array();
  for (const auto& [role, content] : turns) messages.push_back({{"role", role}, {"content", content}});
  return messages;
}

// ---- worked by hand ----

TEST(ChatTemplate, ChatMlWorkedByHand) {
  const std::string chatml =
      "{% for message in messages %}"
      "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
      "{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
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

TEST(ChatTemplate, ExpressionsWorkedByHand) {
  const json v = {{"d", {{"role", "user"}, {"n", 3}}}, {"l", {1, 2, 3, 4}}, {"s", "  Hello World  "}};
  const std::pair<const char*, const char*> cases[] = {
      {"{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 1 / 4 }} {{ 2 ** 10 }} {{ 3 * 'ab' }} {{ 1 + 2.5 }}", "3 -4 2 0.25 1024 ababab 3.5"},
      {"{{ l[1:] }} {{ l[::-1] }} {{ l[-1] }} {{ 'héllo'[1:3] }} {{ l | length }} {{ 'héllo' | length }}", "[2, 3, 4] [4, 3, 2, 1] 4 él 4 5"},
      {"{{ d.role }} {{ d['n'] + 1 }} {{ d.missing is defined }} {{ d.get('missing', 'x') }} {{ 'role' in d }}", "user 4 False x True"},
      {"{{ s.strip() }}|{{ s | trim }}|{{ s.lstrip() }}|{{ s.split() }}|{{ 'a,b'.split(',') }}", "Hello World|Hello World|Hello World  |['Hello', 'World']|['a', 'b']"},
      {"{{ 'ab' ~ 1 ~ none }} {{ [1, 'x', none, true, 1.0] }} {{ {'k': 'it\\'s'} }}", "ab1None [1, 'x', None, True, 1.0] {'k': \"it's\"}"},
      {"{{ 'yes' if l else 'no' }} {{ 1 < 2 < 3 }} {{ not l }} {{ 0 or 'z' }} {{ 'x' and 'y' }} {{ 5 is odd }}", "yes True False z y True"},
      {"{{ d | tojson }} {{ 'é\"\\n' | tojson }} {{ [1, {'a': none}] | tojson(indent=2) }}",
       "{\"role\": \"user\", \"n\": 3} \"é\\\"\\n\" [\n  1,\n  {\n    \"a\": null\n  }\n]"},
      {"{{ 'hello wORLD' | title }} {{ 'hello' | capitalize }} {{ 'ab' | upper }} {{ l | join('-') }} {{ l | first }}{{ l | last }}", "Hello World Hello AB 1-2-3-4 14"},
      {"{% set ns = namespace(n=0) %}{% for x in l if x is even %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}", "6"},
      {"{% for x in l %}{% if x == 3 %}{% break %}{% endif %}{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}{% endfor %}", "1/4,2/4,"},
      {"{% macro tag(name, body='-') %}<{{ name }}>{{ body }}</{{ name }}>{% endmacro %}{{ tag('a') }}{{ tag('b', body='x') }}", "<a>-</a><b>x</b>"},
      {"{% set x %}  inner {{ 1 }} {% endset %}[{{ x }}]{% filter upper %}shout{% endfilter %}", "[  inner 1 ]SHOUT"},
      {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d | items | list | length }}", "role=user;n=3;2"},
      {"{% for k, v in {'b': 1, 'A': 3, 'c': 2} | dictsort %}{{ k }}{{ v }}{% endfor %} "
       "{% for k, v in {'b': 1, 'A': 3, 'c': 2} | dictsort(by='value', reverse=true) %}{{ k }}{% endfor %} "
       "{% for k, v in {'b': 1, 'A': 3} | dictsort(true) %}{{ k }}{% endfor %}",
       "A3b1c2 Acb Ab"},
  };
  for (const auto& [source, expected] : cases) EXPECT_EQ(render(source, v), expected) << source;
}

// ---- bad templates: errors name the template, the line and the construct ----

TEST(ChatTemplate, BadTemplatesNameFileLineAndConstruct) {
  const std::pair<const char*, const char*> cases[] = {
      {"ok\n{{ messages", "t.jinja:2: unterminated '{{' (no '}}' before the end of the template)"},
      {"{% if x %}\nyes", "t.jinja:1: '{% if %}' is never closed (no {% endif %} before the end of the template)"},
      {"a\n\n{# never closed", "t.jinja:3: unterminated comment '{#' (no '#}')"},
      {"{{ 'open }}", "t.jinja:1: unterminated string (no closing ')"},
      {"\n{{ x | wordwrap }}", "t.jinja:2: unknown filter 'wordwrap'"},
      {"{{ x is prime }}", "t.jinja:1: unknown test 'prime'"},
      {"{% include 'other.jinja' %}", "t.jinja:1: unsupported statement 'include' (chat templates here support for, if, set, "
                                       "macro, filter, generation, break and continue)"},
      {"{% frobnicate %}", "t.jinja:1: unknown statement 'frobnicate' (chat templates here support for, if, set, macro, "
                            "filter, generation, break and continue)"},
      {"{% for x in y %}{% endif %}", "t.jinja:1: unexpected {% endif %} (the innermost open tag is the {% for %} at line 1)"},
      {"{% break %}", "t.jinja:1: 'break' outside a for loop"},
      {"{{ 1 + }}", "t.jinja:1: expected an expression, got '}}'"},
      {"{{ a $ b }}", "t.jinja:1: unexpected character '$' in a tag"},
      {"{% for x in y recursive %}{% endfor %}", "t.jinja:1: recursive for loops are not supported"},
  };
  for (const auto& [source, expected] : cases) {
    EXPECT_EQ(error_of([&] { ChatTemplate(source, "t.jinja"); }), expected) << source;
  }
  EXPECT_EQ(error_of([&] { ChatTemplate("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}", "t.jinja"); }),
            "t.jinja:1: nested more than 200 levels deep");
  EXPECT_EQ(error_of([&] { ChatTemplate("ok \xC3", "t.jinja"); }), "t.jinja: invalid UTF-8 at byte offset 3");
  EXPECT_EQ(error_of([&] { ChatTemplate("{{ 'ab' * 1000000000000 }}", "t.jinja").render(json::object()); }),
            "t.jinja:1: repeating a str 1000000000000 times makes it too large");
  EXPECT_EQ(error_of([&] { ChatTemplate("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "t.jinja").render(json::object()); }),
            "t.jinja:1: the template runs more than 10000000 loop iterations and macro calls");
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

TEST(ChatTemplate, RenderErrorsNameFileAndLine) {
  const std::string alternation =
      "{% for m in messages %}\n"
      "{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\n"
      "{% endif %}\n"
      "{% endfor %}";
  const json bad = {{"messages", conversation({{"user", "a"}, {"user", "b"}})}};
  EXPECT_EQ(error_of([&] { ChatTemplate(alternation, "llama/tokenizer_config.json").render(bad); }),
            "llama/tokenizer_config.json:3: the template raised: Conversation roles must alternate "
            "user/assistant/user/assistant/...");
  const std::pair<const char*, const char*> cases[] = {
      {"{{ missing.attribute }}", "t.jinja:1: 'missing' is undefined"},
      {"\n{{ messages[0].content.x.y }}", "t.jinja:2: 'str object' has no attribute 'x'"},
      {"{{ 'a' + 1 }}", "t.jinja:1: unsupported operand type(s) for +: 'str' and 'int'"},
      {"{{ 'a'.zfill(3) }}", "t.jinja:1: 'str' object has no method 'zfill' that chat templates here support"},
      {"{{ 1 // 0 }}", "t.jinja:1: integer division or modulo by zero"},
      {"{% set x = 1 %}{% set x.y = 2 %}", "t.jinja:1: cannot set 'x.y': 'x' is a int, not a namespace()"},
      // Bounds on what a rendering builds (an out-of-memory chat_template_fuzz found: joins
      // of joins grow geometrically).
      {"{{ ('ab' * 500) | join('x' * 100000) }}", "t.jinja:1: joining makes a string larger than 64 MiB"},
      {"{{ ','.join('ab' * 500) | join('x' * 100000) }}", "t.jinja:1: joining makes a string larger than 64 MiB"},
      {"{% for c in 'x' * 2000000 %}{% endfor %}", "t.jinja:1: iterating a string of more than 1 MiB (2000000 bytes)"},
      {"{{ messages | tojson(indent=5555555555551) }}", "t.jinja:1: tojson's indent (5555555555551) must be at most 1024"},
      {"{{ 'a' | indent(100000) }}", "t.jinja:1: indent's width (100000) must be at most 1024"},
      {"{{ ('a\\n' * 100000) | indent('x' * 1000) }}", "t.jinja:1: indenting makes a string larger than 64 MiB"},
      // A namespace inside itself, directly or through a list, a dict or another namespace (a
      // leak chat_template_fuzz found): a cycle, refused.
      {"{% set ns = namespace(n=0) %}{% set ns.n = ns %}", "t.jinja:1: cannot set 'ns.n': the value holds 'ns' itself"},
      {"{% set ns = namespace() %}{% set other = namespace(a=[1, {'b': ns}]) %}\n{% set ns.x = [other] %}",
       "t.jinja:2: cannot set 'ns.x': the value holds 'ns' itself"},
      {"{{ undefined_function() }}", "t.jinja:1: 'undefined_function' is undefined (not a variable, macro or function chat "
                                     "templates here know)"},
      {"{{ '%s' % 1 }}", "t.jinja:1: printf-style formatting ('...' % values) is not supported"},
      {"{{ messages | tojson }}{{ nothing | tojson }}", "t.jinja:1: 'nothing' is undefined"},
  };
  const json v = {{"messages", conversation({{"user", "hi"}})}};
  for (const auto& [source, expected] : cases) EXPECT_EQ(error_of([&] { render(source, v); }), expected) << source;
  EXPECT_EQ(error_of([&] { render("{{ x }}", json::array()); }), "t.jinja: the variables must be a JSON object");
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

// Templates in the style of real models' (written here from the formats they document).
const std::vector<std::pair<std::string, std::string>>& model_style_templates() {
  static const std::vector<std::pair<std::string, std::string>> templates = {
      {"chatml",
       "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
       "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"},
      {"qwen2",
       "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou "
       "are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
       "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
       "'<|im_start|>assistant\\n' }}{% endif %}"},
      {"llama2",
       "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
       "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
       "%}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
       "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
       "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
       "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
       "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] "
       "== 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"},
      {"llama3",
       "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
       "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
       "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% "
       "endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"},
      {"mistral",
       "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
       "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
       "message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
       "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
       "are supported!') }}{% endif %}{% endfor %}"},
      {"zephyr",
       "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + "
       "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + eos_token "
       "}}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% "
       "endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"},
      {"gemma",
       "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% "
       "endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
       "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
       "(message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif "
       "%}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if "
       "add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"},
      {"smollm",
       "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
       "'<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
       "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
       "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"},
      // Tool calling in the style of recent templates: a namespace carries state out of the loop,
      // tools and tool calls are printed with tojson, macros and whitespace control tidy it up.
      {"tools", R"JINJA({%- macro render_tool(tool) -%}
{{ tool | tojson(indent=2) }}
{%- endmacro -%}
{%- set ns = namespace(system=none, last_user=-1) -%}
{%- for message in messages -%}
  {%- if message.role == 'system' and loop.first -%}{%- set ns.system = message.content -%}{%- endif -%}
  {%- if message.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}
{%- endfor -%}
{{- bos_token -}}
{%- if tools is not none and tools | length > 0 %}
<|system|>
{{ ns.system if ns.system is not none else 'You can call functions.' }}
Functions:
{% for tool in tools %}
{{ render_tool(tool) }}
{% endfor %}
<|end|>
{%- elif ns.system is not none %}
<|system|>
{{ ns.system | trim }}<|end|>
{%- endif %}
{% for message in messages if message.role != 'system' %}
  {%- if message.role == 'assistant' and message.tool_calls is defined %}
<|assistant|>
    {%- for call in message.tool_calls %}
<tool_call>{{ {'name': call.function.name, 'arguments': call.function.arguments} | tojson }}</tool_call>
    {%- endfor %}
<|end|>
  {%- elif message.role == 'tool' %}
<|tool|>{{ message.content | string }}<|end|>
  {%- else %}
<|{{ message.role }}|>{{ message.content | trim }}{{ '<|end|>' if not (loop.last and message.role == 'assistant') else eos_token }}
  {%- endif %}
{% endfor %}
{%- if add_generation_prompt %}<|assistant|>{% endif -%})JINJA"},
      // Everything else a template may use, in one place.
      {"kitchen-sink", R"JINJA({#- exercises expressions, filters, tests and methods -#}
{%- set roles = messages | map(attribute='role') | list -%}
{%- set users = messages | selectattr('role', 'equalto', 'user') | list -%}
roles={{ roles | join(',') }} users={{ users | length }} rejected={{ messages | rejectattr('role', 'eq', 'user') | list | length }}
{% for m in messages %}
  {{ loop.index }}/{{ loop.revindex0 }} {{ m.role | upper }} {{ m['content'][:12] | tojson }} {{ m.content.split() | length }} words
  {%- if m.content.startswith('Hello') or m.content.endswith(('?', '!')) %} (ends or starts){% endif %}
  {%- if loop.previtem is defined %} after {{ loop.previtem.role }}{% endif %}
  {%- if m.content is string and m is mapping and m is not none and m is iterable %} typed{% endif %}
  {%- for word in m.content.split()[:3] %}{% if word | length > 6 %}{% continue %}{% endif %} [{{ word | lower | replace('!', '') }}]{% endfor %}

{% endfor %}
{{ messages[-1]['content'] | capitalize }}|{{ messages[0].content | title }}|{{ messages[0].content.title() }}
{{ (messages | length) * 2 - 1 }} {{ (messages | length) / 2 }} {{ 10 % (messages | length) }} {{ -(messages | length) ** 2 }}
{{ {'n': messages | length, 'first': messages[0].role, 'gen': add_generation_prompt} | tojson(sort_keys=true) }}
{{ messages[0] | tojson(separators=(',', ':')) }} {{ undefined_thing | default('dflt') }} {{ '' | default('empty', true) }}
{{ messages | map(attribute='content') | map('length') | list }} {{ range(3) | list }} {{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort(reverse=true) }}
{{ messages[0].get('content')[::2][:10] }} {{ messages[0].keys() | list }} {{ 'x' in 'xyz' and 'q' not in 'xyz' }} {{ 1 if 0 else 2 }}
{%- set ns = namespace(text='') %}{% for m in messages | reverse %}{% set ns.text = ns.text ~ m.role[0] %}{% endfor %}
{{ ns.text }} {{ ns.text | reverse }} {{ 'a-b c' | title }} {{ ' x ' | trim('x ') }} {{ 3.0 }} {{ 1e-7 }} {{ 2.5e20 }} {{ 0.1 + 0.2 }}
{{ '<b>&' | e }} {{ 'line1\nline2' | indent(2) }} {{ '12' | int + 1 }} {{ '2.5' | float }} {{ 'x' | int }} {{ -3 | abs }}
{%- filter trim %}   filtered block   {% endfilter %}
{% generation %}{{ 'generated' }}{% endgeneration %})JINJA"},
  };
  return templates;
}

TEST(ChatTemplate, ModelStyleTemplatesRenderAsTransformersDoes) {
  std::vector<Case> cases;
  for (const auto& [name, source] : model_style_templates()) {
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
      cases.push_back({"tools / calls", model_style_templates()[8].second,
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

}  // namespace
}  // namespace zoo
