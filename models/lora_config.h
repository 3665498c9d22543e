#pragma once
// LoRA's settings (the run config's lora.* keys) and what a LoRA checkpoint records about the
// base it adapts. No LibTorch here: the run config reads these.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zoo {

// The run config's lora.* keys.
struct LoraConfig {
  int64_t rank = 0;     // 0: no LoRA (full fine-tuning)
  double alpha = 16.0;  // the update is scaled by alpha / rank
  double dropout = 0.05;
  // Patterns over projection names: a bare part (q, k, v, out, up, gate, down) matches it in
  // every layer; a pattern with '.' or '*' is a glob over the whole name
  // (decoder_blocks.*.cross_attn.q); "all" takes every projection.
  std::vector<std::string> targets = {"q", "v"};

  bool enabled() const { return rank > 0; }
  nlohmann::json to_json() const;
  // Throws naming `where` and the key.
  static LoraConfig from_json(const nlohmann::json& j, const std::string& where);
};

// What a LoRA checkpoint says of itself (lora.json): the adapters' config, the base checkpoint
// they adapt (by absolute path and the content hash of its model.pt), and the base-model tensors
// trained alongside (a fresh classification head), saved with the adapters.
struct LoraState {
  LoraConfig config;
  std::string base;       // the base checkpoint directory
  std::string base_hash;  // of base/model.pt (file_hash, core/files.h)
  std::vector<std::string> trained;

  nlohmann::json to_json() const;
  static LoraState parse(const std::string& text, const std::string& path);
};

inline constexpr const char* kLoraStateFile = "lora.json";

}  // namespace zoo
