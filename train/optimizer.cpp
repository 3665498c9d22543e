#include "train/optimizer.h"

#include <set>

#include <torch/torch.h>

#include "layers/norm.h"

namespace zoo {

ParameterGroups parameter_groups(const torch::nn::Module& model) {
  ParameterGroups groups;
  std::set<const void*> seen;
  auto add = [&](const std::string& name, const torch::Tensor& p, bool decay) {
    if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) return;
    (decay ? groups.decay : groups.no_decay).push_back(p);
    (decay ? groups.decay_names : groups.no_decay_names).push_back(name);
  };
  // Embeddings and norms first, so a tied matrix counts as the embedding it also is.
  for (const auto& item : model.named_modules()) {
    const auto* m = item.value().get();
    const bool table = dynamic_cast<const torch::nn::EmbeddingImpl*>(m) != nullptr ||
                       dynamic_cast<const NormImpl*>(m) != nullptr ||
                       dynamic_cast<const torch::nn::LayerNormImpl*>(m) != nullptr;
    if (!table) continue;
    for (const auto& p : m->named_parameters(/*recurse=*/false)) {
      add(item.key().empty() ? p.key() : item.key() + "." + p.key(), p.value(), false);
    }
  }
  for (const auto& p : model.named_parameters()) {
    const std::string& name = p.key();
    const bool bias = name == "bias" || (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0);
    add(name, p.value(), !bias && p.value().dim() >= 2);
  }
  return groups;
}

std::unique_ptr<torch::optim::AdamW> make_adamw(const torch::nn::Module& model, const OptimizerOptions& o) {
  auto groups = parameter_groups(model);
  auto options = [&](double decay) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(decay));
  };
  std::vector<torch::optim::OptimizerParamGroup> param_groups;
  param_groups.emplace_back(groups.decay, options(o.weight_decay));
  param_groups.emplace_back(groups.no_decay, options(0.0));
  return std::make_unique<torch::optim::AdamW>(param_groups, torch::optim::AdamWOptions(o.lr));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
}

}  // namespace zoo
