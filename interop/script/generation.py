# What the language models (decoder.py, encoder_decoder.py) share: token embeddings in and
# out, and the choice of the next token. The choice is the second form of
# models/generation.cpp's greedy and sampling path (a deployed model runs without zoo);
# tests/interop/torchscript_test.cpp checks the two agree.
from typing import Tuple

import torch
from torch import Tensor

# --- TorchScript below: Module::define reads this file from here on ---


def _embed_tokens(self, ids: Tensor) -> Tensor:
    # ids (B, T) -> (B, T, D); the Transformer scales them by sqrt(d_model) (Vaswani et al.)
    x = self._embed(self.token_embedding_weight, ids)
    if self.scale_embeddings:
        # sqrt(d_model) rounded to the embeddings' dtype first, as models/gpt.cpp's embedding_scale
        x = x * torch.full([], self.d_model ** 0.5, dtype=x.dtype, device=x.device)
    return x


def _logits(self, x: Tensor) -> Tensor:
    # x (..., D) -> (..., V): through lm_head_weight, or the token embedding when tied; T5 v1.0
    # scales its tied head's input by d_model^-0.5
    head = self.lm_head_weight
    if head is not None:
        logits = self._project(x, head, None)
    else:
        if self.scale_tied_head:
            x = x * (1.0 / self.d_model ** 0.5)
        logits = self._project(x, self.token_embedding_weight, None)
    if self.logit_softcap > 0.0:  # Gemma 2: cap * tanh(logit / cap)
        logits = torch.tanh(logits / self.logit_softcap) * self.logit_softcap
    return logits


def _next_token(self, logits: Tensor, temperature: float, top_k: int, top_p: float) -> Tensor:
    # logits (B, V) -> a token per row (B): the most likely at temperature 0; otherwise drawn
    # (under torch.manual_seed) from the softmax of logits / temperature, kept to the top_k
    # most likely and to the fewest whose probability reaches top_p, as process_logits does
    logits = logits.float()
    if temperature <= 0.0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k > 0 and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, -1)[0][:, top_k - 1:top_k]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, -1, True)
        probs = torch.softmax(sorted_logits, -1)
        # drop a token once those before it reach top_p; the most likely always stays
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.multinomial(torch.softmax(logits, -1), 1).squeeze(1)


def _append_token(self, out: Tensor, logits: Tensor, finished: Tensor, temperature: float, top_k: int,
                  top_p: float, eos_id: int) -> Tuple[Tensor, Tensor, Tensor]:
    # One step of generate: out (B, n) -> (B, n + 1) with each row's next token, pad_id in
    # rows that have finished; returns the token (B), the new out and which rows have finished
    token = self._next_token(logits, temperature, top_k, top_p)
    token = torch.where(finished, torch.full_like(token, self.pad_id), token)
    if eos_id >= 0:
        finished = finished | (token == eos_id)
    return token, torch.cat([out, token.unsqueeze(1)], 1), finished
