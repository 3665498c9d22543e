#pragma once
// The model schema: one config type for every family, read from YAML, validated once before any
// module is built. No LibTorch here (the config fuzz target builds it alone); the layer options a
// config implies are in models/layer_options.h. Each field's name, meaning and default live in one table (config.cpp) that
// parsing, validation messages and `zoo schema` all read.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <optional>
#include <utility>

#include "layers/variants.h"

namespace YAML {
class Node;
}

namespace zoo {

enum class Family { kBert, kGpt, kT5, kTransformer };
// normal: N(0, init_std) everywhere (BERT, LLaMA); gpt2: normal plus residual projections at
// init_std / sqrt(2 * n_layers); t5: Mesh TensorFlow's fan-in scaled normals; xavier: Glorot
// uniform linears and N(0, d_model^-0.5) embeddings (Vaswani et al. / fairseq).
enum class InitScheme { kNormal, kGpt2, kT5, kXavier };
// What sits on top of a BERT encoder.
enum class BertHead { kNone, kMaskedLM, kNextSentence, kPretraining, kSequenceClassification,
                      kTokenClassification };

// Which tokens a BERT sequence head reads: the first ([CLS]) or the mean over the real tokens
// (ModernBERT's classifier_pooling mean).
enum class Pooling { kCls, kMean };

ZOO_ENUM_NAMES(Pooling, "pooling", {"cls", Pooling::kCls}, {"mean", Pooling::kMean});
ZOO_ENUM_NAMES(Family, "family",
               {"bert", Family::kBert}, {"gpt", Family::kGpt}, {"t5", Family::kT5},
               {"transformer", Family::kTransformer});
ZOO_ENUM_NAMES(InitScheme, "init",
               {"normal", InitScheme::kNormal}, {"gpt2", InitScheme::kGpt2}, {"t5", InitScheme::kT5},
               {"xavier", InitScheme::kXavier});
ZOO_ENUM_NAMES(BertHead, "head",
               {"none", BertHead::kNone}, {"mlm", BertHead::kMaskedLM}, {"nsp", BertHead::kNextSentence},
               {"pretraining", BertHead::kPretraining},
               {"sequence_classification", BertHead::kSequenceClassification},
               {"token_classification", BertHead::kTokenClassification});

struct ModelConfig {
  Family family = Family::kGpt;
  std::string name;  // a label for printing; not architecture

  // Sizes.
  int64_t vocab_size = 0;
  int64_t d_model = 0;
  int64_t n_layers = 0;        // gpt, bert; the default for encoder/decoder_layers
  int64_t encoder_layers = 0;  // t5, transformer; 0 = n_layers
  int64_t decoder_layers = 0;  // t5, transformer; 0 = n_layers
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // 0 = n_heads (MHA); 1 = MQA; else GQA
  int64_t head_dim = 0;    // 0 = d_model / n_heads (T5 calls it d_kv)
  int64_t d_ff = 0;
  int64_t max_positions = 0;  // table size for learned/sinusoidal; longest sequence otherwise
  int64_t type_vocab_size = 2;  // bert's segment embeddings; 0 = none (ModernBERT)

  // Architecture.
  NormKind norm = NormKind::kLayerNorm;
  double norm_eps = 1e-5;
  NormPosition norm_position = NormPosition::kPre;
  PositionKind position = PositionKind::kLearned;
  double rope_base = 10000.0;
  RopeLayout rope_layout = RopeLayout::kHalf;
  RopeScaling rope_scaling;  // contexts longer than trained at (LLaMA 3.1): the rope_scaling* keys
  int64_t rotary_dim = 0;    // rope: the features of each head rotated, the first ones (Phi-3); 0 = all
  int64_t relative_buckets = 32;
  int64_t relative_max_distance = 128;
  Activation activation = Activation::kGELUTanh;
  // Sliding window: gpt, query i sees keys i-window+1 .. i; bert, keys i-window+1 .. i+window-1.
  std::optional<int64_t> window;
  std::vector<int64_t> window_layers;  // the layers `window` bounds (Gemma's sliding layers); empty = every layer
  double window_rope_base = 0.0;       // those layers' RoPE base, without rope_scaling (Gemma 3); 0 = as the others
  int64_t attention_scale_dim = 0;     // scores / sqrt(this) (Gemma's query_pre_attn_scalar); 0 = head_dim
  double attention_softcap = 0.0;      // cap * tanh(score / cap) before masks and softmax (Gemma 2); 0 = none
  double logit_softcap = 0.0;          // the same of the output logits (Gemma 2); 0 = none
  // Which attention kernel runs: auto chooses per call (layers/attention_path.h).
  AttentionBackend attention_backend = AttentionBackend::kAuto;
  // What mixes tokens in each decoder layer (gpt): `attention` for every layer, or one entry per
  // layer in attention_layers (hybrids). Linear kinds: layers/linear_attention.h.
  AttentionKind attention = AttentionKind::kSoftmax;
  std::vector<AttentionKind> attention_layers;  // empty = `attention` everywhere
  FeatureMap feature_map = FeatureMap::kElu1;   // linear
  bool linear_normalize = true;                 // linear: divide by phi(q) . sum phi(k)
  int64_t performer_features = 256;             // feature_map performer: random features per head
  int64_t performer_seed = 0;                   // feature_map performer: draws the features (stored with the model)
  double gla_expand_k = 0.5;                    // gated_linear: key width / d_model
  double gla_expand_v = 1.0;                    // gated_linear: value width / d_model
  int64_t gla_gate_rank = 16;                   // gated_linear: rank of the decay's low-rank projection
  double gla_gate_normalizer = 16.0;            // gated_linear: tau in alpha = sigmoid(.)^(1/tau)
  int64_t linformer_k = 256;                    // linformer (bert): rows keys and values are projected to
  LinformerSharing linformer_sharing = LinformerSharing::kHeadwise;  // linformer: which projections are shared
  // longformer (bert): each layer's window, or one for all, as transformers' attention_window
  // (w / 2 tokens to each side); each head's dilation, or one for all ([] = 1).
  std::vector<int64_t> attention_window = {512};
  std::vector<int64_t> attention_dilation;
  // longformer: the first this many tokens of every sequence attend globally when the caller
  // marks none; 0 = transformers' rule (the first token under a sequence_classification head).
  int64_t longformer_global_tokens = 0;
  bool bias = true;               // linear and LayerNorm biases
  bool qkv_bias = false;          // q/k/v projection biases in a model without others (Qwen2)
  bool qk_norm = false;           // the model's norm (no bias) over each query and key head before RoPE (Qwen3)
  // Hugging Face's files hold q, k, v as one qkv_proj and gate, up as one gate_up_proj (Phi-3).
  // Says how import and export name the tensors, not what the model computes.
  bool hf_fused_projections = false;
  // Mixture of experts (gpt; Mixtral, Qwen3-MoE, layers/mixture_of_experts.h): a sparse layer's
  // feed-forward is `experts` gated feed-forwards of width expert_d_ff, each token routed to its
  // top experts_per_token. Layer i is sparse when (i + 1) % moe_layer_step == 0 and i is not in
  // dense_layers (Qwen3-MoE's decoder_sparse_step and mlp_only_layers); the others keep d_ff.
  int64_t experts = 0;  // 0: every layer dense
  int64_t experts_per_token = 2;
  int64_t expert_d_ff = 0;                // 0 = d_ff
  bool normalize_expert_weights = true;   // the top k router probabilities renormalised (norm_topk_prob)
  bool round_expert_weights = false;      // the routing weights rounded to the activations' dtype (Qwen3-MoE)
  int64_t moe_layer_step = 1;
  std::vector<int64_t> dense_layers;
  double router_aux_loss_coef = 0.001;    // training adds this times the load-balancing loss
  bool tie_embeddings = true;     // output head shares the token embedding
  bool scale_embeddings = false;  // token embeddings times sqrt(d_model) (Vaswani et al.)
  bool scale_attention = true;    // scores / sqrt(head_dim); T5 folds it into its init
  bool pooler = true;             // bert: dense + tanh over the pooled tokens
  Pooling pooling = Pooling::kCls;  // bert: the tokens a sequence head reads
  // bert: dense, activation and norm before the classifier, over the pooled tokens or each token
  // (ModernBERT's head; BERT's masked LM has the same transform of its own).
  bool head_transform = false;
  // bert, pre-norm: a norm before layer 0's self-attention; false: the embeddings' norm stands for
  // it (ModernBERT).
  bool first_attention_norm = true;
  BertHead head = BertHead::kNone;
  int64_t num_labels = 2;  // classification heads

  // Regularisation.
  double dropout = 0.1;            // embeddings, residual branches, feed-forward hidden
  double attention_dropout = 0.1;  // attention weights

  // Initialisation.
  InitScheme init = InitScheme::kGpt2;
  double init_std = 0.02;

  // Special tokens the model itself needs.
  int64_t pad_id = 0;
  int64_t decoder_start_id = 0;  // first decoder input of encoder-decoders (T5 uses pad)

  int64_t resolved_encoder_layers() const { return encoder_layers > 0 ? encoder_layers : n_layers; }
  int64_t resolved_decoder_layers() const { return decoder_layers > 0 ? decoder_layers : n_layers; }
  int64_t resolved_head_dim() const { return head_dim > 0 ? head_dim : d_model / n_heads; }
  // The longest sequence (tokens per stack) a model of this config takes: max_positions, for
  // every position kind. Learned and sinusoidal tables have that many rows; the other kinds are
  // held to it too, so a config means the same length whatever its positions. Models, batches,
  // block sizes and generation all ask this one function.
  int64_t max_length() const { return max_positions; }
  // The token mixer of decoder layer `layer`.
  AttentionKind attention_of(int64_t layer) const {
    return attention_layers.empty() ? attention : attention_layers[static_cast<size_t>(layer)];
  }
  // Longformer's window of layer `layer` (two-sided, as attention_window) and the dilation of
  // each head (n_heads values, or empty for 1).
  int64_t longformer_window_of(int64_t layer) const {
    return attention_window.size() == 1 ? attention_window[0] : attention_window.at(static_cast<size_t>(layer));
  }
  std::vector<int64_t> longformer_dilation_of_heads() const {
    return attention_dilation.size() == 1 ? std::vector<int64_t>(static_cast<size_t>(n_heads), attention_dilation[0])
                                          : attention_dilation;
  }
  // The sliding window of layer `layer` (window, where window_layers lists it or is empty).
  std::optional<int64_t> window_of(int64_t layer) const;
  // Whether the window bounds some layers and not others.
  bool has_mixed_windows() const { return window && !window_layers.empty(); }
  // Whether decoder layer `layer`'s feed-forward is a mixture of experts.
  bool is_moe_layer(int64_t layer) const;
  bool has_moe_layers() const { return experts > 0; }
  int64_t resolved_expert_d_ff() const { return expert_d_ff > 0 ? expert_d_ff : d_ff; }
  // Whether any layer is linear or gated linear: such layers keep a state, not keys and values.
  bool has_recurrent_layers() const;
  bool is_encoder_decoder() const { return family == Family::kT5 || family == Family::kTransformer; }
  // T5 v1.0 multiplies the decoder output by d_model^-0.5 before a tied head.
  bool scales_tied_head() const { return family == Family::kT5 && tie_embeddings; }

  // Throws ConfigError naming `source` (a file name) and the offending key.
  void validate(const std::string& source = "config") const;
};

// What a bert made a sequence classifier reads its pooled tokens through: BERT's pooler, or the
// head transform of a pre-norm encoder without a pooler (ModernBERT, as transformers'
// ModernBertForSequenceClassification, which starts from its masked LM's head).
void set_sequence_classifier_pooling(ModelConfig& config);

// A config problem: the message names the file (or source), the key and what was expected.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};


// Family defaults applied before the file's keys, so a file states only what differs.
ModelConfig family_defaults(Family family);

// Reads a YAML mapping. Unknown keys, wrong types and missing required keys are errors naming
// `source`, the line and the key. The result is validated.
ModelConfig config_from_yaml(const YAML::Node& node, const std::string& source);
ModelConfig load_config(const std::string& path);
// Parses a YAML string (tests, overrides).
ModelConfig parse_config(const std::string& yaml, const std::string& source = "<string>");

// Applies `key=value` (value parsed as YAML) with the same checks as a file, then validates.
void apply_override(ModelConfig& config, const std::string& assignment,
                    const std::string& source = "override");
// Every `key=value` of `assignments`, then validates once: keys that only hold together (longrope's
// kind and its factors) may come in any order.
void apply_overrides(ModelConfig& config, const std::vector<std::string>& assignments,
                     const std::string& source = "override");

// The resolved config as YAML, every field written, loadable by parse_config.
std::string to_yaml(const ModelConfig& config);

// Why `config` cannot train with context parallelism (ring attention, kernels/ring_attention.h),
// or "" when it can: softmax attention on zoo's own kernels, in a decoder-only model, an
// encoder-decoder, or a bert's masked LM.
std::string context_parallel_refusal(const ModelConfig& config);

// One line per field: name, type, default (per family where they differ), meaning.
std::string schema_documentation();

// Finds a config by path, or by name in ZOO_CONFIG_DIR, ./configs and the installed configs.
std::string find_config(const std::string& name_or_path);

}  // namespace zoo
