#include "models/decoding.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace zoo {
namespace {

// A model whose next-token logits depend on the last token only (a Markov chain over a tiny
// vocabulary): the loops' policy tested against brute force, with no transformer.
class MarkovModel : public DecodingModel {
 public:
  MarkovModel(torch::Tensor logits, std::vector<int64_t> first) : logits_(std::move(logits)) {
    sequence_ = torch::tensor(first, torch::kLong).view({-1, 1});
  }
  int64_t rows() const override { return sequence_.size(0); }
  torch::Device device() const override { return torch::kCPU; }
  torch::Tensor start() override { return next(); }
  torch::Tensor step(const torch::Tensor& tokens) override {
    sequence_ = torch::cat({sequence_, tokens}, 1);
    return next();
  }
  void reorder(const torch::Tensor& sources) override { sequence_ = sequence_.index_select(0, sources); }
  const torch::Tensor& context() const override { return sequence_; }
  const torch::Tensor& context_mask() const override { return no_mask_; }
  int64_t steps = 0;

 private:
  torch::Tensor next() {
    ++steps;
    return logits_.index_select(0, sequence_.select(1, -1));
  }
  torch::Tensor logits_, sequence_, no_mask_;
};

// Tokens 0-2 and EOS 3: logits[previous][next].
torch::Tensor chain() {
  return torch::tensor({{0.1, 2.0, 0.3, -1.0}, {1.5, 0.2, 0.1, 1.4}, {0.5, 0.4, 2.2, 0.6}, {0.0, 0.0, 0.0, 0.0}});
}

TEST(Decoding, GreedyFollowsTheArgmaxAndFinishedRowsIdle) {
  MarkovModel model(chain(), {0, 1});
  GenerationOptions o;
  o.max_new_tokens = 4, o.eos_ids = {3};
  const auto result = decode_rows(model, o, /*pad_id=*/0);
  // From 0: 1, then 0 (1.5 > 1.4), then 1, 0. From 1: 0, 1, 0, 1.
  EXPECT_EQ(result.tokens[0], (std::vector<int64_t>{1, 0, 1, 0}));
  EXPECT_EQ(result.tokens[1], (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(result.finish_reasons[0], FinishReason::kLength);
  EXPECT_EQ(model.steps, 4);  // no step after the last token
  // A stop sequence ends its row; the other goes on, the finished row idling on padding.
  MarkovModel stopped(chain(), {0, 1});
  o.stop_sequences = {{0, 1}};
  const auto stop = decode_rows(stopped, o, 0);
  EXPECT_EQ(stop.tokens[0], (std::vector<int64_t>{1}));  // 1, 0, 1 ends with "0 1"
  EXPECT_EQ(stop.finish_reasons[0], FinishReason::kStop);
  EXPECT_EQ(stop.tokens[1], (std::vector<int64_t>{}));  // 0, 1
  EXPECT_EQ(stop.finish_reasons[1], FinishReason::kStop);
}

// With as many beams as there are hypotheses and no length penalty, beam search returns the
// sequence of the highest log-probability among all that end in EOS or run out of length.
TEST(Decoding, BeamSearchWithEnoughBeamsFindsTheBestSequence) {
  const auto logprobs = torch::log_softmax(chain().to(torch::kDouble), -1);
  for (int64_t first : {0, 1, 2}) {
    double best = -std::numeric_limits<double>::infinity();
    std::vector<int64_t> best_tokens;
    auto consider = [&](double score, std::vector<int64_t> tokens) {
      if (score > best) best = score, best_tokens = std::move(tokens);
    };
    const auto lp = [&](int64_t from, int64_t to) { return logprobs[from][to].item<double>(); };
    consider(lp(first, 3), {});
    for (int64_t a = 0; a < 3; ++a) {
      consider(lp(first, a) + lp(a, 3), {a});
      for (int64_t b = 0; b < 3; ++b) consider(lp(first, a) + lp(a, b), {a, b});
    }
    const int64_t beams = 16;
    MarkovModel model(chain(), std::vector<int64_t>(beams, first));
    GenerationOptions o;
    o.max_new_tokens = 2, o.eos_ids = {3}, o.num_beams = beams, o.length_penalty = 0.0;
    const auto result = beam_search(model, o, /*vocab=*/4, /*pad_id=*/0);
    EXPECT_EQ(result.tokens[0], best_tokens) << "from " << first;
    EXPECT_EQ(model.steps, 2);  // the start and one step: none after the last token
  }
}

TEST(Decoding, BeamSearchNeedsWholeGroupsOfBeams) {
  MarkovModel model(chain(), {0, 1, 2});
  GenerationOptions o;
  o.num_beams = 2;
  EXPECT_THROW(beam_search(model, o, 4, 0), c10::Error);
}

}  // namespace
}  // namespace zoo
