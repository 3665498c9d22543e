#!/usr/bin/env bash
# Runs every fuzz target (libFuzzer with ASan and UBSan; built by scripts/setup.sh into build/)
# for SECONDS each (default 600), one after another, and fails on the first finding. A finding
# leaves its input as build/tests/crash-* (or leak-*, timeout-*), which reproduces it:
#   build/tests/config_fuzz build/tests/crash-...
# Usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
build_dir="${ZOO_BUILD_DIR:-build}"
fuzzers=(safetensors_fuzz config_fuzz trainer_state_fuzz token_file_fuzz example_files_fuzz hf_model_config_fuzz
         tokenizer_json_fuzz chat_template_fuzz openai_api_fuzz)
for f in "${fuzzers[@]}"; do
  [[ -x "$build_dir/tests/$f" ]] || { echo "fuzz: $build_dir/tests/$f is missing: run scripts/setup.sh (it needs clang)" >&2; exit 1; }
done
for f in "${fuzzers[@]}"; do
  echo "== $f, ${seconds} s"
  tests/fuzz/run_fuzz.sh "$build_dir/tests/$f" "$seconds"
done
echo "fuzz: ${#fuzzers[@]} targets, ${seconds} s each, no findings"
