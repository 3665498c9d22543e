#!/usr/bin/env bash
# Peak memory of `zoo data prepare` on generated corpora of growing size: tokenizing streams, so
# the peak must stay flat whatever the corpus size. Writes the corpora and token files under a
# scratch folder (removed at the end) and prints one line per size.
# Usage: scripts/load_test.sh [SIZES_MB...]   (default: 100 1000 3000)
set -euo pipefail
cd "$(dirname "$0")/.."
zoo=build/zoo
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(100 1000 3000)
work=$(mktemp -d "${TMPDIR:-/tmp}/zoo-load.XXXXXX")
trap 'rm -rf "$work"' EXIT
corpus=$("$zoo" corpus 2>/dev/null | sed -n 's/^wrote \([^ ]*\) .*/\1/p')
[[ -n "$corpus" ]] || corpus="${ZOO_DATA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/zoo}/python-docs.txt"
head -c 2000000 "$corpus" > "$work/slice.txt"
"$zoo" tokenizer train --input "$work/slice.txt" --vocab-size 8192 --out "$work/tok" > /dev/null 2>&1
echo "corpus_mb tokens peak_rss_mb seconds"
for mb in "${sizes[@]}"; do
  # The default corpus repeated up to the size (the text does not matter, its amount does).
  : > "$work/big.txt"
  while (( $(stat -c %s "$work/big.txt") < mb * 1000000 )); do cat "$corpus" >> "$work/big.txt"; done
  truncate -s $((mb * 1000000)) "$work/big.txt"
  start=$(date +%s.%N)
  /usr/bin/time -f "%M" -o "$work/rss" "$zoo" data prepare --tokenizer "$work/tok" --data "$work/big.txt" \
    --out "$work/data-$mb" > "$work/out" 2>/dev/null
  seconds=$(echo "$(date +%s.%N) - $start" | bc)
  tokens=$(sed -n 's/.*(\([0-9]*\) documents, \([0-9]*\) tokens) and.*/\2/p' "$work/out")
  echo "$mb $tokens $(( $(cat "$work/rss") / 1024 )) $(printf '%.0f' "$seconds")"
  rm -rf "$work/data-$mb"
done
