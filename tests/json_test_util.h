#pragma once
// Reading pipeline parts from JSON snippets in the tokenizer tests.

#include <cstdint>
#include <string>
#include <vector>

#include "core/json_view.h"

namespace zoo::testing {

// `json` read with T::from_json as the part at `path` of a file named "t.json", so errors read
// "t.json: <path>...: ...".
template <typename T>
T from_json_text(const std::string& json, const std::string& path) {
  const nlohmann::json document = JsonView::parse(json, "t.json");
  return T::from_json(JsonView(document, "t.json", path));
}

using Ids = std::vector<int64_t>;

// A tokenizer model (BpeModel, WordPieceModel, UnigramModel) read as tokenizer.json's "model".
template <typename Model>
Model model_from_json(const std::string& json) {
  return from_json_text<Model>(json, "model");
}

// The ids a model gives one pre-tokenized piece.
template <typename Model>
std::vector<int64_t> tokenize(const Model& model, const std::string& piece) {
  std::vector<int64_t> ids;
  model.tokenize(piece, ids);
  return ids;
}

}  // namespace zoo::testing
