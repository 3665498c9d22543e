#pragma once
// A chat template's syntax tree: Jinja's source split as jinja2 splits it with the environment
// transformers renders chat templates in (trim_blocks and lstrip_blocks on, "-" and "+"
// whitespace control, one trailing newline dropped), and its tags parsed with jinja2's grammar
// and operator precedence. What this does not know (an unknown statement, filter or test) is a
// SyntaxError naming the template, line and construct, so nothing renders half understood.

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "templates/jinja_value.h"

namespace zoo::jinja {

// "NAME:LINE: message".
class SyntaxError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ExprKind {
  kLiteral,      // value
  kName,         // name
  kList,         // items
  kTuple,        // items (a list to the renderer)
  kDict,         // items: key, value, key, value, ...
  kAttribute,    // a.name
  kSubscript,    // a[b]
  kSlice,        // a[items[0]:items[1]:items[2]], each possibly null
  kCall,         // a(items..., keywords...)
  kFilter,       // a | name(items..., keywords...)
  kTest,         // a is [not] name(items...)
  kNegate,       // -a
  kPlus,         // +a
  kNot,          // not a
  kBinary,       // a op b: + - * / // % ** ~
  kCompare,      // a ops[0] items[0] ops[1] items[1] ... (Python's chained comparisons)
  kAnd,          // a and b
  kOr,           // a or b
  kConditional,  // b if a else c (c may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  Value value;                  // kLiteral
  std::string name;             // kName, kAttribute, kFilter, kTest; the operator of kBinary, kAnd, kOr
  std::vector<std::string> ops;  // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "not in"
  bool negated = false;         // kTest: "is not"
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
};

enum class NodeKind {
  kText,        // text
  kOutput,      // {{ expr }}
  kIf,          // branches (conditions and bodies), else_body
  kFor,         // {% for targets in expr [if condition] %} body {% else %} else_body
  kSet,         // {% set targets = expr %}, or {% set name.attribute = expr %}
  kSetBlock,    // {% set targets[0] %} body {% endset %}
  kMacro,       // {% macro name(parameters) %} body
  kFilterBlock,  // {% filter expr(with its input left out) %} body
  kGeneration,  // {% generation %} body: rendered as it is (transformers marks assistant text with it)
  kBreak,
  kContinue,
};

struct Node;
using Body = std::vector<Node>;

struct Node {
  NodeKind kind = NodeKind::kText;
  int line = 0;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput, kFor (the iterable), kSet, kFilterBlock
  ExprPtr condition;                 // kFor's filter
  std::vector<std::string> targets;  // kFor, kSet, kSetBlock, kMacro (its name)
  std::string attribute;             // kSet on a namespace: targets[0].attribute
  std::vector<std::pair<std::string, ExprPtr>> parameters;  // kMacro: names and defaults (or null)
  std::vector<std::pair<ExprPtr, Body>> branches;           // kIf
  Body body, else_body;
};

// Parses `source`; `name` names the template in errors.
Body parse_template(const std::string& source, const std::string& name);

}  // namespace zoo::jinja
