#!/usr/bin/env bash
# #49's quality figures on a model zoo trained: the held-out loss of its weights quantized at
# load (int8; int4 in groups of 32, 64 and 128) against float32's, and whether quantized greedy
# decoding gives the text of the same weights dequantized into a float32 model (zoo quantize,
# export-hf, import-hf), naming the first word where they part. Exits 1 past the issue's bounds:
# int8 within 1% of float32's loss, int4 (groups of 32) within 5%.
#
#   scripts/quantized_quality.sh RUN [PROMPT ...]
#
# RUN is a run directory of a causal language model (zoo train); its validation tokens
# (RUN/data) are the held-out text. The recipe behind docs/performance.md's figures (32.7M
# parameters, 800 steps, about 15 minutes on one core):
#   build/zoo train runs/demo model.d_model=512 model.n_layers=9 model.n_heads=8 model.d_ff=2048 \
#     steps=800 lr=6e-4 eval_every=200 --run-dir runs/quality
set -euo pipefail
zoo=$(realpath -m "${ZOO:-$(dirname "$0")/../build/zoo}")  # tests give their build's
run=$(realpath -m "${1:?usage: scripts/quantized_quality.sh RUN [PROMPT ...]}")
shift
prompts=("$@")
[[ ${#prompts[@]} -gt 0 ]] || prompts=("The Python interpreter" "To create a list of" "A dictionary maps")
[[ -d "$run/data" ]] || { echo "quantized_quality: $run/data: no token directory (a run of zoo train)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

loss_of() {  # loss_of [EVAL OPTIONS...]: the validation loss zoo eval prints, or its error
  local out
  if out=$("$zoo" eval "$run" --data "$run/data" "$@" 2> "$work/eval.err"); then
    sed -n 's/^loss \([0-9.]*\)$/\1/p' <<< "$out"
  else
    echo "error: $(tail -1 "$work/eval.err")"
  fi
}
fp32=$(loss_of)
[[ "$fp32" =~ ^[0-9.]+$ ]] || { echo "quantized_quality: zoo eval $run: ${fp32:-no loss}" >&2; exit 1; }
printf '%-22s %8s %9s\n' weights "val loss" "vs fp32"
printf '%-22s %8s %9s\n' fp32 "$fp32" ""
failed=0
for kind in int8 int4:32 int4:64 int4:128; do
  format=${kind%%:*} group=${kind#*:} label=$format
  if [[ "$group" == "$kind" ]]; then group=32; else label="$format, groups of $group"; fi
  loss=$(loss_of --quantize "$format" --group-size "$group")
  if [[ ! "$loss" =~ ^[0-9.]+$ ]]; then  # a group size the model's widths do not take
    printf '%-22s %s\n' "$label" "$loss"
    [[ "$kind" == int8 || "$kind" == int4:32 ]] && failed=1
    continue
  fi
  change=$(awk -v q="$loss" -v f="$fp32" 'BEGIN { printf "%+.2f%%", 100 * (q - f) / f }')
  case "$kind" in int8) bound=1 ;; int4:32) bound=5 ;; *) bound="" ;; esac
  verdict=""
  if [[ -n "$bound" ]]; then
    if awk -v q="$loss" -v f="$fp32" -v b="$bound" 'BEGIN { exit !((q - f) / f <= b / 100) }'; then
      verdict="(within ${bound}%)"
    else
      verdict="(past ${bound}%)"; failed=1
    fi
  fi
  printf '%-22s %8s %9s %s\n' "$label" "$loss" "$change" "$verdict"
done

# Greedy decoding from the packed weights against the same weights dequantized into float32.
tokenizer="$run/tokenizer.model"
for format in int8 int4; do
  "$zoo" quantize "$run" --to "$format" --out "$work/$format" > /dev/null
  "$zoo" export-hf "$work/$format" --out "$work/$format-hf" > /dev/null
  "$zoo" import-hf "$work/$format-hf" --out "$work/$format-float" --tokenizer "$tokenizer" > /dev/null 2>&1
  for prompt in "${prompts[@]}"; do
    packed=$("$zoo" generate "$work/$format" --prompt "$prompt" --greedy --max-new-tokens 64 2> /dev/null)
    float=$("$zoo" generate "$work/$format-float" --prompt "$prompt" --greedy --max-new-tokens 64 2> /dev/null)
    read -ra a <<< "$packed"
    read -ra b <<< "$float"
    same=0
    while [[ $same -lt ${#a[@]} && $same -lt ${#b[@]} && "${a[$same]}" == "${b[$same]}" ]]; do same=$((same + 1)); done
    if [[ $same -eq ${#a[@]} && $same -eq ${#b[@]} ]]; then
      echo "$format greedy, \"$prompt\": the dequantized float32 model's text (${#a[@]} words)"
    else
      echo "$format greedy, \"$prompt\": parts from the dequantized float32 model's text at word $((same + 1)) of ${#a[@]} ('${a[$same]:-end}' against '${b[$same]:-end}')"
    fi
  done
done
exit $failed
