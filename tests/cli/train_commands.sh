#!/usr/bin/env bash
# End to end through the command line, for each family: zoo train (with overrides), resume,
# a SIGINT that saves and exits cleanly, zoo eval, zoo generate, zoo plot and zoo finetune; and
# the bad-input paths (config, override, checkpoint).
set -euo pipefail
zoo="$1"
corpus="$2"
source "$(dirname "$0")/lib.sh"

slice "$corpus"
"$zoo" tokenizer train --input "$work/slice.txt" --vocab-size 512 --out "$work/tok" > /dev/null
tiny="model.vocab_size=512 model.d_model=32 model.n_layers=1 model.n_heads=2 model.d_ff=64"
common="batch_size=4 block_size=32 eval_batches=2 log_every=2 tokenizer=$work/tok.model"

# --- The demo's run config: no loss spike at the peak rate ----------------------------------
# With AdamW's beta2 at 0.95 the demo's loss jumped to 9.8 at step 30, right after a 30-step
# warm-up (above a uniform guess's 9.0 over 8192 tokens); with 0.99 it still jumped to 10.1 at
# step 35 on an Intel AVX-512F CPU in fp32 (issue #52). The recipe now warms up over 100 steps:
# these 110 steps reach the peak rate and stay there for 10.
"$zoo" train "$(dirname "$0")/../../configs/runs/demo.yaml" steps=110 log_every=1 eval_every=0 --data "$corpus" \
  --run-dir "$work/demo" > /dev/null 2>&1
"${ZOO_PYTHON:?}" - "$work/demo/metrics.jsonl" <<'PY'
import json, sys
loss = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1])) if r.get("split") == "train"}
# A spike: a step a whole nat above the lowest loss so far (beta2 0.95: 9.77 against 6.90).
for s in range(21, 111):
    best = min(loss[t] for t in range(1, s))
    assert loss[s] < best + 1.0, f"loss spike at step {s}: {loss[s]:.3f} after {best:.3f}"
PY

# --- GPT: train, resume for more steps, eval, generate, plot --------------------------------
# shellcheck disable=SC2086
"$zoo" train gpt-tiny $tiny $common steps=4 eval_every=2 --data "$work/slice.txt" --run-dir "$work/gpt" > "$work/gpt.out" 2> "$work/gpt.err"
grep -q "finished at step 4" "$work/gpt.out"
grep -q "step 4/4 | loss" "$work/gpt.err"   # plain progress lines when not a terminal
test "$(grep -c '"split":"train"' "$work/gpt/metrics.jsonl")" -eq 4
test "$(grep -c '"split":"val"' "$work/gpt/metrics.jsonl")" -eq 2
test -L "$work/gpt/checkpoints/last" && test -L "$work/gpt/checkpoints/best"
for f in model.pt optimizer.pt config.yaml run.yaml tokenizer.model state.json; do
  test -s "$work/gpt/checkpoints/step-4/$f" || { echo "checkpoint lacks $f"; exit 1; }
done
"$zoo" train --resume "$work/gpt" steps=6 > "$work/resume.out" 2> "$work/resume.err"
grep -q "^steps: 6$" "$work/gpt/run.yaml"   # the resumed run's overrides hold for the next resume
grep -q "resumed from .*step-4 at step 4" "$work/resume.err"
grep -q "finished at step 6" "$work/resume.out"
test "$(grep -c '"split":"train"' "$work/gpt/metrics.jsonl")" -eq 6
"$zoo" eval "$work/gpt" --data "$work/slice.txt" --max-batches 3 > "$work/eval.out" 2>/dev/null
grep -qE "^loss [0-9]+\.[0-9]+$" "$work/eval.out" && grep -qE "^perplexity [0-9.]+$" "$work/eval.out"
sample=$("$zoo" generate "$work/gpt" --prompt "The module" --max-new-tokens 8 --seed 1 2>/dev/null)
[[ "$sample" == "The module"* ]] || { echo "generate did not continue the prompt: $sample"; exit 1; }
again=$("$zoo" generate "$work/gpt" --prompt "The module" --max-new-tokens 8 --seed 1 2>/dev/null)
[[ "$sample" == "$again" ]] || { echo "seeded sampling differs: '$sample' vs '$again'"; exit 1; }
"$zoo" generate "$work/gpt" --prompt "The" --greedy --max-new-tokens 4 --repetition-penalty 1.3 --top-p 0.9 --stop "." > /dev/null 2>&1
# Weight-only int8 and int4 at load (#49): the line saying what was quantized, the prompt continued.
"$zoo" generate "$work/gpt" --prompt "The module" --greedy --max-new-tokens 6 --quantize int8 > "$work/q8.out" 2> "$work/q8.err"
grep -qE "^quantized [0-9]+ linear layers and the token embedding to int8: [0-9.]+ MiB of weights to [0-9.]+ MiB$" "$work/q8.err" || { cat "$work/q8.err"; exit 1; }
[[ "$(cat "$work/q8.out")" == "The module"* ]] || { echo "int8 generate did not continue the prompt"; exit 1; }
"$zoo" generate "$work/gpt" --prompt "The" --max-new-tokens 4 --quantize int4 --keep-embeddings > /dev/null 2> "$work/q4.err"
grep -q "linear layers to int4 (groups of 32)" "$work/q4.err"  # a file, not a pipe: grep -q's early exit is a SIGPIPE
fails "token_embedding.weight: int4 group size 64 does not divide the weight's 32 inputs \(512 x 32\)" \
  "$zoo" generate "$work/gpt" --prompt hi --quantize int4 --group-size 64
fails "group-size: 48 not in" "$zoo" generate "$work/gpt" --prompt hi --quantize int4 --group-size 48
fails "quantize: int3 not in" "$zoo" generate "$work/gpt" --prompt hi --quantize int3
# zoo quantize: a checkpoint that generate, eval, info and export-hf take, computing what
# --quantize at load computes; what needs float weights refuses it by name.
"$zoo" quantize "$work/gpt" --to int4 --out "$work/gpt-q4" > "$work/qc.out"
grep -q "^wrote $work/gpt-q4 (gpt, int4 (groups of 32), the other tensors in fp32)$" "$work/qc.out" || { cat "$work/qc.out"; exit 1; }
"$zoo" info "$work/gpt-q4" > "$work/qc.info"
grep -qE "^weights: [0-9.]+ MiB in model.pt, [0-9.]+ bytes per parameter \(int4 \(groups of 32\); the rest in float32\)$" "$work/qc.info" || { cat "$work/qc.info"; exit 1; }
"$zoo" generate "$work/gpt-q4" --prompt "The module" --greedy --max-new-tokens 6 > "$work/qc.gen" 2> /dev/null
"$zoo" generate "$work/gpt" --prompt "The module" --greedy --max-new-tokens 6 --quantize int4 > "$work/q4.gen" 2> /dev/null
cmp "$work/qc.gen" "$work/q4.gen"
"$zoo" eval "$work/gpt-q4" --data "$work/slice.txt" --max-batches 2 > "$work/qc.eval" 2> /dev/null
"$zoo" eval "$work/gpt" --data "$work/slice.txt" --max-batches 2 --quantize int4 > "$work/q4.eval" 2> /dev/null
cmp "$work/qc.eval" "$work/q4.eval"
"$zoo" export-hf "$work/gpt-q4" --out "$work/gpt-q4-hf" > "$work/qc.hf"
grep -q "^dequantizing the weights of $work/gpt-q4 (int4 (groups of 32))$" "$work/qc.hf" && test -s "$work/gpt-q4-hf/model.safetensors"
fails "quantized already \(int4 \(groups of 32\)\)" "$zoo" generate "$work/gpt-q4" --prompt hi --quantize int8
fails "gpt-q4: a quantized checkpoint \(int4 \(groups of 32\)\); training all its weights needs float weights" \
  "$zoo" finetune "$work/gpt-q4" --train "$work/slice.txt" --task lm steps=1 --run-dir "$work/ft-q4"
fails "slice.txt: exists and is a file" "$zoo" quantize "$work/gpt" --to int8 --out "$work/slice.txt"
fails "to is required" "$zoo" quantize "$work/gpt" --out "$work/gpt-q8"
test ! -e "$work/gpt-q8" && test ! -e "$work/ft-q4"
# scripts/quantized_quality.sh (#49's quality bounds on a trained run) on this run: its table, and
# greedy text from the packed weights against the dequantized float32 model's.
ZOO="$zoo" bash "$(dirname "$0")/../../scripts/quantized_quality.sh" "$work/gpt" "The module" > "$work/quality.out"
grep -qE "^int8 +[0-9.]+ +[-+][0-9.]+% \(within 1%\)$" "$work/quality.out" || { cat "$work/quality.out"; exit 1; }
grep -qE "^int4, groups of 32 +[0-9.]+ +[-+][0-9.]+% \(within 5%\)$" "$work/quality.out"
grep -qE "^int4, groups of 64 +error: .*group size 64 does not divide the weight's 32 inputs" "$work/quality.out"
[[ $(grep -c "^int[48] greedy, \"The module\": the dequantized float32 model's text" "$work/quality.out") -eq 2 ]]
"$zoo" plot "$work/gpt" > /dev/null
[[ "$(head -c 8 "$work/gpt/curves.png" | od -An -tx1 | tr -d ' \n')" == "89504e470d0a1a0a" ]] || { echo "curves.png is not a PNG"; exit 1; }

# --- SIGINT: finish the step, save, exit 0; the run resumes from there ----------------------
# shellcheck disable=SC2086
"$zoo" train gpt-tiny $tiny $common steps=100000 eval_every=0 --data "$work/slice.txt" --run-dir "$work/sig" > "$work/sig.out" 2> "$work/sig.err" &
pid=$!
for _ in $(seq 1 600); do
  [[ -f "$work/sig/metrics.jsonl" ]] && [[ $(wc -l < "$work/sig/metrics.jsonl") -ge 3 ]] && break
  sleep 0.1
done
kill -INT "$pid"
status=0; wait "$pid" || status=$?
[[ $status -eq 0 ]] || { echo "SIGINT: exit $status"; cat "$work/sig.err"; exit 1; }
grep -q "stopped at step [0-9]* by a signal; saved" "$work/sig.err"
step=$(sed -n 's/^  "step": *\([0-9]*\).*/\1/p' "$work/sig/checkpoints/last/state.json")
[[ $step -ge 3 ]] || { echo "saved step $step"; exit 1; }

# --- BERT: masked LM, fill [MASK]; fine-tune a classifier on CSV ---------------------------
# shellcheck disable=SC2086
"$zoo" train bert-tiny $tiny $common steps=3 eval_every=0 --data "$work/slice.txt" --run-dir "$work/bert" > /dev/null 2>&1
"$zoo" generate "$work/bert" --prompt "The [MASK] is a function." --show 3 2>/dev/null | has "\[MASK\] at token"
{
  echo "text,label"
  for i in $(seq 1 40); do echo "\"item $i is good\",pos"; echo "\"item $i is bad\",neg"; done
} > "$work/cls.csv"
"$zoo" finetune "$work/bert" --train "$work/cls.csv" --val "$work/cls.csv" steps=3 eval_every=0 batch_size=8 \
  --run-dir "$work/bert-cls" > "$work/cls.out" 2> "$work/cls.err"
grep -q "newly initialized: classifier.weight, classifier.bias" "$work/cls.err"
grep -q "final: step 3" "$work/cls.out"
"$zoo" eval "$work/bert-cls" --data "$work/cls.csv" 2>/dev/null | has "^accuracy "
"$zoo" generate "$work/bert-cls" --prompt "item 3 is good" 2>/dev/null | has -E "^  (pos|neg)"

# --- T5: span corruption; fine-tune seq2seq on JSONL; generate with beams ------------------
# shellcheck disable=SC2086
"$zoo" train t5-tiny $tiny model.head_dim=16 $common steps=3 eval_every=0 --data "$work/slice.txt" --run-dir "$work/t5" > /dev/null 2>&1
for i in $(seq 1 20); do echo "{\"source\": \"copy $i\", \"target\": \"$i\"}"; done > "$work/pairs.jsonl"
"$zoo" finetune "$work/t5" --train "$work/pairs.jsonl" --val "$work/pairs.jsonl" steps=2 eval_every=0 eval_batches=1 \
  --run-dir "$work/t5-s2s" > "$work/s2s.out" 2>/dev/null
grep -q "exact match" "$work/s2s.out"
"$zoo" generate "$work/t5-s2s" --prompt "copy 3" --num-beams 2 --max-new-tokens 4 > /dev/null 2>&1
"$zoo" eval "$work/t5-s2s" --data "$work/pairs.jsonl" 2>/dev/null | has "^exact_match "

# --- GPT fine-tuning on custom text -------------------------------------------------------
"$zoo" finetune "$work/gpt" --train "$work/slice.txt" --task lm steps=2 eval_every=0 batch_size=2 \
  --run-dir "$work/gpt-lm" > /dev/null 2>&1
test -L "$work/gpt-lm/checkpoints/last"

# --- Bad input -----------------------------------------------------------------------------
fails "unknown key 'stpes' \(did you mean 'steps'\?\)" "$zoo" train gpt-tiny stpes=3 --run-dir "$work/bad"
fails "override 'model.n_heads=3': n_heads \(3\) must divide d_model" "$zoo" train gpt-tiny model.n_heads=3 --run-dir "$work/bad"
printf 'model: gpt-tiny\nsteps: lots\n' > "$work/bad.yaml"
fails "bad.yaml:2: steps: expected an integer, got 'lots'" "$zoo" train "$work/bad.yaml" --run-dir "$work/bad"
fails "already holds a run: --resume" "$zoo" train gpt-tiny --run-dir "$work/gpt"
fails "nothing to resume" "$zoo" train --resume "$work/missing-run"
fails "override .model=bert-tiny.: objective: causal_lm needs a gpt model" "$zoo" train --resume "$work/gpt" "model=bert-tiny"
cp -r "$work/gpt/checkpoints/step-6" "$work/broken"
head -c 1000 "$work/gpt/checkpoints/step-6/model.pt" > "$work/broken/model.pt"
fails "broken/model.pt: cannot read weights \(truncated or corrupt\)" "$zoo" generate "$work/broken" --prompt hi
printf 'nonsense: [\n' > "$work/broken/config.yaml"
fails "broken/config.yaml:[0-9]+: malformed YAML" "$zoo" eval "$work/broken" --data "$work/slice.txt"
fails "no such checkpoint or run directory" "$zoo" generate "$work/nowhere" --prompt hi
test ! -e "$work/bad"
echo "train commands: ok"
