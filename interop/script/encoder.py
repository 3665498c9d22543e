# BERT (models/bert.h): token + position + segment embeddings, a bidirectional encoder, a
# pooler and a task head. The exported module holds token_embedding_weight (V, D),
# token_type_embedding_weight, embedding_norm_*, final_norm_* (pre-norm), pooler_* and the
# head's weights: mlm_head_* (masked LM), nsp_head_* (next sentence), classifier_*; the
# submodules `positions` (positions.py) and `blocks` (blocks.py). common.py's functions are
# methods here too.
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
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
        return x, pooled, self._masked_lm(x), F.linear(pooled, nsp, self.nsp_head_bias)
    if mlm_bias is not None:
        return x, pooled, self._masked_lm(x)
    if nsp is not None:
        return x, pooled, F.linear(pooled, nsp, self.nsp_head_bias)
    if classifier is not None:
        # a sequence is classified by its pooled first token, tokens each by their own output
        features = pooled if self.head == "sequence_classification" else x
        return x, pooled, F.linear(features, classifier, self.classifier_bias)
    return x, pooled


def _encode(self, input_ids: Tensor, attention_mask: Optional[Tensor],
            token_type_ids: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    # -> sequence_output (B, T, D) and pooled_output (B, D), empty without a pooler
    assert input_ids.dim() == 2, "forward: input_ids must be (batch, tokens)"
    b, t = input_ids.size()
    assert t <= self.max_positions, "forward: {} tokens, more than max_positions ({})".format(t, self.max_positions)
    positions = torch.arange(0, t, device=input_ids.device).unsqueeze(0).expand(b, t)
    types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
    x = self.positions.embed(torch.embedding(self.token_embedding_weight, input_ids), positions)
    x = x + torch.embedding(self.token_type_embedding_weight, types)  # (B, T, D)
    x = self._norm(x, self.embedding_norm_weight, self.embedding_norm_bias)
    # one bias for every layer: padding and position terms
    bias = self.positions.attention_bias(t, t, 0, x)
    if attention_mask is not None:
        padding = self._mask_bias(self._key_allowed(attention_mask, t), x)  # (B, 1, 1, T)
        bias = padding if bias is None else bias + padding
    no_cache: List[Tensor] = []
    x = self.blocks.forward(x, bias, self.positions.rotary(positions), 0, no_cache, no_cache, None, None)
    x = self._final_norm(x, self.final_norm_weight, self.final_norm_bias)
    pooler = self.pooler_weight
    if pooler is None:
        return x, torch.zeros([0], dtype=x.dtype, device=x.device)
    return x, torch.tanh(F.linear(x[:, 0], pooler, self.pooler_bias))


def _masked_lm(self, x: Tensor) -> Tensor:
    # x (B, T, D) -> (B, T, V): dense, activation and LayerNorm, then the word embeddings plus a
    # bias (models/bert.cpp's BertMaskedLMHead)
    dense, norm, bias = self.mlm_head_dense_weight, self.mlm_head_norm_weight, self.mlm_head_bias
    assert dense is not None and norm is not None and bias is not None, "no masked-LM head"
    h = self._activate(F.linear(x, dense, self.mlm_head_dense_bias))
    h = self._norm(h, norm, self.mlm_head_norm_bias)
    return F.linear(h, self.token_embedding_weight, bias)
