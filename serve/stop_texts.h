#pragma once
// Stop sequences over streamed text: the text a completion produces arrives a token at a time,
// and a stop sequence may arrive split over several tokens. What could still be the start of a
// stop sequence is held back until it is known not to be one (as vLLM's detokenizer does), so
// that no client ever receives text that a stop sequence then cuts.

#include <string>
#include <vector>

namespace zoo {

// How many of `text`'s last bytes begin `marker` (at most marker.size() - 1): what a reader of
// streamed text holds back while it may still be the start of a marker.
size_t marker_start_at_end(const std::string& text, const std::string& marker);

class StopTexts {
 public:
  explicit StopTexts(std::vector<std::string> stops);

  // Takes the next piece of text; returns what may be sent now. Once a stop sequence is
  // complete, stopped() is true and the text before it is all that was ever sent.
  std::string add(const std::string& piece);
  // The end of the completion: what was held back, none of it a stop sequence.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace zoo
