#pragma once
// Subcommands of the zoo command line that live outside zoo.cpp: each adds itself to the app
// and returns what runs it once the command line is parsed.

#include <functional>
#include <vector>

#include <CLI/CLI.hpp>

namespace zoo::cli {

struct Command {
  CLI::App* app;
  std::function<int()> run;
};

// train, finetune, eval, generate, plot.
std::vector<Command> add_training_commands(CLI::App& app);

// import-hf, export-hf, export.
std::vector<Command> add_interop_commands(CLI::App& app);

// bench.
std::vector<Command> add_bench_commands(CLI::App& app);

}  // namespace zoo::cli
