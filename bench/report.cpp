#include "bench/report.h"

#include <iomanip>
#include <sstream>

#include "core/op_profile.h"

namespace zoo::bench {
namespace {

using json = nlohmann::json;

double number(const json& result, const char* key) { return result.at(key).get<double>(); }

// A training step's ATen ops and host synchronisations (core/op_profile.h), zoo's from its
// op_calls and PyTorch's from its op_events, counted by the same rules; into `row`, and the note
// ("; ops/step 1520 (pytorch 1796), syncs 0 (pytorch 1)").
std::string op_notes(const json& zoo, const json& pytorch, json& row) {
  if (!zoo.contains("op_calls")) return {};
  std::vector<OpTime> ours;
  for (const auto& [name, calls] : zoo["op_calls"].items()) ours.push_back({name, calls.get<int64_t>()});
  row["zoo_ops"] = aten_calls(ours), row["zoo_syncs"] = synchronizing_calls(ours);
  std::string notes = "; ops/step " + std::to_string(aten_calls(ours));
  std::string syncs = ", syncs " + std::to_string(synchronizing_calls(ours));
  if (!pytorch.is_null() && pytorch.contains("op_events")) {
    std::vector<ProfiledOp> events;
    for (const auto& e : pytorch["op_events"]) events.push_back({e.at(0).get<std::string>(), e.at(1).get<int64_t>()});
    const auto theirs = count_ops(events);
    row["pytorch_ops"] = aten_calls(theirs), row["pytorch_syncs"] = synchronizing_calls(theirs);
    notes += " (pytorch " + std::to_string(aten_calls(theirs)) + ")";
    syncs += " (pytorch " + std::to_string(synchronizing_calls(theirs)) + ")";
  }
  return notes + syncs;
}

// The ratios of `workload`'s baseline into `row`, and the notes that say them. `memory` names
// peak memory (resident, or the GPU's).
std::string baseline_notes(const Workload& workload, const json& zoo, const MeasuredRows& earlier, json& row,
                           const std::string& memory) {
  const auto measured = [&](size_t i) -> const json* {
    if (i >= workload.baseline_rows.size()) return nullptr;
    const auto found = earlier.find(workload.baseline_rows[i]);
    return found == earlier.end() ? nullptr : &found->second;
  };
  const json* base = measured(0);
  switch (workload.baseline) {
    case Baseline::kNone: return {};
    case Baseline::kFullFineTuning:
      if (base == nullptr) return {};
      row["speed_vs_full"] = number(zoo, "value") / number(*base, "value");
      row["peak_rss_vs_full"] = number(zoo, "peak_rss_mb") / number(*base, "peak_rss_mb");
      return std::to_string(zoo["trainable_parameters"].get<int64_t>()) + " trainable; " +
             fixed(row["speed_vs_full"].get<double>(), 2) + "x full fine-tuning's tokens/s, " + memory + " " +
             fixed(number(zoo, "peak_rss_mb"), 0) + " MB = " + fixed(100.0 * row["peak_rss_vs_full"].get<double>(), 0) +
             "% of its; ";
    case Baseline::kPlainTraining:
      if (base == nullptr) return {};
      row["activations_saved"] = number(*base, "activation_mb") / number(zoo, "activation_mb");
      row["step_time_vs_plain"] = number(*base, "value") / number(zoo, "value");
      return "activations " + fixed(number(zoo, "activation_mb"), 0) + " MB vs " + fixed(number(*base, "activation_mb"), 0) +
             " (" + fixed(row["activations_saved"].get<double>(), 1) + "x less) for " +
             fixed(row["step_time_vs_plain"].get<double>(), 2) + "x the step time; ";
    case Baseline::kMathPath:
      if (base == nullptr) return {};
      row["speed_vs_math"] = number(zoo, "value") / number(*base, "value");
      row["peak_rss_vs_math"] = number(zoo, "peak_rss_mb") / number(*base, "peak_rss_mb");
      return fixed(row["speed_vs_math"].get<double>(), 2) + "x the (T, T) path's tokens/s at " +
             fixed(100.0 * row["peak_rss_vs_math"].get<double>(), 0) + "% of its " + memory + " (" +
             fixed(number(*base, "peak_rss_mb"), 0) + " MB); ";
    case Baseline::kOneStream:
      if (base == nullptr) return {};
      row["vs_one_stream"] = number(zoo, "value") / number(*base, "value");
      return fixed(row["vs_one_stream"].get<double>(), 2) + "x one stream's tokens/s; ";
    case Baseline::kOneProcess: {
      // N ranks sharing a sequence against one process holding all of it, and one holding a
      // rank's share (T / N tokens), where this run measured them before.
      const auto ranks = zoo.at("ranks").get<int64_t>();
      const std::string& single = workload.baseline_rows.at(0);
      const std::string t = single.substr(single.rfind('-') + 1);
      const std::string t_share = std::to_string(std::stoll(t) / ranks);
      std::string notes = std::to_string(ranks) + " ranks of " + t_share + " tokens, largest " + memory + " " +
                          fixed(number(zoo, "peak_rss_mb"), 0) + " MB";
      if (const json* one_share = measured(1)) {
        row["peak_rss_vs_one_rank_share"] = number(zoo, "peak_rss_mb") / number(*one_share, "peak_rss_mb");
        notes += " = " + fixed(100.0 * row["peak_rss_vs_one_rank_share"].get<double>(), 0) +
                 "% of one process's at " + t_share + " tokens";
      }
      if (base != nullptr) {
        row["peak_rss_vs_one_rank"] = number(zoo, "peak_rss_mb") / number(*base, "peak_rss_mb");
        row["speed_vs_one_rank"] = number(zoo, "value") / number(*base, "value");
        notes += ", " + fixed(100.0 * row["peak_rss_vs_one_rank"].get<double>(), 0) + "% of one process's at " + t +
                 "; " + fixed(row["speed_vs_one_rank"].get<double>(), 2) + "x its tokens/s";
      }
      return notes;
    }
    case Baseline::kZooTokenizer:
      if (base == nullptr) return {};
      row["per_byte_vs_zoo"] = number(zoo, "value") / number(*base, "value");
      return "; " + fixed(row["per_byte_vs_zoo"].get<double>(), 2) + "x zoo's SentencePiece per byte";
    case Baseline::kDenseSameActive:
      // Per token a mixture does the dense model's work plus routing: the goal is near 1x its
      // time, where computing every expert over every token would be E / k times it.
      if (base == nullptr) return {};
      row["time_vs_dense"] = number(*base, "value") / number(zoo, "value");
      return fixed(row["time_vs_dense"].get<double>(), 2) + "x the dense model's time a token at the same active "
             "size; ";
  }
  return {};
}

// MFU against the matmul rate of the row's own precision (and PyTorch's, where it ran), and
// decoding against the bound the copy rate sets.
std::string rate_notes(const Workload& workload, const json& zoo, const json& pytorch, const MeasuredRows& earlier,
                       json& row) {
  std::string notes;
  const auto matmul = earlier.find(workload.matmul_row);
  if (zoo.contains("flops_per_token") && matmul != earlier.end()) {
    const double peak = number(matmul->second, "value") * 1e9;
    row["mfu"] = number(zoo, "value") * number(zoo, "flops_per_token") / peak;
    notes += "MFU " + fixed(row["mfu"].get<double>(), 2);
    if (!pytorch.is_null()) {
      row["pytorch_mfu"] = number(pytorch, "value") * number(zoo, "flops_per_token") / peak;
      notes += " (pytorch " + fixed(row["pytorch_mfu"].get<double>(), 2) + ")";
    }
  }
  const auto copy = earlier.find("bandwidth");
  if (workload.bandwidth_bound && zoo.contains("bytes_per_token") && copy != earlier.end()) {
    const double bound = number(copy->second, "value") * 1e9 / number(zoo, "bytes_per_token");
    row["bound"] = bound;
    row["bound_fraction"] = number(zoo, "value") / bound;
    notes += "bandwidth bound " + fixed(bound, 1) + " tokens/s: " +
             fixed(100.0 * row["bound_fraction"].get<double>(), 0) + "%";
  }
  return notes;
}

// What a family's rows say besides their comparisons.
std::string family_notes(const Workload& workload, const json& zoo, const json& pytorch, json& row,
                         const std::string& memory, const std::string& compared) {
  const auto peak_memory = [&] {
    return std::string(compared.empty() ? "" : "; ") + memory + " " + fixed(number(zoo, "peak_rss_mb"), 0) + " MB" +
           (!pytorch.is_null() ? " (pytorch " + fixed(number(pytorch, "peak_rss_mb"), 0) + ")" : "");
  };
  switch (workload.family) {
    case WorkloadFamily::kMachine:
    case WorkloadFamily::kInference:
    case WorkloadFamily::kGeneration:
    case WorkloadFamily::kDecode:
    case WorkloadFamily::kRing: return compared;
    case WorkloadFamily::kTraining:
      // The plain 1024-token row says what its recomputing twin is compared with.
      if (workload.baseline == Baseline::kNone && workload.name.ends_with("-1024")) {
        return "activations " + fixed(number(zoo, "activation_mb"), 0) + " MB; " + compared + peak_memory();
      }
      return compared + peak_memory();
    case WorkloadFamily::kLongSequence: return compared + peak_memory();
    case WorkloadFamily::kTokenizer:
      // PyTorch has no tokenizer: the tokenizer rows compare with each other (bytes per second).
      return fixed(number(zoo, "text_bytes_per_token"), 2) + " bytes of text per token" + compared;
    case WorkloadFamily::kServe: {
      for (const char* key :
           {"token_p50_ms", "token_p99_ms", "request_p50_s", "request_p99_s", "idle_ms", "first_turn_ms", "free_ms",
            "one_adapter_at_a_time"}) {
        if (zoo.contains(key)) row[std::string("zoo_") + key] = zoo[key];
        if (pytorch.contains(key)) row[std::string("pytorch_") + key] = pytorch[key];
      }
      std::string notes;
      if (zoo.contains("idle_ms")) {
        notes = "128-token prompt under 8 streams; idle " + fixed(number(zoo, "idle_ms"), 0) + " ms (" +
                fixed(number(zoo, "vs_idle"), 2) + "x under load)";
      } else if (zoo.contains("first_turn_ms")) {
        notes = "a 992-token conversation's next turn; its first turn " + fixed(number(zoo, "first_turn_ms"), 0) +
                " ms (" + fixed(number(zoo, "vs_first_turn"), 2) + "x the first)";
      } else if (zoo.contains("one_adapter_at_a_time")) {
        notes = "8 streams over 4 LoRA adapters in one batch; one adapter at a time " +
                fixed(number(zoo, "one_adapter_at_a_time"), 1) + " tokens/s (" +
                fixed(number(zoo, "vs_one_adapter_at_a_time"), 2) + "x together); the 8 as the base's rows " +
                fixed(number(zoo, "base_rows"), 1) + " tokens/s (" + fixed(number(zoo, "vs_base_rows"), 2) + "x)";
      } else if (zoo.contains("free_ms")) {
        notes = "a token at 8 streams held to JSON (" + fixed(number(zoo, "tokens"), 0) + " tokens); free " +
                fixed(number(zoo, "free_ms"), 1) + " ms (" + fixed(number(zoo, "free_tokens"), 0) + " tokens; " +
                fixed(number(zoo, "vs_free"), 3) + "x held)";
      } else {
        notes = compared + "per token p50 " + fixed(number(zoo, "token_p50_ms"), 0) + " ms, p99 " +
                fixed(number(zoo, "token_p99_ms"), 0) + " ms";
      }
      if (pytorch.contains("token_p50_ms")) {
        notes += " (pytorch " + fixed(number(pytorch, "token_p50_ms"), 0) + " ms, " +
                 fixed(number(pytorch, "token_p99_ms"), 0) + " ms)";
      }
      if (pytorch.contains("idle_ms")) notes += "; pytorch idle " + fixed(number(pytorch, "idle_ms"), 0) + " ms";
      return notes;
    }
  }
  return compared;
}

}  // namespace

std::string fixed(double value, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << value;
  return s.str();
}

Row make_row(const Workload& workload, const json& zoo, const json& pytorch, const MeasuredRows& earlier,
             bool on_gpu, const json& llama_cpp) {
  const std::string memory = on_gpu ? "peak GPU memory" : "peak RSS";
  json row = {{"name", workload.name}, {"unit", zoo["unit"]}, {"zoo", zoo["value"]},
              {"zoo_peak_rss_mb", zoo["peak_rss_mb"]}};
  if (zoo.contains("ranks")) {  // a ring row: its ranks' own peaks besides the largest
    row["ranks"] = zoo["ranks"];
    row["rank_peak_rss_mb"] = zoo["rank_peak_rss_mb"];
  }
  if (!pytorch.is_null()) {
    row["pytorch"] = pytorch["value"];
    row["pytorch_compiled"] = pytorch.value("compiled", false);
    row["ratio"] = number(zoo, "value") / number(pytorch, "value");
    row["pytorch_peak_rss_mb"] = pytorch["peak_rss_mb"];
  }
  const std::string compared = baseline_notes(workload, zoo, earlier, row, memory) +
                               rate_notes(workload, zoo, pytorch, earlier, row);
  std::string notes = family_notes(workload, zoo, pytorch, row, memory, compared) + op_notes(zoo, pytorch, row);
  if (!llama_cpp.is_null()) {
    row["llama_cpp"] = llama_cpp["value"];
    row["llama_cpp_type"] = llama_cpp["type"];
    row["llama_cpp_peak_rss_mb"] = llama_cpp["peak_rss_mb"];
    row["vs_llama_cpp"] = number(zoo, "value") / number(llama_cpp, "value");
    notes += std::string(notes.empty() ? "" : "; ") + "llama.cpp " + llama_cpp["type"].get<std::string>() + " " +
             fixed(number(llama_cpp, "value"), 1) + " " + zoo["unit"].get<std::string>() + ": zoo " +
             fixed(row["vs_llama_cpp"].get<double>(), 2) + "x";
  }
  if (zoo.contains("split_ms")) {
    row["zoo_split_ms"] = zoo["split_ms"];
    if (pytorch.contains("split_ms")) row["pytorch_split_ms"] = pytorch["split_ms"];
  }
  if (zoo.contains("profile") && !zoo["profile"].empty()) row["profile"] = zoo["profile"];
  return {row, notes};
}

}  // namespace zoo::bench
