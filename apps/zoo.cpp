// The zoo command line. Thin by design: parse, validate, call the library.

#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "core/runtime.h"

int main(int argc, char** argv) {
  CLI::App app{"zoo: train, fine-tune and export BERT-, GPT- and T5-style transformers"};
  app.set_version_flag("--version", "zoo " + zoo::version() + " (" + zoo::torch_description() + ")");
  int64_t threads = 0;
  app.add_option("--threads", threads,
                 "intra-op CPU threads (default: ZOO_NUM_THREADS, else the CPUs this process may use)")
      ->check(CLI::PositiveNumber);
  app.require_subcommand(0, 1);

  auto* env = app.add_subcommand("env", "print the versions, devices and thread settings in use");

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
    std::cout << app.help();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "zoo: error: " << e.what() << "\n";
    return 1;
  }
}
