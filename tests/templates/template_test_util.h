#pragma once
// What the tests of templates/ share: rendering a source, and the whole templates kept as files
// under tests/templates/fixtures/ (ZOO_TEMPLATE_FIXTURES, set by tests/CMakeLists.txt).

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base_test_util.h"
#include "core/files.h"
#include "templates/chat_template.h"

namespace zoo::testing {

// `source` rendered with `variables`, the template named "t.jinja" in errors.
inline std::string render(const std::string& source, const nlohmann::ordered_json& variables = nlohmann::ordered_json::object()) {
  return ChatTemplate(source, "t.jinja").render(variables);
}

// The text of tests/templates/fixtures/NAME.jinja.
inline std::string template_fixture(const std::string& name) {
  return read_file(std::string(ZOO_TEMPLATE_FIXTURES) + "/" + name + ".jinja");
}

// Each (source, expected output) pair rendered with `variables`.
inline void expect_renders(const std::vector<std::pair<const char*, const char*>>& cases,
                           const nlohmann::ordered_json& variables = nlohmann::ordered_json::object()) {
  for (const auto& [source, expected] : cases) EXPECT_EQ(render(source, variables), expected) << source;
}

// Each (source, expected error) pair's error when rendered with `variables`.
inline void expect_render_errors(const std::vector<std::pair<const char*, const char*>>& cases,
                                 const nlohmann::ordered_json& variables = nlohmann::ordered_json::object()) {
  for (const auto& [source, expected] : cases) EXPECT_EQ(error_of([&] { render(source, variables); }), expected) << source;
}

}  // namespace zoo::testing
