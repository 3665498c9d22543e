#pragma once
// Cross-entropy of a linear output layer, fused and in row chunks (as Liger-Kernel's fused
// linear cross-entropy): the (N, V) logits of a language-model head (206 MB for GPT-2 small at
// B=4, T=256, and as much again for their gradient) never exist whole. Each chunk's logits are
// made, reduced to its loss and, when gradients are wanted, to its share of the gradients of the
// hidden states and of the weight right away; backward only scales those.

#include <cstdint>

#include <torch/types.h>

namespace zoo {

// The rows of a chunk on `device` for `rows` rows of `vocab` logits (linear_cross_entropy's
// chunk_rows = 0): on the CPU at least 8M logits and at least 512 rows while they stay within
// 256 MB of float32 (large enough products for the CPU's GEMM); on a GPU one chunk when the float32 logits fit `budget_bytes` (0: kGpuLossBudgetBytes),
// else the fewest equal chunks that fit, in multiples of 128 rows where the budget allows.
constexpr int64_t kGpuLossBudgetBytes = int64_t{1} << 30;
int64_t loss_chunk_rows(const torch::Device& device, int64_t rows, int64_t vocab, int64_t budget_bytes = 0);

// The type the products of `hidden` are made in: autocast's where it is on for its device (not
// for float64), else its own. A frozen head dequantized for the loss is made in it.
c10::ScalarType loss_product_type(const torch::Tensor& hidden);

// Mean over the rows whose label is not `ignore_index` of the cross-entropy of
// logits = hidden weight^T against labels, with label smoothing as torch.nn.functional.
// cross_entropy applies it. hidden (N, d), weight (V, d), labels (N). 0 (with zero gradients)
// when no row has a label. `chunk_rows` 0 picks loss_chunk_rows(hidden's device, N, V). Nothing
// is read back to the host. `softcap` > 0: the
// logits are cap * tanh(logit / cap) (Gemma 2's final_logit_softcapping, kernels/math_attention.h).
torch::Tensor linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& labels,
                                   double label_smoothing = 0.0, int64_t ignore_index = -100, int64_t chunk_rows = 0,
                                   double softcap = 0.0);

}  // namespace zoo
