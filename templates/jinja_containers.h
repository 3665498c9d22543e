#pragma once
// Template values as containers, as jinja2 sees them: what a for loop, len(), `in`, a slice, a
// subscript and an attribute look into. A string holds its characters, a list its items, a dict
// its keys; undefined holds nothing (jinja2's Undefined iterates as empty); the rest are no
// containers (Python's TypeError, here a ValueError with its message).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "templates/jinja_value.h"

namespace zoo::jinja {

// The items a for loop or a filter iterates.
List iterate(const Value& v);
// Python's len().
int64_t length(const Value& v);
// `item in container`.
bool contains(const Value& container, const Value& item);
// Python's slice of a sequence of `n` items: the indices it takes (each bound an int or none).
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step);
// target[start:stop:step] of a string or a list.
Value slice(const Value& target, const Value& start, const Value& stop, const Value& step);
// target.name: a dict's or a namespace's item, else undefined saying why.
Value attribute(const Value& target, const std::string& name);
// target[key]: a dict's item, a list's or a string's element (negative counts from the end),
// else undefined saying why.
Value subscript(const Value& target, const Value& key);
// jinja2's environment.getattr for the filters that take an attribute: "0" indexes a list.
Value attribute_or_index(const Value& v, const std::string& part);
// The texts of `items` joined by `separator`, as str.join and the join filter do, within kMaxText.
std::string join_bounded(const List& items, const std::string& separator,
                         const std::function<std::string(const Value&)>& text);

}  // namespace zoo::jinja
