#!/usr/bin/env bash
# End to end through the command line: train a tokenizer on a slice of the default corpus,
# encode and decode (ids and pieces), tokenize into token files; and the bad-input paths.
set -euo pipefail
zoo="$1"
corpus="$2"
source "$(dirname "$0")/lib.sh"

head -c 300000 "$corpus" > "$work/slice.txt"
"$zoo" tokenizer train --input "$work/slice.txt" --vocab-size 800 --model-type bpe --out "$work/tok"
test -s "$work/tok.model" && test -s "$work/tok.vocab"

text='Round trip: naïve café, 日本語, emoji 🙂.'
ids=$(printf '%s\n' "$text" | "$zoo" tokenizer encode --model "$work/tok")
back=$(printf '%s\n' "$ids" | "$zoo" tokenizer decode --model "$work/tok.model")
[[ "$back" == "$text" ]] || { echo "round trip changed the text: '$back'"; exit 1; }
pieces=$(printf '%s\n' "$text" | "$zoo" tokenizer encode --model "$work/tok" --pieces)
[[ "$pieces" == *"▁"* ]] || { echo "no word-boundary pieces in '$pieces'"; exit 1; }

"$zoo" data prepare --tokenizer "$work/tok" --data "$work/slice.txt" --out "$work/data" --val-fraction 0.1
test -s "$work/data/train.tokens" && test -s "$work/data/val.tokens"

# Bad input: clear errors, non-zero exits, nothing half-written.
fails "missing.txt: no such file or directory" "$zoo" tokenizer train --input "$work/missing.txt" --vocab-size 800 --out "$work/bad"
printf 'ok line\nbad \xff byte\n' > "$work/bad.txt"
fails "bad.txt:2: invalid UTF-8 at byte offset 12" "$zoo" tokenizer train --input "$work/bad.txt" --vocab-size 800 --out "$work/bad"
fails "bad.txt:2: invalid UTF-8 at byte offset 12" "$zoo" data prepare --tokenizer "$work/tok" --data "$work/bad.txt" --out "$work/baddata"
fails "is not a token id" "$zoo" tokenizer decode --model "$work/tok" <<<"12 x 7"
fails "not a SentencePiece model" "$zoo" tokenizer encode --model "$work/slice.txt" <<<"hi"
test ! -e "$work/bad.model" && test ! -e "$work/baddata/train.tokens"
echo "text pipeline: ok"
