#!/usr/bin/env bash
# zoo import-hf, export-hf and export end to end: a GPT-2 directory in Hugging Face's layout
# (in transformers' layout) becomes a zoo checkpoint that generates and fine-tunes like any
# other, and exports back to files the reference forward reads to the same logits; so do Qwen2
# and LLaMA directories. `zoo export` writes TorchScript that generates, in plain Python with its
# own tokenizer, what zoo generates, from float or quantized weights.
set -euo pipefail
zoo="$1"
corpus="$2"
reference="$3"
python="${ZOO_PYTHON:?the Python with the test references (ctest sets it)}"
source "$(dirname "$0")/lib.sh"
generate_py="$(dirname "$0")/../../scripts/torchscript_generate.py"

slice "$corpus"
"$zoo" tokenizer train --input "$work/slice.txt" --vocab-size 2048 --out "$work/tok" > /dev/null 2>&1
ZOO_HF_VOCAB=2048 "$python" "$reference" "$work/ref.pt" write gpt2 "$work/hf"

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
ZOO_HF_VOCAB=2048 "$python" "$reference" "$work/back.pt" check gpt2 "$work/back"
"$python" - "$work/ref.pt" "$work/back.pt" <<'PY'
import sys, torch
a, b = torch.jit.load(sys.argv[1]), torch.jit.load(sys.argv[2])
diff = (a.logits - b.logits).abs().max().item()
assert diff < 1e-6, f"exported logits differ by {diff}"
PY
"$zoo" export-hf "$work/ft" --out "$work/ft-hf" > /dev/null
test -s "$work/ft-hf/model.safetensors"

# TorchScript: GPT-2 and T5 exports generate in PyTorch 2.15 exactly what zoo generates.
"$zoo" export "$work/ckpt" --out "$work/gpt.pt" > "$work/export.out"
grep -q "methods: forward, generate; its tokenizer inside" "$work/export.out"
same_text() {  # same_text CHECKPOINT EXPORT PROMPT [DTYPE]
  local want got
  want=$("$zoo" generate "$1" --prompt "$3" --max-new-tokens 12 --greedy --dtype "${4:-fp32}" 2>/dev/null)
  got=$("$python" "$generate_py" "$2" --prompt "$3" --max-new-tokens 12 --greedy)
  [[ -n "$want" && "$want" == "$got" ]] || { echo "zoo: '$want', exported in python: '$got'"; exit 1; }
}
same_text "$work/ckpt" "$work/gpt.pt" "The module"
ZOO_HF_VOCAB=2048 "$python" "$reference" "$work/t5-ref.pt" write t5 "$work/t5-hf"
"$zoo" import-hf "$work/t5-hf" --out "$work/t5" --tokenizer "$work/tok.model" > /dev/null 2>&1
"$zoo" export "$work/t5" --out "$work/t5.pt" | has "methods: forward, encode, decode, generate"
same_text "$work/t5" "$work/t5.pt" "Return the list"
# Quantized checkpoints export packed (#49): the integers and scales inside, dequantized by the
# export's own products; each generates in PyTorch what zoo generates from the checkpoint.
"$zoo" quantize "$work/ckpt" --to int4 --out "$work/ckpt-q4" > /dev/null
"$zoo" export "$work/ckpt-q4" --out "$work/gpt-q4.pt" | has "fp32 parameters, the weights int4 (groups of 32); methods"
same_text "$work/ckpt-q4" "$work/gpt-q4.pt" "The module"
"$zoo" quantize "$work/t5" --to int8 --out "$work/t5-q8" > /dev/null
"$zoo" export "$work/t5-q8" --out "$work/t5-q8.pt" | has "the weights int8; methods: forward, encode, decode, generate"
same_text "$work/t5-q8" "$work/t5-q8.pt" "Return the list"

# The LLaMA family: Qwen2 (q/k/v biases) and LLaMA (3.1's rope scaling) import, generate and
# export back to the reference's logits; their TorchScript exports generate what zoo generates.
for flavor in qwen2 llama; do
  ZOO_HF_VOCAB=2048 "$python" "$reference" "$work/$flavor-ref.pt" write $flavor "$work/$flavor-hf"
  "$zoo" import-hf "$work/$flavor-hf" --out "$work/$flavor" --tokenizer "$work/tok.model" > /dev/null 2>&1
  "$zoo" generate "$work/$flavor" --prompt "The module" --max-new-tokens 5 --seed 1 > /dev/null 2>&1
  "$zoo" export-hf "$work/$flavor" --out "$work/$flavor-back" > /dev/null
  ZOO_HF_VOCAB=2048 "$python" "$reference" "$work/$flavor-back.pt" check $flavor "$work/$flavor-back"
  "$python" - "$work/$flavor-ref.pt" "$work/$flavor-back.pt" <<'PY'
import sys, torch
a, b = torch.jit.load(sys.argv[1]), torch.jit.load(sys.argv[2])
diff = (a.logits - b.logits).abs().max().item()
assert diff < 1e-6, f"exported logits differ by {diff}"
PY
  "$zoo" export "$work/$flavor" --out "$work/$flavor.pt" > /dev/null
  same_text "$work/$flavor" "$work/$flavor.pt" "The module"
  # bf16 exports hold bf16 weights (RMSNorm, rope and biases included) and generate.
  "$zoo" export "$work/$flavor" --dtype bf16 --out "$work/$flavor-bf16.pt" | has " bf16 parameters"
  "$python" -c 'import sys, torch; m = torch.jit.load(sys.argv[1]); assert {p.dtype for p in m.parameters()} == {torch.bfloat16}' "$work/$flavor-bf16.pt"
  "$python" "$generate_py" "$work/$flavor-bf16.pt" --prompt "The module" --max-new-tokens 4 --greedy > /dev/null
done
# bf16 token for token: on random weights the top logits lie within bf16's rounding of each other
# and any two summation orders may pick differently, so this model first learns its text (a
# sentence repeated); then zoo generate --dtype bf16 and the bf16 export continue it alike.
for i in $(seq 1 200); do echo "The module reads every file once and writes the index beside it."; done > "$work/repeat.txt"
"$zoo" train gpt-tiny model.vocab_size=2048 model.d_model=64 model.n_layers=2 model.n_heads=2 model.d_ff=128   steps=80 lr=0.01 warmup_steps=5 batch_size=4 block_size=32 eval_every=0 tokenizer="$work/tok.model"   --data "$work/repeat.txt" --run-dir "$work/learned" > /dev/null 2>&1
"$zoo" export "$work/learned" --dtype bf16 --out "$work/learned-bf16.pt" > /dev/null
same_text "$work/learned" "$work/learned-bf16.pt" "The module reads" bf16
# A bf16 Hugging Face model stays bf16: the checkpoint stores bf16 (half the bytes), generate and
# the exports run in bf16 unless told otherwise, and fine-tuning trains float32 master weights.
ZOO_HF_VOCAB=2048 "$python" "$reference" "$work/lbf-ref.pt" write llama "$work/lbf-hf" --dtype bf16
"$zoo" import-hf "$work/lbf-hf" --out "$work/lbf" --tokenizer "$work/tok.model" 2> /dev/null | has "parameters in bf16)"
"$zoo" import-hf "$work/lbf-hf" --out "$work/lbf32" --dtype fp32 --tokenizer "$work/tok.model" 2> /dev/null |
  grep -q "parameters in fp32)"
(( $(stat -c %s "$work/lbf/model.pt") < $(stat -c %s "$work/lbf32/model.pt") * 3 / 4 ))
auto=$("$zoo" generate "$work/lbf" --prompt "The module" --max-new-tokens 8 --greedy 2> /dev/null)
bf16=$("$zoo" generate "$work/lbf32" --prompt "The module" --max-new-tokens 8 --greedy --dtype bf16 2> /dev/null)
[[ -n "$auto" && "$auto" == "$bf16" ]] || { echo "auto: '$auto', --dtype bf16: '$bf16'"; exit 1; }
# Quantized as it is imported (#49): the linear layers int8, the rest still bf16; it generates
# what quantizing the bf16 checkpoint at load generates.
"$zoo" import-hf "$work/lbf-hf" --out "$work/lbf-q8" --quantize int8 --tokenizer "$work/tok.model" > "$work/lbf-q8.out" 2> /dev/null
grep -q "^quantized [0-9]* linear layers and the token embedding to int8: " "$work/lbf-q8.out"
"$zoo" info "$work/lbf-q8" > "$work/lbf-q8.info"
grep -q "bytes per parameter (int8; the rest in bf16, float32)$" "$work/lbf-q8.info" || { cat "$work/lbf-q8.info"; exit 1; }
q8=$("$zoo" generate "$work/lbf-q8" --prompt "The module" --max-new-tokens 8 --greedy 2> /dev/null)
at_load=$("$zoo" generate "$work/lbf" --prompt "The module" --max-new-tokens 8 --greedy --quantize int8 2> /dev/null)
[[ -n "$q8" && "$q8" == "$at_load" ]] || { echo "import-hf --quantize int8: '$q8', at load: '$at_load'"; exit 1; }
"$zoo" export "$work/lbf" --out "$work/lbf.pt" | has " bf16 parameters"
"$zoo" export "$work/lbf" --dtype fp32 --out "$work/lbf32.pt" | has " fp32 parameters"
"$zoo" export-hf "$work/lbf" --out "$work/lbf-back" > /dev/null
grep -q '"torch_dtype": "bfloat16"' "$work/lbf-back/config.json"
ZOO_HF_VOCAB=2048 "$python" "$reference" "$work/lbf-back.pt" check llama "$work/lbf-back"
"$python" - "$work/lbf-ref.pt" "$work/lbf-back.pt" "$work/lbf-back/model.safetensors" <<'PY'
import json, struct, sys, torch
a, b = torch.jit.load(sys.argv[1]), torch.jit.load(sys.argv[2])
diff = (a.logits - b.logits).abs().max().item()
assert diff < 1e-6, f"the bf16 round trip changed the logits by {diff}"
with open(sys.argv[3], "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
assert {e["dtype"] for k, e in header.items() if k != "__metadata__"} == {"BF16"}, header
PY
"$zoo" finetune "$work/lbf" --train "$work/slice.txt" --task lm steps=2 eval_every=0 batch_size=2 block_size=32 \
  --run-dir "$work/lbf-ft" > /dev/null 2>&1
"$zoo" export "$work/lbf-ft" --out "$work/lbf-ft.pt" | has " fp32 parameters"
fails "--dtype: fp16 not in {auto,fp32,bf16}" "$zoo" generate "$work/ckpt" --prompt x --dtype fp16
fails "--dtype: fp16 not in {auto,fp32,bf16}" "$zoo" import-hf "$work/lbf-hf" --out "$work/x" --dtype fp16
fails "no such checkpoint or run directory" "$zoo" export "$work/nothing" --out "$work/x.pt"
head -c 5000 "$work/gpt.pt" > "$work/cut.pt"
fails "cut.pt: not a TorchScript archive" "$python" "$generate_py" "$work/cut.pt" --prompt "x"
test ! -e "$work/x.pt"

fails "config.json: missing \(not a Hugging Face model directory\?\)" "$zoo" import-hf "$work/nothing" --out "$work/x"
printf '{"model_type": "gpt2", "vocab_size": 512}' > "$work/hf/config.json"
fails "config.json: missing key 'n_embd'" "$zoo" import-hf "$work/hf" --out "$work/x"
head -c 100 "$work/hf/model.safetensors" > "$work/cut.safetensors" && mv "$work/cut.safetensors" "$work/hf/model.safetensors"
test ! -e "$work/x"
echo "interop commands: ok"
