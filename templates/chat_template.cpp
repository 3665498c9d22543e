#include "templates/chat_template.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/unicode.h"
#include "templates/jinja_arguments.h"
#include "templates/jinja_containers.h"
#include "templates/jinja_filters.h"
#include "templates/jinja_globals.h"
#include "templates/jinja_operators.h"
#include "templates/jinja_syntax.h"
#include "templates/python_methods.h"

namespace zoo {
namespace {

using jinja::Args;
using jinja::Body;
using jinja::Dict;
using jinja::Expr;
using jinja::ExprKind;
using jinja::Kind;
using jinja::List;
using jinja::Node;
using jinja::NodeKind;
using jinja::Value;
using jinja::ValueError;

// Bounds on what one rendering may build, so a hostile template is an error rather than
// exhausting memory or time (jinja::kMaxText bounds the output and each string).
constexpr int64_t kMaxSteps = 10000000;  // loop iterations and macro calls
// Bytes of strings, lists and dicts one rendering may build in all (Value::unshared_bytes of
// every result, copies included): the bounds on one value (kMaxText, ...) hold for one value,
// and a loop can make many (a list of 64 MiB strings grown by +, a 64 MiB replacement made
// again each time).
constexpr size_t kMaxBuiltBytes = size_t{1} << 30;  // 1 GiB

// A macro: its definition stays in the parsed template, which outlives every rendering.
struct Macro : jinja::Callable {
  Macro(const Node& n) : node(n) {}
  const std::string& name() const override { return node.targets[0]; }
  const Node& node;
};

using Frame = std::map<std::string, Value>;

class Renderer {
 public:
  Renderer(const std::string& name, const nlohmann::ordered_json& variables) : name_(name) {
    if (!variables.is_object()) throw ChatTemplateError(name + ": the variables must be a JSON object");
    Frame globals;
    for (const auto& [key, value] : variables.items()) {
      try {
        globals[key] = Value::from_json(value);
      } catch (const ValueError& e) {
        throw ChatTemplateError(name + ": variable '" + key + "': " + e.what());
      }
    }
    frames_.push_back(std::move(globals));
  }

  void render(const Body& body, std::string& out) {
    stack_base_ = static_cast<const char*>(__builtin_frame_address(0));
    try {
      render_body(body, out);
    } catch (const ValueError& e) {  // one the renderer did not place on a line still names the template
      throw ChatTemplateError(name_ + ": " + e.what());
    }
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  [[noreturn]] void fail(int line, const std::string& message) const {
    throw ChatTemplateError(name_ + ":" + std::to_string(line) + ": " + message);
  }

  // Rendering recurses through nested statements, expressions and macro calls; the parser bounds
  // each body's nesting, macro calls multiply it. The stack this render has used is bounded
  // instead, in bytes: a sanitizer's larger frames reach the bound sooner, never the stack's end.
  static constexpr ptrdiff_t kMaxStackBytes = ptrdiff_t{1} << 20;
  void check_stack(int line) const {
    const auto* here = static_cast<const char*>(__builtin_frame_address(0));
    if (stack_base_ - here > kMaxStackBytes) {
      fail(line, "the template nests statements, expressions and macro calls too deeply (over 1 MiB of stack)");
    }
  }

  // Whether `v` is or contains (through lists, dicts and namespaces) the namespace `items`;
  // `seen` visits each shared container once.
  static bool reaches(const Value& v, const Dict* items, std::set<const void*>& seen) {
    switch (v.kind()) {
      case Kind::kList:
        if (!seen.insert(&v.as_list()).second) return false;
        for (const auto& e : v.as_list())
          if (reaches(e, items, seen)) return true;
        return false;
      case Kind::kNamespace:
        if (&v.namespace_items() == items) return true;
        [[fallthrough]];
      case Kind::kDict:
        if (!seen.insert(&v.as_dict()).second) return false;
        for (const auto& [key, e] : v.as_dict())
          if (reaches(e, items, seen)) return true;
        return false;
      case Kind::kUndefined:
      case Kind::kNone:
      case Kind::kBool:
      case Kind::kInt:
      case Kind::kFloat:
      case Kind::kString:
      case Kind::kCallable:
        return false;
    }
    return false;
  }

  // ---- scopes: the globals, then a frame per loop iteration; a macro sees the globals and its own ----

  Value lookup(const std::string& name) const {
    const size_t floor = barriers_.empty() ? 0 : barriers_.back();
    for (size_t i = frames_.size(); i-- > floor;) {
      if (const auto it = frames_[i].find(name); it != frames_[i].end()) return it->second;
    }
    if (floor > 0) {
      if (const auto it = frames_[0].find(name); it != frames_[0].end()) return it->second;
    }
    if (const Value* function = jinja::global_function(name)) return *function;
    return Value::undefined("'" + name + "' is undefined");
  }

  void assign(const std::vector<std::string>& targets, const Value& value, int line) {
    if (targets.size() == 1) {
      frames_.back()[targets[0]] = value;
      return;
    }
    if (value.kind() != Kind::kList) fail(line, "cannot unpack a " + value.type_name() + " into " + std::to_string(targets.size()) + " names");
    const List& items = value.as_list();
    if (items.size() != targets.size()) {
      fail(line, "cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) frames_.back()[targets[i]] = items[i];
  }

  // ---- statements ----

  void step(int line) {
    if (++steps_ > kMaxSteps) fail(line, "the template runs more than " + std::to_string(kMaxSteps) + " loop iterations and macro calls");
  }

  Flow render_body(const Body& body, std::string& out) {
    if (out.size() > jinja::kMaxText) fail(body.empty() ? 0 : body.front().line, "the output is larger than 64 MiB");
    for (const Node& n : body) {
      const Flow flow = render_node(n, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow render_node(const Node& n, std::string& out) {
    check_stack(n.line);
    switch (n.kind) {
      case NodeKind::kText: out += n.text; return Flow::kNormal;
      case NodeKind::kOutput: {
        const Value v = eval(*n.expr);
        if (v.kind() == Kind::kCallable) fail(n.line, "cannot print the function '" + v.as_callable()->name() + "' (call it)");
        try {
          out += v.str();  // printing has its own bound (a shared list prints past memory)
        } catch (const ValueError& e) {
          fail(n.line, e.what());
        }
        return Flow::kNormal;
      }
      case NodeKind::kIf:
        for (const auto& [condition, body] : n.branches) {
          if (eval(*condition).truthy()) return render_body(body, out);
        }
        return render_body(n.else_body, out);
      case NodeKind::kFor: return render_for(n, out);
      case NodeKind::kSet:
        if (n.attribute.empty()) assign(n.targets, eval(*n.expr), n.line);
        else set_attribute(n, eval(*n.expr));
        return Flow::kNormal;
      case NodeKind::kSetBlock: {
        std::string text;
        render_body(n.body, text);
        assign(n.targets, Value(text), n.line);
        return Flow::kNormal;
      }
      case NodeKind::kMacro:
        frames_.back()[n.targets[0]] = Value::callable(std::make_shared<Macro>(n));
        return Flow::kNormal;
      case NodeKind::kFilterBlock: {
        std::string text;
        const Flow flow = render_body(n.body, text);
        block_input_ = Value(text);
        out += eval(*n.expr).str();
        return flow;
      }
      case NodeKind::kGeneration: return render_body(n.body, out);
      case NodeKind::kBreak: return Flow::kBreak;
      case NodeKind::kContinue: return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  // {% set ns.attribute = v %}: changes the namespace every copy of it sees.
  void set_attribute(const Node& n, const Value& v) {
    const Value target = lookup(n.targets[0]);
    if (target.kind() != Kind::kNamespace) {
      fail(n.line, "cannot set '" + n.targets[0] + "." + n.attribute + "': '" + n.targets[0] + "' is a " +
                       target.type_name() + ", not a namespace()");
    }
    // The namespace's recorded depth was fixed when it was made: what is stored in it stays
    // within the bound on its own.
    if (v.depth() >= jinja::kMaxValueDepth) {
      fail(n.line, "cannot set '" + n.targets[0] + "." + n.attribute + "': the value is nested " +
                       std::to_string(v.depth()) + " levels deep");
    }
    Dict& items = target.namespace_items();
    // Values share their containers, so a namespace stored into itself would be a cycle that
    // reference counts never free and printing never finishes (Python's collector and
    // repr cope; here it is refused).
    std::set<const void*> seen;
    if (reaches(v, &items, seen)) {
      fail(n.line, "cannot set '" + n.targets[0] + "." + n.attribute + "': the value holds '" + n.targets[0] +
                       "' itself");
    }
    const auto it = std::find_if(items.begin(), items.end(), [&](const auto& i) { return i.first == n.attribute; });
    if (it != items.end()) it->second = v;
    else items.emplace_back(n.attribute, v);
  }

  Flow render_for(const Node& n, std::string& out) {
    List items;
    try {
      items = jinja::iterate(eval(*n.expr));
    } catch (const ValueError& e) {
      fail(n.line, e.what());
    }
    if (n.condition) {  // "for x in xs if c": the loop sees only the items that pass
      List kept;
      for (const auto& item : items) {
        frames_.emplace_back();
        assign(n.targets, item, n.line);
        const bool keep = eval(*n.condition).truthy();
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const auto count = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < count; ++i) {
      step(n.line);
      Dict loop = {{"index", Value(i + 1)},         {"index0", Value(i)},          {"revindex", Value(count - i)},
                   {"revindex0", Value(count - i - 1)}, {"first", Value(i == 0)},    {"last", Value(i == count - 1)},
                   {"length", Value(count)},       {"depth", Value(1)},           {"depth0", Value(0)}};
      if (i > 0) loop.emplace_back("previtem", items[i - 1]);
      if (i + 1 < count) loop.emplace_back("nextitem", items[i + 1]);
      frames_.emplace_back();
      frames_.back()["loop"] = Value::dict(std::move(loop));
      assign(n.targets, items[i], n.line);
      const Flow flow = render_body(n.body, out);
      frames_.pop_back();
      if (flow == Flow::kBreak) break;
    }
    if (count == 0) return render_body(n.else_body, out);
    return Flow::kNormal;
  }

  // ---- expressions ----

  Value eval(const Expr& e) {
    check_stack(e.line);
    try {
      Value v = eval_unchecked(e);
      built_bytes_ += v.unshared_bytes();
      if (built_bytes_ > kMaxBuiltBytes) fail(e.line, "the template builds more than 1 GiB of strings and lists in one rendering");
      return v;
    } catch (const ValueError& error) {
      fail(e.line, error.what());
    }
  }

  Args arguments(const Expr& e) {
    Args args;
    for (const auto& item : e.items) args.positional.push_back(eval(*item));
    for (const auto& [name, value] : e.keywords) args.keywords.emplace_back(name, eval(*value));
    return args;
  }

  Value eval_unchecked(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral: return e.value;
      case ExprKind::kName: return lookup(e.name);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        List items;
        for (const auto& item : e.items) items.push_back(eval(*item));
        return Value::list(std::move(items));
      }
      case ExprKind::kDict: {
        Dict items;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value key = eval(*e.items[i]);
          if (!key.is_string()) throw ValueError("dict keys must be strings here, got " + key.type_name());
          const Value value = eval(*e.items[i + 1]);
          const auto it = std::find_if(items.begin(), items.end(), [&](const auto& p) { return p.first == key.as_string(); });
          if (it != items.end()) it->second = value;
          else items.emplace_back(key.as_string(), value);
        }
        return Value::dict(std::move(items));
      }
      case ExprKind::kAttribute: return jinja::attribute(eval(*e.a), e.name);
      case ExprKind::kSubscript: return jinja::subscript(eval(*e.a), eval(*e.b));
      case ExprKind::kSlice: {
        const Value target = eval(*e.a);
        target.require_defined();
        Value bounds[3];
        for (int i = 0; i < 3; ++i) bounds[i] = e.items[i] ? eval(*e.items[i]) : Value::none();
        return jinja::slice(target, bounds[0], bounds[1], bounds[2]);
      }
      case ExprKind::kCall: return call(e);
      case ExprKind::kFilter: return jinja::apply_filter(e.name, e.a ? eval(*e.a) : block_input_, arguments(e));
      case ExprKind::kTest: {
        const bool result = jinja::apply_test(e.name, eval(*e.a), arguments(e));
        return Value(e.negated ? !result : result);
      }
      case ExprKind::kNegate: return jinja::unary("-", eval(*e.a));
      case ExprKind::kPlus: return jinja::unary("+", eval(*e.a));
      case ExprKind::kNot: return Value(!eval(*e.a).truthy());
      case ExprKind::kBinary: return jinja::arithmetic(e.name, eval(*e.a), eval(*e.b));
      case ExprKind::kCompare: return compare_chain(e);
      case ExprKind::kAnd: {
        Value a = eval(*e.a);
        return a.truthy() ? eval(*e.b) : a;
      }
      case ExprKind::kOr: {
        Value a = eval(*e.a);
        return a.truthy() ? a : eval(*e.b);
      }
      case ExprKind::kConditional:
        if (eval(*e.a).truthy()) return eval(*e.b);
        return e.c ? eval(*e.c) : Value::undefined("the conditional expression had no else");
    }
    throw ValueError("unknown expression");
  }

  // a < b <= c ...: each comparison in turn, each operand evaluated once, stopping at the first false.
  Value compare_chain(const Expr& e) {
    Value left = eval(*e.a);
    for (size_t i = 0; i < e.ops.size(); ++i) {
      Value right = eval(*e.items[i]);
      if (!jinja::comparison(e.ops[i], left, right)) return Value(false);
      left = std::move(right);
    }
    return Value(true);
  }

  // ---- calls: macros, methods and global functions ----

  Value call(const Expr& e) {
    if (e.a->kind == ExprKind::kAttribute) {
      const Value target = eval(*e.a->a);
      const std::string& name = e.a->name;
      if (target.is_string()) return jinja::string_method(target.as_string(), name, arguments(e));
      if (target.kind() == Kind::kDict) {
        const Value member = target.item(name);
        if (member.kind() == Kind::kCallable) return call_function(member, arguments(e), e.line);
        return jinja::dict_method(target, name, arguments(e));
      }
      target.require_defined();
      throw ValueError("'" + target.type_name() + "' object has no method '" + name + "' that chat templates here support");
    }
    const Value callee = eval(*e.a);
    if (callee.kind() == Kind::kCallable) return call_function(callee, arguments(e), e.line);
    if (callee.is_undefined() && e.a->kind == ExprKind::kName) {
      throw ValueError("'" + e.a->name + "' is undefined (not a variable, macro or function chat templates here know)");
    }
    callee.require_defined();
    throw ValueError("'" + callee.type_name() + "' object is not callable");
  }

  Value call_function(const Value& callee, const Args& args, int line) {
    if (dynamic_cast<const Macro*>(callee.as_callable().get())) return call_macro(callee, args, line);
    const std::string& name = callee.as_callable()->name();
    if (name == "raise_exception") {
      args.check("raise_exception()", {"message"});
      fail(line, "the template raised: " + args.get(0, "message", Value("")).str());
    }
    return jinja::call_global(name, args);
  }

  Value call_macro(const Value& callee, const Args& args, int line) {
    const auto* macro = dynamic_cast<const Macro*>(callee.as_callable().get());
    const Node& n = macro->node;
    if (args.positional.size() > n.parameters.size()) {
      throw ValueError("macro '" + macro->name() + "' takes " + std::to_string(n.parameters.size()) + " arguments (" +
                       std::to_string(args.positional.size()) + " given)");
    }
    if (barriers_.size() > 50) throw ValueError("macros call each other more than 50 deep");
    step(line);
    Frame frame;
    for (size_t i = 0; i < args.positional.size(); ++i) frame[n.parameters[i].first] = args.positional[i];
    for (const auto& keyword : args.keywords) {
      const std::string& k = keyword.first;
      const bool known = std::any_of(n.parameters.begin(), n.parameters.end(), [&](const auto& p) { return p.first == k; });
      if (!known) throw ValueError("macro '" + macro->name() + "' has no parameter '" + k + "'");
      frame[k] = keyword.second;
    }
    barriers_.push_back(frames_.size());
    frames_.push_back(std::move(frame));
    std::string out;
    try {
      for (const auto& [parameter, fallback] : n.parameters) {
        if (!frames_.back().count(parameter)) {
          frames_.back()[parameter] = fallback ? eval(*fallback) : Value::undefined("'" + parameter + "' is undefined");
        }
      }
      render_body(n.body, out);
    } catch (...) {
      frames_.resize(barriers_.back());
      barriers_.pop_back();
      throw;
    }
    frames_.resize(barriers_.back());
    barriers_.pop_back();
    return Value(out);
  }

  const std::string& name_;
  std::vector<Frame> frames_;
  std::vector<size_t> barriers_;  // where each macro call's frames begin
  int64_t steps_ = 0;
  size_t built_bytes_ = 0;  // against kMaxBuiltBytes
  const char* stack_base_ = nullptr;  // the frame render() began in
  Value block_input_;             // the rendered body of the {% filter %} block being applied
};

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, std::string name) : name_(std::move(name)) {
  if (const int64_t bad = invalid_utf8_offset(source); bad >= 0) {
    throw ChatTemplateError(name_ + ": invalid UTF-8 at byte offset " + std::to_string(bad));
  }
  try {
    body_ = std::make_shared<const Body>(jinja::parse_template(source, name_));
  } catch (const jinja::SyntaxError& e) {
    throw ChatTemplateError(e.what());
  }
}

std::string ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  std::string out;
  Renderer(name_, variables).render(*body_, out);
  return out;
}

}  // namespace zoo
