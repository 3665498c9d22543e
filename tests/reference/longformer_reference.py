"""transformers' LongformerSelfAttention on seeded weights and inputs, for zoo's Longformer
attention (kernels/longformer_attention.h, layers/attention.h).

Usage: longformer_reference.py OUT.pt

Hidden size 32, 4 heads. For each attention_window w in WINDOWS (cases w4, w6, w10), one layer
and a seeded input x (2, 13, 32): row 0 has global tokens at 0, 5 and 11; row 1 at 0 only and its
last 4 tokens padded. transformers wants the length a multiple of w: x is padded with zeros (as
padding tokens, masked) and its outputs cut back to 13. Per case:
  w{w}_x, _global (2, 13), _tokens (2, 13)   the input and its masks
  w{w}_wq, _bq, _wk, _bk, _wv, _bv           query, key, value
  w{w}_wgq, _bgq, _wgk, _bgk, _wgv, _bgv     query_global, key_global, value_global
  w{w}_out                                   the attention's output (before the output dense)
  w{w}_probe, _dx, _dwq, _dwgk, _dbv         gradients of (out * probe).sum() by x and three weights
Nothing here is shared with zoo.
"""
import sys

import torch

from tensor_file import save_tensors

D, HEADS, BATCH, T = 32, 4, 2, 13
WINDOWS = (4, 6, 10)


def main(out_path):
    import transformers
    transformers.utils.logging.set_verbosity_error()
    from transformers.models.longformer.modeling_longformer import LongformerSelfAttention
    out = {}
    for seed, window in enumerate(WINDOWS):
        torch.manual_seed(20 + seed)
        config = transformers.LongformerConfig(hidden_size=D, num_attention_heads=HEADS, attention_window=[window],
                                               num_hidden_layers=1, attention_probs_dropout_prob=0.0)
        attention = LongformerSelfAttention(config, layer_id=0).eval()
        with torch.no_grad():
            for p in attention.parameters():
                p.normal_(0, 0.3)
        x = torch.randn(BATCH, T, D).requires_grad_(True)
        probe = torch.randn(BATCH, T, D)
        global_mask = torch.zeros(BATCH, T, dtype=torch.bool)
        global_mask[0, [0, 5, 11]] = True
        global_mask[1, 0] = True
        tokens = torch.ones(BATCH, T, dtype=torch.bool)
        tokens[1, -4:] = False
        padded = -(-T // window) * window
        hidden = torch.cat([x, torch.zeros(BATCH, padded - T, D)], 1)
        # LongformerModel's extended mask: < 0 padding, 0 local, > 0 global.
        mask = torch.zeros(BATCH, padded)
        mask[:, :T][global_mask] = 10000.0
        mask[:, :T][~tokens] = -10000.0
        mask[:, T:] = -10000.0
        result = attention(hidden, attention_mask=mask, is_index_masked=mask < 0, is_index_global_attn=mask > 0,
                           is_global_attn=True)[0][:, :T]
        (result * probe).sum().backward()
        name = f"w{window}"
        weights = {"q": attention.query, "k": attention.key, "v": attention.value, "gq": attention.query_global,
                   "gk": attention.key_global, "gv": attention.value_global}
        for key, linear in weights.items():
            out[f"{name}_w{key}"] = linear.weight.detach()
            out[f"{name}_b{key}"] = linear.bias.detach()
        out.update({
            f"{name}_x": x.detach(), f"{name}_global": global_mask, f"{name}_tokens": tokens,
            f"{name}_out": result.detach(), f"{name}_probe": probe, f"{name}_dx": x.grad,
            f"{name}_dwq": attention.query.weight.grad, f"{name}_dwgk": attention.key_global.weight.grad,
            f"{name}_dbv": attention.value.bias.grad})
    save_tensors({k: v.contiguous().clone() for k, v in out.items()}, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
