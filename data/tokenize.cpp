#include "data/tokenize.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/files.h"
#include "core/line_reader.h"
#include "core/splitmix.h"
#include "core/unicode.h"

namespace zoo {
namespace {

}  // namespace

TokenizeStats tokenize_to_files(const std::vector<std::string>& inputs, const Tokenizer& tokenizer,
                                const std::string& out_dir, const TokenizeOptions& o) {
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0)) {
    throw std::runtime_error("val_fraction (" + std::to_string(o.val_fraction) + ") must be in [0, 1)");
  }
  const auto files = list_text_files(inputs);
  const auto dir = std::filesystem::path(out_dir);
  create_directories(out_dir);
  // Documents end with the tokenizer's end-of-sequence token (BERT's vocabularies have none:
  // their separator then).
  const auto& special = tokenizer.special();
  if (!special.eos && !special.sep) {
    throw std::runtime_error("token files need an end-of-sequence or separator token to end documents with, and the "
                             "tokenizer has neither");
  }
  const int64_t separator = special.eos ? *special.eos : *special.sep;
  TokenFileWriter train((dir / "train.tokens").string(), tokenizer.vocab_size(), tokenizer.hash(), separator);
  TokenFileWriter val((dir / "val.tokens").string(), tokenizer.vocab_size(), tokenizer.hash(), separator);
  // A document goes to validation by a hash of (seed, its index), known when it starts, so its
  // tokens stream straight into their file.
  TokenFileWriter* current = nullptr;
  int64_t index = 0;
  auto finish = [&] {
    if (current != nullptr) current->end_document();
    current = nullptr;
  };
  std::vector<std::string> empty;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw std::runtime_error(file + ": cannot open");
    LineReader lines(in, file);
    std::string line;
    bool any_text = false;
    while (lines.next(line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) {
        finish();
        continue;
      }
      if (int64_t bad = invalid_utf8_offset(line); bad >= 0) {
        const std::string where = lines.where() + ": invalid UTF-8 at byte offset " + std::to_string(lines.offset() + bad);
        if (!o.skip_invalid_utf8) throw std::runtime_error(where);
        std::fprintf(stderr, "warning: skipping line, %s\n", where.c_str());
        continue;
      }
      any_text = true;
      if (current == nullptr) {
        const double u =
            static_cast<double>(splitmix64(o.seed ^ splitmix64(static_cast<uint64_t>(index++)))) / 18446744073709551616.0;
        current = u < o.val_fraction ? &val : &train;
      }
      current->add(tokenizer.encode(line));
    }
    finish();  // a file ends its last document
    if (!any_text) empty.push_back(file);
  }
  if (train.documents() == 0 && val.documents() == 0) throw std::runtime_error(no_text_message(empty));
  if (train.documents() == 0) throw std::runtime_error("every document went to validation: lower val_fraction");
  train.commit();
  val.commit();
  TokenizeStats stats;
  stats.train_documents = train.documents(), stats.train_tokens = train.tokens();
  stats.val_documents = val.documents(), stats.val_tokens = val.tokens();
  return stats;
}

}  // namespace zoo
