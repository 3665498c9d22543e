#!/usr/bin/env bash
# zoo serve under a short soak (scripts/soak.py, loopback only): 16 clients for SECONDS (75 in
# ctest) mixing completions and chat, streamed and whole, n = 2, long prompts prefilled in chunks,
# abandoned streams and abandoned whole answers, and a burst past the queue every 30 s. Afterwards
# the server must hold what it held at rest before (descriptors, threads), its resident memory
# after warm-up (less its prefix cache's keys, which must stay within their budget) must stay flat
# and its stream latency must not drift (bounds below), and no
# request may get a 5xx but the bursts' 503s. docs/reliability.md has the 20-minute run's figures:
#   tests/cli/soak.sh build/zoo build/tests/python-docs.txt tests/reference/spm_reference.py 1200 soak.json
set -euo pipefail
source "$(dirname "$0")/lib.sh"
zoo="$1" corpus="$2" spm_reference="$3" seconds="${4:-75}" report="${5:-/dev/null}"
warmup=$(( seconds / 3 < 240 ? seconds / 3 : 240 ))  # 25 s of 75; 4 minutes of 20
python="${ZOO_PYTHON:?the Python with the test references (ctest sets it)}"

pretrained_inputs "$corpus" "$spm_reference"
"$zoo" train gpt-tiny tokenizer="$work/spm/llama-dir" model.vocab_size=2000 model.d_model=96 model.n_layers=2 \
  model.n_heads=4 model.d_ff=256 steps=60 block_size=64 batch_size=16 lr=0.005 warmup_steps=10 eval_every=0 seed=3 \
  precision=fp32 --data "$work/slice.txt" --run-dir "$work/gpt" > /dev/null 2>&1

# A prefix cache of 4 MB (about 2,700 of this model's tokens): the load fills it within seconds,
# and it must evict within its budget from then on.
"$zoo" serve "$work/gpt" --port 0 --max-batch 8 --max-queue 32 --prefill-chunk 64 --prefix-cache-mb 4 2> "$work/serve.log" &
pid=$!
trap 'kill "$pid" 2> /dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 200); do grep -q "listening on" "$work/serve.log" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' "$work/serve.log")
[[ -n "$port" ]] || { echo "zoo serve did not start: $(cat "$work/serve.log")"; exit 1; }

# The 20-minute soak holds the issue's bounds (5% and 1.5x). The short one judges 50 s, while the
# allocator still settles (+3.8% on 2 cores beside a build and a fuzzer; +2.9% over 16 minutes)
# and other work on the machine may come and go: twice the bounds, which a leak of 8 KB a request
# (of its ~7,000, 53 MB) or a latency growing with the requests served still crosses.
bounds=()
(( seconds < 1200 )) && bounds=(--max-rss-growth 0.10 --max-latency-ratio 3)
"$python" "$(dirname "$0")/../../scripts/soak.py" --port "$port" --pid "$pid" --seconds "$seconds" --clients 16 \
  --long-prompt-words 150 --burst 60 --warmup-seconds "$warmup" --prefix-cache-mb 4 --report "$report" --check \
  "${bounds[@]}"
kill -TERM "$pid"
wait "$pid"
echo "cli.soak: ok"
