#include "serve/stop_texts.h"

#include <algorithm>

namespace zoo {

size_t marker_start_at_end(const std::string& text, const std::string& marker) {
  if (marker.empty()) return 0;
  size_t keep = std::min(text.size(), marker.size() - 1);
  while (keep > 0 && text.compare(text.size() - keep, keep, marker, 0, keep) != 0) --keep;
  return keep;
}

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
  for (const auto& s : stops_) keep = std::max(keep, marker_start_at_end(held_, s));
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
