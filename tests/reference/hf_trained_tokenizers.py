"""Tokenizers trained by the tokenizers library itself, across its components, for zoo's
tokenizer.json parity test. Nothing here is shared with zoo.

Usage:
  hf_trained_tokenizers.py train CORPUS DIR
      Trains each tokenizer below on CORPUS with the tokenizers library's own trainers and saves
      it as DIR/NAME/tokenizer.json; prints the names.
  hf_trained_tokenizers.py encode TOKENIZER.json IN.json OUT.json
      IN is a JSON array of texts; OUT gets, for each, {"ids": ids with the post-processor's
      special tokens, "type_ids", "decoded": the ids decoded keeping special tokens,
      "decoded_skip": decoded without them}. Any tokenizer.json (Qwen3's reference too).

The tokenizers:
  bpe_byte_level       GPT-2's recipe: ByteLevel pre-tokenizer, post-processor and decoder, BPE,
                       special added tokens
  bpe_byte_fallback    LLaMA 2's: Prepend and Replace normalizers, BPE with byte fallback and an
                       unknown token, decoders Replace, ByteFallback, Fuse, Strip; a template
                       adding <s>
  wordpiece_bert       BERT's: BertNormalizer (lowercase, accents stripped, CJK spaced),
                       BertPreTokenizer, WordPiece, BertProcessing, WordPiece decoder
  unigram_metaspace    T5's: NFKC, Metaspace, Unigram, a template adding </s>, Metaspace decoder
  bpe_sequences        NFD + StripAccents + Lowercase, Whitespace then Digits (one by one), BPE
                       with a continuing-subword prefix and an end-of-word suffix, added tokens
                       that strip space on their left or right or match single words,
                       RobertaProcessing, BPEDecoder
  unigram_split        Split on a regular expression then Punctuation, Unigram,
                       TemplateProcessing for pairs, decoders Replace + Strip
"""
import json
import os
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers


def bpe_byte_level():
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.post_processor = processors.ByteLevel(trim_offsets=True)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<|endoftext|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return t, trainer


def bpe_byte_fallback():
    t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    t.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=1400, special_tokens=specials)
    return t, trainer


def wordpiece_bert():
    t = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    t.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                              lowercase=True)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=1200, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    return t, trainer


def unigram_metaspace():
    t = Tokenizer(models.Unigram())
    t.normalizer = normalizers.NFKC()
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    t.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=1200, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    return t, trainer


def bpe_sequences():
    t = Tokenizer(models.BPE(unk_token="<unk>", continuing_subword_prefix="##", end_of_word_suffix="</w>"))
    t.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase()])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)])
    t.decoder = decoders.BPEDecoder(suffix="</w>")
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                  continuing_subword_prefix="##", end_of_word_suffix="</w>")
    return t, trainer


def unigram_split():
    t = Tokenizer(models.Unigram())
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+"), behavior="merged_with_next"),
        pre_tokenizers.Punctuation(behavior="isolated"),
    ])
    t.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.Strip(" ", 1, 0)])
    trainer = trainers.UnigramTrainer(vocab_size=1200, special_tokens=["<unk>", "<cls>", "<sep>"], unk_token="<unk>")
    return t, trainer


def finish(name, t):
    """What training leaves to the user: post-processors naming trained ids, added tokens."""
    ids = t.token_to_id
    if name == "bpe_byte_fallback":
        t.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                         special_tokens=[("<s>", ids("<s>"))])
    elif name == "wordpiece_bert":
        t.post_processor = processors.BertProcessing(("[SEP]", ids("[SEP]")), ("[CLS]", ids("[CLS]")))
    elif name == "unigram_metaspace":
        t.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B:1 </s>:1",
                                                         special_tokens=[("</s>", ids("</s>"))])
        t.add_tokens([AddedToken("<extra_id_0>", special=True), AddedToken("New York", normalized=True)])
    elif name == "bpe_sequences":
        t.post_processor = processors.RobertaProcessing(("</s>", ids("</s>")), ("<s>", ids("<s>")))
        t.add_special_tokens([AddedToken("<mask>", lstrip=True)])
        t.add_tokens([AddedToken("[SPLIT]", rstrip=True), AddedToken("cat", single_word=True)])
    elif name == "unigram_split":
        t.post_processor = processors.TemplateProcessing(
            single="<cls> $A <sep>", pair="<cls> $A <sep> $B:1 <sep>:1",
            special_tokens=[("<cls>", ids("<cls>")), ("<sep>", ids("<sep>"))])


RECIPES = {f.__name__: f for f in (bpe_byte_level, bpe_byte_fallback, wordpiece_bert, unigram_metaspace, bpe_sequences,
                                   unigram_split)}


def train(corpus, out):
    for name, recipe in RECIPES.items():
        t, trainer = recipe()
        t.train([corpus], trainer)
        finish(name, t)
        os.makedirs(os.path.join(out, name), exist_ok=True)
        t.save(os.path.join(out, name, "tokenizer.json"))
        print(name)


def encode(path, in_path, out_path):
    t = Tokenizer.from_file(path)
    texts = json.load(open(in_path, encoding="utf-8"))
    results = []
    for text in texts:
        e = t.encode(text, add_special_tokens=True)
        results.append({"ids": e.ids, "type_ids": e.type_ids, "decoded": t.decode(e.ids, skip_special_tokens=False),
                        "decoded_skip": t.decode(e.ids, skip_special_tokens=True)})
    json.dump(results, open(out_path, "w", encoding="utf-8"), ensure_ascii=False)


if __name__ == "__main__":
    {"train": train, "encode": encode}[sys.argv[1]](*sys.argv[2:])
