#include "serve/reasoning.h"

#include "serve/stop_texts.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace zoo {
namespace {

constexpr const char* kOpen = "<think>";
constexpr const char* kClose = "</think>";

bool blank(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

}  // namespace

bool template_reasons(const std::string& chat_template) {
  return chat_template.find(kOpen) != std::string::npos && chat_template.find(kClose) != std::string::npos;
}

bool prompt_opens_reasoning(const std::string& prompt) {
  const size_t open = prompt.rfind(kOpen);
  if (open == std::string::npos) return false;
  const size_t close = prompt.rfind(kClose);
  return close == std::string::npos || close < open;
}

ReasoningReader::Piece ReasoningReader::add(const std::string& text) {
  Piece out;
  held_ += text;
  const std::string open = kOpen, close = kClose;
  // Each state may hand what is held to the next, within one call.
  while (true) {
    switch (state_) {
      case State::kStart: {
        size_t at = 0;
        while (at < held_.size() && blank(held_[at])) ++at;
        const std::string rest = held_.substr(at);
        if (rest.compare(0, open.size(), open) == 0) {
          held_ = rest.substr(open.size());
          state_ = State::kReasoning;
          continue;
        }
        if (rest.size() < open.size() && open.compare(0, rest.size(), rest) == 0) return out;  // blanks or "<thi"
        state_ = State::kContent;
        continue;
      }
      case State::kReasoning: {
        if (const size_t end = held_.find(close); end != std::string::npos) {
          out.reasoning += held_.substr(0, end);
          held_.erase(0, end + close.size());
          state_ = State::kAfter;
          continue;
        }
        const size_t keep = marker_start_at_end(held_, close);
        out.reasoning += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      case State::kAfter: {
        size_t at = 0;
        while (at < held_.size() && blank(held_[at])) ++at;
        held_.erase(0, at);
        if (held_.empty()) return out;
        state_ = State::kContent;
        continue;
      }
      case State::kContent:
        out.content += held_;
        held_.clear();
        return out;
    }
    throw std::logic_error("unhandled reasoning state");
  }
}

ReasoningReader::Piece ReasoningReader::finish() {
  Piece out;
  switch (state_) {
    case State::kReasoning: out.reasoning = held_; break;
    case State::kStart:
    case State::kContent: out.content = held_; break;
    case State::kAfter: break;
  }
  held_.clear();
  return out;
}

}  // namespace zoo
