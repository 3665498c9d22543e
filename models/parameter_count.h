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

// The parameters one token's forward reads: all of them, less the experts each sparse layer does
// not route it to ((experts - experts_per_token) gated feed-forwards a layer). Mixtral 8x7B: 12.9B
// active of 46.7B. Equals count_parameters for dense models.
int64_t count_active_parameters(const ModelConfig& config);

// Parameters under each top-level module, in registration order, as the built model's
// parameter_breakdown lists them.
std::vector<std::pair<std::string, int64_t>> parameter_breakdown(const ModelConfig& config);

// Size checks, for any config whose sizes are positive (the exact counts above would overflow on
// an absurd one): floating-point estimates, each a lower bound, so that a check refusing what
// exceeds memory never refuses what would fit.
//
// count_parameters(config), as a double.
double estimate_parameters(const ModelConfig& config);
// The float32 weights build_model allocates: parameters and the tables built with them.
double weights_bytes_lower_bound(const ModelConfig& config);
// Training's share besides activations: the weights, and where every parameter trains (not
// LoRA), its gradient and AdamW's two moments in float32: 16 bytes a parameter.
double training_bytes_lower_bound(const ModelConfig& config, bool trains_every_parameter);
// Activations a training step over (batch_size, length) tokens holds for its backward, at least:
// each block's input at 2 bytes an element. The real figure is several times this.
double activation_bytes_lower_bound(const ModelConfig& config, int64_t batch_size, int64_t length);
// The keys and values a KV cache holds for `rows` sequences at `element_bytes` a value, at
// least: every softmax layer's, `positions` of them (a sliding window's layers at most the
// window's), and an encoder-decoder's cross-attention over `memory_positions` encoded tokens.
// Linear layers' fixed states are not counted.
double kv_cache_bytes_lower_bound(const ModelConfig& config, int64_t rows, int64_t positions, int64_t memory_positions,
                                  int64_t element_bytes);
// The size key that makes the model large, with its value: "vocab_size (9223372036854775807)".
// It is the one that, were it 1, would shrink weights_bytes_lower_bound most. Messages about
// size name it.
std::string largest_size(const ModelConfig& config);

}  // namespace zoo
