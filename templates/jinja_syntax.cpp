#include "templates/jinja_syntax.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "core/unicode.h"
#include "templates/jinja_filters.h"

namespace zoo::jinja {
namespace {

enum class TokenKind { kText, kVariableBegin, kVariableEnd, kBlockBegin, kBlockEnd, kName, kString, kNumber, kOperator, kEnd };

struct Token {
  TokenKind kind;
  std::string text;  // the text, name, operator, or a string literal's value
  Value number;      // kNumber
  int line;
};

bool starts_with(const std::string& s, size_t at, const char* prefix) { return s.compare(at, std::strlen(prefix), prefix) == 0; }

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The length of the Python whitespace character at s[i], or 0.
size_t space_at(const std::string& s, size_t i) {
  if (i >= s.size()) return 0;
  const auto [c, length] = unicode::decode_at(s, i);
  return is_python_space(c) ? length : 0;
}

size_t skip_spaces(const std::string& s, size_t i) {
  while (size_t n = space_at(s, i)) i += n;
  return i;
}

// str.rstrip(): Python whitespace off the end.
std::string rstrip(const std::string& s) {
  size_t end = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t n = space_at(s, i);
    if (n == 0) {
      i += unicode::decode_at(s, i).length;
      end = i;
    } else {
      i += n;
    }
  }
  return s.substr(0, end);
}

bool all_spaces(const std::string& s, size_t from) {
  if (from >= s.size()) return false;  // jinja2 matches \s+: at least one
  return skip_spaces(s, from) == s.size();
}

// Splits a template into text and tag tokens the way jinja2's lexer does with trim_blocks and
// lstrip_blocks (jinja2/lexer.py): "{%-"/"{{-"/"{#-" strip all whitespace before the tag,
// "-%}"/"-}}"/"-#}" all after; otherwise a block or comment tag alone on its line loses the
// spaces before it (not with "{%+") and one newline after it (not with "+%}").
class Lexer {
 public:
  Lexer(const std::string& source, const std::string& name) : name_(name) {
    // jinja2 reads "\r\n" and "\r" as "\n", and drops one trailing newline.
    s_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        s_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        s_ += source[i];
      }
    }
    if (!s_.empty() && s_.back() == '\n') s_.pop_back();
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < s_.size()) {
      size_t open = s_.find('{', pos_);
      while (open != std::string::npos && (open + 1 >= s_.size() || std::string("{%#").find(s_[open + 1]) == std::string::npos)) {
        open = s_.find('{', open + 1);
      }
      if (open == std::string::npos) {
        text(s_.substr(pos_));
        advance(s_.size());
        break;
      }
      const char type = s_[open + 1];
      const char sign = open + 2 < s_.size() && (s_[open + 2] == '-' || s_[open + 2] == '+') ? s_[open + 2] : 0;
      std::string data = s_.substr(pos_, open - pos_);
      if (sign == '-') {
        data = rstrip(data);
      } else if (sign != '+' && type != '{') {
        const size_t line_begin = data.rfind('\n') + 1;  // 0 when there is no newline
        if ((line_begin > 0 || line_starting) && all_spaces(data, line_begin)) data.resize(line_begin);
      }
      text(data);
      advance(open);
      const int tag_line = line_;
      advance(open + 2 + (sign ? 1 : 0));
      size_t end = pos_;
      if (type == '#') {
        const size_t close = s_.find("#}", pos_);
        if (close == std::string::npos) fail(tag_line, "unterminated comment '{#' (no '#}')");
        end = close + 2;
        if (close > pos_ && s_[close - 1] == '-') end = skip_spaces(s_, end);
        else if (s_.compare(end, 1, "\n") == 0) ++end;
      } else {
        end = tag(type == '{', tag_line);
      }
      line_starting = end > 0 && s_[end - 1] == '\n';
      advance(end);
    }
    tokens_.push_back({TokenKind::kEnd, "", {}, line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(int line, const std::string& message) const {
    throw SyntaxError(name_ + ":" + std::to_string(line) + ": " + message);
  }

  void advance(size_t to) {
    line_ += static_cast<int>(std::count(s_.begin() + static_cast<std::ptrdiff_t>(pos_), s_.begin() + static_cast<std::ptrdiff_t>(to), '\n'));
    pos_ = to;
  }

  void text(const std::string& data) {
    if (!data.empty()) tokens_.push_back({TokenKind::kText, data, {}, line_});
  }

  void push(TokenKind kind, std::string text, size_t to) {
    tokens_.push_back({kind, std::move(text), {}, line_});
    advance(to);
  }

  // The tokens of a {{ ... }} or {% ... %} tag from pos_; returns where the text after it starts.
  size_t tag(bool variable, int tag_line) {
    tokens_.push_back({variable ? TokenKind::kVariableBegin : TokenKind::kBlockBegin, "", {}, tag_line});
    int depth = 0;  // open brackets: "}}" inside {{ {'a': {'b': 1}} }} closes dicts, as in jinja2
    while (true) {
      advance(skip_spaces(s_, pos_));
      if (pos_ >= s_.size()) {
        fail(tag_line, variable ? "unterminated '{{' (no '}}' before the end of the template)"
                                : "unterminated '{%' (no '%}' before the end of the template)");
      }
      const size_t p = pos_;
      if (depth == 0) {
        const char* close = variable ? "}}" : "%}";
        if (starts_with(s_, p, "-") && starts_with(s_, p + 1, close)) {
          tokens_.push_back({variable ? TokenKind::kVariableEnd : TokenKind::kBlockEnd, "", {}, line_});
          return skip_spaces(s_, p + 3);
        }
        if (!variable && starts_with(s_, p, "+%}")) {
          tokens_.push_back({TokenKind::kBlockEnd, "", {}, line_});
          return p + 3;
        }
        if (starts_with(s_, p, close)) {
          tokens_.push_back({variable ? TokenKind::kVariableEnd : TokenKind::kBlockEnd, "", {}, line_});
          return !variable && s_.compare(p + 2, 1, "\n") == 0 ? p + 3 : p + 2;  // trim_blocks
        }
      }
      const char c = s_[p];
      if (c == '\'' || c == '"') {
        string_literal(c);
      } else if (is_digit(c)) {
        number();
      } else if (is_name_start(c)) {
        size_t e = p;
        while (e < s_.size() && is_name_char(s_[e])) ++e;
        push(TokenKind::kName, s_.substr(p, e - p), e);
      } else {
        static const char* const kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~",
                                                 "[",  "]",  "(",  ")",  "{",  "}",  "<", ">", "=", ".", ":", "|", ","};
        const char* found = nullptr;
        for (const char* op : kOperators) {
          if (starts_with(s_, p, op)) {
            found = op;
            break;
          }
        }
        if (!found) {
          fail(line_, "unexpected character '" + s_.substr(p, unicode::decode_at(s_, p).length) + "' in a tag");
        }
        if (std::strchr("([{", found[0]) && found[1] == 0) ++depth;
        if (std::strchr(")]}", found[0]) && found[1] == 0) depth = std::max(0, depth - 1);
        push(TokenKind::kOperator, found, p + std::strlen(found));
      }
    }
  }

  void number() {
    const size_t p = pos_;
    size_t e = p;
    auto digits = [&] {
      while (e < s_.size() && (is_digit(s_[e]) || (s_[e] == '_' && e + 1 < s_.size() && is_digit(s_[e + 1])))) ++e;
    };
    digits();
    bool is_float = false;
    if (e + 1 < s_.size() && s_[e] == '.' && is_digit(s_[e + 1])) {
      ++e;
      digits();
      is_float = true;
    }
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t x = e + 1;
      if (x < s_.size() && (s_[x] == '+' || s_[x] == '-')) ++x;
      if (x < s_.size() && is_digit(s_[x])) {
        e = x;
        digits();
        is_float = true;
      }
    }
    std::string text = s_.substr(p, e - p);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Token t{TokenKind::kNumber, text, {}, line_};
    try {
      t.number = is_float ? Value(std::stod(text)) : Value(static_cast<int64_t>(std::stoll(text)));
    } catch (const std::out_of_range&) {
      fail(line_, "number " + text + " is out of range");
    }
    tokens_.push_back(std::move(t));
    advance(e);
  }

  // A quoted string with Python's escapes (jinja2 decodes them with "unicode-escape").
  void string_literal(char quote) {
    // The one-letter escapes; a backslash at the end of a line joins the lines.
    static constexpr Escape kPythonEscapes[] = {{'n', "\n"}, {'t', "\t"}, {'r', "\r"}, {'\\', "\\"}, {'\'', "'"}, {'"', "\""},
                                                {'a', "\a"}, {'b', "\b"}, {'f', "\f"}, {'v', "\v"}, {'\n', ""}};
    const int start_line = line_;
    size_t i = pos_ + 1;
    std::string value;
    auto hex_escape = [&](size_t digits) {
      if (i + digits > s_.size()) fail(line_, "truncated \\x, \\u or \\U escape in a string");
      uint32_t code = 0;
      for (size_t k = 0; k < digits; ++k) {
        const char h = s_[i + k];
        const int v = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (v < 0) fail(line_, "truncated \\x, \\u or \\U escape in a string");
        code = code * 16 + static_cast<uint32_t>(v);
      }
      if (code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) fail(line_, "escape of an invalid code point in a string");
      i += digits;
      unicode::append_utf8(value, code);
    };
    while (true) {
      if (i >= s_.size()) fail(start_line, std::string("unterminated string (no closing ") + quote + ")");
      const char c = s_[i];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++i;
        continue;
      }
      if (i + 1 >= s_.size()) fail(start_line, std::string("unterminated string (no closing ") + quote + ")");
      const char e = s_[i + 1];
      i += 2;
      if (const char* escaped = find_escape(kPythonEscapes, static_cast<unsigned char>(e))) {
        value += escaped;
        continue;
      }
      switch (e) {
        case 'x': hex_escape(2); break;
        case 'u': hex_escape(4); break;
        case 'U': hex_escape(8); break;
        case 'N': fail(line_, "\\N{...} escapes in strings are not supported");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t code = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < s_.size() && s_[i] >= '0' && s_[i] <= '7'; ++k) code = code * 8 + static_cast<uint32_t>(s_[i++] - '0');
            unicode::append_utf8(value, code);
          } else {
            value += '\\';  // Python keeps unknown escapes as they are
            value += e;
          }
      }
    }
    tokens_.push_back({TokenKind::kString, std::move(value), {}, start_line});
    advance(i + 1);
  }

  std::string s_;
  const std::string& name_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int line_ = 1;
};

// Recursive descent over the tokens, following jinja2/parser.py's grammar.
class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name) : t_(std::move(tokens)), name_(name) {}

  Body parse() {
    std::string end;
    Body body = parse_body({}, &end, "", 0);
    return body;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& message) const {
    throw SyntaxError(name_ + ":" + std::to_string(line) + ": " + message);
  }
  const Token& peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(i_++, t_.size() - 1)]; }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kOperator && peek(ahead).text == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).text == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    ++i_;
    return true;
  }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case TokenKind::kText: return "text";
      case TokenKind::kVariableBegin: return "'{{'";
      case TokenKind::kVariableEnd: return "'}}'";
      case TokenKind::kBlockBegin: return "'{%'";
      case TokenKind::kBlockEnd: return "'%}'";
      case TokenKind::kName: return "'" + t.text + "'";
      case TokenKind::kString: return "a string";
      case TokenKind::kNumber: return "'" + t.text + "'";
      case TokenKind::kOperator: return "'" + t.text + "'";
      case TokenKind::kEnd: return "the end of the template";
    }
    return "?";
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(peek().line, std::string("expected '") + op + "', got " + describe(peek()));
  }
  std::string expect_name(const char* what) {
    if (peek().kind != TokenKind::kName) fail(peek().line, std::string("expected ") + what + ", got " + describe(peek()));
    return next().text;
  }
  void expect_block_end(const std::string& statement) {
    if (peek().kind != TokenKind::kBlockEnd) {
      fail(peek().line, "expected the end of the '" + statement + "' tag ('%}'), got " + describe(peek()));
    }
    ++i_;
  }

  // The body of a `{% tag %}...{% endtag %}` block: from the end of the opening tag (expected
  // here) through the closing tag.
  Body parse_block(const std::string& tag, int line) {
    expect_block_end(tag);
    std::string end;
    Body body = parse_body({"end" + tag}, &end, "{% " + tag + " %}", line);
    ++i_;
    expect_block_end("end" + tag);
    return body;
  }

  // Nodes up to a {% tag %} named in `ends` (returned in *end, the index left on its name), or
  // the end of the template when `ends` is empty.
  Body parse_body(const std::vector<std::string>& ends, std::string* end, const std::string& opened, int opened_line) {
    Body body;
    while (true) {
      const Token& t = peek();
      switch (t.kind) {
        case TokenKind::kEnd:
          if (!ends.empty()) {
            fail(opened_line, "'" + opened + "' is never closed (no {% " + ends.back() + " %} before the end of the template)");
          }
          return body;
        case TokenKind::kText: {
          Node n;
          n.kind = NodeKind::kText;
          n.line = t.line;
          n.text = t.text;
          body.push_back(std::move(n));
          ++i_;
          break;
        }
        case TokenKind::kVariableBegin: {
          ++i_;
          Node n;
          n.kind = NodeKind::kOutput;
          n.line = t.line;
          n.expr = parse_tuple(true);
          if (peek().kind != TokenKind::kVariableEnd) fail(peek().line, "expected '}}', got " + describe(peek()));
          ++i_;
          body.push_back(std::move(n));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& keyword = peek(1);
          if (keyword.kind != TokenKind::kName) fail(keyword.line, "expected a statement name after '{%', got " + describe(keyword));
          if (std::find(ends.begin(), ends.end(), keyword.text) != ends.end()) {
            ++i_;
            *end = keyword.text;
            return body;
          }
          i_ += 2;
          body.push_back(statement(keyword, ends, opened, opened_line));
          break;
        }
        case TokenKind::kVariableEnd:
        case TokenKind::kBlockEnd:
        case TokenKind::kName:
        case TokenKind::kString:
        case TokenKind::kNumber:
        case TokenKind::kOperator: fail(t.line, "unexpected " + describe(t));
      }
    }
  }

  Node statement(const Token& keyword, const std::vector<std::string>& outer_ends, const std::string& opened,
                 int opened_line) {
    Depth depth(*this, keyword.line);
    const std::string& k = keyword.text;
    Node n;
    n.line = keyword.line;
    if (k == "for") {
      parse_for(n);
    } else if (k == "if") {
      parse_if(n);
    } else if (k == "set") {
      parse_set(n);
    } else if (k == "macro") {
      parse_macro(n);
    } else if (k == "filter") {
      n.kind = NodeKind::kFilterBlock;
      n.expr = parse_filters(nullptr, /*first_without_pipe=*/true);
      n.body = parse_block("filter", n.line);
    } else if (k == "generation") {
      n.kind = NodeKind::kGeneration;
      n.body = parse_block("generation", n.line);
    } else if (k == "break" || k == "continue") {
      if (loops_ == 0) fail(n.line, "'" + k + "' outside a for loop");
      n.kind = k == "break" ? NodeKind::kBreak : NodeKind::kContinue;
      expect_block_end(k);
    } else {
      unknown_statement(n.line, k, outer_ends, opened, opened_line);
    }
    return n;
  }

  void parse_for(Node& n) {
    std::string end;
    n.kind = NodeKind::kFor;
    n.targets.push_back(expect_name("a loop variable"));
    while (skip_op(",")) n.targets.push_back(expect_name("a loop variable"));
    if (!skip_name("in")) fail(peek().line, "expected 'in' in the 'for' tag, got " + describe(peek()));
    n.expr = parse_tuple(false);
    if (skip_name("if")) n.condition = parse_expression(true);
    if (is_name("recursive")) fail(peek().line, "recursive for loops are not supported");
    expect_block_end("for");
    ++loops_;
    n.body = parse_body({"else", "endfor"}, &end, "{% for %}", n.line);
    if (end == "else") {
      ++i_;
      expect_block_end("else");
      n.else_body = parse_body({"endfor"}, &end, "{% for %}", n.line);
    }
    --loops_;
    ++i_;
    expect_block_end("endfor");
  }

  void parse_if(Node& n) {
    std::string end;
    n.kind = NodeKind::kIf;
    ExprPtr condition = parse_tuple(true);
    expect_block_end("if");
    while (true) {
      Body body = parse_body({"elif", "else", "endif"}, &end, "{% if %}", n.line);
      n.branches.emplace_back(std::move(condition), std::move(body));
      ++i_;
      if (end == "elif") {
        condition = parse_tuple(true);
        expect_block_end("elif");
        continue;
      }
      if (end == "else") {
        expect_block_end("else");
        n.else_body = parse_body({"endif"}, &end, "{% if %}", n.line);
        ++i_;
      }
      expect_block_end("endif");
      break;
    }
  }

  void parse_set(Node& n) {
    n.targets.push_back(expect_name("a variable name"));
    if (skip_op(".")) {
      n.attribute = expect_name("an attribute name");
    } else {
      while (skip_op(",")) n.targets.push_back(expect_name("a variable name"));
    }
    if (skip_op("=")) {
      n.kind = NodeKind::kSet;
      n.expr = parse_tuple(true);
      expect_block_end("set");
    } else {
      if (n.targets.size() != 1 || !n.attribute.empty()) fail(n.line, "a {% set %} block assigns one variable");
      if (is_op("|")) fail(peek().line, "filters on {% set %} blocks are not supported");
      n.kind = NodeKind::kSetBlock;
      n.body = parse_block("set", n.line);
    }
  }

  void parse_macro(Node& n) {
    n.kind = NodeKind::kMacro;
    n.targets.push_back(expect_name("a macro name"));
    expect_op("(");
    parse_comma_separated(")", [&] {
      std::string parameter = expect_name("a parameter name");
      ExprPtr fallback;
      if (skip_op("=")) fallback = parse_expression(true);
      n.parameters.emplace_back(std::move(parameter), std::move(fallback));
    });
    const int loops = loops_;
    loops_ = 0;  // a loop around the definition is not around the body: break there is an error
    n.body = parse_block("macro", n.line);
    loops_ = loops;
  }

  // A closing tag nothing opened, or a statement jinja2 has (unsupported) or has not (unknown).
  [[noreturn]] void unknown_statement(int line, const std::string& k, const std::vector<std::string>& outer_ends,
                                      const std::string& opened, int opened_line) {
    static const std::vector<std::string> kJinja = {"raw",  "include", "import",     "from", "extends", "block",
                                                    "call", "with",    "autoescape", "do",   "trans"};
    const bool closing = std::find(outer_ends.begin(), outer_ends.end(), k) == outer_ends.end() &&
                         (k.rfind("end", 0) == 0 || k == "else" || k == "elif");
    if (closing) {
      fail(line, "unexpected {% " + k + " %}" +
                     (opened.empty() ? std::string(" (nothing to close)")
                                     : " (the innermost open tag is the " + opened + " at line " +
                                           std::to_string(opened_line) + ")"));
    }
    fail(line, std::string(std::find(kJinja.begin(), kJinja.end(), k) != kJinja.end() ? "unsupported" : "unknown") +
                   " statement '" + k + "' (chat templates here support for, if, set, macro, filter, " +
                   "generation, break and continue)");
  }

  ExprPtr make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // Items up to the operator `close` (the opening one already read), each read by `item` and
  // followed by a comma or `close`; a trailing comma is allowed, as in Python.
  template <typename Item>
  void parse_comma_separated(const char* close, Item item) {
    while (!skip_op(close)) {
      item();
      if (!is_op(close)) expect_op(",");
    }
  }

  // An expression, or a tuple of them ("a, b"): jinja2's parse_tuple.
  ExprPtr parse_tuple(bool with_conditional) {
    const int line = peek().line;
    ExprPtr first = parse_expression(with_conditional);
    if (!is_op(",")) return first;
    auto tuple = make(ExprKind::kTuple, line);
    tuple->items.push_back(std::move(first));
    while (skip_op(",")) {
      if (peek().kind == TokenKind::kBlockEnd || peek().kind == TokenKind::kVariableEnd || is_name("if")) break;
      tuple->items.push_back(parse_expression(with_conditional));
    }
    return tuple;
  }

  ExprPtr parse_expression(bool with_conditional) {
    Depth depth(*this, peek().line);
    return with_conditional ? parse_conditional() : parse_or();
  }

  ExprPtr parse_conditional() {
    Chain chain(*this);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const int line = next().line;
      deepen(line);
      auto c = make(ExprKind::kConditional, line);
      c->a = parse_or();
      c->b = std::move(e);
      if (skip_name("else")) c->c = parse_conditional();
      e = std::move(c);
    }
    return e;
  }

  // One precedence level of left-associative operators, `operand (operator operand)*` as in
  // `a - b + c` or `a and b and c`: each operator found makes a `kind` node (its text in `name`)
  // of what stands before it and the operand after it.
  template <typename Operand>
  ExprPtr parse_left_associative(ExprKind kind, std::initializer_list<const char*> operators, Operand operand) {
    ExprPtr e = operand();
    auto at_operator = [&] {
      return std::any_of(operators.begin(), operators.end(), [&](const char* o) { return is_op(o) || is_name(o); });
    };
    while (at_operator()) {
      const Token& op = next();
      deepen(op.line);
      auto node = make(kind, op.line);
      node->name = op.text;
      node->a = std::move(e);
      node->b = operand();
      e = std::move(node);
    }
    return e;
  }

  ExprPtr parse_or() { return parse_left_associative(ExprKind::kOr, {"or"}, [this] { return parse_and(); }); }
  ExprPtr parse_and() { return parse_left_associative(ExprKind::kAnd, {"and"}, [this] { return parse_not(); }); }

  ExprPtr parse_not() {
    Depth depth(*this, peek().line);
    if (is_name("not")) {
      auto o = make(ExprKind::kNot, next().line);
      o->a = parse_not();
      return o;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = peek().line;
    ExprPtr first = parse_math1();
    auto c = make(ExprKind::kCompare, line);
    while (true) {
      std::string op;
      for (const char* o : {"==", "!=", "<", "<=", ">", ">="}) {
        if (is_op(o)) op = o;
      }
      if (!op.empty()) {
        ++i_;
      } else if (is_name("in")) {
        ++i_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        i_ += 2;
        op = "not in";
      } else {
        break;
      }
      c->ops.push_back(op);
      c->items.push_back(parse_math1());
    }
    if (c->ops.empty()) return first;
    c->a = std::move(first);
    return c;
  }

  ExprPtr parse_math1() { return parse_left_associative(ExprKind::kBinary, {"+", "-"}, [this] { return parse_concat(); }); }
  ExprPtr parse_concat() { return parse_left_associative(ExprKind::kBinary, {"~"}, [this] { return parse_math2(); }); }
  ExprPtr parse_math2() { return parse_left_associative(ExprKind::kBinary, {"*", "/", "//", "%"}, [this] { return parse_pow(); }); }
  ExprPtr parse_pow() { return parse_left_associative(ExprKind::kBinary, {"**"}, [this] { return parse_unary(true); }); }

  ExprPtr parse_unary(bool with_filter) {
    Depth depth(*this, peek().line);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& op = next();
      e = make(op.text == "-" ? ExprKind::kNegate : ExprKind::kPlus, op.line);
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expression(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case TokenKind::kName: {
        ++i_;
        auto e = make(ExprKind::kLiteral, t.line);
        if (t.text == "true" || t.text == "True") e->value = Value(true);
        else if (t.text == "false" || t.text == "False") e->value = Value(false);
        else if (t.text == "none" || t.text == "None") e->value = Value::none();
        else {
          e->kind = ExprKind::kName;
          e->name = t.text;
        }
        return e;
      }
      case TokenKind::kString: {
        std::string s;
        while (peek().kind == TokenKind::kString) s += next().text;  // adjacent literals join
        auto e = make(ExprKind::kLiteral, t.line);
        e->value = Value(std::move(s));
        return e;
      }
      case TokenKind::kNumber: {
        ++i_;
        auto e = make(ExprKind::kLiteral, t.line);
        e->value = t.number;
        return e;
      }
      case TokenKind::kOperator:
        if (t.text == "(") {
          ++i_;
          if (skip_op(")")) return make(ExprKind::kTuple, t.line);
          ExprPtr inner = parse_expression(true);
          if (is_op(",")) {
            auto tuple = make(ExprKind::kTuple, t.line);
            tuple->items.push_back(std::move(inner));
            while (skip_op(",")) {
              if (is_op(")")) break;
              tuple->items.push_back(parse_expression(true));
            }
            inner = std::move(tuple);
          }
          expect_op(")");
          return inner;
        }
        if (t.text == "[") {
          ++i_;
          auto list = make(ExprKind::kList, t.line);
          parse_comma_separated("]", [&] { list->items.push_back(parse_expression(true)); });
          return list;
        }
        if (t.text == "{") {
          ++i_;
          auto dict = make(ExprKind::kDict, t.line);
          parse_comma_separated("}", [&] {
            dict->items.push_back(parse_expression(true));
            expect_op(":");
            dict->items.push_back(parse_expression(true));
          });
          return dict;
        }
        break;
      case TokenKind::kText:
      case TokenKind::kVariableBegin:
      case TokenKind::kVariableEnd:
      case TokenKind::kBlockBegin:
      case TokenKind::kBlockEnd:
      case TokenKind::kEnd: break;
    }
    fail(t.line, "expected an expression, got " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    Chain chain(*this);
    while (true) {
      if (is_op(".") || is_op("[") || is_op("(")) deepen(peek().line);
      if (is_op(".")) {
        const int line = next().line;
        if (peek().kind == TokenKind::kNumber && peek().number.kind() == Kind::kInt) {
          auto s = make(ExprKind::kSubscript, line);
          s->a = std::move(e);
          s->b = make(ExprKind::kLiteral, line);
          s->b->value = next().number;
          e = std::move(s);
          continue;
        }
        auto a = make(ExprKind::kAttribute, line);
        a->name = expect_name("an attribute name after '.'");
        a->a = std::move(e);
        e = std::move(a);
      } else if (is_op("[")) {
        const int line = next().line;
        ExprPtr start, stop, step;
        if (!is_op(":")) start = parse_expression(true);
        if (skip_op(":")) {
          auto s = make(ExprKind::kSlice, line);
          if (!is_op("]") && !is_op(":")) stop = parse_expression(true);
          if (skip_op(":") && !is_op("]")) step = parse_expression(true);
          s->a = std::move(e);
          s->items.push_back(std::move(start));
          s->items.push_back(std::move(stop));
          s->items.push_back(std::move(step));
          e = std::move(s);
        } else {
          auto s = make(ExprKind::kSubscript, line);
          s->a = std::move(e);
          s->b = std::move(start);
          e = std::move(s);
        }
        expect_op("]");
      } else if (is_op("(")) {
        e = parse_call(std::move(e), ExprKind::kCall, "");
      } else {
        return e;
      }
    }
  }

  // (arguments) after `callee`, into a kCall, kFilter or kTest node.
  ExprPtr parse_call(ExprPtr callee, ExprKind kind, std::string name) {
    const int line = peek().line;
    auto call = make(kind, line);
    call->a = std::move(callee);
    call->name = std::move(name);
    expect_op("(");
    parse_comma_separated(")", [&] {
      if (is_op("*") || is_op("**")) fail(peek().line, "*args and **kwargs in calls are not supported");
      if (peek().kind == TokenKind::kName && is_op("=", 1)) {
        std::string keyword = next().text;
        ++i_;
        call->keywords.emplace_back(std::move(keyword), parse_expression(true));
      } else {
        if (!call->keywords.empty()) fail(peek().line, "a positional argument after a keyword argument");
        call->items.push_back(parse_expression(true));
      }
    });
    return call;
  }

  std::string dotted_name(const char* what) {
    std::string name = expect_name(what);
    while (is_op(".") && peek(1).kind == TokenKind::kName) {
      i_ += 1;
      name += "." + next().text;
    }
    return name;
  }

  // "| name(args) | ..." after `input` (null for a {% filter %} block's input).
  ExprPtr parse_filters(ExprPtr input, bool first_without_pipe) {
    Chain chain(*this);
    while (first_without_pipe || skip_op("|")) {
      first_without_pipe = false;
      const int line = peek().line;
      deepen(line);
      const std::string name = dotted_name("a filter name");
      if (!filters().count(name)) fail(line, unknown_filter_message(name));
      if (is_op("(")) {
        input = parse_call(std::move(input), ExprKind::kFilter, name);
      } else {
        auto f = make(ExprKind::kFilter, line);
        f->a = std::move(input);
        f->name = name;
        input = std::move(f);
      }
      input->line = line;
    }
    return input;
  }

  ExprPtr parse_filter_expression(ExprPtr e) {
    Chain chain(*this);
    while (true) {
      if (is_op("|") || is_name("is") || is_op("(")) deepen(peek().line);
      if (is_op("|")) {
        e = parse_filters(std::move(e), false);
      } else if (is_name("is")) {
        const int line = next().line;
        const bool negated = skip_name("not");
        const std::string name = dotted_name("a test name after 'is'");
        if (!tests().count(name)) fail(line, unknown_test_message(name));
        ExprPtr test;
        if (is_op("(")) {
          test = parse_call(std::move(e), ExprKind::kTest, name);
        } else {
          test = make(ExprKind::kTest, line);
          test->a = std::move(e);
          test->name = name;
          // jinja2 takes one argument without parentheses: "is divisibleby 3", "is sameas none".
          const Token& t = peek();
          const bool argument = (t.kind == TokenKind::kName || t.kind == TokenKind::kString || t.kind == TokenKind::kNumber ||
                                 is_op("(") || is_op("[") || is_op("{")) &&
                                !is_name("else") && !is_name("or") && !is_name("and");
          if (argument) {
            if (is_name("is")) fail(t.line, "tests cannot be chained with 'is'");
            test->items.push_back(parse_postfix(parse_primary()));
          }
        }
        test->negated = negated;
        test->line = line;
        e = std::move(test);
      } else if (is_op("(")) {
        e = parse_call(std::move(e), ExprKind::kCall, "");
      } else {
        return e;
      }
    }
  }

  // Bounds the recursion of nested brackets, operators and statements: deep nesting is an
  // error, not a stack overflow.
  //
  // A chain of operators, filters, attributes or conditionals ('a'|upper|upper|..., a ~ b ~ ...)
  // is parsed by a loop but makes a tree as deep as the chain, which rendering (and freeing)
  // walks recursively: each link deepens too, until the scope that holds the chain ends.
  static constexpr int kMaxDepth = 200;
  void deepen(int line) {
    if (++depth_ > kMaxDepth) fail(line, "nested more than " + std::to_string(kMaxDepth) + " levels deep");
  }
  // The scope of a chain: the depth its links added ends with it.
  struct Chain {
    explicit Chain(Parser& p) : p_(p), saved_(p.depth_) {}
    ~Chain() { p_.depth_ = saved_; }
    Parser& p_;
    int saved_;
  };
  struct Depth : Chain {
    Depth(Parser& p, int line) : Chain(p) { p.deepen(line); }
  };

  std::vector<Token> t_;
  const std::string& name_;
  size_t i_ = 0;
  int loops_ = 0;
  int depth_ = 0;  // for loops around the statement being parsed (break and continue need one)
};

}  // namespace

Body parse_template(const std::string& source, const std::string& name) {
  return Parser(Lexer(source, name).run(), name).parse();
}

}  // namespace zoo::jinja
