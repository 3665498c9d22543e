"""sentence-transformers' embeddings of real sentences against a zoo TorchScript export of the
same model, for zoo's pretrained-BERT test. Nothing here is shared with zoo.

Usage: sentence_embeddings.py MODEL_DIR EXPORT.pt SENTENCES.txt IDS.txt
MODEL_DIR is a sentence-transformers model directory (modules.json: BERT, mean pooling,
normalisation); EXPORT.pt is `zoo export` of zoo's import of it; IDS.txt has zoo's token ids
for each line of SENTENCES.txt (`zoo tokenizer encode`, without special tokens). The export's
sequence output for [CLS] ids [SEP], mean-pooled over the tokens and normalised as
sentence-transformers' Pooling and Normalize modules do, must equal SentenceTransformer.encode
to 1e-5, and sentence-transformers' own tokenizer must give the same ids. Exits non-zero naming
the first sentence that differs.
"""
import json
import os
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore", category=FutureWarning)

import torch
from sentence_transformers import SentenceTransformer


def main(model_dir, export, sentences_path, ids_path):
    sentences = open(sentences_path, encoding="utf-8").read().splitlines()
    zoo_ids = [[int(i) for i in line.split()] for line in open(ids_path, encoding="utf-8").read().splitlines()]
    assert len(sentences) == len(zoo_ids), (len(sentences), len(zoo_ids))
    reference = SentenceTransformer(model_dir, device="cpu")
    want = reference.encode(sentences, convert_to_tensor=True, normalize_embeddings=False)
    extra = {"zoo.json": ""}
    model = torch.jit.load(export, _extra_files=extra).eval()
    special = json.loads(extra["zoo.json"])["special_ids"]
    worst = 0.0
    for i, (sentence, ids) in enumerate(zip(sentences, zoo_ids)):
        full = [special["cls"]] + ids + [special["sep"]]
        theirs = reference.tokenizer(sentence)["input_ids"]
        if full != theirs:
            sys.exit(f"sentence {i} ({sentence!r}): zoo's ids {full}, sentence-transformers' {theirs}")
        x = torch.tensor([full])
        with torch.no_grad():
            hidden = model(x, torch.ones_like(x), torch.zeros_like(x))[0][0]  # (T, d)
        got = torch.nn.functional.normalize(hidden.mean(0), dim=0)
        diff = (got - want[i]).abs().max().item()
        worst = max(worst, diff)
        if diff > 1e-5:
            sys.exit(f"sentence {i} ({sentence!r}): embedding differs from sentence-transformers' by {diff}")
    similar = torch.nn.functional.cosine_similarity(want[0], want[1], dim=0).item()
    print(f"{len(sentences)} sentences: zoo's embeddings within {worst:.1e} of sentence-transformers' "
          f"(cosine of the first two: {similar:.3f})")


if __name__ == "__main__":
    main(*sys.argv[1:5])
