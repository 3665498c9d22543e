#pragma once
// `zoo plot RUN_DIR`: the training and validation loss curves of a run as a PNG, drawn by
// gnuplot (Debian's gnuplot-nox) from RUN_DIR/metrics.jsonl.

#include <string>

namespace zoo {

// Writes `out_png` (default RUN_DIR/curves.png) atomically and returns its path. Throws naming
// the metrics file when it is missing or has no training records, and saying what to install
// when gnuplot is absent.
std::string plot_run(const std::string& run_dir, const std::string& out_png = "");

}  // namespace zoo
