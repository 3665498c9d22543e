// zoo serve.

#include <filesystem>
#include <iostream>
#include <memory>

#include <torch/torch.h>

#include "apps/commands.h"
#include "core/runtime.h"
#include "interop/hugging_face.h"
#include "serve/server.h"
#include "serve/tool_calls.h"
#include "train/checkpoint.h"
#include "train/run_directory.h"

namespace zoo::cli {
namespace {

namespace fs = std::filesystem;

struct ServeArgs {
  std::string model, device = "auto", dtype = "auto", name;
  std::vector<std::string> loras;  // NAME=PATH
  ServeOptions options;
  QuantizeArgs quantize;
};

int serve_command(ServeArgs a) {
  // A Hugging Face directory (config.json, no zoo config.yaml) is imported as it is loaded.
  Model model;
  std::shared_ptr<const Tokenizer> tokenizer;
  torch::ScalarType stored = torch::kFloat;
  const fs::path path(a.model);
  if (fs::is_directory(path) && fs::exists(path / "config.json") && !fs::exists(path / "config.yaml")) {
    model = import_hf(a.model);
    if (!has_hf_tokenizer(a.model)) throw std::runtime_error(a.model + ": no tokenizer files in the directory");
    tokenizer = std::make_shared<Tokenizer>(Tokenizer::load(a.model));
  } else {
    const std::string dir = resolve_checkpoint(a.model);
    Checkpoint c = load_checkpoint(dir);
    if (!c.tokenizer) throw std::runtime_error(dir + ": the checkpoint has no tokenizer");
    model = std::move(c.model);
    tokenizer = c.tokenizer;
    stored = c.stored_dtype;
    a.options.base_dir = dir;
  }
  for (const auto& spec : a.loras) {
    const auto equals = spec.find('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == spec.size()) {
      throw std::runtime_error("--lora " + spec + ": expected NAME=PATH (a zoo LoRA checkpoint or a PEFT directory)");
    }
    a.options.loras.emplace_back(spec.substr(0, equals), spec.substr(equals + 1));
  }
  if (const auto mismatch = vocabulary_mismatch(*tokenizer, model.config.vocab_size); !mismatch.empty()) {
    throw std::runtime_error(a.model + ": " + mismatch);
  }
  const torch::Device device = resolve_device(a.device);
  place_weights(*model.module(), device, resolve_weights_dtype(from_string<WeightsDtype>(a.dtype), stored));
  quantize_at_load(model, a.quantize, std::cerr);
  place_in_huge_pages(*model.module());
  model.module()->eval();
  a.options.model_name = a.name.empty() ? a.model : a.name;
  return serve(model, *tokenizer, a.options, std::cerr);
}

}  // namespace

std::vector<Command> add_serve_commands(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "serve a model over an OpenAI-compatible HTTP API (continuous batching)");
  cmd->add_option("model", a->model, "checkpoint, run directory or Hugging Face directory")->required();
  cmd->add_option("--host", a->options.host, "address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", a->options.port, "port (0: any free port, printed)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", a->options.api_key, "require 'Authorization: Bearer KEY' on every request");
  cmd->add_option("--served-model-name", a->name, "the model id clients send (default: the MODEL argument)");
  cmd->add_option("--max-batch", a->options.max_batch, "sequences decoded together")->check(positive_integer());
  cmd->add_option("--max-context", a->options.max_context,
                  "positions per sequence, prompt included (default: the model's max_positions)")
      ->check(positive_integer());
  cmd->add_option("--max-queue", a->options.max_queue, "sequences that may wait for a slot; more get 503")
      ->check(non_negative_integer());
  cmd->add_option("--prefill-chunk", a->options.prefill_chunk,
                  "a longer prompt is prefilled this many tokens a step, between the running sequences' steps "
                  "(0: whole)")
      ->check(non_negative_integer());
  cmd->add_option("--kv-cache-positions", a->options.cache_positions,
                  "positions each row of the KV cache holds before it first grows by doubling (0: the longest "
                  "context and a quarter more, at most 4096)")
      ->check(non_negative_integer());
  cmd->add_option("--prefix-cache-mb", a->options.prefix_cache_mb,
                  "MiB of prompts' keys and values kept for later prompts that begin the same way (a chat's next turn); "
                  "least recently used first out (default 0: no prefix cache)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--lora", a->loras,
                  "NAME=PATH: serve the LoRA adapters at PATH (a zoo LoRA checkpoint of this base, or a PEFT "
                  "directory) beside the base, chosen by a request's \"model\": NAME; repeat for more")
      ->take_all();
  cmd->add_flag("--allow-runtime-lora", a->options.runtime_lora,
                "answer POST /v1/load_lora_adapter and /v1/unload_lora_adapter (they read paths on this machine)");
  cmd->add_option("--tool-call-parser", a->options.tool_call_parser,
                  "the format answers' tool calls are read in: auto (the one the chat template shows), hermes, "
                  "qwen-xml, llama3-json or mistral")
      ->check(CLI::IsMember(tool_call_parser_names()));
  cmd->add_option("--max-body", a->options.max_body_bytes, "largest request body in bytes; larger get 413")
      ->check(positive_integer());
  cmd->add_option("--grace", a->options.grace_seconds, "seconds running requests may finish after SIGTERM")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-connections", a->options.max_connections,
                  "connections open at once; a newcomer beyond closes the longest-idle one, or gets 503 when none is "
                  "idle")
      ->check(positive_integer());
  cmd->add_option("--request-timeout", a->options.request_timeout_seconds,
                  "seconds a client has to send a whole request (head and body), and to take each write; 408 past it")
      ->check(positive_number());
  cmd->add_option("--keep-alive", a->options.keep_alive_seconds,
                  "seconds a connection may stay idle between requests before it is closed")
      ->check(positive_number());
  add_dtype_option(cmd, a->dtype, "weights' type: auto (the checkpoint's), fp32 or bf16");
  add_quantize_options(cmd, a->quantize);
  add_device_option(cmd, a->device);
  return {{cmd, [a] { return serve_command(*a); }}};
}

}  // namespace zoo::cli
