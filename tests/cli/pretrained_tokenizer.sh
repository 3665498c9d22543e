#!/usr/bin/env bash
# A Hugging Face GPT-2 directory with its real tokenizer files (vocab.json + merges.txt from
# npm) imports into a checkpoint that carries that tokenizer: the checkpoint encodes text into
# GPT-2's own ids, fine-tunes on plain text through it, generates, and exports back with the
# tokenizer files and its special-token ids in config.json.
set -euo pipefail
zoo="$1"
corpus="$2"
reference="$3"
npm="$4"
python=/usr/bin/python3
source "$(dirname "$0")/lib.sh"

slice "$corpus"
ZOO_HF_VOCAB=50257 "$python" "$reference" "$work/ref.pt" write gpt2 "$work/hf"
cp "$npm/gpt2-files/vocab.json" "$npm/gpt2-files/merges.txt" "$work/hf/"

"$zoo" import-hf "$work/hf" --out "$work/ckpt" > "$work/import.out" 2> /dev/null
grep -q "tokenizer: vocab.json+merges.txt from $work/hf (50257 tokens)" "$work/import.out"
test -s "$work/ckpt/tokenizer/vocab.json"
test ! -e "$work/ckpt/tokenizer.model"

# GPT-2's ids for "Hello world" are 15496 995 (its published encoding); <|endoftext|> is 50256.
ids=$(printf 'Hello world\n' | "$zoo" tokenizer encode --model "$work/ckpt/tokenizer")
[[ "$ids" == "15496 995" ]] || { echo "encoded 'Hello world' as '$ids'"; exit 1; }

# Fine-tuning tokenizes the text with GPT-2's tokenizer and keeps it in every checkpoint.
"$zoo" finetune "$work/ckpt" --train "$work/slice.txt" --task lm steps=2 eval_every=0 batch_size=2 block_size=32 \
  --run-dir "$work/ft" > /dev/null 2>&1
cmp "$work/hf/vocab.json" "$work/ft/checkpoints/last/tokenizer/vocab.json"
"$zoo" generate "$work/ft" --prompt "Hello world" --max-new-tokens 4 --greedy > "$work/gen.out" 2> /dev/null
grep -q "^Hello world" "$work/gen.out"

# Back to Hugging Face's layout, with the tokenizer and its ids.
"$zoo" export-hf "$work/ft" --out "$work/back" > /dev/null
cmp "$work/hf/merges.txt" "$work/back/merges.txt"
"$python" - "$work/back/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["eos_token_id"] == 50256 and c["bos_token_id"] == 50256, c
PY

# An objective that needs a token GPT-2's tokenizer lacks is refused by name.
fails "masked LM needs a mask token, and the tokenizer has none" \
  "$zoo" train bert-tiny --data "$work/slice.txt" tokenizer="$work/hf" model.vocab_size=50257 steps=1 --run-dir "$work/mlm"
test ! -e "$work/mlm"
echo "ok"
