#!/usr/bin/env bash
# Linear and gated linear attention through the command line: a gated linear model and a hybrid
# (linear with performer features, softmax with RoPE) train and lower their loss; generation
# with the recurrent state equals generation without a cache, token for token, greedy and
# sampled, and runs in bf16; the TorchScript export generates the same tokens in PyTorch;
# export-hf writes zoo's own layout, which import-hf reads back; a stop and resume continues the
# straight run exactly; zoo info shows the layers and their state; configs that cannot work are
# refused naming the key.
set -euo pipefail
zoo="$1"
corpus="$2"
python="${ZOO_PYTHON:?the Python with the test references (ctest sets it)}"
source "$(dirname "$0")/lib.sh"

slice "$corpus"
tiny=(model.d_model=64 model.n_layers=2 model.n_heads=4 model.d_ff=128 model.vocab_size=512 model.max_positions=128
      model.dropout=0 block_size=96 batch_size=8 lr=0.003 schedule=constant warmup_steps=0 eval_every=0 log_every=1 seed=5
      precision=fp32 --data "$work/slice.txt")

for kind in gla hybrid; do
  case "$kind" in
    gla) model=(model.attention=gated_linear) ;;
    hybrid) model=("model.attention_layers=[linear, softmax]" model.feature_map=performer model.performer_features=32
                   model.position=rope) ;;
  esac
  "$zoo" train gpt-tiny "${tiny[@]}" "${model[@]}" steps=12 --run-dir "$work/$kind" > /dev/null 2>&1
  "$python" - "$work/$kind/metrics.jsonl" <<'PY'
import json, sys
losses = [r["loss"] for r in map(json.loads, open(sys.argv[1])) if r.get("split") == "train"]
assert len(losses) == 12 and losses[-1] < losses[0] - 0.5, f"the loss did not fall: {losses}"
PY
  # The recurrent state against recomputing the whole sequence each step.
  for how in "--greedy" "--seed 7 --temperature 0.8 --top-k 20"; do
    # shellcheck disable=SC2086
    cached=$("$zoo" generate "$work/$kind" --prompt "The list" --prompt "A" --max-new-tokens 40 $how 2> /dev/null)
    # shellcheck disable=SC2086
    uncached=$("$zoo" generate "$work/$kind" --prompt "The list" --prompt "A" --max-new-tokens 40 $how --no-cache 2> /dev/null)
    [[ -n "$cached" && "$cached" == "$uncached" ]] || { echo "$kind $how: cached '$cached' vs uncached '$uncached'"; exit 1; }
  done
  [[ -n "$("$zoo" generate "$work/$kind" --prompt "The list" --max-new-tokens 20 --greedy --dtype bf16 2> /dev/null)" ]]
  [[ -n "$("$zoo" generate "$work/$kind" --prompt "The list" --prompt "A" --max-new-tokens 20 --num-beams 4 2> /dev/null)" ]]
  "$zoo" eval "$work/$kind" --data "$work/slice.txt" --max-batches 2 | has "^loss "
  # The TorchScript export, run by PyTorch alone, generates what zoo generates, token for token.
  "$zoo" export "$work/$kind" --out "$work/$kind.pt" > /dev/null
  want=$("$zoo" generate "$work/$kind" --prompt "The list" --prompt "A" --max-new-tokens 30 --greedy 2> /dev/null)
  got=$("$python" "$(dirname "$0")/../../scripts/torchscript_generate.py" "$work/$kind.pt" --prompt "The list" \
        --prompt "A" --max-new-tokens 30 --greedy)
  [[ -n "$want" && "$want" == "$got" ]] || { echo "$kind: zoo '$want', its TorchScript export '$got'"; exit 1; }
  # Hugging Face's layout in zoo's own model type: read back, it generates the same text; the
  # safetensors package reads the file, config.json says what it is.
  "$zoo" export-hf "$work/$kind" --out "$work/$kind-hf" > /dev/null
  "$zoo" import-hf "$work/$kind-hf" --out "$work/$kind-back" > /dev/null 2>&1
  want=$("$zoo" generate "$work/$kind" --prompt "The list" --max-new-tokens 30 --greedy 2> /dev/null)
  got=$("$zoo" generate "$work/$kind-back" --prompt "The list" --max-new-tokens 30 --greedy 2> /dev/null)
  [[ "$want" == "$got" ]] || { echo "$kind: export-hf + import-hf generates '$got', not '$want'"; exit 1; }
  "$python" - "$work/$kind-hf" <<'PY'
import json, sys
from safetensors.torch import load_file
config = json.load(open(sys.argv[1] + "/config.json"))
assert config["model_type"] == "zoo" and "attention" in config["zoo_config"], config
tensors = load_file(sys.argv[1] + "/model.safetensors")
assert "blocks.0.self_attn.q.weight" in tensors and "token_embedding.weight" in tensors, sorted(tensors)[:8]
PY
done

# Stop after 6 steps and resume: the same losses as the straight run.
"$zoo" train gpt-tiny "${tiny[@]}" model.attention=gated_linear steps=6 --run-dir "$work/split" > /dev/null 2>&1
"$zoo" train --resume "$work/split" steps=12 > /dev/null 2>&1
"$python" - "$work/gla/metrics.jsonl" "$work/split/metrics.jsonl" <<'PY'
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if r.get("split") == "train"}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == 12 and a == b, f"stop-and-resume differs from the straight run: {a} vs {b}"
PY

"$zoo" info gpt-tiny attention=gated_linear | has "token mixing: gated_linear in every layer"
"$zoo" info gpt-tiny "attention_layers=[gated_linear, softmax, linear, softmax]" |
  grep -q "decoding state 4 x 64 x 65 per layer and sequence"
fails "position rope acts inside softmax attention" "$zoo" info gpt-tiny attention=gated_linear position=rope
fails "ring attention splits softmax attention" "$zoo" train gpt-tiny "${tiny[@]}" model.attention=gated_linear \
  context_parallel=2 steps=2 --run-dir "$work/cp"
fails "attention_layers lists 3 kinds for n_layers \(2\)" "$zoo" train gpt-tiny "${tiny[@]}" \
  "model.attention_layers=[linear, linear, linear]" steps=2 --run-dir "$work/bad"
echo "linear attention: ok"
