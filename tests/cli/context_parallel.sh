#!/usr/bin/env bash
# Context parallelism over loopback with c10d Gloo: 2 and 4 ranks share each sequence by ring
# attention and follow one process step for step (losses within 1e-5, fp32), for every position
# kind, with a sliding window and grouped queries, with attention dropout, combined with data
# parallelism (2 x 2 ranks), by torchrun, and through a stop and resume; what it cannot run is
# refused naming the key; a rank that is killed ends the run with an error naming it.
set -euo pipefail
zoo="$1"
corpus="$2"
python="${ZOO_PYTHON:?the Python with the test references (ctest sets it)}"
source "$(dirname "$0")/lib.sh"

slice "$corpus"
tiny=(model.d_model=32 model.n_layers=2 model.n_heads=4 model.d_ff=64 model.vocab_size=512 model.max_positions=64
      model.dropout=0 model.attention_dropout=0 block_size=64 lr=0.003 warmup_steps=0 eval_every=0 log_every=1
      seed=5 precision=fp32 --data "$work/slice.txt")

# ranks N RUN_DIR ARGS...: ranks 1..N-1 in the background, rank 0 in the foreground; every rank
# must succeed.
ranks() {
  local n="$1" dir="$2" port r pids=(); shift 2
  port=$(free_port)
  export WORLD_SIZE="$n" LOCAL_WORLD_SIZE="$n" MASTER_ADDR=127.0.0.1 MASTER_PORT="$port"
  for ((r = 1; r < n; ++r)); do
    RANK=$r LOCAL_RANK=$r "$zoo" --threads 1 "$@" --run-dir "$dir" > "$dir.$r.out" 2> "$dir.$r.err" & pids+=($!)
  done
  RANK=0 LOCAL_RANK=0 "$zoo" --threads 1 "$@" --run-dir "$dir" > "$dir.0.out" 2> "$dir.0.err" || {
    echo "rank 0 of $dir failed:"; cat "$dir.0.err"; exit 1; }
  for pid in "${pids[@]}"; do wait "$pid"; done
  unset WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
}

# same_evaluation RUN_A RUN_B: the validation records' loss (within 1e-5, relative), accuracy
# and target count are the same.
same_evaluation() {
  "$python" - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'PY'
import json, sys
def evals(path):
    return [r for r in map(json.loads, open(path)) if r.get("split") == "val"]
a, b = evals(sys.argv[1]), evals(sys.argv[2])
assert len(a) == len(b) == 1, (a, b)
assert a[0]["targets"] == b[0]["targets"] > 0, (a, b)
assert a[0]["accuracy"] == b[0]["accuracy"], (a, b)
assert abs(a[0]["loss"] - b[0]["loss"]) <= 1e-5 * a[0]["loss"], (a, b)
PY
}

# One process against N ranks sharing each sequence, per position kind and mask, in training and
# in the evaluation at the end (the ranks score their shares around the ring and add them up).
# check_model NAME RANKS MODEL ARGS...; check NAME RANKS ARGS... (gpt-tiny)
check_model() {
  local name="$1" n="$2" model="$3"; shift 3
  "$zoo" --threads 1 train "$model" "${tiny[@]}" batch_size=4 steps=5 eval_every=5 eval_batches=2 "$@" \
    --run-dir "$work/$name-1" > /dev/null 2>&1
  ranks "$n" "$work/$name-cp" train "$model" "${tiny[@]}" batch_size=4 steps=5 eval_every=5 eval_batches=2 \
    context_parallel="$n" "$@"
  same_losses "$work/$name-1" "$work/$name-cp" 5
  same_evaluation "$work/$name-1" "$work/$name-cp"
}
check() {
  local name="$1" n="$2"; shift 2
  check_model "$name" "$n" gpt-tiny "$@"
}
check learned 2 model.position=learned
check rope-window-gqa 4 model.position=rope model.window=12 model.n_kv_heads=2
check alibi 4 model.position=alibi
check relative 2 model.position=relative
check sinusoidal 2 model.position=sinusoidal
# Attention dropout: each rank draws the seed one process draws, and the tiled kernel drops each
# weight by its global positions, so the ring drops what one process drops.
check attention-dropout 2 model.position=rope model.attention_dropout=0.1
# Encoders: BERT's masked LM (the ranks mask different numbers of targets; learned positions and
# ALiBi at global indices), and T5's span corruption, its encoder bidirectional, its decoder
# causal with its own buckets, and cross-attention going round the ring over the encoder's chunks
# (the examples' lengths vary: padded to a multiple of 2N, the padding masked out of every key).
check_model bert-mlm 2 bert-tiny model.vocab_size=512
check_model bert-alibi 4 bert-tiny model.vocab_size=512 model.position=alibi
check_model t5-span 2 t5-tiny model.n_heads=4 model.head_dim=8
check_model t5-span-4 4 t5-tiny model.n_heads=4 model.head_dim=8 model.relative_buckets=8 model.relative_max_distance=20
grep -q "context parallel: each sequence (up to 64 tokens) split over 2 ranks (ring attention; padded to a multiple of 4, zigzag chunks, two per rank; the decoder's sequence too)" \
  "$work/t5-span-cp.0.err"
grep -q "context parallel: each sequence of 64 tokens split over 4 ranks (ring attention; zigzag chunks of 8 tokens, two per rank)" \
  "$work/alibi-cp.0.err"
test ! -s "$work/alibi-cp.1.err" && test ! -s "$work/alibi-cp.3.out"  # only rank 0 speaks

# 2 x 2: two context-parallel groups, each with its own sequences; one process with both
# groups' batches.
"$zoo" --threads 1 train gpt-tiny "${tiny[@]}" model.position=alibi batch_size=4 grad_accum=2 steps=5 \
  --run-dir "$work/dp-1" > /dev/null 2>&1
ranks 4 "$work/dp-cp" train gpt-tiny "${tiny[@]}" model.position=alibi batch_size=2 grad_accum=2 steps=5 context_parallel=2
same_losses "$work/dp-1" "$work/dp-cp" 5
grep -q "global batch 2 per rank x 2 groups of 2 ranks x 2 accumulation = 8 sequences" "$work/dp-cp.0.err"

# torchrun, as for data parallelism.
port=$(free_port)
"$python" -m torch.distributed.run --nproc_per_node=2 --master_port="$port" --no_python "$zoo" --threads 1 train gpt-tiny \
  "${tiny[@]}" model.position=learned batch_size=4 steps=5 context_parallel=2 --run-dir "$work/torchrun" \
  > "$work/torchrun.out" 2> "$work/torchrun.err"
same_losses "$work/learned-1" "$work/torchrun" 5

# Stop after 3 steps and resume to 5: the same losses as one uninterrupted process (a constant
# schedule, so that the first 3 steps do not depend on the total).
"$zoo" --threads 1 train gpt-tiny "${tiny[@]}" model.position=relative batch_size=4 steps=5 schedule=constant \
  --run-dir "$work/constant-1" > /dev/null 2>&1
ranks 2 "$work/resumed" train gpt-tiny "${tiny[@]}" model.position=relative batch_size=4 steps=3 schedule=constant \
  context_parallel=2
ranks 2 "$work/resumed" train --resume "$work/resumed" steps=5
grep -q "resumed from .*step-3 at step 3" "$work/resumed.0.err"
same_losses "$work/constant-1" "$work/resumed" 5
# Resuming with another split of the same processes is refused: it would change the global batch.
port=$(free_port)
export WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port"
RANK=1 LOCAL_RANK=1 "$zoo" train --resume "$work/resumed" steps=6 context_parallel=1 --dist-timeout 5 > /dev/null 2>&1 &
pid1=$!
fails "trained with context_parallel=2 and this launch sets 1" env RANK=0 LOCAL_RANK=0 "$zoo" train --resume "$work/resumed" \
  steps=6 context_parallel=1 --dist-timeout 5
wait "$pid1" || true
unset WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT

# What it cannot run is refused before any rank waits on another.
fails "context_parallel \(2\) must divide the number of processes \(1\)" \
  "$zoo" train gpt-tiny "${tiny[@]}" steps=1 context_parallel=2 --run-dir "$work/x1"
fails "context_parallel: block_size \(30\) must be a multiple of 2 x 2 = 4" \
  "$zoo" train gpt-tiny "${tiny[@]}" block_size=30 context_parallel=2 --run-dir "$work/x2"
fails "context_parallel: ring attention trains bert's masked LM \(model.head mlm, or pretraining without sentence_pairs\), not head sequence_classification" \
  "$zoo" train bert-tiny "${tiny[@]}" model.head=sequence_classification model.pooler=true context_parallel=2 --run-dir "$work/x3"
fails "context_parallel: sentence_pairs' label reads the \[CLS\] token, which one rank of the ring holds" \
  "$zoo" train bert-tiny "${tiny[@]}" model.head=pretraining model.pooler=true sentence_pairs=nsp \
  context_parallel=2 --run-dir "$work/x4"
fails "context_parallel: model.attention_backend \(math\) must be auto or tiled" \
  "$zoo" train gpt-tiny "${tiny[@]}" model.attention_backend=math context_parallel=2 --run-dir "$work/x5"
fails "context_parallel: must be positive, got 0" "$zoo" train gpt-tiny "${tiny[@]}" context_parallel=0 --run-dir "$work/x6"

# A rank killed mid-run: its ring neighbour fails naming it, within the timeout.
port=$(free_port)
export WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port"
RANK=0 LOCAL_RANK=0 "$zoo" train gpt-tiny "${tiny[@]}" steps=100000 context_parallel=2 --dist-timeout 5 \
  --run-dir "$work/killed" > /dev/null 2> "$work/killed.0.err" & pid0=$!
RANK=1 LOCAL_RANK=1 "$zoo" train gpt-tiny "${tiny[@]}" steps=100000 context_parallel=2 --dist-timeout 5 \
  --run-dir "$work/killed" > /dev/null 2>&1 & pid1=$!
unset WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
for _ in $(seq 100); do
  [[ -s "$work/killed/metrics.jsonl" ]] && break
  sleep 0.2
done
test -s "$work/killed/metrics.jsonl"
kill -KILL "$pid1"
started=$SECONDS
status=0
wait "$pid0" || status=$?
took=$((SECONDS - started))
[[ $status -ne 0 ]] || { echo "rank 0 did not fail after rank 1 was killed"; exit 1; }
(( took <= 20 )) || { echo "rank 0 took ${took}s to notice"; exit 1; }
grep -q "rank 1 stopped responding" "$work/killed.0.err" || { echo "rank 0's error does not name rank 1:"; cat "$work/killed.0.err"; exit 1; }
echo "context parallel: ok"
