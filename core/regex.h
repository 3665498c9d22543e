#pragma once
// Regular expressions as Hugging Face tokenizers writes them. The tokenizers library compiles
// its patterns (GPT-2's and LLaMA-3's pre-tokenizer splits, Split and Replace patterns) with
// Oniguruma in Ruby syntax; zoo runs them on PCRE2 (UTF + Unicode properties, JIT-compiled
// where the platform has it), after translating the few escapes whose meaning differs:
//   \s \S     Oniguruma: the White_Space property; PCRE2 adds U+180E  -> \p{White_Space}
//   \w \W     Oniguruma: Alphabetic, marks, decimal digits, connector punctuation, Join_Control
//             (PCRE2 10.42: letters, numbers, '_')                  -> those properties
//   \h \H     Oniguruma: a hexadecimal digit (PCRE2: horizontal space) -> [0-9a-fA-F]
//   ^ $       Ruby: always line anchors                             -> PCRE2_MULTILINE
//   (?m)      Ruby: '.' matches a newline                           -> (?s)
// Constructs that have no faithful translation (\W or \H inside a class, \b, \B, class
// intersection &&) are refused rather than approximated.

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zoo {

// One match or gap of a pattern in a text: bytes [begin, end), and whether it is a match.
struct MatchSpan {
  size_t begin;
  size_t end;
  bool is_match;
};

class Regex {
 public:
  // Throws std::runtime_error "<where>: ..." for a pattern that does not compile or that uses
  // a refused construct.
  Regex(const std::string& oniguruma_pattern, const std::string& where);
  // A pattern matching `literal` exactly.
  static Regex literal(const std::string& literal, const std::string& where);

  // The successive non-overlapping leftmost matches in `text` (valid UTF-8), as byte ranges.
  // Like the Rust regex/onig iterators tokenizers uses: after an empty match the search moves
  // one character on, and an empty match right where the previous match ended is skipped.
  std::vector<std::pair<size_t, size_t>> find_all(const std::string& text) const;

  // The whole text cut into matches and the gaps between them, in order (tokenizers'
  // Pattern::find_matches): an empty text is one empty gap.
  std::vector<MatchSpan> spans(const std::string& text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  void compile(const std::string& pcre2_pattern, const std::string& where);

  std::string pattern_;           // as given (Oniguruma syntax)
  std::shared_ptr<void> code_;    // pcre2_code_8, freed with pcre2_code_free_8
};

// The PCRE2 form of an Oniguruma (Ruby syntax) pattern; see the header comment. Throws
// std::runtime_error "<where>: ..." for refused constructs.
std::string oniguruma_to_pcre2(const std::string& pattern, const std::string& where);

}  // namespace zoo
