#pragma once
// Parameter counts from a config alone, without building the model: `zoo info` describes a
// config far larger than the machine, and a model's size is known before anything is allocated.
// Tests check every shipped config and variant against the built modules' own counts.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/config.h"

namespace zoo {

// Of a valid config (parsing and build_model validate). Distinct parameters (a tied matrix counts
// once), as count_parameters(build_model(config)).
int64_t count_parameters(const ModelConfig& config);

// Parameters under each top-level module, in registration order, as the built model's
// parameter_breakdown lists them.
std::vector<std::pair<std::string, int64_t>> parameter_breakdown(const ModelConfig& config);

}  // namespace zoo
