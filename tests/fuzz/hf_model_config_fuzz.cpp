// libFuzzer target for Hugging Face config.json files: reading either gives a valid zoo config
// (which writes back to config.json) or throws ConfigError naming the key.
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "interop/hf_model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto json = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;  // malformed JSON is nlohmann's to report
  try {
    const auto config = zoo::config_from_hf(json, "config.json");
    config.validate("config.json");
    try {
      zoo::config_to_hf(config);
    } catch (const zoo::ConfigError&) {
    }
  } catch (const zoo::ConfigError&) {
  }
  return 0;
}
