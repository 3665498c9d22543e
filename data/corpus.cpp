#include "data/corpus.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <cctype>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "core/files.h"

namespace zoo {
namespace {

int indent_of(const std::string& line) {
  int n = 0;
  for (char c : line) {
    if (c == ' ') ++n;
    else if (c == '\t') n += 8;
    else break;
  }
  return n;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// A heading over/underline: one punctuation character repeated (at least 3 times).
bool is_adornment(const std::string& t) {
  if (t.size() < 3) return false;
  static const std::string kChars = "=-~^\"'*+#`:._";
  if (kChars.find(t[0]) == std::string::npos) return false;
  return std::all_of(t.begin(), t.end(), [&](char c) { return c == t[0]; });
}

// Grid and simple table borders and rows.
bool is_table_line(const std::string& t) {
  if (t.size() >= 2 && (t[0] == '+' && (t[1] == '-' || t[1] == '='))) return true;
  if (t[0] == '|' && t.size() > 1 && t.back() == '|') return true;
  return t.size() >= 3 && t.find_first_not_of("= ") == std::string::npos;
}

// Directives whose indented body is prose worth keeping.
bool keeps_body(const std::string& name) {
  static const char* kProse[] = {"note", "warning", "seealso", "tip", "important", "attention",
                                 "caution", "hint", "admonition", "versionadded", "versionchanged",
                                 "deprecated", "deprecated-removed", "function", "method", "class",
                                 "attribute", "data", "exception", "module", "describe", "option",
                                 "envvar", "cmdoption", "decorator", "classmethod", "staticmethod",
                                 "glossary", "topic", "rubric", "impl-detail", "c:function",
                                 "c:type", "c:member", "c:macro", "c:var", "opcode", "pdbcommand",
                                 "coroutinefunction", "coroutinemethod", "abstractmethod"};
  for (const char* p : kProse)
    if (name == p) return true;
  return false;
}

// "* item", "- item", "#. item", "3. item", "(3) item" -> "item".
std::string strip_list_marker(const std::string& t) {
  size_t k = 0;
  if (t.size() > 1 && (t[0] == '*' || t[0] == '-' || t[0] == '+') && t[1] == ' ') k = 2;
  else if (t.rfind("#. ", 0) == 0) k = 3;
  else {
    size_t d = t[0] == '(' ? 1 : 0, e = d;
    while (e < t.size() && std::isdigit(static_cast<unsigned char>(t[e]))) ++e;
    if (e > d && e + 1 < t.size() && (t[e] == '.' || (d == 1 && t[e] == ')')) && t[e + 1] == ' ') k = e + 2;
  }
  return k > 0 ? trim(t.substr(k)) : t;
}

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The text of an interpreted span: "text <target>" -> text; "~a.b.c" -> c; "!x" -> x.
std::string span_text(std::string inner) {
  if (!inner.empty() && inner.back() == '>') {
    const auto open = inner.rfind('<');
    if (open != std::string::npos) {
      auto text = trim(inner.substr(0, open));
      inner = text.empty() ? inner.substr(open + 1, inner.size() - open - 2) : text;
    }
  }
  if (!inner.empty() && inner[0] == '!') inner.erase(0, 1);
  if (!inner.empty() && inner[0] == '~') {
    inner.erase(0, 1);
    const auto dot = inner.rfind('.');
    if (dot != std::string::npos && dot + 1 < inner.size()) inner = inner.substr(dot + 1);
  }
  return inner;
}

// Inline markup reduced to its text, in one left-to-right pass (std::regex recurses per
// character and overflows the stack on long paragraphs).
std::string inline_text(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const char c = s[i];
    if (c == '\\' && i + 1 < n) {  // escaped character
      out += s[i + 1];
      i += 2;
      continue;
    }
    if (c == '`' && i + 1 < n && s[i + 1] == '`') {  // ``literal``
      const auto close = s.find("``", i + 2);
      if (close != std::string::npos) {
        out += s.substr(i + 2, close - i - 2);
        i = close + 2;
        continue;
      }
    }
    if (c == ':' && (i == 0 || !is_word_char(s[i - 1]))) {  // :role:`text`
      size_t j = i + 1;
      while (j < n && (is_word_char(s[j]) || s[j] == ':' || s[j] == '-' || s[j] == '.')) {
        if (s[j] == ':' && j + 1 < n && s[j + 1] == '`') break;
        ++j;
      }
      if (j > i + 1 && j + 1 < n && s[j] == ':' && s[j + 1] == '`') {
        const auto close = s.find('`', j + 2);
        if (close != std::string::npos) {
          out += span_text(s.substr(j + 2, close - j - 2));
          i = close + 1;
          continue;
        }
      }
    }
    if (c == '`') {  // `text`, `text`_, `text <url>`__
      const auto close = s.find('`', i + 1);
      if (close != std::string::npos) {
        out += span_text(s.substr(i + 1, close - i - 1));
        i = close + 1;
        while (i < n && s[i] == '_') ++i;
        continue;
      }
    }
    if (c == '*') {  // **strong**, *emphasis*: drop the asterisks around a span
      const size_t stars = (i + 1 < n && s[i + 1] == '*') ? 2 : 1;
      const size_t start = i + stars;
      if (start < n && s[start] != ' ' && s[start] != '*' && (i == 0 || !is_word_char(s[i - 1]))) {
        const auto close = s.find(std::string(stars, '*'), start);
        if (close != std::string::npos && close > start && s[close - 1] != ' ') {
          out += s.substr(start, close - start);
          i = close + stars;
          continue;
        }
      }
    }
    if (c == '[' && i + 1 < n) {  // footnote references [1]_ and [#]_
      const auto close = s.find("]_", i + 1);
      if (close != std::string::npos && close - i <= 8 &&
          s.substr(i + 1, close - i - 1).find(' ') == std::string::npos) {
        while (!out.empty() && out.back() == ' ') out.pop_back();
        i = close + 2;
        continue;
      }
    }
    if (c == '|' && i + 1 < n && s[i + 1] != ' ') {  // |substitution|
      const auto close = s.find('|', i + 1);
      if (close != std::string::npos && close - i < 40 && s[close - 1] != ' ') {
        out += s.substr(i + 1, close - i - 1);
        i = close + 1;
        continue;
      }
    }
    out += c;
    ++i;
  }
  return out;
}

}  // namespace

std::string rst_to_text(const std::string& rst) {
  std::istringstream in(rst);
  std::string line, out, paragraph;
  int skip_indent = -1;      // > -1: dropping a block indented deeper than this
  bool literal_next = false;  // the paragraph ended with '::': an indented literal block follows
  int paragraph_indent = 0;
  auto flush = [&] {
    auto text = trim(paragraph);
    if (!text.empty()) {
      if (text.size() >= 2 && text.compare(text.size() - 2, 2, "::") == 0) {
        text.resize(text.size() - 2);
        text = trim(text);
        if (!text.empty() && text.back() != ':') text += ':';
        literal_next = true;
      }
      text = inline_text(text);
      if (!text.empty() && text != ":") out += text + "\n";
    }
    paragraph.clear();
  };
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string t = trim(line);
    const int indent = indent_of(line);
    if (skip_indent >= 0) {
      if (t.empty() || indent > skip_indent) continue;
      skip_indent = -1;
    }
    if (t.empty()) {
      flush();
      continue;
    }
    if (literal_next) {
      literal_next = false;
      if (indent > paragraph_indent) {
        skip_indent = paragraph_indent;
        continue;
      }
    }
    if (is_adornment(t)) {  // the heading text above it is a paragraph of its own
      flush();
      continue;
    }
    if (t.rfind(">>>", 0) == 0) {  // doctest: drop to the end of the block
      flush();
      skip_indent = indent - 1;
      continue;
    }
    if (is_table_line(t)) {
      flush();
      continue;
    }
    if (t.rfind("..", 0) == 0) {  // explicit markup: directive, comment, label, footnote
      flush();
      const auto colons = t.find("::");
      const std::string name = colons == std::string::npos ? "" : trim(t.substr(2, colons - 2));
      if (colons == std::string::npos || !keeps_body(name)) {
        skip_indent = indent;
        continue;
      }
      // Keep the argument (a signature, a title) as its own line, then the body as prose.
      const std::string argument = trim(t.substr(colons + 2));
      if (!argument.empty() && name.rfind("version", 0) != 0 && name.rfind("deprecated", 0) != 0) {
        out += inline_text(argument) + "\n";
      }
      continue;
    }
    if (line == "::" || t == "::") {
      flush();
      literal_next = true;
      continue;
    }
    const std::string item = strip_list_marker(t);
    if (item.size() != t.size() && item.rfind("..", 0) == 0) {  // a label or comment in a list item
      flush();
      continue;
    }
    if (item.size() != t.size() && !paragraph.empty()) flush();  // each list item is a paragraph
    if (paragraph.empty()) {
      paragraph_indent = indent;
      paragraph = item;  // list markers are markup, the rest is text
    } else {
      paragraph += " " + t;
    }
  }
  flush();
  return out;
}

std::string python_doc_sources() {
  for (const char* dir : {"/usr/share/doc/python3.11/html/_sources", "/usr/share/doc/python3/html/_sources"}) {
    if (std::filesystem::is_directory(dir)) return dir;
  }
  return "";
}

std::string default_corpus_path() {
  namespace fs = std::filesystem;
  if (const char* dir = std::getenv("ZOO_DATA_DIR"); dir && *dir) return (fs::path(dir) / "python-docs.txt").string();
  fs::path base;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) base = xdg;
  else if (const char* home = std::getenv("HOME"); home && *home) base = fs::path(home) / ".cache";
  else base = fs::temp_directory_path();
  return (base / "zoo" / "python-docs.txt").string();
}

int64_t build_default_corpus(const std::string& out) {
  namespace fs = std::filesystem;
  const std::string sources = python_doc_sources();
  if (sources.empty()) {
    throw std::runtime_error(
        "default corpus: the Python documentation sources are not installed "
        "(/usr/share/doc/python3.11/html/_sources); install Debian's python3.11-doc "
        "(scripts/setup.sh does) or pass your own text with --data");
  }
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(sources)) {
    if (e.is_regular_file() && e.path().string().size() > 8 &&
        e.path().string().compare(e.path().string().size() - 8, 8, ".rst.txt") == 0) {
      files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  std::string text;
  int64_t documents = 0;
  for (const auto& f : files) {
    auto doc = rst_to_text(read_file(f));
    if (doc.empty()) continue;
    text += doc + "\n";  // a blank line ends the document
    ++documents;
  }
  if (documents == 0) throw std::runtime_error("default corpus: no text found under " + sources);
  // A bare file name has no parent to create (create_directories("") fails with EINVAL).
  if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
  write_file_atomically(out, text);
  return documents;
}

std::string ensure_default_corpus() {
  const std::string path = default_corpus_path();
  if (!std::filesystem::exists(path)) build_default_corpus(path);
  return path;
}

}  // namespace zoo
