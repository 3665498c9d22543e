#!/usr/bin/env python3
"""Generates text from a `zoo export` file with nothing but PyTorch and SentencePiece.

    ~/.cache/zoo/venv/bin/python scripts/torchscript_generate.py model.pt --prompt "The Python interpreter"
    ~/.cache/zoo/venv/bin/python scripts/torchscript_generate.py model.pt --ids "464 8265"   # ids in and out

The archive holds the model, its generate() method (KV cache inside) and the tokenizer
(tokenizer.model for zoo's own; tokenizer.files, the container of a Hugging Face tokenizer's
files), so a deployment needs no zoo code. Text goes through SentencePiece: zoo's tokenizers and
the SentencePiece models of Hugging Face directories (LLaMA's tokenizer.model, T5's
spiece.model). Other Hugging Face tokenizers (tokenizer.json, GPT-2's and BERT's files) have no
reader in plain PyTorch: give ids with --ids (`zoo tokenizer encode` prints them) and get ids.
GPT exports continue the prompt; T5 exports map it to an output. --greedy (or --temperature 0)
picks the most likely token. Any PyTorch 2.x loads the file (setup's environment has 2.15);
torch.jit.load is deprecated there and refused by Python 3.14 and later.
"""
import argparse
import json
import sys
import warnings

import torch

# PyTorch 2.x warns on every torch.jit.load that TorchScript is deprecated; it still loads.
warnings.filterwarnings("ignore", message=".*torch.jit.load.*is deprecated", category=FutureWarning)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a file written by `zoo export`")
    inputs = parser.add_mutually_exclusive_group(required=True)
    inputs.add_argument("--prompt", action="append", help="text (repeat for several)")
    inputs.add_argument("--ids", action="append", help="token ids, space-separated (repeat for several); prints ids")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-k", type=int, default=200)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--greedy", action="store_true", help="same as --temperature 0")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="where to run: cpu, cuda, cuda:N")
    args = parser.parse_args()

    extra = {"zoo.json": "", "tokenizer.model": "", "tokenizer.files": ""}
    try:
        model = torch.jit.load(args.model, _extra_files=extra)
    except Exception as error:  # a missing, truncated or foreign file
        sys.exit(f"{args.model}: not a TorchScript archive ({str(error).splitlines()[0]})")
    if not extra["zoo.json"]:
        sys.exit(f"{args.model}: no zoo.json inside; was it written by `zoo export`?")
    meta = json.loads(extra["zoo.json"])
    if meta["family"] == "bert":
        sys.exit(f"{args.model}: a BERT export has no generate(); call forward() for its outputs")
    if "eos" not in meta.get("special_ids", {}):
        sys.exit(f"{args.model}: the export carries no tokenizer with an end-of-sequence token (its checkpoint had none)")
    tokenizer = None if args.ids else sentencepiece_of(args.model, extra)
    prefix, suffix = meta.get("prompt_prefix", []), meta.get("prompt_suffix", [])
    eos = meta["special_ids"]["eos"]
    specials = set(meta["special_ids"].values())
    temperature = 0.0 if args.greedy else args.temperature
    model.eval()
    model.to(args.device)
    for prompt in args.ids or args.prompt:
        if args.ids:
            try:
                ids = [int(i) for i in prompt.split()]
            except ValueError:
                sys.exit(f"--ids '{prompt}': expected token ids separated by spaces")
        else:
            ids = prefix + tokenizer.EncodeAsIds(prompt) + suffix
        if meta["family"] == "gpt":
            if not ids:
                ids = [eos]  # documents are separated by </s> in training: start a new one
            room = meta["max_positions"] - len(ids)
            steps = max(0, min(args.max_new_tokens, room))
        else:
            ids = ids if ids and ids[-1] == eos else ids + [eos]
            steps = min(args.max_new_tokens, meta["max_positions"])
        torch.manual_seed(args.seed)
        with torch.no_grad():
            out = model.generate(torch.tensor([ids], device=args.device), steps, temperature, args.top_k, args.top_p, eos)
        new = out[0, len(ids) if meta["family"] == "gpt" else 1:].tolist()
        if eos in new:
            new = new[: new.index(eos)]
        if args.ids:
            print(" ".join(map(str, (ids if meta["family"] == "gpt" else []) + new)), flush=True)
            continue
        if meta["family"] == "gpt":
            # Decoded with the prompt, so the first new word gets its leading space.
            text = tokenizer.DecodeIds([i for i in ids + new if i not in specials])
        else:
            text = tokenizer.DecodeIds([i for i in new if i not in specials])
        # An incomplete UTF-8 character at the end (byte pieces cut short) is not printed.
        print(text.rstrip("\ufffd"), flush=True)


def tokenizer_files(data, source):
    """The files of a `tokenizer.files` container: "ZOO-TOKENIZER-FILES 1\\n", then per file
    NAME "\\n" SIZE "\\n" SIZE bytes "\\n"."""
    magic = b"ZOO-TOKENIZER-FILES 1\n"
    if not data.startswith(magic):
        sys.exit(f"{source}: tokenizer.files is not a zoo tokenizer container")
    files, at = {}, len(magic)
    while at < len(data):
        name_end = data.index(b"\n", at)
        size_end = data.index(b"\n", name_end + 1)
        size = int(data[name_end + 1:size_end])
        files[data[at:name_end].decode()] = data[size_end + 1:size_end + 1 + size]
        at = size_end + 1 + size + 1
    return files


def sentencepiece_of(source, extra):
    import sentencepiece

    model = extra["tokenizer.model"]
    if not model:
        files = tokenizer_files(extra["tokenizer.files"], source)
        model = files.get("tokenizer.model") or files.get("spiece.model")
        if model is None:
            sys.exit(f"{source}: its tokenizer ({', '.join(sorted(files))}) is not SentencePiece, which is all plain "
                     "PyTorch reads here: give token ids with --ids (`zoo tokenizer encode` prints them)")
    tokenizer = sentencepiece.SentencePieceProcessor()
    tokenizer.LoadFromSerializedProto(model)
    return tokenizer


if __name__ == "__main__":
    main()
