#!/usr/bin/python3
"""Generates text from a `zoo export` file with nothing but PyTorch and SentencePiece.

    python3 scripts/torchscript_generate.py model.pt --prompt "The Python interpreter"

The archive holds the model, its generate() method (KV cache inside) and the tokenizer
(tokenizer.model), so a deployment needs no zoo code. GPT exports continue the prompt; T5
exports map it to an output. --greedy (or --temperature 0) picks the most likely token.
"""
import argparse
import json
import sys

import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a file written by `zoo export`")
    parser.add_argument("--prompt", action="append", required=True, help="text (repeat for several)")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-k", type=int, default=200)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--greedy", action="store_true", help="same as --temperature 0")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    extra = {"zoo.json": "", "tokenizer.model": ""}
    try:
        model = torch.jit.load(args.model, _extra_files=extra)
    except Exception as error:  # a missing, truncated or foreign file
        sys.exit(f"{args.model}: not a TorchScript archive ({str(error).splitlines()[0]})")
    if not extra["zoo.json"]:
        sys.exit(f"{args.model}: no zoo.json inside; was it written by `zoo export`?")
    meta = json.loads(extra["zoo.json"])
    if meta["family"] == "bert":
        sys.exit(f"{args.model}: a BERT export has no generate(); call forward() for its outputs")
    if not extra["tokenizer.model"]:
        sys.exit(f"{args.model}: the export carries no tokenizer.model (its checkpoint had none)")

    import sentencepiece

    tokenizer = sentencepiece.SentencePieceProcessor()
    tokenizer.LoadFromSerializedProto(extra["tokenizer.model"])
    eos = meta["special_ids"]["eos"]
    specials = set(meta["special_ids"].values())
    temperature = 0.0 if args.greedy else args.temperature
    model.eval()
    for prompt in args.prompt:
        ids = tokenizer.EncodeAsIds(prompt)
        if meta["family"] == "gpt":
            if not ids:
                ids = [eos]  # documents are separated by </s> in training: start a new one
            room = meta["max_positions"] - len(ids)
            steps = max(0, min(args.max_new_tokens, room))
        else:
            ids = ids + [eos]
            steps = min(args.max_new_tokens, meta["max_positions"])
        torch.manual_seed(args.seed)
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), steps, temperature, args.top_k, args.top_p, eos)
        new = out[0, len(ids) if meta["family"] == "gpt" else 1:].tolist()
        if eos in new:
            new = new[: new.index(eos)]
        if meta["family"] == "gpt":
            # Decoded with the prompt, so the first new word gets its leading space.
            text = tokenizer.DecodeIds([i for i in ids + new if i not in specials])
        else:
            text = tokenizer.DecodeIds([i for i in new if i not in specials])
        # An incomplete UTF-8 character at the end (byte pieces cut short) is not printed.
        print(text.rstrip("\ufffd"), flush=True)


if __name__ == "__main__":
    main()
