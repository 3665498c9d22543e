// The zoo command line: collects the subcommands, parses, runs one, and turns errors into
// messages and exit codes (2: a config or option is wrong; 3: training met a non-finite loss;
// 1: anything else). Also the option checks the commands share, and env, info and schema.

#include <csignal>
#include <cmath>
#include <exception>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "apps/commands.h"
#include "core/outputs.h"
#include "core/runtime.h"
#include "core/strings.h"
#include "kernels/quantized_weight.h"
#include "models/config.h"
#include "models/layer_options.h"
#include "models/model.h"
#include "models/parameter_count.h"
#include "train/autocast.h"
#include "train/checkpoint.h"
#include "train/plot.h"
#include "train/precision.h"
#include "train/run_config.h"
#include "train/run_directory.h"
#include "train/trainer.h"

namespace zoo::cli {

namespace {

// A check of an option's number whose failure reads as a sentence: "must be ..., got 'x'".
template <typename Number>
CLI::Validator number_check(std::function<bool(Number)> ok, const std::string& must, const std::string& description) {
  return CLI::Validator(
      [ok, must](std::string& value) -> std::string {
        std::istringstream in(value);
        Number n{};
        const bool parsed = static_cast<bool>(in >> n) && in.peek() == EOF;
        return parsed && ok(n) ? "" : must + ", got '" + value + "'";
      },
      description);
}

}  // namespace

CLI::Validator positive_integer() {
  return number_check<long long>([](long long n) { return n > 0; }, "must be a positive integer", "integer > 0");
}

CLI::Validator non_negative_integer() {
  return number_check<long long>([](long long n) { return n >= 0; }, "must be 0 or a positive integer",
                                 "integer >= 0");
}

CLI::Validator integer_in(int64_t low, int64_t high) {
  return number_check<long long>([low, high](long long n) { return n >= low && n <= high; },
                                 "must be an integer from " + std::to_string(low) + " to " + std::to_string(high),
                                 "integer in [" + std::to_string(low) + ", " + std::to_string(high) + "]");
}

CLI::Validator finite_number() {
  return number_check<double>([](double x) { return std::isfinite(x); }, "must be a finite number", "number");
}

CLI::Validator positive_number() {
  return number_check<double>([](double x) { return std::isfinite(x) && x > 0; }, "must be a positive number",
                              "number > 0");
}

CLI::Validator fraction() {
  return number_check<double>([](double x) { return x >= 0 && x < 1; }, "must be in [0, 1)", "fraction");
}

CLI::Option* add_overwrite_flag(CLI::App* command, bool& overwrite, const std::string& what) {
  return command->add_flag("--overwrite", overwrite,
                           "replace " + what + " at that path when zoo wrote it (zoo never replaces anything else)");
}

void add_device_option(CLI::App* command, std::string& device) {
  command->add_option("--device", device, "cpu, cuda, cuda:N or auto")->check([](const std::string& d) {
    return d == "cpu" || d == "auto" || d.rfind("cuda", 0) == 0 ? "" : "expected cpu, cuda, cuda:N or auto, got '" + d + "'";
  });
}

CLI::Option* add_dtype_option(CLI::App* command, std::string& dtype, const std::string& description) {
  return command->add_option("--dtype", dtype, description)->check(CLI::IsMember(enum_names<WeightsDtype>()));
}

void add_quantize_options(CLI::App* command, QuantizeArgs& args, const std::string& flag) {
  command->add_option(flag, args.format, "quantize the linear layers' weights" +
                                             std::string(flag == "--quantize" ? " at load" : "") +
                                             ": int8 (per output) or int4 (per group)")
      ->check(CLI::IsMember(enum_names<WeightFormat>()));
  command->add_option("--group-size", args.group_size, "int4: inputs per scale (32, 64 or 128)")
      ->check(CLI::IsMember(std::vector<int64_t>{32, 64, 128}));
  command->add_flag("--keep-embeddings", args.keep_embeddings,
                    "with " + flag + ": the token embedding (and a head tied to it) keeps the model's dtype");
}

std::optional<WeightQuantization> QuantizeArgs::requested() const {
  if (format.empty()) return std::nullopt;
  auto q = WeightQuantization::every_weight(from_string<WeightFormat>(format), group_size);
  q.token_embeddings = !keep_embeddings;
  return q;
}

void quantize_at_load(Model& model, const QuantizeArgs& args, std::ostream& log) {
  const auto q = args.requested();
  if (!q) return;
  log << quantize_model(model, *q).describe(*q) << "\n";
}

void say_replaced(const std::string& path, const std::string& what) {
  std::cerr << "replaced " << what << " at " << path << "\n";
}

namespace {

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// zoo info: the resolved architecture and exact parameter counts, from the config alone (no
// weights are allocated, so a config far larger than this machine is described too).
int run_info(const std::string& name, const std::vector<std::string>& overrides, bool show_config) {
  // A checkpoint (or run) directory: its config, and what its weights file holds.
  const bool checkpoint = std::filesystem::is_directory(name);
  const std::string dir = checkpoint ? resolve_checkpoint(name) : "";
  const std::string path = checkpoint ? dir + "/config.yaml" : find_config(name);
  ModelConfig config = load_config(path);
  apply_overrides(config, overrides);
  std::cout << "config: " << path << "\n" << describe(config) << describe_attention_paths(config);
  if (show_config) std::cout << "\nresolved config:\n" << to_yaml(config);
  std::cout << "\nparameters by module:\n";
  for (const auto& [module, count] : parameter_breakdown(config)) {
    std::cout << "  " << std::left << std::setw(28) << module << std::right << std::setw(16) << with_commas(count)
              << "\n";
  }
  const int64_t total = count_parameters(config);
  std::cout << "parameters: " << total << " (" << with_commas(total) << "), " << describe_bytes(total * 4)
            << " in float32\n";
  if (checkpoint) std::cout << describe_stored_weights(dir, total) << "\n";
  if (config.has_moe_layers()) {
    const int64_t active = count_active_parameters(config);
    std::cout << "active parameters: " << active << " (" << with_commas(active) << ") a token, "
              << config.experts_per_token << " of " << config.experts << " experts in each sparse layer\n";
  }
  return 0;
}

// The thread count chosen for this process (env prints it).
int64_t g_threads = 0;

}  // namespace

std::vector<Command> add_info_commands(CLI::App& app) {
  std::vector<Command> commands;
  auto* env = app.add_subcommand("env", "print the versions, devices and thread settings in use");
  commands.push_back({env, [] {
                        std::cout << "zoo " << version() << "\n"
                                  << torch_description() << "\n"
                                  << "intra-op threads: " << g_threads << " (CPUs available: " << available_cpus()
                                  << ")\n"
                                  << cpu_kernels_description() << "\n"
                                  << "bf16 matrix products: " << std::fixed << std::setprecision(2)
                                  << measure_cpu_bf16_speedup() << "x fp32's on this CPU (measured; precision=auto "
                                  << "trains in bf16 from " << kBf16SpeedupForAuto << "x)\n"
                                  << at::get_parallel_info();
                        return 0;
                      }});

  struct InfoArgs {
    std::string config;
    std::vector<std::string> overrides;
    bool show_config = false;
  };
  auto i = std::make_shared<InfoArgs>();
  auto* info = app.add_subcommand("info", "print a model's architecture and parameter count (a checkpoint's: its stored bytes too)");
  info->add_option("config", i->config, "config file, a name in configs/ (e.g. gpt2-small), or a checkpoint")->required();
  info->add_option("overrides", i->overrides, "key=value changes to the config");
  info->add_flag("--config", i->show_config, "also print every resolved config field");
  commands.push_back({info, [i] { return run_info(i->config, i->overrides, i->show_config); }});

  auto plot_dir = std::make_shared<std::string>();
  auto plot_out = std::make_shared<std::string>();
  auto plot_overwrite = std::make_shared<bool>(false);
  auto* plot_cmd = app.add_subcommand("plot", "draw a run's training and validation loss curves (PNG)");
  plot_cmd->add_option("run_dir", *plot_dir, "run directory")->required();
  plot_cmd->add_option("--out", *plot_out, "PNG path (default: RUN_DIR/curves.png)");
  add_overwrite_flag(plot_cmd, *plot_overwrite, "a PNG");
  commands.push_back({plot_cmd, [plot_dir, plot_out, plot_overwrite] {
                        // The run's own curves.png is redrawn; any other path follows the output rule.
                        if (!plot_out->empty()) check_output(*plot_out, OutputKind::kImageFile, *plot_overwrite);
                        const std::string written = plot_run(*plot_dir, *plot_out);  // a failure prints nothing
                        std::cout << "wrote " << written << "\n";
                        return 0;
                      }});

  auto run_keys = std::make_shared<bool>(false);
  auto* schema = app.add_subcommand("schema", "print every model config key with its default");
  schema->add_flag("--run", *run_keys, "print the run config keys (zoo train, zoo finetune) instead");
  commands.push_back({schema, [run_keys] {
                        std::cout << (*run_keys ? run_schema_documentation() : schema_documentation());
                        return 0;
                      }});
  return commands;
}

namespace {

// Runs the parsed command; exceptions become messages naming what went wrong.
int run(const std::vector<Command>& commands, int64_t requested_threads, CLI::App& app) {
  try {
    std::string note;
    g_threads = configure_threads(requested_threads, &note);
    if (!note.empty()) std::cerr << "zoo: " << note << "\n";
    for (const auto& command : commands) {
      if (command.app->parsed()) return command.run();
    }
    std::cout << app.help();
    return 0;
  } catch (const ConfigError& e) {
    std::cerr << "zoo: error: " << e.what() << "\n";
    return 2;
  } catch (const NonFiniteLoss& e) {
    std::cerr << "zoo: error: " << e.what() << "\n";
    return 3;
  } catch (const std::invalid_argument& e) {
    std::cerr << "zoo: error: " << e.what() << "\n";
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "zoo: error: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // A file-system failure zoo did not word itself: the path first, then what is wrong.
    std::cerr << "zoo: error: " << e.path1().string() << ": " << e.code().message() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "zoo: error: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "zoo: error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace
}  // namespace zoo::cli

int main(int argc, char** argv) {
  zoo::configure_allocator();  // before the first large allocation
  // A write past the file-size limit (ulimit -f) fails with EFBIG, which zoo reports by name,
  // instead of killing the process half-way through a checkpoint.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"zoo: train, fine-tune and export BERT-, GPT- and T5-style transformers"};
  app.set_version_flag("--version", "zoo " + zoo::version() + " (" + zoo::torch_description() + ")");
  int64_t threads = 0;
  app.add_option("--threads", threads,
                 "intra-op CPU threads (default: ZOO_NUM_THREADS, else the CPUs this process may use)")
      ->check(zoo::cli::positive_integer());
  app.require_subcommand(0, 1);

  std::vector<zoo::cli::Command> commands;
  for (auto add : {zoo::cli::add_info_commands, zoo::cli::add_text_commands, zoo::cli::add_training_commands,
                   zoo::cli::add_interop_commands, zoo::cli::add_bench_commands, zoo::cli::add_serve_commands}) {
    for (auto& c : add(app)) commands.push_back(std::move(c));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return zoo::cli::run(commands, threads, app);
}
