"""Tiny models in Hugging Face's layout, with reference forwards, for zoo's import/export tests.

Usage:
  hf_models.py OUT.pt write FLAVOR DIR [--sharded] [--dtype bf16|fp16]
      Writes DIR/config.json and random weights in Hugging Face naming as safetensors (one
      file, or two shards plus model.safetensors.index.json; float32, or rounded to bfloat16 or
      float16 and stored so), and saves the inputs and the reference outputs into OUT.pt. The
      references read the stored values converted to float32. For the LLaMA family, OUT.pt also
      holds logits_plain: the same model without its flavor's feature (rope scaling, sliding
      window, q/k/v biases), so a test can see that the feature changes the outputs.
  hf_models.py OUT.pt check FLAVOR DIR
      Reads DIR (as written by zoo export-hf) and saves the reference outputs of those weights
      on the same inputs into OUT.pt.

FLAVOR: gpt2, bert, bert_mlm, bert_cls, t5, t5_v1_1, and the LLaMA family:
  llama       grouped-query attention, head_dim apart from hidden_size / heads, untied head,
              LLaMA 3.1 rope scaling, and the inv_freq buffer older files carry
  llama_tied  multi-query attention, tied head (with the tied copy in the file), linear rope
              scaling spelled the old way ("type"), attention_bias and mlp_bias
  mistral     grouped-query attention and a sliding window shorter than the inputs
  qwen2       grouped-query attention, biases on q, k and v, tied head, a sliding window that
              use_sliding_window turns off

The forwards below are written from the published architectures (GPT-2: Radford et al. 2019
with Hugging Face's Conv1D weight layout; BERT: Devlin et al. 2019; T5: Raffel et al. 2020 and
its v1.1 changes; LLaMA: Touvron et al. 2023 with Hugging Face's half-rotation RoPE layout and
LLaMA 3.1's rope scaling as Meta's llama-models applies it; Mistral: Jiang et al. 2023's sliding
window, as transformers masks it; Qwen2: Yang et al. 2024's q/k/v biases), in plain tensor
operations, independently of zoo. safetensors files are written and read by hand (8-byte
little-endian header length, JSON header, raw data).
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

from tensor_file import save_tensors

VOCAB = int(os.environ.get("ZOO_HF_VOCAB", "96"))  # larger to pair the model with a zoo tokenizer
D, HEADS, FF, LAYERS, POSITIONS = 32, 4, 64, 2, 64
BATCH, T, T_DEC = 2, 7, 5


# --- safetensors by hand ---------------------------------------------------------------------

DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
          torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL"}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = t.view(torch.uint8).numpy().tobytes() if t.dtype != torch.bfloat16 else \
            t.view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    inverse = {v: k for k, v in DTYPES.items()}
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        dtype = inverse[e["dtype"]]
        buf = bytearray(data[begin:end])
        t = torch.frombuffer(buf, dtype=torch.uint8) if end > begin else torch.zeros(0, dtype=torch.uint8)
        out[name] = t.view(dtype).reshape(e["shape"]).clone()
    return out


def read_dir(directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for name in files:
        weights.update(read_safetensors(os.path.join(directory, name)))
    with open(os.path.join(directory, "config.json")) as f:
        return json.load(f), weights


# --- configs and random weights in Hugging Face naming ---------------------------------------

LLAMA_FAMILY = ("llama", "llama_tied", "mistral", "qwen2")


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
    return {**base, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "rope_theta": 1000000.0,
            "tie_word_embeddings": True, "use_sliding_window": False, "sliding_window": 4, "max_window_layers": 28}


def config_for(flavor):
    if flavor in LLAMA_FAMILY:
        return llama_config(flavor)
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
    g = torch.Generator().manual_seed(sum(map(ord, flavor)))
    w = {}

    def rand(name, *shape, scale=0.2, offset=0.0):
        w[name] = torch.randn(*shape, generator=g) * scale + offset

    if flavor in LLAMA_FAMILY:
        n, nkv, hd = llama_heads(cfg)
        bias = llama_biases(cfg)
        rand("model.embed_tokens.weight", VOCAB, D)
        for i in range(LAYERS):
            p = f"model.layers.{i}."
            rand(p + "input_layernorm.weight", D, offset=1.0)
            rand(p + "post_attention_layernorm.weight", D, offset=1.0)
            for m, rows, cols in (("q", n * hd, D), ("k", nkv * hd, D), ("v", nkv * hd, D), ("o", D, n * hd)):
                rand(p + f"self_attn.{m}_proj.weight", rows, cols)
                if bias[m]:
                    rand(p + f"self_attn.{m}_proj.bias", rows)
            for m, rows, cols in (("gate", FF, D), ("up", FF, D), ("down", D, FF)):
                rand(p + f"mlp.{m}_proj.weight", rows, cols)
                if bias["mlp"]:
                    rand(p + f"mlp.{m}_proj.bias", rows)
        rand("model.norm.weight", D, offset=1.0)
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


# --- reference forwards ----------------------------------------------------------------------

def heads(x, n):
    b, t, _ = x.shape
    return x.view(b, t, n, -1).transpose(1, 2)


def merge(x):
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def gpt2_forward(w, cfg, ids):
    eps, n = cfg["layer_norm_epsilon"], cfg["n_head"]
    t = ids.shape[1]
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:t]
    causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        h = F.layer_norm(x, (D,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        q, k, v = (h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]).split(D, -1)
        q, k, v = heads(q, n), heads(k, n), heads(v, n)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        a = merge(s.masked_fill(~causal, float("-inf")).softmax(-1) @ v)
        x = x + a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (D,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = F.gelu(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (D,), w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    return {"logits": x @ w["transformer.wte.weight"].T}


def bert_forward(w, cfg, flavor, ids, mask, types):
    base = "" if flavor == "bert" else "bert."
    eps, n = cfg["layer_norm_eps"], cfg["num_attention_heads"]

    def ln(x, name):
        return F.layer_norm(x, (D,), w[name + ".weight"], w[name + ".bias"], eps)

    def lin(x, name):
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    t = ids.shape[1]
    x = (w[base + "embeddings.word_embeddings.weight"][ids] + w[base + "embeddings.position_embeddings.weight"][:t]
         + w[base + "embeddings.token_type_embeddings.weight"][types])
    x = ln(x, base + "embeddings.LayerNorm")
    keep = mask.bool()[:, None, None, :]
    for i in range(cfg["num_hidden_layers"]):
        p = f"{base}encoder.layer.{i}."
        q, k, v = (heads(lin(x, p + "attention.self." + m), n) for m in ("query", "key", "value"))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        a = merge(s.masked_fill(~keep, float("-inf")).softmax(-1) @ v)
        x = ln(x + lin(a, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = F.gelu(lin(x, p + "intermediate.dense"))
        x = ln(x + lin(h, p + "output.dense"), p + "output.LayerNorm")
    out = {"sequence_output": x}
    if flavor != "bert_mlm":
        out["pooled_output"] = torch.tanh(lin(x[:, 0], base + "pooler.dense"))
    if flavor == "bert_mlm":
        h = ln(F.gelu(lin(x, "cls.predictions.transform.dense")), "cls.predictions.transform.LayerNorm")
        out["logits"] = h @ w["bert.embeddings.word_embeddings.weight"].T + w["cls.predictions.bias"]
    if flavor == "bert_cls":
        out["logits"] = lin(out["pooled_output"], "classifier")
    return out


def t5_bucket(relative, bidirectional, num_buckets, max_distance):
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative > 0).long() * num_buckets
        relative = relative.abs()
    else:
        relative = -torch.min(relative, torch.zeros_like(relative))
    exact = num_buckets // 2
    small = relative < exact
    large = exact + (torch.log(relative.float().clamp(min=1) / exact) / math.log(max_distance / exact)
                     * (num_buckets - exact)).long()
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(small, relative, large)


def t5_forward(w, cfg, ids, mask, dec_ids):
    eps, n = cfg["layer_norm_epsilon"], cfg["num_heads"]
    gated = cfg["feed_forward_proj"] == "gated-gelu"

    def rms(x, name):
        return w[name + ".weight"] * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def bias_for(stack, tq, tk, bidirectional):
        ctx, mem = torch.arange(tq)[:, None], torch.arange(tk)[None, :]
        b = t5_bucket(mem - ctx, bidirectional, cfg["relative_attention_num_buckets"],
                      cfg["relative_attention_max_distance"])
        table = w[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
        return table[b].permute(2, 0, 1)[None]  # (1, H, tq, tk)

    def attend(x, kv, name, bias, keep):
        q, k, v = heads(x @ w[name + ".q.weight"].T, n), heads(kv @ w[name + ".k.weight"].T, n), heads(kv @ w[name + ".v.weight"].T, n)
        s = q @ k.transpose(-1, -2) + bias  # T5 folds 1/sqrt(d) into its initialisation
        return merge(s.masked_fill(~keep, float("-inf")).softmax(-1) @ v) @ w[name + ".o.weight"].T

    def feed_forward(x, p):
        if gated:
            h = F.gelu(x @ w[p + "wi_0.weight"].T, approximate="tanh") * (x @ w[p + "wi_1.weight"].T)
        else:
            h = F.relu(x @ w[p + "wi.weight"].T)
        return h @ w[p + "wo.weight"].T

    enc_keep = mask.bool()[:, None, None, :]
    x = w["shared.weight"][ids]
    enc_bias = bias_for("encoder", ids.shape[1], ids.shape[1], True)
    for i in range(cfg["num_layers"]):
        p = f"encoder.block.{i}.layer."
        x = x + attend(rms(x, p + "0.layer_norm"), rms(x, p + "0.layer_norm"), p + "0.SelfAttention", enc_bias, enc_keep)
        x = x + feed_forward(rms(x, p + "1.layer_norm"), p + "1.DenseReluDense.")
    memory = rms(x, "encoder.final_layer_norm")
    td = dec_ids.shape[1]
    y = w["shared.weight"][dec_ids]
    dec_bias = bias_for("decoder", td, td, False)
    causal = torch.tril(torch.ones(td, td, dtype=torch.bool))[None, None]
    for i in range(cfg["num_decoder_layers"]):
        p = f"decoder.block.{i}.layer."
        h = rms(y, p + "0.layer_norm")
        y = y + attend(h, h, p + "0.SelfAttention", dec_bias, causal)
        y = y + attend(rms(y, p + "1.layer_norm"), memory, p + "1.EncDecAttention", 0.0, enc_keep)
        y = y + feed_forward(rms(y, p + "2.layer_norm"), p + "2.DenseReluDense.")
    y = rms(y, "decoder.final_layer_norm")
    if cfg["tie_word_embeddings"]:
        return {"logits": (y * D ** -0.5) @ w["shared.weight"].T}
    return {"logits": y @ w["lm_head.weight"].T}


def llama_heads(cfg):
    n = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", n)
    return n, nkv, cfg.get("head_dim") or cfg["hidden_size"] // n


def llama_biases(cfg):
    """Which projections have biases: LLaMA's attention_bias covers q, k, v and o, its mlp_bias
    the feed-forward; Qwen2 biases q, k and v only; Mistral none."""
    if cfg["model_type"] == "qwen2":
        return {"q": True, "k": True, "v": True, "o": False, "mlp": False}
    attention = cfg["model_type"] == "llama" and cfg.get("attention_bias", False)
    return {"q": attention, "k": attention, "v": attention, "o": attention,
            "mlp": cfg["model_type"] == "llama" and cfg.get("mlp_bias", False)}


def llama_window(cfg):
    """Keys a query sees, itself included, or None. Mistral: sliding_window (4096 when absent).
    Qwen2: only with use_sliding_window, in layers from max_window_layers on (all of them here)."""
    if cfg["model_type"] == "mistral":
        return cfg.get("sliding_window", 4096)
    if cfg["model_type"] == "qwen2" and cfg.get("use_sliding_window", False):
        assert cfg.get("max_window_layers", 28) == 0, "a window in some layers only is not modelled here"
        return cfg.get("sliding_window", 4096)
    return None


def rope_frequencies(cfg, head_dim):
    """theta_i = rope_theta^(-2i / head_dim), then rope_scaling, in float64, one at a time."""
    base = cfg.get("rope_theta", 10000.0)
    freqs = [base ** (-2 * i / head_dim) for i in range(head_dim // 2)]
    scaling = cfg.get("rope_scaling")
    kind = None if scaling is None else scaling.get("rope_type", scaling.get("type"))
    if kind == "linear":  # position interpolation: positions / factor
        freqs = [f / scaling["factor"] for f in freqs]
    elif kind == "llama3":  # LLaMA 3.1, Meta's llama-models apply_scaling
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        scaled = []
        for f in freqs:
            wavelength = 2 * math.pi / f
            if wavelength < old / high:
                scaled.append(f)
            elif wavelength > old / low:
                scaled.append(f / factor)
            else:
                smooth = (old / wavelength - low) / (high - low)
                scaled.append((1 - smooth) * f / factor + smooth * f)
        freqs = scaled
    else:
        assert kind in (None, "default"), kind
    return torch.tensor(freqs, dtype=torch.float64)


def check_llama3_frequencies():
    """The llama flavor's frequencies worked by hand: head_dim 16, rope_theta 10^4, factor 8,
    low/high_freq_factor 1/4, original context 100: wavelengths under 25 are kept, over 100
    divided by 8, and theta_2 = 0.1 (wavelength 20 pi = 62.83) blended with
    s = (100 / 62.83 - 1) / 3 = 0.1971831: 0.1 / 8 + s (0.1 - 0.1 / 8) = 0.0297535."""
    f = rope_frequencies(config_for("llama"), 16)
    for i, expected in ((0, 1.0), (1, 10 ** -0.5), (2, 0.02975352514), (3, 10 ** -1.5 / 8), (7, 10 ** -3.5 / 8)):
        assert abs(f[i].item() - expected) < 1e-10, (i, f[i].item(), expected)


def rotate(x, freqs):
    """RoPE in Hugging Face's layout: feature j turns with feature j + head_dim / 2 by
    position * freqs[j]. x: (B, H, T, head_dim)."""
    angles = torch.arange(x.shape[2], dtype=torch.float64)[:, None] * freqs[None, :]  # (T, head_dim / 2)
    cos, sin = torch.cat([angles.cos()] * 2, -1).float(), torch.cat([angles.sin()] * 2, -1).float()
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


def llama_forward(w, cfg, ids):
    n, nkv, hd = llama_heads(cfg)
    eps, bias, freqs = cfg["rms_norm_eps"], llama_biases(cfg), rope_frequencies(cfg, hd)

    def rms(x, name):
        return w[name + ".weight"] * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def lin(x, name, biased):
        return x @ w[name + ".weight"].T + (w[name + ".bias"] if biased else 0.0)

    t = ids.shape[1]
    query, key = torch.arange(t)[:, None], torch.arange(t)[None, :]
    allowed = key <= query
    window = llama_window(cfg)
    if window is not None:
        allowed = allowed & (query - key < window)
    x = w["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, p + "input_layernorm")
        q = rotate(heads(lin(h, p + "self_attn.q_proj", bias["q"]), n), freqs)
        k = rotate(heads(lin(h, p + "self_attn.k_proj", bias["k"]), nkv), freqs)
        v = heads(lin(h, p + "self_attn.v_proj", bias["v"]), nkv)
        # Grouped queries: query head j reads key/value head j // (n / nkv).
        k, v = k.repeat_interleave(n // nkv, 1), v.repeat_interleave(n // nkv, 1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        a = merge(s.masked_fill(~allowed, float("-inf")).softmax(-1) @ v)
        x = x + lin(a, p + "self_attn.o_proj", bias["o"])
        h = rms(x, p + "post_attention_layernorm")
        m = F.silu(lin(h, p + "mlp.gate_proj", bias["mlp"])) * lin(h, p + "mlp.up_proj", bias["mlp"])
        x = x + lin(m, p + "mlp.down_proj", bias["mlp"])
    x = rms(x, "model.norm")
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    return {"logits": x @ head.T}


def without_feature(flavor, cfg, w):
    """The flavor's model without the feature it tests: rope scaling, the window, the biases."""
    if flavor in ("llama", "llama_tied"):
        return {k: v for k, v in cfg.items() if k != "rope_scaling"}, w
    if flavor == "mistral":
        return {**cfg, "sliding_window": None}, w
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


def forward(flavor, cfg, w):
    ids, mask, types, dec_ids = inputs()
    with torch.no_grad():
        if flavor in LLAMA_FAMILY:
            out = llama_forward(w, cfg, ids)
        elif flavor == "gpt2":
            out = gpt2_forward(w, cfg, ids)
        elif flavor.startswith("bert"):
            out = bert_forward(w, cfg, flavor, ids, mask, types)
        else:
            out = t5_forward(w, cfg, ids, mask, dec_ids)
    out.update({"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "decoder_input_ids": dec_ids})
    return out


STORED = {"bf16": torch.bfloat16, "fp16": torch.float16}


def main(out_path, command, flavor, directory, *flags):
    if command == "write":
        cfg = config_for(flavor)
        w = random_weights(flavor, cfg)
        if "--dtype" in flags:
            stored = STORED[flags[flags.index("--dtype") + 1]]
            w = {k: v.to(stored) for k, v in w.items()}
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        if "--sharded" in flags:
            names = sorted(w)
            half = len(names) // 2
            shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
            weight_map = {}
            for file, part in shards.items():
                write_safetensors(os.path.join(directory, file), {k: w[k] for k in part})
                weight_map.update({k: file for k in part})
            with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
                total = sum(t.numel() * t.element_size() for t in w.values())
                json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
        else:
            write_safetensors(os.path.join(directory, "model.safetensors"), w)
        w = {k: v.float() for k, v in w.items()}  # the references compute on the stored values
    else:
        cfg, w = read_dir(directory)
        w = {k: v.float() if v.is_floating_point() else v for k, v in w.items()}  # bf16 exports too
        if cfg.get("tie_word_embeddings", True) and "lm_head.weight" in w and flavor == "gpt2":
            pass  # a tied head may be written; the reference uses wte
    out = forward(flavor, cfg, w)
    if command == "write" and flavor in LLAMA_FAMILY:
        check_llama3_frequencies()
        out["logits_plain"] = forward(flavor, *without_feature(flavor, cfg, w))["logits"]
    save_tensors(out, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
