#pragma once
// Python's str semantics on UTF-8 text, as chat templates call them (str's methods, and the
// filters built on them): a str is a sequence of code points, and case mapping is Unicode's
// full mapping with Python's rules (the final sigma, titlecase). A replacement past kMaxText is
// a ValueError, as every string a rendering builds.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "templates/jinja_value.h"

namespace zoo::jinja {

// Each code point's bytes, in order.
std::vector<std::string> characters(const std::string& s);
std::vector<char32_t> code_points(const std::string& s);

// str.strip/lstrip/rstrip with `chars` (none: whitespace).
std::string strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right);
std::string lower(const std::string& s);       // str.lower()
std::string upper(const std::string& s);       // str.upper()
std::string title(const std::string& s);       // str.title()
std::string capitalize(const std::string& s);  // str.capitalize()
// str.islower() and str.isupper(): some character is cased, and the case mapping keeps the text.
bool is_lower(const std::string& s);
bool is_upper(const std::string& s);

// str.replace(old, with, count); a negative count replaces all.
std::string replace(const std::string& s, const std::string& old, const std::string& with, int64_t count);
// str.split(sep, maxsplit): none splits on runs of whitespace; a negative maxsplit splits all.
List split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit);
// str.splitlines(): Python's line boundaries.
std::vector<std::string> splitlines(const std::string& s);
// str.find(sub) in code points (-1: not found) and str.count(sub).
int64_t find(const std::string& s, const std::string& sub);
int64_t count(const std::string& s, const std::string& sub);
// markupsafe's escape(), which jinja2's escape filter calls.
std::string html_escape(const std::string& s);

}  // namespace zoo::jinja
