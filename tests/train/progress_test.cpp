#include "train/progress.h"

#include <fstream>

#include <gtest/gtest.h>

#include "core/line_reader.h"
#include "test_util.h"

namespace zoo {
namespace {

using testing::error_of;

std::string metrics_file(const std::string& name, const std::string& text) {
  const std::string path = testing::scratch_path(name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// A run killed mid-write leaves a partial last record, which is left out; a malformed record
// before the last is named by its line.
TEST(ReadMetrics, APartialLastRecordIsLeftOutAndAMalformedOneNamed) {
  const auto partial = metrics_file("metrics_partial.jsonl", "{\"step\": 1}\n\n{\"step\": 2, \"lo");
  const auto records = read_metrics(partial);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["step"], 1);
  const auto malformed = metrics_file("metrics_malformed.jsonl", "{\"step\": 1}\nnot json\n{\"step\": 3}\n");
  EXPECT_EQ(error_of([&] { read_metrics(malformed); }), malformed + ":2: malformed metrics line");
}

// Issue 52: metrics.jsonl was read with std::getline, which holds a line whole however long it
// is (`zoo plot` of a run whose metrics.jsonl is one multi-GB line took that much memory). Its
// records are read with LineReader's bound, and a longer line is named by file and line.
TEST(ReadMetrics, ALineLongerThanTheLineBoundIsNamedNotRead) {
  const auto path = metrics_file("metrics_long.jsonl", "{\"step\": 1}\n{\"step\": 2, \"note\": \"" +
                                                           std::string(LineReader::kMaxLineBytes, 'x') + "\"}\n");
  EXPECT_EQ(error_of([&] { read_metrics(path); }),
            path + ":2: the line is longer than 8 MiB, the most zoo reads as one line (one example or document per "
                   "line: split it)");
}

}  // namespace
}  // namespace zoo
