#include "train/run_config.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "core/strings.h"
#include "core/yaml_values.h"
#include "models/parameter_count.h"
#include "train/schedule.h"

namespace zoo {
namespace {

using yaml::BadValue;

using Field = yaml::Field<RunConfig>;
using yaml::bool_field;
using yaml::double_field;
using yaml::format_double;
using yaml::int_field;

std::string quoted(const std::string& s) { return YAML::Dump(YAML::Node(s)); }

Field string_field(std::string name, std::string RunConfig::*m, std::string doc) {
  return {name, "string", doc, false, [m](RunConfig& c, const YAML::Node& n) { c.*m = yaml::as_string(n); },
          [m](const RunConfig& c) { return quoted(c.*m); }};
}
// A path or a list of paths.
Field paths_field(std::string name, std::vector<std::string> RunConfig::*m, std::string doc) {
  return {name, "path or list of paths", doc, false,
          [m](RunConfig& c, const YAML::Node& n) {
            std::vector<std::string> paths;
            if (n.IsSequence()) {
              for (const auto& item : n) paths.push_back(yaml::as_string(item));
            } else if (!n.IsNull()) {
              const auto text = yaml::as_string(n);
              if (!text.empty()) paths.push_back(text);
            }
            c.*m = paths;
          },
          [m](const RunConfig& c) {
            std::string s = "[";
            for (const auto& p : c.*m) s += (s.size() > 1 ? ", " : "") + quoted(p);
            return s + "]";
          }};
}
// Any enum, through its one EnumNames table (core/enum_names.h).
template <typename E>
Field enum_field(std::string name, E RunConfig::*m, std::string doc) {
  return {name, "one of: " + enum_names_joined<E>(), doc, false,
          [m](RunConfig& c, const YAML::Node& n) {
            try {
              c.*m = from_string<E>(yaml::as_string(n));
            } catch (const std::invalid_argument&) {
              throw BadValue{"one of: " + enum_names_joined<E>()};
            }
          },
          [m](const RunConfig& c) { return to_string(c.*m); }};
}

const std::vector<Field>& fields() {
  static const std::vector<Field> kFields = [] {
    std::vector<Field> f;
    f.push_back({"lora", "mapping", "the lora.* keys below as one mapping (lora: {rank: 8})", false, nullptr, nullptr});
    f.push_back({"model", "config name, path or mapping", "the model config (model.KEY=value overrides its fields)", false,
                 nullptr, nullptr});  // handled apart: it builds model_config
    f.push_back(string_field("init_from", &RunConfig::init_from, "checkpoint to start from (fine-tuning)"));
    f.push_back(paths_field("data", &RunConfig::data,
                            "training text (files/dirs), a token directory, or a fine-tuning file; "
                            "empty = the default corpus"));
    f.push_back(paths_field("val_data", &RunConfig::val_data, "validation data; empty = split from data"));
    f.push_back(double_field("val_fraction", &RunConfig::val_fraction, "share of documents held out for validation"));
    f.push_back(string_field("tokenizer", &RunConfig::tokenizer,
                             "SentencePiece .model; empty = trained into the run directory"));
    f.push_back(enum_field("tokenizer_type", &RunConfig::tokenizer_type, "kind of tokenizer trained when none is given"));
    f.push_back(enum_field("objective", &RunConfig::objective, "what is learned; auto picks by family"));
    f.push_back(int_field("steps", &RunConfig::steps, "optimizer updates"));
    f.push_back(int_field("batch_size", &RunConfig::batch_size, "examples per micro-batch"));
    f.push_back(int_field("grad_accum", &RunConfig::grad_accum, "micro-batches accumulated per update"));
    f.push_back(int_field("context_parallel", &RunConfig::context_parallel,
                          "ranks sharing each sequence by ring attention (gpt, CPU); 1 = off"));
    f.push_back(int_field("block_size", &RunConfig::block_size,
                          "tokens per example (encoder input length for encoder-decoders); 0 = 128 or the model's max_positions"));
    f.push_back(int_field("target_length", &RunConfig::target_length, "seq2seq fine-tuning: longest target"));
    f.push_back(double_field("lr", &RunConfig::lr, "peak learning rate (inverse_sqrt: multiplier)"));
    f.push_back(double_field("min_lr", &RunConfig::min_lr, "cosine/linear decay floor"));
    f.push_back(enum_field("schedule", &RunConfig::schedule, "learning-rate schedule after warmup"));
    f.push_back(int_field("warmup_steps", &RunConfig::warmup_steps, "linear warmup updates"));
    f.push_back(double_field("weight_decay", &RunConfig::weight_decay, "AdamW decoupled decay (matrices only)"));
    f.push_back(double_field("beta1", &RunConfig::beta1, "AdamW beta1"));
    f.push_back(double_field("beta2", &RunConfig::beta2, "AdamW beta2"));
    f.push_back(double_field("eps", &RunConfig::eps, "AdamW epsilon"));
    f.push_back(double_field("grad_clip", &RunConfig::grad_clip, "clip gradients to this global norm; 0 = off"));
    f.push_back(double_field("label_smoothing", &RunConfig::label_smoothing, "cross-entropy label smoothing"));
    f.push_back(double_field("mask_probability", &RunConfig::mask_probability, "mlm: share of tokens predicted"));
    f.push_back(bool_field("whole_word_masking", &RunConfig::whole_word_masking, "mlm: mask whole words"));
    f.push_back(enum_field("sentence_pairs", &RunConfig::sentence_pairs,
                           "mlm: next-sentence or sentence-order pairs (needs head: pretraining)"));
    f.push_back(double_field("noise_density", &RunConfig::noise_density, "span corruption: share of tokens dropped"));
    f.push_back(double_field("mean_span_length", &RunConfig::mean_span_length, "span corruption: mean span"));
    f.push_back(int_field("eval_every", &RunConfig::eval_every, "evaluate every N updates; 0 = only at the end"));
    f.push_back(int_field("eval_batches", &RunConfig::eval_batches, "validation batches per evaluation; 0 = all"));
    f.push_back(int_field("log_every", &RunConfig::log_every, "progress lines every N updates (not a terminal)"));
    f.push_back(int_field("save_every", &RunConfig::save_every, "checkpoint every N updates; 0 = at evaluations"));
    f.push_back(int_field("keep_last", &RunConfig::keep_last, "checkpoints kept besides the best"));
    f.push_back(enum_field("on_nonfinite", &RunConfig::on_nonfinite, "a NaN/inf loss stops the run, or skips the update"));
    f.push_back(int_field("max_skipped", &RunConfig::max_skipped, "skip: stop after this many skips in a row"));
    f.push_back({"seed", "integer", "seeds weights, data order, masking and dropout", false,
                 [](RunConfig& c, const YAML::Node& n) {
                   const int64_t v = yaml::as_int(n);
                   if (v < 0) throw BadValue{"a non-negative integer"};
                   c.seed = static_cast<uint64_t>(v);
                 },
                 [](const RunConfig& c) { return std::to_string(c.seed); }});
    f.push_back({"lora.rank", "integer", "LoRA adapters of this rank on lora.targets, the rest frozen (fine-tuning); 0 = off",
                 false, [](RunConfig& c, const YAML::Node& n) { c.lora.rank = yaml::as_int(n); },
                 [](const RunConfig& c) { return std::to_string(c.lora.rank); }});
    f.push_back({"lora.alpha", "number", "LoRA: the update is scaled by alpha / rank", false,
                 [](RunConfig& c, const YAML::Node& n) { c.lora.alpha = yaml::as_double(n); },
                 [](const RunConfig& c) { return format_double(c.lora.alpha); }});
    f.push_back({"lora.dropout", "number", "LoRA: dropout on the adapters' input", false,
                 [](RunConfig& c, const YAML::Node& n) { c.lora.dropout = yaml::as_double(n); },
                 [](const RunConfig& c) { return format_double(c.lora.dropout); }});
    f.push_back({"lora.targets", "list of names or patterns",
                 "LoRA: projections adapted: q, k, v, out, up, gate, down in every layer, a glob over full names "
                 "(blocks.*.self_attn.q), or all",
                 false,
                 [](RunConfig& c, const YAML::Node& n) {
                   std::vector<std::string> targets;
                   if (n.IsSequence()) {
                     for (const auto& item : n) targets.push_back(yaml::as_string(item));
                   } else {
                     // q,v on a command line
                     std::string text = yaml::as_string(n);
                     for (size_t start = 0; start <= text.size();) {
                       const size_t comma = std::min(text.find(',', start), text.size());
                       if (comma > start) targets.push_back(text.substr(start, comma - start));
                       start = comma + 1;
                     }
                   }
                   c.lora.targets = targets;
                 },
                 [](const RunConfig& c) {
                   std::string s = "[";
                   for (const auto& t : c.lora.targets) s += (s.size() > 1 ? ", " : "") + quoted(t);
                   return s + "]";
                 }});
    f.push_back(bool_field("activation_checkpointing", &RunConfig::activation_checkpointing,
                           "recompute each block's activations in backward instead of storing them (less memory, "
                           "a second forward)"));
    f.push_back(string_field("device", &RunConfig::device, "cpu, cuda, cuda:N or auto"));
    f.push_back(enum_field("precision", &RunConfig::precision, "auto: bf16 on CUDA, and on a CPU whose bf16 matmuls measure clearly faster than fp32; else fp32"));
    return f;
  }();
  return kFields;
}

const Field* find_field(const std::string& key) { return yaml::find_field(fields(), key); }

std::string unknown_key(const std::string& key) { return yaml::unknown_key_message(fields(), key); }

void set_field(RunConfig& config, const Field& field, const YAML::Node& value, const std::string& location) {
  yaml::set_field<ConfigError>(config, field, value, location);
}

// `model:` is a config name/path (resolved through find_config) or an inline mapping.
void set_model(RunConfig& config, const YAML::Node& node, const std::string& source) {
  if (node.IsMap()) {
    config.model = source;
    config.model_config = config_from_yaml(node, source + " (model)");
    return;
  }
  if (!node.IsScalar() || node.Scalar().empty()) {
    throw ConfigError(yaml::where(source, node) + ": model: expected a config name, path or mapping");
  }
  try {
    config.model = find_config(node.Scalar());
  } catch (const std::exception& e) {
    throw ConfigError(yaml::where(source, node) + ": model: " + e.what());
  }
  config.model_config = load_config(config.model);
}

YAML::Node load_yaml(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(source + ":" + std::to_string(e.mark.line + 1) + ": malformed YAML: " + e.msg);
  }
}

// The run counts its tokens (and a data position) in 64 bits, over every data-parallel group:
// a run that would pass that count can never end, and is refused rather than left to wrap.
template <typename Fail>
void check_token_count(const RunConfig& c, int64_t groups, const Fail& fail) {
  const int64_t limit = std::numeric_limits<int64_t>::max();
  int64_t per_step = c.batch_size;
  if (c.batch_size <= 0 || c.grad_accum <= 0 || groups <= 0 ||
      __builtin_mul_overflow(per_step, c.grad_accum, &per_step) ||
      __builtin_mul_overflow(per_step, std::max<int64_t>(1, c.resolved_block_size()), &per_step) ||
      __builtin_mul_overflow(per_step, groups, &per_step) || c.steps <= limit / per_step) {
    return;
  }
  const std::string processes = groups > 1 ? " over " + std::to_string(groups) + " data-parallel groups" : "";
  fail("steps", "must be at most " + std::to_string(limit / per_step) + " (" + std::to_string(per_step) +
                    " tokens a step" + processes + "; a 64-bit count of tokens holds no more), got " +
                    std::to_string(c.steps));
}

}  // namespace

Objective resolve_objective(Objective requested, const ModelConfig& model, Purpose purpose) {
  if (requested != Objective::kAuto) return requested;
  const bool fine_tuning = purpose == Purpose::kFineTuning;
  switch (model.family) {
    case Family::kGpt: return Objective::kCausalLM;
    case Family::kBert:
      return fine_tuning || model.head == BertHead::kSequenceClassification ? Objective::kClassification
                                                                              : Objective::kMaskedLM;
    case Family::kT5:
    case Family::kTransformer: return fine_tuning ? Objective::kSeq2Seq : Objective::kSpanCorruption;
  }
  throw std::logic_error("unhandled family");
}

void set_objective_head(Objective objective, int64_t num_labels, ModelConfig& model) {
  switch (objective) {
    case Objective::kClassification:
      model.head = BertHead::kSequenceClassification;
      model.num_labels = num_labels;
      // It classifies the pooled tokens: BERT through its pooler (a masked-LM checkpoint has none,
      // which starts fresh, as Hugging Face's BertForSequenceClassification from BertForMaskedLM
      // weights); a pre-norm encoder without a pooler (ModernBERT) through a head transform.
      set_sequence_classifier_pooling(model);
      break;
    case Objective::kMaskedLM:
      if (model.head != BertHead::kPretraining) model.head = BertHead::kMaskedLM;
      break;
    case Objective::kAuto:
    case Objective::kCausalLM:
    case Objective::kSpanCorruption:
    case Objective::kSeq2Seq: break;
  }
}

int64_t RunConfig::resolved_block_size() const {
  return block_size > 0 ? block_size : std::min<int64_t>(128, model_config.max_length());
}

void RunConfig::make_paths_absolute() {
  namespace fs = std::filesystem;
  auto absolute = [](std::string& path) {
    if (!path.empty()) path = fs::absolute(path).lexically_normal().string();
  };
  for (auto& p : data) absolute(p);
  for (auto& p : val_data) absolute(p);
  absolute(tokenizer);
  absolute(init_from);
}

void RunConfig::validate_world(int64_t world_size, const std::string& source) const {
  auto fail = [&](const std::string& key, const std::string& what) {
    throw ConfigError(source + ": " + key + ": " + what);
  };
  if (context_parallel > 1 && world_size % context_parallel != 0) {
    throw ConfigError("context_parallel (" + std::to_string(context_parallel) +
                      ") must divide the number of processes (" + std::to_string(world_size) +
                      "): launch a multiple of it, e.g. torchrun --nproc_per_node=" + std::to_string(context_parallel));
  }
  check_token_count(*this, world_size / std::max<int64_t>(1, context_parallel), fail);
}

void RunConfig::validate(const std::string& source) const {
  auto fail = [&](const std::string& key, const std::string& what) {
    throw ConfigError(source + ": " + key + ": " + what);
  };
  auto positive = [&](const char* key, int64_t v) {
    if (v <= 0) fail(key, "must be positive, got " + std::to_string(v));
  };
  auto non_negative = [&](const char* key, double v) {
    if (v < 0) fail(key, "must not be negative, got " + format_double(v));
  };
  positive("steps", steps);
  positive("batch_size", batch_size);
  positive("grad_accum", grad_accum);
  // Values no run can use, refused before any work: a step of 10^12 micro-batches never ends
  // (and a stop signal waits for the step's end), a batch of 10^9 sequences never fits.
  constexpr int64_t kMaxPerStep = int64_t{1} << 16;
  auto at_most = [&](const char* key, int64_t v, int64_t bound) {
    if (v > bound) fail(key, "must be at most " + std::to_string(bound) + ", got " + std::to_string(v));
  };
  at_most("batch_size", batch_size, kMaxPerStep);
  at_most("grad_accum", grad_accum, kMaxPerStep);
  positive("context_parallel", context_parallel);
  at_most("context_parallel", context_parallel, kMaxPerStep);
  if (block_size >= 0) check_token_count(*this, 1, fail);
  non_negative("block_size", block_size);
  positive("target_length", target_length);
  if (!(lr > 0)) fail("lr", "must be positive, got " + format_double(lr));
  non_negative("min_lr", min_lr);
  if (min_lr > lr) fail("min_lr", "must not exceed lr (" + format_double(lr) + "), got " + format_double(min_lr));
  non_negative("warmup_steps", warmup_steps);
  non_negative("weight_decay", weight_decay);
  if (beta1 < 0 || beta1 >= 1) fail("beta1", "must be in [0, 1), got " + format_double(beta1));
  if (beta2 < 0 || beta2 >= 1) fail("beta2", "must be in [0, 1), got " + format_double(beta2));
  if (!(eps > 0)) fail("eps", "must be positive, got " + format_double(eps));
  non_negative("grad_clip", grad_clip);
  if (label_smoothing < 0 || label_smoothing >= 1) {
    fail("label_smoothing", "must be in [0, 1), got " + format_double(label_smoothing));
  }
  if (val_fraction < 0 || val_fraction >= 1) fail("val_fraction", "must be in [0, 1), got " + format_double(val_fraction));
  if (mask_probability <= 0 || mask_probability >= 1) {
    fail("mask_probability", "must be in (0, 1), got " + format_double(mask_probability));
  }
  if (noise_density <= 0 || noise_density >= 1) fail("noise_density", "must be in (0, 1), got " + format_double(noise_density));
  if (mean_span_length < 1) fail("mean_span_length", "must be at least 1, got " + format_double(mean_span_length));
  non_negative("eval_every", eval_every);
  non_negative("eval_batches", eval_batches);
  positive("log_every", log_every);
  non_negative("save_every", save_every);
  non_negative("keep_last", keep_last);
  positive("max_skipped", max_skipped);
  non_negative("lora.rank", static_cast<double>(lora.rank));
  if (lora.enabled()) {
    if (!(lora.alpha > 0)) fail("lora.alpha", "must be positive, got " + format_double(lora.alpha));
    if (lora.dropout < 0 || lora.dropout >= 1) fail("lora.dropout", "must be in [0, 1), got " + format_double(lora.dropout));
    if (lora.targets.empty()) fail("lora.targets", "empty: name the projections to adapt, e.g. [q, v]");
  }
  if (device != "auto" && device != "cpu" && device.rfind("cuda", 0) != 0) {
    fail("device", "expected cpu, cuda, cuda:N or auto, got '" + device + "'");
  }
  const auto& m = model_config;
  if (block_size > m.max_length()) {
    fail("block_size", std::to_string(block_size) + " exceeds the model's max_positions (" +
                           std::to_string(m.max_length()) + ")");
  }
  const auto fam = m.family;
  auto needs = [&](bool ok, const std::string& what) {
    if (!ok) fail("objective", to_string(objective) + " " + what);
  };
  switch (objective) {
    case Objective::kAuto: break;
    case Objective::kCausalLM: needs(fam == Family::kGpt, "needs a gpt model"); break;
    case Objective::kMaskedLM: needs(fam == Family::kBert, "needs a bert model"); break;
    case Objective::kClassification: needs(fam == Family::kBert, "needs a bert model"); break;
    case Objective::kSpanCorruption:
    case Objective::kSeq2Seq: needs(m.is_encoder_decoder(), "needs a t5 or transformer model"); break;
  }
  if (sentence_pairs != SentencePairs::kNone && m.head != BertHead::kPretraining) {
    fail("sentence_pairs", "needs model.head=pretraining (a head for the pair label)");
  }
  if (objective == Objective::kSpanCorruption && m.vocab_size < 107) {
    fail("objective", "span_corruption needs the 100 sentinel tokens in the vocabulary");
  }
  if (context_parallel > 1) {
    if (const std::string refusal = context_parallel_refusal(m); !refusal.empty()) fail("context_parallel", refusal);
    if (objective == Objective::kClassification) {
      fail("context_parallel", "ring attention trains causal_lm, masked_lm, span_corruption and seq2seq, not "
                               "classification (its label reads the [CLS] token, which one rank holds)");
    }
    if (sentence_pairs != SentencePairs::kNone) {
      fail("context_parallel", "sentence_pairs' label reads the [CLS] token, which one rank of the ring holds");
    }
    const int64_t chunks = 2 * context_parallel;
    if (block_size >= 0 && resolved_block_size() % chunks != 0) {
      fail("context_parallel", "block_size (" + std::to_string(resolved_block_size()) + ") must be a multiple of 2 x " +
                                   std::to_string(context_parallel) + " = " + std::to_string(chunks) +
                                   ": each rank holds two equal chunks of every sequence");
    }
  }
}

RunConfig parse_run_config(const std::string& text, const std::string& source) {
  const YAML::Node node = load_yaml(text, source);
  if (!node.IsMap()) {
    throw ConfigError(yaml::where(source, node) + ": expected a mapping of run config keys, got " +
                      (node.IsNull() ? "an empty document" : yaml::scalar_text(node)));
  }
  RunConfig config;
  // A model config on its own: train it with the run defaults.
  if (node["family"]) {
    config.model = source;
    config.model_config = config_from_yaml(node, source);
    config.validate(source);
    return config;
  }
  if (!node["model"]) throw ConfigError(source + ": missing required key 'model' (a model config name or path)");
  std::vector<std::string> seen;
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    const Field* field = find_field(key);
    const std::string at = yaml::where(source, entry.first);
    if (field == nullptr) throw ConfigError(at + ": " + unknown_key(key));
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      throw ConfigError(at + ": key '" + key + "' appears twice");
    }
    seen.push_back(key);
    if (key == "model") {
      set_model(config, entry.second, source);
    } else if (key == "lora") {
      // lora: {rank: 8, targets: [q, v]}, the same keys as lora.rank, lora.targets
      if (!entry.second.IsMap()) throw ConfigError(yaml::where(source, entry.second) + ": lora: expected a mapping");
      for (const auto& sub : entry.second) {
        const std::string name = "lora." + sub.first.Scalar();
        const Field* inner = find_field(name);
        if (inner == nullptr) throw ConfigError(yaml::where(source, sub.first) + ": " + unknown_key(name));
        set_field(config, *inner, sub.second, yaml::where(source, sub.second));
      }
    } else {
      set_field(config, *field, entry.second, yaml::where(source, entry.second));
    }
  }
  config.validate(source);
  return config;
}

void check_fits_in_memory(const RunConfig& config, int64_t memory, bool on_cuda) {
  if (memory <= 0) return;
  const ModelConfig& m = config.model_config;
  const std::string machine = "more than this machine's " + describe_bytes(static_cast<double>(memory)) + " of memory";
  const bool trains_every_parameter = !config.lora.enabled();
  const double state = on_cuda ? weights_bytes_lower_bound(m) : training_bytes_lower_bound(m, trains_every_parameter);
  if (state > static_cast<double>(memory)) {
    throw ConfigError("model." + largest_size(m) + ": the model would hold " + approximately(estimate_parameters(m)) +
                      " parameters (" + describe_bytes(state) +
                      (on_cuda || !trains_every_parameter ? " of float32 weights" : " with gradients and AdamW's state") +
                      "), " + machine);
  }
  if (on_cuda) return;
  const int64_t length = config.resolved_block_size();
  const double activations = activation_bytes_lower_bound(m, config.batch_size, length);
  if (state + activations > static_cast<double>(memory)) {
    throw ConfigError("batch_size (" + std::to_string(config.batch_size) + ") x block_size (" + std::to_string(length) +
                      "): a training step would hold at least " + describe_bytes(activations) +
                      " of activations (each block's input kept for the backward) besides " + describe_bytes(state) +
                      " of weights and optimizer state, " + machine);
  }
}

RunConfig load_run_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open run config");
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (buffer.str().find_first_not_of(" \t\r\n") == std::string::npos) {
    throw ConfigError(path + ": run config is empty");
  }
  return parse_run_config(buffer.str(), path);
}

std::string default_run_dir(const RunConfig& config) {
  namespace fs = std::filesystem;
  const std::string name =
      config.model_config.name.empty() ? fs::path(config.model).stem().string() : config.model_config.name;
  return (fs::path("runs") / name).string();
}

RunConfig fine_tuning_run_config(const std::string& checkpoint_dir, const std::string& run_config,
                                 const std::string& task) {
  RunConfig config;
  if (!run_config.empty()) {
    config = load_run_config(run_config);
  } else {
    config.lr = 1e-4, config.schedule = ScheduleKind::kLinear, config.warmup_steps = 30, config.weight_decay = 0.01;
    config.steps = 300, config.eval_every = 100, config.batch_size = 16;
  }
  config.model = (std::filesystem::path(checkpoint_dir) / "config.yaml").string();
  config.model_config = load_config(config.model);
  config.init_from = checkpoint_dir;
  apply_run_override(config, "objective=" + (task == "lm" ? "causal_lm" : task == "classify" ? "classification" : task));
  return config;
}

void apply_run_override(RunConfig& target, const std::string& assignment) {
  RunConfig config = target;  // a refused override leaves the target as it was
  const std::string source = "override '" + assignment + "'";
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) throw ConfigError(source + ": expected key=value");
  const std::string key = assignment.substr(0, eq);
  if (key.rfind("model.", 0) == 0) {
    apply_override(config.model_config, assignment.substr(6), source);
  } else {
    const Field* field = find_field(key);
    if (field == nullptr) throw ConfigError(source + ": " + unknown_key(key));
    const YAML::Node value = load_yaml(assignment.substr(eq + 1), source);
    if (!field->set && key != "model") throw ConfigError(source + ": set its keys one by one (" + key + ".KEY=value)");
    if (key == "model") {
      set_model(config, value, source);
    } else {
      set_field(config, *field, value, source);
    }
  }
  config.validate(source);
  target = std::move(config);
}

std::string to_yaml(const RunConfig& config) {
  std::string out;
  for (const auto& f : fields()) {
    if (!f.get && f.name != "model") continue;  // a group (lora), written as its keys
    if (f.name == "model") {
      out += "model:\n";
      std::istringstream model(to_yaml(config.model_config));
      for (std::string line; std::getline(model, line);) out += "  " + line + "\n";
    } else {
      out += f.name + ": " + f.get(config) + "\n";
    }
  }
  return out;
}

std::string run_schema_documentation() {
  std::ostringstream s;
  RunConfig defaults;
  s << "Run config keys (YAML), for zoo train and zoo finetune; model.KEY=value overrides a model key.\n\n";
  for (const auto& f : fields()) {
    s << "  " << f.name << " (" << f.type << ")";
    if (f.get) s << " = " << f.get(defaults);
    s << "\n      " << f.doc << "\n";
  }
  return s.str();
}

}  // namespace zoo
