#!/usr/bin/env bash
# The README's main job: install what is missing, build, then train gpt-tiny on the default
# corpus (configs/runs/demo.yaml: 500 steps, 3.5-7 minutes on 2 CPU cores), sample from it, plot
# its curves, export it to TorchScript, generate from the export in plain Python (no zoo code),
# and check it reached the validation loss the README states.
# Safe to run again: it replaces its own run, curves and export.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
zoo=build/zoo
run=runs/demo

mkdir -p runs
"$zoo" info gpt-tiny
"$zoo" train runs/demo --run-dir "$run" --overwrite | tee "$run.summary"

echo
echo "Samples (seeded, temperature 0.8, top-k 200):"
seed=1
for prompt in "The Python interpreter" "To create a list of"; do
  "$zoo" generate "$run" --prompt "$prompt" --max-new-tokens 40 --seed $((seed++)) 2>/dev/null
  echo
done
"$zoo" plot "$run"

echo
"$zoo" export "$run" --out "$run/model.pt" --overwrite
echo "Greedy, from zoo and from $run/model.pt in plain Python (PyTorch 2.15 + sentencepiece):"
prompt="The Python interpreter"
native=$("$zoo" generate "$run" --prompt "$prompt" --greedy --max-new-tokens 30 2>/dev/null)
exported=$("$zoo_python" scripts/torchscript_generate.py "$run/model.pt" --prompt "$prompt" --greedy --max-new-tokens 30)
echo "  zoo:    $native"
echo "  python: $exported"
if [[ "$native" != "$exported" ]]; then
  echo "zoo demo: the TorchScript export generated different text" >&2
  exit 1
fi

# A loss far above the curve just before it (the trainer names each: train/loss_spikes.h) is a
# recipe that is unstable on this CPU or precision, whatever the final loss.
if grep -q "^loss spike: " "$run.summary"; then
  echo "zoo demo: the training curve spiked ($(grep "^loss spike: " "$run.summary" | sed 's/^loss spike: //' | paste -sd ';'))" >&2
  exit 1
fi
loss=$(sed -n 's/^final: .*val loss \([0-9.]*\).*/\1/p' "$run.summary")
# README: in fp32 the run ends near 5.31 (100 steps of warm-up; 5.63 with 30), in bf16 (a CPU with
# bf16 arithmetic) it ended near 5.37 with 30; past these limits something is wrong.
precision=$(sed -n 's/^precision: *//p' "$run/run.yaml")
case "$precision" in
  bf16) expected_loss=5.6 ;;
  *) expected_loss=5.8 ;;
esac
rm -f "$run.summary"
if ! awk -v l="$loss" -v e="$expected_loss" 'BEGIN { exit !(l != "" && l < e) }'; then
  echo "zoo demo: final validation loss ${loss:-missing} did not reach $expected_loss" >&2
  exit 1
fi
echo "zoo demo: final validation loss $loss (< $expected_loss); run, checkpoints, curves and model.pt in $run/"
