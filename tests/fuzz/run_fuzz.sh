#!/usr/bin/env bash
# Runs a libFuzzer target briefly from a few seed files: those in SEEDS_DIR, or by default a
# valid safetensors file and variants.
# Usage: run_fuzz.sh FUZZER SECONDS [SEEDS_DIR]
set -euo pipefail
fuzzer="$1"
seconds="$2"
seeds="${3:-}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
if [[ -n "$seeds" ]]; then
  cp "$seeds"/* "$work/corpus/"
  "$fuzzer" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 "$work/corpus" 2>&1 | tail -15
  exit "${PIPESTATUS[0]}"
fi
seed() {  # seed NAME JSON DATA_BYTES
  local json="$2" n
  n=${#json}
  printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x\\x00\\x00\\x00\\x00' $((n & 255)) $((n >> 8 & 255)) $((n >> 16 & 255)) $((n >> 24 & 255)))" > "$work/corpus/$1"
  printf '%s' "$json" >> "$work/corpus/$1"
  head -c "$3" /dev/zero >> "$work/corpus/$1"
}
seed one '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}' 8
seed two '{"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"I64","shape":[],"data_offsets":[8,16]}}' 16
seed empty '{}' 0
"$fuzzer" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 "$work/corpus" 2>&1 | tail -15
