#include "templates/jinja_operators.h"

#include <cmath>

#include "templates/jinja_containers.h"

namespace zoo::jinja {
namespace {

// Items in one list built by + or * (about 16 bytes of memory each at least).
constexpr size_t kMaxListItems = kMaxText / 16;

std::string operand_error(const char* op, const Value& a, const Value& b) {
  a.require_defined();
  b.require_defined();
  return std::string("unsupported operand type(s) for ") + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'";
}

[[noreturn]] void overflow() { throw ValueError("integer overflow (zoo's templates compute with 64-bit integers)"); }

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}

int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}

int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

bool either_float(const Value& a, const Value& b) { return a.kind() == Kind::kFloat || b.kind() == Kind::kFloat; }

Value add(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (either_float(a, b)) return Value(a.as_float() + b.as_float());
    return Value(checked_add(a.as_int(), b.as_int()));
  }
  if (a.is_string() && b.is_string()) {
    if (a.as_string().size() + b.as_string().size() > kMaxText) throw ValueError("'+' makes a string larger than 64 MiB");
    return Value(a.as_string() + b.as_string());
  }
  if (a.kind() == Kind::kList && b.kind() == Kind::kList) {
    if (a.as_list().size() + b.as_list().size() > kMaxListItems) {
      throw ValueError("'+' makes a list of more than " + std::to_string(kMaxListItems) + " items");
    }
    List items = a.as_list();
    items.insert(items.end(), b.as_list().begin(), b.as_list().end());
    return Value::list(std::move(items));
  }
  throw ValueError(operand_error("+", a, b));
}

Value concatenate(const Value& a, const Value& b) {
  std::string s = a.str() + b.str();
  if (s.size() > kMaxText) throw ValueError("'~' makes a string larger than 64 MiB");
  return Value(std::move(s));
}

Value repeat(const Value& sequence, int64_t times) {
  const size_t unit = sequence.is_string() ? sequence.as_string().size() : sequence.as_list().size() * 16;
  if (times > 0 && unit > 0 && static_cast<size_t>(times) > kMaxText / unit) {
    throw ValueError("repeating a " + sequence.type_name() + " " + std::to_string(times) + " times makes it too large");
  }
  if (sequence.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += sequence.as_string();
    return Value(out);
  }
  List out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), sequence.as_list().begin(), sequence.as_list().end());
  return Value::list(std::move(out));
}

Value multiply(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (either_float(a, b)) return Value(a.as_float() * b.as_float());
    return Value(checked_mul(a.as_int(), b.as_int()));
  }
  const bool sequence_a = a.is_string() || a.kind() == Kind::kList, sequence_b = b.is_string() || b.kind() == Kind::kList;
  if (sequence_a && is_integral(b)) return repeat(a, b.as_int());
  if (sequence_b && is_integral(a)) return repeat(b, a.as_int());
  throw ValueError(operand_error("*", a, b));
}

// // and % round toward negative infinity, and % takes the divisor's sign, as in Python.
Value floor_divide_or_modulo(const std::string& op, const Value& a, const Value& b) {
  if (b.as_float() == 0.0) throw ValueError(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
  if (either_float(a, b)) {
    const double x = a.as_float(), y = b.as_float();
    double m = std::fmod(x, y);
    if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
    return op == "%" ? Value(m) : Value(std::floor((x - m) / y + 0.5));
  }
  const int64_t x = a.as_int(), y = b.as_int();
  if (x == INT64_MIN && y == -1) overflow();
  int64_t q = x / y, m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
  return op == "%" ? Value(m) : Value(q);
}

Value power(const Value& a, const Value& b) {
  if (!either_float(a, b) && b.as_int() >= 0) {
    const int64_t base = a.as_int(), exponent = b.as_int();
    if (base == 0 || base == 1) return Value(exponent == 0 ? int64_t{1} : base);
    if (base == -1) return Value(exponent % 2 ? int64_t{-1} : int64_t{1});
    int64_t r = 1;  // |base| >= 2 overflows within 63 steps
    for (int64_t i = 0; i < exponent; ++i) r = checked_mul(r, base);
    return Value(r);
  }
  return Value(std::pow(a.as_float(), b.as_float()));
}

}  // namespace

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (op == "+") return add(a, b);
  if (op == "~") return concatenate(a, b);
  if (op == "*") return multiply(a, b);
  if (op == "%" && a.is_string()) throw ValueError("printf-style formatting ('...' % values) is not supported");
  if (!a.is_number() || !b.is_number()) throw ValueError(operand_error(op.c_str(), a, b));
  if (op == "-") {
    if (either_float(a, b)) return Value(a.as_float() - b.as_float());
    return Value(checked_sub(a.as_int(), b.as_int()));
  }
  if (op == "/") {
    if (b.as_float() == 0.0) throw ValueError("division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") return floor_divide_or_modulo(op, a, b);
  if (op == "**") return power(a, b);
  throw ValueError("unknown operator " + op);
}

Value unary(const char* op, const Value& v) {
  if (!v.is_number()) {
    v.require_defined();
    throw ValueError(std::string("bad operand type for unary ") + op + ": '" + v.type_name() + "'");
  }
  if (op[0] == '+') return v.kind() == Kind::kBool ? Value(v.as_int()) : v;
  if (v.kind() == Kind::kFloat) return Value(-v.as_float());
  return Value(checked_sub(0, v.as_int()));
}

Value absolute(const Value& v) {
  if (v.kind() == Kind::kFloat) return Value(std::fabs(v.as_float()));
  if (is_integral(v)) return Value(v.as_int() < 0 ? checked_sub(0, v.as_int()) : v.as_int());
  v.require_defined();
  throw ValueError("bad operand type for abs(): '" + v.type_name() + "'");
}

bool comparison(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return a == b;
  if (op == "!=") return a != b;
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  const int c = compare(a, b, op.c_str());
  return op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
}

}  // namespace zoo::jinja
