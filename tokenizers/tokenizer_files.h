#pragma once
// The files a tokenizer was read from, by name (a Hugging Face directory's tokenizer.json,
// tokenizer_config.json, vocab.txt, ... or zoo's single tokenizer.model), and their serialized
// form: one byte string that carries them all, recorded in checkpoints and token files.
//
// Serialized form ("zoo tokenizer files", version 1):
//   "ZOO-TOKENIZER-FILES 1\n"
//   then for each file, in name order:  NAME "\n" SIZE (decimal) "\n" SIZE bytes "\n"
// Names are plain file names (no '/', no newline).

#include <map>
#include <string>
#include <vector>

namespace zoo {

using TokenizerFiles = std::map<std::string, std::string>;

// True when `bytes` begins with the container's magic line.
bool is_tokenizer_files(const std::string& bytes);
std::string serialize_tokenizer_files(const TokenizerFiles& files);
// Throws std::runtime_error "<source>: ..." for a truncated or malformed container.
TokenizerFiles parse_tokenizer_files(const std::string& bytes, const std::string& source);

// Reads the files among `names` that exist in `dir` (others are skipped).
TokenizerFiles read_tokenizer_files(const std::string& dir, const std::vector<std::string>& names);

// Writes every file into `dir` (created if missing), each atomically.
void write_tokenizer_files(const TokenizerFiles& files, const std::string& dir);

}  // namespace zoo
