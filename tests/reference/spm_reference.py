"""SentencePiece references for zoo's Hugging Face tokenizer tests, from the sentencepiece package.
Shares no code with zoo.

  spm_reference.py train CORPUS OUT_DIR
      Trains two small unigram models on CORPUS and writes, in OUT_DIR:
        llama/m.model, llama/tokenizer.json, llama-dir/{tokenizer.model,tokenizer_config.json}
          LLaMA's layout: <unk> 0, <s> 1, </s> 2, byte fallback, no normalization, spaces kept.
          tokenizer.json in LLaMA-2's form: Prepend("▁") + Replace(" " -> "▁") normalizer, no
          pre-tokenizer, Unigram, "<s> $A" template, Replace/ByteFallback/Fuse/Strip decoder.
        t5/m.model, t5/charsmap.bin, t5/tokenizer.json, t5-dir/{spiece.model,tokenizer_config.json}
          T5's layout: <pad> 0, </s> 1, <unk> 2, no byte fallback, SentencePiece's default
          normalization (nmt_nfkc), extra whitespace removed. charsmap.bin is the model's
          precompiled_charsmap. tokenizer.json as transformers converts such a model:
          Precompiled + Strip(right) + Replace(" {2,}" -> "▁") normalizer, Metaspace (always),
          Unigram, "$A </s>" template, 100 sentinels <extra_id_N> after the vocabulary
          (<extra_id_0> last).
  spm_reference.py encode MODEL IN.json OUT.json
      The ids the sentencepiece package gives each text of IN (a JSON array of strings).
"""
import base64
import json
import os
import sys

import sentencepiece as spm

SPACE = "\u2581"


def write(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        if isinstance(value, str):
            f.write(value)
        else:
            json.dump(value, f, ensure_ascii=False, indent=1)


def added(token_id, content):
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def special(name, type_id=0):
    return {"SpecialToken": {"id": name, "type_id": type_id}}


def sequence(name, type_id=0):
    return {"Sequence": {"id": name, "type_id": type_id}}


def template(single, pair, tokens):
    return {"type": "TemplateProcessing", "single": single, "pair": pair,
            "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]} for t, i in tokens}}


def protobuf_fields(data):
    """(field number, value) of a serialized protobuf message; values of length-delimited
    fields as bytes (the sentencepiece package here has no protobuf module to parse the model)."""
    def varint(i):
        shift = value = 0
        while True:
            b = data[i]
            value |= (b & 0x7F) << shift
            i += 1
            if b < 0x80:
                return value, i
            shift += 7
    i = 0
    while i < len(data):
        key, i = varint(i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(i)
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 2:
            n, i = varint(i)
            value, i = data[i:i + n], i + n
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError("unexpected wire type %d" % wire)
        yield number, value


def precompiled_charsmap(model_file):
    """ModelProto.normalizer_spec (field 3) .precompiled_charsmap (field 2)."""
    with open(model_file, "rb") as f:
        model = f.read()
    for number, value in protobuf_fields(model):
        if number == 3:
            for n, v in protobuf_fields(value):
                if n == 2:
                    return v
    raise ValueError(model_file + " has no precompiled_charsmap")


def vocab_of(sp):
    return [[sp.id_to_piece(i), sp.get_score(i)] for i in range(sp.get_piece_size())]


def train(corpus, out_dir, name, **options):
    os.makedirs(os.path.join(out_dir, name), exist_ok=True)
    prefix = os.path.join(out_dir, name, "m")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, model_type="unigram", vocab_size=2000,
                                   character_coverage=0.9995, num_threads=1, minloglevel=2, **options)
    return prefix + ".model"


def llama(corpus, out_dir):
    model = train(corpus, out_dir, "llama", byte_fallback=True, normalization_rule_name="identity",
                  remove_extra_whitespaces=False, add_dummy_prefix=True,
                  unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    sp = spm.SentencePieceProcessor(model_file=model)
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPACE},
            {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]},
        "pre_tokenizer": None,
        "post_processor": template([special("<s>"), sequence("A")],
                                   [special("<s>"), sequence("A"), special("<s>", 1), sequence("B", 1)],
                                   [("<s>", 1)]),
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": True, "vocab": vocab_of(sp)},
    }
    write(os.path.join(out_dir, "llama", "tokenizer.json"), tokenizer)
    write(os.path.join(out_dir, "llama-dir", "tokenizer_config.json"), {
        "tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
        "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False, "normalized": False,
                      "rstrip": False, "single_word": False},
        "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 2048,
        "chat_template": "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"})


def t5(corpus, out_dir):
    model = train(corpus, out_dir, "t5", byte_fallback=False, normalization_rule_name="nmt_nfkc",
                  remove_extra_whitespaces=True, add_dummy_prefix=True,
                  pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
    charsmap = precompiled_charsmap(model)
    with open(os.path.join(out_dir, "t5", "charsmap.bin"), "wb") as f:
        f.write(charsmap)
    sp = spm.SentencePieceProcessor(model_file=model)
    size = sp.get_piece_size()
    sentinels = [added(size + 99 - n, "<extra_id_%d>" % n) for n in range(99, -1, -1)]
    metaspace = {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": True}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "<pad>"), added(1, "</s>"), added(2, "<unk>")] + sentinels,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")},
            {"type": "Strip", "strip_left": False, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": SPACE}]},
        "pre_tokenizer": metaspace,
        "post_processor": template([sequence("A"), special("</s>")],
                                   [sequence("A"), special("</s>"), sequence("B"), special("</s>")],
                                   [("</s>", 1)]),
        "decoder": metaspace,
        "model": {"type": "Unigram", "unk_id": 2, "byte_fallback": False, "vocab": vocab_of(sp)},
    }
    write(os.path.join(out_dir, "t5", "tokenizer.json"), tokenizer)
    write(os.path.join(out_dir, "t5-dir", "tokenizer_config.json"), {
        "tokenizer_class": "T5Tokenizer", "extra_ids": 100, "eos_token": "</s>", "unk_token": "<unk>",
        "pad_token": "<pad>", "model_max_length": 512})


def copy(src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(src, "rb") as f, open(dst, "wb") as o:
        o.write(f.read())


def main():
    if sys.argv[1] == "train":
        corpus, out_dir = sys.argv[2], sys.argv[3]
        llama(corpus, out_dir)
        t5(corpus, out_dir)
        copy(os.path.join(out_dir, "llama", "m.model"), os.path.join(out_dir, "llama-dir", "tokenizer.model"))
        copy(os.path.join(out_dir, "t5", "m.model"), os.path.join(out_dir, "t5-dir", "spiece.model"))
    elif sys.argv[1] == "encode":
        sp = spm.SentencePieceProcessor(model_file=sys.argv[2])
        with open(sys.argv[3], encoding="utf-8") as f:
            texts = json.load(f)
        with open(sys.argv[4], "w", encoding="utf-8") as o:
            json.dump([sp.encode(t) for t in texts], o)
    else:
        sys.exit("usage: spm_reference.py train CORPUS OUT_DIR | encode MODEL IN.json OUT.json")


if __name__ == "__main__":
    main()
