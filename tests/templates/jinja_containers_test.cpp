#include "templates/jinja_containers.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "templates/template_test_util.h"

namespace zoo {
namespace {

using json = nlohmann::ordered_json;
using testing::expect_render_errors;
using testing::expect_renders;

TEST(JinjaContainers, SlicesSubscriptsAndAttributesWorkedByHand) {
  const json v = {{"d", {{"role", "user"}, {"n", 3}}}, {"l", {1, 2, 3, 4}}};
  expect_renders(
      {
          {"{{ l[1:] }} {{ l[::-1] }} {{ l[-1] }} {{ 'héllo'[1:3] }} {{ l | length }} {{ 'héllo' | length }}", "[2, 3, 4] [4, 3, 2, 1] 4 él 4 5"},
          {"{{ d.role }} {{ d['n'] + 1 }} {{ d.missing is defined }} {{ d.get('missing', 'x') }} {{ 'role' in d }}", "user 4 False x True"},
      },
      v);
}

TEST(JinjaContainers, ErrorsNameFileAndLine) {
  expect_render_errors(
      {
          {"{{ missing.attribute }}", "t.jinja:1: 'missing' is undefined"},
          {"\n{{ messages[0].content.x.y }}", "t.jinja:2: 'str object' has no attribute 'x'"},
          {"{% for c in 'x' * 2000000 %}{% endfor %}", "t.jinja:1: iterating a string of more than 1 MiB (2000000 bytes)"},
      },
      {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}});
}

}  // namespace
}  // namespace zoo
