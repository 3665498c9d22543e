#pragma once
// Hugging Face's config.json to and from zoo's ModelConfig, for the architectures zoo maps.
// No LibTorch here: the fuzz target reads config.json files alone.

#include <string>

#include <nlohmann/json.hpp>

#include "models/config.h"

namespace zoo {

// config.json -> ModelConfig. Throws ConfigError naming the file and the key for an unknown
// model_type, a missing key, a value of the wrong type or a setting zoo has no equivalent for.
ModelConfig config_from_hf(const nlohmann::json& config, const std::string& source);

// ModelConfig -> config.json, for configs with a Hugging Face equivalent; otherwise throws
// ConfigError saying which setting has none.
nlohmann::json config_to_hf(const ModelConfig& config);

}  // namespace zoo
