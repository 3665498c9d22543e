# The exported model as a program: what every class of a `zoo export` shares. Projections
# (with the batch-1 matrix-vector path), norms, the activation and attention masks.
#
# The files of interop/script are valid Python and valid TorchScript. `zoo export`
# (interop/torchscript.cpp) defines the functions below the marker line as methods of the
# exported module with torch::jit::Module::define; everything above the marker is for Python
# only, so that Python can run the same functions eagerly (tests/reference/torchscript_check.py
# --eager binds them to an object that reads the export's weights).
#
# `self` holds, besides the methods:
#   - the weights, named as in zoo with '.' written '_' (token_embedding_weight); a weight the
#     config does not have (a bias, an untied head) is None, and TorchScript compiles only the
#     branch the config takes, so `if w is not None` costs nothing at run time;
#   - a quantized weight (zoo quantize, --quantize) as one integer tensor per weight, each output's
#     row its integers followed by the bytes of its float32 scales (and zeros): int8 (out, in + 4),
#     the scale after the in integers; int4 (uint8) (out, in / 2 + 8 in / g), the in / 2 bytes
#     of kernels/quantized_weight.h's packing, then in / g scales and in / g zeros, g being
#     int4_group_size; a mixture of experts' stack is (experts, out, packed), each expert's rows
#     so. _weight dequantizes it as dequantize_weight does (the same bits); a
#     quantized token embedding's rows take float_like's dtype (an empty tensor that
#     module.to(dtype) converts with the float weights; None when the embedding is not quantized);
#   - the config's variants, spelled as in configs/: norm ("layernorm", "rmsnorm",
#     "rmsnorm_plus_one"), norm_position ("pre", "post", "sandwich"), activation ("relu", "gelu", "gelu_tanh", "silu"; a gated
#     feed-forward has ff_gate_weight too), rope_layout ("half", "interleaved"), and numbers
#     (norm_eps, n_heads, n_kv_heads, head_dim, window (0 = none), max_positions, ...).
#
# Shapes: B batch, T tokens (queries), K keys, D d_model, H heads, Hkv key/value heads,
# hs head_dim, V vocab_size, L layers.
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch import device as Device

# --- TorchScript below: Module::define reads this file from here on ---


def _is_quantized(self, weight: Tensor) -> bool:
    return weight.dtype == torch.int8 or weight.dtype == torch.uint8


def _weight(self, weight: Tensor, like: Tensor) -> Tensor:
    # a float weight as it is; a quantized one (out, packed) as the float weight (out, in) in
    # like's dtype, computed in float32 by the operations of dequantize_weight
    if not self._is_quantized(weight):
        return weight
    out = weight.size(0)
    if weight.dtype == torch.int8:
        n = weight.size(1) - 4
        scale = torch.view_copy(weight[:, n:].contiguous(), dtype=torch.float32)  # (out, 1)
        return (weight[:, :n].float() * scale).to(like.dtype)
    g = self.int4_group_size
    n = weight.size(1) * 2 * g // (g + 16)  # n / 2 bytes of integers, then 2 n / g float32
    groups = n // g
    packed = weight[:, :n // 2].reshape(out, n // 32, 1, 16)  # byte j: input j (low), j + 16 (high)
    values = torch.cat([packed & 15, packed >> 4], 2).reshape(out, groups, g).float()
    params = torch.view_copy(weight[:, n // 2:].contiguous(), dtype=torch.float32)  # (out, 2 groups)
    scale, zero = params[:, :groups].unsqueeze(-1), params[:, groups:].unsqueeze(-1)
    return ((values - 8.0) * scale + zero).reshape(out, n).to(like.dtype)


def _embed(self, table: Tensor, ids: Tensor) -> Tensor:
    # the rows `ids` of an embedding's table (V, D), float or quantized: (..., D)
    like = self.float_like
    if like is not None and self._is_quantized(table):
        rows = self._weight(table.index_select(0, ids.reshape(-1)), like)
        return rows.unflatten(0, ids.size())
    return torch.embedding(table, ids)


def _project(self, x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    # x (..., in) -> (..., out) with weight (out, in), as kernels/linear.cpp: a single float32
    # vector (batch-1 decoding) goes through mv, which reads the weights faster than a one-row
    # matrix product; decoding a token is little more than reading every weight once. In bf16,
    # LibTorch 2.x's linear is the faster (its bf16 mv is slow). A quantized weight is
    # dequantized for the product.
    weight = self._weight(weight, x)
    if x.numel() == weight.size(1) and not x.is_cuda and x.dtype != torch.bfloat16:
        if bias is None:
            y = torch.mv(weight, x.reshape(-1))
        else:
            y = torch.addmv(bias, weight, x.reshape(-1))
        return y.view(x.size()[:-1] + y.size())
    return F.linear(x, weight, bias)


def _norm(self, x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    # layers/norm.cpp: LayerNorm (bias optional) or RMSNorm over the last dimension
    if self.norm == "layernorm":
        return torch.layer_norm(x, [x.size(-1)], weight, bias, self.norm_eps)
    if self.norm == "rmsnorm_plus_one":
        # Gemma: scaled by 1 + weight, everything in float32 (float64 stays), rounded once
        wide = x if x.dtype == torch.float64 else x.float()
        normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.norm_eps)
        return (normed * (1.0 + weight.to(wide.dtype))).to(x.dtype)
    assert self.norm == "rmsnorm", "unknown norm " + self.norm
    # half-precision inputs take their mean square in float32, so that it does not overflow
    low = x.dtype == torch.float16 or x.dtype == torch.bfloat16
    xf = x.float() if low else x
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.norm_eps)).to(x.dtype)


def _final_norm(self, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor]) -> Tensor:
    # a pre-norm stack ends with a norm; a post-norm one has none (weight None), its blocks'
    # outputs being normalised already
    return x if weight is None else self._norm(x, weight, bias)


def _activate(self, x: Tensor) -> Tensor:
    # layers/feed_forward.cpp's activate(); swiglu is silu gated, geglu gelu, geglu_tanh gelu_tanh
    if self.activation == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if self.activation == "gelu":
        return F.gelu(x)
    if self.activation == "silu":
        return F.silu(x)
    assert self.activation == "relu", "unknown activation " + self.activation
    return F.relu(x)


def _causal_allowed(self, t: int, k: int, start: int, device: Device, window: int) -> Tensor:
    # (1, 1, T, K), true where query start + i may see key j (kernels/masks.cpp's causal_mask):
    # the keys up to itself, and with a sliding window (Mistral; 0: none) only the last `window`
    q = torch.arange(start, start + t, device=device).unsqueeze(1)  # (T, 1)
    j = torch.arange(0, k, device=device).unsqueeze(0)  # (1, K)
    allowed = j <= q
    if window > 0:
        allowed = allowed & (j > q - window)
    return allowed.unsqueeze(0).unsqueeze(0)


def _band_allowed(self, t: int, device: Device, window: int) -> Tensor:
    # (1, 1, T, T), true where query i may see key j in an encoder's two-sided window
    # (kernels/masks.cpp's band_mask): |i - j| < window
    q = torch.arange(0, t, device=device).unsqueeze(1)  # (T, 1)
    j = torch.arange(0, t, device=device).unsqueeze(0)  # (1, T)
    return ((j - q).abs() < window).unsqueeze(0).unsqueeze(0)


def _key_allowed(self, attention_mask: Tensor, k: int) -> Tensor:
    # attention_mask (B, >= K), non-zero at real tokens -> (B, 1, 1, K) over the last K keys
    return (attention_mask[:, attention_mask.size(1) - k:] != 0).unsqueeze(1).unsqueeze(2)


def _mask_bias(self, allowed: Tensor, like: Tensor) -> Tensor:
    # allowed (...) -> additive bias in like's dtype: 0 where allowed, else the dtype's lowest
    # finite value (kernels/masks.cpp's mask_to_bias), so that a padding query whose keys are
    # all masked gets a uniform softmax rather than NaN
    if like.dtype == torch.float64:
        lowest = -1.7976931348623157e308
    elif like.dtype == torch.float16:
        lowest = -65504.0
    elif like.dtype == torch.bfloat16:
        lowest = -3.3895313892515355e38
    else:
        lowest = -3.4028234663852886e38
    return torch.zeros(allowed.size(), dtype=like.dtype, device=like.device).masked_fill(
        torch.logical_not(allowed), lowest)
