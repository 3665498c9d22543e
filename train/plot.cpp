#include "train/plot.h"

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/files.h"
#include "train/progress.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;

// A gnuplot single-quoted string ('' stands for a quote).
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string plot_run(const std::string& run_dir, const std::string& out_png) {
  const std::string metrics = (fs::path(run_dir) / "metrics.jsonl").string();
  const std::string out = out_png.empty() ? (fs::path(run_dir) / "curves.png").string() : out_png;
  // The last record of each step wins (a resumed run may have logged a step twice).
  std::map<int64_t, double> train, val;
  for (const auto& r : read_metrics(metrics)) {
    if (!r.contains("loss") || !r["loss"].is_number()) continue;
    const int64_t step = r.value("step", int64_t{0});
    (r.value("split", std::string()) == "val" ? val : train)[step] = r["loss"].get<double>();
  }
  if (train.empty()) throw std::runtime_error(metrics + ": no training losses to plot");

  const fs::path scratch = temporary_path_for(out + ".plot");
  fs::create_directories(scratch);
  auto write_series = [&](const std::map<int64_t, double>& series, const std::string& name) {
    std::ofstream f(scratch / name);
    for (const auto& [step, loss] : series) f << step << " " << loss << "\n";
    return (scratch / name).string();
  };
  const std::string png = (scratch / "curves.png").string();
  std::ostringstream script;
  script << "set terminal pngcairo size 960,560 enhanced font 'sans,11'\n"
         << "set output " << quote(png) << "\n"
         << "set title " << quote("zoo run " + fs::path(run_dir).filename().string()) << " noenhanced\n"
         << "set xlabel 'step'\nset ylabel 'loss (nats/token)'\nset grid\nset key top right\n"
         << "plot " << quote(write_series(train, "train.dat"))
         << " using 1:2 with lines lw 1 lc rgb '#4477aa' title 'training loss'";
  if (!val.empty()) {
    script << ", " << quote(write_series(val, "val.dat"))
           << " using 1:2 with linespoints lw 2 pt 7 lc rgb '#cc3311' title 'validation loss'";
  }
  script << "\n";
  const std::string script_path = (scratch / "curves.gp").string();
  std::ofstream(script_path) << script.str();
  const std::string errors = (scratch / "errors.txt").string();
  const int status = std::system(("gnuplot " + script_path + " 2>" + errors).c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code != 0 || !fs::exists(png) || fs::file_size(png) == 0) {
    std::string detail = fs::exists(errors) ? read_file(errors) : "";
    fs::remove_all(scratch);
    if (code == 127) throw std::runtime_error("zoo plot needs gnuplot: apt install gnuplot-nox");
    throw std::runtime_error("gnuplot failed to draw " + out + ": " + detail);
  }
  if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
  fs::copy_file(png, out + ".tmp", fs::copy_options::overwrite_existing);
  fs::rename(out + ".tmp", out);
  fs::remove_all(scratch);
  return out;
}

}  // namespace zoo
