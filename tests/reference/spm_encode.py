"""Checks zoo's SentencePiece encoding of each line of a text file against the sentencepiece
package, for zoo's tokenizer parity test.

Usage: spm_encode.py MODEL.model INPUT.txt ZOO_IDS.txt OUTPUT.txt
ZOO_IDS has one line of space-separated ids per line of INPUT (zoo's encoding). OUTPUT gets one
line per input line: "same" where the ids are the sentencepiece package's; "tie" where they
differ but decode to the same text with the same total piece score, i.e. another optimum of the
same unigram lattice (sentencepiece 0.2 breaks exact ties of scores differently from 0.1.x, the
library zoo runs); else "differs: " and the package's ids.
"""
import sys

import sentencepiece as spm


def main(model, source, zoo_ids, out):
    sp = spm.SentencePieceProcessor(model_file=model)
    # Lines split on "\n" alone, as zoo's reader does (Python's text mode would also split on "\r").
    with open(source, encoding="utf-8", newline="\n") as f, open(zoo_ids, encoding="utf-8") as z, \
            open(out, "w", encoding="utf-8") as o:
        for line, theirs in zip(f, z):
            text = line[:-1] if line.endswith("\n") else line
            ids = sp.encode(text)
            got = [int(i) for i in theirs.split()]
            if got == ids:
                o.write("same\n")
            elif sp.decode(got) == sp.decode(ids) and \
                    abs(sum(map(sp.get_score, got)) - sum(map(sp.get_score, ids))) < 1e-4:
                o.write("tie\n")
            else:
                o.write("differs: " + " ".join(map(str, ids)) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:5])
