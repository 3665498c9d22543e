#!/usr/bin/env bash
# The README's test command: install what is missing, build, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build_dir="${ZOO_BUILD_DIR:-build}"
# Tests pin their own thread counts where it matters; 2 parallel ctest jobs use both cores.
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"
