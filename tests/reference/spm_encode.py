"""Encodes each line of a text file with python3-sentencepiece, for zoo's tokenizer parity test.

Usage: spm_encode.py MODEL.model INPUT.txt OUTPUT.txt   (one line of space-separated ids per line)
"""
import sys

import sentencepiece as spm


def main(model, source, out):
    sp = spm.SentencePieceProcessor(model_file=model)
    with open(source, encoding="utf-8") as f, open(out, "w", encoding="utf-8") as o:
        for line in f:
            o.write(" ".join(str(i) for i in sp.encode(line.rstrip("\n"))) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
