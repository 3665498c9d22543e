#include "train/optimizer.h"

#include <array>
#include <optional>
#include <set>

#include <torch/torch.h>

#include "layers/norm.h"

namespace zoo {

void FusedAdamW::update(const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  const std::optional<torch::Tensor> skip = found_inf.defined() ? std::optional<torch::Tensor>(found_inf) : std::nullopt;
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    TORCH_CHECK(!o.amsgrad(), "FusedAdamW: amsgrad is not supported");
    // ATen's kernels take one dtype and device per call, as torch.optim groups them.
    std::map<std::pair<c10::ScalarType, std::string>, std::array<std::vector<torch::Tensor>, 5>> lists;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      TORCH_CHECK(!p.grad().is_sparse(), "FusedAdamW: sparse gradients are not supported");
      void* const key = p.unsafeGetTensorImpl();  // how LibTorch's optimizers key their state
      auto found = state_.find(key);
      if (found == state_.end()) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        found = state_.emplace(key, std::move(fresh)).first;
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*found->second);
      auto& step = steps_[key];
      if (!step.defined()) step = torch::full({}, static_cast<double>(state.step()), p.options().dtype(torch::kFloat));
      auto& l = lists[{p.scalar_type(), p.device().str()}];
      l[0].push_back(p), l[1].push_back(p.grad()), l[2].push_back(state.exp_avg()), l[3].push_back(state.exp_avg_sq());
      l[4].push_back(step);
    }
    const auto [beta1, beta2] = o.betas();
    for (auto& [kind, l] : lists) {
      // On the CPU foreach takes its per-tensor path, which would wrap the 1 into a tensor for every
      // step count: wrapped once here (as torch.optim's fused AdamW does), half the ops.
      if (l[4].front().is_cpu()) {
        torch::_foreach_add_(l[4], torch::ones({}, l[4].front().options()), 1.0);
      } else {
        torch::_foreach_add_(l[4], 1);
      }
      torch::_fused_adamw_(l[0], l[1], l[2], l[3], {}, l[4], o.lr(), beta1, beta2, o.weight_decay(), o.eps(),
                           /*amsgrad=*/false, /*maximize=*/false, std::nullopt, skip);
      if (skip) torch::_foreach_sub_(l[4], std::vector<torch::Tensor>(l[4].size(), *skip));
    }
  }
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable(true);
    loss = closure();
  }
  update();
  return loss;
}

void FusedAdamW::save(torch::serialize::OutputArchive& archive) const {
  for (const auto& [key, step] : steps_) {
    const auto found = state_.find(key);
    if (found == state_.end()) continue;
    static_cast<torch::optim::AdamWParamState&>(*found->second).step(static_cast<int64_t>(step.item<float>()));
  }
  torch::optim::AdamW::save(archive);
}

void FusedAdamW::load(torch::serialize::InputArchive& archive) {
  torch::optim::AdamW::load(archive);
  steps_.clear();  // made again from the loaded state's counts
}

torch::Tensor clip_gradients(const std::vector<torch::Tensor>& parameters, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  TORCH_CHECK(!grads.empty(), "clip_gradients: no parameter has a gradient");
  const auto norms = torch::_foreach_norm(grads, 2, torch::kFloat);
  const auto total = torch::linalg_vector_norm(torch::stack(norms), 2);
  const auto coefficient = (max_norm / (total + 1e-6)).clamp_max(1.0);
  torch::_foreach_mul_(grads, coefficient);
  return total;
}

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

std::unique_ptr<FusedAdamW> make_adamw(const torch::nn::Module& model, const OptimizerOptions& o) {
  auto groups = parameter_groups(model);
  auto options = [&](double decay) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(decay));
  };
  std::vector<torch::optim::OptimizerParamGroup> param_groups;
  param_groups.emplace_back(groups.decay, options(o.weight_decay));
  param_groups.emplace_back(groups.no_decay, options(0.0));
  return std::make_unique<FusedAdamW>(param_groups, torch::optim::AdamWOptions(o.lr));
}

void clear_gradients(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) p.mutable_grad() = torch::Tensor();
  }
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
}

}  // namespace zoo
