# A stack of transformer blocks (layers/block.h): `blocks` of GPT and BERT, `encoder_blocks`
# and `decoder_blocks` of encoder-decoders. Each per-layer weight of zoo is stacked into one
# tensor of shape (L, ...): blocks.3.self_attn.qkv.weight is self_attn_qkv_weight[3] here, so
# the loop in forward reads layer i of each. A block is self-attention, cross-attention
# (decoders of encoder-decoders: cross_attn_* weights), and a feed-forward, each a residual
# branch with its norm, in pre-norm (GPT-2, LLaMA, T5), post-norm (BERT, Vaswani et al.) or sandwich
# (Gemma: self_attn_post_norm_*, ff_post_norm_* over each branch's output) order.
# A GPT's layers may mix tokens with linear or gated linear attention instead (layers/
# linear_attention.h): layer_kinds[i] says which, and each kind's weights are stacked over its own
# layers (linear_attn_*, gla_attn_*, self_attn_* for softmax), row kind_rows[i] for layer i.
# Likewise a layer's feed-forward is dense (ff_*) or a mixture of experts (moe_*; layers/
# mixture_of_experts.h) as ff_kinds[i] says, its weights at row ff_rows[i] of its kind's stack.
# The functions of common.py are methods here too.
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

# --- TorchScript below: Module::define reads this file from here on ---


def forward(self, x: Tensor, bias: Optional[Tensor], rope: Optional[Tuple[Tensor, Tensor]],
            start: int, cache: List[Tensor], memory: List[Tensor], memory_bias: Optional[Tensor],
            token_mask: Optional[Tensor], window_bias: Optional[Tensor] = None,
            window_rope: Optional[Tuple[Tensor, Tensor]] = None) -> Tensor:
    # x (B, T, D) at positions start .. start + T - 1 -> (B, T, D)
    # bias: added to every layer's self-attention scores, (B or 1, H or 1, T, K): masks and
    #   position terms; rope: cos and sin (B, 1, T, hs / 2) from positions.py
    # cache: keys and values of every layer (new_cache), written in place; empty for none
    # memory: keys and values of the encoder output for every layer (memory_keys_values), with
    #   memory_bias (B, 1, 1, S) masking its padding; empty outside decoders
    # token_mask (B, T): 1 at x's real tokens, what linear attention and Linformer layers read; None: all real
    # window_bias, window_rope: the bias and rotation of the layers layer_windows marks (Gemma's
    #   and ModernBERT's sliding layers: their window, their own RoPE base) where they differ from
    #   the others'
    for i in range(self.n_layers):
        layer_bias, layer_rope = bias, rope
        if self.layer_windows[i]:
            if window_bias is not None:
                layer_bias = window_bias
            if window_rope is not None:
                layer_rope = window_rope
        x = self._block(x, i, layer_bias, layer_rope, start, cache, memory, memory_bias, token_mask)
    return x


def _block(self, x: Tensor, i: int, bias: Optional[Tensor], rope: Optional[Tuple[Tensor, Tensor]],
           start: int, cache: List[Tensor], memory: List[Tensor], memory_bias: Optional[Tensor],
           token_mask: Optional[Tensor]) -> Tensor:
    cross_norm = self.cross_attn_norm_weight  # None but in decoders of encoder-decoders
    a = self.attention_norm_rows[i]  # the row of self_attn_norm_* for layer i, -1 without one
    post_attention, post_ff = self.self_attn_post_norm_weight, self.ff_post_norm_weight
    if post_attention is not None and post_ff is not None:
        # sandwich (Gemma 2, 3): x + norm2(f(norm1(x))) around each branch; decoder-only models
        h = self._norm_at(x, self.self_attn_norm_weight, self.self_attn_norm_bias, a)
        x = x + self._norm_at(self._self_attention(h, i, bias, rope, start, cache, token_mask), post_attention, None, i)
        h = self._norm_at(x, self.ff_norm_weight, self.ff_norm_bias, i)
        return x + self._norm_at(self._feed_forward(h, i), post_ff, None, i)
    if self.norm_position == "pre":
        h = x
        if a >= 0:  # ModernBERT's first layer has no norm before its attention
            h = self._norm_at(x, self.self_attn_norm_weight, self.self_attn_norm_bias, a)
        x = x + self._self_attention(h, i, bias, rope, start, cache, token_mask)
        if cross_norm is not None:
            h = self._norm_at(x, cross_norm, self.cross_attn_norm_bias, i)
            x = x + self._cross_attention(h, i, memory, memory_bias)
        h = self._norm_at(x, self.ff_norm_weight, self.ff_norm_bias, i)
        return x + self._feed_forward(h, i)
    assert self.norm_position == "post", "unknown norm_position " + self.norm_position
    x = x + self._self_attention(x, i, bias, rope, start, cache, token_mask)
    x = self._norm_at(x, self.self_attn_norm_weight, self.self_attn_norm_bias, a)
    if cross_norm is not None:
        x = x + self._cross_attention(x, i, memory, memory_bias)
        x = self._norm_at(x, cross_norm, self.cross_attn_norm_bias, i)
    x = x + self._feed_forward(x, i)
    return self._norm_at(x, self.ff_norm_weight, self.ff_norm_bias, i)


def _linear_at(self, x: Tensor, weight: Tensor, bias: Optional[Tensor], i: int) -> Tensor:
    # layer i of stacked weights (L, out, in) and biases (L, out)
    return self._project(x, weight[i], None if bias is None else bias[i])


def _norm_at(self, x: Tensor, weight: Tensor, bias: Optional[Tensor], i: int) -> Tensor:
    # layer i of stacked norm weights and biases (L, D)
    return self._norm(x, weight[i], None if bias is None else bias[i])


def _self_attention(self, x: Tensor, i: int, bias: Optional[Tensor], rope: Optional[Tuple[Tensor, Tensor]],
                    start: int, cache: List[Tensor], token_mask: Optional[Tensor]) -> Tensor:
    kind = self.layer_kinds[i]
    if kind == "linear":
        return self._linear_attention(x, i, start, cache, token_mask)
    if kind == "gated_linear":
        return self._gated_linear_attention(x, i, start, cache, token_mask)
    assert kind == "softmax", "unknown attention kind " + kind
    qkv_weight, out_weight = self.self_attn_qkv_weight, self.self_attn_out_weight
    assert qkv_weight is not None and out_weight is not None, "no softmax attention in this stack"
    r = self.kind_rows[i]
    b, t, _ = x.size()
    h, hkv, hs = self.n_heads, self.n_kv_heads, self.head_dim
    qkv = self._linear_at(x, qkv_weight, self.self_attn_qkv_bias, r)  # (B, T, (H + 2 Hkv) hs)
    q, k, v = qkv.split([h * hs, hkv * hs, hkv * hs], -1)
    q = q.view(b, t, h, hs).transpose(1, 2)  # (B, H, T, hs)
    k = k.view(b, t, hkv, hs).transpose(1, 2)  # (B, Hkv, T, hs)
    v = v.view(b, t, hkv, hs).transpose(1, 2)  # (B, Hkv, T, hs)
    q_norm, k_norm = self.self_attn_q_norm_weight, self.self_attn_k_norm_weight
    if q_norm is not None and k_norm is not None:
        # qk_norm (Qwen3): the model's norm over each query and key head, before the rotation
        q = self._norm(q, q_norm[r], None)
        k = self._norm(k, k_norm[r], None)
    if rope is not None:
        q = self._rotate(q, rope)
        k = self._rotate(k, rope)
    qkv_global = self.self_attn_qkv_global_weight
    if qkv_global is not None:
        y = self._longformer(x, q, k, v, i, r, qkv_global, token_mask)
        return self._linear_at(y, out_weight, self.self_attn_out_bias, r)
    linformer_e = self.self_attn_linformer_e
    if linformer_e is not None:
        # Linformer (kernels/linformer_attention.h): padded tokens' keys and values zeroed, then
        # projected along the sequence by the first T columns of E and F (F is E under key_value
        # sharing); the T queries attend to those rows with no mask
        linformer_f = self.self_attn_linformer_f
        e = linformer_e[r].narrow(2, 0, t).to(k.dtype)  # (1 or Hkv, k, T)
        f = e if linformer_f is None else linformer_f[r].narrow(2, 0, t).to(v.dtype)
        if token_mask is not None:
            real = token_mask.ne(0).view(b, 1, t, 1).to(k.dtype)
            k, v = k * real, v * real
        y = self._attend(q, torch.matmul(e, k), torch.matmul(f, v), None)
        return self._linear_at(y, out_weight, self.self_attn_out_bias, r)
    if len(cache) > 0:
        # the keys and values so far, (B, Hkv, length, hs) preallocated; this step's written in
        # place (narrow: one view where keys[:, :, a:b] would slice every dimension)
        keys, values = cache[2 * i], cache[2 * i + 1]
        keys.narrow(2, start, t).copy_(k)
        values.narrow(2, start, t).copy_(v)
        k = keys.narrow(2, 0, start + t)  # (B, Hkv, K, hs)
        v = values.narrow(2, 0, start + t)
        if keys.dtype != q.dtype:  # a bf16 model's float32 cache (new_cache)
            if t == 1:
                y = self._attend_one_bf16(q, k, v, bias)
                return self._linear_at(y, out_weight, self.self_attn_out_bias, r)
            k, v = k.to(q.dtype), v.to(q.dtype)  # exact: the cache holds bf16 values
    y = self._attend(q, k, v, bias)
    return self._linear_at(y, out_weight, self.self_attn_out_bias, r)


def _longformer(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, i: int, r: int, qkv_global: Tensor,
                token_mask: Optional[Tensor]) -> Tensor:
    # Longformer (kernels/longformer_attention.h) as its plain reference writes it: a (T, T) mask
    # per head of the window (longformer_windows[i] to each side, every d-th token under head
    # dilation d) without the global tokens, plus the global tokens (the first longformer_global)
    # as columns; the global tokens' rows through the global projections over every real key.
    # q, k, v (B, H, T, hs) -> (B, T, H hs)
    b, h, t, hs = q.size()
    g = self._linear_at(x, qkv_global, self.self_attn_qkv_global_bias, r)
    gq, gk, gv = g.split([h * hs, h * hs, h * hs], -1)
    gq = gq.view(b, t, h, hs).transpose(1, 2)
    gk = gk.view(b, t, h, hs).transpose(1, 2)
    gv = gv.view(b, t, h, hs).transpose(1, 2)
    position = torch.arange(t, device=x.device)
    distance = position.view(t, 1) - position.view(1, t)
    w = self.longformer_windows[i]
    bands: List[Tensor] = []
    for d in self.longformer_dilation:
        bands.append((distance.abs() <= w * d) & (torch.remainder(distance, d) == 0))
    band = torch.stack(bands).unsqueeze(0)  # (1, H, T, T)
    is_global = position < self.longformer_global
    global_keys = is_global.view(1, 1, 1, t)
    if token_mask is None:
        real = torch.ones(b, 1, 1, t, dtype=torch.bool, device=x.device)
    else:
        real = token_mask.ne(0).view(b, 1, 1, t)
    local = ((band & ~global_keys) | global_keys) & real
    local_y = self._attend(q, k, v, self._mask_bias(local, q))
    global_y = self._attend(gq, gk, gv, self._mask_bias(real, q))
    y = torch.where(is_global.view(1, t, 1), global_y, local_y)
    return y * real.view(b, t, 1).to(y.dtype)  # padded queries give 0


def _cross_attention(self, x: Tensor, i: int, memory: List[Tensor], bias: Optional[Tensor]) -> Tensor:
    # queries from x; keys and values of the encoder output, projected once (memory_keys_values)
    q_weight, out_weight = self.cross_attn_q_weight, self.cross_attn_out_weight
    assert q_weight is not None and out_weight is not None, "no cross-attention in this stack"
    b, t, _ = x.size()
    q = self._linear_at(x, q_weight, self.cross_attn_q_bias, i)
    q = q.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hs)
    y = self._attend(q, memory[2 * i], memory[2 * i + 1], bias)
    return self._linear_at(y, out_weight, self.cross_attn_out_bias, i)


def _attend(self, q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor]) -> Tensor:
    # q (B, H, T, hs), k and v (B, Hkv, K, hs), bias broadcastable to (B, H, T, K) -> (B, T, H hs)
    b, h, t, hs = q.size()
    hkv, k_len = k.size(1), k.size(2)
    if h != hkv:
        # grouped queries: the H / Hkv query heads sharing a key head become one longer query,
        # as layers/attention.cpp does, so keys and values are never repeated
        q = q.reshape(b, hkv, (h // hkv) * t, hs)  # (B, Hkv, H / Hkv T, hs)
        if bias is not None:
            bias = bias.expand(bias.size(0), h, t, k_len).reshape(bias.size(0), hkv, (h // hkv) * t, k_len)
    scores = torch.matmul(q, k.transpose(-2, -1))  # (B, Hkv, H / Hkv T, K)
    if self.scale_attention:  # T5 does not scale: its initialisation does instead
        scores = scores * (1.0 / self.attention_scale_dim ** 0.5)  # head_dim, or Gemma's query_pre_attn_scalar
    if self.attention_softcap > 0.0:  # Gemma 2: cap * tanh(score / cap), before the masks
        scores = torch.tanh(scores / self.attention_softcap) * self.attention_softcap
    if bias is not None:
        scores = scores + bias
    # half-precision scores are normalised in float32, float and double as they are
    if q.dtype == torch.float16 or q.dtype == torch.bfloat16:
        weights = torch.softmax(scores.float(), -1).to(q.dtype)
    else:
        weights = torch.softmax(scores, -1)
    y = torch.matmul(weights, v).view(b, h, t, hs)
    return y.transpose(1, 2).reshape(b, t, h * hs)


def _attend_one_bf16(self, q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor]) -> Tensor:
    # one bf16 query (B, H, 1, hs) against float32 keys and values holding bf16 values, as
    # kernels/decode_attention.cpp computes it: float32 sums, rounded to bf16 where LibTorch's bf16
    # attention rounds (scores, scaled and biased scores, probabilities, output)
    b, h, t, hs = q.size()
    hkv, k_len = k.size(1), k.size(2)
    q = q.reshape(b, hkv, (h // hkv) * t, hs)
    if bias is not None and h != hkv:
        bias = bias.expand(bias.size(0), h, t, k_len).reshape(bias.size(0), hkv, (h // hkv) * t, k_len)
    scores = torch.matmul(q.float(), k.transpose(-2, -1)).to(torch.bfloat16)
    if self.scale_attention:
        scores = scores * (1.0 / self.attention_scale_dim ** 0.5)
    if self.attention_softcap > 0.0:
        scores = torch.tanh(scores / self.attention_softcap) * self.attention_softcap
    if bias is not None:
        scores = scores + bias
    weights = torch.softmax(scores.float(), -1).to(torch.bfloat16).float()
    y = torch.matmul(weights, v).to(torch.bfloat16).view(b, h, t, hs)
    return y.transpose(1, 2).reshape(b, t, h * hs)


def _rotate(self, x: Tensor, rope: Tuple[Tensor, Tensor]) -> Tensor:
    # RoPE (Su et al., 2021): x (B, H, T, hs) with feature pairs rotated by their position's
    # angles, pairing the first half with the second ("half") or neighbours ("interleaved");
    # features past the table's width (a partial rotation, Phi-3) pass as they are
    cos, sin = rope[0].to(x.dtype), rope[1].to(x.dtype)
    half = cos.size(-1)
    r = x[..., :2 * half]
    if self.rope_layout == "half":
        x1, x2 = r[..., :half], r[..., half:]
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    else:
        assert self.rope_layout == "interleaved", "unknown rope_layout " + self.rope_layout
        pairs = r.reshape(r.size(0), r.size(1), r.size(2), half, 2)
        x1, x2 = pairs[..., 0], pairs[..., 1]
        out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(3)
    if 2 * half == x.size(-1):
        return out
    return torch.cat([out, x[..., 2 * half:]], -1)


def _feed_forward(self, x: Tensor, i: int) -> Tensor:
    r = self.ff_rows[i]
    # A stack without experts (moe_router None) compiles without this branch; one without dense
    # layers, without the test.
    if self.moe_router is not None:
        if self.ff_down_weight is None or self.ff_kinds[i] == "moe":
            return self._mixture_of_experts(x, r)
    gate, up, down = self.ff_gate_weight, self.ff_up_weight, self.ff_down_weight
    assert up is not None and down is not None, "no dense feed-forward in this stack"
    if gate is not None:
        # gated (SwiGLU, GeGLU; Shazeer, 2020): act(x W_gate) * x W_up
        h = self._activate(self._linear_at(x, gate, self.ff_gate_bias, r))
        h = h * self._linear_at(x, up, self.ff_up_bias, r)
    else:
        h = self._activate(self._linear_at(x, up, self.ff_up_bias, r))
    return self._linear_at(h, down, self.ff_down_bias, r)


def _mixture_of_experts(self, x: Tensor, r: int) -> Tensor:
    # Each token to the top experts_per_token experts of its router's softmax (in float32),
    # weighted by their probabilities (renormalised over the k with normalize_expert_weights);
    # each expert's gated feed-forward computed over the tokens routed to it, weighted in float32
    # and cast back (or in x's dtype, round_expert_weights), added expert by expert.
    router, gate_up, down = self.moe_router, self.moe_gate_up, self.moe_down
    assert router is not None and gate_up is not None and down is not None, "no mixture of experts in this stack"
    flat = x.reshape(-1, x.size(-1))
    probs = torch.softmax(torch.matmul(flat, router[r].t()).float(), -1)
    weights, chosen = probs.topk(self.experts_per_token, -1)
    if self.normalize_expert_weights:
        weights = weights / weights.sum(-1, keepdim=True)
    out = torch.zeros_like(flat)
    for e in range(router.size(1)):
        hit = chosen == e  # (N, k): a token picks an expert at most once
        rows = hit.any(-1).nonzero().squeeze(-1)
        if rows.numel() == 0:
            continue
        weight = (weights * hit.float()).sum(-1).index_select(0, rows)
        # an expert's quantized weight is its packed rows (common.py), dequantized for its product
        gu = torch.matmul(flat.index_select(0, rows), self._weight(gate_up[r, e], flat).t())
        f = gu.size(-1) // 2
        h = self._activate(gu.narrow(-1, 0, f)) * gu.narrow(-1, f, f)
        y = torch.matmul(h, self._weight(down[r, e], flat).t())
        if self.round_expert_weights:
            y = y * weight.unsqueeze(1).to(y.dtype)
        else:
            y = (y.float() * weight.unsqueeze(1)).to(flat.dtype)
        out.index_add_(0, rows, y)
    return out.view(x.size())


def new_cache(self, b: int, length: int) -> List[Tensor]:
    # forward's cache for B rows of up to `length` tokens: keys and values of each layer,
    # (B, Hkv, length, hs) each, in the weights' dtype; float32 for bf16 weights on the CPU, where
    # LibTorch's bf16 matmuls at decoding's shapes are slow and sum in bf16 (_attend_one_bf16)
    # A linear attention layer's entry is its state instead, (B, H, Dk, Dv) in float32 (Dv + 1
    # columns when normalised: the normaliser's sums), and an empty tensor.
    like = self.self_attn_norm_weight
    dtype = like.dtype
    if dtype == torch.bfloat16 and not like.is_cuda:
        dtype = torch.float32
    cache: List[Tensor] = []
    for i in range(self.n_layers):
        kind = self.layer_kinds[i]
        if kind == "softmax":
            for _ in range(2):
                cache.append(torch.zeros([b, self.n_kv_heads, length, self.head_dim], dtype=dtype, device=like.device))
        else:
            dk, dv = self._recurrent_state_size(kind)
            cache.append(torch.zeros([b, self.n_heads, dk, dv], dtype=torch.float32, device=like.device))
            cache.append(torch.zeros([0], dtype=dtype, device=like.device))
    return cache


def memory_keys_values(self, memory: Tensor) -> List[Tensor]:
    # memory (B, S, D), the encoder output -> forward's memory: the cross-attention keys and
    # values of each layer, (B, Hkv, S, hs) each, computed once for every decoding step
    weight = self.cross_attn_kv_weight
    assert weight is not None, "no cross-attention in this stack"
    b, s, _ = memory.size()
    hkv, hs = self.n_kv_heads, self.head_dim
    out: List[Tensor] = []
    for i in range(self.n_layers):
        k, v = self._linear_at(memory, weight, self.cross_attn_kv_bias, i).split([hkv * hs, hkv * hs], -1)
        out.append(k.view(b, s, hkv, hs).transpose(1, 2))
        out.append(v.view(b, s, hkv, hs).transpose(1, 2))
    return out


def _recurrent_state_size(self, kind: str) -> Tuple[int, int]:
    # a linear attention layer's state per head, (Dk, Dv)
    if kind == "gated_linear":
        weight, value_weight = self.gla_attn_q_weight, self.gla_attn_v_weight
        assert weight is not None and value_weight is not None, "no gated linear attention in this stack"
        return weight.size(1) // self.n_heads, value_weight.size(1) // self.n_heads
    weight = self.linear_attn_q_weight
    assert weight is not None, "no linear attention in this stack"
    dk = weight.size(1) // self.n_heads
    features = self.linear_attn_features
    if features is not None:
        dk = features.size(1)
    return dk, weight.size(1) // self.n_heads + (1 if self.linear_normalize else 0)


def _linear_attention(self, x: Tensor, i: int, start: int, cache: List[Tensor], token_mask: Optional[Tensor]) -> Tensor:
    # Katharopoulos et al.: phi(q) and phi(k) (elu1, relu, or performer's random features), the
    # recurrence without decay, optionally divided by phi(q) . sum phi(k) (a column of ones in v)
    q_w, k_w, v_w, out_w = self.linear_attn_q_weight, self.linear_attn_k_weight, self.linear_attn_v_weight, \
        self.linear_attn_out_weight
    assert q_w is not None and k_w is not None and v_w is not None and out_w is not None, "no linear attention"
    r = self.kind_rows[i]
    b, t, _ = x.size()
    h = self.n_heads
    dh = q_w.size(1) // h
    q = self._linear_at(x, q_w, self.linear_attn_q_bias, r).view(b, t, h, dh).transpose(1, 2)
    k = self._linear_at(x, k_w, self.linear_attn_k_bias, r).view(b, t, h, dh).transpose(1, 2)
    v = self._linear_at(x, v_w, self.linear_attn_v_bias, r).view(b, t, h, dh).transpose(1, 2)
    scale = 1.0 / dh ** 0.5
    features = self.linear_attn_features
    if self.feature_map == "elu1":
        q, k = F.elu(q) + 1.0, F.elu(k) + 1.0
    elif self.feature_map == "relu":
        q, k = torch.relu(q), torch.relu(k)
    else:
        assert self.feature_map == "performer" and features is not None, "unknown feature map " + self.feature_map
        q = self._performer(q, features[r], True)
        k = self._performer(k, features[r], False)
        scale = 1.0
    if token_mask is not None:
        k = k * token_mask.view(b, 1, t, 1).to(k.dtype)
    if self.linear_normalize:
        v = torch.cat([v, torch.ones([b, h, t, 1], dtype=v.dtype, device=v.device)], -1)
    o = self._recurrence(q, k, v, None, scale, i, start, cache)
    if self.linear_normalize:
        o = o[:, :, :, :dh] / (o[:, :, :, dh:] + 1e-6)
    o = o.transpose(1, 2).reshape(b, t, h * dh)
    return self._linear_at(o, out_w, self.linear_attn_out_bias, r)


def _gated_linear_attention(self, x: Tensor, i: int, start: int, cache: List[Tensor],
                            token_mask: Optional[Tensor]) -> Tensor:
    # Yang et al., 2024 (flash-linear-attention's GLA layer): a decay per key dimension from a
    # low-rank gate, then a per-head RMSNorm times swish(x W_g), then the output projection
    q_w, k_w, v_w, g_w = self.gla_attn_q_weight, self.gla_attn_k_weight, self.gla_attn_v_weight, self.gla_attn_gate_weight
    down_w, up_w, up_b = self.gla_attn_decay_down_weight, self.gla_attn_decay_up_weight, self.gla_attn_decay_up_bias
    norm_w, out_w = self.gla_attn_head_norm_weight, self.gla_attn_out_weight
    assert q_w is not None and k_w is not None and v_w is not None and g_w is not None and down_w is not None \
        and up_w is not None and up_b is not None and norm_w is not None and out_w is not None, "no gated linear attention"
    r = self.kind_rows[i]
    b, t, _ = x.size()
    h = self.n_heads
    dk, dv = q_w.size(1) // h, v_w.size(1) // h
    q = self._project(x, q_w[r], None).view(b, t, h, dk).transpose(1, 2)
    k = self._project(x, k_w[r], None).view(b, t, h, dk).transpose(1, 2)
    v = self._project(x, v_w[r], None).view(b, t, h, dv).transpose(1, 2)
    decay = self._project(self._project(x, down_w[r], None), up_w[r], up_b[r])
    # log(sigmoid(u)) = -softplus(-u)
    log_decay = (-F.softplus(-decay) / self.gla_gate_normalizer).view(b, t, h, dk).transpose(1, 2)
    if token_mask is not None:
        real = token_mask.view(b, 1, t, 1)
        k = k * real.to(k.dtype)
        log_decay = log_decay * real.to(log_decay.dtype)
    o = self._recurrence(q, k, v, log_decay, 1.0 / dk ** 0.5, i, start, cache).transpose(1, 2)  # (B, T, H, Dv)
    # RMSNorm per head (whatever the model's norm), times the swish output gate
    low = o.dtype == torch.bfloat16
    of = o.float() if low else o
    o = norm_w[r] * (of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + self.norm_eps)).to(o.dtype)
    o = o * F.silu(self._project(x, g_w[r], None).view(b, t, h, dv))
    return self._project(o.reshape(b, t, h * dv), out_w[r], None)


def _performer(self, x: Tensor, projection: Tensor, stabilize: bool) -> Tensor:
    # FAVOR+: exp(W x' - |x'|^2 / 2) / sqrt(m), x' = x d^-1/4 (kernels/linear_attention.h)
    d = x.size(-1)
    scaled = x * d ** -0.25
    exponent = torch.matmul(scaled, projection.to(x.dtype).t()) - scaled.pow(2).sum(-1, keepdim=True) / 2.0
    if stabilize:
        exponent = exponent - exponent.max(-1, keepdim=True)[0]
    return exponent.exp() / projection.size(0) ** 0.5


def _recurrence(self, q: Tensor, k: Tensor, v: Tensor, log_decay: Optional[Tensor], scale: float, i: int,
                start: int, cache: List[Tensor]) -> Tensor:
    # The layer's recurrence over q, k (B, H, T, Dk) and v (B, H, T, Dv) in float32, from and
    # into its cached state: a few tokens one by one, more in chunks, as zoo's decoding does
    if len(cache) == 0:
        return self._chunked(q, k, v, log_decay, None, scale)[0]
    state = cache[2 * i]
    if q.size(2) < 16:
        out, new_state = self._stepwise(q, k, v, log_decay, state, scale)
    else:
        out, new_state = self._chunked(q, k, v, log_decay, state, scale)
    state.copy_(new_state)
    return out


def _stepwise(self, q: Tensor, k: Tensor, v: Tensor, log_decay: Optional[Tensor], state: Tensor,
              scale: float) -> Tuple[Tensor, Tensor]:
    s = state.float()
    outs: List[Tensor] = []
    for j in range(q.size(2)):
        q_j, k_j, v_j = q[:, :, j].float() * scale, k[:, :, j].float(), v[:, :, j].float()
        if log_decay is not None:
            s = log_decay[:, :, j].float().exp().unsqueeze(-1) * s
        s = s + k_j.unsqueeze(-1) * v_j.unsqueeze(-2)
        outs.append(torch.matmul(q_j.unsqueeze(-2), s).squeeze(-2))
    return torch.stack(outs, 2).to(v.dtype), s


def _chunked(self, q: Tensor, k: Tensor, v: Tensor, log_decay: Optional[Tensor], initial: Optional[Tensor],
             scale: float) -> Tuple[Tensor, Tensor]:
    # The chunkwise form of kernels/linear_attention.cpp: chunks of 64, sub-chunks of 16, the
    # diagonal blocks pairwise in the log decay, no positive exponent
    b, h, t, dk = q.size()
    dv = v.size(3)
    c, sc = 64, 16
    s_n = c // sc
    n = (t + c - 1) // c
    padded = n * c
    like = v if v.dtype == torch.float64 else v.float()  # float64 stays, all else float32
    qc, kc, vc = self._chunks(q, n, like) * scale, self._chunks(k, n, like), self._chunks(v, n, like)
    if log_decay is None:
        causal = torch.ones([c, c], dtype=torch.bool, device=q.device).tril()
        intra = torch.matmul(torch.matmul(qc, kc.transpose(-1, -2)).masked_fill(causal.logical_not(), 0.0), vc)
        q_from_start, k_to_end = qc, kc
        chunk_factor: Optional[Tensor] = None
    else:
        cum = self._chunks(log_decay, n, like).cumsum(3)
        qs, ks = qc.view(b, h, n, s_n, sc, dk), kc.view(b, h, n, s_n, sc, dk)
        vs, bs = vc.view(b, h, n, s_n, sc, dv), cum.view(b, h, n, s_n, sc, dk)
        above = torch.ones([sc, sc], dtype=torch.bool, device=q.device).triu(1).unsqueeze(-1)
        pair = (bs.unsqueeze(-2) - bs.unsqueeze(-3)).masked_fill(above, float("-inf"))
        own = torch.matmul((qs.unsqueeze(-2) * ks.unsqueeze(-3) * pair.exp()).sum(-1), vs)
        parts = [own[:, :, :, 0]]
        for j in range(1, s_n):
            ref = bs[:, :, :, j - 1, sc - 1].unsqueeze(3)
            q_j = qs[:, :, :, j] * (bs[:, :, :, j] - ref).exp()
            k_before = kc[:, :, :, :j * sc] * (ref - cum[:, :, :, :j * sc]).exp()
            kv = torch.matmul(k_before.transpose(-1, -2), vc[:, :, :, :j * sc])
            parts.append(own[:, :, :, j] + torch.matmul(q_j, kv))
        intra = torch.stack(parts, 3).view(b, h, n, c, dv)
        chunk_decay = cum[:, :, :, c - 1]
        q_from_start = qc * cum.exp()
        k_to_end = kc * (chunk_decay.unsqueeze(3) - cum).exp()
        chunk_factor = chunk_decay.exp().unsqueeze(-1)
    updates = torch.matmul(k_to_end.transpose(-1, -2), vc)
    state = torch.zeros([b, h, dk, dv], dtype=like.dtype, device=q.device) if initial is None else initial.to(like.dtype)
    starts: List[Tensor] = []
    for j in range(n):
        starts.append(state)
        if chunk_factor is not None:
            state = chunk_factor[:, :, j] * state
        state = state + updates[:, :, j]
    inter = torch.matmul(q_from_start, torch.stack(starts, 2))
    return (intra + inter).view(b, h, padded, dv)[:, :, :t].to(v.dtype), state


def _chunks(self, x: Tensor, n: int, like: Tensor) -> Tensor:
    # (B, H, T, D) -> (B, H, N, 64, D) in like's dtype, zero-padded to N chunks
    b, h, t, d = x.size()
    y = x.to(like.dtype)
    if n * 64 > t:
        y = F.pad(y, [0, 0, 0, n * 64 - t])
    return y.reshape(b, h, n, 64, d)
