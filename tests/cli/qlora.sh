#!/usr/bin/env bash
# QLoRA (#49): LoRA adapters trained on an int4 base, a LLaMA in transformers' layout quantized
# as it is imported. The loss falls over a few repeated batches; a stop and resume gives the
# uninterrupted run's losses; the adapters in PEFT's layout load with PEFT onto the dequantized
# base (export-hf of the quantized checkpoint) and merge to zoo's merged export, with its
# logits; the merged run quantizes again. What cannot take a quantized base says so.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
zoo="$1" corpus="$2" reference="$3" spm_reference="$4"
python="${ZOO_PYTHON:?the Python with the test references (ctest sets it)}" peft="$(dirname "$3")/peft_reference.py"

pretrained_inputs "$corpus" "$spm_reference"
hf_dir llama 2000 "$work/spm/llama-dir/tokenizer.model" "$work/spm/llama-dir/tokenizer_config.json"
"$zoo" import-hf "$work/llama-hf" --quantize int4 --out "$work/q4" > "$work/q4.out" 2> /dev/null
grep -qE "^quantized [0-9]+ linear layers and the token embedding to int4 \(groups of 32\): " "$work/q4.out"
"$zoo" export-hf "$work/q4" --out "$work/q4-hf" > /dev/null  # the dequantized base, PEFT's to load onto

head -c 1500 "$work/slice.txt" > "$work/few.txt"
qlora=(--train "$work/few.txt" --task lm eval_every=0 batch_size=2 block_size=32 lr=0.02 warmup_steps=0
       schedule=constant lora.rank=4 lora.alpha=8 lora.targets=all precision=bf16)
"$zoo" finetune "$work/q4" "${qlora[@]}" steps=16 --run-dir "$work/qlora" > "$work/qlora.out" 2>&1
grep -q "lora: rank 4, alpha 8, dropout 0.05 on [0-9]* projections (all); the base stays frozen" "$work/qlora.out"
# Over ~12 blocks seen again and again, the adapters alone bring the loss down.
"$python" - "$work/qlora/metrics.jsonl" <<'PY'
import json, sys
loss = [r["loss"] for r in map(json.loads, open(sys.argv[1])) if r.get("split") == "train"]
assert len(loss) == 16 and sum(loss[-4:]) / 4 < sum(loss[:4]) / 4 - 0.3, f"QLoRA did not fit the batches: {loss}"
PY
"$zoo" finetune "$work/q4" "${qlora[@]}" steps=8 --run-dir "$work/qlora-split" > /dev/null 2>&1
"$zoo" train --resume "$work/qlora-split" steps=16 > "$work/resume.out" 2>&1
grep -q "resumed from .*step-8 at step 8" "$work/resume.out"
same_losses "$work/qlora" "$work/qlora-split" 16

# PEFT onto the dequantized base: the same merged weights and logits as zoo's merged export.
"$zoo" export-hf "$work/qlora" --adapters-only --out "$work/qlora-peft" > /dev/null
"$zoo" export-hf "$work/qlora" --out "$work/qlora-merged" > "$work/merged.out"
grep -q "^dequantizing the weights of .* (int4 (groups of 32))$" "$work/merged.out"
"$python" "$peft" check "$work/q4-hf" "$work/qlora-peft" "$work/qlora-merged" > /dev/null
# The run generates with its adapters on the packed base; merged and quantized again, it still
# generates.
"$zoo" generate "$work/qlora" --prompt "The module" --greedy --max-new-tokens 6 > "$work/qlora.gen" 2> /dev/null
[[ "$(cat "$work/qlora.gen")" == "The module"* ]] || { echo "QLoRA generate: $(cat "$work/qlora.gen")"; exit 1; }
"$zoo" quantize "$work/qlora" --to int8 --out "$work/qlora-q8" > /dev/null
"$zoo" generate "$work/qlora-q8" --prompt "The module" --greedy --max-new-tokens 6 > /dev/null 2>&1

# Refused by name: all the weights trained, PEFT adapters imported onto it, adapters on a QLoRA run.
fails "q4: a quantized checkpoint \(int4 \(groups of 32\)\); training all its weights needs float weights" \
  "$zoo" finetune "$work/q4" --train "$work/few.txt" --task lm steps=1 --run-dir "$work/full"
fails "q4: a quantized checkpoint \(int4 \(groups of 32\)\); importing PEFT adapters onto it needs float weights" \
  "$zoo" import-hf "$work/qlora-peft" --base "$work/q4" --out "$work/imported"
test ! -e "$work/full" && test ! -e "$work/imported"
echo "qlora: ok"
