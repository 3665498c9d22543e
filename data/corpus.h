#pragma once
// The default corpus: Debian's python3.11-doc ships the Python documentation's reStructuredText
// sources (~11 MB of English prose); zoo turns them into plain text once and trains on that
// when no --data is given.

#include <string>

namespace zoo {

// reStructuredText -> plain text: headings kept as lines, paragraphs joined onto one line each,
// inline markup reduced to its text (:role:`x` -> x, ``code`` -> code, `text <url>`_ -> text),
// and what is not prose dropped (code and literal blocks, doctests, tables, comments, labels,
// index/toctree/code directives). Paragraphs are separated by one newline.
std::string rst_to_text(const std::string& rst);

// Where the Python documentation sources are installed, or "" when they are not.
std::string python_doc_sources();

// Path of the plain-text default corpus: $ZOO_DATA_DIR/python-docs.txt, else
// $XDG_CACHE_HOME/zoo/..., else ~/.cache/zoo/python-docs.txt.
std::string default_corpus_path();

// Builds the default corpus at `out` (atomically): one document per source file, documents
// separated by a blank line. Returns the number of documents. Throws std::runtime_error saying
// which package to install when the sources are missing.
int64_t build_default_corpus(const std::string& out);

// default_corpus_path(), built first if it does not exist yet.
std::string ensure_default_corpus();

}  // namespace zoo
