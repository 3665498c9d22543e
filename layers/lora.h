#pragma once
// Low-rank adapters (LoRA; Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large Language
// Models"): a frozen projection y = x W^T + b learns only a rank-r update,
//   y = x W^T + b + (alpha / r) · dropout(x) A^T B^T,     A: (r, in), B: (rows, r),
// with A Kaiming-uniform and B zero, so that before the first update the adapted model is the
// base model exactly. `rows` may be a slice of the projection's output: a fused [q; k; v]
// projection carries one adapter per part, so that adapting only q and v behaves as PEFT's
// separate q_proj / v_proj adapters do.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

namespace zoo {

struct LoraOptions {
  LoraOptions(int64_t in_features, int64_t rows, int64_t rank) : in_features_(in_features), rows_(rows), rank_(rank) {}
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, rows);        // output rows adapted
  TORCH_ARG(int64_t, rank);
  TORCH_ARG(int64_t, row_offset) = 0;  // first adapted row of the projection's output
  // PEFT's and litgpt's usual starting point: the update scaled by alpha / rank = 2.
  TORCH_ARG(double, alpha) = 16.0;
  TORCH_ARG(double, dropout) = 0.0;  // on the adapter's input, in training only

 public:  // TORCH_ARG leaves the section private
  double scaling() const { return alpha_ / static_cast<double>(rank_); }
};

class LoraImpl : public torch::nn::Cloneable<LoraImpl> {
 public:
  explicit LoraImpl(const LoraOptions& options);
  void reset() override;
  // x: (..., in) -> the update of the adapted rows, (..., rows).
  torch::Tensor forward(const torch::Tensor& x);
  // (alpha / r) · B A: (rows, in), what merging adds to the weight's rows.
  torch::Tensor delta_weight() const;

  LoraOptions options;
  torch::Tensor A, B;
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(Lora);

// Which served adapter (slot) each row of a forward takes, when several adapters are served on
// one base (S-LoRA, Punica). The model runner sets it before each forward from each row's slot
// (-1: the base alone); every projection reads it.
struct AdapterRows {
  static constexpr int64_t kNone = -1, kMixed = -2;
  explicit AdapterRows(std::vector<int64_t> row_slots = {});
  // (rows, S) 1 at each row's slot, 0 elsewhere (a row of the base all 0), with `options`' type
  // and device; made once per forward (every projection's stacks have S slots).
  const torch::Tensor& one_hot(int64_t slots, const torch::TensorOptions& options) const;

  int64_t uniform = kNone;  // the slot every row takes; kNone: no row has one; kMixed: they differ
  std::vector<int64_t> row_slots;

 private:
  mutable torch::Tensor one_hot_;
};

// Each row's update from its own slot's adapter: x (rows, ..., in), A (S, r, in) and B (out, S, r)
// stacked by slot (zero-padded to one rank, each scale folded into B). A decoding step's rows take
// every slot's low-rank projection at once, keep each row's own slot's (a one-hot mask, zero for
// the base's rows) and project back at once: three ops however many slots, where gathering each
// row's A and B (Punica's BGMV) would copy them every step. A prefill's many tokens take each
// slot's rows apart (Punica's SGMV), two matmuls a slot.
torch::Tensor served_update(const AdapterRows& rows, const torch::Tensor& x, const torch::Tensor& A,
                            const torch::Tensor& B);
// The plain reference: each row's update from its slot's B A alone (zero for -1).
torch::Tensor served_update_reference(const std::vector<int64_t>& row_slots, const torch::Tensor& x,
                                      const torch::Tensor& A, const torch::Tensor& B);

// The adapters of one module's projections (an attention's q/k/v/out, a feed-forward's
// up/gate/down), each registered on that module as a child "lora_<part>".
class ProjectionAdapters {
 public:
  void add(torch::nn::Module& owner, const std::string& part, const torch::nn::Linear& projection,
           const LoraOptions& options);
  // `projection` applied to x, plus the updates of its adapters.
  torch::Tensor project(const torch::nn::Linear& projection, const torch::Tensor& x) const;
  // Adds every adapter's update into its projection's weight and unregisters the adapters:
  // the owner computes what it did, without them.
  void merge_into_weights(torch::nn::Module& owner);
  bool empty() const { return entries_.empty(); }

  // Served adapters (serve/adapter_bank.h): a part's stacks of every slot's A (S, r, in) and B
  // (rows, S, r), added to
  // the rows `rows` names. Replaces that part's stacks; undefined stacks remove them.
  void serve(const std::string& part, const torch::nn::Linear& projection, int64_t row_offset, torch::Tensor A,
             torch::Tensor B);
  void read_rows(std::shared_ptr<const AdapterRows> rows) { rows_ = std::move(rows); }
  struct Served {
    std::string part;
    const torch::nn::LinearImpl* projection;
    int64_t row_offset;
    torch::Tensor A, B;  // (S, r, in), (rows, S, r)
  };

  struct Entry {
    std::string part;
    const torch::nn::LinearImpl* projection;
    torch::nn::Linear holder;
    Lora adapter;
  };
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  // The projection with the model's own adapters (training's, or a LoRA checkpoint's).
  torch::Tensor own_project(const torch::nn::Linear& projection, const torch::Tensor& x) const;

  std::vector<Entry> entries_;
  std::vector<Served> served_;
  std::shared_ptr<const AdapterRows> rows_;
};

// LoRA on a stack of E experts' weights (E, rows, in) (layers/mixture_of_experts.h): one update
// of rank r per expert,
//   W_e + (alpha / r) B_e A_e,     A: (E, r, in), B: (E, rows, r),
// what PEFT's target_parameters adapts on transformers' experts (its ParamWrapper: lora_A rows
// e * r + j, lora_B columns j * E + e). A starts uniform in +-1/sqrt(in), as PEFT's, B at zero.
// No dropout: PEFT has none for these.
struct ExpertLoraOptions {
  ExpertLoraOptions(int64_t experts, int64_t in_features, int64_t rows, int64_t rank)
      : experts_(experts), in_features_(in_features), rows_(rows), rank_(rank) {}
  TORCH_ARG(int64_t, experts);
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, rows);
  TORCH_ARG(int64_t, rank);
  TORCH_ARG(double, alpha) = 16.0;

 public:  // TORCH_ARG leaves the section private
  double scaling() const { return alpha_ / static_cast<double>(rank_); }
};

class ExpertLoraImpl : public torch::nn::Cloneable<ExpertLoraImpl> {
 public:
  explicit ExpertLoraImpl(const ExpertLoraOptions& options);
  void reset() override;
  // The update of expert e for its rows x (n, in): (n, rows).
  torch::Tensor forward(const torch::Tensor& x, int64_t e);
  // (alpha / r) B_e A_e for every expert: (E, rows, in), what merging adds.
  torch::Tensor delta_weight() const;

  ExpertLoraOptions options;
  torch::Tensor A, B;
};
TORCH_MODULE(ExpertLora);

// A projection's output rows that a LoRA target can adapt: a whole projection, or one part of
// a fused one ([q; k; v] rows, [k; v] rows).
struct ProjectionPart {
  std::string part;                // q, k, v, out, up, gate, down
  torch::nn::Linear projection{nullptr};
  int64_t row_offset = 0, rows = 0;
};

}  // namespace zoo
