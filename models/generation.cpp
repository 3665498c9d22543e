#include "models/generation.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "core/runtime.h"
#include "core/strings.h"
#include "models/parameter_count.h"

namespace zoo {

torch::Tensor choose_tokens(const torch::Tensor& logits, const GenerationOptions& o, at::Generator& gen) {
  if (!o.sample) return logits.argmax(-1);
  auto probs = torch::softmax(logits.to(torch::kFloat), -1).cpu();
  return at::multinomial(probs, 1, /*replacement=*/false, gen).squeeze(1).to(logits.device());
}

at::Generator make_generator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

void check_logits(const torch::Tensor& logits, int64_t step) {
  if ((logits < std::numeric_limits<float>::infinity()).all().item<bool>()) return;  // NaN compares false
  throw std::runtime_error(c10::str("generate: the model's logits hold NaN or infinity at step ", step + 1,
                                    " (corrupt weights, or activations overflowing their type)"));
}

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

// EOS ids and stop sequences name tokens of the vocabulary.
void check_token_options(const GenerationOptions& o, int64_t vocab) {
  for (int64_t id : o.eos_ids) {
    if (id < 0 || id >= vocab) {
      throw std::invalid_argument(c10::str("generate: eos id ", id, " is not a token id (the vocabulary has ", vocab,
                                           " tokens: 0..", vocab - 1, ")"));
    }
  }
  for (const auto& stop : o.stop_sequences) {
    for (int64_t id : stop) {
      if (id < 0 || id >= vocab) throw std::invalid_argument(c10::str("generate: stop sequence token ", id, " outside the vocabulary"));
    }
  }
}

void check_prompts(const std::vector<std::vector<int64_t>>& prompts, int64_t vocab, const char* what) {
  if (prompts.empty()) throw std::invalid_argument(std::string("generate: no ") + what);
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) {
      throw std::invalid_argument(c10::str("generate: ", what, " ", i, " is empty"));
    }
    for (int64_t t : prompts[i]) {
      if (t < 0 || t >= vocab) {
        throw std::invalid_argument(c10::str("generate: ", what, " ", i, " has token ", t,
                                             " outside the vocabulary (", vocab, ")"));
      }
    }
  }
}

// The KV cache a generation reserves, refused before it starts when this machine's memory
// cannot hold it, naming the options that size it: --max-new-tokens 999999999999 on a RoPE model
// of max_positions 10^9 reserved 2 TB, and the first layer's keys ended in the allocator's "out
// of memory mapping 256000000000 bytes". `weight` (a model's embedding) gives the device and the
// cache's type; a GPU's own memory is not asked.
void check_cache_fits(const ModelConfig& c, int64_t rows, int64_t positions, int64_t memory_positions,
                      const GenerationOptions& o, const torch::Tensor& weight) {
  const int64_t memory = physical_memory_bytes();
  if (!o.use_cache || !weight.device().is_cpu() || memory <= 0) return;
  const double bytes =
      kv_cache_bytes_lower_bound(c, rows * o.num_beams, positions, memory_positions, weight.element_size());
  if (bytes <= static_cast<double>(memory)) return;
  throw std::invalid_argument(c10::str(
      "generate: max_new_tokens (", o.max_new_tokens, ") x num_beams (", o.num_beams, "): the key-value cache of ",
      rows * o.num_beams, " x ", positions, " tokens (sequences x positions) would hold at least ",
      describe_bytes(bytes), ", more than this machine's ", describe_bytes(static_cast<double>(memory)),
      " of memory; lower max_new_tokens or num_beams"));
}

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

// Below: beam search over any model's next-token logits.
GenerationResult beam_search(const ModelConfig& c, int64_t n, const std::function<torch::Tensor(const torch::Tensor&)>& step,
                             KVCache& cache, const torch::Tensor& prompt, const torch::Tensor& prompt_mask,
                             const GenerationOptions& o);

}  // namespace

void GenerationOptions::validate() const {
  auto fail = [](const std::string& m) { throw std::invalid_argument("generate: " + m); };
  if (max_new_tokens < 0) fail(c10::str("max_new_tokens (", max_new_tokens, ") must be >= 0"));
  if (sample && !(temperature > 0.0)) fail(c10::str("temperature (", temperature, ") must be > 0 when sampling"));
  if (top_k < 0) fail(c10::str("top_k (", top_k, ") must be >= 0"));
  if (!(top_p > 0.0 && top_p <= 1.0)) fail(c10::str("top_p (", top_p, ") must be in (0, 1]"));
  if (!(repetition_penalty > 0.0)) fail(c10::str("repetition_penalty (", repetition_penalty, ") must be > 0"));
  if (num_beams < 1) fail(c10::str("num_beams (", num_beams, ") must be >= 1"));
  // Each beam holds its own KV cache and vocabulary-wide scores: bound the width before any
  // memory is asked for.
  if (num_beams > kMaxBeams) fail(c10::str("num_beams (", num_beams, ") must be at most ", kMaxBeams));
  if (!std::isfinite(length_penalty)) fail(c10::str("length_penalty (", length_penalty, ") must be a finite number"));
  if (!std::isfinite(temperature)) fail(c10::str("temperature (", temperature, ") must be a finite number"));
  for (const auto& stop : stop_sequences) {
    if (stop.empty()) fail("a stop sequence is empty (it would end generation at once)");
  }
  if (num_beams > 1 && sample) fail("beam search does not sample: set num_beams to 1 or sample to false");
}

torch::Tensor process_logits(torch::Tensor logits, const torch::Tensor& context,
                             const torch::Tensor& context_mask, const GenerationOptions& o) {
  if (o.repetition_penalty != 1.0 && context.defined() && context.numel() > 0) {
    // CTRL (Keskar et al., 2019): divide positive logits, multiply negative ones, once per
    // token present in the context (padding slots do not count).
    auto keep = context_mask.defined() ? context_mask.to(torch::kLong) : torch::ones_like(context);
    auto counts = torch::zeros(logits.sizes(), context.options()).scatter_add(1, context, keep);
    auto penalised = torch::where(logits < 0, logits * o.repetition_penalty, logits / o.repetition_penalty);
    logits = torch::where(counts > 0, penalised, logits);
  }
  if (!o.sample) return logits;
  logits = logits / o.temperature;
  const int64_t vocab = logits.size(-1);
  if (o.top_k > 0 && o.top_k < vocab) {
    auto kth = std::get<0>(logits.topk(o.top_k, -1)).narrow(-1, o.top_k - 1, 1);
    logits = logits.masked_fill(logits < kth, kNegInf);
  }
  if (o.top_p < 1.0) {
    auto [sorted, order] = logits.sort(-1, /*descending=*/true);
    auto cumulative = torch::softmax(sorted, -1).cumsum(-1);
    // Drop a token when the tokens before it already reach top_p; the first always stays.
    auto drop_sorted = (cumulative - torch::softmax(sorted, -1)) >= o.top_p;
    auto drop = torch::zeros_like(drop_sorted).scatter(-1, order, drop_sorted);
    logits = logits.masked_fill(drop, kNegInf);
  }
  return logits;
}

GenerationResult generate(GPT& model, const std::vector<std::vector<int64_t>>& prompts,
                          const GenerationOptions& o) {
  o.validate();
  const auto& c = model->config;
  check_token_options(o, c.vocab_size);
  check_prompts(prompts, c.vocab_size, "prompt");
  const auto device = model->token_embedding->weight.device();
  auto [ids, mask] = pad(prompts, c.pad_id, /*left=*/true, device);
  const int64_t n = ids.size(0);
  if (ids.size(1) + o.max_new_tokens > c.max_length()) {
    throw std::invalid_argument(c10::str("generate: prompt (", ids.size(1), " tokens) plus max_new_tokens (",
                                         o.max_new_tokens, ") exceeds max_positions (", c.max_length(), ")"));
  }
  check_cache_fits(c, n, ids.size(1) + o.max_new_tokens, 0, o, model->token_embedding->weight);
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  if (o.num_beams > 1) {
    // Every beam of a row continues the row's prompt: the same left padding, new tokens real.
    const int64_t k = o.num_beams;
    auto beam_mask = mask.repeat_interleave(k, 0);
    KVCache cache = model->make_cache();
    cache.reserve(ids.size(1) + o.max_new_tokens);
    auto step = [&](const torch::Tensor& input) {
      if (!input.defined()) return model->next_token_logits(ids.repeat_interleave(k, 0), beam_mask, &cache);
      beam_mask = torch::cat({beam_mask, torch::ones({n * k, 1}, beam_mask.options())}, 1);
      return model->next_token_logits(input, beam_mask, &cache);
    };
    auto result = beam_search(c, n, step, cache, ids.repeat_interleave(k, 0), mask.repeat_interleave(k, 0), o);
    if (was_training) model->train();
    return result;
  }
  auto gen = make_generator(o.seed);
  KVCache cache = model->make_cache();
  cache.reserve(ids.size(1) + o.max_new_tokens);

  Rows rows(n);
  GenerationResult result;
  auto sequence = ids;  // everything so far, for the repetition penalty and uncached steps
  auto logits = model->next_token_logits(ids, mask, o.use_cache ? &cache : nullptr);
  for (int64_t step = 0; step < o.max_new_tokens && !rows.all_done(); ++step) {
    check_logits(logits, step);
    auto processed = process_logits(logits.to(torch::kFloat), sequence, mask, o);
    if (o.output_scores) result.scores.push_back(processed.cpu());
    auto next = choose_tokens(processed, o, gen);
    auto next_cpu = next.cpu();
    for (int64_t r = 0; r < n; ++r) {
      if (rows.done[r]) next_cpu[r] = c.pad_id;  // finished rows idle on padding
      else rows.add(r, next_cpu[r].item<int64_t>(), o);
    }
    next = next_cpu.to(device).view({n, 1});
    sequence = torch::cat({sequence, next}, 1);
    mask = torch::cat({mask, torch::ones({n, 1}, mask.options())}, 1);
    if (rows.all_done() || step + 1 == o.max_new_tokens) break;
    logits = o.use_cache ? model->next_token_logits(next, mask, &cache)
                         : model->next_token_logits(sequence, mask);
  }
  if (was_training) model->train();
  result.tokens = std::move(rows.tokens);
  result.finish_reasons = std::move(rows.reasons);
  return result;
}

namespace {

// Beam search, in the manner of Hugging Face's BeamSearchScorer with early_stopping=False: a
// row is done once it has num_beams finished hypotheses and no running beam can beat the worst
// of them. `step` gives the next-token logits of the n * num_beams beams, (n * k, V): of the
// start (an undefined input: the decoder's start token, or the prompts) or of the beams' last
// tokens (n * k, 1) after `cache` was reordered to follow them. `prompt` (n * k, T) with its
// `prompt_mask` is what the repetition penalty counts besides the new tokens (decoder-only
// models), undefined for none.
GenerationResult beam_search(const ModelConfig& c, int64_t n, const std::function<torch::Tensor(const torch::Tensor&)>& step,
                             KVCache& cache, const torch::Tensor& prompt, const torch::Tensor& prompt_mask,
                             const GenerationOptions& o) {
  const int64_t k = o.num_beams, vocab = c.vocab_size;
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

  torch::Tensor input;  // the start
  for (int64_t t = 0; t < o.max_new_tokens; ++t) {
    auto logits = step(input).to(torch::kFloat);
    const auto device = logits.device();
    check_logits(logits, t);
    torch::Tensor context = prompt, context_mask = prompt_mask;
    if (o.repetition_penalty != 1.0 && t > 0) {
      std::vector<int64_t> flat;
      for (const auto& b : beams) flat.insert(flat.end(), b.begin(), b.end());
      const auto generated = torch::tensor(flat, torch::kLong).view({n * k, t}).to(device);
      context = prompt.defined() ? torch::cat({prompt, generated}, 1) : generated;
      if (prompt_mask.defined()) context_mask = torch::cat({prompt_mask, torch::ones_like(generated)}, 1);
    }
    auto logprobs = torch::log_softmax(process_logits(logits, context, context_mask, o), -1).to(torch::kDouble).cpu();
    auto total = (scores.view({n * k, 1}) + logprobs).view({n, k * vocab});
    auto [top_scores, top_ids] = total.topk(2 * k, -1);
    std::vector<int64_t> next_tokens(n * k, c.pad_id), source_beams(n * k, 0);
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
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    cache.reorder(torch::tensor(source_beams, torch::kLong).to(device));
    input = torch::tensor(next_tokens, torch::kLong).view({n * k, 1}).to(device);
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

}  // namespace

GenerationResult generate(EncoderDecoder& model, const std::vector<std::vector<int64_t>>& sources,
                          const GenerationOptions& o) {
  o.validate();
  const auto& c = model->config;
  check_token_options(o, c.vocab_size);
  check_prompts(sources, c.vocab_size, "source");
  // The decoder reads its start token and all but the last new token.
  if (o.max_new_tokens > c.max_length()) {
    throw std::invalid_argument(c10::str("generate: max_new_tokens (", o.max_new_tokens,
                                         ") exceeds max_positions (", c.max_length(), ")"));
  }
  const auto device = model->token_embedding->weight.device();
  auto [ids, mask] = pad(sources, c.pad_id, /*left=*/false, device);
  check_cache_fits(c, ids.size(0), o.max_new_tokens + 1, ids.size(1), o, model->token_embedding->weight);
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  auto memory = model->encode(ids, mask);
  GenerationResult result;
  if (o.num_beams > 1) {
    const int64_t n = ids.size(0), k = o.num_beams;
    auto mem = memory.repeat_interleave(k, 0);
    auto mem_mask = mask.repeat_interleave(k, 0);
    KVCache cache = model->make_cache();
    cache.reserve(o.max_new_tokens + 1);
    auto step = [&](const torch::Tensor& input) {
      const auto tokens = input.defined() ? input : torch::full({n * k, 1}, c.decoder_start_id, torch::kLong).to(device);
      return model->decode(tokens, mem, mem_mask, &cache).select(1, -1);
    };
    result = beam_search(c, n, step, cache, {}, {}, o);
  } else {
    const int64_t n = ids.size(0);
    auto gen = make_generator(o.seed);
    KVCache cache = model->make_cache();
    cache.reserve(o.max_new_tokens + 1);
    Rows rows(n);
    auto sequence = torch::full({n, 1}, c.decoder_start_id, torch::kLong).to(device);
    auto logits = model->decode(sequence, memory, mask, o.use_cache ? &cache : nullptr).select(1, -1);
    for (int64_t step = 0; step < o.max_new_tokens && !rows.all_done(); ++step) {
      check_logits(logits, step);
      auto processed = process_logits(logits.to(torch::kFloat), sequence, {}, o);
      if (o.output_scores) result.scores.push_back(processed.cpu());
      auto next_cpu = choose_tokens(processed, o, gen).cpu();
      for (int64_t r = 0; r < n; ++r) {
        if (rows.done[r]) next_cpu[r] = c.pad_id;
        else rows.add(r, next_cpu[r].item<int64_t>(), o);
      }
      auto next = next_cpu.to(device).view({n, 1});
      sequence = torch::cat({sequence, next}, 1);
      if (rows.all_done() || step + 1 == o.max_new_tokens) break;
      logits = o.use_cache ? model->decode(next, memory, mask, &cache).select(1, -1)
                           : model->decode(sequence, memory, mask).select(1, -1);
    }
    result.tokens = std::move(rows.tokens);
    result.finish_reasons = std::move(rows.reasons);
  }
  if (was_training) model->train();
  return result;
}

}  // namespace zoo
