# GPT (models/gpt.h): a decoder-only causal language model, GPT-2 by default and LLaMA or
# Mistral by config. The exported module holds token_embedding_weight (V, D), final_norm_weight
# and _bias (pre-norm), lm_head_weight (V, D) when the head is not tied, and two submodules:
# `positions` (positions.py) and `blocks` (blocks.py). common.py and generation.py are methods
# here too.
from typing import List, Optional

import torch
from torch import Tensor

# --- TorchScript below: Module::define reads this file from here on ---


def forward(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None) -> Tensor:
    # input_ids (B, T) -> logits (B, T, V). attention_mask (B, T): 1 at real tokens, 0 at left
    # padding; positions then count each row's real tokens from its first.
    assert input_ids.dim() == 2, "forward: input_ids must be (batch, tokens)"
    t = input_ids.size(1)
    assert t <= self.max_positions, "forward: {} tokens, more than max_positions ({})".format(t, self.max_positions)
    no_cache: List[Tensor] = []
    positions = self._positions(input_ids, attention_mask)
    return self._logits(self._hidden(input_ids, positions, 0, attention_mask, no_cache))


def generate(self, input_ids: Tensor, max_new_tokens: int = 32, temperature: float = 0.0, top_k: int = 0,
             top_p: float = 1.0, eos_id: int = -1, attention_mask: Optional[Tensor] = None) -> Tensor:
    # input_ids (B, T) -> (B, T + new): the prompts and up to max_new_tokens after each, greedy at
    # temperature 0, else sampled (generation.py). A row that emits eos_id is padded with pad_id
    # after it; generation stops once every row has. Left-padded prompts need attention_mask.
    assert input_ids.dim() == 2, "generate: input_ids must be (batch, tokens)"
    assert max_new_tokens >= 0, "generate: max_new_tokens ({}) must be >= 0".format(max_new_tokens)
    b, t = input_ids.size()
    assert t + max_new_tokens <= self.max_positions, \
        "generate: prompt ({} tokens) plus max_new_tokens ({}) exceeds max_positions ({})".format(
            t, max_new_tokens, self.max_positions)
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.long()
    cache = self.blocks.new_cache(b, t + max_new_tokens)
    positions = self._positions(input_ids, mask)
    logits = self._logits(self._hidden(input_ids, positions, 0, mask, cache)[:, -1])  # (B, V)
    out = input_ids
    finished = torch.zeros([b], dtype=torch.bool, device=input_ids.device)
    for step in range(max_new_tokens):
        token, out, finished = self._append_token(out, logits, finished, temperature, top_k, top_p, eos_id)
        if bool(finished.all()) or step + 1 == max_new_tokens:
            break
        # the new token attends to everything so far, at the position after its row's last
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
        positions = positions[:, -1:] + 1
        if self.positions.rope_long_cos is not None and bool((positions == self.rope_trained_positions).any()):
            # a row's first token past longrope's trained context: every row read again whole,
            # its keys rotated by the long factors (models/decoding.cpp does the same)
            logits = self._logits(self._hidden(out, self._positions(out, mask), 0, mask, cache)[:, -1])
            continue
        logits = self._logits(self._hidden(token.unsqueeze(1), positions, t + step, mask, cache)[:, -1])
    return out


def _positions(self, input_ids: Tensor, attention_mask: Optional[Tensor]) -> Tensor:
    # (B, T): 0, 1, ... from each row's first real token, padding at 0 (models/gpt.cpp)
    if attention_mask is None:
        b, t = input_ids.size()
        return torch.arange(0, t, device=input_ids.device).unsqueeze(0).expand(b, t)
    return torch.clamp(attention_mask.long().cumsum(1) - 1, min=0)


def _hidden(self, input_ids: Tensor, positions: Tensor, start: int, attention_mask: Optional[Tensor],
            cache: List[Tensor]) -> Tensor:
    # input_ids (B, T), the tokens at start .. start + T - 1 after the cached ones -> (B, T, D)
    t = input_ids.size(1)
    x = self.positions.embed(self._embed_tokens(input_ids), positions)  # (B, T, D)
    # one bias for every layer: causal (and windowed), padding, position terms; with a window in
    # some layers only (Gemma), the others' without it and the sliding layers' apart
    bias = self._stack_bias(t, start, attention_mask, x, 0 if self.mixed_windows else self.window)
    window_bias: Optional[Tensor] = None
    if self.mixed_windows:
        window_bias = self._stack_bias(t, start, attention_mask, x, self.window)
    no_memory: List[Tensor] = []
    token_mask = None if attention_mask is None else attention_mask[:, start:]  # this call's tokens
    x = self.blocks.forward(x, bias, self.positions.rotary(positions), start, cache, no_memory, None, token_mask,
                            window_bias, self.positions.rotary_local(positions))
    return self._final_norm(x, self.final_norm_weight, self.final_norm_bias)


def _stack_bias(self, t: int, start: int, attention_mask: Optional[Tensor], x: Tensor, window: int) -> Tensor:
    # (B or 1, H or 1, T, K): causal with `window` (0: none), padding, position terms
    allowed = self._causal_allowed(t, start + t, start, x.device, window)  # (1, 1, T, K)
    if attention_mask is not None:
        allowed = allowed & self._key_allowed(attention_mask, start + t)  # (B, 1, T, K)
    bias = self._mask_bias(allowed, x)
    position_bias = self.positions.attention_bias(t, start + t, start, x)
    if position_bias is not None:
        bias = bias + position_bias
    return bias
