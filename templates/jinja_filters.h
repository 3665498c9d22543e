#pragma once
// jinja2's filters and tests as tables of small functions, as jinja2/filters.py's FILTERS and
// jinja2/tests.py's TESTS are (tojson is transformers', json.dumps with ensure_ascii=False). The
// parser refuses a name that is in neither table, listing those that are; the renderer calls
// them by name. A new filter is one function and one row.

#include <map>
#include <string>

#include "templates/jinja_arguments.h"
#include "templates/jinja_value.h"

namespace zoo::jinja {

// `input | name(args)`; `name` is the one the template wrote (aliases share a function), for
// the messages.
using Filter = Value (*)(const std::string& name, const Value& input, const Args& args);

// `value is name(argument)`; a test that takes no argument is given none.
struct Test {
  bool (*function)(const std::string& name, const Value& value, const Value& argument);
  bool takes_argument;
};

const std::map<std::string, Filter>& filters();
const std::map<std::string, Test>& tests();

// "unknown filter 'NAME' (chat templates here support abs, capitalize, ...)", and for tests.
std::string unknown_filter_message(const std::string& name);
std::string unknown_test_message(const std::string& name);

// Looks `name` up and applies it; an unknown name is a ValueError listing the known ones.
Value apply_filter(const std::string& name, const Value& input, const Args& args);
bool apply_test(const std::string& name, const Value& value, const Args& args);

}  // namespace zoo::jinja
