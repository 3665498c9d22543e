#include "train/task.h"

#include <filesystem>
#include <ostream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/files.h"
#include "text/corpus.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
namespace F = torch::nn::functional;

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels, double label_smoothing) {
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat), labels.reshape({-1}),
                          F::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex).label_smoothing(label_smoothing));
}

void count_targets(const torch::Tensor& logits, const torch::Tensor& labels, bool with_accuracy, LossOutput& out) {
  torch::NoGradGuard no_grad;
  const auto valid = labels.ne(kIgnoreIndex);
  out.targets += valid.sum().item<int64_t>();
  if (with_accuracy) out.correct += (logits.argmax(-1).eq(labels) & valid).sum().item<int64_t>();
}

torch::Tensor on(const torch::Tensor& t, const torch::Device& device) {
  return t.defined() ? t.to(device, /*non_blocking=*/true) : t;
}

bool has_token_files(const std::string& dir) { return fs::exists(fs::path(dir) / "train.tokens"); }

}  // namespace

Objective resolve_objective(Objective requested, Family family, bool fine_tuning) {
  if (requested != Objective::kAuto) return requested;
  switch (family) {
    case Family::kGpt: return Objective::kCausalLM;
    case Family::kBert: return fine_tuning ? Objective::kClassification : Objective::kMaskedLM;
    case Family::kT5:
    case Family::kTransformer: return fine_tuning ? Objective::kSeq2Seq : Objective::kSpanCorruption;
  }
  return Objective::kCausalLM;
}

LossOutput compute_loss(Model& model, const Batch& batch, Objective objective, double label_smoothing,
                        const torch::Device& device, bool with_accuracy) {
  LossOutput out;
  const auto ids = on(batch.input_ids, device);
  const auto mask = on(batch.attention_mask, device);
  const auto labels = on(batch.labels, device);
  out.tokens = mask.defined() ? mask.sum().item<int64_t>() : ids.numel();
  torch::Tensor logits, extra_loss;
  switch (objective) {
    case Objective::kCausalLM:
      // Right padding only ever follows the real tokens, which a causal model cannot see.
      logits = model.gpt->forward(ids);
      break;
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
  count_targets(logits, labels, with_accuracy, out);
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

TaskData::TaskData(const RunConfig& config, Objective objective, const Tokenizer& tokenizer,
                   const std::string& run_dir, std::ostream& log, const LabelSet* labels)
    : objective_(objective) {
  const auto& model = config.model_config;
  if (objective == Objective::kClassification || objective == Objective::kSeq2Seq) {
    if (config.data.size() != 1) {
      throw std::runtime_error(to_string(objective) + " needs data: one training file (.csv, .tsv or .jsonl)");
    }
    if (config.val_data.size() > 1) throw std::runtime_error("val_data: one validation file, got several");
    const std::string train_file = config.data[0];
    const std::string val_file = config.val_data.empty() ? "" : config.val_data[0];
    if (objective == Objective::kClassification) {
      const auto train = read_classification(train_file);
      labels_ = labels != nullptr ? *labels : LabelSet::from_examples(train);
      train_cls_ = std::make_unique<ClassificationDataset>(train, tokenizer, labels_, config.resolved_block_size(), train_file);
      if (!val_file.empty()) {
        val_cls_ = std::make_unique<ClassificationDataset>(read_classification(val_file), tokenizer, labels_,
                                                           config.resolved_block_size(), val_file);
      }
    } else {
      train_s2s_ = std::make_unique<Seq2SeqDataset>(read_seq2seq(train_file), tokenizer, config.resolved_block_size(),
                                                    config.target_length);
      if (!val_file.empty()) {
        val_s2s_ = std::make_unique<Seq2SeqDataset>(read_seq2seq(val_file), tokenizer, config.resolved_block_size(),
                                                    config.target_length);
      }
    }
    description_ = to_string(objective) + " on " + train_file + " (" + std::to_string(train_size()) +
                   " examples), validation " + (val_file.empty() ? "none" : val_file) + " (" +
                   std::to_string(val_size()) + ")";
    return;
  }

  // Token objectives: a token directory as it is, else text tokenized into the run.
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
  train_tokens_ = std::make_unique<TokenFile>(TokenFile::open((fs::path(dir) / "train.tokens").string(), &tokenizer));
  const auto val_path = fs::path(dir) / "val.tokens";
  if (fs::exists(val_path)) {
    val_tokens_ = std::make_unique<TokenFile>(TokenFile::open(val_path.string(), &tokenizer));
  }
  if (val_tokens_ && val_tokens_->size() < 2) {
    log << val_tokens_->path() << ": too few tokens to validate on; evaluation is off\n";
    val_tokens_.reset();
  }
  if (train_tokens_->info().vocab_size > static_cast<uint64_t>(model.vocab_size)) {
    throw std::runtime_error(train_tokens_->path() + ": tokens of a " + std::to_string(train_tokens_->info().vocab_size) +
                             "-piece vocabulary, but the model's vocab_size is " + std::to_string(model.vocab_size));
  }
  const int64_t block = config.resolved_block_size();
  switch (objective) {
    case Objective::kCausalLM:
      train_lm_ = std::make_unique<CausalLMDataset>(*train_tokens_, block);
      if (val_tokens_) val_lm_ = std::make_unique<CausalLMDataset>(*val_tokens_, block);
      break;
    case Objective::kMaskedLM: {
      MaskingOptions masking;
      masking.probability = config.mask_probability;
      masking.whole_word = config.whole_word_masking;
      const auto pairs = config.sentence_pairs == SentencePairMode::kNextSentence ? SentencePairs::kNextSentence
                         : config.sentence_pairs == SentencePairMode::kSentenceOrder ? SentencePairs::kSentenceOrder
                                                                                     : SentencePairs::kNone;
      train_mlm_ = std::make_unique<MaskedLMDataset>(*train_tokens_, tokenizer, block, masking, pairs, config.seed);
      if (val_tokens_) {
        val_mlm_ = std::make_unique<MaskedLMDataset>(*val_tokens_, tokenizer, block, masking, pairs, config.seed + 1);
      }
      break;
    }
    case Objective::kSpanCorruption: {
      SpanCorruptionOptions spans;
      spans.noise_density = config.noise_density;
      spans.mean_span_length = config.mean_span_length;
      // Raw length such that the corrupted input (spans collapsed to sentinels, plus </s>) fits the block.
      const int64_t raw = std::max<int64_t>(
          4, static_cast<int64_t>((block - 1) / (1.0 - config.noise_density + config.noise_density / config.mean_span_length)));
      train_spans_ = std::make_unique<SpanCorruptionDataset>(*train_tokens_, raw, spans, config.seed);
      if (val_tokens_) val_spans_ = std::make_unique<SpanCorruptionDataset>(*val_tokens_, raw, spans, config.seed + 1);
      break;
    }
    default: throw std::runtime_error(to_string(objective) + " does not read token files");
  }
  if (train_size() == 0) throw std::runtime_error(train_tokens_->path() + ": no training examples (the file is empty)");
  description_ = to_string(objective) + " on " + dir + " (" + std::to_string(train_tokens_->size()) + " train tokens, " +
                 std::to_string(train_size()) + " examples; " +
                 std::to_string(val_tokens_ ? val_tokens_->size() : 0) + " validation tokens)";
}

int64_t TaskData::train_size() const {
  if (train_lm_) return train_lm_->size();
  if (train_mlm_) return train_mlm_->size();
  if (train_spans_) return train_spans_->size();
  if (train_cls_) return train_cls_->size();
  if (train_s2s_) return train_s2s_->size();
  return 0;
}

int64_t TaskData::val_size() const {
  if (val_lm_) return val_lm_->size();
  if (val_mlm_) return val_mlm_->size();
  if (val_spans_) return val_spans_->size();
  if (val_cls_) return val_cls_->size();
  if (val_s2s_) return val_s2s_->size();
  return 0;
}

Batch TaskData::train_batch(const std::vector<int64_t>& indices, int64_t epoch) const {
  if (train_lm_) return train_lm_->batch(indices);
  if (train_mlm_) return train_mlm_->batch(indices, epoch);
  if (train_spans_) return train_spans_->batch(indices, epoch);
  if (train_cls_) return train_cls_->batch(indices);
  return train_s2s_->batch(indices);
}

// Validation examples are corrupted the same way at every evaluation (epoch 0).
Batch TaskData::val_batch(const std::vector<int64_t>& indices) const {
  if (val_lm_) return val_lm_->batch(indices);
  if (val_mlm_) return val_mlm_->batch(indices, 0);
  if (val_spans_) return val_spans_->batch(indices, 0);
  if (val_cls_) return val_cls_->batch(indices);
  return val_s2s_->batch(indices);
}

std::string TaskData::describe() const { return description_; }

}  // namespace zoo
