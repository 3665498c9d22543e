#include "models/generation.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "core/op_profile.h"
#include "core/runtime.h"
#include "core/strings.h"
#include "models/decoding.h"
#include "models/parameter_count.h"

namespace zoo {

torch::Tensor choose_tokens(const torch::Tensor& logits, const GenerationOptions& o, at::Generator& gen) {
  if (!o.sample) return logits.argmax(-1);
  // Drawn on the host from the CPU generator: the same tokens on every device.
  auto probs = read_to_host(torch::softmax(logits.to(torch::kFloat), -1));
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
  int64_t longest = 0;
  for (const auto& prompt : prompts) longest = std::max<int64_t>(longest, prompt.size());
  if (longest + o.max_new_tokens > c.max_length()) {
    throw std::invalid_argument(c10::str("generate: prompt (", longest, " tokens) plus max_new_tokens (",
                                         o.max_new_tokens, ") exceeds max_positions (", c.max_length(), ")"));
  }
  const auto n = static_cast<int64_t>(prompts.size());
  check_cache_fits(c, n, longest + o.max_new_tokens, 0, o, model->token_embedding->weight);
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  // Every beam of a prompt continues it: the same left padding, new tokens real.
  const bool beams = o.num_beams > 1;
  const auto decoding = gpt_decoding(model, prompts, o.num_beams, o.use_cache || beams, longest + o.max_new_tokens);
  auto result = beams ? beam_search(*decoding, o, c.vocab_size, c.pad_id) : decode_rows(*decoding, o, c.pad_id);
  if (was_training) model->train();
  return result;
}

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
  int64_t longest = 0;
  for (const auto& source : sources) longest = std::max<int64_t>(longest, source.size());
  check_cache_fits(c, static_cast<int64_t>(sources.size()), o.max_new_tokens + 1, longest, o,
                   model->token_embedding->weight);
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const bool beams = o.num_beams > 1;
  const auto decoding = encoder_decoder_decoding(model, sources, o.num_beams, o.use_cache || beams, o.max_new_tokens + 1);
  auto result = beams ? beam_search(*decoding, o, c.vocab_size, c.pad_id) : decode_rows(*decoding, o, c.pad_id);
  if (was_training) model->train();
  return result;
}

}  // namespace zoo
