#pragma once
// How a run reports: one live line on a terminal (step/total, loss, lr, tokens/s, ETA), plain
// periodic lines otherwise, and every record appended to RUN_DIR/metrics.jsonl.

#include <cstdint>
#include <fstream>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

namespace zoo {

struct ProgressReport {
  int64_t step = 0;  // updates done
  int64_t total = 0;
  double loss = 0, lr = 0, tokens_per_second = 0, eta_seconds = 0;
};

class ProgressLine {
 public:
  // live: rewrite one line in place (a terminal); otherwise a line every `every` steps.
  ProgressLine(std::ostream& out, bool live, int64_t every);
  void update(const ProgressReport& report);
  // A line of its own (evaluations, checkpoints), not overwritten by the live line.
  void message(const std::string& line);
  void finish();

 private:
  std::ostream& out_;
  bool live_;
  int64_t every_;
  bool dirty_ = false;
};

// "1h02m", "3m04s", "12s".
std::string format_duration(double seconds);

// Appends JSON lines to PATH. Opening for a resumed run first drops the records after the
// step it resumes from (a crashed run may have logged steps that are trained again).
class MetricsLog {
 public:
  MetricsLog() = default;
  MetricsLog(const std::string& path, int64_t keep_up_to_step);
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

// Reads metrics.jsonl; a malformed line is an error naming the file and line.
std::vector<nlohmann::json> read_metrics(const std::string& path);

}  // namespace zoo
