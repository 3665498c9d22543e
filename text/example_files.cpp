#include "text/example_files.h"

#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/strings.h"
#include "core/files.h"
#include "text/tokenizer.h"

namespace zoo {
namespace {

[[noreturn]] void fail(const std::string& path, int64_t line, const std::string& message) {
  throw std::runtime_error(path + ":" + std::to_string(line) + ": " + message);
}

// Rows of a delimited file with a header: RFC 4180 quoting for CSV (quoted fields may hold
// delimiters, newlines and doubled quotes); TSV fields are taken as they are.
struct Row {
  std::vector<std::string> fields;
  int64_t line;
};

std::vector<Row> read_delimited(const std::string& path, char delimiter, bool quoting) {
  const std::string text = read_file(path);
  std::vector<Row> rows;
  Row row{{}, 1};
  std::string field;
  int64_t line = 1;
  size_t i = 0;
  bool any = false;
  auto end_row = [&] {
    row.fields.push_back(field);
    field.clear();
    const bool blank = row.fields.size() == 1 && row.fields[0].empty();
    if (!blank) rows.push_back(row);
    row = Row{{}, line};
  };
  while (i < text.size()) {
    const char c = text[i];
    any = true;
    if (quoting && c == '"' && field.empty()) {
      const int64_t start_line = line;
      ++i;
      while (true) {
        if (i >= text.size()) fail(path, start_line, "unterminated quoted field");
        if (text[i] == '"') {
          if (i + 1 < text.size() && text[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        if (text[i] == '\n') ++line;
        field += text[i++];
      }
      if (i < text.size() && text[i] != delimiter && text[i] != '\n' && text[i] != '\r') {
        fail(path, line, std::string("expected '") + delimiter + "' or the end of the line after a quoted field");
      }
      continue;
    }
    if (c == delimiter) {
      row.fields.push_back(field);
      field.clear();
    } else if (c == '\n') {
      ++line;
      end_row();
    } else if (c != '\r') {
      field += c;
    }
    ++i;
  }
  if (any && (!field.empty() || !row.fields.empty())) end_row();
  return rows;
}

// Column positions by header name; `required` must be present.
std::map<std::string, size_t> header(const std::string& path, const Row& row,
                                     const std::vector<std::string>& required,
                                     const std::vector<std::string>& optional) {
  std::map<std::string, size_t> columns;
  for (size_t i = 0; i < row.fields.size(); ++i) {
    if (!columns.emplace(row.fields[i], i).second) fail(path, row.line, "column '" + row.fields[i] + "' appears twice");
  }
  for (const auto& name : required) {
    if (!columns.count(name)) {
      std::string have;
      for (const auto& f : row.fields) have += (have.empty() ? "" : ", ") + f;
      fail(path, row.line, "the header has no '" + name + "' column (columns: " + have + ")");
    }
  }
  for (const auto& [name, index] : columns) {
    const bool known = std::find(required.begin(), required.end(), name) != required.end() ||
                       std::find(optional.begin(), optional.end(), name) != optional.end();
    if (!known) fail(path, row.line, "unknown column '" + name + "'");
  }
  return columns;
}

void check_utf8(const std::string& path, int64_t line, const std::string& value) {
  if (int64_t bad = invalid_utf8_offset(value); bad >= 0) {
    fail(path, line, "invalid UTF-8 at byte offset " + std::to_string(bad) + " of a field");
  }
}

// Table rows (CSV/TSV) or JSON objects (JSONL) as name -> value maps.
std::vector<std::pair<int64_t, std::map<std::string, std::string>>> records(
    const std::string& path, const std::vector<std::string>& required, const std::vector<std::string>& optional) {
  std::vector<std::pair<int64_t, std::map<std::string, std::string>>> out;
  const DataFormat format = format_of(path);
  if (format == DataFormat::kJsonl) {
    std::istringstream in(read_file(path));
    std::string text;
    int64_t line = 0;
    while (std::getline(in, text)) {
      ++line;
      if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
      check_utf8(path, line, text);
      nlohmann::json object;
      try {
        object = nlohmann::json::parse(text);
      } catch (const nlohmann::json::exception& e) {
        fail(path, line, std::string("malformed JSON: ") + e.what());
      }
      if (!object.is_object()) fail(path, line, "expected a JSON object per line");
      std::map<std::string, std::string> record;
      for (const auto& [key, value] : object.items()) {
        if (std::find(required.begin(), required.end(), key) == required.end() &&
            std::find(optional.begin(), optional.end(), key) == optional.end()) {
          std::string expected;
          for (const auto* names : {&required, &optional}) {
            for (const auto& name : *names) expected += (expected.empty() ? "" : ", ") + name;
          }
          fail(path, line, "unknown field '" + key + "' (expected: " + expected + ")");
        }
        if (value.is_string()) record[key] = value.get<std::string>();
        else if (value.is_number_integer() || value.is_boolean()) record[key] = value.dump();
        else fail(path, line, "field '" + key + "' must be a string, got " + value.type_name());
      }
      for (const auto& name : required) {
        if (!record.count(name)) fail(path, line, "missing field '" + name + "'");
      }
      out.emplace_back(line, std::move(record));
    }
  } else {
    const bool csv = format == DataFormat::kCsv;
    auto rows = read_delimited(path, csv ? ',' : '\t', csv);
    if (rows.empty()) throw std::runtime_error(path + ": empty file (expected a header row and examples)");
    auto columns = header(path, rows[0], required, optional);
    for (size_t r = 1; r < rows.size(); ++r) {
      const auto& row = rows[r];
      if (row.fields.size() != rows[0].fields.size()) {
        fail(path, row.line, "expected " + std::to_string(rows[0].fields.size()) + " fields, got " +
                                 std::to_string(row.fields.size()));
      }
      std::map<std::string, std::string> record;
      for (const auto& [name, index] : columns) {
        check_utf8(path, row.line, row.fields[index]);
        record[name] = row.fields[index];
      }
      out.emplace_back(row.line, std::move(record));
    }
  }
  if (out.empty()) throw std::runtime_error(path + ": no examples");
  return out;
}

}  // namespace

std::optional<DataFormat> data_format(const std::string& path) {
  if (ends_with(path, ".csv")) return DataFormat::kCsv;
  if (ends_with(path, ".tsv")) return DataFormat::kTsv;
  if (ends_with(path, ".jsonl") || ends_with(path, ".json")) return DataFormat::kJsonl;
  return std::nullopt;
}

DataFormat format_of(const std::string& path) {
  if (const auto format = data_format(path)) return *format;
  throw std::runtime_error(path + ": unknown data format (expected a .csv, .tsv or .jsonl file)");
}

std::vector<ClassificationExample> read_classification(const std::string& path) {
  std::vector<ClassificationExample> out;
  for (auto& [line, r] : records(path, {"text", "label"}, {"text_pair"})) {
    if (r["label"].empty()) fail(path, line, "empty label");
    out.push_back({r["text"], r.count("text_pair") ? r["text_pair"] : "", r["label"], line});
  }
  return out;
}

std::vector<InstructionExample> read_instructions(const std::string& path) {
  std::vector<InstructionExample> out;
  for (auto& [line, r] : records(path, {"prompt", "completion"}, {})) out.push_back({r["prompt"], r["completion"], line});
  return out;
}

std::vector<Seq2SeqExample> read_seq2seq(const std::string& path) {
  std::vector<Seq2SeqExample> out;
  for (auto& [line, r] : records(path, {"source", "target"}, {})) out.push_back({r["source"], r["target"], line});
  return out;
}

LabelSet LabelSet::from_examples(const std::vector<ClassificationExample>& examples) {
  std::set<std::string> unique;
  for (const auto& e : examples) unique.insert(e.label);
  LabelSet set;
  set.labels_.assign(unique.begin(), unique.end());
  if (set.labels_.size() < 2) {
    throw std::runtime_error("classification needs at least two labels in the training data, found " +
                             std::to_string(set.labels_.size()));
  }
  return set;
}

LabelSet LabelSet::load(const std::string& path) {
  LabelSet set;
  try {
    auto json = nlohmann::json::parse(read_file(path));
    set.labels_ = json.at("labels").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": not a label set (" + e.what() + ")");
  }
  return set;
}

void LabelSet::save(const std::string& path) const {
  write_file_atomically(path, nlohmann::json{{"labels", labels_}}.dump(2) + "\n");
}

int64_t LabelSet::id(const std::string& label, const std::string& where) const {
  auto it = std::lower_bound(labels_.begin(), labels_.end(), label);
  if (it == labels_.end() || *it != label) {
    std::string known;
    for (const auto& l : labels_) known += (known.empty() ? "" : ", ") + l;
    throw std::runtime_error((where.empty() ? "" : where + ": ") + "label '" + label +
                             "' was never seen in training (known: " + known + ")");
  }
  return it - labels_.begin();
}

}  // namespace zoo
