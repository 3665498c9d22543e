#!/usr/bin/env bash
# The README's examples run as written: its run config (with the data pointed at a corpus slice
# and the sizes made tiny by overrides), its train/resume/generate/plot commands, and its Python
# snippet that loads an export with PyTorch alone. Each block is read from README.md itself, so
# an example that drifts from the code fails here.
set -euo pipefail
zoo="$(readlink -f "$1")"
corpus="$2"
readme="$(dirname "$0")/../../README.md"
python="${ZOO_PYTHON:?the Python with the test references (ctest sets it)}"
source "$(dirname "$0")/lib.sh"
slice "$corpus"

# block SECTION LANGUAGE: the first fenced block of LANGUAGE under the README heading SECTION.
block() {
  awk -v section="## $1" -v fence="\`\`\`$2" '
    $0 == section { inside = 1; next }
    inside && /^## / { exit }
    inside && $0 == fence { copying = 1; next }
    copying && /^```/ { exit }
    copying { print }' "$readme"
}

cd "$work"
block "Train a model" yaml > my-run.yaml
grep -q "^model: gpt-tiny" my-run.yaml
mkdir my_texts && cp slice.txt my_texts/
tiny="model.vocab_size=512 model.d_model=32 model.n_layers=1 model.n_heads=2 model.d_ff=64 steps=4 batch_size=4
      block_size=32 eval_every=2 eval_batches=2"
# The commands as the README gives them, with build/zoo replaced and the tiny sizes appended.
block "Train a model" sh | grep "^build/zoo" | sed 's/ *#.*$//' > commands.txt
[[ $(wc -l < commands.txt) -eq 4 ]] || { echo "README: expected 4 commands under 'Train a model'"; cat commands.txt; exit 1; }
while read -r command; do
  command="${command#build/zoo }"
  case "$command" in
    "train my-run.yaml"*) eval "\"$zoo\" $command $tiny" > /dev/null 2>&1 ;;
    "train --resume"*) eval "\"$zoo\" ${command/steps=4000/steps=6}" > /dev/null 2>&1 ;;
    generate*) eval "\"$zoo\" $command --max-new-tokens 4" > generated.txt ;;
    plot*) eval "\"$zoo\" $command" > /dev/null ;;
    *) echo "README: unknown command '$command'"; exit 1 ;;
  esac
done < commands.txt
test -d runs/mine/checkpoints/step-6
grep -q "The list" generated.txt
test -s runs/mine/curves.png

# Quantize: the README's commands on the trained run.
block "Quantize" sh | grep "^build/zoo" | sed 's/ *#.*$//' > quantize-commands.txt
[[ $(wc -l < quantize-commands.txt) -eq 3 ]] || { echo "README: expected 3 commands under 'Quantize'"; exit 1; }
while read -r command; do
  eval "\"$zoo\" ${command#build/zoo }" < /dev/null > quantize.out 2>&1 || { cat quantize.out; exit 1; }
done < quantize-commands.txt
grep -q "bytes per parameter (int4 (groups of 32); the rest in float32)" quantize.out || { cat quantize.out; exit 1; }

# Export, then the README's Python snippet against it.
"$zoo" export runs/mine --out model.pt > /dev/null
block "Export, then load from C++ or Python" python > snippet.py
grep -q "torch.jit.load" snippet.py
"$python" - <<'PY'
exec(open("snippet.py").read())
assert logits.shape[:2] == (1, 3), logits.shape
assert out.shape[0] == 1 and 3 < out.shape[1] <= 43, out.shape
assert extra["zoo.json"] and extra["config.yaml"], "the extra files came back empty"
PY

# Serve a model: the README's fine-tune and serve commands (tiny, on a free port), then its
# Python snippet through the openai client against that port.
cp -r runs/mine runs/demo
cp slice.txt my-text.txt
block "Serve a model" sh | grep "^build/zoo" | sed 's/ *#.*$//' > serve-commands.txt
[[ $(wc -l < serve-commands.txt) -eq 2 ]] || { echo "README: expected 2 commands under 'Serve a model'"; exit 1; }
finetune=$(sed -n 1p serve-commands.txt)
eval "\"$zoo\" ${finetune#build/zoo } steps=2 eval_every=0 batch_size=2 block_size=32" > /dev/null 2>&1
serve=$(sed -n 2p serve-commands.txt)
serve=${serve/--port 8080/--port 0}
eval "exec \"$zoo\" --threads 1 ${serve#build/zoo }" 2> serve.log &  # exec: $! is the server itself
server=$!
trap 'kill "$server" 2> /dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 200); do grep -q "listening on" serve.log && break; sleep 0.1; done
port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' serve.log)
[[ -n "$port" ]] || { echo "zoo serve did not start: $(cat serve.log)"; exit 1; }
block "Serve a model" python | sed "s/127.0.0.1:8080/127.0.0.1:$port/" > serve_snippet.py
grep -q "completions.create" serve_snippet.py
# The snippet prints the completion (a 2-step model's text may be anything, even empty).
"$python" serve_snippet.py > /dev/null
kill -TERM "$server"
wait "$server"
echo "README examples: ok"
