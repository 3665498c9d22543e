"""Runs a zoo TorchScript export in plain PyTorch (no zoo code) for the export tests.

Usage: torchscript_check.py OUT.pt MODEL.pt [--eager] [--to DTYPE]

Loads MODEL.pt with torch.jit.load, reads its extra files (zoo.json, config.yaml), runs every
method on inputs built from a formula the C++ test repeats, and saves the outputs into OUT.pt
(tests/reference/tensor_file.py).

With --eager the methods are not the compiled ones: the functions of interop/script run as
ordinary Python, bound to objects that read the export's weights and attributes (Eager below),
so the files a user reads are checked to be the program that runs. With --to (float64, ...)
the loaded module is converted first, as a user would with module.to(torch.float64).
"""
import inspect
import json
import os
import runpy
import sys
import types

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tensor_file import save_tensors  # noqa: E402

SCRIPT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "interop", "script")


class Eager:
    """One class of an export run eagerly: the functions its script files define (zoo.json's
    script_files) as methods; every other attribute (weights, tables, variants) read from the
    compiled module; its submodules Eager too."""

    def __init__(self, compiled, script_files, name="self"):
        self._compiled = compiled
        for file in script_files[name]:
            path = os.path.join(SCRIPT_DIR, file)
            for key, value in runpy.run_path(path).items():
                if inspect.isfunction(value) and value.__code__.co_filename == path:
                    setattr(self, key, types.MethodType(value, self))
        for child in script_files:
            if child != "self" and name == "self":
                setattr(self, child, Eager(getattr(compiled, child), script_files, child))

    def __getattr__(self, key):
        value = getattr(self._compiled, key)
        if callable(value):  # a compiled method: script_files does not name the file defining it
            raise AttributeError(f"{key}: no function of that name in {sorted(os.listdir(SCRIPT_DIR))}")
        return value

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)


def token_ids(batch, length, multiplier, offset, vocab):
    return ((torch.arange(batch * length) * multiplier + offset) % vocab).view(batch, length)


def main():
    out, path = sys.argv[1], sys.argv[2]
    extra = {"zoo.json": "", "config.yaml": ""}
    module = torch.jit.load(path, _extra_files=extra)
    meta = json.loads(extra["zoo.json"])
    if b"family:" not in extra["config.yaml"]:
        sys.exit("config.yaml missing from the archive")
    if "--to" in sys.argv:
        module.to(getattr(torch, sys.argv[sys.argv.index("--to") + 1]))
    if "--eager" in sys.argv[3:]:
        module = Eager(module, meta["script_files"])
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
            types_ = torch.zeros_like(ids)
            types_[:, 4:] = 1
            outputs = module(ids, mask, types_)
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
