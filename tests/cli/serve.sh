#!/usr/bin/env bash
# zoo serve end to end, on the loopback address only: a small GPT trained here (with a LLaMA-style
# SentencePiece tokenizer whose directory has a chat template) is served, then driven by the
# official openai client (serve_client.py: completions, chat, streaming, stop sequences, seeds,
# concurrency against zoo generate, usage against /metrics, 200 malformed requests, 503 when full,
# disconnects), for log-probabilities against transformers on its export-hf and by
# lm-evaluation-harness (serve_logprobs.py), for structured output under 50 JSON schemas
# (serve_structured.py), for tool calls (serve_tools.py), with several LoRA adapters on one base
# against peft and zoo generate (serve_lora.py), by thirty slow clients beside /health and a
# completion, by curl for the raw server-sent events, and stopped with SIGTERM while a request runs: the request finishes and the
# server exits 0. A small T5 answers as zoo generate does, alone or among others. Bad command lines
# are refused by name.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
zoo="$1" corpus="$2" spm_reference="$3"
python="${ZOO_PYTHON:?the Python with the test references (ctest sets it)}"

pretrained_inputs "$corpus" "$spm_reference"
# 300 steps (~8 s): enough that greedy text varies (a model that repeats one token would make the
# comparisons below weak).
"$zoo" train gpt-tiny tokenizer="$work/spm/llama-dir" model.vocab_size=2000 model.d_model=96 model.n_layers=2 \
  model.n_heads=4 model.d_ff=256 model.max_positions=1024 steps=300 block_size=64 batch_size=16 lr=0.005 warmup_steps=20 eval_every=0 seed=3 \
  precision=fp32 --data "$work/slice.txt" --run-dir "$work/gpt" > /dev/null 2>&1

# start_server LOG ARGS...: zoo serve of $served ($work/gpt unless set) on a free port in the
# background (--threads $threads, 1 unless set); sets $pid and $port.
start_server() {
  local log="$1"; shift
  : > "$log"  # there before the server writes it: the loop below reads it at once
  "$zoo" --threads "${threads:-1}" serve "${served:-$work/gpt}" --port 0 "$@" 2> "$log" &
  pid=$!
  for _ in $(seq 1 200); do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' "$log")
    [[ -n "$port" ]] && return 0
    kill -0 "$pid" 2> /dev/null || { echo "zoo serve exited: $(cat "$log")"; exit 1; }
    sleep 0.1
  done
  echo "zoo serve did not start: $(cat "$log")"
  exit 1
}

# Prompts longer than 6 tokens are prefilled 6 a step: every check below, greedy against `zoo
# generate` and eight clients at once among them, runs through chunked prefills too.
start_server "$work/serve.log" --max-batch 4 --max-queue 4 --api-key secret --served-model-name tiny --max-body 65536 \
  --prefill-chunk 6 --prefix-cache-mb 64
trap 'kill "$pid" 2> /dev/null || true; rm -rf "$work"' EXIT
"$python" "$(dirname "$0")/serve_client.py" "$port" secret "$zoo" "$work/gpt" tiny
# Log-probabilities against transformers on the export, and lm-evaluation-harness against the server.
"$zoo" export-hf "$work/gpt" --out "$work/gpt-hf" > /dev/null
"$python" "$(dirname "$0")/serve_logprobs.py" "$port" secret tiny "$work/gpt-hf" "$work"
# Several LoRA adapters on one base (serve_lora.py): a zoo LoRA run given at start, two PEFT
# adapters made by peft and loaded while serving, against peft, zoo generate and each alone.
"$zoo" finetune "$work/gpt" --train "$work/slice.txt" --task lm --run-dir "$work/gpt-lora" steps=20 batch_size=4 \
  block_size=64 lr=0.05 warmup_steps=0 eval_every=0 lora.rank=4 lora.alpha=32 "lora.targets=[q,v,up]" > /dev/null 2>&1
main_pid=$pid main_port=$port
trap 'kill "$pid" "$main_pid" 2> /dev/null || true; rm -rf "$work"' EXIT
threads=2 start_server "$work/lora.log" --max-batch 8 --api-key secret --served-model-name tiny --prefix-cache-mb 16 \
  --lora "c=$work/gpt-lora" --allow-runtime-lora
"$python" "$(dirname "$0")/serve_lora.py" "$port" secret tiny "$work/gpt-hf" "$work" "$zoo" "$work/gpt-lora" "$main_port"
kill -TERM "$pid"
wait "$pid"
fails "--lora c: expected NAME=PATH" "$zoo" serve "$work/gpt" --port 0 --lora c
fails "--lora c=$work/no-such-run: .*no-such-run" "$zoo" serve "$work/gpt" --port 0 --lora "c=$work/no-such-run"
fails "--lora w=$work/lora-wide: .*do not fit the module" "$zoo" serve "$work/gpt" --port 0 --lora "w=$work/lora-wide"
fails "--lora tiny=.*not the base's \('tiny'\)" "$zoo" serve "$work/gpt" --port 0 --served-model-name tiny \
  --lora "tiny=$work/gpt-lora"
fails "--lora c=.*holds LoRA adapters itself" "$zoo" serve "$work/gpt-lora" --port 0 --lora "c=$work/lora-a"
pid=$main_pid port=$main_port
# Structured output (response_format): a model with its initial weights (one step at a learning
# rate of 1e-12) samples answers under 50 JSON schemas, each validated by the jsonschema package;
# a model trained on JSON lines answers greedily with JSON that parses.
"$python" - "$work/json.txt" <<'PY'
import json, random, sys
rng = random.Random(0)
words = ["alpha", "beta", "list", "value", "items", "path", "data"]
with open(sys.argv[1], "w") as f:
    for _ in range(4000):
        f.write(json.dumps({"name": rng.choice(words), "count": rng.randint(0, 99), "ok": rng.random() < 0.5}) + "\n")
PY
for model in random json; do
  steps=1 lr=1e-12 data="$work/slice.txt"
  [[ $model == json ]] && steps=300 lr=0.005 data="$work/json.txt"
  "$zoo" train gpt-tiny tokenizer="$work/spm/llama-dir" model.vocab_size=2000 model.d_model=96 model.n_layers=2 \
    model.n_heads=4 model.d_ff=256 model.max_positions=1024 steps=$steps block_size=64 batch_size=16 lr=$lr \
    warmup_steps=0 eval_every=0 seed=3 precision=fp32 --data "$data" --run-dir "$work/$model" > /dev/null 2>&1
done
main_pid=$pid main_port=$port
trap 'kill "$pid" "$main_pid" "${random_pid:-}" 2> /dev/null || true; rm -rf "$work"' EXIT
# The random model's template shows no tool format: --tool-call-parser names one (serve_tools.py).
served="$work/random" threads=2 start_server "$work/random.log" --max-batch 8 --max-queue 64 --api-key secret \
  --served-model-name tiny --tool-call-parser hermes
random_pid=$pid random_port=$port
served="$work/json" start_server "$work/json.log" --api-key secret --served-model-name tiny
"$python" "$(dirname "$0")/serve_structured.py" "$random_port" "$port" secret tiny
kill -TERM "$pid"
wait "$pid"
# Tool calls: a sliding-window model fine-tuned (prompt/completion) to answer four real
# templates' tools prompts each with a call in that template's format (Qwen3's after thinking),
# served once with each template; the random model (whose template shows no tools) takes the
# forced choices.
"$python" "$(dirname "$0")/serve_tools.py" data "$work/tools.jsonl"
"$zoo" train mistral-tiny tokenizer="$work/spm/llama-dir" model.vocab_size=2000 model.d_model=96 model.n_layers=2 \
  model.n_heads=4 model.n_kv_heads=2 model.d_ff=256 model.max_positions=2048 steps=1 block_size=64 batch_size=2 \
  lr=1e-12 warmup_steps=0 eval_every=0 seed=3 precision=fp32 --data "$work/slice.txt" --run-dir "$work/tools-init" > /dev/null 2>&1
"$zoo" finetune "$work/tools-init" --train "$work/tools.jsonl" --run-dir "$work/tools" steps=300 batch_size=8 \
  lr=0.005 warmup_steps=0 eval_every=0 block_size=320 > /dev/null 2>&1
tool_servers=() tool_pids=()
for template in qwen2_5 qwen3_5_nothink llama3_1 qwen3; do
  cp -r "$work/tools" "$work/tools-$template"
  for dir in "$work/tools-$template"/checkpoints/*/tokenizer; do
    cp "${ZOO_REFERENCE_DIR:?}/chat-templates/$template.jinja" "$dir/chat_template.jinja"
  done
  served="$work/tools-$template" start_server "$work/tools-$template.log" --api-key secret --served-model-name tiny
  tool_servers+=("$template=$port") tool_pids+=("$pid")
done
trap 'kill "$main_pid" "${random_pid:-}" "${tool_pids[@]}" 2> /dev/null || true; rm -rf "$work"' EXIT
"$python" "$(dirname "$0")/serve_tools.py" check "$random_port" "$main_port" secret tiny "$work/spm/llama-dir/tokenizer.model" \
  "${tool_servers[@]}"
kill -TERM "$random_pid" "${tool_pids[@]}"
wait "$random_pid" "${tool_pids[@]}"
pid=$main_pid port=$main_port

# Thirty slow clients (slowloris: a header line every half second, never a whole request) hold
# none of the 16 workers this server has: /health and a completion answer within 2 s meanwhile,
# and the slow connections stay open, waiting for their request's deadline.
"$python" - "$port" "$(dirname "$0")" <<'PY'
import http.client, json, sys, time
port = int(sys.argv[1])
sys.path.insert(0, sys.argv[2])
from slow_clients import SlowClients


def timed(method, path, body=None):
    start = time.time()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    conn.request(method, path, body=body, headers={"Authorization": "Bearer secret"})
    r = conn.getresponse()
    r.read()
    conn.close()
    return r.status, time.time() - start


with SlowClients(port, 30) as slow:
    time.sleep(1.0)  # two header lines each: every connection is inside its request
    status, seconds = timed("GET", "/health")
    assert status == 200 and seconds < 2, f"/health beside 30 slow clients: {status} after {seconds:.2f} s"
    status, seconds = timed("POST", "/v1/completions", json.dumps({"prompt": "The", "max_tokens": 4}))
    assert status == 200 and seconds < 2, f"a completion beside 30 slow clients: {status} after {seconds:.2f} s"
    assert slow.answered() == 0, f"{slow.answered()} slow clients were answered or closed before their deadline"
PY

# The raw stream: "data: JSON" events, each followed by a blank line, and "data: [DONE]" last.
curl -sN "http://127.0.0.1:$port/v1/completions" -H "Authorization: Bearer secret" \
  -d '{"prompt": "The list", "max_tokens": 8, "temperature": 0, "stream": true}' > "$work/sse.txt"
"$python" - "$work/sse.txt" <<'PY'
import json, sys
raw = open(sys.argv[1]).read()
assert raw.endswith("data: [DONE]\n\n"), repr(raw[-80:])
events = raw.split("\n\n")[:-1]
assert all(e.startswith("data: ") and "\n" not in e for e in events), events
chunks = [json.loads(e[6:]) for e in events[:-1]]
assert chunks and all(c["object"] == "text_completion" for c in chunks), chunks
assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length"), chunks[-1]
PY
# A body beyond --max-body: 413, in OpenAI's shape.
head -c 100000 /dev/zero | tr '\0' 'x' | sed 's/^/{"prompt": "/; s/$/"}/' > "$work/big.json"
status=$(curl -s -o "$work/big.out" -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" \
         -H "Authorization: Bearer secret" --data-binary "@$work/big.json" || true)
[[ "$status" == 413 ]] || { echo "a 100 kB body got $status: $(cat "$work/big.out")"; exit 1; }

# SIGTERM while a request runs: the request finishes within the grace period, the server exits 0.
curl -sN "http://127.0.0.1:$port/v1/completions" -H "Authorization: Bearer secret" \
  -d '{"prompt": "The", "max_tokens": 150, "temperature": 1.0, "stop": "@@never@@", "stream": true}' > "$work/last.txt" &
client=$!
for _ in $(seq 1 100); do [[ -s "$work/last.txt" ]] && break; sleep 0.05; done
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
wait "$client"
[[ $status == 0 ]] || { echo "zoo serve exited $status after SIGTERM: $(cat "$work/serve.log")"; exit 1; }
grep -q "zoo serve: stopped" "$work/serve.log"
tail -c 300 "$work/last.txt" | has -E '"finish_reason":"(length|stop)"' || { echo "the running request did not finish: $(tail -c 300 "$work/last.txt")"; exit 1; }
grep -q "data: \[DONE\]" "$work/last.txt"

# Every prompt length that fits the context (1024), at each boundary, whole and streamed, alone and
# together, against zoo generate; with the defaults (two threads, prefill chunks of 512), as a
# user serves it, and a KV cache of 300 positions to start with (it grows twice).
threads=2 start_server "$work/long.log" --kv-cache-positions 300
"$python" "$(dirname "$0")/serve_long_prompts.py" "$port" "$zoo" "$work/gpt" "$work/spm/llama-dir/tokenizer.model" \
  "$work/slice.txt" 1024 512 300
kill -TERM "$pid"
wait "$pid"

# With int8 weights (#49): a checkpoint zoo quantize wrote passes the same client checks, against
# zoo generate on it (chunked prefills, eight clients at once, the same greedy tokens).
"$zoo" quantize "$work/gpt" --to int8 --out "$work/gpt-int8" > /dev/null
served="$work/gpt-int8" start_server "$work/int8.log" --max-batch 4 --max-queue 4 --api-key secret \
  --served-model-name tiny --max-body 65536 --prefill-chunk 6
"$python" "$(dirname "$0")/serve_client.py" "$port" secret "$zoo" "$work/gpt-int8" tiny
kill -TERM "$pid"
wait "$pid"

# An encoder-decoder (T5): the prompt is the source; the completion equals zoo generate's answer,
# alone and among concurrent requests, a source at the encoder's last position (512) included,
# on two threads; a source one token longer is refused by name.
"$zoo" train t5-tiny model.vocab_size=512 model.d_model=64 model.n_layers=2 model.n_heads=4 model.head_dim=16 \
  model.d_ff=128 steps=30 block_size=64 batch_size=8 lr=0.003 warmup_steps=0 eval_every=0 seed=3 precision=fp32 \
  --data "$work/slice.txt" --run-dir "$work/t5" > /dev/null 2>&1
"$zoo" --threads 2 serve "$work/t5" --port 0 --max-batch 3 2> "$work/t5.log" &
pid=$!
for _ in $(seq 1 200); do grep -q "listening on" "$work/t5.log" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' "$work/t5.log")
[[ -n "$port" ]] || { echo "zoo serve (t5) did not start: $(cat "$work/t5.log")"; exit 1; }
"$python" - "$port" "$zoo" "$work/t5" "$work/slice.txt" <<'PY'
import concurrent.futures, subprocess, sys
import openai
port, zoo, run, corpus = sys.argv[1:5]
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
# Sources of the corpus whose tokens (the end-of-sequence token included, as usage counts them)
# are the encoder's 512 positions, and one more.
words = open(corpus, encoding="utf-8").read().split()[:2000]
candidates = [" ".join(words[:k]) + " a" * j for k in range(10, 400) for j in range(12)]
lines = subprocess.run([zoo, "tokenizer", "encode", "--model", run + "/tokenizer"], input="\n".join(candidates) + "\n",
                       capture_output=True, text=True, check=True).stdout.splitlines()
def source_of(tokens):
    for text, ids in zip(candidates, lines):
        if len(ids.split()) in (tokens - 1, tokens):
            try:
                r = client.completions.create(model=run, prompt=text, max_tokens=1, temperature=0)
            except openai.BadRequestError:
                if tokens > 512:
                    return text
                continue
            if r.usage.prompt_tokens == tokens:
                return text
    sys.exit(f"no source of {tokens} tokens")
longest = source_of(512)
prompts = ["The list of", "A function that returns", "import sys", "Errors should never pass silently", "x", longest]
def want(p):
    out = subprocess.run([zoo, "--threads", "1", "generate", run, "--prompt", p, "--greedy", "--max-new-tokens", "12"],
                         capture_output=True, text=True, check=True).stdout
    return out[:-1] if out.endswith("\n") else out
def got(p):
    return client.completions.create(model=run, prompt=p, max_tokens=12, temperature=0).choices[0].text
expected = [want(p) for p in prompts]
with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
    together = list(pool.map(got, prompts))
for p, e, g in zip(prompts, expected, together):
    assert e == g, f"t5 {p!r}: zoo generate {e!r}, zoo serve {g!r}"
# A tokenizer without a chat template: chat is refused by name, the server goes on.
try:
    client.chat.completions.create(model=run, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    sys.exit("chat without a chat template was answered")
except openai.BadRequestError as e:
    assert "chat_template" in str(e), e
assert got("x") == expected[-2]
# One token past the encoder: 400 naming the prompt and the limit.
try:
    client.completions.create(model=run, prompt=source_of(513), max_tokens=4)
    sys.exit("a source past the encoder's positions was answered")
except openai.BadRequestError as e:
    assert "prompt" in str(e) and "512" in str(e), e
PY
kill -TERM "$pid"
wait "$pid"

# Bound to loopback unless told otherwise; bad command lines refused by name.
grep -q "listening on http://127.0.0.1:" "$work/serve.log"
fails "no-such-dir" "$zoo" serve "$work/no-such-dir" --port 0
fails "--port: Value 70000 not in range" "$zoo" serve "$work/gpt" --port 70000
fails "--max-context 9999 is more than the model's max_positions \(1024\)" "$zoo" serve "$work/gpt" --port 0 --max-context 9999
fails "--max-batch: must be a positive integer" "$zoo" serve "$work/gpt" --max-batch 0
fails "--prefill-chunk: must be 0 or a positive integer, got '-1'" "$zoo" serve "$work/gpt" --prefill-chunk -1
fails "--max-connections: must be a positive integer" "$zoo" serve "$work/gpt" --max-connections 0
fails "--request-timeout: must be a positive number" "$zoo" serve "$work/gpt" --request-timeout 0
fails "--keep-alive: must be a positive number" "$zoo" serve "$work/gpt" --keep-alive -1
fails "--prefix-cache-mb: Value 9999999999999 not in range" "$zoo" serve "$work/gpt" --prefix-cache-mb 9999999999999
fails "--tool-call-parser: bogus not in {auto,hermes,qwen-xml,llama3-json,mistral}" "$zoo" serve "$work/gpt" --tool-call-parser bogus
echo "cli.serve: ok"
