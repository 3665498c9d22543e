#!/usr/bin/env bash
# zoo bench --compare --json: one JSON object per workload with the fields docs/performance.md
# promises (name, unit, zoo, pytorch, ratio; mfu for training, the bandwidth bound for decoding).
# Checks the output's shape and that the numbers are positive, never how fast anything is.
set -euo pipefail
zoo="$1"
references="$2"
python="${ZOO_PYTHON:?the Python with the test references (ctest sets it)}"
source "$(dirname "$0")/lib.sh"

"$zoo" bench --compare --json --steps 1 --only gemm bandwidth train-gpt-tiny --trace "$work/traces" > "$work/bench.jsonl"
# --trace: one more step of each side as a Kineto trace; scripts/trace_summary.py reads both.
[ "$(ls "$work/traces")" = "$(printf 'pytorch-train-gpt-tiny.json\nzoo-train-gpt-tiny.json')" ] || { ls "$work/traces"; exit 1; }
"$python" "$(dirname "$0")/../../scripts/trace_summary.py" --json --top 5 "$work/traces/zoo-train-gpt-tiny.json" \
  "$work/traces/pytorch-train-gpt-tiny.json" > "$work/traces.jsonl"
"$python" - "$work/bench.jsonl" "$work/traces.jsonl" <<'PY'
import json, sys
train = [json.loads(line) for line in open(sys.argv[1])][2]
zoo, torch = [json.loads(line) for line in open(sys.argv[2])]
# The same step's ops, counted by Kineto here and by LibTorch's legacy profiler in the row.
assert abs(zoo["aten_ops_per_step"] - train["zoo_ops"]) <= 0.01 * train["zoo_ops"], (zoo, train)
assert abs(torch["aten_ops_per_step"] - train["pytorch_ops"]) <= 0.05 * train["pytorch_ops"], (torch, train)
for s in (zoo, torch):
    assert s["kernels_per_step"] == 0 and s["top_by"] == "op self time", s  # a CPU: no kernels
    assert len(s["top"]) == 5 and "aten::mm" in [r["name"] for r in s["top"]], s
PY
"$python" - "$work/bench.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert [r["name"] for r in rows] == ["gemm", "bandwidth", "train-gpt-tiny"], rows
for r in rows:
    for key in ("unit", "zoo", "pytorch", "ratio", "zoo_peak_rss_mb", "pytorch_peak_rss_mb"):
        assert key in r, (key, r)
    assert r["zoo"] > 0 and r["pytorch"] > 0 and abs(r["ratio"] - r["zoo"] / r["pytorch"]) < 1e-9, r
train = rows[2]
assert train["unit"] == "tokens/s" and 0 < train["mfu"] < 1.5 and 0 < train["pytorch_mfu"] < 1.5, train
# Ops and host synchronisations per step, both sides counted by the same rules; zoo's step
# reads nothing back.
assert train["zoo_ops"] > 100 and train["pytorch_ops"] > 100 and train["zoo_syncs"] == 0, train
PY
# A serve row: zoo serve and PyTorch + transformers' one-request-at-a-time server, each measured by
# zoo's load generator, with the latencies the README's table shows.
"$zoo" bench --compare --json --steps 1 --only serve-gpt2-small-1 > "$work/serve.jsonl"
"$python" - "$work/serve.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert [r["name"] for r in rows] == ["serve-gpt2-small-1"], rows
r = rows[0]
assert r["unit"] == "tokens/s" and r["zoo"] > 0 and r["pytorch"] > 0, r
for side in ("zoo", "pytorch"):
    for key in ("token_p50_ms", "token_p99_ms", "request_p50_s", "request_p99_s"):
        assert r[f"{side}_{key}"] > 0, (side, key, r)
PY
# bf16 training rows: zoo under LibTorch's CPU autocast against PyTorch's torch.autocast, MFU
# against the bf16 matmul rate. A CPU without bf16 arithmetic (no AVX512-BF16 or AMX: an AVX2
# Zen 3, say) runs bf16 products tens of times slower than fp32's, and these rows past this
# test's time limit: there they are left out, saying so.
speedup=$("$zoo" env | sed -n 's/^bf16 matrix products: \([0-9.]*\)x.*/\1/p')
bf16_training=0
awk -v s="$speedup" 'BEGIN { exit !(s >= 0.5) }' && bf16_training=1
if ((bf16_training)); then
  "$zoo" bench --compare --json --steps 1 --only gemm-bf16 train-gpt-tiny-bf16 > "$work/bf16.jsonl"
  "$python" - "$work/bf16.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert [r["name"] for r in rows] == ["gemm-bf16", "train-gpt-tiny-bf16"], rows
assert all(r["zoo"] > 0 and r["pytorch"] > 0 for r in rows), rows
assert 0 < rows[1]["mfu"] < 1.5 and 0 < rows[1]["pytorch_mfu"] < 1.5, rows[1]
PY
else
  echo "bf16 training rows left out: bf16 matrix products run ${speedup}x fp32's on this CPU"
fi
"$zoo" bench --steps 1 --only gemm > "$work/table.txt"
grep -q "^gemm .*GFLOP/s" "$work/table.txt"
fails "unknown workload 'nope'" "$zoo" bench --only nope

# The tokenizer rows: MB/s of the default corpus through zoo's SentencePiece and GPT-2's BPE,
# the second also as a ratio to the first (per byte, measured in the same run).
"$zoo" bench --json --steps 1 --only tokenize-zoo tokenize-gpt2 --gpt2-tokenizer "$references/gpt2-files" > "$work/tok.jsonl"
"$python" - "$work/tok.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert [r["name"] for r in rows] == ["tokenize-zoo", "tokenize-gpt2"], rows
assert all(r["unit"] == "MB/s" and r["zoo"] > 0 for r in rows), rows
assert abs(rows[1]["per_byte_vs_zoo"] - rows[1]["zoo"] / rows[0]["zoo"]) < 1e-9, rows
PY
fails "tokenize-gpt2 needs GPT-2's vocab.json and merges.txt in $work" \
  "$zoo" bench --only tokenize-gpt2 --gpt2-tokenizer "$work"
# LoRA against full fine-tuning, activation checkpointing against plain training: each row
# carries its ratio to the other, measured in the same run. Under --compare these rows have no
# PyTorch side (the full-training row has), and their MFU is zoo's alone.
bf16_rows=()
((bf16_training)) && bf16_rows=(train-gpt2-small-bf16 finetune-gpt2-small-lora-bf16)
"$zoo" bench --compare --json --steps 1 --only gemm train-gpt2-small finetune-gpt2-small-lora "${bf16_rows[@]}" \
  train-gpt2-small-1024 train-gpt2-small-1024-recompute > "$work/ft.jsonl"
"$python" - "$work/ft.jsonl" <<'PY'
import json, sys
rows = {r["name"]: r for r in map(json.loads, open(sys.argv[1]))}
pairs = [("train-gpt2-small", "finetune-gpt2-small-lora")]
if "train-gpt2-small-bf16" in rows:  # in bf16, against full fine-tuning in bf16
    pairs.append(("train-gpt2-small-bf16", "finetune-gpt2-small-lora-bf16"))
for full, lora in ((rows[a], rows[b]) for a, b in pairs):
    assert abs(lora["speed_vs_full"] - lora["zoo"] / full["zoo"]) < 1e-9, lora
    assert abs(lora["peak_rss_vs_full"] - lora["zoo_peak_rss_mb"] / full["zoo_peak_rss_mb"]) < 1e-9, lora
assert "pytorch" in rows["train-gpt2-small"] and "pytorch_mfu" in rows["train-gpt2-small"], rows["train-gpt2-small"]
lora = rows["finetune-gpt2-small-lora"]
assert "pytorch" not in lora and "pytorch_mfu" not in lora and lora["mfu"] > 0, lora
plain, recompute = rows["train-gpt2-small-1024"], rows["train-gpt2-small-1024-recompute"]
assert "pytorch" not in plain and "pytorch" not in recompute, (plain, recompute)
assert recompute["activations_saved"] > 0 and abs(recompute["step_time_vs_plain"] - plain["zoo"] / recompute["zoo"]) < 1e-9, recompute
PY
# bf16 decoding: zoo's bf16 weights against PyTorch's model.to(torch.bfloat16), and against the
# bandwidth bound of half the bytes per token.
"$zoo" bench --compare --json --steps 1 --only bandwidth generate-gpt2-small-bf16 > "$work/decode.jsonl"
"$python" - "$work/decode.jsonl" <<'PY'
import json, sys
rows = {r["name"]: r for r in map(json.loads, open(sys.argv[1]))}
decode = rows["generate-gpt2-small-bf16"]
assert decode["unit"] == "tokens/s" and decode["zoo"] > 0 and decode["pytorch"] > 0, decode
assert abs(decode["bound_fraction"] - decode["zoo"] / decode["bound"]) < 1e-9, decode
# 2 bytes per weight: the bound is bandwidth / (2 x gpt2-small's 124,439,808 parameters less its 786,432 position embeddings).
assert abs(decode["bound"] - rows["bandwidth"]["zoo"] * 1e9 / (2 * (124439808 - 786432))) < 1e-6 * decode["bound"], decode
PY
# --profile N: the N ops with the most self time in one more step, under LibTorch's profiler.
"$zoo" bench --json --steps 1 --only train-gpt-tiny --profile 8 > "$work/profile.jsonl"
"$python" - "$work/profile.jsonl" "$work/bench.jsonl" <<'PY'
import json, sys
row = json.loads(open(sys.argv[1]).read())
profile = row["profile"]
assert len(profile) == 9 and profile[0]["name"] == "(whole step)", profile
ops = profile[1:]
assert all(a["self_ms"] >= b["self_ms"] for a, b in zip(ops, ops[1:])), ops
assert sum(o["self_ms"] for o in ops) <= profile[0]["self_ms"], profile
# gpt-tiny's step multiplies matrices: 4 projections a layer, each forward and twice backward.
mm = [o for o in ops if o["name"] == "aten::mm"]
assert mm and mm[0]["calls"] >= 3 * 4 * 2, ops
assert "profile" not in json.loads(open(sys.argv[2]).readline()), "no profile unless asked"
PY
"$zoo" bench --steps 1 --only train-gpt-tiny --profile 3 > "$work/profile.txt"
grep -q "profiled step .* ms; ops by self time:" "$work/profile.txt" || { cat "$work/profile.txt"; exit 1; }
[ "$(grep -c '^ .* ms .*%' "$work/profile.txt")" -eq 3 ] || { cat "$work/profile.txt"; exit 1; }
# The ring rows: the sequence split over 2 worker processes (context parallelism), the row
# rank 0's with every rank's peak memory, compared with one process at the same length and at a
# rank's share of it, measured before in the same run.
"$zoo" bench --json --steps 1 --only long-alibi-1024 long-alibi-2048 ring-alibi-2048-2 > "$work/ring.jsonl"
"$python" - "$work/ring.jsonl" <<'PY'
import json, sys
rows = {r["name"]: r for r in map(json.loads, open(sys.argv[1]))}
ring, share, whole = rows["ring-alibi-2048-2"], rows["long-alibi-1024"], rows["long-alibi-2048"]
assert ring["unit"] == "tokens/s" and ring["zoo"] > 0 and "pytorch" not in ring and "mfu" not in ring, ring
assert ring["ranks"] == 2 and len(ring["rank_peak_rss_mb"]) == 2, ring
assert ring["zoo_peak_rss_mb"] == max(ring["rank_peak_rss_mb"]) > 0, ring
assert abs(ring["peak_rss_vs_one_rank_share"] - ring["zoo_peak_rss_mb"] / share["zoo_peak_rss_mb"]) < 1e-9, ring
assert abs(ring["peak_rss_vs_one_rank"] - ring["zoo_peak_rss_mb"] / whole["zoo_peak_rss_mb"]) < 1e-9, ring
assert abs(ring["speed_vs_one_rank"] - ring["zoo"] / whole["zoo"]) < 1e-9, ring
PY
echo "bench: ok"
