#include "templates/jinja_filters.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base_test_util.h"
#include "templates/chat_template.h"
#include "templates/template_test_util.h"

namespace zoo {
namespace {

using json = nlohmann::ordered_json;
using testing::error_of;
using testing::expect_render_errors;
using testing::expect_renders;

const json kVariables = {{"d", {{"role", "user"}, {"n", 3}}}, {"l", {1, 2, 3, 4}}, {"s", "  Hello World  "}};

TEST(JinjaFilters, FiltersWorkedByHand) {
  expect_renders(
      {
          {"{{ d | tojson }} {{ 'é\"\\n' | tojson }} {{ [1, {'a': none}] | tojson(indent=2) }}",
           "{\"role\": \"user\", \"n\": 3} \"é\\\"\\n\" [\n  1,\n  {\n    \"a\": null\n  }\n]"},
          {"{{ 'hello wORLD' | title }} {{ 'hello' | capitalize }} {{ 'ab' | upper }} {{ l | join('-') }} {{ l | first }}{{ l | last }}", "Hello World Hello AB 1-2-3-4 14"},
          {"{% for k, v in {'b': 1, 'A': 3, 'c': 2} | dictsort %}{{ k }}{{ v }}{% endfor %} "
           "{% for k, v in {'b': 1, 'A': 3, 'c': 2} | dictsort(by='value', reverse=true) %}{{ k }}{% endfor %} "
           "{% for k, v in {'b': 1, 'A': 3} | dictsort(true) %}{{ k }}{% endfor %}",
           "A3b1c2 Acb Ab"},
      },
      kVariables);
}

TEST(JinjaFilters, ErrorsNameFileAndLine) {
  expect_render_errors(
      {
          // Bounds on what a rendering builds (an out-of-memory chat_template_fuzz found: joins
          // of joins grow geometrically).
          {"{{ ('ab' * 500) | join('x' * 100000) }}", "t.jinja:1: joining makes a string larger than 64 MiB"},
          {"{{ ','.join('ab' * 500) | join('x' * 100000) }}", "t.jinja:1: joining makes a string larger than 64 MiB"},
          {"{{ messages | tojson(indent=5555555555551) }}", "t.jinja:1: tojson's indent (5555555555551) must be at most 1024"},
          {"{{ 'a' | indent(100000) }}", "t.jinja:1: indent's width (100000) must be at most 1024"},
          {"{{ ('a\\n' * 100000) | indent('x' * 1000) }}", "t.jinja:1: indenting makes a string larger than 64 MiB"},
      },
      {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}});
}

// As jinja2's "No filter named 'wordwrap'", but with the names this renderer knows, so that a
// template's author sees what to use instead.
TEST(JinjaFilters, UnknownNamesListTheKnownOnes) {
  const std::string known_filters =
      "abs, capitalize, count, d, default, dictsort, e, escape, first, float, indent, int, items, join, last, length, "
      "list, lower, map, reject, rejectattr, replace, reverse, safe, select, selectattr, sort, string, title, tojson, "
      "trim, upper";
  const std::string known_tests =
      "!=, <, <=, ==, >, >=, boolean, callable, defined, divisibleby, eq, equalto, even, false, float, ge, "
      "greaterthan, gt, in, integer, iterable, le, lessthan, lower, lt, mapping, ne, none, number, odd, sameas, "
      "sequence, string, true, undefined, upper";
  // When the template is parsed.
  EXPECT_EQ(error_of([&] { ChatTemplate("\n{{ x | wordwrap }}", "t.jinja"); }),
            "t.jinja:2: unknown filter 'wordwrap' (chat templates here support " + known_filters + ")");
  EXPECT_EQ(error_of([&] { ChatTemplate("{{ x is prime }}", "t.jinja"); }),
            "t.jinja:1: unknown test 'prime' (chat templates here support " + known_tests + ")");
  // When a filter or test is named by a string, as it renders.
  EXPECT_EQ(error_of([&] { testing::render("{{ [1] | map('wordwrap') | list }}"); }),
            "t.jinja:1: unknown filter 'wordwrap' (chat templates here support " + known_filters + ")");
  EXPECT_EQ(error_of([&] { testing::render("{{ [1] | select('prime') | list }}"); }),
            "t.jinja:1: unknown test 'prime' (chat templates here support " + known_tests + ")");
}

}  // namespace
}  // namespace zoo
