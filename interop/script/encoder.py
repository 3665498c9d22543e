# BERT (models/bert.h): token + position + segment embeddings, a bidirectional encoder, a
# pooler and a task head; ModernBERT as a config of it (rotary positions, no segments, local
# layers with a two-sided window, mean pooling, a head transform). The exported module holds
# token_embedding_weight (V, D), token_type_embedding_weight (none without segments),
# embedding_norm_*, final_norm_* (pre-norm), pooler_*, head_transform_* and the head's weights:
# mlm_head_* (masked LM), nsp_head_* (next sentence), classifier_*; the submodules `positions`
# (positions.py) and `blocks` (blocks.py). common.py's functions are methods here too.
from typing import List, Optional, Tuple

import torch
from torch import Tensor

# --- TorchScript below: Module::define reads this file from here on ---


def forward(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None,
            token_type_ids: Optional[Tensor] = None):
    # input_ids, attention_mask (1 at real tokens), token_type_ids: (B, T) ->
    # (sequence_output (B, T, D), pooled_output (B, D)[, logits][, nsp_logits]) by head: mlm
    # logits (B, T, V); nsp (B, 2); sequence_classification (B, num_labels);
    # token_classification (B, T, num_labels); pretraining both mlm logits and nsp_logits.
    # The head's weights decide the outputs when TorchScript compiles this, so each export
    # returns one tuple type.
    x, pooled = self._encode(input_ids, attention_mask, token_type_ids)
    mlm_bias, nsp, classifier = self.mlm_head_bias, self.nsp_head_weight, self.classifier_weight
    if mlm_bias is not None and nsp is not None:
        return x, pooled, self._masked_lm(x), self._project(pooled, nsp, self.nsp_head_bias)
    if mlm_bias is not None:
        return x, pooled, self._masked_lm(x)
    if nsp is not None:
        return x, pooled, self._project(pooled, nsp, self.nsp_head_bias)
    if classifier is not None:
        # a sequence is classified by its pooled tokens (through the pooler where there is one),
        # tokens each by their own output; then the head transform (ModernBERT)
        features = x
        if self.head == "sequence_classification":
            features = self._pool(x, attention_mask) if self.pooler_weight is None else pooled
        transform = self.head_transform_dense_weight
        if transform is not None:
            features = self._transform(features, transform, self.head_transform_dense_bias,
                                       self.head_transform_norm_weight, self.head_transform_norm_bias)
        return x, pooled, self._project(features, classifier, self.classifier_bias)
    return x, pooled


def _encode(self, input_ids: Tensor, attention_mask: Optional[Tensor],
            token_type_ids: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    # -> sequence_output (B, T, D) and pooled_output (B, D), empty without a pooler
    assert input_ids.dim() == 2, "forward: input_ids must be (batch, tokens)"
    b, t = input_ids.size()
    assert t <= self.max_positions, "forward: {} tokens, more than max_positions ({})".format(t, self.max_positions)
    positions = torch.arange(0, t, device=input_ids.device).unsqueeze(0).expand(b, t)
    x = self.positions.embed(self._embed(self.token_embedding_weight, input_ids), positions)
    segments = self.token_type_embedding_weight
    if segments is not None:
        types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
        x = x + torch.embedding(segments, types)  # (B, T, D)
    x = self._norm(x, self.embedding_norm_weight, self.embedding_norm_bias)
    # one bias for every layer: padding and position terms; the layers layer_windows marks
    # (ModernBERT's local ones) take a bias with their two-sided window too
    allowed: Optional[Tensor] = None
    if attention_mask is not None:
        allowed = self._key_allowed(attention_mask, t)  # (B, 1, 1, T)
    position_bias = self.positions.attention_bias(t, t, 0, x)
    bias = self._encoder_bias(allowed, position_bias, x)
    window_bias: Optional[Tensor] = None
    if self.window > 0:
        band = self._band_allowed(t, x.device, self.window)
        window_bias = self._encoder_bias(band if allowed is None else allowed & band, position_bias, x)
    no_cache: List[Tensor] = []
    # attention_mask as the token mask: what Linformer's layers zero padded keys by
    x = self.blocks.forward(x, bias, self.positions.rotary(positions), 0, no_cache, no_cache, None, attention_mask,
                            window_bias, self.positions.rotary_local(positions))
    x = self._final_norm(x, self.final_norm_weight, self.final_norm_bias)
    pooler = self.pooler_weight
    if pooler is None:
        return x, torch.zeros([0], dtype=x.dtype, device=x.device)
    return x, torch.tanh(self._project(self._pool(x, attention_mask), pooler, self.pooler_bias))


def _encoder_bias(self, allowed: Optional[Tensor], position_bias: Optional[Tensor], like: Tensor) -> Optional[Tensor]:
    # the masks (true where allowed) as an additive bias plus the position terms; None for neither
    bias = position_bias
    if allowed is not None:
        mask = self._mask_bias(allowed, like)
        bias = mask if bias is None else bias + mask
    return bias


def _pool(self, x: Tensor, attention_mask: Optional[Tensor]) -> Tensor:
    # models/bert.cpp's pool: the first token, or the mean of the real ones
    if self.pooling == "cls":
        return x[:, 0]
    assert self.pooling == "mean", "unknown pooling " + self.pooling
    if attention_mask is None:
        return x.mean(1)
    real = (attention_mask != 0).to(x.dtype).unsqueeze(-1)  # (B, T, 1)
    return (x * real).sum(1) / real.sum(1)


def _transform(self, x: Tensor, dense: Tensor, dense_bias: Optional[Tensor], norm: Optional[Tensor],
               norm_bias: Optional[Tensor]) -> Tensor:
    # models/bert.cpp's transform_features: dense, activation, norm
    assert norm is not None, "a head transform without its norm"
    return self._norm(self._activate(self._project(x, dense, dense_bias)), norm, norm_bias)


def _masked_lm(self, x: Tensor) -> Tensor:
    # x (B, T, D) -> (B, T, V): the transform, then the word embeddings plus a bias
    # (models/bert.cpp's BertMaskedLMHead)
    dense, bias = self.mlm_head_dense_weight, self.mlm_head_bias
    assert dense is not None and bias is not None, "no masked-LM head"
    h = self._transform(x, dense, self.mlm_head_dense_bias, self.mlm_head_norm_weight, self.mlm_head_norm_bias)
    return self._project(h, self.token_embedding_weight, bias)
