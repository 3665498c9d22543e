#include "train/task.h"

#include <algorithm>
#include <filesystem>
#include <ostream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/files.h"
#include "data/corpus.h"
#include "kernels/linear_cross_entropy.h"
#include "kernels/ring_attention.h"
#include "layers/mixture_of_experts.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
namespace F = torch::nn::functional;

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels, double label_smoothing) {
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat), labels.reshape({-1}),
                          F::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex).label_smoothing(label_smoothing));
}

// How many elements of `host` differ from `value`. A batch is built on the host: counted there
// from its own memory, with no ATen op, a count costs the device nothing to wait on (a tensor on
// a device is counted there and read back).
int64_t count_not_equal(const torch::Tensor& host, int64_t value) {
  const auto count = [&](const auto* data) {
    return static_cast<int64_t>(std::count_if(data, data + host.numel(), [&](auto x) { return static_cast<int64_t>(x) != value; }));
  };
  if (host.is_cpu() && host.is_contiguous()) {
    if (host.scalar_type() == torch::kLong) return count(host.data_ptr<int64_t>());
    if (host.scalar_type() == torch::kInt) return count(host.data_ptr<int32_t>());
    if (host.scalar_type() == torch::kBool) return count(host.data_ptr<bool>());
  }
  torch::NoGradGuard no_grad;
  return host.ne(value).sum().item<int64_t>();
}

// The targets among `host_labels` (the batch's, before they moved to the device); with accuracy
// (evaluation), the argmax hits among them too, from `logits` against the device's `labels`.
void count_targets(const torch::Tensor& logits, const torch::Tensor& labels, const torch::Tensor& host_labels,
                   bool with_accuracy, LossOutput& out) {
  out.targets += count_not_equal(host_labels, kIgnoreIndex);
  if (!with_accuracy) return;
  torch::NoGradGuard no_grad;
  out.correct += (logits.argmax(-1).eq(labels) & labels.ne(kIgnoreIndex)).sum().item<int64_t>();
}

torch::Tensor on(const torch::Tensor& t, const torch::Device& device) {
  return t.defined() ? t.to(device, /*non_blocking=*/true) : t;
}

bool has_token_files(const std::string& dir) { return fs::exists(fs::path(dir) / "train.tokens"); }

// Causal LM training: the head and the loss fused in chunks, never the whole (B T, V) logits;
// for a mixture of experts, plus router_aux_loss_coef times the routers' load-balancing loss over
// every sparse layer's real tokens (transformers' loss with output_router_logits).
void fused_causal_lm_loss(Model& model, const torch::Tensor& hidden, const torch::Tensor& labels,
                          const torch::Tensor& host_labels, double label_smoothing, LossOutput& out,
                          const std::vector<torch::Tensor>& router_logits = {},
                          const torch::Tensor& token_mask = {}) {
  count_targets({}, labels, host_labels, false, out);
  out.loss = linear_cross_entropy(hidden.reshape({-1, hidden.size(-1)}),
                                  model.gpt->head_weight(loss_product_type(hidden)),
                                  labels.reshape({-1}), label_smoothing, kIgnoreIndex, /*chunk_rows=*/0,
                                  model.config.logit_softcap);
  const auto& c = model.config;
  if (router_logits.empty() || c.router_aux_loss_coef == 0.0) return;
  out.router_loss = load_balancing_loss(router_logits, c.experts_per_token, token_mask);
  out.loss = out.loss + c.router_aux_loss_coef * out.router_loss;
}

// Causal LM evaluation: the loss and the argmax accuracy from the head in blocks of rows, never
// the whole (B T, V) logits (3.2 GB for one 16k-token sequence of GPT-2's vocabulary).
void chunked_causal_lm_evaluation(Model& model, const torch::Tensor& hidden, const torch::Tensor& labels,
                                  double label_smoothing, LossOutput& out) {
  torch::NoGradGuard no_grad;
  constexpr int64_t kRows = 1024;
  const auto rows = hidden.reshape({-1, hidden.size(-1)});
  const auto targets = labels.reshape({-1});
  double loss_sum = 0;
  for (int64_t start = 0; start < rows.size(0); start += kRows) {
    const int64_t n = std::min(kRows, rows.size(0) - start);
    const auto logits = model.gpt->logits(rows.narrow(0, start, n));  // the model's own head, LoRA included
    const auto block = targets.narrow(0, start, n);
    count_targets(logits, block, block, true, out);
    loss_sum += F::cross_entropy(logits.to(torch::kFloat), block,
                                 F::CrossEntropyFuncOptions()
                                     .ignore_index(kIgnoreIndex)
                                     .label_smoothing(label_smoothing)
                                     .reduction(torch::kSum))
                    .item<double>();
  }
  out.loss = torch::tensor(out.targets > 0 ? loss_sum / static_cast<double>(out.targets) : 0.0, torch::kDouble);
}

// `x` (B, T) with `value` appended up to `length` columns (undefined stays undefined).
torch::Tensor padded_to(const torch::Tensor& x, int64_t length, int64_t value) {
  if (!x.defined() || x.size(1) == length) return x;
  return torch::cat({x, torch::full({x.size(0), length - x.size(1)}, value, x.options())}, 1);
}

// A batch's sequences right-padded to a multiple of the ring's 2N chunks (encoders' and
// seq2seq batches are as long as their longest example): padding is masked out of every key and
// carries no target, so the loss is the unpadded batch's.
Batch padded_for_ring(const Batch& batch, int64_t ranks) {
  const auto round_up = [&](int64_t t) { return (t + 2 * ranks - 1) / (2 * ranks) * (2 * ranks); };
  Batch b = batch;
  const int64_t t = round_up(batch.input_ids.size(1));
  if (t != batch.input_ids.size(1)) {
    const auto mask = batch.attention_mask.defined() ? batch.attention_mask : torch::ones_like(batch.input_ids);
    b.attention_mask = padded_to(mask, t, 0);
    b.input_ids = padded_to(batch.input_ids, t, 0);
    b.token_type_ids = padded_to(batch.token_type_ids, t, 0);
    if (!batch.decoder_input_ids.defined()) b.labels = padded_to(batch.labels, t, kIgnoreIndex);
  }
  if (batch.decoder_input_ids.defined()) {
    const int64_t td = round_up(batch.decoder_input_ids.size(1));
    b.decoder_input_ids = padded_to(batch.decoder_input_ids, td, 0);
    b.labels = padded_to(batch.labels, td, kIgnoreIndex);
  }
  return b;
}

// Context parallelism: this rank's zigzag share of every sequence (and of the decoder's, for
// encoder-decoders) at its global positions, around the ring. The loss is the mean over this
// rank's targets; the trainer weighs the ranks by their targets.
LossOutput ring_loss(Model& model, const Batch& unpadded, Objective objective, double label_smoothing,
                     const torch::Device& device, bool with_accuracy, const std::shared_ptr<RingExchange>& ring) {
  const int64_t ranks = ring->ranks(), rank = ring->rank();
  const Batch batch = padded_for_ring(unpadded, ranks);
  const auto layout = ZigzagLayout::of(batch.input_ids.size(1), ranks);
  const auto local = [&](const torch::Tensor& x, const ZigzagLayout& cut) {
    return x.defined() ? zigzag_split(on(x, device), 1, cut, rank) : x;
  };
  const auto positions = [&](const ZigzagLayout& cut) {
    return zigzag_positions(cut, rank).to(device).unsqueeze(0).expand({batch.input_ids.size(0), cut.local_tokens()});
  };
  const auto ids = local(batch.input_ids, layout);
  const auto mask = on(batch.attention_mask, device);  // the whole sequence's: every key's padding
  LossOutput out;
  const auto host_local = [&](const torch::Tensor& x, const ZigzagLayout& cut) {
    return x.defined() ? zigzag_split(x, 1, cut, rank).contiguous() : x;
  };
  out.tokens = batch.attention_mask.defined() ? count_not_equal(host_local(batch.attention_mask, layout), 0) : ids.numel();
  torch::Tensor logits, labels, host_labels;
  switch (objective) {
    case Objective::kCausalLM: {
      labels = local(batch.labels, layout);
      host_labels = host_local(batch.labels, layout);
      std::vector<torch::Tensor> router_logits;
      const auto hidden = model.gpt->hidden_states(ids, {}, nullptr, positions(layout), ring, &router_logits);
      if (with_accuracy) {
        chunked_causal_lm_evaluation(model, hidden, labels, label_smoothing, out);
      } else {
        fused_causal_lm_loss(model, hidden, labels, host_labels, label_smoothing, out, router_logits,
                             mask.defined() ? local(mask, layout) : torch::Tensor());
      }
      return out;
    }
    case Objective::kMaskedLM:
      labels = local(batch.labels, layout);
      host_labels = host_local(batch.labels, layout);
      logits = model.bert->forward(ids, mask, local(batch.token_type_ids, layout), positions(layout), ring).logits;
      TORCH_CHECK(logits.defined() && logits.dim() == 3, "masked LM needs a bert model with head mlm or pretraining");
      break;
    case Objective::kSpanCorruption:
    case Objective::kSeq2Seq: {
      const auto decoder = ZigzagLayout::of(batch.decoder_input_ids.size(1), ranks);
      labels = local(batch.labels, decoder);
      host_labels = host_local(batch.labels, decoder);
      const auto memory = model.seq2seq->encode(ids, mask, positions(layout), ring);
      logits = model.seq2seq->decode(local(batch.decoder_input_ids, decoder), memory, mask, nullptr, {},
                                     positions(decoder), ring);
      break;
    }
    case Objective::kClassification:
    case Objective::kAuto:
      TORCH_CHECK(false, "context parallelism trains causal LM, masked LM and seq2seq objectives, not ",
                  to_string(objective));
  }
  count_targets(logits, labels, host_labels, with_accuracy, out);
  // A rank whose share holds no target still runs its backward: the others' gradients pass it.
  out.loss = out.targets > 0 ? cross_entropy(logits, labels, label_smoothing) : logits.sum() * 0.0;
  return out;
}

}  // namespace

LossOutput compute_loss(Model& model, const Batch& batch, Objective objective, const torch::Device& device,
                        const LossOptions& options) {
  const double label_smoothing = options.label_smoothing;
  const bool with_accuracy = options.with_accuracy;
  if (options.ring) return ring_loss(model, batch, objective, label_smoothing, device, with_accuracy, options.ring);
  LossOutput out;
  const auto ids = on(batch.input_ids, device);
  const auto mask = on(batch.attention_mask, device);
  const auto labels = on(batch.labels, device);
  out.tokens = batch.attention_mask.defined() ? count_not_equal(batch.attention_mask, 0) : ids.numel();
  torch::Tensor logits, extra_loss;
  switch (objective) {
    case Objective::kCausalLM:
      // Right padding only ever follows the real tokens, which a causal model cannot see.
      if (with_accuracy) {
        chunked_causal_lm_evaluation(model, model.gpt->hidden_states(ids), labels, label_smoothing, out);
      } else {
        std::vector<torch::Tensor> router_logits;
        const auto hidden = model.gpt->hidden_states(ids, {}, nullptr, {}, nullptr, &router_logits);
        fused_causal_lm_loss(model, hidden, labels, batch.labels, label_smoothing, out, router_logits, mask);
      }
      return out;
    case Objective::kMaskedLM:
    case Objective::kClassification: {
      const auto result = model.bert->forward(ids, mask, on(batch.token_type_ids, device));
      logits = result.logits;
      const bool mlm = objective == Objective::kMaskedLM;
      TORCH_CHECK(logits.defined() && logits.dim() == (mlm ? 3 : 2), mlm
                      ? "masked LM needs a bert model with head mlm or pretraining"
                      : "classification needs a bert model with head sequence_classification");
      if (mlm && result.nsp_logits.defined() && batch.next_sentence_labels.defined()) {
        extra_loss = cross_entropy(result.nsp_logits, on(batch.next_sentence_labels, device), 0.0);
      }
      break;
    }
    case Objective::kSpanCorruption:
    case Objective::kSeq2Seq:
      logits = model.seq2seq->forward(ids, mask, on(batch.decoder_input_ids, device));
      break;
    case Objective::kAuto: TORCH_CHECK(false, "compute_loss: resolve the objective first");
  }
  count_targets(logits, labels, batch.labels, with_accuracy, out);
  // A batch without targets (nothing masked) contributes nothing, rather than 0/0.
  out.loss = out.targets > 0 ? cross_entropy(logits, labels, label_smoothing) : logits.sum() * 0.0;
  if (extra_loss.defined()) out.loss = out.loss + extra_loss;
  return out;
}

void prepare_token_files(const std::vector<std::string>& inputs, const std::vector<std::string>& val_inputs,
                         double val_fraction, uint64_t seed, const Tokenizer& tokenizer,
                         const std::string& out_dir, std::ostream& log) {
  const fs::path dir(out_dir);
  // What the files were made from: every input file (path, size, time), the split and the
  // tokenizer. Reused only when all of it is the same.
  nlohmann::json sources = {{"val_fraction", val_fraction}, {"seed", seed}, {"tokenizer", tokenizer.hash_hex()}};
  for (const auto* group : {&inputs, &val_inputs}) {
    nlohmann::json files = nlohmann::json::array();
    for (const auto& f : group->empty() ? std::vector<std::string>{} : list_text_files(*group)) {
      files.push_back({f, fs::file_size(f), fs::last_write_time(f).time_since_epoch().count()});
    }
    sources[group == &inputs ? "train" : "val"] = files;
  }
  const fs::path manifest = dir / "sources.json";
  if (has_token_files(out_dir) && fs::exists(dir / "val.tokens") && fs::exists(manifest)) {
    try {
      if (nlohmann::json::parse(read_file(manifest.string())) == sources) {
        TokenFile::open((dir / "train.tokens").string(), &tokenizer);
        TokenFile::open((dir / "val.tokens").string(), &tokenizer);
        log << "reusing the token files in " << out_dir << "\n";
        return;
      }
    } catch (const std::exception& e) {
      log << "re-tokenizing: " << e.what() << "\n";
    }
  }
  TokenizeOptions options;
  options.seed = seed;
  options.val_fraction = val_inputs.empty() ? val_fraction : 0.0;
  log << "tokenizing the training text into " << out_dir << "...\n";
  auto stats = tokenize_to_files(inputs, tokenizer, out_dir, options);
  if (!val_inputs.empty()) {
    const std::string staging = (dir / "val-staging").string();
    options.val_fraction = 0.0;
    const auto val = tokenize_to_files(val_inputs, tokenizer, staging, options);
    fs::rename(fs::path(staging) / "train.tokens", dir / "val.tokens");
    fs::remove_all(staging);
    stats.val_documents = val.train_documents, stats.val_tokens = val.train_tokens;
  }
  write_file_atomically(manifest.string(), sources.dump(2) + "\n");
  log << "  train: " << stats.train_documents << " documents, " << stats.train_tokens << " tokens; val: "
      << stats.val_documents << " documents, " << stats.val_tokens << " tokens\n";
}

namespace {

// The batch of each dataset kind, in one spelling.
Batch batch_of(const CausalLMDataset& d, const std::vector<int64_t>& indices, int64_t) { return d.batch(indices); }
Batch batch_of(const MaskedLMDataset& d, const std::vector<int64_t>& indices, int64_t epoch) {
  return d.batch(indices, epoch);
}
Batch batch_of(const SpanCorruptionDataset& d, const std::vector<int64_t>& indices, int64_t epoch) {
  return d.batch(indices, epoch);
}
Batch batch_of(const ClassificationDataset& d, const std::vector<int64_t>& indices, int64_t) { return d.batch(indices); }
Batch batch_of(const Seq2SeqDataset& d, const std::vector<int64_t>& indices, int64_t) { return d.batch(indices); }
Batch batch_of(const InstructionDataset& d, const std::vector<int64_t>& indices, int64_t) { return d.batch(indices); }

// Training and (maybe) validation datasets of one kind, with what they read from.
template <typename Dataset>
class SplitData : public TaskData {
 public:
  SplitData(Objective objective, std::unique_ptr<Dataset> train, std::unique_ptr<Dataset> val,
            std::vector<std::unique_ptr<TokenFile>> files, LabelSet labels, BatchTokens tokens, std::string description)
      : objective_(objective), train_(std::move(train)), val_(std::move(val)), files_(std::move(files)),
        labels_(std::move(labels)), tokens_(std::move(tokens)), description_(std::move(description)) {}

  Objective objective() const override { return objective_; }
  int64_t train_size() const override { return train_->size(); }
  int64_t val_size() const override { return val_ ? val_->size() : 0; }
  Batch train_batch(const std::vector<int64_t>& indices, int64_t epoch) const override {
    return batch_of(*train_, indices, epoch);
  }
  Batch val_batch(const std::vector<int64_t>& indices) const override { return batch_of(*val_, indices, 0); }
  const LabelSet* labels() const override { return objective_ == Objective::kClassification ? &labels_ : nullptr; }
  const BatchTokens& tokens() const override { return tokens_; }
  std::string describe() const override { return description_; }

 private:
  Objective objective_;
  std::unique_ptr<Dataset> train_, val_;
  std::vector<std::unique_ptr<TokenFile>> files_;  // token files the datasets read (kept open)
  LabelSet labels_;
  BatchTokens tokens_;
  std::string description_;
};

std::unique_ptr<TaskData> example_data(const RunConfig& config, Objective objective, const Tokenizer& tokenizer,
                                       const LabelSet* labels, std::ostream& log) {
  if (config.data.size() != 1 || !is_example_file(config.data)) {
    throw std::runtime_error(to_string(objective) + " needs data: one training file (.csv, .tsv or .jsonl)" +
                             (config.data.empty() ? std::string() : ", got " + config.data[0]));
  }
  if (config.val_data.size() > 1) throw std::runtime_error("val_data: one validation file, got several");
  const std::string train_file = config.data[0];
  const std::string val_file = config.val_data.empty() ? "" : config.val_data[0];
  const int64_t block = config.resolved_block_size();
  auto describe = [&](int64_t train, int64_t val) {
    return to_string(objective) + " on " + train_file + " (" + std::to_string(train) + " examples), validation " +
           (val_file.empty() ? "none" : val_file) + " (" + std::to_string(val) + ")";
  };
  switch (objective) {
    case Objective::kClassification: {
      const auto train = read_classification(train_file);
      LabelSet set = labels != nullptr ? *labels : LabelSet::from_examples(train);
      auto train_set = std::make_unique<ClassificationDataset>(train, tokenizer, set, block, train_file);
      std::unique_ptr<ClassificationDataset> val_set;
      if (!val_file.empty()) {
        val_set = std::make_unique<ClassificationDataset>(read_classification(val_file), tokenizer, set, block, val_file);
      }
      const std::string description = describe(train_set->size(), val_set ? val_set->size() : 0);
      return std::make_unique<SplitData<ClassificationDataset>>(objective, std::move(train_set), std::move(val_set),
                                                                std::vector<std::unique_ptr<TokenFile>>{}, set,
                                                                BatchTokens::of(tokenizer), description);
    }
    case Objective::kSeq2Seq: {
      auto train_set = std::make_unique<Seq2SeqDataset>(read_seq2seq(train_file), tokenizer, block, config.target_length,
                                                       config.model_config.decoder_start_id);
      std::unique_ptr<Seq2SeqDataset> val_set;
      if (!val_file.empty()) {
        val_set = std::make_unique<Seq2SeqDataset>(read_seq2seq(val_file), tokenizer, block, config.target_length,
                                                 config.model_config.decoder_start_id);
      }
      const std::string description = describe(train_set->size(), val_set ? val_set->size() : 0);
      return std::make_unique<SplitData<Seq2SeqDataset>>(objective, std::move(train_set), std::move(val_set),
                                                         std::vector<std::unique_ptr<TokenFile>>{}, LabelSet(),
                                                         BatchTokens::of(tokenizer), description);
    }
    case Objective::kCausalLM: {
      // Instruction tuning: prompt/completion examples, the loss on the completion; or
      // conversations through the tokenizer's chat template, the loss on the assistant's turns.
      const std::string tokenizer_name = !config.tokenizer.empty() ? config.tokenizer
                                         : !config.init_from.empty() ? config.init_from
                                                                     : "the run's tokenizer";
      auto read = [&](const std::string& file) {
        auto set = std::make_unique<InstructionDataset>(read_instructions(file), tokenizer, block, file, tokenizer_name);
        if (set->skipped() > 0) {
          log << file << ": " << set->skipped() << " examples left out: their prompt fills block_size " << block
              << " (nothing to learn from fits)\n";
        }
        return set;
      };
      auto train_set = read(train_file);
      std::unique_ptr<InstructionDataset> val_set = val_file.empty() ? nullptr : read(val_file);
      const std::string description = describe(train_set->size(), val_set ? val_set->size() : 0);
      return std::make_unique<SplitData<InstructionDataset>>(objective, std::move(train_set), std::move(val_set),
                                                             std::vector<std::unique_ptr<TokenFile>>{}, LabelSet(),
                                                             BatchTokens::of(tokenizer), description);
    }
    case Objective::kAuto:
    case Objective::kMaskedLM:
    case Objective::kSpanCorruption: break;
  }
  throw std::logic_error(to_string(objective) + " does not read example files");
}

// Token objectives: a token directory as it is, else text tokenized into the run.
std::unique_ptr<TaskData> token_data(const RunConfig& config, Objective objective, const Tokenizer& tokenizer,
                                     const std::string& run_dir, std::ostream& log) {
  std::string dir;
  if (config.data.size() == 1 && fs::is_directory(config.data[0]) && has_token_files(config.data[0])) {
    dir = config.data[0];
  } else {
    std::vector<std::string> inputs = config.data;
    if (inputs.empty()) {
      inputs = {ensure_default_corpus()};
      log << "data: the default corpus " << inputs[0] << "\n";
    }
    dir = (fs::path(run_dir) / "data").string();
    prepare_token_files(inputs, config.val_data, config.val_fraction, config.seed, tokenizer, dir, log);
  }
  std::vector<std::unique_ptr<TokenFile>> files;
  files.push_back(std::make_unique<TokenFile>(TokenFile::open((fs::path(dir) / "train.tokens").string(), &tokenizer)));
  const TokenFile& train_tokens = *files.back();
  const TokenFile* val_tokens = nullptr;
  const auto val_path = fs::path(dir) / "val.tokens";
  if (fs::exists(val_path)) {
    files.push_back(std::make_unique<TokenFile>(TokenFile::open(val_path.string(), &tokenizer)));
    val_tokens = files.back().get();
    if (val_tokens->size() < 2) {
      log << val_tokens->path() << ": too few tokens to validate on; evaluation is off\n";
      val_tokens = nullptr;
    }
  }
  if (train_tokens.info().vocab_size > static_cast<uint64_t>(config.model_config.vocab_size)) {
    throw std::runtime_error(train_tokens.path() + ": tokens of a " + std::to_string(train_tokens.info().vocab_size) +
                             "-piece vocabulary, but the model's vocab_size is " +
                             std::to_string(config.model_config.vocab_size));
  }
  const std::string description = to_string(objective) + " on " + dir + " (" + std::to_string(train_tokens.size()) +
                                  " train tokens; " + std::to_string(val_tokens ? val_tokens->size() : 0) +
                                  " validation tokens)";
  const int64_t block = config.resolved_block_size();
  auto specials = BatchTokens::of(tokenizer);
  specials.decoder_start = config.model_config.decoder_start_id;
  auto make = [&](auto train, auto val) -> std::unique_ptr<TaskData> {
    using Dataset = typename decltype(train)::element_type;
    if (train->size() == 0) throw std::runtime_error(train_tokens.path() + ": no training examples (the file is empty)");
    return std::make_unique<SplitData<Dataset>>(objective, std::move(train), std::move(val), std::move(files),
                                                LabelSet(), specials, description);
  };
  switch (objective) {
    case Objective::kCausalLM:
      return make(std::make_unique<CausalLMDataset>(train_tokens, block, specials.pad),
                  val_tokens ? std::make_unique<CausalLMDataset>(*val_tokens, block, specials.pad) : nullptr);
    case Objective::kMaskedLM: {
      MaskingOptions masking;
      masking.probability = config.mask_probability;
      masking.whole_word = config.whole_word_masking;
      const SentencePairs pairs = config.sentence_pairs;
      return make(std::make_unique<MaskedLMDataset>(train_tokens, tokenizer, block, masking, pairs, config.seed),
                  val_tokens ? std::make_unique<MaskedLMDataset>(*val_tokens, tokenizer, block, masking, pairs,
                                                                 config.seed + 1)
                             : nullptr);
    }
    case Objective::kSpanCorruption: {
      SpanCorruptionOptions spans;
      spans.noise_density = config.noise_density;
      spans.mean_span_length = config.mean_span_length;
      // Raw length such that the corrupted input (spans collapsed to sentinels, plus </s>) fits the block.
      const int64_t raw = std::max<int64_t>(
          4, static_cast<int64_t>((block - 1) / (1.0 - config.noise_density + config.noise_density / config.mean_span_length)));
      return make(std::make_unique<SpanCorruptionDataset>(train_tokens, raw, spans, config.seed, specials),
                  val_tokens ? std::make_unique<SpanCorruptionDataset>(*val_tokens, raw, spans, config.seed + 1, specials)
                             : nullptr);
    }
    case Objective::kAuto:
    case Objective::kClassification:
    case Objective::kSeq2Seq: break;
  }
  throw std::logic_error(to_string(objective) + " does not read token files");
}

}  // namespace

bool is_example_file(const std::vector<std::string>& data) {
  return data.size() == 1 && !fs::is_directory(data[0]) && data_format(data[0]).has_value();
}

std::unique_ptr<TaskData> make_task_data(const RunConfig& config, Objective objective, const Tokenizer& tokenizer,
                                         const std::string& run_dir, std::ostream& log, const LabelSet* labels) {
  switch (objective) {
    case Objective::kClassification:
    case Objective::kSeq2Seq: return example_data(config, objective, tokenizer, labels, log);
    case Objective::kCausalLM:
      // One example file (prompt, completion) instruction-tunes; text is language modelling.
      if (is_example_file(config.data)) return example_data(config, objective, tokenizer, labels, log);
      return token_data(config, objective, tokenizer, run_dir, log);
    case Objective::kMaskedLM:
    case Objective::kSpanCorruption: return token_data(config, objective, tokenizer, run_dir, log);
    case Objective::kAuto: break;
  }
  throw std::logic_error("make_task_data: resolve the objective first");
}

}  // namespace zoo
