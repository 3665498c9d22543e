# The positions of one stack (`positions`; `encoder_positions` and `decoder_positions` in
# encoder-decoders), as layers/position_encoding.h: an absolute embedding added to the tokens
# (learned, sinusoidal), rotary angles for attention (rope), or a bias added to attention scores
# (alibi, relative). Only the tensors of the config's kind are set, the others are None:
#   learned_embedding_weight (max_positions, D)   the learned table, a parameter
#   sinusoidal_table (max_positions, D)           layers/positions.cpp's table
#   rope_cos, rope_sin (max_positions, r / 2)     layers/rotary.cpp's angles (r: the rotated
#                                                 features of a head), float32
#   rope_long_cos, rope_long_sin                  longrope's, for a call reaching past
#                                                 rope_trained_positions
#   rope_local_cos, rope_local_sin                the sliding layers' (window_rope_base), unscaled
#   alibi_slopes (H)                              layers/position_bias.cpp's slopes, float32
#   relative_buckets (2 * max_positions - 1)      T5's bucket of each distance key - query, from
#   relative_relative_attention_bias_weight       -(max_positions - 1) on (position_bias.cpp);
#       (buckets, H)                              the learned bias of each bucket and head
# The tables are computed by the native layers at export, so each formula has one home.
from typing import Optional, Tuple

import torch
from torch import Tensor

# --- TorchScript below: Module::define reads this file from here on ---


def embed(self, x: Tensor, positions: Tensor) -> Tensor:
    # x (B, T, D) token embeddings, positions (B, T) -> x plus the absolute position embedding
    learned = self.learned_embedding_weight
    if learned is not None:
        return x + torch.embedding(learned, positions).to(x.dtype)
    table = self.sinusoidal_table
    if table is not None:
        return x + torch.embedding(table, positions).to(x.dtype)
    return x


def rotary(self, positions: Tensor) -> Optional[Tuple[Tensor, Tensor]]:
    # positions (B, T) -> cos and sin of their rotation angles, (B, 1, T, r / 2) float32,
    # gathered once for every layer; None without rotary positions
    cos = self.rope_cos
    sin = self.rope_sin
    if cos is None or sin is None:
        return None
    b, t = positions.size()
    flat = positions.reshape(-1)
    short = self._angles(cos, sin, positions)
    long_cos = self.rope_long_cos
    long_sin = self.rope_long_sin
    if long_cos is None or long_sin is None:
        return short
    # longrope: a row whose positions reach past the trained context takes the long factors
    # (layers/rotary.cpp decides per row too)
    row_long = (positions.max(1)[0] + 1 > self.rope_trained_positions).view(b, 1, 1, 1)
    if not bool(row_long.any()):
        return short
    return (torch.where(row_long, long_cos.index_select(0, flat).view(b, 1, t, -1), short[0]),
            torch.where(row_long, long_sin.index_select(0, flat).view(b, 1, t, -1), short[1]))


def rotary_local(self, positions: Tensor) -> Optional[Tuple[Tensor, Tensor]]:
    # the sliding layers' own rotation (Gemma 3's local RoPE base, unscaled): as rotary, from
    # rope_local_cos and rope_local_sin; None where they rotate as the others do
    cos = self.rope_local_cos
    sin = self.rope_local_sin
    if cos is None or sin is None:
        return None
    return self._angles(cos, sin, positions)


def _angles(self, cos: Tensor, sin: Tensor, positions: Tensor) -> Tuple[Tensor, Tensor]:
    # the rows of a (max_positions, r / 2) table at positions (B, T) -> (B, 1, T, r / 2) each
    b, t = positions.size()
    flat = positions.reshape(-1)
    return (cos.index_select(0, flat).view(b, 1, t, -1), sin.index_select(0, flat).view(b, 1, t, -1))


def attention_bias(self, t: int, k: int, start: int, like: Tensor) -> Optional[Tensor]:
    # The term added to the scores of queries at start .. start + T - 1 over keys 0 .. K - 1:
    # (1, H, T, K) in like's dtype, or None when positions do not bias attention
    slopes = self.alibi_slopes
    if slopes is not None:
        # ALiBi (Press et al., 2022): -slope_h * |query - key|
        q = torch.arange(start, start + t, dtype=torch.float32, device=like.device).unsqueeze(1)  # (T, 1)
        j = torch.arange(0, k, dtype=torch.float32, device=like.device).unsqueeze(0)  # (1, K)
        return (-slopes.view(1, -1, 1, 1) * (q - j).abs().unsqueeze(0)).to(like.dtype)
    buckets = self.relative_buckets
    weight = self.relative_relative_attention_bias_weight
    if buckets is not None and weight is not None:
        # T5: a learned bias per head for each bucket of key - query
        q = torch.arange(start, start + t, device=like.device).unsqueeze(1)  # (T, 1)
        j = torch.arange(0, k, device=like.device).unsqueeze(0)  # (1, K)
        bucket = buckets[j - q + self.max_positions - 1]  # (T, K)
        return torch.embedding(weight, bucket).permute(2, 0, 1).unsqueeze(0).to(like.dtype)
    return None
