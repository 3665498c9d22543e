"""Reference outputs of PyTorch's own transformer layers, for zoo's parity tests.

Usage: torch_layers.py OUT.pt

Builds nn.TransformerEncoderLayer and nn.TransformerDecoderLayer (batch_first, no dropout) in
post-norm (norm_first=False) and pre-norm (norm_first=True) forms with seeded random weights,
runs them on seeded inputs with padding and causal masks, and saves weights, inputs and outputs
as buffers of a TorchScript module ('.' in names becomes '__') that C++ loads with
torch::jit::load.
"""
import sys

import torch
from torch import nn

from tensor_file import save_tensors

D_MODEL, N_HEADS, D_FF, BATCH, T_TGT, T_SRC = 16, 4, 32, 2, 5, 6

def main(out):
    torch.manual_seed(1234)
    tensors = {}
    src = torch.randn(BATCH, T_SRC, D_MODEL)
    tgt = torch.randn(BATCH, T_TGT, D_MODEL)
    # torch's key padding masks are True at padding; zoo's are True at real tokens.
    src_pad = torch.zeros(BATCH, T_SRC, dtype=torch.bool)
    src_pad[1, -2:] = True
    causal = nn.Transformer.generate_square_subsequent_mask(T_TGT)
    tensors["src"], tensors["tgt"] = src, tgt
    tensors["src_keep"] = ~src_pad

    for norm_first in (False, True):
        tag = "pre" if norm_first else "post"
        enc = nn.TransformerEncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.0, activation="gelu",
                                         batch_first=True, norm_first=norm_first)
        dec = nn.TransformerDecoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.0, activation="relu",
                                         batch_first=True, norm_first=norm_first)
        for module in (enc, dec):
            with torch.no_grad():
                for name, p in module.named_parameters():
                    p.copy_(torch.randn_like(p) * 0.3)
                    if "norm" in name and name.endswith("weight"):
                        p.add_(1.0)
        # Gradients stay enabled so PyTorch takes its plain path, not the fused inference one.
        enc_out = enc(src, src_key_padding_mask=src_pad)
        dec_out = dec(tgt, src, tgt_mask=causal, memory_key_padding_mask=src_pad)
        for name, p in enc.state_dict().items():
            tensors[f"enc_{tag}.{name}"] = p
        for name, p in dec.state_dict().items():
            tensors[f"dec_{tag}.{name}"] = p
        tensors[f"enc_{tag}.output"] = enc_out
        tensors[f"dec_{tag}.output"] = dec_out

    save_tensors(tensors, out)

if __name__ == "__main__":
    main(sys.argv[1])
