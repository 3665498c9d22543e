#include "serve/server.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <ostream>
#include <random>
#include <thread>

#include <httplib.h>
#include <torch/torch.h>

#include "core/stop_signals.h"
#include "data/chat_format.h"
#include "inference/text_generation.h"
#include "serve/batch_scheduler.h"
#include "serve/connection.h"
#include "serve/metrics.h"
#include "serve/openai_api.h"

namespace zoo {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(e.body(), "application/json");
}

// The endpoints /metrics counts requests of; any other path counts as "other".
std::string endpoint_label(const std::string& path) {
  for (const char* known : {"/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/models", "/health", "/metrics"}) {
    if (path == known) return path;
  }
  return "other";
}

class Server {
 public:
  Server(Model& model, const Tokenizer& tokenizer, const ServeOptions& options, std::ostream& log)
      : model_(model), tokenizer_(tokenizer), options_(options), log_(log), created_(unix_time()) {
    const auto family = model.config.family;
    switch (family) {
      case Family::kGpt:
      case Family::kT5:
      case Family::kTransformer: {
        SchedulerOptions s;
        s.max_batch = options.max_batch, s.max_context = options.max_context, s.max_queue = options.max_queue;
        s.prefill_chunk = options.prefill_chunk, s.cache_positions = options.cache_positions;
        scheduler_ = std::make_unique<BatchScheduler>(model, tokenizer, s, &metrics_);
        max_context_ = scheduler_->options().max_context;
        break;
      }
      case Family::kBert:
        if (options.max_context > 0) max_context_ = options.max_context;
        break;
    }
  }

  void install(httplib::Server& http) {
    http.set_payload_max_length(static_cast<size_t>(options_.max_body_bytes));
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (options_.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + options_.api_key) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      send_error(res, ApiError(401, "a valid API key is required: Authorization: Bearer KEY", "", "authentication_error"));
      return httplib::Server::HandlerResponse::Handled;
    });
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;  // ours, already in OpenAI's shape
      const std::string what = res.status == 404   ? "no such endpoint: " + req.method + " " + req.path
                               : res.status == 413 ? "request body too large"
                                                   : "bad request";
      send_error(res, ApiError(res.status, what));
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, ApiError(500, what, "", "server_error"));
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics_.request(endpoint_label(req.path), res.status);
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, draining_ ? 503 : 200, {{"status", draining_ ? "stopping" : "ok"}});
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, models_response(options_.model_name, created_));
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.render(), "text/plain; version=0.0.4");
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { complete(req, res, false); });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { complete(req, res, true); });
    http.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) { embed(req, res); });
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
  void check_model_name(const std::string& name) const {
    if (!name.empty() && name != options_.model_name) {
      throw ApiError(404, "model '" + name + "' does not exist; this server serves '" + options_.model_name + "'",
                     "model", "model_not_found");
    }
  }

  // A sequence that ended with an error: its request ends with one (a 500, or an error event in
  // its stream), the others go on; the log says which and why.
  void log_failure(const std::string& id, int64_t choice, const std::string& reason) {
    std::lock_guard lock(log_mutex_);
    log_ << "zoo serve: " << id << " choice " << choice << " failed: " << reason << "\n" << std::flush;
  }

  bool encoder_decoder() const { return model_.config.family == Family::kT5 || model_.config.family == Family::kTransformer; }

  void check_ids(const std::vector<int64_t>& ids, const std::string& field) const {
    for (int64_t id : ids) {
      if (id >= model_.config.vocab_size) {
        throw ApiError(400, field + ": token id " + std::to_string(id) + " is past the vocabulary (" +
                               std::to_string(model_.config.vocab_size) + ")", field);
      }
    }
  }

  // The request as sequences for the scheduler: prompts tokenized, lengths and options checked.
  std::vector<SequenceRequest> sequences_of(const CompletionRequest& r, const std::shared_ptr<ResponseChannel>& channel) {
    std::vector<std::vector<int64_t>> prompts;
    const std::string prompt_field = r.chat ? "messages" : "prompt";
    const auto& specials = tokenizer_.special();
    if (r.chat) {
      std::vector<ChatMessage> messages;
      for (const auto& m : r.messages) messages.push_back({m.role, m.content});
      std::string text;
      try {
        text = ChatFormat(tokenizer_, options_.model_name).render(messages, /*add_generation_prompt=*/true);
      } catch (const std::exception& e) {
        throw ApiError(400, std::string("messages: ") + e.what(), "messages");
      }
      prompts.push_back(tokenizer_.encode(text, /*add_special_tokens=*/false));
    } else {
      for (const auto& p : r.prompts) {
        if (p.is_ids) {
          prompts.push_back(p.ids);
          continue;
        }
        auto ids = tokenizer_.encode(p.text, /*add_special_tokens=*/true);  // as zoo generate: LLaMA's <s>
        // An empty prompt starts a new document, as zoo generate does.
        if (ids.empty() && !encoder_decoder() && (specials.bos || specials.eos)) {
          ids.push_back(specials.bos ? *specials.bos : *specials.eos);
        }
        prompts.push_back(std::move(ids));
      }
    }
    // An encoder-decoder's source ends with the end-of-sequence token, as in training (zoo generate).
    for (auto& ids : prompts) {
      if (encoder_decoder() && specials.eos && (ids.empty() || ids.back() != *specials.eos)) ids.push_back(*specials.eos);
      if (ids.empty()) throw ApiError(400, prompt_field + ": empty, and the tokenizer has no token to start from", prompt_field);
    }
    const auto& s = r.sampling;
    std::vector<SequenceRequest> out;
    std::random_device entropy;
    for (size_t p = 0; p < prompts.size(); ++p) {
      const auto& ids = prompts[p];
      check_ids(ids, prompt_field);
      const int64_t length = static_cast<int64_t>(ids.size());
      // A decoder's prompt and completion share the context; an encoder-decoder's source has the
      // encoder's positions, its completion the decoder's.
      if (encoder_decoder() && length > model_.config.max_length()) {
        throw ApiError(400, prompt_field + ": " + std::to_string(length) + " tokens, more than the encoder's " +
                                std::to_string(model_.config.max_length()) + " positions", prompt_field);
      }
      const int64_t room = encoder_decoder() ? max_context_ : max_context_ - length;
      if (room < 1) {
        throw ApiError(400, prompt_field + ": " + std::to_string(length) + " tokens leave no room in the context of " +
                                std::to_string(max_context_) + " positions", prompt_field);
      }
      int64_t max_tokens = s.max_tokens.value_or(r.chat ? room : std::min<int64_t>(16, room));
      if (max_tokens > room) {
        throw ApiError(400, "max_tokens: the prompt (" + std::to_string(length) + " tokens) plus max_tokens (" +
                                std::to_string(max_tokens) + ") is more than the context (" +
                                std::to_string(max_context_) + " positions)", "max_tokens");
      }
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

  void complete(const httplib::Request& req, httplib::Response& res, bool chat) {
    try {
      if (!scheduler_) {
        throw ApiError(400, "this server's model (" + to_string(model_.config.family) +
                                ") makes embeddings, not completions: POST /v1/embeddings");
      }
      if (draining_) throw ApiError(503, "the server is stopping", "", "server_error");
      auto request = parse_completion_request(req.body, chat);
      check_model_name(request.model);
      auto channel = std::make_shared<ResponseChannel>();
      auto sequences = sequences_of(request, channel);
      const int64_t count = static_cast<int64_t>(sequences.size());
      auto in_flight = std::make_shared<InFlight>(in_flight_);
      if (!scheduler_->submit(std::move(sequences))) {
        res.set_header("Retry-After", "1");
        throw ApiError(503, "the server is busy: every slot and the queue are taken; retry later", "", "server_busy");
      }
      const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(++next_id_);
      if (request.sampling.stream) {
        stream(res, id, chat, count, request.sampling.n, request.sampling.include_usage, channel, in_flight);
      } else {
        respond(req, res, id, chat, count, request.sampling.n, channel);
      }
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::invalid_argument& e) {
      send_error(res, ApiError(400, e.what()));
    }
  }

  void respond(const httplib::Request& req, httplib::Response& res, const std::string& id, bool chat, int64_t count,
               int64_t n, const std::shared_ptr<ResponseChannel>& channel) {
    std::vector<ApiChoice> choices(count);
    for (int64_t i = 0; i < count; ++i) choices[i].index = i;
    ApiUsage usage;
    std::vector<int64_t> prompt_tokens(count, 0);
    int64_t finished = 0;
    std::string failure;
    // Nothing is written before the whole answer: a client that goes away is seen on its socket.
    const int socket = connection_socket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    while (finished < count) {
      if (socket >= 0 && peer_closed(socket)) {
        channel->cancel();  // its sequences leave the batch at the next step; nobody reads an answer
        throw ApiError(499, "the client closed the connection before the completion ended", "", "client_closed");
      }
      for (auto& e : channel->wait(std::chrono::milliseconds(100))) {
        auto& c = choices[e.index];
        c.text += e.text;
        if (e.finish_reason.empty()) continue;
        ++finished;
        c.finish_reason = e.finish_reason;
        prompt_tokens[e.index] = e.prompt_tokens;
        usage.completion_tokens += e.completion_tokens;
        if (e.finish_reason != "stop" && e.finish_reason != "length") {
          failure = e.finish_reason;
          if (failure != "cancelled") log_failure(id, e.index, failure);
        }
      }
    }
    if (!failure.empty()) {
      throw ApiError(failure == "cancelled" ? 503 : 500,
                     failure == "cancelled" ? "the server stopped before the completion ended" : failure, "",
                     "server_error");
    }
    // The choices of one prompt share it: usage counts each prompt once, as OpenAI's does.
    for (int64_t i = 0; i < count; i += n) usage.prompt_tokens += prompt_tokens[i];
    send_json(res, 200, completion_response(id, unix_time(), options_.model_name, chat, choices, usage));
  }

  void stream(httplib::Response& res, const std::string& id, bool chat, int64_t count, int64_t n, bool include_usage,
              const std::shared_ptr<ResponseChannel>& channel, const std::shared_ptr<InFlight>& in_flight) {
    struct State {
      std::vector<bool> started;
      int64_t finished = 0;
      ApiUsage usage;
      bool done = false;
    };
    auto state = std::make_shared<State>();
    state->started.assign(count, false);
    const std::string model = options_.model_name;
    const int64_t created = unix_time();
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [=, this](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& text) { return sink.write(text.data(), text.size()); };
          if (state->done) return false;
          // Chat streams open with the assistant's role, as OpenAI's do.
          if (chat) {
            for (int64_t i = 0; i < count; ++i) {
              if (state->started[i]) continue;
              state->started[i] = true;
              if (!write(sse_event(completion_chunk(id, created, model, chat, {i, "", ""}, true)))) {
                channel->cancel();
                return false;
              }
            }
          }
          for (auto& e : channel->wait(std::chrono::milliseconds(100))) {
            const bool last = !e.finish_reason.empty();
            const bool failed = last && e.finish_reason != "stop" && e.finish_reason != "length";
            bool ok = true;
            if (!e.text.empty()) ok = write(sse_event(completion_chunk(id, created, model, chat, {e.index, e.text, ""}, false)));
            if (ok && last && !failed) {
              ok = write(sse_event(completion_chunk(id, created, model, chat, {e.index, "", e.finish_reason}, false)));
            }
            if (ok && failed) {
              const bool cancelled = e.finish_reason == "cancelled";
              if (!cancelled) log_failure(id, e.index, e.finish_reason);
              ok = write(sse_event(json::parse(ApiError(cancelled ? 503 : 500,
                                                        cancelled ? "the server stopped before the completion ended"
                                                                  : e.finish_reason,
                                                        "", "server_error")
                                                   .body())));
            }
            if (!ok) {
              channel->cancel();  // the client went away: its rows leave the batch at the next step
              return false;
            }
            if (last) {
              ++state->finished;
              if (e.index % n == 0) state->usage.prompt_tokens += e.prompt_tokens;
              state->usage.completion_tokens += e.completion_tokens;
            }
          }
          if (state->finished == count) {
            if (include_usage && !write(sse_event(usage_chunk(id, created, model, chat, state->usage)))) return false;
            write(sse_done());
            state->done = true;
            sink.done();
          }
          return true;
        },
        [channel, in_flight](bool success) {
          if (!success) channel->cancel();
        });
  }

  void embed(const httplib::Request& req, httplib::Response& res) {
    try {
      if (model_.config.family != Family::kBert) {
        throw ApiError(400, "this server's model (" + to_string(model_.config.family) +
                                ") makes completions, not embeddings: POST /v1/completions or /v1/chat/completions");
      }
      if (draining_) throw ApiError(503, "the server is stopping", "", "server_error");
      const auto request = parse_embedding_request(req.body);
      check_model_name(request.model);
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
      send_json(res, 200, embedding_response(options_.model_name, embeddings, tokens, request.base64));
    } catch (const ApiError& e) {
      send_error(res, e);
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
  std::unique_ptr<BatchScheduler> scheduler_;
  std::mutex model_mutex_;  // embeddings: one forward at a time
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> next_id_{0};
};

}  // namespace

int serve(Model& model, const Tokenizer& tokenizer, const ServeOptions& options, std::ostream& log,
          const ServeHooks& hooks) {
  Server server(model, tokenizer, options, log);
  httplib::Server http;
  // Every streaming client holds a thread: the batch, the queue, and a few for the rest.
  const size_t threads = static_cast<size_t>(options.max_batch + options.max_queue + 8);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_keep_alive_timeout(2);
  server.install(http);
  const int port = options.port == 0 ? http.bind_to_any_port(options.host) : options.port;
  if (port < 0 || (options.port != 0 && !http.bind_to_port(options.host, options.port))) {
    throw std::runtime_error("zoo serve: cannot listen on " + options.host + ":" + std::to_string(options.port) +
                             " (in use, or not an address of this machine)");
  }
  // As nginx's default backlog: clients that connect together are all answered at once.
  constexpr int kListenBacklog = 511;
  if (!widen_listen_backlog(port, kListenBacklog)) {
    log << "zoo serve: warning: the listening socket's backlog stays at httplib's 5 (its socket was not found)\n";
  }
  // In-process (zoo bench), the caller decides when to stop; the command line stops on signals.
  StopSignals signals(/*enabled=*/!hooks.stop);
  std::thread listener([&] { http.listen_after_bind(); });
  log << "zoo serve: " << options.model_name << " (" << to_string(model.config.family) << ") listening on http://"
      << options.host << ":" << port << "\n"
      << std::flush;
  if (hooks.listening) hooks.listening(port);
  while (stop_signal_received() == 0 && !(hooks.stop && hooks.stop())) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  server.drain(log);
  http.stop();
  listener.join();
  log << "zoo serve: stopped\n" << std::flush;
  return 0;
}

}  // namespace zoo
