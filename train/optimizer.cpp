#include "train/optimizer.h"

#include <cmath>
#include <set>

#include <ATen/cpu/vec/vec.h>
#include <torch/torch.h>

#include "kernels/parallel.h"
#include "layers/norm.h"

namespace zoo {
namespace {

// torch::optim::AdamW with each parameter's update done in one pass over its memory: decay,
// both moments and the step read and write p, m and v once, instead of the eight tensor-wide
// operations (and their temporaries) of LibTorch's implementation. Same state, same checkpoints,
// same arithmetic up to rounding; CUDA, other dtypes or amsgrad take LibTorch's update.
class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;

  torch::Tensor step(LossClosure closure = nullptr) override {
    for (const auto& group : param_groups()) {
      const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
      for (const auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        const bool fusable = !o.amsgrad() && p.device().is_cpu() && p.scalar_type() == torch::kFloat &&
                             p.is_contiguous() && !p.grad().is_sparse() && p.grad().is_contiguous() &&
                             p.grad().scalar_type() == torch::kFloat;
        if (!fusable) return torch::optim::AdamW::step(closure);
      }
    }
    torch::NoGradGuard no_grad;
    torch::Tensor loss;
    if (closure) {
      at::AutoGradMode enable(true);
      loss = closure();
    }
    for (auto& group : param_groups()) {
      const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
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
        state.step(state.step() + 1);
        update(p, p.grad(), state.exp_avg(), state.exp_avg_sq(), o, state.step());
      }
    }
    return loss;
  }

 private:
  // LibTorch's order of operations: p *= 1 - lr wd; m = b1 m + (1 - b1) g;
  // v = b2 v + (1 - b2) g^2; p += -lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps).
  static void update(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v,
                     const torch::optim::AdamWOptions& o, int64_t step) {
    using Vec = at::vec::Vectorized<float>;
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    const float decay = static_cast<float>(1.0 - o.lr() * o.weight_decay());
    const float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
    const float a1 = static_cast<float>(1.0 - beta1), a2 = static_cast<float>(1.0 - beta2);
    const float root_bc2 = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, static_cast<double>(step))));
    const float neg_step = static_cast<float>(-o.lr() / (1.0 - std::pow(beta1, static_cast<double>(step))));
    const float eps = static_cast<float>(o.eps());
    float* pp = p.data_ptr<float>();
    const float* gp = g.data_ptr<float>();
    float* mp = m.data_ptr<float>();
    float* vp = v.data_ptr<float>();
    parallel_for(0, p.numel(), 32768, [&](int64_t begin, int64_t end) {
      int64_t i = begin;
      for (; i + Vec::size() <= end; i += Vec::size()) {
        const Vec gi = Vec::loadu(gp + i);
        const Vec mi = Vec::loadu(mp + i) * Vec(b1) + gi * Vec(a1);
        const Vec vi = Vec::loadu(vp + i) * Vec(b2) + gi * gi * Vec(a2);
        const Vec denom = vi.sqrt() / Vec(root_bc2) + Vec(eps);
        const Vec pi = Vec::loadu(pp + i) * Vec(decay) + Vec(neg_step) * (mi / denom);
        mi.store(mp + i);
        vi.store(vp + i);
        pi.store(pp + i);
      }
      for (; i < end; ++i) {
        const float gi = gp[i];
        mp[i] = mp[i] * b1 + gi * a1;
        vp[i] = vp[i] * b2 + gi * gi * a2;
        pp[i] = pp[i] * decay + neg_step * (mp[i] / (std::sqrt(vp[i]) / root_bc2 + eps));
      }
    });
  }
};

}  // namespace

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
