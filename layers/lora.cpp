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

AdapterRows::AdapterRows(std::vector<int64_t> slots) : row_slots(std::move(slots)) {
  if (std::none_of(row_slots.begin(), row_slots.end(), [](int64_t s) { return s >= 0; })) return;
  const bool one = std::all_of(row_slots.begin(), row_slots.end(), [&](int64_t s) { return s == row_slots.front(); });
  uniform = one ? row_slots.front() : kMixed;
}

const torch::Tensor& AdapterRows::one_hot(int64_t slots, const torch::TensorOptions& options) const {
  if (!one_hot_.defined() || one_hot_.size(1) != slots || one_hot_.scalar_type() != options.dtype() ||
      one_hot_.device() != options.device()) {
    const auto n = static_cast<int64_t>(row_slots.size());
    std::vector<float> mask(static_cast<size_t>(n * slots), 0.0f);
    for (int64_t i = 0; i < n; ++i)
      if (row_slots[i] >= 0) mask[static_cast<size_t>(i * slots + row_slots[i])] = 1.0f;
    one_hot_ = torch::tensor(mask).view({n, slots}).to(options.device(), options.dtype().toScalarType());
  }
  return one_hot_;
}

torch::Tensor served_update(const AdapterRows& rows, const torch::Tensor& x, const torch::Tensor& A,
                            const torch::Tensor& B) {
  const int64_t slots = A.size(0), rank = A.size(1), out = B.size(0);
  TORCH_CHECK(rows.uniform != AdapterRows::kNone, "served adapters: no row takes one");
  const auto n = static_cast<int64_t>(rows.row_slots.size());
  TORCH_CHECK(x.dim() >= 2 && x.size(0) == n, "served adapters: ", n, " rows' slots for an input of shape ", x.sizes());
  auto out_shape = x.sizes().vec();
  out_shape.back() = out;
  const int64_t tokens = x.numel() / x.size(-1);
  // A decoding step's few tokens: every slot at once (the extra arithmetic is the slots' count
  // times a rank's, tiny beside the base's projection), through zoo's own projection
  // (kernels/linear.h), whose few-rows kernel costs less than a BLAS call's threads would.
  constexpr int64_t kAllSlotsTokens = 64;
  if (tokens <= kAllSlotsTokens) {
    const auto flat = x.reshape({n, -1, x.size(-1)});                                // (n, T, in)
    auto low = project(flat, A.reshape({slots * rank, A.size(2)}));  // (n, T, S r)
    low = (low.view({n, -1, slots, rank}) * rows.one_hot(slots, low.options()).view({n, 1, slots, 1}))
              .view({n, -1, slots * rank});
    return project(low, B.reshape({out, slots * rank})).view(out_shape);  // (n, T, out)
  }
  // A prefill's: each slot's rows apart, their updates written into their rows.
  if (rows.uniform >= 0) return project(project(x, A[rows.uniform]), B.select(1, rows.uniform));
  auto update = torch::zeros(out_shape, x.options());
  std::vector<int64_t> seen;
  for (const int64_t s : rows.row_slots) {
    if (s < 0 || std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
    seen.push_back(s);
    std::vector<int64_t> mine;
    for (int64_t i = 0; i < n; ++i)
      if (rows.row_slots[i] == s) mine.push_back(i);
    const auto index = torch::tensor(mine, torch::kLong).to(x.device());
    update.index_copy_(0, index, project(project(x.index_select(0, index), A[s]), B.select(1, s)));
  }
  return update;
}

torch::Tensor served_update_reference(const std::vector<int64_t>& row_slots, const torch::Tensor& x,
                                      const torch::Tensor& A, const torch::Tensor& B) {
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < row_slots.size(); ++i) {
    const auto row = x[static_cast<int64_t>(i)];
    const auto s = row_slots[i];
    // (rows, in): the weight the slot's adapter adds
    const auto delta = s < 0 ? torch::zeros({B.size(0), A.size(2)}, A.options()) : torch::matmul(B.select(1, s), A[s]);
    out.push_back(torch::matmul(row, delta.t()));
  }
  return torch::stack(out);
}

void ProjectionAdapters::serve(const std::string& part, const torch::nn::Linear& projection, int64_t row_offset,
                               torch::Tensor A, torch::Tensor B) {
  served_.erase(std::remove_if(served_.begin(), served_.end(), [&](const Served& s) { return s.part == part; }),
                served_.end());
  if (A.defined()) served_.push_back({part, projection.get(), row_offset, std::move(A), std::move(B)});
}

torch::Tensor ProjectionAdapters::project(const torch::nn::Linear& projection, const torch::Tensor& x) const {
  auto y = own_project(projection, x);
  if (served_.empty() || rows_ == nullptr || rows_->uniform == AdapterRows::kNone) return y;
  for (const auto& s : served_) {
    if (s.projection != projection.get()) continue;
    y.narrow(-1, s.row_offset, s.B.size(0)).add_(served_update(*rows_, x, s.A, s.B));
  }
  return y;
}

torch::Tensor ProjectionAdapters::own_project(const torch::nn::Linear& projection, const torch::Tensor& x) const {
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
