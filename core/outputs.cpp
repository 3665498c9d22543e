#include "core/outputs.h"

#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/files.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;

std::string marker_name(OutputKind kind) {
  switch (kind) {
    case OutputKind::kCheckpoint: return "checkpoint";
    case OutputKind::kRunDirectory: return "run";
    case OutputKind::kTokenDirectory: return "token_files";
    case OutputKind::kHuggingFaceDirectory: return "huggingface";
    case OutputKind::kPeftAdapterDirectory: return "peft_adapter";
    case OutputKind::kTorchScriptFile: return "torchscript";
    case OutputKind::kTokenizerModel: return "tokenizer";
    case OutputKind::kImageFile: return "image";
  }
  throw std::logic_error("unhandled output kind");
}

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// The first `limit` bytes of a file, or its last `limit` bytes with `from_end`.
std::string file_bytes(const fs::path& path, size_t limit, bool from_end) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  if (from_end) {
    in.seekg(0, std::ios::end);
    const auto size = static_cast<size_t>(in.tellg());
    in.seekg(static_cast<std::streamoff>(size > limit ? size - limit : 0));
  }
  std::string bytes(limit, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(limit));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

bool marker_says(const fs::path& dir, OutputKind kind) {
  const fs::path marker = dir / kOutputMarker;
  if (!path_exists(marker)) return false;
  try {
    return nlohmann::json::parse(read_file(marker.string())).value("kind", "") == marker_name(kind);
  } catch (const std::exception&) {
    return false;
  }
}

// A few of the entries of a directory, for messages.
std::string some_entries(const fs::path& dir) {
  std::vector<std::string> names;
  size_t count = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (++count <= 4) names.push_back(entry.path().filename().string());
  }
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  if (count > names.size()) s += ", ... (" + std::to_string(count) + " entries)";
  return s;
}

bool is_empty_directory(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::is_empty(dir, ec);
}

}  // namespace

std::string describe(OutputKind kind) {
  switch (kind) {
    case OutputKind::kCheckpoint: return "a zoo checkpoint";
    case OutputKind::kRunDirectory: return "a zoo run directory";
    case OutputKind::kTokenDirectory: return "zoo token files";
    case OutputKind::kHuggingFaceDirectory: return "a Hugging Face directory written by zoo";
    case OutputKind::kPeftAdapterDirectory: return "a PEFT adapter directory written by zoo";
    case OutputKind::kTorchScriptFile: return "a TorchScript export written by zoo";
    case OutputKind::kTokenizerModel: return "a tokenizer trained by zoo";
    case OutputKind::kImageFile: return "a PNG image";
  }
  throw std::logic_error("unhandled output kind");
}

bool is_directory_kind(OutputKind kind) {
  switch (kind) {
    case OutputKind::kCheckpoint:
    case OutputKind::kRunDirectory:
    case OutputKind::kTokenDirectory:
    case OutputKind::kHuggingFaceDirectory:
    case OutputKind::kPeftAdapterDirectory: return true;
    case OutputKind::kTorchScriptFile:
    case OutputKind::kTokenizerModel:
    case OutputKind::kImageFile: return false;
  }
  throw std::logic_error("unhandled output kind");
}

bool holds_own_output(const std::string& path, OutputKind kind) {
  const fs::path p(path);
  std::error_code ec;
  if (is_directory_kind(kind) != fs::is_directory(p, ec)) return false;
  switch (kind) {
    case OutputKind::kCheckpoint:
      return marker_says(p, kind) ||
             (path_exists(p / "config.yaml") && path_exists(p / "model.pt") && path_exists(p / "state.json"));
    case OutputKind::kRunDirectory: return marker_says(p, kind) || path_exists(p / "run.yaml");
    case OutputKind::kTokenDirectory:
      return marker_says(p, kind) || file_bytes(p / "train.tokens", 8, false) == "ZOOTOKEN";
    case OutputKind::kHuggingFaceDirectory:
    case OutputKind::kPeftAdapterDirectory: return marker_says(p, kind);
    case OutputKind::kTorchScriptFile: {
      // A zip whose central directory (at the end) lists zoo's metadata file.
      if (file_bytes(p, 2, false) != "PK") return false;
      return file_bytes(p, 1 << 16, true).find("extra/zoo.json") != std::string::npos;
    }
    case OutputKind::kTokenizerModel: {
      // zoo's pieces 4..7 follow the first three in the serialized model.
      const std::string head = file_bytes(p, 4096, false);
      return head.find("[CLS]") != std::string::npos && head.find("[MASK]") != std::string::npos &&
             head.find("<extra_id_0>") != std::string::npos;
    }
    case OutputKind::kImageFile: return file_bytes(p, 8, false) == "\x89PNG\r\n\x1a\n";
  }
  throw std::logic_error("unhandled output kind");
}

OutputState check_output(const std::string& path, OutputKind kind, bool overwrite) {
  const fs::path p(path);
  std::error_code ec;
  if (path.empty()) throw std::runtime_error("an output path is empty");
  if (!fs::exists(fs::symlink_status(p, ec)) || is_empty_directory(p)) {
    if (is_empty_directory(p) && !is_directory_kind(kind)) {
      throw std::runtime_error(path + ": is a directory; a file name is expected here");
    }
    return OutputState::kNew;
  }
  const bool directory = fs::is_directory(p, ec);
  if (is_directory_kind(kind) && !directory) {
    throw std::runtime_error(path + ": exists and is a file; a directory is expected here (for " + describe(kind) +
                             ")");
  }
  if (!is_directory_kind(kind) && directory) {
    throw std::runtime_error(path + ": is a directory; a file name is expected here");
  }
  if (!holds_own_output(path, kind)) {
    const std::string what = directory ? "it holds " + some_entries(p) : "a file zoo did not write";
    throw std::runtime_error(path + ": exists and is not " + describe(kind) + " (" + what +
                             "); zoo never replaces what it did not write: choose another path");
  }
  if (!overwrite) {
    throw std::runtime_error(path + ": holds " + describe(kind) + " already; --overwrite replaces it");
  }
  return OutputState::kReplace;
}

void write_output_marker(const std::string& dir, OutputKind kind) {
  write_file_atomically((fs::path(dir) / kOutputMarker).string(),
                        nlohmann::json{{"kind", marker_name(kind)}, {"written_by", "zoo"}}.dump() + "\n");
}

CreatedDirectory::CreatedDirectory(std::string path)
    : path_(std::move(path)), exceptions_at_start_(std::uncaught_exceptions()) {
  // The highest folder that does not exist yet is what this command creates (and removes).
  fs::path top;
  for (fs::path p = path_; !p.empty() && !path_exists(p); p = p.parent_path()) top = p;
  create_directories(path_);
  created_ = !top.empty();
  top_ = top.string();
}

CreatedDirectory::~CreatedDirectory() {
  if (!created_ || kept_ || std::uncaught_exceptions() <= exceptions_at_start_) return;
  std::error_code ignored;
  fs::remove_all(top_, ignored);
}

void write_output_directory(const std::string& dir, OutputKind kind,
                            const std::function<void(const std::string& tmp)>& fill) {
  create_parent_directories(dir);
  const std::string tmp = temporary_path_for(dir);
  create_directories(tmp);
  try {
    fill(tmp);
    write_output_marker(tmp, kind);
  } catch (const std::exception& e) {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
    std::string message = e.what();
    if (message.rfind(tmp, 0) == 0) message = dir + message.substr(tmp.size());
    throw std::runtime_error(message);
  }
  replace_directory(tmp, dir);
}

}  // namespace zoo
