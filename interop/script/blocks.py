# A stack of transformer blocks (layers/block.h): `blocks` of GPT and BERT, `encoder_blocks`
# and `decoder_blocks` of encoder-decoders. Each per-layer weight of zoo is stacked into one
# tensor of shape (L, ...): blocks.3.self_attn.qkv.weight is self_attn_qkv_weight[3] here, so
# the loop in forward reads layer i of each. A block is self-attention, cross-attention
# (decoders of encoder-decoders: cross_attn_* weights), and a feed-forward, each a residual
# branch with its norm, in pre-norm (GPT-2, LLaMA, T5) or post-norm (BERT, Vaswani et al.) order.
# The functions of common.py are methods here too.
from typing import List, Optional, Tuple

import torch
from torch import Tensor

# --- TorchScript below: Module::define reads this file from here on ---


def forward(self, x: Tensor, bias: Optional[Tensor], rope: Optional[Tuple[Tensor, Tensor]],
            start: int, cache: List[Tensor], memory: List[Tensor], memory_bias: Optional[Tensor]) -> Tensor:
    # x (B, T, D) at positions start .. start + T - 1 -> (B, T, D)
    # bias: added to every layer's self-attention scores, (B or 1, H or 1, T, K): masks and
    #   position terms; rope: cos and sin (B, 1, T, hs / 2) from positions.py
    # cache: keys and values of every layer (new_cache), written in place; empty for none
    # memory: keys and values of the encoder output for every layer (memory_keys_values), with
    #   memory_bias (B, 1, 1, S) masking its padding; empty outside decoders
    for i in range(self.n_layers):
        x = self._block(x, i, bias, rope, start, cache, memory, memory_bias)
    return x


def _block(self, x: Tensor, i: int, bias: Optional[Tensor], rope: Optional[Tuple[Tensor, Tensor]],
           start: int, cache: List[Tensor], memory: List[Tensor], memory_bias: Optional[Tensor]) -> Tensor:
    cross_norm = self.cross_attn_norm_weight  # None but in decoders of encoder-decoders
    if self.norm_position == "pre":
        h = self._norm_at(x, self.self_attn_norm_weight, self.self_attn_norm_bias, i)
        x = x + self._self_attention(h, i, bias, rope, start, cache)
        if cross_norm is not None:
            h = self._norm_at(x, cross_norm, self.cross_attn_norm_bias, i)
            x = x + self._cross_attention(h, i, memory, memory_bias)
        h = self._norm_at(x, self.ff_norm_weight, self.ff_norm_bias, i)
        return x + self._feed_forward(h, i)
    assert self.norm_position == "post", "unknown norm_position " + self.norm_position
    x = x + self._self_attention(x, i, bias, rope, start, cache)
    x = self._norm_at(x, self.self_attn_norm_weight, self.self_attn_norm_bias, i)
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
                    start: int, cache: List[Tensor]) -> Tensor:
    b, t, _ = x.size()
    h, hkv, hs = self.n_heads, self.n_kv_heads, self.head_dim
    qkv = self._linear_at(x, self.self_attn_qkv_weight, self.self_attn_qkv_bias, i)  # (B, T, (H + 2 Hkv) hs)
    q, k, v = qkv.split([h * hs, hkv * hs, hkv * hs], -1)
    q = q.view(b, t, h, hs).transpose(1, 2)  # (B, H, T, hs)
    k = k.view(b, t, hkv, hs).transpose(1, 2)  # (B, Hkv, T, hs)
    v = v.view(b, t, hkv, hs).transpose(1, 2)  # (B, Hkv, T, hs)
    if rope is not None:
        q = self._rotate(q, rope)
        k = self._rotate(k, rope)
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
                return self._linear_at(y, self.self_attn_out_weight, self.self_attn_out_bias, i)
            k, v = k.to(q.dtype), v.to(q.dtype)  # exact: the cache holds bf16 values
    y = self._attend(q, k, v, bias)
    return self._linear_at(y, self.self_attn_out_weight, self.self_attn_out_bias, i)


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
        scores = scores * (1.0 / hs ** 0.5)
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
        scores = scores * (1.0 / hs ** 0.5)
    if bias is not None:
        scores = scores + bias
    weights = torch.softmax(scores.float(), -1).to(torch.bfloat16).float()
    y = torch.matmul(weights, v).to(torch.bfloat16).view(b, h, t, hs)
    return y.transpose(1, 2).reshape(b, t, h * hs)


def _rotate(self, x: Tensor, rope: Tuple[Tensor, Tensor]) -> Tensor:
    # RoPE (Su et al., 2021): x (B, H, T, hs) with feature pairs rotated by their position's
    # angles, pairing the first half with the second ("half") or neighbours ("interleaved")
    cos, sin = rope[0].to(x.dtype), rope[1].to(x.dtype)
    half = x.size(-1) // 2
    if self.rope_layout == "half":
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    assert self.rope_layout == "interleaved", "unknown rope_layout " + self.rope_layout
    pairs = x.reshape(x.size(0), x.size(1), x.size(2), half, 2)
    x1, x2 = pairs[..., 0], pairs[..., 1]
    return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(3)


def _feed_forward(self, x: Tensor, i: int) -> Tensor:
    gate = self.ff_gate_weight
    if gate is not None:
        # gated (SwiGLU, GeGLU; Shazeer, 2020): act(x W_gate) * x W_up
        h = self._activate(self._linear_at(x, gate, self.ff_gate_bias, i))
        h = h * self._linear_at(x, self.ff_up_weight, self.ff_up_bias, i)
    else:
        h = self._activate(self._linear_at(x, self.ff_up_weight, self.ff_up_bias, i))
    return self._linear_at(h, self.ff_down_weight, self.ff_down_bias, i)


def new_cache(self, b: int, length: int) -> List[Tensor]:
    # forward's cache for B rows of up to `length` tokens: keys and values of each layer,
    # (B, Hkv, length, hs) each, in the weights' dtype; float32 for bf16 weights on the CPU, where
    # LibTorch's bf16 matmuls at decoding's shapes are slow and sum in bf16 (_attend_one_bf16)
    like = self.self_attn_qkv_weight
    dtype = like.dtype
    if dtype == torch.bfloat16 and not like.is_cuda:
        dtype = torch.float32
    return [torch.zeros([b, self.n_kv_heads, length, self.head_dim], dtype=dtype, device=like.device)
            for _ in range(2 * self.n_layers)]


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
