#include "core/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdexcept>

#include "core/unicode.h"

namespace zoo {
namespace {

// Oniguruma's \w (Unicode's "word" class of UTS #18) as PCRE2 properties.
const char* kWordProperties = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}";

[[noreturn]] void refuse(const std::string& where, const std::string& pattern, const std::string& what) {
  throw std::runtime_error(where + ": pattern '" + pattern + "': " + what +
                           " has no exact PCRE2 equivalent and is not supported");
}

// Per-thread match state: one (start, end) pair is all find_all needs, and a JIT stack larger
// than PCRE2's 32 KiB default so lookaheads over long whitespace runs cannot exhaust it.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

std::string oniguruma_to_pcre2(const std::string& p, const std::string& where) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      switch (e) {
        case 's': out += "\\p{White_Space}"; break;
        case 'S': out += "\\P{White_Space}"; break;
        case 'w':
          out += in_class ? std::string(kWordProperties) : "[" + std::string(kWordProperties) + "]";
          break;
        case 'W':
          if (in_class) refuse(where, p, "\\W inside a character class");
          out += "[^" + std::string(kWordProperties) + "]";
          break;
        case 'h': out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]"; break;
        case 'H':
          if (in_class) refuse(where, p, "\\H inside a character class");
          out += "[^0-9a-fA-F]";
          break;
        case 'b':
        case 'B':
          if (!in_class) refuse(where, p, std::string("the word boundary \\") + e);
          out += '\\';
          out += e;
          break;
        default:
          out += '\\';
          out += e;
      }
      continue;
    }
    if (in_class) {
      if (c == ']') {
        in_class = false;
      } else if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') {
        refuse(where, p, "class intersection &&");
      } else if (c == '[') {
        // PCRE2 reads '[' inside a class literally unless it opens a POSIX class; Oniguruma
        // opens a nested class.
        if (i + 1 >= p.size() || p[i + 1] != ':') refuse(where, p, "a nested character class");
        const size_t close = p.find(":]", i + 2);
        if (close == std::string::npos) refuse(where, p, "an unterminated POSIX class");
        out.append(p, i, close + 2 - i);
        i = close + 1;
        continue;
      }
      out += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal in both engines.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == '(' && i + 2 < p.size() && p[i + 1] == '?') {
      // Inline options (?imx-imx) or (?imx-imx:...): Ruby's m is PCRE2's s.
      size_t j = i + 2;
      while (j < p.size() && (p[j] == 'i' || p[j] == 'm' || p[j] == 'x' || p[j] == '-')) ++j;
      if (j > i + 2 && j < p.size() && (p[j] == ':' || p[j] == ')')) {
        out += "(?";
        for (size_t k = i + 2; k < j; ++k) out += p[k] == 'm' ? 's' : p[k];
        i = j - 1;
        continue;
      }
    }
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& oniguruma_pattern, const std::string& where) : pattern_(oniguruma_pattern) {
  compile(oniguruma_to_pcre2(oniguruma_pattern, where), where);
}

Regex Regex::literal(const std::string& literal, const std::string& where) {
  Regex r;
  r.pattern_ = literal;
  // \Q...\E quotes everything up to a literal "\E", which is split off and escaped itself.
  std::string quoted;
  size_t start = 0;
  while (true) {
    const size_t e = literal.find("\\E", start);
    quoted += "\\Q" + literal.substr(start, e == std::string::npos ? std::string::npos : e - start) + "\\E";
    if (e == std::string::npos) break;
    quoted += "\\\\E";
    start = e + 2;
  }
  r.compile(quoted, where);
  return r;
}

void Regex::compile(const std::string& pcre2_pattern, const std::string& where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre2_pattern.data()), pcre2_pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, nullptr);
  if (code == nullptr) {
    throw std::runtime_error(where + ": pattern '" + pattern_ + "' does not compile: " + pcre2_message(error) +
                             " (at offset " + std::to_string(offset) + " of its PCRE2 form '" + pcre2_pattern + "')");
  }
  // JIT where the platform supports it; the interpreter gives the same matches otherwise.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = std::shared_ptr<void>(code, [](void* c) { pcre2_code_free(static_cast<pcre2_code*>(c)); });
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(const std::string& text) const {
  auto& state = match_state();
  const auto* code = static_cast<const pcre2_code*>(code_.get());
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::vector<std::pair<size_t, size_t>> matches;
  size_t search_from = 0;
  bool have_previous = false;
  size_t previous_end = 0;
  while (search_from <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw std::runtime_error("pattern '" + pattern_ + "': matching failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (begin == end) {
      search_from = end < text.size() ? end + unicode::decode_at(text, end).length : end + 1;
      if (have_previous && previous_end == end) continue;
    } else {
      search_from = end;
    }
    have_previous = true;
    previous_end = end;
    matches.emplace_back(begin, end);
  }
  return matches;
}

std::vector<MatchSpan> Regex::spans(const std::string& text) const {
  if (text.empty()) return {{0, 0, false}};
  std::vector<MatchSpan> out;
  size_t previous = 0;
  for (const auto& [begin, end] : find_all(text)) {
    if (previous != begin) out.push_back({previous, begin, false});
    out.push_back({begin, end, true});
    previous = end;
  }
  if (previous != text.size()) out.push_back({previous, text.size(), false});
  return out;
}

}  // namespace zoo
