"""torchao's weight-only quantization of one weight, for zoo's quantized-weight tests.

Usage: quantize_reference.py OUT.pt

A seeded (24, 256) float32 weight with awkward rows: all zeros, one constant, only negative, one
large value among small ones, values 1e-30 in size. Quantized as torchao 0.18's weight-only
configs do it: int8 symmetric per output (Int8Tensor.from_hp: choose_qparams_affine with float32's
epsilon, quantize_affine) and int4 asymmetric per group of 32, 64 and 128 inputs with a float zero
(the tinygemm parameters of Int4WeightOnlyConfig: _choose_qparams_affine_tinygemm,
_quantize_affine_tinygemm). Saves the weight, the integers, scales and zeros, and each
dequantized weight.
"""
import sys
import warnings

import torch

warnings.filterwarnings("ignore")
from torchao.quantization.quant_primitives import (  # noqa: E402
    MappingType, _choose_qparams_affine_tinygemm, _dequantize_affine_tinygemm, _quantize_affine_tinygemm,
    choose_qparams_affine, dequantize_affine, quantize_affine)

from tensor_file import save_tensors  # noqa: E402


def main(out):
    torch.manual_seed(11)
    w = torch.randn(24, 256) * 0.05
    w[1] = 0.0
    w[2] = 0.37
    w[3] = -w[3].abs()
    w[4, 17] = 40.0
    w[5] *= 1e-28
    tensors = {"weight": w}
    block = (1, w.shape[1])
    scale, zero = choose_qparams_affine(w, MappingType.SYMMETRIC, block, torch.int8, eps=torch.finfo(torch.float32).eps,
                                        scale_dtype=torch.float32, zero_point_dtype=torch.int8)
    q = quantize_affine(w, block, scale, zero, torch.int8)
    tensors["int8.data"] = q
    tensors["int8.scale"] = scale.reshape(-1)
    tensors["int8.dequantized"] = dequantize_affine(q, block, scale, zero, torch.int8, output_dtype=torch.float32)
    for group in (32, 64, 128):
        block = (1, group)
        scale, zero = _choose_qparams_affine_tinygemm(w, MappingType.ASYMMETRIC, block, torch.int32, 0, 15,
                                                      scale_dtype=torch.float32, zero_point_dtype=torch.float32)
        q = _quantize_affine_tinygemm(w, block, scale, zero, torch.int32, 0, 15)
        tensors[f"int4.{group}.values"] = q.to(torch.uint8)
        tensors[f"int4.{group}.scale"] = scale.reshape(w.shape[0], -1)
        tensors[f"int4.{group}.zero"] = zero.reshape(w.shape[0], -1)
        tensors[f"int4.{group}.dequantized"] = _dequantize_affine_tinygemm(q, block, scale, zero, torch.int32, 0, 15,
                                                                           output_dtype=torch.float32)
    save_tensors(tensors, out)


if __name__ == "__main__":
    main(sys.argv[1])
