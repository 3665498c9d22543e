#include "templates/python_methods.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "templates/template_test_util.h"

namespace zoo {
namespace {

using json = nlohmann::ordered_json;
using testing::expect_render_errors;
using testing::expect_renders;

TEST(PythonMethods, StrMethodsWorkedByHand) {
  expect_renders({{"{{ s.strip() }}|{{ s | trim }}|{{ s.lstrip() }}|{{ s.split() }}|{{ 'a,b'.split(',') }}",
                   "Hello World|Hello World|Hello World  |['Hello', 'World']|['a', 'b']"}},
                 {{"s", "  Hello World  "}});
}

TEST(PythonMethods, ErrorsNameFileAndLine) {
  expect_render_errors({
      {"{{ 'a'.zfill(3) }}", "t.jinja:1: 'str' object has no method 'zfill' that chat templates here support"},
  });
}

}  // namespace
}  // namespace zoo
