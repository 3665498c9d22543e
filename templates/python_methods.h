#pragma once
// The methods of Python's str and dict that chat templates call ('text'.strip(), d.items(),
// d.get('k', fallback), ...), with Python's arguments and results. Others are a ValueError
// naming the method.

#include <string>

#include "templates/jinja_arguments.h"
#include "templates/jinja_value.h"

namespace zoo::jinja {

// s.name(args...)
Value string_method(const std::string& s, const std::string& name, const Args& args);
// d.name(args...), for `d` a dict.
Value dict_method(const Value& d, const std::string& name, const Args& args);

}  // namespace zoo::jinja
