#include "templates/jinja_operators.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "templates/template_test_util.h"

namespace zoo {
namespace {

using json = nlohmann::ordered_json;
using testing::expect_render_errors;
using testing::expect_renders;

TEST(JinjaOperators, OperatorsWorkedByHand) {
  const json v = {{"l", {1, 2, 3, 4}}};
  expect_renders(
      {
          {"{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 1 / 4 }} {{ 2 ** 10 }} {{ 3 * 'ab' }} {{ 1 + 2.5 }}", "3 -4 2 0.25 1024 ababab 3.5"},
          {"{{ 'yes' if l else 'no' }} {{ 1 < 2 < 3 }} {{ not l }} {{ 0 or 'z' }} {{ 'x' and 'y' }} {{ 5 is odd }}", "yes True False z y True"},
      },
      v);
}

TEST(JinjaOperators, ErrorsNameFileAndLine) {
  expect_render_errors({
      {"{{ 'a' + 1 }}", "t.jinja:1: unsupported operand type(s) for +: 'str' and 'int'"},
      {"{{ 1 // 0 }}", "t.jinja:1: integer division or modulo by zero"},
      {"{{ '%s' % 1 }}", "t.jinja:1: printf-style formatting ('...' % values) is not supported"},
      {"{{ 'ab' * 1000000000000 }}", "t.jinja:1: repeating a str 1000000000000 times makes it too large"},
  });
}

}  // namespace
}  // namespace zoo
