# Shared by the command-line test scripts (sourced): a scratch directory removed on exit, a
# 200 kB slice of the corpus, and `fails`, which runs a command that must fail.

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# fails PATTERN COMMAND...: non-zero exit and stderr matching PATTERN (extended regex).
fails() {
  local pattern="$1"; shift
  local status=0
  err=$("$@" 2>&1 >/dev/null) || status=$?
  [[ $status -ne 0 ]] || { echo "expected failure: $*"; exit 1; }
  grep -qE -- "$pattern" <<<"$err" || { echo "stderr of '$*' lacks '$pattern': $err"; exit 1; }
}

# has PATTERN...: grep's test of a pipe, reading all of it. grep -q stops at the first match, and
# a writer still writing then dies of SIGPIPE, which pipefail makes the script's failure.
has() { grep "$@" > /dev/null; }

# free_port: a TCP port free on loopback now (for a rendezvous).
free_port() { "${ZOO_PYTHON:?}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# same_losses RUN_A RUN_B STEPS: training losses equal within 1e-5 (relative) at every step, and
# the loss moved (so the comparison covers real updates). Both runs must have trained in one
# precision: precision=auto measures the CPU, and a loaded machine can answer differently.
same_losses() {
  local precisions
  precisions=$(grep -h "^precision:" "$1/run.yaml" "$2/run.yaml" | sort -u)
  [[ $(wc -l <<<"$precisions") -eq 1 ]] || { echo "the runs trained in different precisions: $precisions"; exit 1; }
  "${ZOO_PYTHON:?}" - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'PY'
import json, sys
def losses(path):
    return [r["loss"] for r in map(json.loads, open(path)) if r.get("split") == "train"]
a, b, steps = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
assert len(a) == len(b) == steps, (len(a), len(b), steps)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
assert worst <= 1e-5, f"losses differ by {worst:.2e} (relative): {a} vs {b}"
assert a[-1] < a[0] - 0.05, f"the loss did not move: {a}"
PY
}

# slice CORPUS: writes the first 200 kB of CORPUS to $work/slice.txt.
slice() { head -c 200000 "$1" > "$work/slice.txt"; }

# pretrained_inputs CORPUS SPM_REFERENCE: the slice, SentencePiece models in LLaMA's and T5's
# layouts trained by the sentencepiece package ($work/spm/llama-dir, $work/spm/t5-dir), a two-class
# CSV ($work/cls.csv) and copy pairs ($work/pairs.jsonl).
pretrained_inputs() {
  slice "$1"
  head -c 400000 "$1" > "$work/spm-corpus.txt"
  "${ZOO_PYTHON:?}" "$2" train "$work/spm-corpus.txt" "$work/spm" > /dev/null
  {
    echo "text,label"
    for i in $(seq 1 30); do echo "\"item $i is good\",pos"; echo "\"item $i is bad\",neg"; done
  } > "$work/cls.csv"
  for i in $(seq 1 20); do echo "{\"source\": \"copy $i\", \"target\": \"$i\"}"; done > "$work/pairs.jsonl"
}

# hf_dir FLAVOR VOCAB TOKENIZER_FILES...: a Hugging Face directory $work/FLAVOR-hf (weights by
# $reference, tests/reference/hf_models.py) with those tokenizer files, imported by $zoo into
# $work/FLAVOR with its tokenizer.
hf_dir() {
  local flavor="$1" vocab="$2"; shift 2
  ZOO_HF_VOCAB="$vocab" "${ZOO_PYTHON:?}" "$reference" "$work/$flavor-ref.pt" write "$flavor" "$work/$flavor-hf"
  cp "$@" "$work/$flavor-hf/"
  "$zoo" import-hf "$work/$flavor-hf" --out "$work/$flavor" > "$work/$flavor-import.out" 2> /dev/null
  grep -q "^tokenizer: " "$work/$flavor-import.out"
}
