#include "interop/peft.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/files.h"
#include "core/outputs.h"
#include "core/strings.h"
#include "interop/hugging_face.h"
#include "interop/safetensors.h"
#include "layers/attention.h"
#include "layers/feed_forward.h"
#include "layers/mixture_of_experts.h"
#include "train/checkpoint.h"

namespace zoo {
namespace {

// The largest |alpha / r| an imported adapter may have: real ones are 0.5 to a few dozen.
constexpr double kMaxLoraScale = 1e4;

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kAdapterConfig = "adapter_config.json";
constexpr const char* kAdapterWeights = "adapter_model.safetensors";
const std::string kPrefix = "base_model.model.";

std::string without_suffix(const std::string& name, const std::string& suffix) {
  return ends_with(name, suffix) ? name.substr(0, name.size() - suffix.size()) : name;
}

std::string leaf(const std::string& module) { return module.substr(module.rfind('.') + 1); }

// Rows shared by a Hugging Face tensor and a zoo parameter of one table entry: the parameter's
// rows start .. start + rows are the tensor's offset .. offset + rows, of its total_rows.
struct HfSlice {
  const HfTensorMap* map = nullptr;
  int64_t start = 0, rows = 0, offset = 0, total_rows = 0;
};

// Every Hugging Face weight the table names, with the rows it shares with each zoo parameter:
// one slice each, or one per block (Phi-3's gate_up_proj: gate's and up's).
std::multimap<std::string, HfSlice> hf_slices(const std::vector<HfTensorMap>& maps, const torch::nn::Module& module) {
  auto params = module.named_parameters();
  std::multimap<std::string, HfSlice> out;
  for (const auto& map : maps) {
    const auto* param = params.find(map.zoo);
    if (param == nullptr) continue;
    if (map.of > 1) {
      const int64_t rows = param->size(0);
      out.emplace(map.hf.at(0), HfSlice{&map, 0, rows, map.block * rows, map.of * rows});
      continue;
    }
    const int64_t n = static_cast<int64_t>(map.hf.size());
    int64_t start = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t rows = map.rows.empty() ? param->size(0) / n : map.rows[static_cast<size_t>(i)];
      out.emplace(map.hf[static_cast<size_t>(i)], HfSlice{&map, start, rows, 0, rows});
      start += rows;
    }
  }
  return out;
}

// An adapter attached to a model, with the registered name of the weight it adapts.
struct AttachedAdapter {
  std::string weight;  // e.g. blocks.0.self_attn.qkv.weight
  std::string name;    // e.g. blocks.0.self_attn.q
  Lora adapter;
};

std::vector<AttachedAdapter> attached_adapters(const Model& model) {
  std::vector<AttachedAdapter> out;
  for (const auto& item : model.module()->named_modules()) {
    const ProjectionAdapters* adapters = nullptr;
    if (const auto* a = dynamic_cast<const AttentionImpl*>(item.value().get())) adapters = &a->lora;
    if (const auto* f = dynamic_cast<const FeedForwardImpl*>(item.value().get())) adapters = &f->lora;
    if (adapters == nullptr) continue;
    for (const auto& e : adapters->entries()) {
      std::string linear;
      for (const auto& child : item.value()->named_children())
        if (child.value().get() == e.projection) linear = child.key();
      out.push_back({item.key() + "." + linear + ".weight", item.key() + "." + e.part, e.adapter});
    }
  }
  return out;
}

// The Hugging Face module each trained base-model tensor belongs to, for modules_to_save: its file
// name's first part under the base model (classifier, pooler; ModernBERT's head), which PEFT
// matches as a suffix.
std::string module_to_save(std::string hf_name, const std::string& base_prefix) {
  if (!base_prefix.empty() && hf_name.rfind(base_prefix, 0) == 0) hf_name = hf_name.substr(base_prefix.size());
  return hf_name.substr(0, hf_name.find('.'));
}

// PEFT's target_modules name a module by its name or a dotted suffix of it. Each adapted module
// is named by its shortest suffix that matches no module left without an adapter: GPT-2's
// feed-forward c_proj is "mlp.c_proj", since "c_proj" would take the attention's too.
std::set<std::string> target_modules(const std::set<std::string>& adapted, const std::set<std::string>& modules) {
  const auto matches = [](const std::string& module, const std::string& suffix) {
    if (module == suffix) return true;
    return module.size() > suffix.size() && module[module.size() - suffix.size() - 1] == '.' &&
           module.compare(module.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  std::set<std::string> targets;
  for (const auto& name : adapted) {
    std::string suffix = leaf(name);
    while (suffix != name && std::any_of(modules.begin(), modules.end(), [&](const std::string& m) {
             return adapted.count(m) == 0 && matches(m, suffix);
           })) {
      const size_t dot = name.size() - suffix.size() - 1;  // the '.' before the suffix
      const size_t before = dot == 0 ? std::string::npos : name.rfind('.', dot - 1);
      suffix = before == std::string::npos ? name : name.substr(before + 1);
    }
    targets.insert(suffix);
  }
  return targets;
}

json task_type(const ModelConfig& c) {
  switch (c.family) {
    case Family::kGpt: return "CAUSAL_LM";
    case Family::kT5:
    case Family::kTransformer: return "SEQ_2_SEQ_LM";
    case Family::kBert:
      switch (c.head) {
        case BertHead::kSequenceClassification: return "SEQ_CLS";
        case BertHead::kTokenClassification: return "TOKEN_CLS";
        case BertHead::kNone:
        case BertHead::kMaskedLM:
        case BertHead::kNextSentence:
        case BertHead::kPretraining: return nullptr;
      }
  }
  return nullptr;
}

// --- Experts ------------------------------------------------------------------------------
// PEFT adapts transformers' experts (Mixtral's and Qwen3-MoE's model.layers.L.mlp.experts, with
// parameters gate_up_proj (E, 2F, D) and down_proj (E, D, F)) through target_parameters: one
// wrapper around the module per parameter a target names, in the module's order (gate_up_proj
// innermost, whatever the order of the list as saved), so that gate_up_proj's tensors sit under
// ".base_layer" when down_proj is adapted too. lora_A is
// (r E, in) with expert e's rows at e r .. e r + r; lora_B (out, r E) with expert e's columns at
// e, e + E, ...

constexpr const char* kExpertParameters[] = {"gate_up_proj", "down_proj"};  // zoo's gate_up, down

std::string expert_module(const std::string& layer) { return "model.layers." + layer + ".mlp.experts"; }

// The Hugging Face name of a zoo part and back.
std::string expert_parameter(const std::string& part) { return part + "_proj"; }

// zoo's (E, r, in) and (E, out, r) as PEFT's lora_A and lora_B, and back.
std::pair<torch::Tensor, torch::Tensor> peft_expert_pair(const ExpertLoraImpl& adapter) {
  const auto A = adapter.A.detach().cpu().to(torch::kFloat), B = adapter.B.detach().cpu().to(torch::kFloat);
  return {A.reshape({-1, A.size(2)}), B.permute({1, 2, 0}).reshape({B.size(1), -1})};
}
std::pair<torch::Tensor, torch::Tensor> zoo_expert_pair(const torch::Tensor& A, const torch::Tensor& B, int64_t experts) {
  const int64_t rank = A.size(0) / experts;
  return {A.reshape({experts, rank, A.size(1)}), B.reshape({B.size(0), rank, experts}).permute({2, 0, 1})};
}

// Each module's adapted parameters and target_parameters, for export: tensors by their file names.
std::vector<std::string> export_expert_adapters(const Model& model, std::map<std::string, torch::Tensor>& tensors) {
  std::map<std::string, std::map<std::string, std::pair<torch::Tensor, torch::Tensor>>> modules;
  std::set<std::string> adapted;
  for (const auto& item : model.module()->named_modules()) {
    const auto* moe = dynamic_cast<const MixtureOfExpertsImpl*>(item.value().get());
    if (moe == nullptr) continue;
    const std::string layer = item.key().substr(7, item.key().find('.', 7) - 7);  // blocks.L.moe
    for (const auto& [part, adapter] : {std::pair{"gate_up", moe->lora_gate_up}, std::pair{"down", moe->lora_down}}) {
      if (!adapter) continue;
      modules[expert_module(layer)][expert_parameter(part)] = peft_expert_pair(*adapter);
      adapted.insert(expert_parameter(part));
    }
  }
  std::vector<std::string> order;
  for (const char* p : kExpertParameters)
    if (adapted.count(p)) order.push_back(p);
  for (const auto& [module, pairs] : modules) {
    for (size_t i = 0; i < order.size(); ++i) {
      const auto found = pairs.find(order[i]);
      if (found == pairs.end()) continue;
      std::string name = kPrefix + module;
      for (size_t wrap = i + 1; wrap < order.size(); ++wrap) name += ".base_layer";
      tensors[name + ".lora_A.weight"] = found->second.first.contiguous();
      tensors[name + ".lora_B.weight"] = found->second.second.contiguous();
    }
  }
  std::vector<std::string> targets;
  for (const auto& p : order) targets.push_back("mlp.experts." + p);
  return targets;
}

// --- Export -------------------------------------------------------------------------------

// One Hugging Face module's adapters: where in its rows each adds, with its A and B.
struct ExportedModule {
  struct Piece {
    int64_t offset, rows;
    torch::Tensor A, B;
  };
  int64_t out_rows = 0;
  std::vector<Piece> pieces;

  // PEFT's lora_A and lora_B for the module. Parts of one fused module (GPT-2's c_attn): A
  // stacked, B block-diagonal over their rows.
  std::pair<torch::Tensor, torch::Tensor> lora_pair() const {
    if (pieces.size() == 1 && pieces[0].rows == out_rows) return {pieces[0].A, pieces[0].B};
    std::vector<torch::Tensor> stacked;
    int64_t rank = 0;
    for (const auto& p : pieces) stacked.push_back(p.A), rank += p.A.size(0);
    torch::Tensor B = torch::zeros({out_rows, rank});
    int64_t column = 0;
    for (const auto& p : pieces) {
      B.narrow(0, p.offset, p.rows).narrow(1, column, p.A.size(0)).copy_(p.B);
      column += p.A.size(0);
    }
    return {torch::cat(stacked, 0), B};
  }
};

struct ExportedModules {
  std::map<std::string, ExportedModule> modules;  // by Hugging Face module name
  bool transposed = false;                        // GPT-2's Conv1D layout (fan_in_fan_out)
};

ExportedModules exported_modules(const Model& model, const std::vector<HfTensorMap>& maps,
                                 const std::map<std::string, const HfTensorMap*>& by_zoo) {
  const auto slices = hf_slices(maps, *model.module());
  ExportedModules out;
  for (const auto& a : attached_adapters(model)) {
    const auto& o = a.adapter->options;
    const auto found = by_zoo.find(a.weight);
    TORCH_CHECK(found != by_zoo.end(), "peft: no Hugging Face tensor for ", a.weight);
    const HfTensorMap& map = *found->second;
    std::string hf;
    HfSlice slice;
    for (const auto& name : map.hf) {
      for (auto [it, last] = slices.equal_range(name); it != last; ++it) {
        const HfSlice& s = it->second;
        if (s.map == &map && s.start <= o.row_offset() && o.row_offset() + o.rows() <= s.start + s.rows) {
          hf = name, slice = s;
        }
      }
    }
    TORCH_CHECK(!hf.empty(), "peft: ", a.name, " spans several Hugging Face tensors");
    out.transposed = out.transposed || map.transpose;
    auto& module = out.modules[without_suffix(hf, ".weight")];
    module.out_rows = slice.total_rows;
    module.pieces.push_back({o.row_offset() - slice.start + slice.offset, o.rows(),
                             a.adapter->A.detach().cpu().to(torch::kFloat), a.adapter->B.detach().cpu().to(torch::kFloat)});
  }
  return out;
}

// adapter_config.json for the exported modules and their ranks.
json adapter_config(const Model& model, const std::vector<HfTensorMap>& maps, const std::map<std::string, int64_t>& module_rank,
                    bool transposed, const std::set<std::string>& to_save) {
  const auto& lora = model.lora->config;
  const double scaling = lora.alpha / static_cast<double>(lora.rank);
  // Modules whose rank differs from r get it (and alpha = scale x rank) through rank_pattern and
  // alpha_pattern, by their last name where all such modules agree, else by their full name.
  json rank_pattern = json::object(), alpha_pattern = json::object();
  std::map<std::string, std::set<int64_t>> ranks_by_leaf;
  for (const auto& [name, rank] : module_rank) ranks_by_leaf[leaf(name)].insert(rank);
  for (const auto& [name, rank] : module_rank) {
    if (rank == lora.rank) continue;
    const std::string key = ranks_by_leaf[leaf(name)].size() == 1 ? leaf(name) : name;
    rank_pattern[key] = rank;
    alpha_pattern[key] = scaling * static_cast<double>(rank);
  }
  std::set<std::string> adapted, hf_modules;
  for (const auto& [name, rank] : module_rank) adapted.insert(name);
  for (const auto& m : maps) {
    if (m.stacked) continue;  // experts: no modules in transformers' model
    for (const auto& name : m.hf) hf_modules.insert(without_suffix(name, ".weight"));
  }
  const std::set<std::string> targets = target_modules(adapted, hf_modules);
  return {{"peft_type", "LORA"},
          {"task_type", task_type(model.config)},
          {"r", lora.rank},
          {"lora_alpha", lora.alpha},
          {"lora_dropout", lora.dropout},
          {"target_modules", std::vector<std::string>(targets.begin(), targets.end())},
          {"rank_pattern", rank_pattern},
          {"alpha_pattern", alpha_pattern},
          {"fan_in_fan_out", transposed},
          {"bias", "none"},
          {"modules_to_save", to_save.empty() ? json(nullptr) : json(std::vector<std::string>(to_save.begin(), to_save.end()))},
          {"use_rslora", false},
          {"use_dora", false},
          {"init_lora_weights", true},
          {"inference_mode", true},
          {"base_model_name_or_path", model.lora->base}};
}

// --- Import -------------------------------------------------------------------------------

// The adapters per Hugging Face module (lora_A, lora_B), and the base tensors saved beside them
// (modules_to_save), from adapter_model.safetensors.
struct AdapterWeights {
  struct Pair {
    torch::Tensor A, B;
  };
  std::string path;
  std::map<std::string, Pair> adapters;
  std::map<std::string, torch::Tensor> saved;

  static AdapterWeights read(const std::string& dir) {
    AdapterWeights w;
    w.path = (fs::path(dir) / kAdapterWeights).string();
    if (!fs::exists(w.path)) {
      throw std::runtime_error(w.path + ": missing" +
                               (fs::exists(fs::path(dir) / "adapter_model.bin")
                                    ? std::string(" (adapter_model.bin is pickled PyTorch, which zoo does not read: save "
                                                  "with safe_serialization=True)")
                                    : std::string()));
    }
    const auto file = load_safetensors(w.path);
    for (const auto& [key, value] : file.tensors) {
      if (key.rfind(kPrefix, 0) != 0) throw std::runtime_error(w.path + ": tensor '" + key + "' is not under " + kPrefix);
      // As a checkpoint's weights are (an infinite lora_B was imported into a checkpoint that
      // every command then refused to load).
      check_finite(value, w.path + ": tensor '" + key + "'");
      std::string name = key.substr(kPrefix.size());
      for (const char* which : {".lora_A", ".lora_B"}) {
        for (const char* suffix : {".weight", ".default.weight"}) {
          const std::string tail = std::string(which) + suffix;
          if (!ends_with(name, tail)) continue;
          auto& a = w.adapters[name.substr(0, name.size() - tail.size())];
          (which[6] == 'A' ? a.A : a.B) = value.to(torch::kFloat);
          name.clear();
        }
        if (name.empty()) break;
      }
      if (!name.empty()) w.saved[name] = value;
    }
    if (w.adapters.empty()) throw std::runtime_error(w.path + ": holds no lora_A / lora_B tensors");
    return w;
  }
};

// adapter_config.json, checked as it is read; the per-module rank and alpha are checked against
// the weights by scale_of.
struct AdapterConfig {
  std::string path;
  json config;
  int64_t r = 0;
  double lora_alpha = 0, dropout = 0;
  bool rslora = false;

  static AdapterConfig read(const std::string& path) {
    if (!fs::exists(path)) throw std::runtime_error(path + ": missing (not a PEFT adapter directory)");
    AdapterConfig c;
    c.path = path;
    try {
      c.config = json::parse(read_file(path));
    } catch (const json::exception& e) {
      throw std::runtime_error(path + ": malformed JSON (" + std::string(e.what()) + ")");
    }
    const json& config = c.config;
    if (!config.is_object()) throw std::runtime_error(path + ": expected a JSON object");
    if (config.value("peft_type", std::string()) != "LORA") {
      c.fail("peft_type", "'" + config.value("peft_type", std::string("(none)")) + "' is not LORA (zoo reads LoRA adapters)");
    }
    if (config.value("use_dora", false)) c.fail("use_dora", "DoRA adapters are not supported");
    if (config.contains("bias") && config["bias"] != "none") c.fail("bias", "trained biases are not supported (only \"none\")");
    if (!config.contains("r") || !config["r"].is_number_integer() || config["r"].get<int64_t>() <= 0) {
      c.fail("r", "expected a positive integer");
    }
    if (!config.contains("lora_alpha") || !config["lora_alpha"].is_number()) c.fail("lora_alpha", "expected a number");
    c.r = config["r"].get<int64_t>();
    c.lora_alpha = config["lora_alpha"].get<double>();
    c.dropout = config.contains("lora_dropout") && config["lora_dropout"].is_number() ? config["lora_dropout"].get<double>() : 0.0;
    if (!std::isfinite(c.lora_alpha)) c.fail("lora_alpha", "expected a finite number");
    if (config.contains("use_rslora") && !config["use_rslora"].is_boolean()) {
      c.fail("use_rslora", "expected true or false, got " + config["use_rslora"].dump());
    }
    c.rslora = config.value("use_rslora", false);
    return c;
  }

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw std::runtime_error(path + ": " + key + ": " + what);
  }

  bool is_sequence_classifier() const { return config.contains("task_type") && config["task_type"] == "SEQ_CLS"; }

  // alpha / r, or alpha / sqrt(r) with use_rslora.
  double scale(double alpha, int64_t rank) const {
    return rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / static_cast<double>(rank);
  }

  // rank_pattern's or alpha_pattern's entry for `module` (its name or a dotted suffix of it).
  const json* pattern(const char* key, const std::string& module) const {
    if (!config.contains(key) || !config[key].is_object()) return nullptr;
    for (const auto& [name, value] : config[key].items()) {
      if (module == name || ends_with(module, "." + name)) return &value;
    }
    return nullptr;
  }

  // The scale of `module`'s update, whose weights have rank `rank`. The configuration must
  // describe these weights (issue 31: r 1000000000 over rank-4 tensors was imported at a scale
  // of 1.6e-8; lora_alpha 1e308 merged into inf weights).
  double scale_of(const std::string& module, int64_t rank) const {
    const json* rank_value = pattern("rank_pattern", module);
    if (rank_value != nullptr && (!rank_value->is_number_integer() || rank_value->get<int64_t>() <= 0)) {
      fail("rank_pattern", "the rank for " + module + " must be a positive integer, got " + rank_value->dump());
    }
    const int64_t declared = rank_value != nullptr ? rank_value->get<int64_t>() : r;
    if (declared != rank) {
      fail(rank_value != nullptr ? "rank_pattern" : "r",
           "says rank " + std::to_string(declared) + " for " + module + ", whose lora_A and lora_B have rank " +
               std::to_string(rank));
    }
    const json* alpha_value = pattern("alpha_pattern", module);
    if (alpha_value != nullptr && (!alpha_value->is_number() || !std::isfinite(alpha_value->get<double>()))) {
      fail("alpha_pattern", "the alpha for " + module + " must be a finite number, got " + alpha_value->dump());
    }
    const double s = scale(alpha_value != nullptr ? alpha_value->get<double>() : lora_alpha, rank);
    if (!(std::abs(s) <= kMaxLoraScale)) {
      fail(alpha_value != nullptr ? "alpha_pattern" : "lora_alpha",
           "a scale of " + c10::str(s) + " for " + module + " (alpha / " + (rslora ? "sqrt(r)" : "r") + ") is beyond " +
               c10::str(kMaxLoraScale) + ": the merged weights would not be meaningful");
    }
    return s;
  }

  // Every module target_modules names is one the adapter holds (a list; a string is a regex).
  void check_target_modules(const AdapterWeights& weights) const {
    if (!config.contains("target_modules") || !config["target_modules"].is_array()) return;
    for (const auto& target : config["target_modules"]) {
      if (!target.is_string()) fail("target_modules", "expected module names, got " + target.dump());
      const std::string name = target.get<std::string>();
      const bool held = std::any_of(weights.adapters.begin(), weights.adapters.end(), [&](const auto& entry) {
        return entry.first == name || ends_with(entry.first, "." + name);
      });
      if (!held) fail("target_modules", "'" + name + "' matches no module the adapter's weights hold");
    }
  }
};

// The base's config, with a sequence classifier's head where a SEQ_CLS adapter on a BERT without
// that head (PEFT's SEQ_CLS on a masked-LM base) brings it in modules_to_save: as many labels as
// its rows.
ModelConfig adapted_model_config(ModelConfig c, const AdapterConfig& config, const AdapterWeights& weights) {
  if (!config.is_sequence_classifier() || c.family != Family::kBert || c.head == BertHead::kSequenceClassification) {
    return c;
  }
  const auto head = weights.saved.find("classifier.weight");
  if (head == weights.saved.end()) {
    throw std::runtime_error(weights.path + ": a SEQ_CLS adapter without " + kPrefix +
                             "classifier.weight (modules_to_save) for a base without that head");
  }
  c.head = BertHead::kSequenceClassification;
  c.num_labels = head->second.size(0);
  set_sequence_classifier_pooling(c);
  return c;
}

// modules_to_save: base-model tensors trained in full, in zoo's names.
std::map<std::string, torch::Tensor> trained_base_tensors(const AdapterWeights& weights, const std::vector<HfTensorMap>& maps,
                                                          const torch::OrderedDict<std::string, torch::Tensor>& params) {
  std::map<std::string, std::string> zoo_of_hf;
  for (const auto& m : maps)
    if (m.hf.size() == 1 && m.of == 1) zoo_of_hf[m.hf[0]] = m.zoo;
  std::map<std::string, torch::Tensor> trained;
  for (const auto& [name, value] : weights.saved) {
    const auto found = zoo_of_hf.find(name);
    if (found == zoo_of_hf.end() || !params.contains(found->second)) {
      throw std::runtime_error(weights.path + ": tensor '" + kPrefix + name + "' is neither an adapter nor a tensor of the model");
    }
    trained[found->second] = value.to(torch::kFloat);
  }
  return trained;
}

// The zoo layer and part ("gate_up", "down") of PEFT's experts module `module` (its name with a
// ".base_layer" per wrapper), by adapter_config.json's target_parameters; none for other modules.
struct ExpertTarget {
  std::string layer, part;
};
std::optional<ExpertTarget> expert_target(std::string module, const AdapterConfig& config) {
  size_t wraps = 0;
  for (const std::string wrapper = ".base_layer"; ends_with(module, wrapper); ++wraps) {
    module.resize(module.size() - wrapper.size());
  }
  const std::string head = "model.layers.", tail = ".mlp.experts";
  if (module.rfind(head, 0) != 0 || !ends_with(module, tail) || module.size() <= head.size() + tail.size()) {
    return std::nullopt;
  }
  const std::string layer = module.substr(head.size(), module.size() - head.size() - tail.size());
  if (!std::all_of(layer.begin(), layer.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) return std::nullopt;
  // The module's parameters some target names (by name or dotted suffix), in the module's order.
  const json& targets = config.config.contains("target_parameters") ? config.config["target_parameters"] : json();
  std::vector<std::string> wrapped;
  for (const char* parameter : kExpertParameters) {
    const std::string full = module + "." + parameter;
    if (targets.is_array() && std::any_of(targets.begin(), targets.end(), [&](const json& t) {
          return t.is_string() && (full == t.get<std::string>() || ends_with(full, "." + t.get<std::string>()));
        })) {
      wrapped.push_back(parameter);
    }
  }
  if (wraps >= wrapped.size()) {
    config.fail("target_parameters", targets.dump() + " adapts " + std::to_string(wrapped.size()) + " of " + kPrefix +
                                         module + "'s gate_up_proj and down_proj, but tensors under " +
                                         std::to_string(wraps) + " base_layer need " + std::to_string(wraps + 1));
  }
  const std::string& parameter = wrapped[wrapped.size() - 1 - wraps];
  return ExpertTarget{layer, parameter.substr(0, parameter.size() - 5)};  // gate_up, down
}

// One module's update onto one of zoo's projection parts within its rows, at its own scale.
struct PartUpdate {
  std::string name;  // zoo projection name (blocks.0.self_attn.q)
  torch::Tensor A, B;
  double scale;
};

// Each adapter's updates onto zoo's projections, every shape and the configuration checked;
// `rank` becomes the largest adapter rank.
std::vector<PartUpdate> part_updates(Model& model, const std::vector<HfTensorMap>& maps, const AdapterConfig& config,
                                     const AdapterWeights& weights, int64_t* rank) {
  const auto slices = hf_slices(maps, *model.module());
  auto params = model.module()->named_parameters();
  const auto projections = projection_names(model);
  std::vector<PartUpdate> updates;
  for (const auto& [module, a] : weights.adapters) {
    const std::string where = weights.path + ": " + kPrefix + module;
    if (!a.A.defined() || !a.B.defined()) throw std::runtime_error(where + ": lora_A and lora_B must both be there");
    if (const auto expert = expert_target(module, config)) {
      const std::string name = "blocks." + expert->layer + ".moe." + expert->part;
      const auto* weight = params.find(name);
      if (weight == nullptr) throw std::runtime_error(where + ": layer " + expert->layer + " has no experts in this model");
      const int64_t experts = weight->size(0), rows = weight->size(1), in = weight->size(2);
      if (a.A.dim() != 2 || a.B.dim() != 2 || a.A.size(1) != in || a.B.size(0) != rows || a.A.size(0) % experts != 0 ||
          a.B.size(1) != a.A.size(0)) {
        throw std::runtime_error(where + ": lora_A " + c10::str(a.A.sizes()) + " and lora_B " + c10::str(a.B.sizes()) +
                                 " do not fit " + std::to_string(experts) + " experts' " + expert->part + " (" +
                                 std::to_string(rows) + " x " + std::to_string(in) + ") at one rank");
      }
      const int64_t r_m = a.A.size(0) / experts;
      *rank = std::max(*rank, r_m);
      const auto [A, B] = zoo_expert_pair(a.A, a.B, experts);
      updates.push_back({name, A, B, config.scale_of(module, r_m)});
      continue;
    }
    const auto [first, last] = slices.equal_range(module + ".weight");
    if (first == last) {
      throw std::runtime_error(where + ": no such module in this " + to_string(model.config.family) + " model");
    }
    const int64_t in = params[first->second.map->zoo].size(1), out_rows = first->second.total_rows;
    const int64_t r_m = a.A.size(0);
    if (a.A.dim() != 2 || a.B.dim() != 2 || a.A.size(1) != in || a.B.size(0) != out_rows || a.B.size(1) != r_m) {
      throw std::runtime_error(where + ": lora_A " + c10::str(a.A.sizes()) + " and lora_B " + c10::str(a.B.sizes()) +
                               " do not fit the module (" + std::to_string(out_rows) + " x " + std::to_string(in) +
                               ") at one rank");
    }
    const double scale = config.scale_of(module, r_m);
    *rank = std::max(*rank, r_m);
    bool any = false;
    for (auto it = first; it != last; ++it) {
      const HfSlice& s = it->second;
      const auto& weight = params[s.map->zoo];
      for (const auto& p : projections) {
        if (p.experts || !p.part.projection->weight.is_same(weight)) continue;
        if (p.part.row_offset < s.start || p.part.row_offset + p.part.rows > s.start + s.rows) continue;
        updates.push_back({p.name, a.A, a.B.narrow(0, p.part.row_offset - s.start + s.offset, p.part.rows), scale});
        any = true;
      }
    }
    if (!any) throw std::runtime_error(where + ": zoo cannot adapt this module");
  }
  return updates;
}

}  // namespace

bool is_peft_directory(const std::string& dir) { return fs::exists(fs::path(dir) / kAdapterConfig); }

std::vector<ProjectionUpdate> read_peft_updates(const std::string& dir, Model& base) {
  const AdapterConfig config = AdapterConfig::read((fs::path(dir) / kAdapterConfig).string());
  const AdapterWeights weights = AdapterWeights::read(dir);
  if (!weights.saved.empty()) {
    throw std::runtime_error(weights.path + ": trains " + kPrefix + weights.saved.begin()->first +
                             " in full besides its adapters (modules_to_save), which one base cannot share: serve it "
                             "alone (zoo import-peft)");
  }
  int64_t rank = 0;
  const auto updates = part_updates(base, hf_tensor_maps(base.config), config, weights, &rank);
  config.check_target_modules(weights);
  std::vector<ProjectionUpdate> out;
  for (const auto& u : updates) {
    if (u.A.dim() != 2) {
      throw std::runtime_error(weights.path + ": adapts " + u.name +
                               ", a mixture's experts, which are not served per request: merge them (zoo import-peft, "
                               "then zoo export-hf)");
    }
    out.push_back({u.name, u.A.to(torch::kFloat), u.B.to(torch::kFloat) * u.scale});
  }
  return out;
}

void export_peft(const Model& model, const std::string& dir) {
  if (!model.lora) throw std::runtime_error("the checkpoint has no LoRA adapters: --adapters-only needs a LoRA run's");
  const auto& c = model.config;
  if (c.family == Family::kTransformer) throw std::runtime_error("the original Transformer has no Hugging Face layout");
  const auto maps = hf_tensor_maps(c);
  std::map<std::string, const HfTensorMap*> by_zoo;
  for (const auto& m : maps) by_zoo[m.zoo] = &m;
  const ExportedModules exported = exported_modules(model, maps, by_zoo);
  std::map<std::string, torch::Tensor> tensors;
  std::map<std::string, int64_t> module_rank;
  for (const auto& [name, module] : exported.modules) {
    const auto [A, B] = module.lora_pair();
    tensors[kPrefix + name + ".lora_A.weight"] = A.contiguous();
    tensors[kPrefix + name + ".lora_B.weight"] = B.contiguous();
    module_rank[name] = A.size(0);
  }
  const auto target_parameters = export_expert_adapters(model, tensors);
  std::set<std::string> to_save;
  for (const auto& zoo_name : model.lora->trained) {
    const auto found = by_zoo.find(zoo_name);
    if (found == by_zoo.end() || found->second->hf.size() != 1 || found->second->of != 1) {
      throw std::runtime_error("--adapters-only: " + zoo_name + " was trained in full and has no Hugging Face tensor");
    }
    tensors[kPrefix + found->second->hf[0]] =
        model.module()->named_parameters()[zoo_name].detach().cpu().to(torch::kFloat).contiguous();
    to_save.insert(module_to_save(found->second->hf[0], hf_base_prefix(model.config)));
  }
  json config = adapter_config(model, maps, module_rank, exported.transposed, to_save);
  if (!target_parameters.empty()) config["target_parameters"] = target_parameters;
  write_output_directory(dir, OutputKind::kPeftAdapterDirectory, [&](const std::string& tmp) {
    save_safetensors((fs::path(tmp) / kAdapterWeights).string(), tensors, {{"format", "pt"}});
    write_file_atomically((fs::path(tmp) / kAdapterConfig).string(), config.dump(2) + "\n");
  });
}

Model import_peft(const std::string& dir, const std::string& base_dir) {
  const AdapterConfig config = AdapterConfig::read((fs::path(dir) / kAdapterConfig).string());
  const AdapterWeights weights = AdapterWeights::read(dir);
  Checkpoint base = load_checkpoint(base_dir);
  refuse_quantized(base, "importing PEFT adapters onto it");
  if (base.model.lora) throw std::runtime_error(base_dir + ": holds LoRA adapters itself; give the plain base checkpoint");
  Model model = build_model(adapted_model_config(base.model.config, config, weights));
  const auto maps = hf_tensor_maps(model.config);
  auto params = model.module()->named_parameters();
  auto trained = trained_base_tensors(weights, maps, params);
  // A classifier's head transform the adapter does not bring starts from the base's masked LM
  // (PEFT's SEQ_CLS on ModernBERT, whose base class loads `head` from it); the LoRA checkpoint
  // then holds it, as the base's file has no such tensor.
  const auto base_params = base.model.module()->named_parameters();
  for (const auto& p : params) {
    const auto* source = base_params.find(masked_lm_source(p.key()));
    if (source != nullptr && !trained.count(p.key())) trained.emplace(p.key(), source->detach().clone());
  }
  // The base's tensors, but those the adapter brings.
  load_weights((fs::path(base_dir) / "model.pt").string(), *model.module(),
               [&](const std::string& name) { return trained.count(name) == 0; }, /*extra_allowed=*/true);
  int64_t rank = 0;
  const auto updates = part_updates(model, maps, config, weights, &rank);
  config.check_target_modules(weights);

  // One rank for all (the largest; smaller adapters padded with zeros, which stay zero), the
  // default scale lora_alpha / r, and each module's own scale folded into its B.
  const double scaling = config.scale(config.lora_alpha, config.r);
  LoraConfig lora;
  lora.rank = rank;
  lora.alpha = scaling * static_cast<double>(rank);
  lora.dropout = config.dropout;
  lora.targets.clear();
  for (const auto& u : updates) lora.targets.push_back(u.name);  // full names: each matches itself
  attach_lora(model, lora);
  auto adapted = model.module()->named_parameters();
  torch::NoGradGuard no_grad;
  for (const auto& u : updates) {
    // blocks.0.self_attn.q's adapter is blocks.0.self_attn.lora_q
    const std::string adapter = u.name.substr(0, u.name.rfind('.')) + ".lora_" + u.name.substr(u.name.rfind('.') + 1);
    auto A = adapted[adapter + ".A"];
    auto B = adapted[adapter + ".B"];
    A.zero_(), B.zero_();
    const int64_t rank_dim = u.A.dim() - 2;  // A is (r, in), or (E, r, in) for experts
    A.narrow(rank_dim, 0, u.A.size(rank_dim)).copy_(u.A);
    B.narrow(B.dim() - 1, 0, u.A.size(rank_dim)).copy_(u.B * (u.scale / scaling));
  }
  LoraState state;
  for (const auto& [name, value] : trained) {
    auto target = params[name];
    if (value.sizes() != target.sizes()) {
      throw std::runtime_error(weights.path + ": tensor for " + name + " has shape " + c10::str(value.sizes()) +
                               " but the model's is " + c10::str(target.sizes()));
    }
    target.copy_(value);
    state.trained.push_back(name);
  }
  state.config = lora;
  state.base = fs::canonical(base_dir).string();
  state.base_hash = file_hash((fs::path(state.base) / "model.pt").string());
  model.lora = state;
  return model;
}

}  // namespace zoo
