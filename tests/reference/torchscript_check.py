"""Runs a zoo TorchScript export in plain python3-torch (no zoo code) for the export tests.

Usage: torchscript_check.py OUT.pt MODEL.pt

Loads MODEL.pt with torch.jit.load, reads its extra files (zoo.json, config.yaml), runs
every method on inputs built from a formula the C++ test repeats, and saves the outputs into OUT.pt (tests/reference/tensor_file.py).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tensor_file import save_tensors  # noqa: E402


def token_ids(batch, length, multiplier, offset, vocab):
    return ((torch.arange(batch * length) * multiplier + offset) % vocab).view(batch, length)


def main():
    out, path = sys.argv[1], sys.argv[2]
    extra = {"zoo.json": "", "config.yaml": ""}
    module = torch.jit.load(path, _extra_files=extra)
    meta = json.loads(extra["zoo.json"])
    if b"family:" not in extra["config.yaml"]:
        sys.exit("config.yaml missing from the archive")
    vocab = meta["vocab_size"]
    results = {}
    with torch.no_grad():
        if meta["family"] == "gpt":
            ids = token_ids(2, 7, 7, 3, vocab)
            mask = torch.ones_like(ids)
            mask[0, :2] = 0  # left padding
            results["logits"] = module(ids)
            results["masked_logits"] = module(ids, mask)
            results["generated"] = module.generate(ids, 6)
            results["generated_masked"] = module.generate(ids, 6, attention_mask=mask)
        elif meta["family"] == "bert":
            ids = token_ids(2, 7, 7, 3, vocab)
            mask = torch.ones_like(ids)
            mask[1, 5:] = 0  # right padding
            types = torch.zeros_like(ids)
            types[:, 4:] = 1
            outputs = module(ids, mask, types)
            names = ["sequence_output", "pooled_output", "logits", "nsp_logits"]
            for name, value in zip(names, outputs):
                results[name] = value
        else:
            ids = token_ids(2, 7, 7, 3, vocab)
            mask = torch.ones_like(ids)
            mask[1, 5:] = 0
            decoder_ids = token_ids(2, 5, 5, 1, vocab)
            results["logits"] = module(ids, mask, decoder_ids)
            results["memory"] = module.encode(ids, mask)
            results["decoded"] = module.decode(decoder_ids, results["memory"], mask)
            results["generated"] = module.generate(ids, 6, attention_mask=mask)
    save_tensors(results, out)


if __name__ == "__main__":
    main()
