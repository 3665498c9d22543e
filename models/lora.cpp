#include "models/lora.h"

#include <fnmatch.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include <torch/torch.h>

#include "core/files.h"
#include "core/strings.h"
#include "layers/attention.h"
#include "layers/feed_forward.h"
#include "layers/mixture_of_experts.h"
#include "models/model.h"

namespace zoo {
namespace {

bool matches(const std::string& pattern, const NamedProjection& p) {
  if (pattern == "all") return true;
  const bool glob = pattern.find_first_of(".*?[") != std::string::npos;
  if (!glob) return p.part.part == pattern;
  return fnmatch(pattern.c_str(), p.name.c_str(), 0) == 0;
}

// The adapters of a module with projections; nullptr for any other module.
ProjectionAdapters* adapters_of(torch::nn::Module& owner) {
  if (auto* attention = dynamic_cast<AttentionImpl*>(&owner)) return &attention->lora;
  if (auto* feed_forward = dynamic_cast<FeedForwardImpl*>(&owner)) return &feed_forward->lora;
  return nullptr;
}

}  // namespace

std::vector<const NamedProjection*> lora_targets(const std::vector<NamedProjection>& projections,
                                                 const LoraConfig& config) {
  if (config.rank <= 0) throw ConfigError("lora.rank: must be positive, got " + std::to_string(config.rank));
  if (config.targets.empty()) throw ConfigError("lora.targets: empty (name the projections to adapt, e.g. [q, v])");
  std::vector<const NamedProjection*> chosen;
  for (const auto& pattern : config.targets) {
    bool any = false;
    for (const auto& p : projections) {
      if (!matches(pattern, p)) continue;
      any = true;
      if (std::find(chosen.begin(), chosen.end(), &p) == chosen.end()) chosen.push_back(&p);
    }
    if (!any) {
      std::vector<std::string> parts;
      for (const auto& p : projections)
        if (std::find(parts.begin(), parts.end(), p.part.part) == parts.end()) parts.push_back(p.part.part);
      throw ConfigError("lora.targets: '" + pattern + "' matches no projection of this model; its projections are " +
                        join(parts) + " in every layer (names such as " +
                        (projections.empty() ? std::string("none") : projections.front().name) + ")");
    }
  }
  // Registration in the model's order, whatever the order of the patterns.
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

std::vector<NamedProjection> projection_names(const Model& model) {
  std::vector<NamedProjection> out;
  for (const auto& item : model.module()->named_modules()) {
    std::vector<ProjectionPart> parts;
    if (const auto* attention = dynamic_cast<const AttentionImpl*>(item.value().get())) {
      parts = attention->projection_parts();
    } else if (const auto* feed_forward = dynamic_cast<const FeedForwardImpl*>(item.value().get())) {
      parts = feed_forward->projection_parts();
    }
    for (auto& part : parts) out.push_back({item.key() + "." + part.part, item.value(), std::move(part)});
    if (const auto* moe = dynamic_cast<const MixtureOfExpertsImpl*>(item.value().get())) {
      for (const auto& part : MixtureOfExpertsImpl::lora_parts()) {
        const auto [rows, in] = moe->lora_shape(part);
        out.push_back({item.key() + "." + part, item.value(), ProjectionPart{part, nullptr, 0, rows}, true, in});
      }
    }
  }
  return out;
}

std::vector<std::string> attach_lora(Model& model, const LoraConfig& config) {
  const auto projections = projection_names(model);
  std::vector<std::string> names;
  for (const NamedProjection* p : lora_targets(projections, config)) {
    const auto& part = p->part;
    const int64_t in = p->experts ? p->in : part.projection->options.in_features();  // a quantized weight is emptied
    if (config.rank > std::min(in, part.rows)) {
      throw ConfigError("lora.rank: " + std::to_string(config.rank) + " exceeds " + p->name + " (" +
                        std::to_string(part.rows) + " x " + std::to_string(in) + ")");
    }
    if (p->experts) {
      // PEFT's adapters on experts (target_parameters) take no dropout.
      if (config.dropout != 0.0) {
        throw ConfigError("lora.dropout: " + c10::str(config.dropout) + " with adapters on " + p->name +
                          ", a mixture's experts, which take no dropout (as PEFT's): set lora.dropout=0");
      }
      dynamic_cast<MixtureOfExpertsImpl&>(*p->owner).add_lora(part.part, config.rank, config.alpha);
      names.push_back(p->name);
      continue;
    }
    LoraOptions options(in, part.rows, config.rank);
    options.row_offset(part.row_offset).alpha(config.alpha).dropout(config.dropout);
    adapters_of(*p->owner)->add(*p->owner, part.part, part.projection, options);
    names.push_back(p->name);
  }
  return names;
}

bool is_adapter_tensor(const std::string& name) {
  return name.rfind("lora_", 0) == 0 || name.find(".lora_") != std::string::npos;
}

void merge_lora(Model& model) {
  for (const auto& item : model.module()->named_modules()) {
    if (auto* adapters = adapters_of(*item.value())) adapters->merge_into_weights(*item.value());
    if (auto* moe = dynamic_cast<MixtureOfExpertsImpl*>(item.value().get())) moe->merge_lora();
  }
  model.lora.reset();
}

LoraState new_lora_state(const std::string& base_dir, const LoraConfig& config, std::vector<std::string> trained) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(base_dir) / kLoraStateFile)) {
    throw std::runtime_error(base_dir + ": holds LoRA adapters itself; adapters are trained on a plain checkpoint "
                             "(zoo export-hf or a full fine-tune merges them into one)");
  }
  LoraState state;
  state.config = config;
  state.base = fs::canonical(base_dir).string();
  state.base_hash = file_hash((fs::path(base_dir) / "model.pt").string());
  state.trained = std::move(trained);
  return state;
}

void read_adapter_rows(Model& model, const std::shared_ptr<const AdapterRows>& rows) {
  for (const auto& item : model.module()->named_modules())
    if (auto* adapters = adapters_of(*item.value())) adapters->read_rows(rows);
}

void serve_adapter_stacks(Model& model, const std::map<std::string, std::pair<torch::Tensor, torch::Tensor>>& stacks) {
  for (const auto& p : projection_names(model)) {
    if (p.experts) continue;
    const auto found = stacks.find(p.name);
    auto* adapters = adapters_of(*p.owner);
    if (found == stacks.end()) {
      adapters->serve(p.part.part, p.part.projection, p.part.row_offset, {}, {});
    } else {
      adapters->serve(p.part.part, p.part.projection, p.part.row_offset, found->second.first, found->second.second);
    }
  }
}

void train_lora(Model& model, LoraState state, std::ostream& log) {
  const auto adapted = attach_lora(model, state.config);
  const std::set<std::string> trained(state.trained.begin(), state.trained.end());
  for (auto& p : model.module()->named_parameters()) {
    p.value().set_requires_grad(is_adapter_tensor(p.key()) || trained.count(p.key()) > 0);
  }
  log << "lora: rank " << state.config.rank << ", alpha " << state.config.alpha << ", dropout "
      << state.config.dropout << " on " << adapted.size() << " projections (" << join(state.config.targets)
      << "); the base stays frozen" << (trained.empty() ? "" : "; trained in full: " + join(state.trained)) << "\n";
  model.lora = std::move(state);
}

}  // namespace zoo
