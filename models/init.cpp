#include "models/init.h"

#include <cmath>

#include <torch/torch.h>

#include "core/strings.h"
#include "layers/attention.h"
#include "layers/feed_forward.h"
#include "layers/mixture_of_experts.h"
#include "layers/norm.h"
#include "layers/position_bias.h"
#include "layers/positions.h"

namespace zoo {
namespace {

void normal(torch::Tensor& w, double std) { w.normal_(0.0, std); }

// T5: different scales for the q, k and v row blocks of one fused projection.
void init_t5_attention(AttentionImpl& attn, const ModelConfig& c) {
  const double d = static_cast<double>(c.d_model);
  const int64_t hd = attn.options.resolved_head_dim();
  const int64_t q_rows = attn.options.n_heads() * hd;
  const double q_std = 1.0 / std::sqrt(d * hd), kv_std = 1.0 / std::sqrt(d);
  if (attn.qkv) {
    attn.qkv->weight.narrow(0, 0, q_rows).normal_(0.0, q_std);
    attn.qkv->weight.narrow(0, q_rows, attn.qkv->weight.size(0) - q_rows).normal_(0.0, kv_std);
  } else {
    attn.q->weight.normal_(0.0, q_std);
    for (auto* l : {&attn.kv, &attn.k, &attn.v})
      if (*l) (*l)->weight.normal_(0.0, kv_std);
  }
  attn.out->weight.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(q_rows)));
}

}  // namespace

void initialize_weights(torch::nn::Module& model, const ModelConfig& c) {
  torch::NoGradGuard no_grad;
  const int64_t layers = c.is_encoder_decoder()
                             ? c.resolved_encoder_layers() + c.resolved_decoder_layers()
                             : c.n_layers;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    const std::string& name = item.key();
    auto* module = item.value().get();
    if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(module)) {
      auto& w = linear->weight;
      switch (c.init) {
        case InitScheme::kNormal:
          normal(w, c.init_std);
          break;
        case InitScheme::kGpt2: {
          const bool residual = ends_with(name, "attn.out") || ends_with(name, "ff.down");
          normal(w, residual ? c.init_std / std::sqrt(2.0 * layers) : c.init_std);
          break;
        }
        case InitScheme::kT5:
          // Attention projections are redone below, with their module's shapes at hand.
          if (ends_with(name, "ff.down")) normal(w, 1.0 / std::sqrt(double(c.d_ff)));
          else if (ends_with(name, "ff.up") || ends_with(name, "ff.gate")) normal(w, 1.0 / std::sqrt(double(c.d_model)));
          else normal(w, 1.0);  // heads (lm_head); T5 scales them at init by 1
          break;
        case InitScheme::kXavier:
          torch::nn::init::xavier_uniform_(w);
          break;
      }
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (auto* emb = dynamic_cast<torch::nn::EmbeddingImpl*>(module)) {
      auto& w = emb->weight;
      switch (c.init) {
        case InitScheme::kNormal:
        case InitScheme::kGpt2:
          normal(w, c.init_std);
          break;
        case InitScheme::kT5:
          normal(w, ends_with(name, "relative_attention_bias") ? 1.0 / std::sqrt(double(c.d_model)) : 1.0);
          break;
        case InitScheme::kXavier:
          normal(w, 1.0 / std::sqrt(double(c.d_model)));
          break;
      }
      const bool token_table = ends_with(name, "token_embedding");
      if (token_table && (c.family == Family::kBert || c.family == Family::kTransformer)) {
        w[c.pad_id].zero_();
      }
    } else if (auto* norm = dynamic_cast<NormImpl*>(module)) {
      norm->reset_parameters();
    } else if (auto* moe = dynamic_cast<MixtureOfExpertsImpl*>(module)) {
      // transformers' MoE init: every expert and the router N(0, initializer_range); gpt2 scales
      // the residual projection (down) as it does a dense feed-forward's.
      const double std = c.init == InitScheme::kXavier || c.init == InitScheme::kT5 ? 1.0 / std::sqrt(double(c.d_model))
                                                                                      : c.init_std;
      normal(moe->router, std), normal(moe->gate_up, std);
      normal(moe->down, c.init == InitScheme::kGpt2 ? std / std::sqrt(2.0 * layers) : std);
    }
  }
  if (c.init == InitScheme::kT5) {
    for (const auto& item : model.named_modules("", /*include_self=*/false)) {
      if (auto* attn = dynamic_cast<AttentionImpl*>(item.value().get())) init_t5_attention(*attn, c);
    }
  }
}

}  // namespace zoo
