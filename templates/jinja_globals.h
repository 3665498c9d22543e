#pragma once
// The global functions a chat template may call: transformers' raise_exception and
// strftime_now, and jinja2's namespace, range and dict. They are values (Kind::kCallable), so
// "strftime_now is defined" holds as in jinja2.

#include <string>

#include "templates/jinja_arguments.h"
#include "templates/jinja_value.h"

namespace zoo::jinja {

// The global function called `name`, or nullptr.
const Value* global_function(const std::string& name);
// Calls the global function `name` with `args`. raise_exception is the renderer's (its message
// names the line the template raised at).
Value call_global(const std::string& name, const Args& args);

}  // namespace zoo::jinja
