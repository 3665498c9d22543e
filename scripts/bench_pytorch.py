#!/usr/bin/python3
"""The PyTorch side of `zoo bench --compare`: the same workloads, shapes and steps in Python
(the -bf16 ones under torch.autocast("cpu", torch.bfloat16)).

    python3 scripts/bench_pytorch.py WORKLOAD [STEPS]

Prints one JSON object (name, unit, value, peak_rss_mb). Threads come from ZOO_BENCH_THREADS
(what zoo chose for itself), the device from ZOO_BENCH_DEVICE (cpu or cuda: `zoo bench --device`;
on cuda, bf16 is torch.autocast("cuda", torch.bfloat16), every timing ends in a synchronisation,
attention is F.scaled_dot_product_attention as nanoGPT's is there, and peak_rss_mb is the GPU's
torch.cuda.max_memory_allocated()). The models are written here the way a PyTorch user writes them
(nanoGPT's GPT with its KV-cache decoding loop; BERT from torch.nn.TransformerEncoder), with
zoo's configs' sizes: gpt2-small and gpt-tiny (pre-norm, GELU tanh, learned positions, tied
head), bert-base (post-norm, exact GELU); the qwen3 rows use transformers' Qwen3ForCausalLM (and Qwen3MoeForCausalLM for -moe) itself.
"""
import json
import math
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

GPT_SIZES = {
    "gpt2-small": dict(vocab=50257, d=768, layers=12, heads=12, ff=3072, positions=1024),
    "gpt-tiny": dict(vocab=8192, d=256, layers=4, heads=4, ff=1024, positions=256),
}


DEVICE = torch.device(os.environ.get("ZOO_BENCH_DEVICE", "cpu"))
FUSED_ATTENTION = DEVICE.type == "cuda"


class Attention(nn.Module):
    def __init__(self, d, heads, positions):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.register_buffer("causal", torch.tril(torch.ones(positions, positions, dtype=torch.bool)))

    def forward(self, x, cache=None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        if cache is not None:
            if cache[0] is not None:
                k = torch.cat([cache[0], k], dim=2)
                v = torch.cat([cache[1], v], dim=2)
            cache[0], cache[1] = k, v
        past = k.size(2) - t
        if FUSED_ATTENTION and (past == 0 or t == 1):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
            return self.out(y.transpose(1, 2).contiguous().view(b, t, d))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        scores = scores.masked_fill(~self.causal[past:past + t, :past + t], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.out(y.transpose(1, 2).contiguous().view(b, t, d))


class Block(nn.Module):
    def __init__(self, d, heads, ff, positions):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads, positions)
        self.up, self.down = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln1(x), cache)
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, ff, positions):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d)
        self.positions = nn.Embedding(positions, d)
        self.blocks = nn.ModuleList(Block(d, heads, ff, positions) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids, caches=None, start=0):
        pos = torch.arange(start, start + ids.size(1), device=ids.device)
        x = self.tokens(ids) + self.positions(pos)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        # A quantized model's head is a linear layer of its own (quantize_gpt).
        return self.head(self.ln(x)) if hasattr(self, "head") else F.linear(self.ln(x), self.tokens.weight)


def synchronize():
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def median_seconds(warmup, runs, f):
    for _ in range(warmup):
        f()
    synchronize()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        f()
        synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


# ZOO_BENCH_COMPILE=1 (zoo bench --torch-compile): training and the BERT forward run their model
# through torch.compile (Inductor's C++ kernels here); the decoding loop, whose shapes change
# every token, stays eager.
COMPILE = os.environ.get("ZOO_BENCH_COMPILE") == "1"


def compiled(module):
    return torch.compile(module) if COMPILE else module


def train(name, b, t, steps, bf16=False):
    if DEVICE.type == "cuda" and name == "gpt2-small" and t == 256:
        b, t = 8, 1024  # as zoo bench: the size that keeps a GPU busy
    torch.manual_seed(0)
    eager = GPT(**GPT_SIZES[name]).to(DEVICE)
    # The fused kernel, as PyTorch's users run AdamW when they care for speed (CPU and CUDA).
    optimizer = torch.optim.AdamW(eager.parameters(), lr=6e-4, weight_decay=0.1, fused=True)
    model = compiled(eager)
    data = torch.randint(GPT_SIZES[name]["vocab"], (b, t + 1)).to(DEVICE)
    x, y = data[:, :t].contiguous(), data[:, 1:].contiguous()

    split = {"forward": [], "backward": [], "optimizer": []}

    def step():
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        synchronize()
        t1 = time.perf_counter()
        loss.backward()
        synchronize()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(eager.parameters(), 1.0)
        optimizer.step()
        synchronize()
        split["forward"].append(t1 - t0)
        split["backward"].append(t2 - t1)
        split["optimizer"].append(time.perf_counter() - t2)

    rate = b * t / median_seconds(2, steps or 5, step)
    extra = {k: 1000 * sorted(v[2:])[len(v[2:]) // 2] for k, v in split.items()}
    events = op_events(step)
    write_trace(f"train-{name}{'-bf16' if bf16 else ''}", step)
    return "tokens/s", rate, {"split_ms": extra, "op_events": events}


def op_events(step):
    """One more run of `step` under torch.profiler: each op's name and the index of the op it ran
    in (-1: none), which zoo bench counts as it counts its own (core/op_profile.h)."""
    from torch.profiler import ProfilerActivity, profile
    # Kineto logs its start and stop (and a missing GPU) on file descriptor 2: not the bench's.
    saved = os.dup(2)
    with open(os.devnull, "w") as quiet:
        os.dup2(quiet.fileno(), 2)
        try:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                step()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    events = list(prof.events())
    index = {id(e): i for i, e in enumerate(events)}
    return [[e.name, index.get(id(e.cpu_parent), -1) if e.cpu_parent is not None else -1] for e in events]


def write_trace(name, work):
    """With ZOO_BENCH_TRACE_DIR (zoo bench --trace), one more run of `work` under torch.profiler,
    the GPU's kernels included on CUDA, written as DIR/pytorch-NAME.json (whole, then renamed) for
    scripts/trace_summary.py beside zoo's DIR/zoo-NAME.json."""
    folder = os.environ.get("ZOO_BENCH_TRACE_DIR")
    if not folder:
        return
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEVICE.type == "cuda" else [])
    saved = os.dup(2)  # Kineto's own log lines, as in op_events
    with open(os.devnull, "w") as quiet:
        os.dup2(quiet.fileno(), 2)
        try:
            with profile(activities=activities) as prof:
                work()
                synchronize()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    path = os.path.join(folder, f"pytorch-{name}.json")
    prof.export_chrome_trace(path + ".partial")
    os.replace(path + ".partial", path)


# long-KIND-T[-gpt2]: one training step of a GPT with gpt-tiny's sizes (gpt2-small's) at batch 1 and T tokens, its
# attention F.scaled_dot_product_attention given what each KIND needs, as a PyTorch user writes
# it: learned positions and is_causal (the flash kernel); ALiBi as an (H, T, T) float bias; T5's
# relative bias (decoder buckets, 32 of them up to distance 128, one table shared by the layers)
# as an (H, T, T) tensor requiring grad; RoPE with a sliding window of 256 as a boolean mask.
LONG_KINDS = ("learned", "alibi", "relative", "window")


def relative_buckets(relative, num_buckets=32, max_distance=128):
    """T5's decoder buckets of key - query (unidirectional): exact below num_buckets / 2, then
    logarithmically wider up to max_distance."""
    n = torch.clamp(-relative, min=0)
    exact = num_buckets // 2
    large = exact + (torch.log(n.float() / exact + 1e-30) / math.log(max_distance / exact)
                     * (num_buckets - exact)).long()
    return torch.where(n < exact, n, torch.clamp(large, max=num_buckets - 1))


class LongGPT(nn.Module):
    def __init__(self, kind, t, vocab, d, layers, heads, ff, window=256):
        super().__init__()
        self.kind, self.heads = kind, heads
        self.tokens = nn.Embedding(vocab, d)
        self.positions = nn.Embedding(t, d) if kind == "learned" else None
        self.relative = nn.Embedding(32, heads) if kind == "relative" else None
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.ln1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.ln2 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.up = nn.ModuleList(nn.Linear(d, ff) for _ in range(layers))
        self.down = nn.ModuleList(nn.Linear(ff, d) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        i = torch.arange(t)
        distance = i.view(1, -1) - i.view(-1, 1)  # key - query
        causal = distance <= 0
        if kind == "alibi":
            slopes = torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)])
            bias = -slopes.view(-1, 1, 1) * distance.abs().float()
            self.register_buffer("bias", bias.masked_fill(~causal, float("-inf")))
        if kind == "relative":
            self.register_buffer("buckets", relative_buckets(distance))
            self.register_buffer("causal_bias", torch.zeros(t, t).masked_fill(~causal, float("-inf")))
        if kind == "window":
            self.register_buffer("band", causal & (distance > -window))
            inverse = 1.0 / (10000 ** (torch.arange(0, d // heads, 2).float() / (d // heads)))
            angles = torch.outer(i.float(), inverse)
            self.register_buffer("cos", torch.cat([angles.cos()] * 2, -1))
            self.register_buffer("sin", torch.cat([angles.sin()] * 2, -1))
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def rotate(self, x):
        half = x.size(-1) // 2
        return x * self.cos + torch.cat([-x[..., half:], x[..., :half]], -1) * self.sin

    def forward(self, ids):
        b, t = ids.shape
        x = self.tokens(ids)
        if self.positions is not None:
            x = x + self.positions(torch.arange(t, device=ids.device))
        bias = None
        if self.kind == "relative":  # built once per forward, as T5's first layer does
            bias = self.relative(self.buckets).permute(2, 0, 1) + self.causal_bias
        for qkv, out, ln1, ln2, up, down in zip(self.qkv, self.out, self.ln1, self.ln2, self.up, self.down):
            d = x.size(-1)
            q, k, v = qkv(ln1(x)).split(d, dim=2)
            q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
            if self.kind == "learned":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            elif self.kind == "alibi":
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias)
            elif self.kind == "relative":
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            else:
                y = F.scaled_dot_product_attention(self.rotate(q), self.rotate(k), v, attn_mask=self.band)
            x = x + out(y.transpose(1, 2).contiguous().view(b, t, d))
            x = x + down(F.gelu(up(ln2(x)), approximate="tanh"))
        return F.linear(self.ln(x), self.tokens.weight)


def train_long(kind, t, size, steps):
    torch.manual_seed(0)
    sizes = {k: v for k, v in GPT_SIZES[size].items() if k != "positions"}
    model = LongGPT(kind, t, **sizes).to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
    data = torch.randint(sizes["vocab"], (1, t + 1)).to(DEVICE)
    x, y = data[:, :t].contiguous(), data[:, 1:].contiguous()

    def step():
        optimizer.zero_grad(set_to_none=True)
        logits = model(x)
        F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return "tokens/s", t / median_seconds(1, steps or 2, step)


def forward_bert(steps):
    torch.manual_seed(0)
    d, vocab, b, t = 768, 30522, 8, 128
    layer = nn.TransformerEncoderLayer(d, 12, 3072, dropout=0.0, activation="gelu", batch_first=True,
                                       layer_norm_eps=1e-12)
    encoder = compiled(nn.TransformerEncoder(layer, 12, enable_nested_tensor=False).eval().to(DEVICE))
    tokens, positions, types = (nn.Embedding(vocab, d).to(DEVICE), nn.Embedding(512, d).to(DEVICE),
                                nn.Embedding(2, d).to(DEVICE))
    norm, pooler = nn.LayerNorm(d, eps=1e-12).to(DEVICE), nn.Linear(d, d).to(DEVICE)
    ids = torch.randint(vocab, (b, t)).to(DEVICE)
    mask = torch.zeros(b, t, dtype=torch.bool, device=DEVICE)  # no padding

    def forward():
        x = norm(tokens(ids) + positions(torch.arange(t, device=DEVICE)) + types(torch.zeros_like(ids)))
        h = encoder(x, src_key_padding_mask=mask)
        return torch.tanh(pooler(h[:, 0]))

    with torch.inference_mode():
        return "tokens/s", b * t / median_seconds(2, steps or 5, forward)


class Int4Linear(nn.Module):
    """A linear layer of int4 weights in groups of 32 with a float zero (torchao's tinygemm
    parameters) through ATen's CPU product _weight_int4pack_mm_for_cpu: torchao 0.18's int4
    configs run on GPUs only."""

    def __init__(self, weight, bias=None, group=32):
        super().__init__()
        from torchao.quantization.quant_primitives import (MappingType, _choose_qparams_affine_tinygemm,
                                                           _quantize_affine_tinygemm)
        from torchao.quantization.utils import pack_tinygemm_scales_and_zeros
        w = weight.detach().float()
        self.outputs = w.size(0)
        w = F.pad(w, (0, 0, 0, -w.size(0) % 16))  # the packing takes outputs in 16s: GPT-2's head has 50257
        block = (1, group)
        scale, zero = _choose_qparams_affine_tinygemm(w, MappingType.ASYMMETRIC, block, torch.int32, 0, 15,
                                                      scale_dtype=torch.float32, zero_point_dtype=torch.float32)
        q = _quantize_affine_tinygemm(w, block, scale, zero, torch.int32, 0, 15)
        self.group = group
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        self.scales_and_zeros = pack_tinygemm_scales_and_zeros(scale.reshape(w.size(0), -1),
                                                               zero.reshape(w.size(0), -1), torch.float32)
        self.bias = bias

    def forward(self, x):
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x.reshape(-1, x.size(-1)), self.packed, self.group,
                                                       self.scales_and_zeros)
        y = y[:, :self.outputs].reshape(*x.shape[:-1], -1)
        return y if self.bias is None else y + self.bias


def quantize_gpt(model, weights):
    """The nanoGPT model's linear layers and its head in int8 (torchao's Int8WeightOnlyConfig,
    which runs on the CPU) or int4 (Int4Linear), as zoo bench's -int8/-int4 rows quantize every
    product and the tied head; the embedding's lookup stays float32 (it reads one row a token)."""
    import warnings
    warnings.filterwarnings("ignore")
    head = nn.Linear(model.tokens.weight.size(1), model.tokens.weight.size(0), bias=False)
    head.weight = nn.Parameter(model.tokens.weight.detach().clone())
    model.head = head
    if weights == "int8":
        from torchao.quantization import Int8WeightOnlyConfig, quantize_
        quantize_(model, Int8WeightOnlyConfig())
        return model

    def replace(module):
        for name, child in module.named_children():
            if isinstance(child, nn.Linear):
                setattr(module, name, Int4Linear(child.weight, child.bias))
            else:
                replace(child)
    replace(model)
    return model


def generate(steps, dtype=torch.float32, weights=None):
    torch.manual_seed(0)
    model = GPT(**GPT_SIZES["gpt2-small"]).eval().to(DEVICE, dtype)
    if weights is not None:
        model = quantize_gpt(model, weights)
    prompt = torch.tensor([[(i * 7919) % 50257 for i in range(16)]], device=DEVICE)

    def decode():
        caches = [[None, None] for _ in model.blocks]
        logits = model(prompt, caches, 0)
        ids = [prompt]
        for step in range(128):
            token = logits[:, -1].argmax(-1, keepdim=True)
            ids.append(token)
            if step + 1 < 128:
                logits = model(token, caches, 16 + step)
        return torch.cat(ids, 1)

    with torch.no_grad():
        rate = 128 / median_seconds(1, min(steps, 3) if steps else 3, decode)
        write_trace("generate-gpt2-small" + ("-bf16" if dtype == torch.bfloat16 else "") +
                    ("-" + weights if weights else ""), decode)
        return "tokens/s", rate


# Qwen3-0.6B's shapes (configs/qwen3-0.6b.yaml), random weights, in transformers' own
# Qwen3ForCausalLM: eager, attention through F.scaled_dot_product_attention.
def qwen3_model():
    from transformers import Qwen3Config, Qwen3ForCausalLM
    config = Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                         num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                         rope_theta=1000000.0, tie_word_embeddings=True, attention_dropout=0.0)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return Qwen3ForCausalLM(config).to(DEVICE)


# The same with a mixture of 4 experts of half the width in each layer, top 2 renormalised: the
# dense model's active size (bench/workloads.h's qwen3_moe_overrides), in Qwen3MoeForCausalLM.
def qwen3_moe_model():
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    config = Qwen3MoeConfig(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                            num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                            rope_theta=1000000.0, tie_word_embeddings=True, attention_dropout=0.0, num_experts=4,
                            num_experts_per_tok=2, moe_intermediate_size=1536, norm_topk_prob=True,
                            router_aux_loss_coef=0.001, output_router_logits=True)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return Qwen3MoeForCausalLM(config).to(DEVICE)


def train_qwen3(steps, b=1, t=256, make=qwen3_model):
    model = make().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
    data = torch.randint(151936, (b, t)).to(DEVICE)

    def step():
        optimizer.zero_grad(set_to_none=True)
        # labels shifted inside, as zoo's causal LM loss; a mixture's loss holds its router's term
        model(input_ids=data, labels=data).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return "tokens/s", b * t / median_seconds(1, steps or 5, step)


def finetune_qwen2_lora(steps, bf16=False, b=2, t=256):
    """Qwen2-0.5B's shape (random weights) in transformers with peft's LoRA, rank 8 on q_proj and
    v_proj, as a user fine-tunes it: the loss from labels, clipping, fused AdamW on the adapters."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=131072,
                         rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, attention_dropout=0.0)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"])
    model = get_peft_model(Qwen2ForCausalLM(config), lora).to(DEVICE).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, weight_decay=0.1, fused=True)
    data = torch.randint(151936, (b, t)).to(DEVICE)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=data, labels=data).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()

    rate = b * t / median_seconds(1, steps or 3, step)
    return "tokens/s", rate, {"op_events": op_events(step)}


def generate_qwen3(steps, new_tokens=64, make=qwen3_model):
    model = make().eval()
    prompt = torch.tensor([[(i * 7919) % 151936 for i in range(16)]], device=DEVICE)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0

    def decode():
        return model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                              max_new_tokens=new_tokens, min_new_tokens=new_tokens)

    with torch.no_grad():
        return "tokens/s", new_tokens / median_seconds(1, min(steps, 3) if steps else 3, decode)


def serve(name, steps):
    """The serve rows: transformers' GPT2LMHeadModel (gpt2-small's sizes, random weights) behind an
    OpenAI-style /v1/completions that answers one request at a time, as a plain PyTorch server
    does; measured by zoo's own load generator (`zoo bench --worker NAME --serve-target`)."""
    import http.server
    import subprocess
    import threading

    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    sizes = GPT_SIZES["gpt2-small"]
    config = GPT2Config(vocab_size=sizes["vocab"], n_embd=sizes["d"], n_layer=sizes["layers"], n_head=sizes["heads"],
                        n_inner=sizes["ff"], n_positions=sizes["positions"])
    model = GPT2LMHeadModel(config).eval().to(DEVICE)
    files = os.environ["ZOO_BENCH_GPT2_TOKENIZER"]
    tokenizer = ByteLevelBPETokenizer(f"{files}/vocab.json", f"{files}/merges.txt")  # GPT-2's, as zoo's side

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args):
            pass

        def do_POST(self):
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            ids = torch.tensor([request["prompt"]], device=DEVICE)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            generated, past = 0, None
            with torch.inference_mode():
                for _ in range(request["max_tokens"]):
                    out = model(ids, past_key_values=past, use_cache=True)
                    past = out.past_key_values
                    ids = out.logits[:, -1].argmax(-1, keepdim=True)
                    generated += 1
                    chunk = {"choices": [{"index": 0, "text": tokenizer.decode(ids[0].tolist()), "finish_reason": None}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            usage = {"prompt_tokens": len(request["prompt"]), "completion_tokens": generated}
            self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode())

    class Server(http.server.HTTPServer):
        request_queue_size = 64  # every client connects at once; the requests wait their turn

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    load = subprocess.run([os.environ["ZOO_BENCH_ZOO"], "--threads", "1", "bench", "--worker", name, "--serve-target",
                           f"127.0.0.1:{server.server_address[1]}", "--steps", str(steps)],
                          capture_output=True, text=True, check=True)
    server.shutdown()
    row = json.loads(load.stdout.strip().splitlines()[-1])
    extra = {k: v for k, v in row.items() if k not in ("name", "unit", "value", "peak_rss_mb")}
    return row["unit"], row["value"], extra


def gemm(steps, dtype=torch.float32):
    n = 8192 if DEVICE.type == "cuda" else 2048  # as zoo bench: a GPU needs the larger size
    a, b = torch.randn(n, n).to(DEVICE, dtype), torch.randn(n, n).to(DEVICE, dtype)
    c = torch.empty(n, n, dtype=dtype, device=DEVICE)
    return "GFLOP/s", 2 * n ** 3 / median_seconds(2, max(steps, 5) if steps else 10, lambda: torch.mm(a, b, out=c)) / 1e9


def bandwidth(steps):
    n = 512 * 1024 * 1024 // 4
    src = torch.rand(n).to(DEVICE)
    dst = torch.empty_like(src)
    return "GB/s", 8 * n / median_seconds(2, max(steps, 5) if steps else 10, lambda: dst.copy_(src)) / 1e9


def main():
    name = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    torch.set_num_threads(int(os.environ.get("ZOO_BENCH_THREADS", torch.get_num_threads())))
    workloads = {
        "gemm": lambda: gemm(steps),
        "gemm-bf16": lambda: gemm(steps, torch.bfloat16),
        "bandwidth": lambda: bandwidth(steps),
        "train-gpt2-small": lambda: train("gpt2-small", 4, 256, steps),
        "train-gpt-tiny": lambda: train("gpt-tiny", 16, 128, steps),
        "train-gpt2-small-bf16": lambda: train("gpt2-small", 4, 256, steps, bf16=True),
        "train-gpt-tiny-bf16": lambda: train("gpt-tiny", 16, 128, steps, bf16=True),
        "forward-bert-base": lambda: forward_bert(steps),
        "generate-gpt2-small": lambda: generate(steps),
        "generate-gpt2-small-bf16": lambda: generate(steps, torch.bfloat16),
        "generate-gpt2-small-int8": lambda: generate(steps, weights="int8"),
        "generate-gpt2-small-int4": lambda: generate(steps, weights="int4"),
        "train-qwen3-0.6b": lambda: train_qwen3(steps),
        "generate-qwen3-0.6b": lambda: generate_qwen3(steps),
        "finetune-qwen2-0.5b-lora": lambda: finetune_qwen2_lora(steps),
        "finetune-qwen2-0.5b-lora-bf16": lambda: finetune_qwen2_lora(steps, bf16=True),
        "train-qwen3-0.6b-moe": lambda: train_qwen3(steps, make=qwen3_moe_model),
        "generate-qwen3-0.6b-moe": lambda: generate_qwen3(steps, make=qwen3_moe_model),
    }
    for row in ("serve-gpt2-small-1", "serve-gpt2-small-8", "serve-gpt2-small-16", "serve-ttft-gpt2-small"):
        workloads[row] = lambda row=row: serve(row, steps)
    parts = name.split("-")
    if (len(parts) in (3, 4) and parts[0] == "long" and parts[1] in LONG_KINDS and parts[2].isdigit()
            and parts[3:] in ([], ["gpt2"])):
        size = "gpt2-small" if parts[3:] else "gpt-tiny"
        workloads[name] = lambda: train_long(parts[1], int(parts[2]), size, steps)
    if name not in workloads:
        sys.exit(f"unknown workload {name}; known: {', '.join(workloads)}")
    unit, value, *extra = workloads[name]()
    peak = (torch.cuda.max_memory_allocated() / 2**20 if DEVICE.type == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    result = {"name": name, "unit": unit, "value": value, "peak_rss_mb": peak,
              "compiled": COMPILE and not name.startswith(("generate", "gemm", "bandwidth", "serve"))}
    for more in extra:
        result.update(more)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
