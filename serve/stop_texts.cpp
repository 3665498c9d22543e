#include "serve/stop_texts.h"

#include <algorithm>

namespace zoo {

StopTexts::StopTexts(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

std::string StopTexts::add(const std::string& piece) {
  if (stopped_) return "";
  held_ += piece;
  size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // The longest end of the held text that begins some stop sequence stays held. Its first byte
  // is a stop sequence's first byte, so the cut never splits a UTF-8 character.
  size_t keep = 0;
  for (const auto& s : stops_) {
    if (s.empty()) continue;
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopTexts::flush() {
  std::string out;
  out.swap(held_);
  return stopped_ ? "" : out;
}

}  // namespace zoo
