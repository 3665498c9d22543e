#pragma once
// zoo bench's rows: what a workload's result (and PyTorch's, under --compare) becomes in the JSON
// row and the table's notes, compared with the rows measured before it in the same run, by the
// typed baseline its Workload names (bench/workloads.h): MFU against the matmul rate, decoding
// against the copy rate's bound, LoRA against full fine-tuning, recomputation against plain
// training, the tiled path against the (T, T) one, N streams against one, N ranks against one
// process, GPT-2's tokenizer against zoo's.

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/workloads.h"

namespace zoo::bench {

// The results of the rows measured so far in this run, by name (zoo's side).
using MeasuredRows = std::map<std::string, nlohmann::json>;

struct Row {
  nlohmann::json fields;  // the --json line
  std::string notes;      // the table's last column
};

// The row of `workload` from zoo's result and PyTorch's (null when PyTorch did not run it),
// compared with the rows in `earlier`; `on_gpu` names peak memory the GPU's. `llama_cpp`:
// llama.cpp's result of the same row (scripts/bench_llama_cpp.py: value, type, peak_rss_mb), or
// null.
Row make_row(const Workload& workload, const nlohmann::json& zoo, const nlohmann::json& pytorch,
             const MeasuredRows& earlier, bool on_gpu, const nlohmann::json& llama_cpp = nullptr);

// `value` with `digits` digits after the point.
std::string fixed(double value, int digits);

}  // namespace zoo::bench
