# Encoder-decoders (models/t5.h): T5 and the original Transformer. The exported module holds
# token_embedding_weight (V, D), shared by encoder, decoder and tied head; encoder_final_norm_*
# and decoder_final_norm_* (pre-norm); lm_head_weight when the head is not tied; and the
# submodules `encoder_positions`, `decoder_positions` (positions.py), `encoder_blocks` and
# `decoder_blocks` (blocks.py). common.py and generation.py are methods here too.
from typing import List, Optional

import torch
from torch import Tensor

# --- TorchScript below: Module::define reads this file from here on ---


def forward(self, input_ids: Tensor, attention_mask: Optional[Tensor], decoder_input_ids: Tensor) -> Tensor:
    # input_ids (B, S) with attention_mask (B, S), decoder_input_ids (B, T) -> logits (B, T, V)
    return self.decode(decoder_input_ids, self.encode(input_ids, attention_mask), attention_mask)


def encode(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None) -> Tensor:
    # input_ids (B, S), attention_mask (B, S) 1 at real tokens -> memory (B, S, D)
    assert input_ids.dim() == 2, "encode: input_ids must be (batch, tokens)"
    s = input_ids.size(1)
    assert s <= self.max_positions, "encode: {} tokens, more than max_positions ({})".format(s, self.max_positions)
    positions = torch.arange(0, s, device=input_ids.device).unsqueeze(0)  # (1, S)
    x = self.encoder_positions.embed(self._embed_tokens(input_ids), positions)
    bias = self.encoder_positions.attention_bias(s, s, 0, x)
    if attention_mask is not None:
        padding = self._mask_bias(self._key_allowed(attention_mask, s), x)  # (B, 1, 1, S)
        bias = padding if bias is None else bias + padding
    no_cache: List[Tensor] = []
    rope = self.encoder_positions.rotary(positions)
    x = self.encoder_blocks.forward(x, bias, rope, 0, no_cache, no_cache, None, None)
    return self._final_norm(x, self.encoder_final_norm_weight, self.encoder_final_norm_bias)


def decode(self, decoder_input_ids: Tensor, memory: Tensor, attention_mask: Optional[Tensor] = None) -> Tensor:
    # decoder_input_ids (B, T), memory (B, S, D) from encode, attention_mask (B, S) its padding
    # -> logits (B, T, V)
    assert decoder_input_ids.dim() == 2, "decode: decoder_input_ids must be (batch, tokens)"
    no_cache: List[Tensor] = []
    memory_kv = self.decoder_blocks.memory_keys_values(memory)
    return self._decode(decoder_input_ids, 0, memory_kv, attention_mask, no_cache)


def generate(self, input_ids: Tensor, max_new_tokens: int = 32, temperature: float = 0.0, top_k: int = 0,
             top_p: float = 1.0, eos_id: int = -1, attention_mask: Optional[Tensor] = None) -> Tensor:
    # input_ids (B, S) -> (B, 1 + new): the decoder start and up to max_new_tokens after it,
    # greedy at temperature 0, else sampled (generation.py). A row that emits eos_id is padded
    # with pad_id after it; generation stops once every row has.
    assert max_new_tokens >= 0, "generate: max_new_tokens ({}) must be >= 0".format(max_new_tokens)
    assert max_new_tokens <= self.max_positions, \
        "generate: max_new_tokens ({}) exceeds max_positions ({})".format(max_new_tokens, self.max_positions)
    b = input_ids.size(0)
    memory_kv = self.decoder_blocks.memory_keys_values(self.encode(input_ids, attention_mask))
    cache = self.decoder_blocks.new_cache(b, max(max_new_tokens, 1))
    out = torch.full([b, 1], self.decoder_start_id, dtype=input_ids.dtype, device=input_ids.device)
    logits = self._decode(out, 0, memory_kv, attention_mask, cache)[:, -1]  # (B, V)
    finished = torch.zeros([b], dtype=torch.bool, device=input_ids.device)
    for step in range(max_new_tokens):
        token, out, finished = self._append_token(out, logits, finished, temperature, top_k, top_p, eos_id)
        if bool(finished.all()) or step + 1 == max_new_tokens:
            break
        logits = self._decode(token.unsqueeze(1), step + 1, memory_kv, attention_mask, cache)[:, -1]
    return out


def _decode(self, ids: Tensor, start: int, memory_kv: List[Tensor], memory_mask: Optional[Tensor],
            cache: List[Tensor]) -> Tensor:
    # ids (B, T), the decoder tokens at start .. start + T - 1 after the cached ones -> (B, T, V)
    t = ids.size(1)
    assert start + t <= self.max_positions, \
        "decode: {} tokens, more than max_positions ({})".format(start + t, self.max_positions)
    positions = torch.arange(start, start + t, device=ids.device).unsqueeze(0)  # (1, T)
    x = self.decoder_positions.embed(self._embed_tokens(ids), positions)
    bias = self._mask_bias(self._causal_allowed(t, start + t, start, x.device, self.window), x)  # (1, 1, T, K)
    position_bias = self.decoder_positions.attention_bias(t, start + t, start, x)
    if position_bias is not None:
        bias = bias + position_bias
    memory_bias = None if memory_mask is None else self._mask_bias(
        self._key_allowed(memory_mask, memory_kv[0].size(2)), x)  # (B, 1, 1, S)
    rope = self.decoder_positions.rotary(positions)
    x = self.decoder_blocks.forward(x, bias, rope, start, cache, memory_kv, memory_bias, None)
    return self._logits(self._final_norm(x, self.decoder_final_norm_weight, self.decoder_final_norm_bias))
