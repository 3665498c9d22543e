#include "models/bert.h"

#include <torch/torch.h>

#include "kernels/linear.h"
#include "layers/feed_forward.h"
#include "models/init.h"

namespace zoo {

torch::Tensor transform_features(torch::nn::Linear& dense, Norm& norm, const torch::Tensor& x, Activation activation) {
  return norm->forward(activate(project(dense, x), activation));
}

std::string masked_lm_source(const std::string& name) {
  const std::string transform = "head_transform.";
  return name.rfind(transform, 0) == 0 ? "mlm_head." + name.substr(transform.size()) : "";
}

BertHeadTransformImpl::BertHeadTransformImpl(const ModelConfig& config) : config(config) { reset(); }

void BertHeadTransformImpl::reset() {
  dense = register_module("dense", torch::nn::Linear(torch::nn::LinearOptions(config.d_model, config.d_model)
                                                          .bias(config.bias)));
  norm = register_module("norm", Norm(norm_options(config)));
}

torch::Tensor BertHeadTransformImpl::forward(const torch::Tensor& x) {
  return transform_features(dense, norm, x, config.activation);
}

BertMaskedLMHeadImpl::BertMaskedLMHeadImpl(const ModelConfig& config) : config(config) { reset(); }

void BertMaskedLMHeadImpl::reset() {
  dense = register_module("dense", torch::nn::Linear(torch::nn::LinearOptions(config.d_model, config.d_model)
                                                          .bias(config.bias)));
  norm = register_module("norm", Norm(norm_options(config)));
  bias = register_parameter("bias", torch::zeros({config.vocab_size}));
}

torch::Tensor BertMaskedLMHeadImpl::forward(const torch::Tensor& sequence_output,
                                            const torch::nn::Embedding& word_embeddings) {
  return project(transform_features(dense, norm, sequence_output, config.activation), word_embeddings) + bias;
}

BertImpl::BertImpl(ModelConfig config) : config(std::move(config)) { reset(); }

void BertImpl::reset() {
  const auto& c = config;
  TORCH_CHECK(c.family == Family::kBert, "Bert built from a config of another family");
  token_embedding = register_module("token_embedding", torch::nn::Embedding(c.vocab_size, c.d_model));
  positions = register_module("positions", PositionEncoding(position_options(c, /*bidirectional=*/true)));
  token_type_embedding =
      c.type_vocab_size > 0
          ? register_module("token_type_embedding", torch::nn::Embedding(c.type_vocab_size, c.d_model))
          : nullptr;
  embedding_norm = register_module(
      "embedding_norm", Norm(norm_options(c)));
  dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
  blocks = register_module("blocks", torch::nn::ModuleList());
  block_list_.clear();
  for (int64_t i = 0; i < c.n_layers; ++i) {
    block_list_.emplace_back(block_options(c, /*causal=*/false, /*cross_attention=*/false, i));
    blocks->push_back(block_list_.back());
  }
  final_norm = nullptr;
  if (c.norm_position == NormPosition::kPre) {
    final_norm = register_module(
        "final_norm", Norm(norm_options(c)));
  }
  pooler = c.pooler ? register_module("pooler", torch::nn::Linear(c.d_model, c.d_model)) : nullptr;
  head_transform = c.head_transform ? register_module("head_transform", BertHeadTransform(c)) : nullptr;
  mlm_head = nullptr;
  nsp_head = nullptr;
  classifier = nullptr;
  switch (c.head) {
    case BertHead::kNone: break;
    case BertHead::kMaskedLM: mlm_head = register_module("mlm_head", BertMaskedLMHead(c)); break;
    case BertHead::kNextSentence: nsp_head = register_module("nsp_head", torch::nn::Linear(c.d_model, 2)); break;
    case BertHead::kPretraining:  // masked LM and next sentence together
      mlm_head = register_module("mlm_head", BertMaskedLMHead(c));
      nsp_head = register_module("nsp_head", torch::nn::Linear(c.d_model, 2));
      break;
    case BertHead::kSequenceClassification:
    case BertHead::kTokenClassification:
      classifier = register_module("classifier", torch::nn::Linear(c.d_model, c.num_labels));
      break;
  }
  initialize_weights(*this, c);
}

int64_t default_global_tokens(const ModelConfig& config) {
  if (config.attention != AttentionKind::kLongformer) return 0;
  if (config.longformer_global_tokens > 0) return config.longformer_global_tokens;
  return config.head == BertHead::kSequenceClassification ? 1 : 0;
}

BertOutput BertImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                             const torch::Tensor& token_type_ids, const torch::Tensor& position_ids,
                             const std::shared_ptr<RingExchange>& ring, const torch::Tensor& global_attention_mask) {
  TORCH_CHECK(input_ids.dim() == 2, "BERT: input_ids must be (batch, tokens), got shape ",
              input_ids.sizes());
  const int64_t b = input_ids.size(0), t = input_ids.size(1);
  const int64_t sequence = ring ? t * ring->ranks() : t;
  TORCH_CHECK(sequence <= config.max_length(), "BERT: cannot forward ", sequence,
              " tokens, max_positions is ", config.max_length());
  for (const auto* m : {&token_type_ids, &position_ids}) {
    TORCH_CHECK(!m->defined() || m->sizes() == input_ids.sizes(),
                "BERT: token_type_ids and position_ids must match input_ids ", input_ids.sizes(), ", got ", m->sizes());
  }
  TORCH_CHECK(!attention_mask.defined() || (attention_mask.dim() == 2 && attention_mask.size(0) == b && attention_mask.size(1) == sequence),
              "BERT: attention_mask must be (", b, ", ", sequence, ")", ring ? " (the whole sequence's)" : "", ", got ",
              attention_mask.sizes());
  TORCH_CHECK(!ring || position_ids.defined(), "BERT: ring attention takes this rank's tokens with their global position_ids");
  auto ids = position_ids.defined()
                 ? position_ids
                 : torch::arange(t, input_ids.options().dtype(torch::kLong)).unsqueeze(0).expand({b, t});
  auto x = embed(token_embedding, input_ids);
  const auto pe = position_ids.defined() ? positions->embedding(ids, x.scalar_type())
                                         : positions->embedding(0, t, x.scalar_type(), x.device());
  if (pe.defined()) x = x + pe;
  if (token_type_embedding) {
    x = x + token_type_embedding->forward(token_type_ids.defined() ? token_type_ids : torch::zeros_like(input_ids));
  }
  x = dropout->forward(embedding_norm->forward(x));

  // One bias for every layer, and one without the window for the layers window_layers leaves out
  // (ModernBERT's global ones); rotary attention numbers positions 0..T-1 by itself, or around a
  // ring takes the global ones.
  // Linformer's layers take the padding as a token mask (zeroing keys before the projection),
  // not as a mask over (query, key) pairs, and their path needs no additive tensor.
  // Longformer's too, with the global tokens beside it.
  const bool token_masked = config.attention == AttentionKind::kLinformer || config.attention == AttentionKind::kLongformer;
  auto biases = stack_attention_biases(config, /*causal=*/false, positions.get(),
                                       token_masked ? torch::Tensor() : attention_mask, t, 0, t, x, is_training(), ring);
  if (token_masked) biases.windowed.token_mask = biases.unbounded.token_mask = attention_mask;
  if (config.attention == AttentionKind::kLongformer) {
    auto global = global_attention_mask;
    const int64_t leading = default_global_tokens(config);
    if (!global.defined() && leading > 0) {
      global = torch::zeros({b, t}, input_ids.options().dtype(torch::kBool));
      global.narrow(1, 0, std::min(leading, t)).fill_(true);
    }
    TORCH_CHECK(!global.defined() || global.sizes() == input_ids.sizes(), "BERT: global_attention_mask must match "
                "input_ids ", input_ids.sizes(), ", got ", global.sizes());
    biases.windowed.global_mask = biases.unbounded.global_mask = global;
  } else {
    TORCH_CHECK(!global_attention_mask.defined(), "BERT: global_attention_mask applies to attention longformer, not ",
                to_string(config.attention));
  }
  const auto& rope_positions = ring && config.position == PositionKind::kRope ? ids : torch::Tensor();
  const bool recompute = activation_checkpointing && is_training();
  for (auto& block : block_list_) {
    const auto& layer_bias = biases.of(block->options.layer_index());
    x = recompute ? forward_recomputing(block, x, layer_bias, {}, {}, rope_positions)
                  : block->forward(x, layer_bias, {}, {}, nullptr, rope_positions);
  }
  if (final_norm) x = final_norm->forward(x);
  if (ring) {
    // Only rank 0 holds the [CLS] token: the masked-LM head runs, the pooled ones do not.
    BertOutput out;
    out.sequence_output = x;
    if (mlm_head) out.logits = mlm_head->forward(x, token_embedding);
    return out;
  }

  BertOutput out;
  out.sequence_output = x;
  const bool pooled_head = pooler || config.head == BertHead::kSequenceClassification;
  const auto pooled_tokens = pooled_head ? pool(x, attention_mask) : torch::Tensor();
  if (pooler) out.pooled_output = torch::tanh(project(pooler, pooled_tokens));
  if (mlm_head) out.logits = mlm_head->forward(x, token_embedding);
  if (nsp_head) {
    auto nsp = project(nsp_head, out.pooled_output);
    if (config.head == BertHead::kNextSentence) out.logits = nsp;
    else out.nsp_logits = nsp;
  }
  if (classifier) {
    // A sequence is classified by its pooled tokens, tokens each by their own output.
    auto features = config.head != BertHead::kSequenceClassification ? x : pooler ? out.pooled_output : pooled_tokens;
    if (head_transform) features = head_transform->forward(features);
    out.logits = project(classifier, dropout->forward(features));
  }
  return out;
}

torch::Tensor BertImpl::pool(const torch::Tensor& x, const torch::Tensor& attention_mask) const {
  switch (config.pooling) {
    case Pooling::kCls: return x.select(1, 0);
    case Pooling::kMean: {
      if (!attention_mask.defined()) return x.mean(1);
      const auto real = attention_mask.ne(0).to(x.scalar_type()).unsqueeze(-1);  // (B, T, 1)
      return (x * real).sum(1) / real.sum(1);
    }
  }
  throw std::logic_error("unhandled pooling");
}

}  // namespace zoo
