#pragma once
// The OpenAI wire format zoo serve speaks: request bodies parsed and checked field by field into
// structs, and the JSON objects and server-sent events sent back, as the official `openai` client
// reads them (the API reference's "completions", "chat" and "embeddings" objects). Torch-free: the
// fuzz target builds it alone.
//
// Fields zoo does not know are ignored, as vLLM and llama.cpp's server do (clients send more than
// they need); a known field of the wrong type or out of range, and a feature zoo does not have
// (logit_bias, the legacy functions, ...) asked for, is refused with 400 naming the field.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/finish_reason.h"

namespace zoo {

// An HTTP error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = "", std::string type = "invalid_request_error")
      : std::runtime_error(message), status(status), param(std::move(param)), type(std::move(type)) {}
  int status;
  std::string param;  // the request field at fault; empty for none
  std::string type;
  std::string body() const;
};

// One prompt of /v1/completions: text, or token ids.
struct ApiPrompt {
  std::string text;
  std::vector<int64_t> ids;
  bool is_ids = false;
};

// A call of one of the request's tools: its arguments are a JSON object's text, as OpenAI sends them.
struct ApiToolCall {
  std::string id;
  std::string name;
  std::string arguments;
  bool operator==(const ApiToolCall& o) const { return id == o.id && name == o.name && arguments == o.arguments; }
};

struct ApiMessage {
  std::string role;
  std::string content;
  bool null_content = false;           // an assistant turn of tool calls alone ("content": null)
  std::vector<ApiToolCall> tool_calls;  // an assistant turn's
  std::string reasoning_content;        // an assistant turn's thinking (Qwen3's templates render it)
  std::string tool_call_id;             // a tool turn's: the call it answers
  std::string name;                     // the optional participant or function name
};

// The messages as a chat template reads them (transformers' apply_chat_template, as vLLM passes
// them): each call's arguments as an object where its text is one, as templates print them with
// tojson; the keys a message does not have left out (a template may test `'tool_calls' in message`).
nlohmann::ordered_json chat_template_messages(const std::vector<ApiMessage>& messages);

// tool_choice: none (the model answers in text; the tools are not shown to it), auto (it may call
// them: its answer is read for calls), required (it calls one or more), or one function by name.
enum class ToolChoiceKind { kNone, kAuto, kRequired, kNamed };
struct ToolChoice {
  ToolChoiceKind kind = ToolChoiceKind::kNone;
  std::string name;  // kNamed
};
constexpr size_t kMaxTools = 128;  // OpenAI's bound

// What sampling and stopping a completion asks for.
struct ApiSampling {
  std::optional<int64_t> max_tokens;  // absent: /v1/completions 16, chat the room left in the context
  double temperature = 1.0;           // 0: greedy
  double top_p = 1.0;
  int64_t top_k = 0;                  // extension (vLLM): 0 or -1 = every token
  double repetition_penalty = 1.0;    // extension (vLLM)
  bool ignore_eos = false;            // extension (vLLM): only max_tokens and stop texts end it
  std::vector<std::string> stop;      // at most 4, none empty
  std::optional<uint64_t> seed;
  int64_t n = 1;                      // choices per prompt
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage: a last chunk with the usage
  // Log-probabilities: a completion's `logprobs: N`, a chat's `logprobs: true` with
  // `top_logprobs: N`; N (0-20) alternatives per token. nullopt: none asked.
  std::optional<int64_t> logprobs;
  bool echo = false;                  // /v1/completions: the prompt first (max_tokens 0: it alone)
};

// What an answer must be (response_format): free text, any JSON value (json_object; OpenAI's asks
// for an object, and so does zoo's grammar), or JSON valid under a schema (json_schema).
enum class ResponseFormatKind { kText, kJsonObject, kJsonSchema };
struct ResponseFormat {
  ResponseFormatKind kind = ResponseFormatKind::kText;
  std::string schema;  // kJsonSchema: the schema, serialized
};

// The JSON-schema keywords structured output holds an answer to (OpenAI's strict mode's), and those
// that only annotate; a schema with any other is refused by name. Not minLength/maxLength:
// xgrammar 0.2.9's bounded strings admit raw control characters, which JSON forbids; nor format:
// its date regex admits November 31st.
bool json_schema_keyword_supported(const std::string& keyword);

struct CompletionRequest {
  bool chat = false;
  std::string model;                 // empty when not given
  std::vector<ApiPrompt> prompts;    // /v1/completions
  std::vector<ApiMessage> messages;  // /v1/chat/completions
  ApiSampling sampling;
  ResponseFormat response_format;
  // Chats: the tools as a template reads them (a list of {"type": "function", "function": {name,
  // description, parameters}}, keys in the request's order), null when none; tool_choice
  // defaults to auto with tools and none without.
  nlohmann::ordered_json tools;
  ToolChoice tool_choice;
  bool parallel_tool_calls = true;
  // Chats: chat_template_kwargs (vLLM's), more variables for the template, as Qwen3's
  // enable_thinking; an object, null when none.
  nlohmann::ordered_json template_kwargs;
};

struct EmbeddingRequest {
  std::string model;
  std::vector<std::string> inputs;
  bool base64 = false;  // encoding_format "base64" (what the openai client asks for): float32 bytes
};

constexpr int64_t kMaxChoices = 64;  // n times the prompts, per request

// Throw ApiError (400) naming the field.
CompletionRequest parse_completion_request(const std::string& body, bool chat);
EmbeddingRequest parse_embedding_request(const std::string& body);

struct ApiUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  nlohmann::json to_json() const;
};

// One token's log-probability as the API reports it: its text, its value (none for a prompt's
// first token, which nothing predicts) and the most likely tokens' (best first).
struct ApiTokenLogprob {
  std::string token;
  std::optional<double> logprob;
  std::vector<std::pair<std::string, double>> top;
};

struct ApiChoice {
  int64_t index = 0;
  std::string text;
  std::string finish_reason;  // "stop", "length" or "tool_calls"; empty while streaming
  std::vector<ApiToolCall> tool_calls;  // a chat's
  std::string reasoning;                // a chat's thinking (reasoning_content), read apart from its text
  // Asked for: the tokens' log-probabilities (those of this chunk, when streaming), and where the
  // first of them starts in the choice's text (characters, as Python counts them).
  std::optional<std::vector<ApiTokenLogprob>> logprobs;
  int64_t text_offset = 0;
};

// Characters (code points) in UTF-8 `text`: OpenAI's text offsets count them.
int64_t utf8_characters(const std::string& text);

// OpenAI's finish_reason for a sequence that ended normally: "stop" (an EOS token or a stop
// text) or "length"; nullopt for kCancelled and kError, which are answered as errors.
std::optional<std::string> openai_finish_reason(FinishReason reason);

// Whole responses.
nlohmann::json completion_response(const std::string& id, int64_t created, const std::string& model, bool chat,
                                   const std::vector<ApiChoice>& choices, const ApiUsage& usage);
// One streamed chunk: `first` chat chunks carry the assistant role.
nlohmann::json completion_chunk(const std::string& id, int64_t created, const std::string& model, bool chat,
                                const ApiChoice& choice, bool first);
// The last chunk of stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk(const std::string& id, int64_t created, const std::string& model, bool chat,
                           const ApiUsage& usage);
nlohmann::json embedding_response(const std::string& model, const std::vector<std::vector<float>>& embeddings,
                                  int64_t prompt_tokens, bool base64 = false);
// Standard base64 (RFC 4648, padded) of `bytes`.
std::string base64_encode(const std::string& bytes);
// The base model, then each served adapter (name, path) with the base as its parent, as vLLM
// lists them.
nlohmann::json models_response(const std::string& model, int64_t created,
                               const std::vector<std::pair<std::string, std::string>>& adapters = {});

// Server-sent events: "data: JSON\n\n", and the stream's end, "data: [DONE]\n\n".
std::string sse_event(const nlohmann::json& data);
std::string sse_done();

}  // namespace zoo
