#include "templates/jinja_syntax.h"

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "templates/chat_template.h"

namespace zoo {
namespace {

using testing::error_of;

// Bad templates: errors name the template, the line and the construct (unknown filters and
// tests: tests/templates/jinja_filters_test.cpp).
TEST(JinjaSyntax, BadTemplatesNameFileLineAndConstruct) {
  const std::pair<const char*, const char*> cases[] = {
      {"ok\n{{ messages", "t.jinja:2: unterminated '{{' (no '}}' before the end of the template)"},
      {"{% if x %}\nyes", "t.jinja:1: '{% if %}' is never closed (no {% endif %} before the end of the template)"},
      {"a\n\n{# never closed", "t.jinja:3: unterminated comment '{#' (no '#}')"},
      {"{{ 'open }}", "t.jinja:1: unterminated string (no closing ')"},
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
}

}  // namespace
}  // namespace zoo
