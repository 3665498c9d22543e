#pragma once
// Python's operators on template values, as jinja2 evaluates them: arithmetic (+ - * / // % **)
// and Jinja's ~, the unary signs, abs(), and the comparisons (==, <, in, ...). Integers are 64
// bits here, so what would outgrow them is a ValueError rather than Python's big integer;
// strings and lists built by + and * stay within kMaxText.

#include <cstdint>
#include <string>

#include "templates/jinja_value.h"

namespace zoo::jinja {

// a op b, for op one of + - * / // % ** ~.
Value arithmetic(const std::string& op, const Value& a, const Value& b);
// -v or +v (op "-" or "+").
Value unary(const char* op, const Value& v);
// Python's abs().
Value absolute(const Value& v);
// a op b, for op one of == != < <= > >= in, not in.
bool comparison(const std::string& op, const Value& a, const Value& b);

}  // namespace zoo::jinja
