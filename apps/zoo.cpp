// The zoo command line. Thin by design: parse, validate, call the library.

#include <exception>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "core/runtime.h"
#include "models/config.h"
#include "models/model.h"

namespace {

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// zoo info: the resolved architecture and exact parameter counts.
int run_info(const std::string& name, const std::vector<std::string>& overrides, bool show_config) {
  const std::string path = zoo::find_config(name);
  zoo::ModelConfig config = zoo::load_config(path);
  for (const auto& o : overrides) zoo::apply_override(config, o, "override '" + o + "'");
  zoo::Model model = zoo::build_model(config);
  std::cout << "config: " << path << "\n" << zoo::describe(config);
  if (show_config) std::cout << "\nresolved config:\n" << zoo::to_yaml(config);
  std::cout << "\nparameters by module:\n";
  for (const auto& [module, count] : zoo::parameter_breakdown(*model.module())) {
    std::cout << "  " << std::left << std::setw(28) << module << std::right << std::setw(16)
              << with_commas(count) << "\n";
  }
  const int64_t total = zoo::count_parameters(*model.module());
  std::cout << "parameters: " << total << " (" << with_commas(total) << ")\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"zoo: train, fine-tune and export BERT-, GPT- and T5-style transformers"};
  app.set_version_flag("--version", "zoo " + zoo::version() + " (" + zoo::torch_description() + ")");
  int64_t threads = 0;
  app.add_option("--threads", threads,
                 "intra-op CPU threads (default: ZOO_NUM_THREADS, else the CPUs this process may use)")
      ->check(CLI::PositiveNumber);
  app.require_subcommand(0, 1);

  auto* env = app.add_subcommand("env", "print the versions, devices and thread settings in use");

  auto* info = app.add_subcommand("info", "print a model config's architecture and parameter count");
  std::string info_config;
  std::vector<std::string> info_overrides;
  bool info_show_config = false;
  info->add_option("config", info_config, "config file, or a name in configs/ (e.g. gpt2-small)")
      ->required();
  info->add_option("overrides", info_overrides, "key=value changes to the config");
  info->add_flag("--config", info_show_config, "also print every resolved config field");

  auto* schema = app.add_subcommand("schema", "print every model config key with its default");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    const int64_t n = zoo::configure_threads(threads);
    if (env->parsed()) {
      std::cout << "zoo " << zoo::version() << "\n"
                << zoo::torch_description() << "\n"
                << "intra-op threads: " << n << " (CPUs available: " << zoo::available_cpus()
                << ")\n"
                << at::get_parallel_info();
      return 0;
    }
    if (info->parsed()) return run_info(info_config, info_overrides, info_show_config);
    if (schema->parsed()) {
      std::cout << zoo::schema_documentation();
      return 0;
    }
    std::cout << app.help();
    return 0;
  } catch (const zoo::ConfigError& e) {
    std::cerr << "zoo: error: " << e.what() << "\n";
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "zoo: error: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "zoo: error: " << e.what() << "\n";
    return 1;
  }
}
