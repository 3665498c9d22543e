#!/usr/bin/env bash
# Data-parallel training over loopback with c10d Gloo: two ranks with per-rank batch B follow one
# process with batch 2B step for step (GPT with accumulation, BERT's masked LM), launched by
# environment variables and by torchrun; a resume with another world size is refused; a rank
# that is killed or hangs ends the run with an error naming it within the timeout.
set -euo pipefail
zoo="$1"
corpus="$2"
python="${ZOO_PYTHON:?the Python with the test references (ctest sets it)}"
source "$(dirname "$0")/lib.sh"

slice "$corpus"
tiny=(model.d_model=32 model.n_layers=2 model.n_heads=2 model.d_ff=64 model.vocab_size=512 model.max_positions=64
      model.dropout=0 model.attention_dropout=0 block_size=32 lr=0.003 warmup_steps=0 eval_every=0 log_every=1
      seed=5 precision=fp32 --data "$work/slice.txt")  # fp32: auto may pick bf16, whose sums differ more by order

# two_ranks RUN_DIR ARGS...: rank 0 in the background, rank 1 in the foreground.
two_ranks() {
  local dir="$1" port pid; shift
  port=$(free_port)
  export WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port"
  RANK=0 LOCAL_RANK=0 "$zoo" "$@" --run-dir "$dir" > "$dir.0.out" 2> "$dir.0.err" & pid=$!
  RANK=1 LOCAL_RANK=1 "$zoo" "$@" --run-dir "$dir" > "$dir.1.out" 2> "$dir.1.err"
  wait "$pid"
  unset WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
}

# GPT with accumulation (the first micro-step of each update communicates nothing).
"$zoo" --threads 1 train gpt-tiny "${tiny[@]}" batch_size=8 grad_accum=2 steps=6 --run-dir "$work/gpt1" > /dev/null 2>&1
two_ranks "$work/gpt2" train gpt-tiny "${tiny[@]}" batch_size=4 grad_accum=2 steps=6
same_losses "$work/gpt1" "$work/gpt2" 6
grep -q "data parallel: 2 processes (gloo); global batch 4 per rank x 2 ranks x 2 accumulation = 16 sequences" "$work/gpt2.0.err"
test ! -s "$work/gpt2.1.err" && test ! -s "$work/gpt2.1.out"  # only rank 0 speaks
test -L "$work/gpt2/checkpoints/last"

# BERT's masked LM: ranks mask different numbers of tokens, and the loss is still the global mean.
"$zoo" --threads 1 train bert-tiny "${tiny[@]}" batch_size=8 steps=5 --run-dir "$work/bert1" > /dev/null 2>&1
two_ranks "$work/bert2" train bert-tiny "${tiny[@]}" batch_size=4 steps=5
same_losses "$work/bert1" "$work/bert2" 5

# torchrun (PyTorch 2.15's, from the test environment), with small buckets so gradients travel
# in several all-reduces during backward.
port=$(free_port)
"$python" -m torch.distributed.run --nproc_per_node=2 --master_port="$port" --no_python "$zoo" train gpt-tiny "${tiny[@]}" batch_size=4 \
  grad_accum=2 steps=6 --bucket-mb 0.02 --run-dir "$work/gpt-torchrun" > "$work/torchrun.out" 2> "$work/torchrun.err"
same_losses "$work/gpt1" "$work/gpt-torchrun" 6

# Resuming with another world size is refused, saying why.
fails "trained with 2 process\(es\) and this launch has 1" "$zoo" train --resume "$work/gpt2" steps=8
# The environment is checked.
fails "WORLD_SIZE is set but RANK is not" env WORLD_SIZE=2 "$zoo" train gpt-tiny "${tiny[@]}" --run-dir "$work/x"
fails "RANK \(2\) must be below WORLD_SIZE \(2\)" env WORLD_SIZE=2 RANK=2 "$zoo" train gpt-tiny "${tiny[@]}" --run-dir "$work/x"

# A rank killed mid-run: the other exits with an error naming it, within the timeout.
# stuck RUN_DIR SIGNAL: starts a long two-rank run, sends SIGNAL to rank 1 once training is under
# way, and checks rank 0 fails naming rank 1 within 20 s.
stuck() {
  local dir="$1" signal="$2" port pid0 pid1 status=0
  port=$(free_port)
  export WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port"
  RANK=0 LOCAL_RANK=0 "$zoo" train gpt-tiny "${tiny[@]}" steps=100000 --dist-timeout 5 --run-dir "$dir" \
    > /dev/null 2> "$dir.0.err" & pid0=$!
  RANK=1 LOCAL_RANK=1 "$zoo" train gpt-tiny "${tiny[@]}" steps=100000 --dist-timeout 5 --run-dir "$dir" \
    > /dev/null 2>&1 & pid1=$!
  unset WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
  for _ in $(seq 100); do
    [[ -s "$dir/metrics.jsonl" ]] && break
    sleep 0.2
  done
  test -s "$dir/metrics.jsonl"
  kill "-$signal" "$pid1"
  local started=$SECONDS
  wait "$pid0" || status=$?
  local took=$((SECONDS - started))
  kill -KILL "$pid1" 2> /dev/null || true
  [[ $status -ne 0 ]] || { echo "rank 0 did not fail after rank 1 got SIG$signal"; exit 1; }
  (( took <= 20 )) || { echo "rank 0 took ${took}s to notice SIG$signal on rank 1"; exit 1; }
  grep -q "rank 1 stopped responding" "$dir.0.err" || { echo "rank 0's error does not name rank 1:"; cat "$dir.0.err"; exit 1; }
}
stuck "$work/killed" KILL
stuck "$work/hung" STOP
echo "distributed: ok"
