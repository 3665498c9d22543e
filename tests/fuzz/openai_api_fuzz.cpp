// libFuzzer target for zoo serve's request parser and server-sent-event writer: any body is
// parsed as a completion, a chat completion and an embedding request, each either accepted or
// refused with an ApiError whose body is valid JSON; what is accepted is echoed through the
// response writers as zoo serve would stream it (with each piece's log-probability and its
// alternatives when asked), and every event is valid JSON again. A chat's text is read again as a
// model's answer in each tool-call format, streamed and whole: the content sent is never more than
// the text, and each call's arguments are a JSON object. Numbers of
// any length: each body is tried again with its first digit repeated 400 times (past any 64-bit
// type), which a mutator rarely reaches by itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "serve/openai_api.h"
#include "serve/stop_texts.h"
#include "serve/tool_calls.h"

namespace {

void check_event(const std::string& event) {
  if (event.rfind("data: ", 0) != 0 || event.size() < 8 || event.compare(event.size() - 2, 2, "\n\n") != 0) std::abort();
  const auto parsed = nlohmann::json::parse(event.substr(6, event.size() - 8), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) std::abort();
}

void check_body(const std::string& body) {
  for (const bool chat : {false, true}) {
    try {
      const auto r = zoo::parse_completion_request(body, chat);
      // Echo the request's own text back as a streamed completion, through its stop texts.
      zoo::StopTexts stops(r.sampling.stop);
      std::string text;
      for (const auto& p : r.prompts) text += p.text;
      for (const auto& m : r.messages) text += m.content;
      std::string sent;
      std::vector<zoo::ApiTokenLogprob> all;
      for (size_t i = 0; i < text.size() && !stops.stopped(); i += 3) {
        const auto piece = stops.add(text.substr(i, 3));
        sent += piece;
        zoo::ApiChoice chunk;
        chunk.text = piece;
        if (r.sampling.logprobs) {
          zoo::ApiTokenLogprob entry{text.substr(i, 3), i == 0 && r.sampling.echo ? std::nullopt : std::optional(-0.5), {}};
          for (int64_t k = 0; k < *r.sampling.logprobs; ++k) entry.top.emplace_back(text.substr(i, 1 + k % 3), -1.0 * k);
          chunk.logprobs = std::vector{entry};
          chunk.text_offset = zoo::utf8_characters(sent);
          all.push_back(entry);
        }
        check_event(zoo::sse_event(zoo::completion_chunk("id", 0, r.model, chat, chunk, i == 0)));
      }
      sent += stops.flush();
      if (sent.size() > text.size()) std::abort();
      if (chat) {
        if (!zoo::chat_template_messages(r.messages).is_array()) std::abort();
        const bool forced = r.tool_choice.kind == zoo::ToolChoiceKind::kRequired || r.tool_choice.kind == zoo::ToolChoiceKind::kNamed;
        if (forced && nlohmann::json::parse(zoo::forced_tool_schema(r.tools, r.tool_choice, r.parallel_tool_calls)).is_discarded()) std::abort();
        for (const auto format : {zoo::ToolCallFormat::kHermes, zoo::ToolCallFormat::kQwenXml, zoo::ToolCallFormat::kLlama3Json,
                                  zoo::ToolCallFormat::kMistral}) {
          zoo::ToolCallReader reader({zoo::ToolChoiceKind::kAuto, ""}, format, r.tools);
          std::string content;
          for (size_t i = 0; i < text.size(); i += 5) content += reader.add(text.substr(i, 5));
          const auto end = reader.finish();
          content += end.content;
          if (content.size() > text.size()) std::abort();
          zoo::ApiChoice calls;
          calls.text = content, calls.tool_calls = end.calls, calls.finish_reason = "tool_calls";
          for (const auto& c : end.calls) {
            if (!nlohmann::json::parse(c.arguments, nullptr, false).is_object()) std::abort();
          }
          check_event(zoo::sse_event(zoo::completion_chunk("id", 0, r.model, chat, calls, false)));
        }
      }
      zoo::ApiChoice whole;
      whole.text = sent, whole.finish_reason = "stop";
      if (r.sampling.logprobs) whole.logprobs = all;
      check_event(zoo::sse_event(zoo::completion_response("id", 0, r.model, chat, {whole}, {1, 2})));
    } catch (const zoo::ApiError& e) {
      if (e.status != 400 || nlohmann::json::parse(e.body(), nullptr, false).is_discarded()) std::abort();
    }
  }
  try {
    const auto r = zoo::parse_embedding_request(body);
    check_event(zoo::sse_event(zoo::embedding_response(r.model, {{0.5f}}, static_cast<int64_t>(r.inputs.size()))));
  } catch (const zoo::ApiError& e) {
    if (e.status != 400) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  check_body(body);
  if (const size_t digit = body.find_first_of("0123456789"); digit != std::string::npos) {
    check_body(body.substr(0, digit) + std::string(400, body[digit]) + body.substr(digit + 1));
  }
  return 0;
}
