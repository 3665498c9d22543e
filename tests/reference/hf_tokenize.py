#!/usr/bin/env python3
"""Encodes texts with the Hugging Face libraries themselves, as the reference for zoo's
tokenizers. Nothing here is shared with zoo.

Usage: hf_tokenize.py KIND PATH IN.json OUT.json
  KIND tokenizers   PATH is a tokenizer.json, read by the tokenizers library
       transformers PATH is a model directory read by transformers' from_pretrained: with
                    AutoTokenizer where it has a tokenizer_config.json, else the class its
                    files belong to (GPT2Tokenizer for vocab.json + merges.txt, BertTokenizer
                    for vocab.txt)
       bert-legacy  PATH is a directory with vocab.txt, read by transformers' pure-Python
                    BertTokenizerLegacy (a second BERT implementation, not the tokenizers library)
IN is a JSON array of texts; OUT gets, for each, the ids with the special tokens the
tokenizer's post-processing adds.
"""
import json
import sys


def encoder(kind, path):
    if kind == "tokenizers":
        from tokenizers import Tokenizer
        t = Tokenizer.from_file(path)
        return lambda texts: [e.ids for e in t.encode_batch(texts, add_special_tokens=True)]
    if kind == "transformers":
        import os
        import transformers
        if os.path.exists(os.path.join(path, "tokenizer_config.json")):
            cls = transformers.AutoTokenizer
        elif os.path.exists(os.path.join(path, "merges.txt")):
            cls = transformers.GPT2Tokenizer
        else:
            cls = transformers.BertTokenizer
        t = cls.from_pretrained(path)
        return lambda texts: [t(text)["input_ids"] for text in texts]
    if kind == "bert-legacy":
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy
        t = BertTokenizerLegacy.from_pretrained(path)
        return lambda texts: [t(text)["input_ids"] for text in texts]
    raise SystemExit(f"hf_tokenize.py: unknown kind {kind!r}")


def main():
    kind, path, in_path, out_path = sys.argv[1:5]
    with open(in_path, encoding="utf-8") as f:
        texts = json.load(f)
    ids = encoder(kind, path)(texts)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(ids, f)


if __name__ == "__main__":
    main()
