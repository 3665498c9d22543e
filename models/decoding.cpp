#include "models/decoding.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <torch/torch.h>

namespace zoo {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

bool ends_with(const std::vector<int64_t>& tokens, const std::vector<int64_t>& suffix) {
  return !suffix.empty() && tokens.size() >= suffix.size() &&
         std::equal(suffix.rbegin(), suffix.rend(), tokens.rbegin());
}

// Bookkeeping shared by the greedy/sampling loops of both families.
struct Rows {
  explicit Rows(int64_t n) : tokens(n), reasons(n, FinishReason::kLength), done(n, false) {}
  // Records `token` for row r; returns true when the row has just finished.
  bool add(int64_t r, int64_t token, const GenerationOptions& o) {
    if (done[r]) return false;
    if (std::find(o.eos_ids.begin(), o.eos_ids.end(), token) != o.eos_ids.end()) {
      done[r] = true, reasons[r] = FinishReason::kEos;
      return true;
    }
    tokens[r].push_back(token);
    if (o.on_token) o.on_token(r, token);
    for (const auto& stop : o.stop_sequences) {
      if (ends_with(tokens[r], stop)) {
        tokens[r].resize(tokens[r].size() - stop.size());
        done[r] = true, reasons[r] = FinishReason::kStop;
        return true;
      }
    }
    return false;
  }
  bool all_done() const { return std::all_of(done.begin(), done.end(), [](bool d) { return d; }); }

  std::vector<std::vector<int64_t>> tokens;
  std::vector<FinishReason> reasons;
  std::vector<bool> done;
};

// Left-pads (GPT) or right-pads (encoder) token lists into (B, L) ids and a mask.
std::pair<torch::Tensor, torch::Tensor> pad(const std::vector<std::vector<int64_t>>& rows,
                                            int64_t pad_id, bool left, torch::Device device) {
  int64_t longest = 0;
  for (const auto& r : rows) longest = std::max<int64_t>(longest, r.size());
  const auto n = static_cast<int64_t>(rows.size());
  auto ids = torch::full({n, longest}, pad_id, torch::kLong);
  auto mask = torch::zeros({n, longest}, torch::kLong);
  for (int64_t i = 0; i < n; ++i) {
    const auto len = static_cast<int64_t>(rows[i].size());
    const int64_t start = left ? longest - len : 0;
    ids[i].narrow(0, start, len).copy_(torch::tensor(rows[i], torch::kLong));
    mask[i].narrow(0, start, len).fill_(1);
  }
  return {ids.to(device), mask.to(device)};
}

class GptDecoding : public DecodingModel {
 public:
  GptDecoding(GPT& model, const std::vector<std::vector<int64_t>>& prompts, int64_t copies, bool use_cache,
              int64_t positions)
      : model_(model), use_cache_(use_cache), cache_(model->make_cache()) {
    std::tie(sequence_, mask_) = pad(prompts, model->config.pad_id, /*left=*/true, device());
    if (copies > 1) sequence_ = sequence_.repeat_interleave(copies, 0), mask_ = mask_.repeat_interleave(copies, 0);
    if (use_cache_) cache_.reserve(positions);
  }
  int64_t rows() const override { return sequence_.size(0); }
  torch::Device device() const override { return model_->token_embedding->weight.device(); }
  torch::Tensor start() override { return model_->next_token_logits(sequence_, mask_, cache()); }
  torch::Tensor step(const torch::Tensor& tokens) override {
    sequence_ = torch::cat({sequence_, tokens}, 1);
    mask_ = torch::cat({mask_, torch::ones({rows(), 1}, mask_.options())}, 1);
    if (use_cache_ && rereads()) {
      cache_.clear();
      return model_->next_token_logits(sequence_, mask_, cache());
    }
    return model_->next_token_logits(use_cache_ ? tokens : sequence_, mask_, cache());
  }
  void reorder(const torch::Tensor& sources) override {
    if (use_cache_) cache_.reorder(sources);
    sequence_ = sequence_.index_select(0, sources), mask_ = mask_.index_select(0, sources);
  }
  const torch::Tensor& context() const override { return sequence_; }
  const torch::Tensor& context_mask() const override { return mask_; }

 private:
  KVCache* cache() { return use_cache_ ? &cache_ : nullptr; }
  // Whether a row's new token is its first past longrope's trained context (layers/variants.h:
  // rereads_at); each row's positions count from its own first token.
  bool rereads() const {
    const auto& scaling = model_->config.rope_scaling;
    if (scaling.kind != RopeScalingKind::kLongrope) return false;
    const auto lengths = mask_.sum(1).cpu();
    for (int64_t i = 0; i < lengths.size(0); ++i)
      if (rereads_at(scaling, lengths[i].item<int64_t>())) return true;
    return false;
  }
  GPT& model_;
  bool use_cache_;
  KVCache cache_;
  torch::Tensor sequence_, mask_;  // every token so far, left-padded; 1 at real tokens
};

class EncoderDecoderDecoding : public DecodingModel {
 public:
  EncoderDecoderDecoding(EncoderDecoder& model, const std::vector<std::vector<int64_t>>& sources, int64_t copies,
                         bool use_cache, int64_t positions)
      : model_(model), use_cache_(use_cache), cache_(model->make_cache()) {
    auto [ids, mask] = pad(sources, model->config.pad_id, /*left=*/false, device());
    memory_ = model->encode(ids, mask), memory_mask_ = mask;
    if (copies > 1) memory_ = memory_.repeat_interleave(copies, 0), memory_mask_ = mask.repeat_interleave(copies, 0);
    sequence_ = torch::full({memory_.size(0), 1}, model->config.decoder_start_id, torch::kLong).to(device());
    if (use_cache_) cache_.reserve(positions);
  }
  int64_t rows() const override { return sequence_.size(0); }
  torch::Device device() const override { return model_->token_embedding->weight.device(); }
  torch::Tensor start() override { return model_->decode(sequence_, memory_, memory_mask_, cache()).select(1, -1); }
  torch::Tensor step(const torch::Tensor& tokens) override {
    sequence_ = torch::cat({sequence_, tokens}, 1);
    return model_->decode(use_cache_ ? tokens : sequence_, memory_, memory_mask_, cache()).select(1, -1);
  }
  // Beams reorder among the copies of one source: the memory rows they read are the same.
  void reorder(const torch::Tensor& sources) override {
    if (use_cache_) cache_.reorder(sources);
    sequence_ = sequence_.index_select(0, sources);
  }
  const torch::Tensor& context() const override { return sequence_; }
  const torch::Tensor& context_mask() const override { return no_mask_; }

 private:
  KVCache* cache() { return use_cache_ ? &cache_ : nullptr; }
  EncoderDecoder& model_;
  bool use_cache_;
  KVCache cache_;
  torch::Tensor memory_, memory_mask_;
  torch::Tensor sequence_;  // the start token and every token so far
  torch::Tensor no_mask_;   // every token of the decoder's is real
};

}  // namespace

std::unique_ptr<DecodingModel> gpt_decoding(GPT& model, const std::vector<std::vector<int64_t>>& prompts,
                                            int64_t copies, bool use_cache, int64_t positions) {
  return std::make_unique<GptDecoding>(model, prompts, copies, use_cache, positions);
}

std::unique_ptr<DecodingModel> encoder_decoder_decoding(EncoderDecoder& model,
                                                        const std::vector<std::vector<int64_t>>& sources,
                                                        int64_t copies, bool use_cache, int64_t positions) {
  return std::make_unique<EncoderDecoderDecoding>(model, sources, copies, use_cache, positions);
}

GenerationResult decode_rows(DecodingModel& model, const GenerationOptions& o, int64_t pad_id) {
  auto generator = make_generator(o.seed);
  const int64_t n = model.rows();
  Rows rows(n);
  GenerationResult result;
  auto logits = model.start();
  for (int64_t step = 0; step < o.max_new_tokens && !rows.all_done(); ++step) {
    check_logits(logits, step);
    auto processed = process_logits(logits.to(torch::kFloat), model.context(), model.context_mask(), o);
    if (o.output_scores) result.scores.push_back(processed.cpu());
    auto next = choose_tokens(processed, o, generator).cpu();
    for (int64_t r = 0; r < n; ++r) {
      if (rows.done[r]) next[r] = pad_id;  // finished rows idle on padding
      else rows.add(r, next[r].item<int64_t>(), o);
    }
    if (rows.all_done() || step + 1 == o.max_new_tokens) break;
    logits = model.step(next.to(model.device()).view({n, 1}));
  }
  result.tokens = std::move(rows.tokens);
  result.finish_reasons = std::move(rows.reasons);
  return result;
}

std::vector<RowToken> choose_row_tokens(const torch::Tensor& logits, const std::vector<DecodingRow>& rows) {
  const auto n = static_cast<int64_t>(rows.size());
  std::vector<RowToken> out(n);
  const auto finite = (logits < std::numeric_limits<float>::infinity()).all(-1).cpu();  // (n); NaN is false
  torch::Tensor argmax;  // the rows that neither sample nor penalise share one argmax
  for (int64_t i = 0; i < n; ++i) {
    const auto& row = rows[i];
    const auto& o = *row.options;
    if (!finite[i].item<bool>()) {
      out[i].error = "the model's logits for token " + std::to_string(row.generated + 1) +
                     " of this sequence hold NaN or infinity (corrupt weights, or activations overflowing their type)";
      continue;
    }
    try {
      if (!o.sample && o.repetition_penalty == 1.0) {
        if (!argmax.defined()) argmax = logits.argmax(-1).cpu();
        out[i].token = argmax[i].item<int64_t>();
        continue;
      }
      torch::Tensor context;
      if (o.repetition_penalty != 1.0) context = torch::tensor(*row.context, torch::kLong).unsqueeze(0).to(logits.device());
      const auto processed = process_logits(logits.narrow(0, i, 1), context, {}, o);
      out[i].token = choose_tokens(processed, o, *row.generator).item<int64_t>();
    } catch (const c10::Error& e) {
      out[i].error = e.what_without_backtrace();  // LibTorch's backtrace means nothing to a client
    } catch (const std::exception& e) {
      out[i].error = e.what();
    }
  }
  return out;
}

GenerationResult beam_search(DecodingModel& model, const GenerationOptions& o, int64_t vocab, int64_t pad_id) {
  const int64_t k = o.num_beams, n = model.rows() / k;
  TORCH_CHECK(n * k == model.rows(), "beam search: ", model.rows(), " rows are not ", k, " beams per prompt");
  auto scores = torch::full({n, k}, kNegInf, torch::kDouble);
  scores.select(1, 0).fill_(0.0);  // identical beams at start: keep one
  std::vector<std::vector<int64_t>> beams(n * k);
  struct Hypothesis { double score; std::vector<int64_t> tokens; };
  std::vector<std::vector<Hypothesis>> finished(n);
  std::vector<bool> done(n, false);
  auto penalised = [&](double logprob, size_t length) {
    return logprob / std::pow(static_cast<double>(std::max<size_t>(length, 1)), o.length_penalty);
  };
  auto add_finished = [&](int64_t row, double logprob, std::vector<int64_t> tokens) {
    auto& hyps = finished[row];
    double s = penalised(logprob, tokens.size() + 1);  // the EOS counts, as in HF
    hyps.push_back({s, std::move(tokens)});
    std::sort(hyps.begin(), hyps.end(), [](const auto& a, const auto& b) { return a.score > b.score; });
    if (static_cast<int64_t>(hyps.size()) > k) hyps.pop_back();
  };

  const auto device = model.device();
  auto logits = model.start();
  for (int64_t t = 0; t < o.max_new_tokens; ++t) {
    logits = logits.to(torch::kFloat);
    check_logits(logits, t);
    auto logprobs =
        torch::log_softmax(process_logits(logits, model.context(), model.context_mask(), o), -1).to(torch::kDouble).cpu();
    auto total = (scores.view({n * k, 1}) + logprobs).view({n, k * vocab});
    auto [top_scores, top_ids] = total.topk(2 * k, -1);
    std::vector<int64_t> next_tokens(n * k, pad_id), source_beams(n * k, 0);
    auto new_scores = torch::full({n, k}, kNegInf, torch::kDouble);
    std::vector<std::vector<int64_t>> new_beams(n * k);
    for (int64_t row = 0; row < n; ++row) {
      if (done[row]) {
        for (int64_t j = 0; j < k; ++j) source_beams[row * k + j] = row * k + j;
        continue;
      }
      int64_t filled = 0;
      for (int64_t cand = 0; cand < 2 * k && filled < k; ++cand) {
        const double s = top_scores[row][cand].item<double>();
        if (s == kNegInf) break;
        const int64_t id = top_ids[row][cand].item<int64_t>();
        const int64_t beam = row * k + id / vocab, token = id % vocab;
        const bool is_eos = std::find(o.eos_ids.begin(), o.eos_ids.end(), token) != o.eos_ids.end();
        if (is_eos) {
          if (cand < k) add_finished(row, s, beams[beam]);
          continue;
        }
        const int64_t slot = row * k + filled++;
        new_beams[slot] = beams[beam];
        new_beams[slot].push_back(token);
        next_tokens[slot] = token, source_beams[slot] = beam;
        new_scores[row][slot - row * k] = s;
      }
      // Done when full and the best running beam cannot beat the worst finished one.
      const auto& hyps = finished[row];
      if (static_cast<int64_t>(hyps.size()) == k) {
        double best_running = penalised(new_scores[row][0].item<double>(), t + 1);
        done[row] = best_running <= hyps.back().score;
      }
    }
    for (int64_t row = 0; row < n; ++row) {
      if (done[row] && new_beams[row * k].empty()) {
        for (int64_t j = 0; j < k; ++j) new_beams[row * k + j] = beams[row * k + j];
        new_scores[row] = scores[row];
      }
    }
    beams = std::move(new_beams);
    scores = new_scores;
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; }) || t + 1 == o.max_new_tokens) break;
    model.reorder(torch::tensor(source_beams, torch::kLong).to(device));
    logits = model.step(torch::tensor(next_tokens, torch::kLong).view({n * k, 1}).to(device));
  }
  GenerationResult result;
  for (int64_t row = 0; row < n; ++row) {
    if (!done[row]) {  // ran out of length: running beams compete too
      for (int64_t j = 0; j < k; ++j) {
        double s = scores[row][j].item<double>();
        if (s == kNegInf) continue;
        auto& hyps = finished[row];
        hyps.push_back({penalised(s, beams[row * k + j].size()), beams[row * k + j]});
      }
      std::sort(finished[row].begin(), finished[row].end(),
                [](const auto& a, const auto& b) { return a.score > b.score; });
    }
    const bool by_eos = done[row] || (!finished[row].empty() && finished[row].front().tokens.size() <
                                                                    static_cast<size_t>(o.max_new_tokens));
    result.tokens.push_back(finished[row].empty() ? std::vector<int64_t>{} : finished[row].front().tokens);
    result.finish_reasons.push_back(by_eos ? FinishReason::kEos : FinishReason::kLength);
  }
  return result;
}


}  // namespace zoo
