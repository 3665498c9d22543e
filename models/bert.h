#pragma once
// BERT family (Devlin et al., 2019): token + position + segment embeddings, LayerNorm, a
// bidirectional post-norm encoder, a pooler, and task heads. ModernBERT (Warner et al., 2024) is
// a config of it: rotary positions, no segments, pre-norm without layer 0's attention norm, GeGLU,
// local layers with a two-sided window, mean or [CLS] pooling and a head transform.

#include <cstdint>
#include <memory>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "layers/block.h"
#include "layers/norm.h"
#include "layers/position_encoding.h"
#include "models/config.h"
#include "models/layer_options.h"

namespace zoo {

struct BertOutput {
  torch::Tensor sequence_output;  // (B, T, d_model)
  torch::Tensor pooled_output;    // (B, d_model): the pooler's; undefined without one
  // By head: mlm (B, T, V); nsp (B, 2); sequence_classification (B, num_labels);
  // token_classification (B, T, num_labels); pretraining: mlm in logits, nsp in nsp_logits.
  torch::Tensor logits;
  torch::Tensor nsp_logits;
};

// The masked-LM head: dense + activation + LayerNorm, then a decoder tied to the word
// embeddings plus its own bias.
// Dense, activation (the gate's of a gated kind) and norm: BERT's prediction-head transform, of
// its masked LM and of ModernBERT's classifiers.
torch::Tensor transform_features(torch::nn::Linear& dense, Norm& norm, const torch::Tensor& x, Activation activation);

// The masked-LM parameter a classifier's parameter `name` starts from where a checkpoint lacks it:
// ModernBERT's head transform from the masked LM's (transformers names both `head`); "" for none.
std::string masked_lm_source(const std::string& name);

// ModernBERT's head before a classifier: transform_features with its own weights.
class BertHeadTransformImpl : public torch::nn::Cloneable<BertHeadTransformImpl> {
 public:
  explicit BertHeadTransformImpl(const ModelConfig& config);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);

  ModelConfig config;
  torch::nn::Linear dense{nullptr};
  Norm norm{nullptr};
};
TORCH_MODULE(BertHeadTransform);

class BertMaskedLMHeadImpl : public torch::nn::Cloneable<BertMaskedLMHeadImpl> {
 public:
  explicit BertMaskedLMHeadImpl(const ModelConfig& config);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& sequence_output, const torch::nn::Embedding& word_embeddings);

  ModelConfig config;
  torch::nn::Linear dense{nullptr};
  Norm norm{nullptr};
  torch::Tensor bias;  // (vocab_size)
};
TORCH_MODULE(BertMaskedLMHead);

// How many leading tokens Longformer's layers attend globally when the caller marks none:
// longformer_global_tokens, or with 0 the first token under a sequence_classification head (as
// transformers' LongformerForSequenceClassification); 0 for other attentions.
int64_t default_global_tokens(const ModelConfig& config);

class BertImpl : public torch::nn::Cloneable<BertImpl> {
 public:
  // `config` must be valid: build_model validates it once before any module is built.
  explicit BertImpl(ModelConfig config);
  void reset() override;

  // input_ids (B, T); attention_mask (B, T) 1 at real tokens; token_type_ids (B, T) segments.
  // ring: context parallelism (kernels/ring_attention.h). input_ids, token_type_ids and
  //   position_ids (B, T) are then this rank's zigzag tokens with their global positions, and
  //   attention_mask the whole sequence's (B, N * T) in global order; attention runs around the
  //   ring. The pooled output (the [CLS] token's, which rank 0 holds) and the heads that read it
  //   are left undefined.
  // A model without segment embeddings (type_vocab_size 0) ignores token_type_ids.
  // global_attention_mask (B, T), attention longformer: nonzero at the tokens attended globally;
  //   undefined: the first default_global_tokens(config).
  BertOutput forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {},
                     const torch::Tensor& token_type_ids = {}, const torch::Tensor& position_ids = {},
                     const std::shared_ptr<RingExchange>& ring = nullptr,
                     const torch::Tensor& global_attention_mask = {});

  ModelConfig config;
  // Training recomputes each block's activations in backward instead of keeping them.
  bool activation_checkpointing = false;
  torch::nn::Embedding token_embedding{nullptr};
  PositionEncoding positions{nullptr};
  torch::nn::Embedding token_type_embedding{nullptr};  // none with type_vocab_size 0
  Norm embedding_norm{nullptr};
  torch::nn::Dropout dropout{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  Norm final_norm{nullptr};  // pre-norm only
  torch::nn::Linear pooler{nullptr};
  BertHeadTransform head_transform{nullptr};
  BertMaskedLMHead mlm_head{nullptr};
  torch::nn::Linear nsp_head{nullptr};
  torch::nn::Linear classifier{nullptr};

 private:
  std::vector<TransformerBlock> block_list_;

  // The tokens a sequence head reads (B, d_model): the first, or the mean of the real ones.
  torch::Tensor pool(const torch::Tensor& x, const torch::Tensor& attention_mask) const;
};
TORCH_MODULE(Bert);

}  // namespace zoo
