#include "layers/lora.h"

#include <algorithm>
#include <cmath>

#include <torch/torch.h>

#include "kernels/linear.h"

namespace zoo {

LoraImpl::LoraImpl(const LoraOptions& options) : options(options) { reset(); }

void LoraImpl::reset() {
  TORCH_CHECK(options.rank() > 0, "lora: rank must be positive, got ", options.rank());
  TORCH_CHECK(options.rank() <= std::min(options.in_features(), options.rows()), "lora: rank ", options.rank(),
              " exceeds the adapted projection (", options.rows(), " x ", options.in_features(), ")");
  A = register_parameter("A", torch::empty({options.rank(), options.in_features()}));
  B = register_parameter("B", torch::zeros({options.rows(), options.rank()}));
  // torch.nn.Linear's default init, which PEFT keeps for A: Kaiming-uniform with a = sqrt(5).
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(A, std::sqrt(5.0));
  dropout = register_module("dropout", torch::nn::Dropout(options.dropout()));
}

torch::Tensor LoraImpl::forward(const torch::Tensor& x) {
  const auto low = project(options.dropout() > 0 ? dropout->forward(x) : x, A);  // (..., r)
  return project(low, B) * options.scaling();                                     // (..., rows)
}

torch::Tensor LoraImpl::delta_weight() const { return torch::matmul(B, A) * options.scaling(); }

ExpertLoraImpl::ExpertLoraImpl(const ExpertLoraOptions& options) : options(options) { reset(); }

void ExpertLoraImpl::reset() {
  const auto& o = options;
  TORCH_CHECK(o.rank() > 0, "lora: rank must be positive, got ", o.rank());
  TORCH_CHECK(o.rank() <= std::min(o.in_features(), o.rows()), "lora: rank ", o.rank(), " exceeds the experts' (",
              o.rows(), " x ", o.in_features(), ")");
  const double bound = 1.0 / std::sqrt(static_cast<double>(o.in_features()));
  A = register_parameter("A", torch::empty({o.experts(), o.rank(), o.in_features()}).uniform_(-bound, bound));
  B = register_parameter("B", torch::zeros({o.experts(), o.rows(), o.rank()}));
}

torch::Tensor ExpertLoraImpl::forward(const torch::Tensor& x, int64_t e) {
  return torch::matmul(torch::matmul(x, A[e].t()), B[e].t()) * options.scaling();
}

torch::Tensor ExpertLoraImpl::delta_weight() const { return torch::matmul(B, A) * options.scaling(); }

void ProjectionAdapters::add(torch::nn::Module& owner, const std::string& part, const torch::nn::Linear& projection,
                             const LoraOptions& options) {
  auto adapter = owner.register_module("lora_" + part, Lora(options));
  adapter->to(projection->weight.device(), projection->weight.scalar_type());
  adapter->train(owner.is_training());
  entries_.push_back({part, projection.get(), projection, adapter});
}

torch::Tensor ProjectionAdapters::project(const torch::nn::Linear& projection, const torch::Tensor& x) const {
  auto y = zoo::project(projection, x);
  std::vector<const Entry*> mine;
  for (const auto& e : entries_)
    if (e.projection == projection.get()) mine.push_back(&e);
  if (mine.empty()) return y;
  std::sort(mine.begin(), mine.end(), [](const Entry* a, const Entry* b) {
    return a->adapter->options.row_offset() < b->adapter->options.row_offset();
  });
  // Each part's rows plus its update, the rows between them as they are, joined once.
  std::vector<torch::Tensor> pieces;
  int64_t row = 0;
  for (const Entry* e : mine) {
    const auto& o = e->adapter->options;
    if (o.row_offset() > row) pieces.push_back(y.narrow(-1, row, o.row_offset() - row));
    pieces.push_back(y.narrow(-1, o.row_offset(), o.rows()) + e->adapter.ptr()->forward(x));
    row = o.row_offset() + o.rows();
  }
  if (row < y.size(-1)) pieces.push_back(y.narrow(-1, row, y.size(-1) - row));
  return pieces.size() == 1 ? pieces[0] : torch::cat(pieces, -1);
}

void ProjectionAdapters::merge_into_weights(torch::nn::Module& owner) {
  torch::NoGradGuard no_grad;
  for (auto& e : entries_) {
    const auto& o = e.adapter->options;
    auto rows = e.holder->weight.narrow(0, o.row_offset(), o.rows());
    rows.add_(e.adapter->delta_weight().to(rows.scalar_type()));
    owner.unregister_module("lora_" + e.part);
  }
  entries_.clear();
}

}  // namespace zoo
