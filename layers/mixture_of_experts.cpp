#include "layers/mixture_of_experts.h"

#include <optional>
#include <stdexcept>

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "layers/feed_forward.h"

namespace zoo {
namespace {

void validate(const MixtureOfExpertsOptions& o) {
  if (o.d_model() <= 0 || o.d_ff() <= 0) {
    throw std::invalid_argument(c10::str("mixture of experts: d_model (", o.d_model(), ") and d_ff (", o.d_ff(),
                                         ") must be positive"));
  }
  if (o.experts() < 2 || o.top_k() < 1 || o.top_k() > o.experts()) {
    throw std::invalid_argument(c10::str("mixture of experts: ", o.experts(), " experts with top_k ", o.top_k(),
                                         " (needs at least 2 experts and 1 <= top_k <= experts)"));
  }
  if (!is_gated(o.activation())) {
    throw std::invalid_argument("mixture of experts: each expert is a gated feed-forward (swiglu, geglu, "
                                "geglu_tanh), not " + to_string(o.activation()));
  }
}

// A stack (experts, out, in) as the experts' products read it: its float weights, or its
// quantized ones (looked up once a forward, not once an expert).
struct Stack {
  Stack(const MixtureOfExpertsImpl& m, const torch::Tensor& weights)
      : weights(weights), quantized(quantized_weight_of(m, weights)), experts(m.options.experts()) {}
  const torch::Tensor& weights;
  std::optional<QuantizedWeight> quantized;
  int64_t experts;

  // x W_e^T with expert e's weight: a quantized stack's rows e * out .. (e + 1) * out.
  torch::Tensor product(int64_t e, const torch::Tensor& x) const {
    if (!quantized) return torch::matmul(x, weights[e].t());
    const int64_t out = quantized->out_features() / experts;
    return quantized_project(x, quantized->rows(e * out, out));
  }
};

// Expert e's gated feed-forward of the rows of x: down(act(gate x) * up x).
torch::Tensor expert(const MixtureOfExpertsImpl& m, const Stack& gate_up_stack, const Stack& down_stack, int64_t e,
                     const torch::Tensor& x) {
  const int64_t f = m.options.d_ff();
  auto gate_up = gate_up_stack.product(e, x);  // (n, 2 d_ff)
  if (m.lora_gate_up) gate_up = gate_up + m.lora_gate_up.ptr()->forward(x, e);
  const auto h = activate(gate_up.narrow(-1, 0, f), m.options.activation()) * gate_up.narrow(-1, f, f);
  auto y = down_stack.product(e, h);
  if (m.lora_down) y = y + m.lora_down.ptr()->forward(h, e);
  return y;
}

}  // namespace

MixtureOfExpertsImpl::MixtureOfExpertsImpl(const MixtureOfExpertsOptions& options) : options(options) { reset(); }

void MixtureOfExpertsImpl::reset() {
  validate(options);
  const int64_t e = options.experts(), d = options.d_model(), f = options.d_ff();
  router = register_parameter("router", torch::randn({e, d}) * 0.02);
  gate_up = register_parameter("gate_up", torch::randn({e, 2 * f, d}) * 0.02);
  down = register_parameter("down", torch::randn({e, d, f}) * 0.02);
}

std::pair<int64_t, int64_t> MixtureOfExpertsImpl::lora_shape(const std::string& part) const {
  // From the options: a quantized stack's parameter is emptied.
  if (part == "gate_up") return {2 * options.d_ff(), options.d_model()};
  TORCH_CHECK(part == "down", "mixture of experts: no part '", part, "' (gate_up, down)");
  return {options.d_model(), options.d_ff()};
}

void MixtureOfExpertsImpl::add_lora(const std::string& part, int64_t rank, double alpha) {
  const auto [rows, in] = lora_shape(part);
  auto adapter = register_module("lora_" + part,
                                 ExpertLora(ExpertLoraOptions(options.experts(), in, rows, rank).alpha(alpha)));
  adapter->to(gate_up.device(), gate_up.scalar_type());
  adapter->train(is_training());
  (part == "gate_up" ? lora_gate_up : lora_down) = adapter;
}

void MixtureOfExpertsImpl::merge_lora() {
  torch::NoGradGuard no_grad;
  for (auto* adapter : {&lora_gate_up, &lora_down}) {
    if (!*adapter) continue;
    auto& weight = adapter == &lora_gate_up ? gate_up : down;
    weight.add_((*adapter)->delta_weight().to(weight.scalar_type()));
    unregister_module(adapter == &lora_gate_up ? "lora_gate_up" : "lora_down");
    *adapter = nullptr;
  }
}

Routing route(const torch::Tensor& router_logits, int64_t top_k, bool normalize) {
  const auto probs = torch::softmax(router_logits.to(torch::kFloat), -1);
  auto [weights, experts] = probs.topk(top_k, -1);
  if (normalize) weights = weights / weights.sum(-1, /*keepdim=*/true);
  return {experts, weights};
}

MixtureOfExpertsOutput MixtureOfExpertsImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.size(-1) == options.d_model(), "mixture of experts: expected (..., ", options.d_model(), "), got ",
              x.sizes());
  const int64_t k = options.top_k(), n_experts = options.experts();
  const auto flat = x.reshape({-1, options.d_model()});
  const auto logits = torch::matmul(flat, router.t());  // (N, E)
  const auto routing = route(logits, k, options.normalize_top_k());
  // The N * k assignments grouped by expert: each group is one gather, three matmuls, one add.
  const auto expert_of = routing.experts.reshape(-1);
  const auto order = expert_of.argsort(/*stable=*/true);
  const auto token_of = order.div(k, "floor");
  const auto weight_of = routing.weights.reshape(-1).index_select(0, order);
  const auto counts = torch::bincount(expert_of, {}, n_experts).cpu();  // the groups' sizes, on the host
  auto out = torch::zeros_like(flat);
  const Stack gate_up_stack(*this, gate_up), down_stack(*this, down);
  int64_t start = 0;
  for (int64_t e = 0; e < n_experts; ++e) {
    const int64_t n = counts[e].item<int64_t>();
    if (n == 0) continue;
    const auto tokens = token_of.narrow(0, start, n);
    // Weighted in float32 and cast back (Mixtral), or in the input's dtype (Qwen3-MoE).
    const auto y = expert(*this, gate_up_stack, down_stack, e, flat.index_select(0, tokens));
    const auto weight = weight_of.narrow(0, start, n).unsqueeze(1);
    out.index_add_(0, tokens, options.round_weights() ? y * weight.to(y.scalar_type())
                                                      : (y.to(torch::kFloat) * weight).to(flat.scalar_type()));
    start += n;
  }
  return {out.view(x.sizes()), logits.to(torch::kFloat)};
}

torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits, int64_t top_k,
                                  const torch::Tensor& token_mask) {
  TORCH_CHECK(!router_logits.empty(), "load_balancing_loss: no router logits");
  const int64_t n_experts = router_logits.front().size(-1);
  const auto device = router_logits.front().device();
  auto assigned = torch::zeros({n_experts}, torch::dtype(torch::kFloat).device(device));
  auto probability = torch::zeros({n_experts}, torch::dtype(torch::kFloat).device(device));
  torch::Tensor rows = torch::zeros({}, torch::dtype(torch::kFloat).device(device));
  for (const auto& logits : router_logits) {
    const auto probs = torch::softmax(logits.to(torch::kFloat), -1);  // (N, E)
    const auto chosen = torch::one_hot(std::get<1>(probs.topk(top_k, -1)), n_experts).to(torch::kFloat);  // (N, k, E)
    if (token_mask.defined()) {
      const auto m = token_mask.reshape(-1).to(device, torch::kFloat);
      assigned = assigned + (chosen * m.view({-1, 1, 1})).sum({0, 1});
      probability = probability + (probs * m.unsqueeze(1)).sum(0);
      rows = rows + m.sum();
    } else {
      assigned = assigned + chosen.sum({0, 1});
      probability = probability + probs.sum(0);
      rows = rows + static_cast<double>(probs.size(0));
    }
  }
  return (assigned / rows * (probability / rows)).sum() * static_cast<double>(n_experts);
}

torch::Tensor mixture_of_experts_reference(const MixtureOfExpertsImpl& moe, const torch::Tensor& x) {
  const auto flat = x.reshape({-1, moe.options.d_model()});
  const auto routing = route(torch::matmul(flat, moe.router.t()), moe.options.top_k(), moe.options.normalize_top_k());
  std::vector<torch::Tensor> rows;
  for (int64_t t = 0; t < flat.size(0); ++t) {
    auto row = torch::zeros({moe.options.d_model()}, flat.options());
    for (int64_t j = 0; j < moe.options.top_k(); ++j) {
      const int64_t e = routing.experts[t][j].item<int64_t>();
      const auto v = flat[t];
      const int64_t f = moe.options.d_ff();
      const auto gate = moe.gate_up[e].narrow(0, 0, f), up = moe.gate_up[e].narrow(0, f, f);
      const auto h = activate(gate.mv(v), moe.options.activation()) * up.mv(v);
      const auto y = moe.down[e].mv(h), weight = routing.weights[t][j];
      row = row + (moe.options.round_weights() ? y * weight.to(y.scalar_type())
                                               : (y.to(torch::kFloat) * weight).to(flat.scalar_type()));
    }
    rows.push_back(row);
  }
  return torch::stack(rows).view(x.sizes());
}

}  // namespace zoo
