// libFuzzer target for the YAML configs, through the field tables: the input is a model config,
// a run config, and (after a line "---overrides") key=value overrides applied to gpt-tiny. Every
// outcome is a config or a ConfigError naming the problem; nothing else may escape.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "models/config.h"
#include "train/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto split = input.find("\n---overrides\n");
  const std::string yaml = input.substr(0, split);
  try {
    zoo::parse_config(yaml, "fuzz.yaml");
  } catch (const zoo::ConfigError&) {
  }
  try {
    zoo::parse_run_config(yaml, "fuzz.yaml");
  } catch (const zoo::ConfigError&) {
  }
  if (split != std::string::npos) {
    zoo::RunConfig run;
    run.model_config = zoo::parse_config(
        "family: gpt\nvocab_size: 512\nd_model: 32\nn_layers: 2\nn_heads: 4\nd_ff: 64\nmax_positions: 64\n", "base");
    std::istringstream lines(input.substr(split + 14));
    for (std::string line; std::getline(lines, line);) {
      try {
        zoo::apply_run_override(run, line);
      } catch (const zoo::ConfigError&) {
      }
    }
    zoo::parse_run_config(zoo::to_yaml(run), "round trip");  // what was accepted reads back
  }
  return 0;
}
