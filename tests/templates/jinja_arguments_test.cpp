#include "templates/jinja_arguments.h"

#include <gtest/gtest.h>

#include "templates/template_test_util.h"

namespace zoo {
namespace {

using testing::expect_render_errors;
using testing::expect_renders;

TEST(JinjaArguments, PositionalOrKeywordAsPythonBindsThem) {
  expect_renders({
      {"{{ 'a-b-c'.split('-', maxsplit=1) }} {{ 'a-b-c'.split(sep='-') }} {{ 'xax' | trim(chars='x') }}", "['a', 'b-c'] ['a', 'b', 'c'] a"},
  });
}

TEST(JinjaArguments, ErrorsSayWhichArgumentAndWhy) {
  expect_render_errors({
      {"{{ 'a'.strip('x', 'y') }}", "t.jinja:1: str.strip() takes at most 1 arguments (2 given)"},
      {"{{ 'a' | trim(foo=1) }}", "t.jinja:1: the trim filter got an unexpected keyword argument 'foo'"},
      {"{{ 'a'.split(maxsplit='x') }}", "t.jinja:1: maxsplit must be an integer, got str"},
      {"{{ 'a'.split(sep=1) }}", "t.jinja:1: sep must be a string or none, got int"},
      {"{{ 'a'.replace(1, 'b') }}", "t.jinja:1: old must be a string, got int"},
  });
}

}  // namespace
}  // namespace zoo
