#include "train/progress.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/files.h"
#include "core/line_reader.h"

namespace zoo {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buffer[32];
  if (s >= 3600) {
    std::snprintf(buffer, sizeof buffer, "%ldh%02ldm", static_cast<long>(s / 3600), static_cast<long>(s / 60 % 60));
  } else if (s >= 60) {
    std::snprintf(buffer, sizeof buffer, "%ldm%02lds", static_cast<long>(s / 60), static_cast<long>(s % 60));
  } else {
    std::snprintf(buffer, sizeof buffer, "%lds", static_cast<long>(s));
  }
  return buffer;
}

ProgressLine::ProgressLine(std::ostream& out, bool live, int64_t every) : out_(out), live_(live), every_(every) {}

void ProgressLine::update(const ProgressReport& r) {
  if (!live_ && r.step % every_ != 0 && r.step != r.total) return;
  char line[200];
  std::snprintf(line, sizeof line, "step %ld/%ld | loss %.4f | lr %.2e | %.0f tok/s | ETA %s",
                static_cast<long>(r.step), static_cast<long>(r.total), r.loss, r.lr, r.tokens_per_second,
                format_duration(r.eta_seconds).c_str());
  if (live_) {
    out_ << "\r\033[K" << line << std::flush;
    dirty_ = true;
  } else {
    out_ << line << "\n" << std::flush;
  }
}

void ProgressLine::message(const std::string& line) {
  if (dirty_) out_ << "\r\033[K";
  out_ << line << "\n" << std::flush;
  dirty_ = false;
}

void ProgressLine::finish() {
  if (dirty_) out_ << "\n" << std::flush;
  dirty_ = false;
}

MetricsLog::MetricsLog(const std::string& path, int64_t keep_up_to_step) : path_(path) {
  if (std::filesystem::exists(path)) {
    std::string kept;
    for (const auto& record : read_metrics(path)) {
      if (record.value("step", int64_t{0}) <= keep_up_to_step) kept += record.dump() + "\n";
    }
    write_file_atomically(path, kept);
  }
  out_.open(path, std::ios::app);
  if (!out_) throw std::runtime_error(path + ": cannot open the metrics file for writing");
}

void MetricsLog::write(const nlohmann::json& record) {
  if (!out_.is_open()) return;
  out_ << record.dump() << "\n" << std::flush;
}

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open (no metrics: has the run logged a step?)");
  std::vector<nlohmann::json> records;
  // A record is a few hundred bytes: a line past LineReader's bound is named, not read whole.
  LineReader lines(in, path);
  std::string line, after;
  while (lines.next(line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      records.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      // A run killed mid-write leaves at most a partial last line.
      const std::string where = lines.where();
      if (!lines.next(after)) break;
      throw std::runtime_error(where + ": malformed metrics line");
    }
  }
  return records;
}

}  // namespace zoo
