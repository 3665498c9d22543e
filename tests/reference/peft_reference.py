"""PEFT itself on a base model's Hugging Face directory, to check zoo's LoRA files both ways.

Usage:
  peft_reference.py check BASE_DIR ADAPTER_DIR MERGED_DIR
      PEFT loads the adapter (adapter_config.json + adapter_model.safetensors, e.g. written by
      zoo export-hf --adapters-only) onto transformers' model of BASE_DIR
      (PeftModel.from_pretrained; a SEQ_CLS adapter onto AutoModelForSequenceClassification of
      the base, with the merged export's labels; every module its target_modules takes must
      have its tensors in the file) and merges it (merge_and_unload). Every tensor of MERGED_DIR
      (zoo export-hf of the LoRA checkpoint, adapters merged) must equal PEFT's merged weight to
      1e-5, every weight the adapter changes must be in MERGED_DIR, and the logits of
      transformers' model of MERGED_DIR must equal those of PEFT's unmerged model on the same
      input to 1e-4. A mixture's files hold each expert's tensors, which transformers stacks as it
      loads: for those, the tensors of transformers' model of MERGED_DIR are compared instead.
      Exits non-zero naming the first mismatch.
  peft_reference.py make BASE_DIR ADAPTER_DIR TARGETS RANK ALPHA
      PEFT's own adapter for a causal LM: get_peft_model with LoraConfig(r=RANK,
      lora_alpha=ALPHA, target_modules=TARGETS, comma-separated; those naming experts'
      parameters, as mlp.experts.gate_up_proj, go to target_parameters), B drawn at random
      (seeded) so the adapter changes the model, saved with save_pretrained.
Nothing here is shared with zoo.
"""
import json
import logging
import os
import sys
import warnings

import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file

transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
logging.disable(logging.WARNING)
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", message="fan_in_fan_out is set to False")


def base_model(directory, task_type=None, like=None):
    """transformers' model of `directory`: its own architecture, or, for a PEFT task type, the
    class a PEFT user loads the base with (a sequence classifier with `like`'s labels)."""
    with open(os.path.join(directory, "config.json")) as f:
        architecture = json.load(f)["architectures"][0]
    if task_type == "SEQ_CLS":
        with open(os.path.join(like, "config.json")) as f:
            config = json.load(f)
        labels = len(config["id2label"]) if "id2label" in config else config["num_labels"]
        return transformers.AutoModelForSequenceClassification.from_pretrained(
            directory, num_labels=labels, dtype=torch.float32).eval()
    return getattr(transformers, architecture).from_pretrained(directory, dtype=torch.float32).eval()


def merged_files(directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    weights = {}
    for name in files:
        weights.update(load_file(os.path.join(directory, name)))
    return weights


def sample_input(model):
    g = torch.Generator().manual_seed(5)
    return torch.randint(4, model.config.vocab_size, (2, 9), generator=g)


def check(base_dir, adapter_dir, merged_dir):
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        task_type = json.load(f).get("task_type")
    torch.manual_seed(0)  # a classifier's fresh pooler, the same in both copies of the base
    before = base_model(base_dir, task_type, merged_dir).state_dict()
    torch.manual_seed(0)
    peft_model = PeftModel.from_pretrained(base_model(base_dir, task_type, merged_dir), adapter_dir).eval()
    # PEFT adds an adapter to every module target_modules names; each must have its tensors.
    saved = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    missing = [k for k in peft_model.state_dict() if "lora_" in k and ".default." in k and
               k.replace(".default.", ".") not in saved]
    if missing:
        sys.exit(f"{adapter_dir}: target_modules takes modules the adapter has no tensors for: {missing[:4]}")
    ids = sample_input(peft_model)
    kwargs = {}
    if peft_model.config.model_type == "bert":
        kwargs["token_type_ids"] = torch.zeros_like(ids)
    if peft_model.config.is_encoder_decoder:
        kwargs["decoder_input_ids"] = torch.cat([torch.zeros_like(ids[:, :1]), ids[:, :4]], 1)
    with torch.no_grad():
        want_logits = peft_model(input_ids=ids, **kwargs).logits
    merged = peft_model.merge_and_unload()
    expected = merged.state_dict()
    changed = [k for k, v in expected.items() if k in before and not torch.equal(v, before[k])]
    got = merged_files(merged_dir)
    if any(name not in expected for name in got) and merged.config.to_dict().get("num_local_experts"):
        got = base_model(merged_dir).state_dict()  # the experts stacked as transformers loads them
    for name in changed:
        if name not in got:
            sys.exit(f"{merged_dir}: lacks {name}, which the adapter changes")
    for name, t in got.items():
        if name not in expected:
            sys.exit(f"{merged_dir}: {name} is not a weight of PEFT's merged model")
        diff = (t.float() - expected[name].float()).abs().max().item()
        if diff > 1e-5:
            sys.exit(f"{merged_dir}: {name} differs from PEFT's merge by {diff}")
    with torch.no_grad():
        logits = base_model(merged_dir)(input_ids=ids, **kwargs).logits
    diff = (logits - want_logits).abs().max().item()
    if diff > 1e-4:
        sys.exit(f"{merged_dir}: logits differ from PEFT's model by {diff}")
    if not changed:
        sys.exit(f"{adapter_dir}: the adapter changes no weight")
    print(f"PEFT merge matches: {len(changed)} weights changed, {len(got)} tensors, logits within {diff:.1e}")


def make(base_dir, adapter_dir, targets, rank, alpha):
    torch.manual_seed(3)
    names = targets.split(",")
    config = LoraConfig(r=int(rank), lora_alpha=float(alpha), lora_dropout=0.0, task_type="CAUSAL_LM",
                        target_modules=[t for t in names if ".experts." not in t],
                        target_parameters=[t for t in names if ".experts." in t] or None)
    model = get_peft_model(base_model(base_dir), config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)
    model.save_pretrained(adapter_dir)
    print(f"PEFT adapter saved: {adapter_dir}")


if __name__ == "__main__":
    {"check": check, "make": make}[sys.argv[1]](*sys.argv[2:])
