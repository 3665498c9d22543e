#!/usr/bin/env bash
# zoo import-hf and export-hf end to end: a GPT-2 directory in Hugging Face's layout (written
# by python3-torch) becomes a zoo checkpoint that generates and fine-tunes like any other, and
# exports back to files the reference forward reads to the same logits.
set -euo pipefail
zoo="$1"
corpus="$2"
reference="$3"
python=/usr/bin/python3
source "$(dirname "$0")/lib.sh"

slice "$corpus"
"$zoo" tokenizer train --input "$work/slice.txt" --vocab-size 512 --out "$work/tok" > /dev/null 2>&1
ZOO_HF_VOCAB=512 "$python" "$reference" "$work/ref.pt" write gpt2 "$work/hf"

"$zoo" import-hf "$work/hf" --out "$work/ckpt" --tokenizer "$work/tok.model" > "$work/import.out" 2> "$work/import.err"
grep -q "wrote $work/ckpt" "$work/import.out"
grep -q "ignored (tied copies, mask buffers): 2 tensors" "$work/import.err"
for f in model.pt config.yaml tokenizer.model state.json; do test -s "$work/ckpt/$f"; done

# A normal checkpoint: generate and fine-tune from it.
"$zoo" generate "$work/ckpt" --prompt "The module" --max-new-tokens 5 --seed 1 > /dev/null 2>&1
"$zoo" finetune "$work/ckpt" --train "$work/slice.txt" --task lm steps=2 eval_every=0 batch_size=2 block_size=32 \
  --run-dir "$work/ft" > /dev/null 2>&1
test -L "$work/ft/checkpoints/last"

# Back out to Hugging Face's layout: the reference forward reads it to the same logits.
"$zoo" export-hf "$work/ckpt" --out "$work/back" > /dev/null
ZOO_HF_VOCAB=512 "$python" "$reference" "$work/back.pt" check gpt2 "$work/back"
"$python" - "$work/ref.pt" "$work/back.pt" <<'PY'
import sys, torch
a, b = torch.jit.load(sys.argv[1]), torch.jit.load(sys.argv[2])
diff = (a.logits - b.logits).abs().max().item()
assert diff < 1e-6, f"exported logits differ by {diff}"
PY
"$zoo" export-hf "$work/ft" --out "$work/ft-hf" > /dev/null
test -s "$work/ft-hf/model.safetensors"

fails "config.json: missing \(not a Hugging Face model directory\?\)" "$zoo" import-hf "$work/nothing" --out "$work/x"
printf '{"model_type": "gpt2", "vocab_size": 512}' > "$work/hf/config.json"
fails "config.json: missing key 'n_embd'" "$zoo" import-hf "$work/hf" --out "$work/x"
head -c 100 "$work/hf/model.safetensors" > "$work/cut.safetensors" && mv "$work/cut.safetensors" "$work/hf/model.safetensors"
test ! -e "$work/x"
echo "interop commands: ok"
