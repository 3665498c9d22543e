"""Tiny models in Hugging Face's layout, with transformers' own outputs, for zoo's import/export
tests.

Usage:
  hf_models.py OUT.pt write FLAVOR DIR [--sharded] [--dtype bf16|fp16]
      Writes DIR/config.json and random weights in Hugging Face naming with the safetensors
      library (one file, or two shards plus model.safetensors.index.json; float32, or rounded to
      bfloat16 or float16 and stored so), then has transformers load DIR (from_pretrained, in
      float32) and saves the inputs and its outputs into OUT.pt: logits (and BERT's hidden
      states), the loss transformers computes from `labels` (saved too, in its convention: a
      causal LM's are its inputs) for every model with a head, and for the generative families the 32 tokens transformers' generate() picks
      greedily after each input (T5: after its decoder start), end-of-sequence ignored; for a
      bf16 directory also logits_bf16, transformers computing in bf16 throughout. For the LLaMA family, OUT.pt also
      holds logits_plain: the same model without its flavor's feature (rope scaling, sliding
      window, q/k/v biases), so a test can see that the feature changes the outputs.
  hf_models.py OUT.pt check FLAVOR DIR
      Has transformers load DIR (as written by zoo export-hf) and saves its outputs on the same
      inputs into OUT.pt.

FLAVOR: gpt2, bert, bert_mlm, bert_cls, t5, t5_v1_1, ModernBERT:
  modernbert      ModernBertModel in transformers 5's spelling (layer_types, rope_parameters):
                  layer 0 global at RoPE base 160000, layer 1 local (local_attention 4: keys
                  within 2 to each side) at its own base 10000, no biases
  modernbert_mlm  ModernBertForMaskedLM in the Hub's older spelling (global_attn_every_n_layers 2,
                  global_rope_theta, local_rope_theta), every bias on (attention, mlp, norm,
                  classifier)
  modernbert_cls  ModernBertForSequenceClassification over the mean of the real tokens, 3 labels
  (each with logits_plain: the same weights with a window wider than the inputs)
Longformer (attention_window [4, 6]: 2 and 3 tokens to each side, RoBERTa's positions from
pad_token_id 1 + 1, one token type, token_type_ids all 0):
  longformer      LongformerModel (with its pooler), global tokens 0 and 3 of row 0 and 1 of
                  row 1 (global_attention_mask, saved)
  longformer_mlm  LongformerForMaskedLM, no global token
  longformer_cls  LongformerForSequenceClassification, 3 labels: transformers makes the first
                  token global
  longformer_tok  LongformerForTokenClassification, 5 labels, no global token
and the LLaMA family:
  llama       grouped-query attention, head_dim apart from hidden_size / heads, untied head,
              LLaMA 3.1 rope scaling, and the inv_freq buffer older files carry
  llama_tied  multi-query attention, tied head (with the tied copy in the file), linear rope
              scaling spelled the old way ("type"), attention_bias and mlp_bias
  mistral     grouped-query attention and a sliding window shorter than the inputs
  qwen2       grouped-query attention, biases on q, k and v, tied head, a sliding window that
              use_sliding_window turns off
  qwen3_yarn  qwen3 with YaRN rope scaling (factor 4, a trained context of 16) in transformers 5's
              rope_parameters
  qwen3       grouped-query attention, an RMSNorm over each query and key head before RoPE,
              head_dim apart from hidden_size / heads, no biases, tied head (its logits_plain:
              the same weights as LLaMA, without the head norms)
  phi3        fused qkv_proj and gate_up_proj, multi-query attention, 12 of 16 features rotated
              (partial_rotary_factor 0.75), LongRoPE over a trained context of 8 in transformers
              4's spelling: the inputs' logits take the short factors, greedy decoding crosses
              into the long ones
  phi3_long   the same in transformers 5's rope_parameters with a trained context of 4 (every
              logit takes the long factors), a stated attention factor, a tied head and a
              sliding window of 3
  mixtral     a mixture of 4 experts, top 2 renormalised, in every layer, in the per-expert files
              Mixtral's checkpoints have (block_sparse_moe.experts.E.w1/w3/w2), a sliding window
              of 5 (its logits_plain: top 1)
  qwen3_moe   qwen3 with 8 experts of width 24, top 1 at its raw probability (norm_topk_prob
              false), layer 1 dense (mlp_only_layers), in the fused layout transformers 5 keeps
              in memory (mlp.experts.gate_up_proj, down_proj; its logits_plain: renormalised)
  gemma2      (1 + weight) norms before and after each branch, GeGLU, embeddings times
              sqrt(hidden_size), scores over query_pre_attn_scalar 12 (head_dim 16), attention
              and final logits soft-capped at 1 and 2, a window of 3 in layer 0 only, tied head
              (its logits_plain: no capping)
  gemma3      gemma2's layout without capping, with q/k norms, transformers 4's spelling of Gemma 3's
              RoPE: full layers at 1e6 scaled linearly by 4, the sliding layer at its own 1e4
              (its logits_plain: one RoPE, unscaled), untied head
For the mixtures OUT.pt also holds transformers' output_router_logits: router_logits (one (N, E)
per sparse layer, stacked), aux_loss (load_balancing_loss_func) and loss_with_router (the loss
plus router_aux_loss_coef times aux_loss).

The outputs are transformers' (GPT2LMHeadModel, BertModel, BertForMaskedLM,
BertForSequenceClassification, T5ForConditionalGeneration, LlamaForCausalLM,
MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM as config.json's architectures name them); nothing here
is shared with zoo.
"""
import json
import os
import sys

import torch

from tensor_file import save_tensors

VOCAB = int(os.environ.get("ZOO_HF_VOCAB", "96"))  # larger to pair the model with a zoo tokenizer
D, HEADS, FF, LAYERS, POSITIONS = 32, 4, 64, 2, 64
BATCH, T, T_DEC = 2, 7, 5
GREEDY_TOKENS = 32


# --- configs and random weights in Hugging Face naming ---------------------------------------

LLAMA_FAMILY = ("llama", "llama_tied", "mistral", "qwen2", "qwen3", "qwen3_yarn", "phi3", "phi3_long", "mixtral",
                "qwen3_moe", "gemma2", "gemma3")
GEMMA = ("gemma2", "gemma3_text")  # model types
# LongRoPE's divisors for Phi-3's 6 rotated pairs: the long ones far apart from the short ones.
PHI3_SHORT = [1.0, 1.05, 1.1, 1.3, 1.6, 2.0]
PHI3_LONG = [1.5, 3.0, 6.0, 12.0, 24.0, 48.0]


def llama_config(flavor):
    base = {"vocab_size": VOCAB, "hidden_size": D, "intermediate_size": FF, "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS, "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "hidden_act": "silu",
            "max_position_embeddings": POSITIONS, "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2}
    if flavor == "llama":
        # head_dim 16 with 4 heads of hidden_size 32; frequencies: see check_llama3_frequencies.
        return {**base, "model_type": "llama", "architectures": ["LlamaForCausalLM"], "head_dim": 16,
                "max_position_embeddings": 256, "rope_theta": 10000.0, "tie_word_embeddings": False,
                "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 100}}
    if flavor == "llama_tied":
        return {**base, "model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_key_value_heads": 1,
                "rope_theta": 500000.0, "tie_word_embeddings": True, "rope_scaling": {"type": "linear", "factor": 2.0},
                "attention_bias": True, "mlp_bias": True, "pad_token_id": 0, "eos_token_id": [2, 3]}
    if flavor == "mistral":
        return {**base, "model_type": "mistral", "architectures": ["MistralForCausalLM"], "rms_norm_eps": 1e-5,
                "rope_theta": 1000000.0, "sliding_window": 3, "tie_word_embeddings": False}
    if flavor == "qwen3_yarn":
        # YaRN with a trained context of 16 (the frequencies ramp within head_dim 16) and the
        # attention factor it implies, in transformers 5's rope_parameters
        return {**llama_config("qwen3"), "rope_parameters": {
            "rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, "original_max_position_embeddings": 16}}
    if flavor == "phi3":
        return {**base, "model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "num_attention_heads": 2,
                "num_key_value_heads": 1, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                "original_max_position_embeddings": 8, "tie_word_embeddings": False, "sliding_window": None,
                "resid_pdrop": 0.0, "embd_pdrop": 0.0, "pad_token_id": 0,
                "rope_scaling": {"type": "longrope", "short_factor": PHI3_SHORT, "long_factor": PHI3_LONG}}
    if flavor == "phi3_long":
        return {**llama_config("phi3"), "original_max_position_embeddings": 4, "tie_word_embeddings": True,
                "sliding_window": 3, "rope_scaling": None,
                "rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                                    "short_factor": PHI3_SHORT, "long_factor": PHI3_LONG, "attention_factor": 1.25}}
    if flavor == "mixtral":
        return {**base, "model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "rms_norm_eps": 1e-5,
                "rope_theta": 1000000.0, "sliding_window": 5, "tie_word_embeddings": False, "num_local_experts": 4,
                "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02, "router_jitter_noise": 0.0}
    if flavor == "qwen3_moe":
        qwen3 = {k: v for k, v in llama_config("qwen3").items() if k != "max_window_layers"}
        return {**qwen3, "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 8,
                "num_experts_per_tok": 1, "moe_intermediate_size": 24, "norm_topk_prob": False,
                "decoder_sparse_step": 1, "mlp_only_layers": [1], "router_aux_loss_coef": 0.05}
    if flavor == "gemma2":
        # Caps small enough to bend these scores and logits; a window of 3 in layer 0 (Gemma 2's
        # alternation, layer_types unsaid); scores over query_pre_attn_scalar 12, not head_dim 16.
        gemma = {k: v for k, v in base.items() if k != "hidden_act"}
        return {**gemma, "model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "head_dim": 16,
                "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 12, "sliding_window": 3,
                "attn_logit_softcapping": 1.0, "final_logit_softcapping": 2.0, "tie_word_embeddings": True,
                "pad_token_id": 0, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
    if flavor == "gemma3":
        # transformers 4's spelling: rope_theta and rope_scaling for the full layers, rope_local_base_freq
        # for the sliding ones, sliding_window_pattern 2 (layer 0 slides, window 3, layer 1 is full).
        gemma = {k: v for k, v in base.items() if k != "hidden_act"}
        return {**gemma, "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "head_dim": 16,
                "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 16, "sliding_window": 3,
                "sliding_window_pattern": 2, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                "rope_scaling": {"rope_type": "linear", "factor": 4.0}, "tie_word_embeddings": False,
                "pad_token_id": 0}
    if flavor == "qwen3":
        return {**base, "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "head_dim": 16,
                "rope_theta": 1000000.0, "tie_word_embeddings": True, "attention_bias": False,
                "use_sliding_window": False, "sliding_window": None, "max_window_layers": 28}
    return {**base, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "rope_theta": 1000000.0,
            "tie_word_embeddings": True, "use_sliding_window": False, "sliding_window": 4, "max_window_layers": 28}


def modernbert_config(flavor):
    arch = {"modernbert": "ModernBertModel", "modernbert_mlm": "ModernBertForMaskedLM",
            "modernbert_cls": "ModernBertForSequenceClassification"}[flavor]
    c = {"model_type": "modernbert", "architectures": [arch], "vocab_size": VOCAB, "hidden_size": D,
         "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "intermediate_size": FF,
         "max_position_embeddings": POSITIONS, "norm_eps": 1e-5, "hidden_activation": "gelu",
         "local_attention": 4, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "cls_token_id": 1,
         "sep_token_id": 2}
    if flavor == "modernbert":
        c.update({"layer_types": ["full_attention", "sliding_attention"],
                  "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                                      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})
    else:
        c.update({"global_attn_every_n_layers": 2, "global_rope_theta": 160000.0, "local_rope_theta": 10000.0})
    if flavor == "modernbert_mlm":
        c.update({"attention_bias": True, "mlp_bias": True, "norm_bias": True, "classifier_bias": True})
    if flavor == "modernbert_cls":
        c.update({"classifier_pooling": "mean", "id2label": {"0": "neg", "1": "neutral", "2": "pos"}})
    return c


def modernbert_weights(flavor, cfg, rand):
    base = "" if flavor == "modernbert" else "model."
    bias = cfg.get("attention_bias", False)

    def linear(name, out, inp):
        rand(name + ".weight", out, inp)
        if bias:
            rand(name + ".bias", out)

    def norm(name):
        rand(name + ".weight", D, offset=1.0)
        if bias:
            rand(name + ".bias", D)

    rand(base + "embeddings.tok_embeddings.weight", VOCAB, D)
    norm(base + "embeddings.norm")
    for i in range(LAYERS):
        p = f"{base}layers.{i}."
        if i > 0:  # layer 0's attn_norm is an Identity
            norm(p + "attn_norm")
        linear(p + "attn.Wqkv", 3 * D, D)
        linear(p + "attn.Wo", D, D)
        norm(p + "mlp_norm")
        linear(p + "mlp.Wi", 2 * FF, D)
        linear(p + "mlp.Wo", D, FF)
    norm(base + "final_norm")
    if flavor != "modernbert":
        linear("head.dense", D, D)
        norm("head.norm")
    if flavor == "modernbert_mlm":
        rand("decoder.bias", VOCAB)  # decoder.weight is the tied embeddings: absent, as transformers saves it
    if flavor == "modernbert_cls":
        rand("classifier.weight", 3, D)
        rand("classifier.bias", 3)


LONGFORMER_ARCH = {"longformer": "LongformerModel", "longformer_mlm": "LongformerForMaskedLM",
                   "longformer_cls": "LongformerForSequenceClassification",
                   "longformer_tok": "LongformerForTokenClassification"}


def longformer_global(flavor):
    """The global_attention_mask a flavor passes, or None (transformers' default)."""
    mask = torch.zeros(BATCH, T, dtype=torch.long)
    if flavor == "longformer":
        mask[0, [0, 3]] = 1
        mask[1, 1] = 1
        return mask
    return None


def longformer_weights(flavor, cfg):
    """transformers' own model of `cfg` on seeded weights: every tensor as its files name them."""
    torch.manual_seed(sum(map(ord, flavor)))
    model = model_class(cfg)(transformers_config(cfg))
    w = {}
    for name, value in model.state_dict().items():
        if name.endswith("position_ids"):
            continue
        norm = "LayerNorm" in name or "layer_norm" in name
        w[name] = torch.randn(value.shape) * 0.2 + (1.0 if norm and name.endswith("weight") else 0.0)
    if flavor == "longformer_mlm":  # the decoder is tied to the word embeddings
        w["lm_head.decoder.weight"] = w["longformer.embeddings.word_embeddings.weight"].clone()
        w["lm_head.decoder.bias"] = w["lm_head.bias"].clone()
    return w


def transformers_config(cfg):
    import transformers
    return transformers.LongformerConfig(**{k: v for k, v in cfg.items() if k not in ("model_type", "architectures")})


def config_for(flavor):
    if flavor.startswith("longformer"):
        c = {"model_type": "longformer", "architectures": [LONGFORMER_ARCH[flavor]], "vocab_size": VOCAB,
             "hidden_size": D, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "intermediate_size": FF,
             "max_position_embeddings": POSITIONS + 2, "type_vocab_size": 1, "layer_norm_eps": 1e-5,
             "hidden_act": "gelu", "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "sep_token_id": 2,
             "attention_window": [4, 6]}
        if flavor == "longformer_cls":
            c["id2label"] = {"0": "neg", "1": "neutral", "2": "pos"}
        if flavor == "longformer_tok":
            c["id2label"] = {str(i): f"tag{i}" for i in range(5)}
        return c
    if flavor in LLAMA_FAMILY:
        return llama_config(flavor)
    if flavor.startswith("modernbert"):
        return modernbert_config(flavor)
    if flavor == "gpt2":
        return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": VOCAB, "n_embd": D,
                "n_layer": LAYERS, "n_head": HEADS, "n_inner": FF, "n_positions": POSITIONS,
                "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
    if flavor.startswith("bert"):
        arch = {"bert": "BertModel", "bert_mlm": "BertForMaskedLM", "bert_cls": "BertForSequenceClassification"}[flavor]
        c = {"model_type": "bert", "architectures": [arch], "vocab_size": VOCAB, "hidden_size": D,
             "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "intermediate_size": FF,
             "max_position_embeddings": POSITIONS, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
             "hidden_act": "gelu"}
        if flavor == "bert_cls":
            c["id2label"] = {"0": "neg", "1": "neutral", "2": "pos"}
        return c
    v11 = flavor == "t5_v1_1"
    return {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "vocab_size": VOCAB, "d_model": D,
            "d_kv": 8, "d_ff": FF, "num_layers": LAYERS, "num_decoder_layers": LAYERS + 1, "num_heads": HEADS,
            "relative_attention_num_buckets": 8, "relative_attention_max_distance": 20, "layer_norm_epsilon": 1e-6,
            "feed_forward_proj": "gated-gelu" if v11 else "relu", "tie_word_embeddings": not v11,
            "decoder_start_token_id": 0, "pad_token_id": 0}


def random_weights(flavor, cfg):
    if flavor.startswith("longformer"):
        return longformer_weights(flavor, cfg)
    g = torch.Generator().manual_seed(sum(map(ord, flavor)))
    w = {}

    def rand(name, *shape, scale=0.2, offset=0.0):
        w[name] = torch.randn(*shape, generator=g) * scale + offset

    if flavor in LLAMA_FAMILY:
        n, nkv, hd = llama_heads(cfg)
        bias = llama_biases(cfg)
        rand("model.embed_tokens.weight", VOCAB, D)
        gemma = cfg["model_type"] in GEMMA
        norm_offset = 0.0 if gemma else 1.0  # Gemma scales by 1 + weight
        for i in range(LAYERS):
            p = f"model.layers.{i}."
            rand(p + "input_layernorm.weight", D, offset=norm_offset)
            rand(p + "post_attention_layernorm.weight", D, offset=norm_offset)
            if gemma:
                rand(p + "pre_feedforward_layernorm.weight", D)
                rand(p + "post_feedforward_layernorm.weight", D)
            phi3 = cfg["model_type"] == "phi3"
            if phi3:  # q, k, v in one projection; gate then up in another
                rand(p + "self_attn.qkv_proj.weight", (n + 2 * nkv) * hd, D)
                rand(p + "self_attn.o_proj.weight", D, n * hd)
                rand(p + "mlp.gate_up_proj.weight", 2 * FF, D)
                rand(p + "mlp.down_proj.weight", D, FF)
                continue
            for m, rows, cols in (("q", n * hd, D), ("k", nkv * hd, D), ("v", nkv * hd, D), ("o", D, n * hd)):
                rand(p + f"self_attn.{m}_proj.weight", rows, cols)
                if bias[m]:
                    rand(p + f"self_attn.{m}_proj.bias", rows)
            if cfg["model_type"] in ("qwen3", "qwen3_moe", "gemma3_text"):
                rand(p + "self_attn.q_norm.weight", hd, offset=norm_offset)
                rand(p + "self_attn.k_norm.weight", hd, offset=norm_offset)
            if moe_layer(cfg, i):
                experts, width = moe_experts(cfg), cfg.get("moe_intermediate_size", FF)
                if cfg["model_type"] == "mixtral":  # one tensor per expert and projection
                    rand(p + "block_sparse_moe.gate.weight", experts, D, scale=1.0)
                    for e in range(experts):
                        x = p + f"block_sparse_moe.experts.{e}."
                        rand(x + "w1.weight", width, D), rand(x + "w3.weight", width, D), rand(x + "w2.weight", D, width)
                else:  # the experts stacked, gate and up fused
                    rand(p + "mlp.gate.weight", experts, D, scale=1.0)
                    rand(p + "mlp.experts.gate_up_proj", experts, 2 * width, D)
                    rand(p + "mlp.experts.down_proj", experts, D, width)
                continue
            for m, rows, cols in (("gate", FF, D), ("up", FF, D), ("down", D, FF)):
                rand(p + f"mlp.{m}_proj.weight", rows, cols)
                if bias["mlp"]:
                    rand(p + f"mlp.{m}_proj.bias", rows)
        rand("model.norm.weight", D, offset=norm_offset)
        if not cfg["tie_word_embeddings"]:
            rand("lm_head.weight", VOCAB, D)
        if flavor == "llama":  # a buffer older LLaMA files carry; an importer must ignore it
            w["model.layers.0.self_attn.rotary_emb.inv_freq"] = rope_frequencies(cfg, hd).float()
        if flavor == "llama_tied":  # the tied copy some files carry
            w["lm_head.weight"] = w["model.embed_tokens.weight"].clone()
        return w
    if flavor == "gpt2":
        rand("transformer.wte.weight", VOCAB, D)
        rand("transformer.wpe.weight", POSITIONS, D)
        for i in range(LAYERS):
            p = f"transformer.h.{i}."
            for ln in ("ln_1", "ln_2"):
                rand(p + ln + ".weight", D, offset=1.0)
                rand(p + ln + ".bias", D)
            rand(p + "attn.c_attn.weight", D, 3 * D)  # Conv1D: (in, out)
            rand(p + "attn.c_attn.bias", 3 * D)
            rand(p + "attn.c_proj.weight", D, D)
            rand(p + "attn.c_proj.bias", D)
            rand(p + "mlp.c_fc.weight", D, FF)
            rand(p + "mlp.c_fc.bias", FF)
            rand(p + "mlp.c_proj.weight", FF, D)
            rand(p + "mlp.c_proj.bias", D)
            # The causal-mask buffer older checkpoints carry; an importer must ignore it.
            w[p + "attn.bias"] = torch.tril(torch.ones(POSITIONS, POSITIONS)).view(1, 1, POSITIONS, POSITIONS)
        rand("transformer.ln_f.weight", D, offset=1.0)
        rand("transformer.ln_f.bias", D)
        return w  # lm_head.weight is tied: absent, as in Hugging Face's files
    if flavor.startswith("modernbert"):
        modernbert_weights(flavor, cfg, rand)
        return w
    if flavor.startswith("bert"):
        base = "" if flavor == "bert" else "bert."
        rand(base + "embeddings.word_embeddings.weight", VOCAB, D)
        rand(base + "embeddings.position_embeddings.weight", POSITIONS, D)
        rand(base + "embeddings.token_type_embeddings.weight", 2, D)
        rand(base + "embeddings.LayerNorm.weight", D, offset=1.0)
        rand(base + "embeddings.LayerNorm.bias", D)
        for i in range(LAYERS):
            p = f"{base}encoder.layer.{i}."
            for m in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
                rand(p + m + ".weight", D, D)
                rand(p + m + ".bias", D)
            rand(p + "intermediate.dense.weight", FF, D)
            rand(p + "intermediate.dense.bias", FF)
            rand(p + "output.dense.weight", D, FF)
            rand(p + "output.dense.bias", D)
            for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
                rand(p + ln + ".weight", D, offset=1.0)
                rand(p + ln + ".bias", D)
        if flavor != "bert_mlm":
            rand(base + "pooler.dense.weight", D, D)
            rand(base + "pooler.dense.bias", D)
        if flavor == "bert_mlm":
            rand("cls.predictions.transform.dense.weight", D, D)
            rand("cls.predictions.transform.dense.bias", D)
            rand("cls.predictions.transform.LayerNorm.weight", D, offset=1.0)
            rand("cls.predictions.transform.LayerNorm.bias", D)
            rand("cls.predictions.bias", VOCAB)
            w["cls.predictions.decoder.weight"] = w["bert.embeddings.word_embeddings.weight"].clone()  # tied copy
        if flavor == "bert_cls":
            rand("classifier.weight", 3, D)
            rand("classifier.bias", 3)
        return w
    # T5
    v11 = flavor == "t5_v1_1"
    inner = cfg["num_heads"] * cfg["d_kv"]
    rand("shared.weight", VOCAB, D, scale=1.0)
    for stack, layers in (("encoder", cfg["num_layers"]), ("decoder", cfg["num_decoder_layers"])):
        for i in range(layers):
            p = f"{stack}.block.{i}.layer."
            attn = [("0.SelfAttention", True)] + ([("1.EncDecAttention", False)] if stack == "decoder" else [])
            for name, self_attn in attn:
                for m in "qkv":
                    rand(f"{p}{name}.{m}.weight", inner, D)
                rand(f"{p}{name}.o.weight", D, inner)
                if i == 0 and self_attn:
                    rand(f"{p}{name}.relative_attention_bias.weight", cfg["relative_attention_num_buckets"], cfg["num_heads"])
                rand(f"{p}{name[0]}.layer_norm.weight", D, offset=1.0)
            ff = "2" if stack == "decoder" else "1"
            if v11:
                rand(f"{p}{ff}.DenseReluDense.wi_0.weight", FF, D)
                rand(f"{p}{ff}.DenseReluDense.wi_1.weight", FF, D)
            else:
                rand(f"{p}{ff}.DenseReluDense.wi.weight", FF, D)
            rand(f"{p}{ff}.DenseReluDense.wo.weight", D, FF)
            rand(f"{p}{ff}.layer_norm.weight", D, offset=1.0)
        rand(f"{stack}.final_layer_norm.weight", D, offset=1.0)
    if v11:
        rand("lm_head.weight", VOCAB, D)
    return w


# --- reference outputs: transformers reading the directory ------------------------------------

def moe_experts(cfg):
    return cfg.get("num_local_experts", cfg.get("num_experts", 0))


def moe_layer(cfg, i):
    """Whether layer i is a mixture of experts, as Qwen3MoeDecoderLayer decides (Mixtral: every one)."""
    if moe_experts(cfg) == 0:
        return False
    return i not in cfg.get("mlp_only_layers", []) and (i + 1) % cfg.get("decoder_sparse_step", 1) == 0


def llama_heads(cfg):
    n, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    return n, nkv, cfg.get("head_dim") or cfg["hidden_size"] // n


def llama_biases(cfg):
    """Which LLaMA-family projections carry a bias: Qwen2's q, k and v; attention_bias and
    mlp_bias in LLaMA's config."""
    if cfg["model_type"] == "qwen2":
        return {"q": True, "k": True, "v": True, "o": False, "mlp": False}
    attention = cfg.get("attention_bias", False)
    return {"q": attention, "k": attention, "v": attention, "o": attention, "mlp": cfg.get("mlp_bias", False)}


def rope_frequencies(cfg, head_dim):
    """RoPE's inverse frequencies, the buffer older LLaMA files carry (its values do not matter:
    an importer must ignore it)."""
    return 1.0 / cfg["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def model_class(cfg):
    import transformers
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return getattr(transformers, cfg["architectures"][0])


def hf_outputs(flavor, directory, dtype=torch.float32):
    """The outputs transformers computes with the model it reads from `directory`, on inputs()."""
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    model = model_class(cfg).from_pretrained(directory, dtype=dtype).eval()
    ids, mask, types, dec_ids = inputs()
    if flavor.startswith("longformer"):
        glob = longformer_global(flavor)
        # The classifier makes its first token global; its body is read with that mask.
        body_glob = torch.zeros_like(ids).index_fill_(1, torch.tensor([0]), 1) if flavor == "longformer_cls" else glob
        with torch.no_grad():
            body = (model if flavor == "longformer" else model.longformer)(input_ids=ids, attention_mask=mask,
                                                                           global_attention_mask=body_glob)
            out = {"sequence_output": body.last_hidden_state}
            if body.pooler_output is not None:
                out["pooled_output"] = body.pooler_output
            if flavor == "longformer_cls":  # its classifier's dense and tanh: zoo's pooler
                out["pooled_output"] = torch.tanh(model.classifier.dense(body.last_hidden_state[:, 0]))
            if flavor != "longformer":
                head = model(input_ids=ids, attention_mask=mask, global_attention_mask=glob, labels=labels_for(flavor))
                out["logits"], out["loss"] = head.logits, head.loss
            return out
    if not flavor.startswith(("bert", "modernbert")):
        # Greedy decoding through transformers' generate, 32 new tokens whatever they are.
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
    with torch.no_grad():
        if flavor in LLAMA_FAMILY or flavor == "gpt2":
            greedy = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=GREEDY_TOKENS,
                                    do_sample=False)
            out = {"logits": model(input_ids=ids).logits, "greedy": greedy[:, ids.size(1):],
                   "loss": model(input_ids=ids, labels=labels_for(flavor)).loss}
            if moe_experts(cfg):
                routed = model(input_ids=ids, labels=labels_for(flavor), output_router_logits=True)
                out.update({"router_logits": torch.stack(routed.router_logits), "aux_loss": routed.aux_loss,
                            "loss_with_router": routed.loss})
            return out
        if flavor.startswith("bert"):
            bert = model if flavor == "bert" else model.bert
            body = bert(input_ids=ids, attention_mask=mask, token_type_ids=types)
            out = {"sequence_output": body.last_hidden_state}
            if body.pooler_output is not None:
                out["pooled_output"] = body.pooler_output
            if flavor != "bert":
                head = model(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels_for(flavor))
                out["logits"], out["loss"] = head.logits, head.loss
            return out
        if flavor.startswith("modernbert"):
            body = (model if flavor == "modernbert" else model.model)(input_ids=ids, attention_mask=mask)
            out = {"sequence_output": body.last_hidden_state}
            if flavor != "modernbert":
                head = model(input_ids=ids, attention_mask=mask, labels=labels_for(flavor))
                out["logits"], out["loss"] = head.logits, head.loss
            return out
        # Without its cache: transformers 5.23 sizes T5's decoder cache by num_layers, and these
        # models have one decoder layer more than encoder layers (num_decoder_layers).
        greedy = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=GREEDY_TOKENS, do_sample=False,
                                use_cache=False)
        full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec_ids, labels=labels_for(flavor))
        return {"logits": full.logits, "greedy": greedy[:, 1:], "loss": full.loss}


def without_feature(flavor, cfg, w):
    """The flavor's model without the feature it tests: rope scaling, the window, the biases, the
    head norms."""
    if flavor in ("llama", "llama_tied"):
        return {k: v for k, v in cfg.items() if k != "rope_scaling"}, w
    if flavor == "qwen3_yarn":
        return {**cfg, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}, w
    if flavor.startswith("phi3"):
        return {**{k: v for k, v in cfg.items() if k != "rope_parameters"}, "rope_scaling": None}, w
    if flavor == "mistral":
        return {**cfg, "sliding_window": None}, w
    if flavor == "mixtral":
        return {**cfg, "num_experts_per_tok": 1}, w
    if flavor == "qwen3_moe":
        return {**cfg, "norm_topk_prob": True}, w
    if flavor == "gemma2":
        return {**cfg, "attn_logit_softcapping": None, "final_logit_softcapping": None}, w
    if flavor == "gemma3":
        return {**cfg, "rope_local_base_freq": 1000000.0, "rope_scaling": None}, w
    if flavor.startswith("modernbert"):
        return {**cfg, "local_attention": 4 * T}, w
    if flavor == "qwen3":
        llama = {k: v for k, v in cfg.items() if k not in ("use_sliding_window", "sliding_window", "max_window_layers")}
        return {**llama, "model_type": "llama", "architectures": ["LlamaForCausalLM"]}, \
            {k: v for k, v in w.items() if not k.endswith(("q_norm.weight", "k_norm.weight"))}
    return cfg, {k: torch.zeros_like(v) if k.endswith("_proj.bias") else v for k, v in w.items()}


def inputs():
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(4, VOCAB, (BATCH, T), generator=g)
    mask = torch.ones(BATCH, T, dtype=torch.long)
    mask[1, -2:] = 0
    types = torch.zeros(BATCH, T, dtype=torch.long)
    types[:, 4:] = 1
    dec_ids = torch.randint(4, VOCAB, (BATCH, T_DEC), generator=g)
    dec_ids[:, 0] = 0
    return ids, mask, types, dec_ids


def labels_for(flavor):
    """The labels transformers computes its loss from, in its convention: a causal LM's are its
    inputs (the model shifts them), -100 where no loss is taken."""
    ids, mask, _, dec_ids = inputs()
    g = torch.Generator().manual_seed(11)
    if flavor in LLAMA_FAMILY or flavor == "gpt2":
        return ids
    if flavor in ("bert_mlm", "modernbert_mlm"):
        labels = torch.full_like(ids, -100)
        for b, t in ((0, 1), (0, 5), (1, 2)):
            labels[b, t] = int(torch.randint(4, VOCAB, (1,), generator=g))
        return labels
    if flavor in ("bert_cls", "modernbert_cls", "longformer_cls"):
        return torch.tensor([2, 0])
    if flavor == "longformer_mlm":
        labels = torch.full_like(ids, -100)
        for b, t in ((0, 1), (0, 5), (1, 2)):
            labels[b, t] = int(torch.randint(4, VOCAB, (1,), generator=g))
        return labels
    if flavor == "longformer_tok":
        labels = torch.randint(0, 5, ids.shape, generator=g)
        labels[1, -2:] = -100
        return labels
    labels = torch.randint(4, VOCAB, (BATCH, T_DEC), generator=g)  # T5: the decoder's targets
    labels[1, -1] = -100
    return labels


STORED = {"bf16": torch.bfloat16, "fp16": torch.float16}


def write_dir(directory, cfg, w, sharded=False):
    from safetensors.torch import save_file
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    w = {k: v.contiguous() for k, v in w.items()}
    if sharded:
        names = sorted(w)
        half = len(names) // 2
        shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
        weight_map = {}
        for file, part in shards.items():
            save_file({k: w[k] for k in part}, os.path.join(directory, file), metadata={"format": "pt"})
            weight_map.update({k: file for k in part})
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
            total = sum(t.numel() * t.element_size() for t in w.values())
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    else:
        save_file(w, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})


def main(out_path, command, flavor, directory, *flags):
    if command == "write":
        cfg = config_for(flavor)
        w = random_weights(flavor, cfg)
        if "--dtype" in flags:
            stored = STORED[flags[flags.index("--dtype") + 1]]
            w = {k: v.to(stored) for k, v in w.items()}
        write_dir(directory, cfg, w, sharded="--sharded" in flags)
    out = hf_outputs(flavor, directory)
    if "--dtype" in flags and flags[flags.index("--dtype") + 1] == "bf16":
        # The same model computing in bf16 (weights, activations and products), as transformers
        # runs a bf16 checkpoint loaded with dtype=torch.bfloat16.
        out["logits_bf16"] = hf_outputs(flavor, directory, torch.bfloat16)["logits"].float()
    if command == "write" and (flavor in LLAMA_FAMILY or flavor.startswith("modernbert")):
        # The same weights without the flavor's feature, through transformers too.
        plain_cfg, plain_w = without_feature(flavor, cfg, w)
        plain = directory + "-plain"
        write_dir(plain, plain_cfg, plain_w)
        plain_out = hf_outputs(flavor, plain)
        out["logits_plain"] = plain_out["logits"] if "logits" in plain_out else plain_out["sequence_output"]
    ids, mask, types, dec_ids = inputs()
    if flavor.startswith("longformer"):
        types = torch.zeros_like(types)  # one token type
        if longformer_global(flavor) is not None:
            out["global_attention_mask"] = longformer_global(flavor)
    out.update({"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "decoder_input_ids": dec_ids})
    if "loss" in out:
        out["labels"] = labels_for(flavor)
    save_tensors(out, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
