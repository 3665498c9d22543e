#pragma once
// The zoo command line's subcommands. Each file adds its commands to the app the same way and
// returns what runs each one once the command line is parsed; zoo.cpp only collects them,
// parses, and turns errors into messages and exit codes. Everything testable lives in the
// library: these files parse options, check them, call the library and print.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace zoo {
struct Model;
struct WeightQuantization;
}

namespace zoo::cli {

struct Command {
  CLI::App* app;
  std::function<int()> run;
};

// env, info, plot, schema.
std::vector<Command> add_info_commands(CLI::App& app);
// corpus, tokenizer train|encode|decode, data prepare.
std::vector<Command> add_text_commands(CLI::App& app);
// train, finetune, eval, generate.
std::vector<Command> add_training_commands(CLI::App& app);
// import-hf, export-hf, export.
std::vector<Command> add_interop_commands(CLI::App& app);
// bench.
std::vector<Command> add_bench_commands(CLI::App& app);
// serve.
std::vector<Command> add_serve_commands(CLI::App& app);

// Option checks whose failures read as sentences ("--steps: must be a positive integer, got 0").
CLI::Validator positive_integer();
CLI::Validator non_negative_integer();
CLI::Validator integer_in(int64_t low, int64_t high);  // a documented limit, checked as the line is parsed
CLI::Validator finite_number();
CLI::Validator positive_number();
CLI::Validator fraction();  // in [0, 1)

// Adds --device: cpu, cuda, cuda:N or auto.
void add_device_option(CLI::App* command, std::string& device);

// Adds --dtype (a WeightsDtype spelling, train/checkpoint.h: auto, fp32 or bf16) into `dtype`.
CLI::Option* add_dtype_option(CLI::App* command, std::string& dtype, const std::string& description);

// --quantize int8|int4, --group-size and --keep-embeddings: every linear layer of the model
// quantized once loaded (kernels/quantized_weight.h), as torchao's quantize_ does, and the token
// embedding (a head tied to it with it) unless kept in the model's dtype.
struct QuantizeArgs {
  std::string format;  // empty: not quantized
  int64_t group_size = 32;
  bool keep_embeddings = false;
  // What they ask, or nullopt without a format.
  std::optional<WeightQuantization> requested() const;
};
// `flag` names the format's option: --quantize (at load), or --to (zoo quantize).
void add_quantize_options(CLI::App* command, QuantizeArgs& args, const std::string& flag = "--quantize");
// Quantizes `model` (placed on its device, in its dtype) as `args` ask, saying so on `log`; a
// model quantized already is refused (quantize_model).
void quantize_at_load(Model& model, const QuantizeArgs& args, std::ostream& log);

// Adds --overwrite: "replace OUTPUT at the path when zoo wrote it (never anything else)".
CLI::Option* add_overwrite_flag(CLI::App* command, bool& overwrite, const std::string& what);

// The line a command prints after replacing an earlier output of its own at `path`.
void say_replaced(const std::string& path, const std::string& what);

}  // namespace zoo::cli
