"""PEFT's LoRA formula applied to a base model's Hugging Face weights, to check zoo's merged export.

Usage:
  peft_reference.py BASE_DIR ADAPTER_DIR MERGED_DIR
      BASE_DIR: the base model's Hugging Face directory; ADAPTER_DIR: adapter_config.json +
      adapter_model.safetensors; MERGED_DIR: zoo export-hf of the LoRA checkpoint (adapters merged).
      Every tensor of MERGED_DIR must equal, to 1e-5, the base's with PEFT's update applied:
      W + (lora_alpha / r) * B @ A for each adapted module (alpha and r per module through
      alpha_pattern and rank_pattern; lora_alpha / sqrt(r) with use_rslora; the update transposed
      for fan_in_fan_out, GPT-2's Conv1D), modules_to_save tensors replacing the base's. Every
      adapted module's weight must be in MERGED_DIR. Exits non-zero naming the first mismatch.

Written from PEFT's documented LoRA layer (Hu et al. 2021; PEFT's LoraConfig fields), in plain
tensor operations, independently of zoo.
"""
import json
import math
import os
import sys

from hf_models import read_dir, read_safetensors

PREFIX = "base_model.model."


def pattern_value(patterns, module, default):
    for key, value in (patterns or {}).items():
        if module == key or module.endswith("." + key):
            return value
    return default


def main(base_dir, adapter_dir, merged_dir):
    config = json.load(open(os.path.join(adapter_dir, "adapter_config.json")))
    assert config["peft_type"] == "LORA", config["peft_type"]
    adapter = read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    expected = {name: t.float() for name, t in read_dir(base_dir)[1].items()}
    adapted = []
    for key, a in adapter.items():
        assert key.startswith(PREFIX), key
        if not key.endswith(".lora_A.weight"):
            if ".lora_B." not in key:  # modules_to_save
                expected[key[len(PREFIX):]] = a.float()
            continue
        module = key[len(PREFIX):-len(".lora_A.weight")]
        b = adapter[PREFIX + module + ".lora_B.weight"].float()
        a = a.float()
        r = a.shape[0]
        assert b.shape[1] == r, (module, a.shape, b.shape)
        assert r == pattern_value(config.get("rank_pattern"), module, config["r"]), (module, r)
        alpha = pattern_value(config.get("alpha_pattern"), module, config["lora_alpha"])
        scale = alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r
        delta = scale * (b @ a)
        if config.get("fan_in_fan_out"):
            delta = delta.t()
        name = module + ".weight"
        assert expected[name].shape == delta.shape, (name, expected[name].shape, delta.shape)
        expected[name] = expected[name] + delta
        adapted.append(name)
    merged = read_dir(merged_dir)[1]
    for name in adapted:
        if name not in merged:
            sys.exit(f"{merged_dir}: lacks the adapted {name}")
    for name, t in merged.items():
        if name not in expected:
            sys.exit(f"{merged_dir}: {name} is neither in the base nor in the adapter")
        diff = (t.float() - expected[name]).abs().max().item()
        if diff > 1e-5:
            sys.exit(f"{merged_dir}: {name} differs from PEFT's merge by {diff}")
    print(f"PEFT merge matches: {len(adapted)} adapted modules, {len(merged)} tensors")


if __name__ == "__main__":
    main(*sys.argv[1:])
