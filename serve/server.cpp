#include "serve/server.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <ostream>
#include <random>
#include <thread>

#include <torch/torch.h>

#include "core/stop_signals.h"
#include "core/strings.h"
#include "data/chat_format.h"
#include "inference/prompt_rules.h"
#include "inference/text_generation.h"
#include "serve/adapter_bank.h"
#include "serve/batch_scheduler.h"
#include "serve/http_server.h"
#include "serve/metrics.h"
#include "serve/openai_api.h"
#include "serve/reasoning.h"
#include "serve/tool_calls.h"

namespace zoo {
namespace {

// A sequence that did not end normally answers its request with an error: the server stopping
// (kCancelled) with a 503, a failure (kError) with a 500 and its message.
ApiError sequence_error(FinishReason reason, const std::string& message) {
  const bool cancelled = reason == FinishReason::kCancelled;
  return ApiError(cancelled ? 503 : 500, cancelled ? "the server stopped before the completion ended" : message, "",
                  "server_error");
}

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// A choice's text (and how it ended, once it has), no log-probabilities.
ApiChoice text_choice(int64_t index, std::string text, std::string finish_reason = "") {
  ApiChoice c;
  c.index = index, c.text = std::move(text), c.finish_reason = std::move(finish_reason);
  return c;
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_json(HttpExchange& exchange, int status, const json& body) {
  exchange.respond(status, "application/json", body.dump(-1, ' ', false, json::error_handler_t::replace));
}

void send_error(HttpExchange& exchange, const ApiError& e, const HttpHeaders& extra_headers = {}) {
  exchange.respond(e.status, "application/json", e.body(), extra_headers);
}

// OpenAI's error type for the answers the HTTP front gives itself (400, 404, 405, 408, 413, 431,
// 503 when every worker or connection is taken).
std::string error_type(int status) {
  if (status == 503) return "server_busy";
  return status >= 500 ? "server_error" : "invalid_request_error";
}

// At most a year: a longer timeout is none, and the clock's arithmetic must not overflow.
std::chrono::milliseconds milliseconds_of(double seconds) {
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(std::min(seconds, 365 * 86400.0) * 1000)));
}

// The endpoints /metrics counts requests of; any other path counts as "other".
std::string endpoint_label(const std::string& path) {
  for (const char* known : {"/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/models", "/health",
                            "/metrics", "/v1/load_lora_adapter", "/v1/unload_lora_adapter"}) {
    if (path == known) return path;
  }
  return "other";
}

class Server {
 public:
  Server(Model& model, const Tokenizer& tokenizer, const ServeOptions& options, std::ostream& log)
      : model_(model),
        tokenizer_(tokenizer),
        options_(options),
        log_(log),
        created_(unix_time()),
        tool_format_(tool_call_format_for(options.tool_call_parser, tokenizer.chat_template())),
        reasons_(tokenizer.chat_template() && template_reasons(*tokenizer.chat_template())) {
    const auto family = model.config.family;
    switch (family) {
      case Family::kGpt:
      case Family::kT5:
      case Family::kTransformer: {
        SchedulerOptions s;
        s.max_batch = options.max_batch, s.max_context = options.max_context, s.max_queue = options.max_queue;
        s.prefill_chunk = options.prefill_chunk, s.cache_positions = options.cache_positions;
        s.prefix_cache_bytes = options.prefix_cache_mb << 20;
        adapters_ = std::make_unique<AdapterBank>(model, options.base_dir);
        scheduler_ = std::make_unique<BatchScheduler>(model, tokenizer, s, &metrics_);
        max_context_ = scheduler_->options().max_context;
        break;
      }
      case Family::kBert:
        if (options.max_context > 0) max_context_ = options.max_context;
        break;
    }
    for (const auto& [name, path] : options.loras) {
      const std::string where = "--lora " + name + "=" + path + ": ";
      if (!adapters_) throw std::runtime_error(where + "a " + to_string(family) + " model makes embeddings; adapters are served on text models");
      if (model.lora) {
        throw std::runtime_error(where + "this server's checkpoint holds LoRA adapters itself; serve its base (" +
                                 model.lora->base + ") with --lora");
      }
      try {
        check_adapter_name(name);
        adapters_->install(adapters_->read(name, path));
      } catch (const std::exception& e) {
        throw std::runtime_error(where + e.what());
      }
    }
    count_adapters();
  }

  // The HTTP front's bounds, and its answers in OpenAI's shape: the API key checked before
  // anything else, every answer counted for /metrics.
  HttpServerOptions http_options() {
    HttpServerOptions o;
    o.max_connections = options_.max_connections;
    // Every streaming client holds a worker to its end: the batch, the queue, and a few for the rest.
    o.workers = options_.max_batch + options_.max_queue + 8;
    o.request_timeout = milliseconds_of(options_.request_timeout_seconds);
    o.write_timeout = o.request_timeout;
    o.keep_alive_timeout = milliseconds_of(options_.keep_alive_seconds);
    o.max_body_bytes = options_.max_body_bytes;
    o.error_content_type = "application/json";
    o.error_body = [](int status, const std::string& message) {
      return ApiError(status, message, "", error_type(status)).body();
    };
    o.guard = [this](const HttpRequest& req, HttpExchange& exchange) {
      if (options_.api_key.empty() || req.header("Authorization") == "Bearer " + options_.api_key) return;
      send_error(exchange,
                 ApiError(401, "a valid API key is required: Authorization: Bearer KEY", "", "authentication_error"));
    };
    o.answered = [this](const HttpRequest& req, int status) { metrics_.request(endpoint_label(req.path), status); };
    return o;
  }

  // /health, /v1/models and /metrics are answered by the I/O thread (at once, however busy the
  // workers are); completions and embeddings run on workers.
  void install(HttpServer& http) {
    http.route("GET", "/health", RouteKind::kLight, [this](const HttpRequest&, HttpExchange& exchange) {
      send_json(exchange, draining_ ? 503 : 200, {{"status", draining_ ? "stopping" : "ok"}});
    });
    http.route("GET", "/v1/models", RouteKind::kLight, [this](const HttpRequest&, HttpExchange& exchange) {
      std::vector<std::pair<std::string, std::string>> listed;
      if (adapters_)
        for (const auto& a : adapters_->adapters()) listed.emplace_back(a->name, a->path);
      send_json(exchange, 200, models_response(options_.model_name, created_, listed));
    });
    http.route("GET", "/metrics", RouteKind::kLight, [this, &http](const HttpRequest&, HttpExchange& exchange) {
      metrics_.connections(http.counts());
      exchange.respond(200, "text/plain; version=0.0.4", metrics_.render());
    });
    http.route("POST", "/v1/completions", RouteKind::kHeavy,
               [this](const HttpRequest& req, HttpExchange& exchange) { complete(req, exchange, false); });
    http.route("POST", "/v1/chat/completions", RouteKind::kHeavy,
               [this](const HttpRequest& req, HttpExchange& exchange) { complete(req, exchange, true); });
    http.route("POST", "/v1/embeddings", RouteKind::kHeavy,
               [this](const HttpRequest& req, HttpExchange& exchange) { embed(req, exchange); });
    http.route("POST", "/v1/load_lora_adapter", RouteKind::kHeavy,
               [this](const HttpRequest& req, HttpExchange& exchange) { change_adapters(req, exchange, true); });
    http.route("POST", "/v1/unload_lora_adapter", RouteKind::kHeavy,
               [this](const HttpRequest& req, HttpExchange& exchange) { change_adapters(req, exchange, false); });
  }

  // SIGTERM: stop admitting; let running requests finish within the grace period; cancel the rest.
  void drain(std::ostream& log) {
    draining_ = true;
    if (!scheduler_) return;
    const auto deadline = Clock::now() + std::chrono::duration<double>(options_.grace_seconds);
    if (in_flight_ > 0) log << "zoo serve: stopping; " << in_flight_ << " request(s) in flight\n" << std::flush;
    while (in_flight_ > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (in_flight_ > 0) {
      log << "zoo serve: cancelling " << in_flight_ << " request(s) after the grace period\n" << std::flush;
      scheduler_->cancel_all();
      const auto hard = Clock::now() + std::chrono::seconds(5);
      while (in_flight_ > 0 && Clock::now() < hard) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

 private:
  // The served adapter a request's `model` names; nullptr for the base (or no name).
  std::shared_ptr<const ServedAdapter> adapter_named(const std::string& name) const {
    if (name.empty() || name == options_.model_name) return nullptr;
    if (adapters_)
      if (auto adapter = adapters_->find(name)) return adapter;
    std::string served = "'" + options_.model_name + "'";
    if (adapters_)
      for (const auto& a : adapters_->adapters()) served += ", '" + a->name + "'";
    throw ApiError(404, "model '" + name + "' does not exist; this server serves " + served, "model", "model_not_found");
  }

  void count_adapters() {
    if (adapters_) metrics_.lora_adapters(static_cast<int64_t>(adapters_->adapters().size()), adapters_->bytes());
  }

  void check_adapter_name(const std::string& name) const {
    if (name.empty() || name == options_.model_name) {
      throw std::invalid_argument("an adapter's name must be non-empty and not the base's ('" + options_.model_name + "')");
    }
  }

  // POST /v1/load_lora_adapter {"lora_name", "lora_path"} and /v1/unload_lora_adapter
  // {"lora_name"}, as vLLM names them: the adapters change between two decoding steps.
  void change_adapters(const HttpRequest& req, HttpExchange& exchange, bool load) {
    try {
      if (!options_.runtime_lora) {
        throw ApiError(403, "loading and unloading adapters is off: start zoo serve with --allow-runtime-lora");
      }
      if (!adapters_) throw ApiError(400, "this server's model makes embeddings; adapters are served on text models");
      if (model_.lora) throw ApiError(400, "this server's checkpoint holds LoRA adapters itself; serve its base");
      json body;
      try {
        body = json::parse(req.body);
      } catch (const json::exception& e) {
        throw ApiError(400, std::string("the body is not JSON: ") + e.what());
      }
      if (!body.is_object()) throw ApiError(400, "the body must be a JSON object");
      const std::vector<std::string> keys = load ? std::vector<std::string>{"lora_name", "lora_path"}
                                                 : std::vector<std::string>{"lora_name"};
      for (const auto& item : body.items()) {
        if (std::find(keys.begin(), keys.end(), item.key()) == keys.end()) {
          throw ApiError(400, item.key() + ": unknown field (this endpoint takes " + join(keys) + ")", item.key());
        }
      }
      for (const auto& key : keys) {
        if (!body.contains(key) || !body[key].is_string()) throw ApiError(400, key + ": required, a string", key);
      }
      const std::string name = body["lora_name"];
      if (load) {
        check_adapter_name(name);
        if (adapters_->find(name)) throw ApiError(400, "lora_name: an adapter named '" + name + "' is served already", "lora_name");
        auto read = adapters_->read(name, body["lora_path"]);  // the files on this thread, the stacks between turns
        scheduler_->between_turns([&] { adapters_->install(std::move(read)); });
      } else {
        scheduler_->between_turns([&] { adapters_->remove(name); });
      }
      count_adapters();
      {
        std::lock_guard lock(log_mutex_);
        log_ << "zoo serve: adapter " << name << (load ? " loaded from " + body["lora_path"].get<std::string>() : " unloaded")
             << "\n" << std::flush;
      }
      exchange.respond(200, "text/plain",
                       "Success: LoRA adapter '" + name + "' " + (load ? "added" : "removed") + " successfully.");
    } catch (const ApiError& e) {
      send_error(exchange, e);
    } catch (const AdapterInUse& e) {
      send_error(exchange, ApiError(409, e.what(), "lora_name"));
    } catch (const std::out_of_range& e) {
      send_error(exchange, ApiError(404, e.what(), "lora_name", "model_not_found"));
    } catch (const std::exception& e) {
      send_error(exchange, ApiError(400, e.what(), load ? "lora_path" : "lora_name"));
    }
  }

  // A sequence that ended with an error: its request ends with one (a 500, or an error event in
  // its stream), the others go on; the log says which and why.
  void log_failure(const std::string& id, int64_t choice, const std::string& reason) {
    std::lock_guard lock(log_mutex_);
    log_ << "zoo serve: " << id << " choice " << choice << " failed: " << reason << "\n" << std::flush;
  }

  bool encoder_decoder() const { return model_.config.is_encoder_decoder(); }

  void check_ids(const std::vector<int64_t>& ids, const std::string& field) const {
    for (int64_t id : ids) {
      if (id >= model_.config.vocab_size) {
        throw ApiError(400, field + ": token id " + std::to_string(id) + " is past the vocabulary (" +
                               std::to_string(model_.config.vocab_size) + ")", field);
      }
    }
  }

  // Whether a chat's answer is read for tool calls: not under tool_choice none, nor when
  // response_format holds it to a JSON value of its own (the tools are still shown).
  static bool reads_tool_calls(const CompletionRequest& r) {
    return r.tool_choice.kind != ToolChoiceKind::kNone && r.response_format.kind == ResponseFormatKind::kText;
  }

  // response_format's grammar, compiled on the request's thread (xgrammar caches it per schema).
  std::shared_ptr<const TokenGrammar> grammar_of(const ResponseFormat& format, const std::string& field = "response_format") {
    try {
      TokenGrammars* grammars = nullptr;
      {
        std::lock_guard lock(grammars_mutex_);
        if (!grammars_) {
          std::vector<int64_t> stops;
          if (tokenizer_.special().eos) stops.push_back(*tokenizer_.special().eos);
          grammars_ = std::make_unique<TokenGrammars>(tokenizer_, model_.config.vocab_size, stops);
        }
        grammars = grammars_.get();
      }
      return grammars->compile(format);
    } catch (const std::invalid_argument& e) {
      throw ApiError(400, field + ": " + e.what(), field);
    }
  }

  // The request as sequences for the scheduler: prompts tokenized, lengths and options checked.
  // `opens_reasoning`: a chat's prompt ends inside a <think> block.
  std::vector<SequenceRequest> sequences_of(const CompletionRequest& r, const std::shared_ptr<ResponseChannel>& channel,
                                            const std::shared_ptr<const ServedAdapter>& adapter, bool& opens_reasoning) {
    std::vector<std::vector<int64_t>> prompts;
    const std::string prompt_field = r.chat ? "messages" : "prompt";
    const auto& specials = tokenizer_.special();
    if (r.chat) {
      if (reads_tool_calls(r) && r.tool_choice.kind == ToolChoiceKind::kAuto && !tool_format_) {
        throw ApiError(400, "tools: this model's chat template shows it no tool-call format zoo serve reads (Hermes "
                            "<tool_call> JSON, Qwen's <function=...> XML, Llama 3's JSON); tool_choice \"required\" "
                            "or a named function still work, held to JSON by a grammar", "tools");
      }
      // tool_choice none: the model is not shown the tools, so it answers in text.
      const auto& tools = r.tool_choice.kind == ToolChoiceKind::kNone ? nlohmann::ordered_json() : r.tools;
      std::string text;
      try {
        text = ChatFormat(tokenizer_, options_.model_name)
                   .render(chat_template_messages(r.messages), /*add_generation_prompt=*/true, tools, r.template_kwargs);
      } catch (const std::exception& e) {
        throw ApiError(400, std::string("messages: ") + e.what(), "messages");
      }
      opens_reasoning = prompt_opens_reasoning(text);
      prompts.push_back(tokenizer_.encode(text, /*add_special_tokens=*/false));
    } else {
      for (const auto& p : r.prompts) {
        if (p.is_ids) {
          prompts.push_back(p.ids);
          continue;
        }
        prompts.push_back(tokenizer_.encode(p.text, /*add_special_tokens=*/true));  // as zoo generate: LLaMA's <s>
      }
    }
    // Framed as zoo generate frames them (inference/prompt_rules.h).
    for (auto& ids : prompts) {
      try {
        ids = frame_prompt(std::move(ids), encoder_decoder(), specials, prompt_field);
      } catch (const std::invalid_argument& e) {
        throw ApiError(400, e.what(), prompt_field);
      }
    }
    const auto& s = r.sampling;
    if (s.echo && encoder_decoder()) {
      throw ApiError(400, "echo: an encoder-decoder's prompt is its source, which it does not score", "echo");
    }
    std::shared_ptr<const TokenGrammar> grammar;
    if (r.response_format.kind != ResponseFormatKind::kText) grammar = grammar_of(r.response_format);
    if (r.tool_choice.kind == ToolChoiceKind::kRequired || r.tool_choice.kind == ToolChoiceKind::kNamed) {
      grammar = grammar_of({ResponseFormatKind::kJsonSchema, forced_tool_schema(r.tools, r.tool_choice, r.parallel_tool_calls)}, "tools");
    }
    std::vector<SequenceRequest> out;
    std::random_device entropy;
    for (size_t p = 0; p < prompts.size(); ++p) {
      const auto& ids = prompts[p];
      check_ids(ids, prompt_field);
      const int64_t length = static_cast<int64_t>(ids.size());
      const ContextLimits limits{encoder_decoder(), model_.config.max_length(), max_context_};
      const int64_t room = new_token_room(length, limits);
      if (room < 1) throw ApiError(400, prompt_field + ": " + no_room_message(length, limits), prompt_field);
      const int64_t max_tokens = s.max_tokens.value_or(r.chat ? room : std::min<int64_t>(16, room));
      if (max_tokens > room) {
        throw ApiError(400, "max_tokens: the prompt (" + std::to_string(length) + " tokens) plus max_tokens (" +
                                std::to_string(max_tokens) + ") is more than the context (" +
                                std::to_string(max_context_) + " positions)", "max_tokens");
      }
      const auto echoed = s.echo ? std::make_shared<std::vector<TokenLogprob>>() : nullptr;
      for (int64_t i = 0; i < s.n; ++i) {
        SequenceRequest q;
        q.index = static_cast<int64_t>(p) * s.n + i;
        q.prompt = ids;
        q.options.max_new_tokens = max_tokens;
        // A temperature this small is greedy decoding's limit, and logits / temperature would
        // overflow float32 (vLLM draws the same line, at 1e-5).
        constexpr double kGreedyBelow = 1e-5;
        q.options.sample = s.temperature >= kGreedyBelow;
        q.options.temperature = q.options.sample ? s.temperature : 1.0;
        q.options.top_k = s.top_k;
        q.options.top_p = s.top_p;
        q.options.repetition_penalty = s.repetition_penalty;
        // A seed makes the request's choices reproducible: choice k draws from seed + k.
        q.options.seed = s.seed ? *s.seed + static_cast<uint64_t>(q.index)
                                : (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
        if (specials.eos && !s.ignore_eos) q.options.eos_ids = {*specials.eos};
        q.stop_texts = s.stop;
        q.logprobs = s.logprobs;
        q.echo = s.echo;
        q.echoed = echoed;
        q.grammar = grammar;
        q.adapter = adapter;
        q.channel = channel;
        out.push_back(std::move(q));
      }
    }
    if (static_cast<int64_t>(out.size()) > options_.max_batch + options_.max_queue) {
      throw ApiError(400, "n: " + std::to_string(out.size()) + " completions are more than the server holds at once (" +
                              std::to_string(options_.max_batch + options_.max_queue) + ")", "n");
    }
    return out;
  }

  // Counts a request in flight from submission to its last byte.
  struct InFlight {
    explicit InFlight(std::atomic<int64_t>& n) : n(n) { ++n; }
    ~InFlight() { --n; }
    std::atomic<int64_t>& n;
  };

  void complete(const HttpRequest& req, HttpExchange& exchange, bool chat) {
    try {
      if (!scheduler_) {
        throw ApiError(400, "this server's model (" + to_string(model_.config.family) +
                                ") makes embeddings, not completions: POST /v1/embeddings");
      }
      if (draining_) throw ApiError(503, "the server is stopping", "", "server_error");
      auto request = parse_completion_request(req.body, chat);
      const auto adapter = adapter_named(request.model);
      const std::string model = adapter ? adapter->name : options_.model_name;  // what the answer says
      auto channel = std::make_shared<ResponseChannel>();
      bool opens_reasoning = false;
      auto sequences = sequences_of(request, channel, adapter, opens_reasoning);
      const int64_t count = static_cast<int64_t>(sequences.size());
      std::vector<int64_t> last_prompt_tokens;
      for (const auto& s : sequences) last_prompt_tokens.push_back(s.prompt.back());
      InFlight in_flight(in_flight_);  // the handler runs to the answer's last byte
      if (!scheduler_->submit(std::move(sequences))) {
        return send_error(exchange,
                          ApiError(503, "the server is busy: every slot and the queue are taken; retry later", "",
                                   "server_busy"),
                          {{"Retry-After", "1"}});
      }
      const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(++next_id_);
      Answer answer(tokenizer_, count, request.sampling.logprobs.has_value());
      if (chat && reasons_) {
        for (int64_t i = 0; i < count; ++i) answer.read_reasoning(i, ReasoningReader(opens_reasoning));
      }
      if (reads_tool_calls(request)) {
        for (int64_t i = 0; i < count; ++i) answer.read_tool_calls(i, ToolCallReader(request.tool_choice, tool_format_, request.tools));
      }
      if (!request.sampling.echo && !encoder_decoder()) {
        for (int64_t i = 0; i < count; ++i) answer.follow(i, last_prompt_tokens[i]);
      }
      if (request.sampling.echo) {
        for (int64_t i = 0; i < count; ++i) {
          const auto& p = request.prompts[i / request.sampling.n];
          answer.echo(i, p.is_ids ? tokenizer_.decode(p.ids, /*skip_special_tokens=*/false) : p.text);
        }
      }
      if (request.sampling.stream) {
        stream(exchange, id, model, chat, request.sampling.n, request.sampling.include_usage, channel, answer);
      } else {
        respond(exchange, id, model, chat, request.sampling.n, channel, answer);
      }
    } catch (const ApiError& e) {
      send_error(exchange, e);
    } catch (const std::invalid_argument& e) {
      send_error(exchange, ApiError(400, e.what()));
    }
  }

  // What each choice of an answer has said so far: an echoed prompt not yet sent, and, when
  // log-probabilities are asked, the last token (whose text a token's own follows) and the
  // characters its tokens' texts have taken.
  class Answer {
   public:
    Answer(const Tokenizer& tokenizer, int64_t count, bool logprobs)
        : tokenizer_(tokenizer), logprobs_(logprobs), choices_(count) {}
    int64_t count() const { return static_cast<int64_t>(choices_.size()); }
    void echo(int64_t index, std::string text) { choices_[index].echo = std::move(text); }
    void read_tool_calls(int64_t index, ToolCallReader reader) { choices_[index].tools.emplace(std::move(reader)); }
    void read_reasoning(int64_t index, ReasoningReader reader) { choices_[index].reasoning.emplace(std::move(reader)); }
    // Choice `index` continues `token` (its prompt's last): its first token's text is what it adds
    // after it, as every later token's is (a SentencePiece word keeps its leading space).
    void follow(int64_t index, int64_t token) { choices_[index].previous = token; }
    // The part of choice `index` an event brings, as the API reports it: its thinking apart, and
    // text that may be a tool call held until end().
    ApiChoice part(const SequenceEvent& e) {
      auto& c = choices_[e.index];
      ReasoningReader::Piece piece{"", e.text};
      if (c.reasoning) piece = c.reasoning->add(e.text);
      auto part = text_choice(e.index, c.echo + (c.tools ? c.tools->add(piece.content) : piece.content));
      part.reasoning = std::move(piece.reasoning);
      c.echo.clear();
      if (!logprobs_) return part;
      part.logprobs.emplace();
      part.text_offset = c.offset;
      for (const auto& t : e.logprobs) {
        // The token before is decoded once for the chosen token and all its alternatives.
        const auto before = c.previous < 0 ? std::string() : tokenizer_.decode({c.previous}, /*skip_special_tokens=*/false);
        ApiTokenLogprob entry{text_of(t.token, c.previous, before), t.logprob, {}};
        for (const auto& [token, value] : t.top) entry.top.emplace_back(text_of(token, c.previous, before), value);
        c.offset += utf8_characters(entry.token);
        c.previous = t.token;
        part.logprobs->push_back(std::move(entry));
      }
      return part;
    }
    // What choice `index` held back, at its end (`reason` "stop", "length", ...): the text that
    // did not read as tool calls, and the calls ("tool_calls" ends an answer that stopped on them).
    ApiChoice end(int64_t index, const std::string& reason) {
      auto& c = choices_[index];
      auto out = text_choice(index, "", reason);
      if (c.reasoning) {
        auto held = c.reasoning->finish();
        out.reasoning = std::move(held.reasoning);
        out.text = c.tools ? c.tools->add(held.content) : held.content;
      }
      if (!c.tools) return out;
      auto end = c.tools->finish();
      out.text += end.content;
      out.tool_calls = std::move(end.calls);
      if (!out.tool_calls.empty() && reason == "stop") out.finish_reason = "tool_calls";
      return out;
    }

   private:
    // A token's text is what it adds after the token before it: a SentencePiece word's leading
    // space is kept (decoded alone, the first word of a text loses it).
    std::string text_of(int64_t token, int64_t previous, const std::string& before) const {
      if (previous < 0) return tokenizer_.decode({token}, /*skip_special_tokens=*/false);
      const auto both = tokenizer_.decode({previous, token}, false);
      if (both.compare(0, before.size(), before) == 0) return both.substr(before.size());
      return tokenizer_.decode({token}, false);
    }
    struct Choice {
      std::string echo;
      int64_t previous = -1, offset = 0;
      std::optional<ReasoningReader> reasoning;
      std::optional<ToolCallReader> tools;
    };
    const Tokenizer& tokenizer_;
    bool logprobs_;
    std::vector<Choice> choices_;
  };

  void respond(HttpExchange& exchange, const std::string& id, const std::string& model, bool chat, int64_t n,
               const std::shared_ptr<ResponseChannel>& channel, Answer& answer) {
    const int64_t count = answer.count();
    std::vector<ApiChoice> choices(count);
    for (int64_t i = 0; i < count; ++i) {
      SequenceEvent nothing;
      nothing.index = i;
      choices[i] = answer.part(nothing);
    }
    ApiUsage usage;
    std::vector<int64_t> prompt_tokens(count, 0);
    int64_t finished = 0;
    std::optional<ApiError> failure;
    // Nothing is written before the whole answer: a client that goes away is seen on its
    // connection (a read the HTTP front keeps pending while the answer is computed).
    while (finished < count) {
      if (exchange.closed()) {
        channel->cancel();  // its sequences leave the batch at the next step; nobody reads an answer
        throw ApiError(499, "the client closed the connection before the completion ended", "", "client_closed");
      }
      for (auto& e : channel->wait(std::chrono::milliseconds(100))) {
        auto& c = choices[e.index];
        auto part = answer.part(e);
        c.text += part.text;
        c.reasoning += part.reasoning;
        if (part.logprobs) {
          for (auto& t : *part.logprobs) c.logprobs->push_back(std::move(t));
        }
        if (!e.finish) continue;
        ++finished;
        prompt_tokens[e.index] = e.prompt_tokens;
        usage.completion_tokens += e.completion_tokens;
        if (const auto reason = openai_finish_reason(*e.finish)) {
          auto end = answer.end(e.index, *reason);
          c.text += end.text;
          c.reasoning += end.reasoning;
          c.tool_calls = std::move(end.tool_calls);
          c.finish_reason = end.finish_reason;
        } else {
          if (*e.finish == FinishReason::kError) log_failure(id, e.index, e.error);
          failure = sequence_error(*e.finish, e.error);
        }
      }
    }
    if (failure) throw *failure;
    // The choices of one prompt share it: usage counts each prompt once, as OpenAI's does.
    for (int64_t i = 0; i < count; i += n) usage.prompt_tokens += prompt_tokens[i];
    send_json(exchange, 200, completion_response(id, unix_time(), model, chat, choices, usage));
  }

  // Server-sent events, each written as it comes; the worker holds the stream to its end.
  void stream(HttpExchange& exchange, const std::string& id, const std::string& model, bool chat, int64_t n,
              bool include_usage, const std::shared_ptr<ResponseChannel>& channel, Answer& answer) {
    const int64_t count = answer.count();
    const int64_t created = unix_time();
    auto write = [&](const std::string& text) { return exchange.write(text); };
    // A failed write, or a client gone while its sequences wait: they leave the batch (or the
    // queue) at the next step.
    auto client_gone = [&] { channel->cancel(); };
    if (!exchange.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return client_gone();
    // Chat streams open with the assistant's role, as OpenAI's do.
    if (chat) {
      for (int64_t i = 0; i < count; ++i) {
        if (!write(sse_event(completion_chunk(id, created, model, chat, text_choice(i, ""), true)))) return client_gone();
      }
    }
    int64_t finished = 0;
    ApiUsage usage;
    while (finished < count) {
      if (exchange.closed()) return client_gone();
      for (auto& e : channel->wait(std::chrono::milliseconds(100))) {
        const bool last = e.finish.has_value();
        const auto reason = last ? openai_finish_reason(*e.finish) : std::nullopt;
        bool ok = true;
        const auto part = answer.part(e);
        if (!part.text.empty() || !part.reasoning.empty() || (part.logprobs && !part.logprobs->empty())) {
          ok = write(sse_event(completion_chunk(id, created, model, chat, part, false)));
        }
        if (ok && reason) {
          // What was held for tool calls: its text, then the calls, then how the answer ended.
          auto end = answer.end(e.index, *reason);
          if (!end.text.empty() || !end.reasoning.empty() || !end.tool_calls.empty()) {
            auto held = end;
            held.finish_reason.clear();
            ok = write(sse_event(completion_chunk(id, created, model, chat, held, false)));
          }
          end.text.clear();
          end.reasoning.clear();
          end.tool_calls.clear();
          if (ok) ok = write(sse_event(completion_chunk(id, created, model, chat, end, false)));
        }
        if (ok && last && !reason) {
          if (*e.finish == FinishReason::kError) log_failure(id, e.index, e.error);
          ok = write(sse_event(json::parse(sequence_error(*e.finish, e.error).body())));
        }
        if (!ok) return client_gone();
        if (last) {
          ++finished;
          if (e.index % n == 0) usage.prompt_tokens += e.prompt_tokens;
          usage.completion_tokens += e.completion_tokens;
        }
      }
    }
    if (include_usage && !write(sse_event(usage_chunk(id, created, model, chat, usage)))) return;
    if (write(sse_done())) exchange.end();
  }

  void embed(const HttpRequest& req, HttpExchange& exchange) {
    try {
      if (model_.config.family != Family::kBert) {
        throw ApiError(400, "this server's model (" + to_string(model_.config.family) +
                                ") makes completions, not embeddings: POST /v1/completions or /v1/chat/completions");
      }
      if (draining_) throw ApiError(503, "the server is stopping", "", "server_error");
      const auto request = parse_embedding_request(req.body);
      adapter_named(request.model);  // 404 for any name but the base's: no adapters on embeddings
      InFlight in_flight(in_flight_);
      std::vector<std::vector<float>> embeddings;
      int64_t tokens = 0;
      {
        std::lock_guard lock(model_mutex_);
        c10::InferenceMode inference;
        try {
          embeddings = sentence_embeddings(model_.bert, tokenizer_, request.inputs, &tokens);
        } catch (const std::invalid_argument& e) {
          throw ApiError(400, e.what(), "input");
        }
      }
      metrics_.tokens(tokens, 0);
      send_json(exchange, 200, embedding_response(options_.model_name, embeddings, tokens, request.base64));
    } catch (const ApiError& e) {
      send_error(exchange, e);
    }
  }

  Model& model_;
  const Tokenizer& tokenizer_;
  ServeOptions options_;
  std::ostream& log_;
  std::mutex log_mutex_;
  int64_t created_;
  int64_t max_context_ = 0;
  ServerMetrics metrics_;
  std::unique_ptr<AdapterBank> adapters_;  // a text model's served LoRA adapters (--lora)
  std::unique_ptr<BatchScheduler> scheduler_;
  std::mutex model_mutex_;  // embeddings: one forward at a time
  std::mutex grammars_mutex_;
  std::unique_ptr<TokenGrammars> grammars_;  // made at the first structured request
  std::optional<ToolCallFormat> tool_format_;  // how the chat template shows tool calls
  bool reasons_;                               // the chat template writes <think> blocks
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> next_id_{0};
};

}  // namespace

int serve(Model& model, const Tokenizer& tokenizer, const ServeOptions& options, std::ostream& log,
          const ServeHooks& hooks) {
  Server server(model, tokenizer, options, log);
  HttpServer http(server.http_options());
  server.install(http);
  // In-process (zoo bench), the caller decides when to stop; the command line stops on signals.
  StopSignals signals(/*enabled=*/!hooks.stop);
  int port = 0;
  try {
    port = http.start(options.host, options.port);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("zoo serve: ") + e.what());  // the address and the system's reason
  }
  if (http.max_connections() < options.max_connections) {
    log << "zoo serve: warning: --max-connections " << options.max_connections << " lowered to "
        << http.max_connections() << ": this process may open too few files (ulimit -n)\n";
  }
  log << "zoo serve: " << options.model_name << " (" << to_string(model.config.family) << ") listening on http://"
      << options.host << ":" << port << "\n"
      << std::flush;
  if (hooks.listening) hooks.listening(port);
  while (stop_signal_received() == 0 && !(hooks.stop && hooks.stop())) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  server.drain(log);
  // drain() gave running requests their grace; what is left now is cut.
  http.stop(std::chrono::seconds(1));
  log << "zoo serve: stopped\n" << std::flush;
  return 0;
}

}  // namespace zoo
