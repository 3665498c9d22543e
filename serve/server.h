#pragma once
// zoo serve: a trained model behind an OpenAI-compatible HTTP API (the event-driven front of
// serve/http_server.h does the HTTP). Decoder models answer POST /v1/completions and
// /v1/chat/completions, streamed as server-sent events or whole, through the continuous-batching
// scheduler (serve/batch_scheduler.h); BERT models answer POST /v1/embeddings. GET /v1/models,
// /health and /metrics (Prometheus) for every model. The HTTP layer only parses, checks and streams.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "models/model.h"
#include "tokenizers/tokenizer.h"

namespace zoo {

struct ServeOptions {
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  int port = 8080;                 // 0: a free port, printed when listening
  std::string api_key;             // non-empty: every request needs "Authorization: Bearer KEY"
  std::string model_name;          // the id clients name in "model"
  int64_t max_batch = 8;           // sequences decoded together
  int64_t max_context = 0;         // positions per sequence; 0: the model's max_positions
  int64_t max_queue = 64;          // sequences waiting for a slot; beyond it: 503 with Retry-After
  int64_t prefill_chunk = 512;     // longer prompts are prefilled this many tokens a step; 0: whole
  int64_t cache_positions = 0;     // the batch's KV cache before it first grows; 0: max_context + 1/4, <= 4096
  int64_t prefix_cache_mb = 0;     // prompts' keys kept for prompts that begin the same way; 0: none
  // The served zoo checkpoint, which zoo's LoRA checkpoints must have been trained on (empty:
  // the model is no zoo checkpoint; PEFT adapters only).
  std::string base_dir;
  std::vector<std::pair<std::string, std::string>> loras;  // --lora NAME=PATH: served beside the base
  bool runtime_lora = false;  // POST /v1/load_lora_adapter and /v1/unload_lora_adapter answer
  std::string tool_call_parser = "auto";  // the format answers' tool calls are read in (serve/tool_calls.h)
  int64_t max_body_bytes = 1 << 20;  // larger request bodies: 413
  double grace_seconds = 30;       // after SIGTERM: running requests may finish for this long
  int64_t max_connections = 1000;  // open at once; beyond, an idle one is closed, else 503 at once
  double request_timeout_seconds = 30;  // a whole request (head and body), and each write: 408 past it
  double keep_alive_seconds = 5;        // a connection idle between requests is closed after this
};

// For a caller that runs the server in-process (zoo bench): told the port once it is bound,
// and asked every 50 ms whether to stop.
struct ServeHooks {
  std::function<void(int port)> listening;
  std::function<bool()> stop;
};

// Serves until SIGINT or SIGTERM (or hooks.stop), then stops admitting (503), lets running
// requests finish within the grace period, cancels the rest and returns 0. Prints "listening on
// http://HOST:PORT" to `log` once bound; throws std::runtime_error when the address cannot be
// bound. `model` is on its device, in eval mode.
int serve(Model& model, const Tokenizer& tokenizer, const ServeOptions& options, std::ostream& log,
          const ServeHooks& hooks = {});

}  // namespace zoo
