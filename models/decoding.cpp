#include "models/decoding.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <torch/torch.h>

#include "core/op_profile.h"
#include "core/token_bitmask.h"

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

// Every token of each row so far, in a buffer of room for `capacity` positions written in place
// (no concatenation per token): left-padded prompts (GPT) or the decoder's start token (an
// encoder-decoder), then one column a step. Its mask (1 at real tokens) exists only when some row
// is padded: rows of one length need none, and the model then builds no mask at any step.
class TokenBuffer {
 public:
  TokenBuffer(const std::vector<std::vector<int64_t>>& rows, int64_t copies, int64_t pad_id, int64_t capacity,
              torch::Device device) {
    for (const auto& r : rows) length_ = std::max<int64_t>(length_, static_cast<int64_t>(r.size()));
    const auto n = static_cast<int64_t>(rows.size());
    bool padded = false;
    auto ids = torch::full({n, std::max(capacity, length_)}, pad_id, torch::kLong);
    auto mask = torch::ones({n, ids.size(1)}, torch::kLong);
    for (int64_t i = 0; i < n; ++i) {
      const auto len = static_cast<int64_t>(rows[i].size());
      ids[i].narrow(0, length_ - len, len).copy_(torch::tensor(rows[i], torch::kLong));
      mask[i].narrow(0, 0, length_ - len).fill_(0);
      padded = padded || len < length_;
      for (int64_t c = 0; c < copies; ++c) real_.push_back(len);
    }
    // Each row `copies` times in a row (beam search's beams).
    const auto repeated = [&](const torch::Tensor& t) {
      return t.unsqueeze(1).expand({n, copies, t.size(1)}).reshape({n * copies, t.size(1)}).to(device);
    };
    ids_ = repeated(ids);
    if (padded) mask_ = repeated(mask);
    refresh();
  }
  // Appends `tokens` (rows, 1) as every row's next real token.
  void append(const torch::Tensor& tokens) {
    if (length_ == ids_.size(1)) {  // past the room asked for: double it
      ids_ = torch::cat({ids_, torch::zeros_like(ids_)}, 1);
      if (mask_.defined()) mask_ = torch::cat({mask_, torch::ones_like(mask_)}, 1);
    }
    ids_.narrow(1, length_++, 1).copy_(tokens);
    for (auto& r : real_) ++r;
    refresh();
  }
  // Row i becomes what row sources[i] was. Beam search reorders among the copies of one row, whose
  // real lengths are the same.
  void reorder(const torch::Tensor& sources) {
    ids_ = ids_.index_select(0, sources);
    if (mask_.defined()) mask_ = mask_.index_select(0, sources);
    refresh();
  }
  const torch::Tensor& tokens() const { return tokens_; }  // (rows, length)
  const torch::Tensor& mask() const { return visible_mask_; }  // (rows, length); undefined: unpadded
  // Real tokens per row (its prompt and every token since), known on the host.
  const std::vector<int64_t>& real_lengths() const { return real_; }

 private:
  void refresh() {
    tokens_ = ids_.narrow(1, 0, length_);
    if (mask_.defined()) visible_mask_ = mask_.narrow(1, 0, length_);
  }
  torch::Tensor ids_, mask_;  // (rows, capacity)
  torch::Tensor tokens_, visible_mask_;
  int64_t length_ = 0;
  std::vector<int64_t> real_;
};

class GptDecoding : public DecodingModel {
 public:
  GptDecoding(GPT& model, const std::vector<std::vector<int64_t>>& prompts, int64_t copies, bool use_cache,
              int64_t positions)
      : model_(model),
        use_cache_(use_cache),
        cache_(model->make_cache()),
        sequence_(prompts, copies, model->config.pad_id, positions, device()) {
    if (use_cache_) cache_.reserve(positions);
  }
  int64_t rows() const override { return sequence_.tokens().size(0); }
  torch::Device device() const override { return model_->token_embedding->weight.device(); }
  torch::Tensor start() override { return model_->next_token_logits(sequence_.tokens(), sequence_.mask(), cache()); }
  torch::Tensor step(const torch::Tensor& tokens) override {
    sequence_.append(tokens);
    if (use_cache_ && rereads()) {
      cache_.clear();
      return model_->next_token_logits(sequence_.tokens(), sequence_.mask(), cache());
    }
    return model_->next_token_logits(use_cache_ ? tokens : sequence_.tokens(), sequence_.mask(), cache());
  }
  void reorder(const torch::Tensor& sources) override {
    if (use_cache_) cache_.reorder(sources);
    sequence_.reorder(sources);
  }
  const torch::Tensor& context() const override { return sequence_.tokens(); }
  const torch::Tensor& context_mask() const override { return sequence_.mask(); }

 private:
  KVCache* cache() { return use_cache_ ? &cache_ : nullptr; }
  // Whether a row's new token is its first past longrope's trained context (layers/variants.h:
  // rereads_at); each row's positions count from its own first token.
  bool rereads() const {
    const auto& scaling = model_->config.rope_scaling;
    if (scaling.kind != RopeScalingKind::kLongrope) return false;
    const auto& lengths = sequence_.real_lengths();
    return std::any_of(lengths.begin(), lengths.end(), [&](int64_t length) { return rereads_at(scaling, length); });
  }
  GPT& model_;
  bool use_cache_;
  KVCache cache_;
  TokenBuffer sequence_;
};

class EncoderDecoderDecoding : public DecodingModel {
 public:
  EncoderDecoderDecoding(EncoderDecoder& model, const std::vector<std::vector<int64_t>>& sources, int64_t copies,
                         bool use_cache, int64_t positions)
      : model_(model),
        use_cache_(use_cache),
        cache_(model->make_cache()),
        sequence_(std::vector<std::vector<int64_t>>(sources.size(), {model->config.decoder_start_id}), copies,
                  model->config.pad_id, positions, device()) {
    auto [ids, mask] = right_padded(sources, model->config.pad_id);
    ids = ids.to(device()), mask = mask.to(device());
    memory_ = model->encode(ids, mask), memory_mask_ = mask;
    if (copies > 1) memory_ = memory_.repeat_interleave(copies, 0), memory_mask_ = mask.repeat_interleave(copies, 0);
    if (use_cache_) cache_.reserve(positions);
  }
  int64_t rows() const override { return sequence_.tokens().size(0); }
  torch::Device device() const override { return model_->token_embedding->weight.device(); }
  torch::Tensor start() override {
    return model_->decode(sequence_.tokens(), memory_, memory_mask_, cache()).select(1, -1);
  }
  torch::Tensor step(const torch::Tensor& tokens) override {
    sequence_.append(tokens);
    return model_->decode(use_cache_ ? tokens : sequence_.tokens(), memory_, memory_mask_, cache()).select(1, -1);
  }
  // Beams reorder among the copies of one source: the memory rows they read are the same.
  void reorder(const torch::Tensor& sources) override {
    if (use_cache_) cache_.reorder(sources);
    sequence_.reorder(sources);
  }
  const torch::Tensor& context() const override { return sequence_.tokens(); }
  const torch::Tensor& context_mask() const override { return sequence_.mask(); }  // undefined: all real

 private:
  // The sources as (B, L) ids and a mask, right-padded.
  static std::pair<torch::Tensor, torch::Tensor> right_padded(const std::vector<std::vector<int64_t>>& rows,
                                                              int64_t pad_id) {
    int64_t longest = 0;
    for (const auto& r : rows) longest = std::max<int64_t>(longest, r.size());
    const auto n = static_cast<int64_t>(rows.size());
    auto ids = torch::full({n, longest}, pad_id, torch::kLong);
    auto mask = torch::zeros({n, longest}, torch::kLong);
    for (int64_t i = 0; i < n; ++i) {
      const auto len = static_cast<int64_t>(rows[i].size());
      ids[i].narrow(0, 0, len).copy_(torch::tensor(rows[i], torch::kLong));
      mask[i].narrow(0, 0, len).fill_(1);
    }
    return {ids, mask};
  }
  KVCache* cache() { return use_cache_ ? &cache_ : nullptr; }
  EncoderDecoder& model_;
  bool use_cache_;
  KVCache cache_;
  TokenBuffer sequence_;  // the start token and every token so far
  torch::Tensor memory_, memory_mask_;
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
  // Greedy decoding without a penalty takes the argmax of the logits as they come (a bf16
  // model's in bf16: the same token).
  const bool processes = o.sample || o.repetition_penalty != 1.0 || o.output_scores;
  torch::Tensor idle;  // (n) bool on the device: the finished rows, which read padding; undefined while none is
  auto logits = model.start();
  for (int64_t step = 0; step < o.max_new_tokens && !rows.all_done(); ++step) {
    const auto processed = processes ? process_logits(logits.to(torch::kFloat), model.context(), model.context_mask(), o)
                                     : logits;
    if (o.output_scores) result.scores.push_back(read_to_host(processed));
    torch::Tensor next;  // (n) on the device
    try {
      next = choose_tokens(processed, o, generator);
    } catch (const c10::Error&) {  // sampling refuses probabilities made from NaN: name the step
      check_logits(logits, step);
      throw;
    }
    // One read a step: every row's token and whether its logits were finite (NaN compares false).
    const auto finite = (logits < std::numeric_limits<float>::infinity()).all(-1).to(torch::kLong);
    const auto host = read_to_host(torch::stack({next, finite}));
    const auto* tokens = host.data_ptr<int64_t>();
    if (std::any_of(tokens + n, tokens + 2 * n, [](int64_t f) { return f == 0; })) check_logits(logits, step);
    bool finished = false;
    for (int64_t r = 0; r < n; ++r) finished = rows.add(r, tokens[r], o) || finished;
    if (rows.all_done() || step + 1 == o.max_new_tokens) break;
    if (finished) {  // a row's status changes once: the only copy to the device
      std::vector<int64_t> done(rows.done.begin(), rows.done.end());
      idle = torch::tensor(done, torch::kLong).gt(0).to(model.device());
    }
    logits = model.step((idle.defined() ? next.masked_fill(idle, pad_id) : next).view({n, 1}));
  }
  result.tokens = std::move(rows.tokens);
  result.finish_reasons = std::move(rows.reasons);
  return result;
}

namespace {

// A grammar's bitmask as a (1, vocab) boolean row; throws when it allows nothing, which no
// grammar reached by allowed tokens does.
torch::Tensor allowed_tokens(const std::vector<int32_t>& mask, int64_t vocab) {
  TORCH_CHECK(static_cast<int64_t>(mask.size()) * 32 >= vocab, "allowed_tokens: a mask of ", mask.size(),
              " words for ", vocab, " tokens");
  auto out = torch::empty({1, vocab}, torch::kBool);
  auto* bits = out.data_ptr<bool>();
  bool any = false;
  for (int64_t t = 0; t < vocab; ++t) {
    bits[t] = token_in_bitmask(mask, t);
    any = any || bits[t];
  }
  TORCH_CHECK(any, "the response format's grammar allows no token here");
  return out;
}

}  // namespace

std::vector<RowToken> choose_row_tokens(const torch::Tensor& logits, const std::vector<DecodingRow>& rows) {
  const auto n = static_cast<int64_t>(rows.size());
  std::vector<RowToken> out(n);
  // One read for every row: whether its logits are finite (NaN compares false), and the argmax that
  // the rows which neither sample nor penalise share.
  const auto finite = (logits < std::numeric_limits<float>::infinity()).all(-1).to(torch::kLong);
  const auto host = read_to_host(torch::stack({finite, logits.argmax(-1)}));
  const auto* read = host.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const auto& row = rows[i];
    const auto& o = *row.options;
    if (read[i] == 0) {
      out[i].error = "the model's logits for token " + std::to_string(row.generated + 1) +
                     " of this sequence hold NaN or infinity (corrupt weights, or activations overflowing their type)";
      continue;
    }
    try {
      if (!o.sample && o.repetition_penalty == 1.0 && row.allowed == nullptr) {
        out[i].token = read[n + i];
        continue;
      }
      auto row_logits = logits.narrow(0, i, 1);
      if (row.allowed != nullptr) {
        row_logits = row_logits.masked_fill(allowed_tokens(*row.allowed, logits.size(1)).to(logits.device()).logical_not(),
                                            -std::numeric_limits<float>::infinity());
      }
      if (!o.sample && o.repetition_penalty == 1.0) {
        out[i].token = read_to_host(row_logits.argmax(-1)).data_ptr<int64_t>()[0];
        continue;
      }
      torch::Tensor context;
      if (o.repetition_penalty != 1.0) context = torch::tensor(*row.context, torch::kLong).unsqueeze(0).to(logits.device());
      const auto processed = process_logits(row_logits, context, {}, o);
      out[i].token = read_to_host(choose_tokens(processed, o, *row.generator)).data_ptr<int64_t>()[0];
    } catch (const c10::Error& e) {
      out[i].error = e.what_without_backtrace();  // LibTorch's backtrace means nothing to a client
    } catch (const std::exception& e) {
      out[i].error = e.what();
    }
  }
  // The rows that ask for log-probabilities, read together, each keeping its own alternatives.
  std::vector<int64_t> asking, tokens;
  int64_t top = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (rows[i].logprobs && out[i].error.empty()) {
      asking.push_back(i);
      tokens.push_back(out[i].token);
      top = std::max(top, *rows[i].logprobs);
    }
  }
  if (asking.empty()) return out;
  auto scores = token_logprobs(logits.index_select(0, torch::tensor(asking).to(logits.device())), tokens, top);
  for (size_t a = 0; a < asking.size(); ++a) {
    auto& score = scores[a];
    score.top.resize(std::min<size_t>(score.top.size(), static_cast<size_t>(*rows[asking[a]].logprobs)));
    out[asking[a]].logprob = std::move(score);
  }
  return out;
}

std::vector<TokenLogprob> token_logprobs(const torch::Tensor& logits, const std::vector<int64_t>& tokens, int64_t top) {
  const auto n = static_cast<int64_t>(tokens.size());
  TORCH_CHECK(logits.dim() == 2 && logits.size(0) == n, "token_logprobs: logits ", logits.sizes(), " for ", n, " tokens");
  std::vector<TokenLogprob> out(n);
  if (n == 0) return out;
  const auto lp = torch::log_softmax(logits.to(torch::kFloat), -1);
  const auto ids = torch::tensor(tokens, torch::kLong).to(lp.device()).unsqueeze(1);
  // The chosen tokens' values and the top ones' in one read, as double.
  auto parts = std::vector<torch::Tensor>{lp.gather(1, ids)};
  torch::Tensor top_ids;
  if (top > 0) {
    auto [values, indices] = lp.topk(std::min<int64_t>(top, lp.size(1)), -1);
    parts.push_back(values);
    top_ids = indices.to(torch::kCPU);
  }
  const auto host = read_to_host(torch::cat(parts, 1).to(torch::kDouble));
  const auto* values = host.data_ptr<double>();
  const int64_t kept = top_ids.defined() ? top_ids.size(1) : 0, width = 1 + kept;
  for (int64_t i = 0; i < n; ++i) {
    out[i].token = tokens[i];
    out[i].logprob = values[i * width];
    for (int64_t k = 0; k < kept; ++k) out[i].top.emplace_back(top_ids[i][k].item<int64_t>(), values[i * width + 1 + k]);
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
    // One read a step: the log-probabilities, NaN where a logit was NaN or infinite.
    auto logprobs = read_to_host(
        torch::log_softmax(process_logits(logits, model.context(), model.context_mask(), o), -1).to(torch::kDouble));
    const auto* read = logprobs.data_ptr<double>();
    if (std::any_of(read, read + logprobs.numel(), [](double v) { return std::isnan(v); })) check_logits(logits, t);
    auto total = (scores.view({n * k, 1}) + logprobs).view({n, k * vocab});
    const auto [top_scores, top_ids] = total.topk(2 * k, -1);
    const auto top_score = top_scores.accessor<double, 2>();  // on the host: read without ops
    const auto top_id = top_ids.accessor<int64_t, 2>();
    std::vector<int64_t> next_tokens(n * k, pad_id), source_beams(n * k, 0);
    auto new_scores = torch::full({n, k}, kNegInf, torch::kDouble);
    auto new_score = new_scores.accessor<double, 2>();
    std::vector<std::vector<int64_t>> new_beams(n * k);
    for (int64_t row = 0; row < n; ++row) {
      if (done[row]) {
        for (int64_t j = 0; j < k; ++j) source_beams[row * k + j] = row * k + j;
        continue;
      }
      int64_t filled = 0;
      for (int64_t cand = 0; cand < 2 * k && filled < k; ++cand) {
        const double s = top_score[row][cand];
        if (s == kNegInf) break;
        const int64_t id = top_id[row][cand];
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
        new_score[row][slot - row * k] = s;
      }
      // Done when full and the best running beam cannot beat the worst finished one.
      const auto& hyps = finished[row];
      if (static_cast<int64_t>(hyps.size()) == k) {
        double best_running = penalised(new_score[row][0], t + 1);
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
        double s = scores.accessor<double, 2>()[row][j];
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
