// The function finder's fixture (tests/limits.py --self-test; never compiled): C++ that hides
// braces in comments, literals, raw strings, directives, tables, lambdas and initializer lists.
// expect: braces_in_literals line 52, 12 lines
// expect: twice line 67, 5 lines
// expect: twice line 73, 4 lines
// expect: trailing line 78, 3 lines
// expect: halve line 82, 6 lines
// expect: adder line 89, 3 lines
// expect: vectorized line 93, 3 lines
// expect: with_default_braces line 97, 3 lines
// expect: lambdas line 101, 18 lines
// expect: Box::get line 130, 1 line
// expect: Widget::size line 136, 1 line
// expect: Widget::operator== line 140, 1 line
// expect: Widget::count line 141, 1 line
// expect: Widget::Part::weight line 144, 3 lines
// expect: Widget::Part::peek line 147, 1 line
// expect: Widget::Part::take line 148, 1 line
// expect: Widget::Widget line 157, 6 lines
// expect: Widget::~Widget line 164, 1 line
// expect: Call::operator() line 167, 1 line
// expect: Call::operator bool line 168, 1 line
// expect: c_entry line 172, 3 lines

#include <string>  // { an include's braces are not code
#define OPEN_BRACE {
#define TWO_LINES(x) \
  do { (x); } while (0)

namespace zoo::fixture {

/* A block comment with a body in it: void hidden() { return; } */
// and a line comment with one: void hidden() {

enum class Kind { kA, kB };

struct Table {
  const char* name;
  int (*apply)(int);
};

// A field table: a variable's value, not a function, whatever lambdas it holds.
const Table kTable[] = {
    {"one", [](int x) { return x + 1; }},
    {"two", [](int x) {
       return x + 2;
     }},
};

namespace {

int braces_in_literals() {
  const std::string a = "}}} \" {";
  const char b = '{';
  const char c[] = {'\'', '{'};
  const long d = 1'000 + '}';
  const std::string e = R"(a } in a raw string)";
  const std::string f = R"json({"key": ")\"}"})json";
  const std::string g = R"x(
    } a raw string over lines, with )" inside
  )x";
  return a.size() + b + c + d + e.size() + f.size() + g.size();  // }
}

}  // namespace

template <typename T>
T
twice(T x) {
  return x + x;
}

template <>
int twice<int>(int x) {
  return x * 2;
}

auto trailing(int x) -> std::pair<int, int> {
  return {x, x};
}

template <typename T>
T halve(T x)
  requires std::integral<T>
{
  return x / 2;
}

std::function<int(int)> adder(int n) {
  return [n](int x) { return x + n; };
}

__attribute__((target("avx2"))) inline int vectorized(int x) {
  return x;
}

void with_default_braces(std::vector<int> v = {}, Kind k = Kind{}) noexcept(true) {
  v.push_back(static_cast<int>(k));
}

int lambdas(std::vector<int> values) {
  auto add = [](int a, int b) { return a + b; };
  auto fold = [&, seed = std::vector<int>{1, 2}](int start) -> int {
    int total = start;
    for (int v : values) {
      total = add(total, v);
      auto inner = [total]() mutable {
        struct Local {
          int get() const { return 1; }
        };
        return total + Local{}.get();
      };
      total = inner();
    }
    return total + seed[0];
  };
  return fold(0);
}

template <typename T>
class Base {
 public:
  virtual ~Base() = default;
  virtual int size() const = 0;
  virtual int count() const = 0;
};

template <class T>
struct Box {
  T get() const { return value; }
  T value;
};

class Widget final : public Base<int> {
 public:
  int size() const override { return a_; }
  explicit Widget(int a);
  Widget(const Widget&) = delete;
  ~Widget() override;
  bool operator==(const Widget& o) const { return a_ == o.a_; }
  int count() const final { return 0; }

  struct Part {
    int weight() const noexcept {
      return 2;
    }
    int peek() const& { return 1; }
    int take() && { return 2; }
  };

 private:
  int a_;
  std::vector<int> b_;
  int count_{0};
};

Widget::Widget(int a)
    : a_(a),
      b_{a, 2},
      count_{} {
  b_.push_back(a);
}

Widget::~Widget() {}

struct Call {
  int operator()(int x) const { return x; }
  explicit operator bool() const { return true; }
};

extern "C" {
int c_entry(int x) {
  return x;
}
}

}  // namespace zoo::fixture
