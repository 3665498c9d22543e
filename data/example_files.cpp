#include "data/example_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/files.h"
#include "core/line_reader.h"
#include "core/strings.h"
#include "tokenizers/tokenizer.h"

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

// The UTF-8 byte order mark some editors (Excel's "CSV UTF-8") put first: not part of the text.
constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

// The file opened for reading, or an error naming it.
std::ifstream open_examples(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw std::runtime_error(path + ": is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open (no such file, or not readable)");
  return in;
}

// Streamed a line at a time: a row (with the lines its quoted fields span) longer than
// LineReader's bound is an error naming where it starts, whatever the file's size.
std::vector<Row> read_delimited(const std::string& path, char delimiter, bool quoting) {
  std::ifstream in = open_examples(path);
  LineReader lines(in, path);
  std::vector<Row> rows;
  std::string text;
  while (lines.next(text)) {
    if (lines.number() == 1 && text.compare(0, kUtf8Bom.size(), kUtf8Bom) == 0) text.erase(0, kUtf8Bom.size());
    Row row{{}, lines.number()};
    size_t row_bytes = text.size();
    std::string field;
    size_t i = 0;
    while (i < text.size()) {
      const char c = text[i];
      if (quoting && c == '"' && field.empty()) {
        const int64_t start_line = lines.number();
        ++i;
        while (true) {
          if (i >= text.size()) {  // the quoted field goes on in the next line
            if (!lines.next(text)) fail(path, start_line, "unterminated quoted field");
            row_bytes += text.size() + 1;
            if (row_bytes > lines.max_line_bytes()) throw std::runtime_error(lines.too_long(row.line));
            field += '\n';
            i = 0;
            continue;
          }
          if (text[i] == '"') {
            if (i + 1 < text.size() && text[i + 1] == '"') {
              field += '"';
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          field += text[i++];
        }
        if (i < text.size() && text[i] != delimiter && text[i] != '\r') {
          fail(path, lines.number(), std::string("expected '") + delimiter + "' or the end of the line after a quoted field");
        }
        continue;
      }
      if (c == delimiter) {
        row.fields.push_back(std::move(field));
        field.clear();
      } else if (c != '\r') {
        field += c;
      }
      ++i;
    }
    row.fields.push_back(std::move(field));
    const bool blank = row.fields.size() == 1 && row.fields[0].empty();
    if (!blank) rows.push_back(std::move(row));
  }
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

// A table row (CSV/TSV) or JSON object (JSONL) as name -> value, and the JSON value of the one
// field that may hold structure (a conversation's "messages"), when the line has it.
struct Record {
  int64_t line;
  std::map<std::string, std::string> fields;
  std::optional<nlohmann::ordered_json> structured;
};

std::vector<Record> records(const std::string& path, const std::vector<std::string>& required,
                            const std::vector<std::string>& optional, const std::string& structured_field = "") {
  std::vector<Record> out;
  const DataFormat format = format_of(path);
  if (format == DataFormat::kJsonl) {
    std::ifstream in = open_examples(path);
    LineReader lines(in, path);
    std::string text;
    while (lines.next(text)) {
      const int64_t line = lines.number();
      if (line == 1 && text.compare(0, kUtf8Bom.size(), kUtf8Bom) == 0) text.erase(0, kUtf8Bom.size());
      if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
      check_utf8(path, line, text);
      nlohmann::ordered_json object;
      try {
        object = nlohmann::ordered_json::parse(text);
      } catch (const nlohmann::json::exception& e) {
        fail(path, line, std::string("malformed JSON: ") + e.what());
      }
      if (!object.is_object()) fail(path, line, "expected a JSON object per line");
      Record record{line, {}, std::nullopt};
      for (auto item = object.begin(); item != object.end(); ++item) {
        const std::string& key = item.key();
        const auto& value = item.value();
        if (!structured_field.empty() && key == structured_field) {
          // Moved, not copied: nlohmann-json parses without recursion but copies recursively,
          // and a line may nest thousands of levels deep.
          record.structured = std::move(item.value());
          continue;
        }
        if (std::find(required.begin(), required.end(), key) == required.end() &&
            std::find(optional.begin(), optional.end(), key) == optional.end()) {
          std::string expected;
          for (const auto* names : {&required, &optional}) {
            for (const auto& name : *names) expected += (expected.empty() ? "" : ", ") + name;
          }
          if (!structured_field.empty()) expected += ", " + structured_field;
          fail(path, line, "unknown field '" + key + "' (expected: " + expected + ")");
        }
        // A class label may be written as a number or a boolean; text fields are strings.
        if (value.is_string()) record.fields[key] = value.get<std::string>();
        else if ((value.is_number_integer() || value.is_boolean()) && key == "label") record.fields[key] = value.dump();
        else fail(path, line, "field '" + key + "' must be a string, got " + value.type_name());
      }
      for (const auto& name : required) {
        if (!record.fields.count(name)) fail(path, line, "missing field '" + name + "'");
      }
      out.push_back(std::move(record));
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
      Record record{row.line, {}, std::nullopt};
      for (const auto& [name, index] : columns) {
        check_utf8(path, row.line, row.fields[index]);
        record.fields[name] = row.fields[index];
      }
      out.push_back(std::move(record));
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
  for (auto& [line, r, structured] : records(path, {"text", "label"}, {"text_pair"})) {
    if (r["label"].empty()) fail(path, line, "empty label");
    out.push_back({r["text"], r.count("text_pair") ? r["text_pair"] : "", r["label"], line});
  }
  return out;
}

std::vector<InstructionExample> read_instructions(const std::string& path) {
  std::vector<InstructionExample> out;
  if (format_of(path) != DataFormat::kJsonl) {
    for (auto& [line, r, structured] : records(path, {"prompt", "completion"}, {})) {
      out.push_back({r["prompt"], r["completion"], {}, line});
    }
    return out;
  }
  // JSONL: each line is a prompt/completion pair or a conversation.
  for (auto& [line, r, messages] : records(path, {}, {"prompt", "completion"}, "messages")) {
    if (messages) {
      if (!r.empty()) fail(path, line, "a line with 'messages' cannot also have '" + r.begin()->first + "'");
      const std::string where = path + ":" + std::to_string(line);
      InstructionExample e{"", "", conversation_from_json(*messages, where), line};
      const bool learns = std::any_of(e.messages.begin(), e.messages.end(), [](const ChatMessage& m) { return m.role == "assistant"; });
      if (!learns) fail(path, line, "the conversation has no 'assistant' message to learn from");
      out.push_back(std::move(e));
      continue;
    }
    for (const char* name : {"prompt", "completion"}) {
      if (!r.count(name)) fail(path, line, std::string("missing field '") + name + "' (or give 'messages')");
    }
    out.push_back({r["prompt"], r["completion"], {}, line});
  }
  return out;
}

std::vector<ChatMessage> conversation_from_json(const nlohmann::ordered_json& messages, const std::string& where) {
  auto fail_at = [&](const std::string& message) { throw std::runtime_error(where + ": " + message); };
  if (!messages.is_array()) fail_at(std::string("'messages' must be a list of {role, content} objects, got ") + messages.type_name());
  if (messages.empty()) fail_at("'messages' is empty");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) fail_at(at + " must be a {role, content} object, got " + m.type_name());
    ChatMessage message;
    for (const auto& [key, value] : m.items()) {
      if (key != "role" && key != "content") fail_at(at + ": unknown key '" + key + "' (expected: role, content)");
      if (!value.is_string()) fail_at(at + "." + key + " must be a string, got " + value.type_name());
      (key == "role" ? message.role : message.content) = value.get<std::string>();
    }
    for (const char* key : {"role", "content"}) {
      if (!m.contains(key)) fail_at(at + ": missing '" + key + "'");
    }
    if (message.role.empty()) fail_at(at + ".role is empty");
    out.push_back(std::move(message));
  }
  return out;
}

std::vector<ChatMessage> parse_conversation(const std::string& text, const std::string& path) {
  if (int64_t bad = invalid_utf8_offset(text); bad >= 0) {
    throw std::runtime_error(path + ": invalid UTF-8 at byte offset " + std::to_string(bad));
  }
  nlohmann::ordered_json json;
  try {
    json = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": malformed JSON: " + e.what());
  }
  if (json.is_object()) {
    if (!json.contains("messages")) throw std::runtime_error(path + ": expected a list of messages or an object with 'messages'");
    return conversation_from_json(json["messages"], path);
  }
  return conversation_from_json(json, path);
}

std::vector<Seq2SeqExample> read_seq2seq(const std::string& path) {
  std::vector<Seq2SeqExample> out;
  for (auto& [line, r, structured] : records(path, {"source", "target"}, {})) out.push_back({r["source"], r["target"], line});
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
