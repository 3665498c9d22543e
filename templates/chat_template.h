#pragma once
// Hugging Face chat templates (tokenizer_config.json's chat_template, chat_template.jinja),
// rendered as transformers' apply_chat_template renders them: jinja2 with trim_blocks and
// lstrip_blocks, the loop controls (break, continue) and {% generation %} extensions, the globals
// raise_exception and strftime_now, and a tojson that is json.dumps with ensure_ascii=False.
//
// The Jinja it understands is what models' templates use (templates/jinja_syntax.h has the grammar):
// {{ }}, {% %}, {# #} and whitespace control; for (loop.index, index0, revindex, first, last,
// length, previtem, nextitem; an if filter; else), if/elif/else, set (tuples, namespace
// attributes, blocks), macro, filter blocks; literals, lists, dicts, attributes, subscripts,
// slices, arithmetic, ~, comparisons, and/or/not, in, "x if c else y", tests and filters, and
// Python's string and dict methods. Anything else is an error naming the template, the line and
// the construct, never output that differs from jinja2's.

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zoo {

namespace jinja {
struct Node;
}

// "NAME:LINE: what went wrong": a syntax error, an unsupported construct, a failed operation,
// or the template's own raise_exception("...") (whose message follows "the template raised: ").
class ChatTemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ChatTemplate {
 public:
  // Parses `source` once; `name` names it in errors ("DIR/tokenizer_config.json: chat_template").
  ChatTemplate(const std::string& source, std::string name);
  // Renders with `variables`, a JSON object (messages, add_generation_prompt, bos_token, ...);
  // objects keep their keys' order, as Python's dicts do.
  std::string render(const nlohmann::ordered_json& variables) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const std::vector<jinja::Node>> body_;
};

}  // namespace zoo
