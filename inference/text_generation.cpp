#include "inference/text_generation.h"

#include <stdexcept>

#include <torch/torch.h>

#include "data/chat_format.h"
#include "inference/prompt_rules.h"

namespace zoo {
namespace {

const std::string kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD: a byte piece of a split character

int64_t special(const std::optional<int64_t>& id, const char* role, const std::string& what) {
  if (!id) throw std::invalid_argument(what + " needs a " + role + " token, and the tokenizer has none");
  return *id;
}

// A checkpoint whose tokenizer has more pieces than its model's vocab_size gives ids the
// embedding has no row for: named here, before LibTorch's "index out of range in self".
void check_in_vocabulary(const std::vector<int64_t>& ids, const Tokenizer& tokenizer, int64_t vocab_size) {
  for (int64_t id : ids) {
    if (id >= 0 && id < vocab_size) continue;
    const std::string piece = id >= 0 && id < tokenizer.vocab_size() ? " ('" + tokenizer.piece(id) + "')" : "";
    throw std::invalid_argument("prompt: token id " + std::to_string(id) + piece +
                                " is past the model's vocabulary (vocab_size " + std::to_string(vocab_size) +
                                "; the tokenizer has " + std::to_string(tokenizer.vocab_size()) + " pieces)");
  }
}

// [CLS] prompt [SEP], with [MASK] written in the prompt turned into the mask token.
std::vector<int64_t> bert_input(const Bert& model, const Tokenizer& tokenizer, const std::string& prompt) {
  std::vector<int64_t> ids = {special(tokenizer.special().cls, "cls", "bert")};
  for (int64_t id : tokenizer.encode(prompt)) ids.push_back(id);
  ids.push_back(special(tokenizer.special().sep, "sep", "bert"));
  check_in_vocabulary(ids, tokenizer, model->config.vocab_size);
  return ids;
}

torch::Tensor bert_logits(Bert& model, const std::vector<int64_t>& ids) {
  const auto device = model->token_embedding->weight.device();
  model->eval();
  torch::NoGradGuard no_grad;
  return model->forward(torch::tensor(ids, torch::kLong).unsqueeze(0).to(device)).logits;
}

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, std::vector<int64_t> context)
    : tokenizer_(tokenizer), ids_(std::move(context)), printed_(tokenizer.decode(ids_)) {}

std::string StreamDecoder::add(int64_t token) {
  ids_.push_back(token);
  const std::string text = tokenizer_.decode(ids_);
  const bool split_character = text.size() >= 3 && text.compare(text.size() - 3, 3, kReplacementCharacter) == 0;
  // Text already printed cannot change: wait while the decoding does not extend it.
  if (split_character || text.size() <= printed_.size() || text.compare(0, printed_.size(), printed_) != 0) return "";
  std::string fresh = text.substr(printed_.size());
  printed_ = text;
  return fresh;
}

void check_utf8(const std::string& text, const std::string& what) {
  if (const int64_t bad = invalid_utf8_offset(text); bad >= 0) {
    throw std::invalid_argument(what + ": invalid UTF-8 at byte offset " + std::to_string(bad));
  }
}

TextGeneration generate_text(Model& model, const Tokenizer& tokenizer, const std::string& prompt,
                             GenerationOptions options, const std::vector<std::string>& stop_texts,
                             const std::function<void(const std::string&)>& on_text, bool add_special_tokens) {
  check_utf8(prompt, "prompt");
  TextGeneration out;
  for (const auto& stop : stop_texts) {
    check_utf8(stop, "stop text");
    auto ids = tokenizer.encode(stop);
    if (ids.empty()) throw std::invalid_argument("stop text '" + stop + "' is empty: it would end generation at once");
    options.stop_sequences.push_back(std::move(ids));
  }
  // As the tokenizer's own post-processing frames a sequence (LLaMA: <s> first; T5: </s> last;
  // zoo's and GPT-2's add nothing).
  std::vector<int64_t> ids = tokenizer.encode(prompt, add_special_tokens);
  const auto& specials = tokenizer.special();
  if (options.eos_ids.empty() && specials.eos) options.eos_ids = {*specials.eos};
  const auto& config = model.config;
  GenerationResult result;
  switch (config.family) {
    case Family::kGpt: {
      ids = frame_prompt(std::move(ids), /*encoder_decoder=*/false, specials, "prompt");
      check_in_vocabulary(ids, tokenizer, config.vocab_size);
      const ContextLimits limits{false, 0, config.max_length()};
      const int64_t room = new_token_room(static_cast<int64_t>(ids.size()), limits);
      if (room < 1) throw std::invalid_argument("prompt: " + no_room_message(static_cast<int64_t>(ids.size()), limits));
      if (options.max_new_tokens > room) {
        out.note = "max_new_tokens lowered to " + std::to_string(room) + " (max_positions " +
                   std::to_string(config.max_length()) + ")";
        options.max_new_tokens = room;
      }
      StreamDecoder stream(tokenizer, ids);
      if (on_text) options.on_token = [&](int64_t, int64_t token) { on_text(stream.add(token)); };
      try {
        result = generate(model.gpt, {ids}, options);
      } catch (const std::invalid_argument& e) {
        if (out.note.empty()) throw;
        throw std::invalid_argument(std::string(e.what()) + " (" + out.note + ")");  // the options as lowered
      }
      // Beam search chooses its text at the end (on_token is not called): streamed whole then.
      if (on_text && options.num_beams > 1) {
        for (int64_t token : result.tokens[0]) on_text(stream.add(token));
      }
      break;
    }
    case Family::kT5:
    case Family::kTransformer: {
      ids = frame_prompt(std::move(ids), /*encoder_decoder=*/true, specials, "prompt");
      check_in_vocabulary(ids, tokenizer, config.vocab_size);

      StreamDecoder stream(tokenizer, {});
      if (on_text && options.num_beams == 1) {
        options.on_token = [&](int64_t, int64_t token) { on_text(stream.add(token)); };
      }
      result = generate(model.seq2seq, {ids}, options);
      if (on_text && options.num_beams > 1) on_text(tokenizer.decode(result.tokens[0]));
      break;
    }
    case Family::kBert: throw std::invalid_argument("a bert model does not generate text: fill [MASK] or classify");
  }
  out.tokens = result.tokens[0];
  out.finish_reason = result.finish_reasons[0];
  return out;
}

std::vector<MaskPrediction> fill_masks(Bert& model, const Tokenizer& tokenizer, const std::string& prompt,
                                       int64_t top_k) {
  check_utf8(prompt, "prompt");
  const auto& head = model->config.head;
  if (head != BertHead::kMaskedLM && head != BertHead::kPretraining) {
    throw std::invalid_argument("a bert model without an mlm or pretraining head has no [MASK] predictions");
  }
  const auto ids = bert_input(model, tokenizer, prompt);
  const auto logits = bert_logits(model, ids);
  std::vector<MaskPrediction> predictions;
  for (size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] != special(tokenizer.special().mask, "mask", "filling [MASK]")) continue;
    const auto probs = logits[0][static_cast<int64_t>(t)].softmax(-1).cpu();
    const auto [values, indices] = probs.topk(std::min<int64_t>(top_k, probs.size(0)));
    MaskPrediction p;
    p.position = static_cast<int64_t>(t);
    for (int64_t k = 0; k < values.size(0); ++k) {
      p.top.emplace_back(tokenizer.piece(indices[k].item<int64_t>()), values[k].item<double>());
    }
    predictions.push_back(std::move(p));
  }
  if (predictions.empty()) throw std::invalid_argument("the prompt has no [MASK] for a masked-LM model to fill");
  return predictions;
}

std::vector<double> classify(Bert& model, const Tokenizer& tokenizer, const std::string& prompt) {
  check_utf8(prompt, "prompt");
  if (model->config.head != BertHead::kSequenceClassification) {
    throw std::invalid_argument("classify needs a bert model with a sequence_classification head");
  }
  const auto probs = bert_logits(model, bert_input(model, tokenizer, prompt))[0].softmax(-1).to(torch::kDouble).cpu().contiguous();
  return std::vector<double>(probs.data_ptr<double>(), probs.data_ptr<double>() + probs.numel());
}

std::vector<std::vector<float>> sentence_embeddings(Bert& model, const Tokenizer& tokenizer,
                                                    const std::vector<std::string>& texts, int64_t* tokens) {
  std::vector<std::vector<float>> out;
  int64_t count = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string what = "input[" + std::to_string(i) + "]";
    check_utf8(texts[i], what);
    const auto ids = bert_input(model, tokenizer, texts[i]);
    if (static_cast<int64_t>(ids.size()) > model->config.max_length()) {
      throw std::invalid_argument(what + ": " + std::to_string(ids.size()) + " tokens, more than max_positions (" +
                                  std::to_string(model->config.max_length()) + ")");
    }
    count += static_cast<int64_t>(ids.size());
    const auto device = model->token_embedding->weight.device();
    model->eval();
    torch::NoGradGuard no_grad;
    const auto hidden = model->forward(torch::tensor(ids, torch::kLong).unsqueeze(0).to(device)).sequence_output[0];
    auto pooled = hidden.to(torch::kDouble).mean(0);
    pooled = (pooled / pooled.norm().clamp_min(1e-12)).to(torch::kFloat).cpu().contiguous();
    out.emplace_back(pooled.data_ptr<float>(), pooled.data_ptr<float>() + pooled.numel());
  }
  if (tokens != nullptr) *tokens = count;
  return out;
}

std::string chat_prompt(const Tokenizer& tokenizer, const std::string& message, const std::string& tokenizer_name) {
  return ChatFormat(tokenizer, tokenizer_name).render({{"user", message}}, /*add_generation_prompt=*/true);
}

}  // namespace zoo
