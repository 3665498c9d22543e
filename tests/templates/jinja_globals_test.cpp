#include "templates/jinja_globals.h"

#include <gtest/gtest.h>

#include "templates/template_test_util.h"

namespace zoo {
namespace {

using testing::expect_render_errors;
using testing::expect_renders;

// Each output is jinja2's for the same template.
TEST(JinjaGlobals, GlobalFunctionsAsJinjaCallsThem) {
  expect_renders({
      {"{{ range(1, 10, 3) | list }} {{ range(10, 0, -4) | list }} {{ dict(a=1, b=2) }}", "[1, 4, 7] [10, 6, 2] {'a': 1, 'b': 2}"},
      {"{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }} {{ strftime_now is defined }}", "12 True"},
  });
}

TEST(JinjaGlobals, ErrorsNameFileAndLine) {
  expect_render_errors({
      {"{{ range(1, 2, 0) }}", "t.jinja:1: range() arg 3 must not be zero"},
      {"{{ range(200000) }}", "t.jinja:1: range() of more than 100000 items"},
      {"{{ namespace(1) }}", "t.jinja:1: namespace() takes a dict and keyword arguments"},
      {"\n{{ raise_exception('no') }}", "t.jinja:2: the template raised: no"},
  });
}

}  // namespace
}  // namespace zoo
