#pragma once
// Weight initialisation by each family's published recipe, chosen by ModelConfig::init.

#include <torch/nn/module.h>

#include "models/config.h"

namespace zoo {

// Re-initialises every parameter of `model` (any family) by config.init:
//   normal: N(0, init_std) for linear weights and embeddings, zero biases (BERT, LLaMA);
//   gpt2:   normal, with residual output projections at init_std / sqrt(2 * n_layers)
//           (Radford et al., 2019, section 2.3);
//   t5:     Mesh TensorFlow's fan-in scaled normals: q ~ (d_model * head_dim)^-0.5,
//           k, v and feed-forward inputs ~ d_model^-0.5, attention outputs ~ (n_heads *
//           head_dim)^-0.5, feed-forward outputs ~ d_ff^-0.5, embeddings and heads ~ 1;
//   xavier: Glorot-uniform linears, embeddings N(0, d_model^-0.5) (Vaswani et al. / fairseq).
// Norm weights are 1, biases 0; the padding row of token embeddings is zero where the family
// does it (bert, transformer).
void initialize_weights(torch::nn::Module& model, const ModelConfig& config);

}  // namespace zoo
