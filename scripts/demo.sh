#!/usr/bin/env bash
# The README's main job: install what is missing, build, then train gpt-tiny on the default
# corpus, sample from it and export it.
#
# Today it runs the data half of that job, which exists: the default corpus, a tokenizer trained
# on it, and the token files training will read (in runs/demo/). Training, sampling and export
# come with the training and export issues.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
zoo=build/zoo
out=runs/demo
mkdir -p "$out"

"$zoo" info gpt-tiny
"$zoo" corpus
if [[ ! -f "$out/tokenizer.model" ]]; then
  "$zoo" tokenizer train --vocab-size 8192 --model-type unigram --out "$out/tokenizer"
fi
"$zoo" data prepare --tokenizer "$out/tokenizer" --out "$out/data" --val-fraction 0.05
echo "Sample of the tokenization:"
echo "Python is an easy to learn, powerful programming language." |
  "$zoo" tokenizer encode --model "$out/tokenizer" --pieces

echo
echo "zoo demo: data ready in $out/. Training gpt-tiny, sampling and export are coming with"
echo "the training issue; this script will run them when they land."
