#pragma once
// Texts and reference programs for the tokenizer parity tests (zoo_text_tests).

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zoo::testing {

// Hand-picked hard cases: contractions, numbers, whitespace runs, newlines and tabs,
// punctuation, accents, CJK, emoji, unusual Unicode (combining marks, zero-width and
// right-to-left characters, U+3000), an empty string, and very long words.
std::vector<std::string> varied_texts();

// Lines of real prose: the default corpus (Python's documentation) and the GPL's text,
// `count` of them, spread over the documents.
std::vector<std::string> prose_lines(size_t count);

// Runs `command IN OUT` with IN a JSON array of `texts`, and returns OUT's JSON. Throws
// std::runtime_error with the command when it fails.
nlohmann::json run_reference(const std::string& command, const std::vector<std::string>& texts);

// The same with any JSON as IN.
nlohmann::json run_reference_json(const std::string& command, const nlohmann::ordered_json& input);

// The npm reference packages and the files made from them (tests/reference/fetch_npm_references.sh,
// a ctest fixture). Throws, saying how to make them, when `relative` is missing there.
std::string npm_reference(const std::string& relative);

// `node SCRIPT NPM_DIR`, SCRIPT under tests/reference.
std::string node_reference(const std::string& script);

// Small SentencePiece models trained by python3-sentencepiece (tests/reference/spm_reference.py)
// on a slice of the default corpus, once per test process, with their tokenizer.json and
// Hugging Face directories: the folder holding llama/, llama-dir/, t5/, t5-dir/.
std::string spm_references();

// The ids python3-sentencepiece gives each text with `model`.
std::vector<std::vector<int64_t>> spm_encode(const std::string& model, const std::vector<std::string>& texts);

}  // namespace zoo::testing
