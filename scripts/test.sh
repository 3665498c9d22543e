#!/usr/bin/env bash
# The README's test command: install what is missing, build, run every test.
#   scripts/test.sh [CTEST ARGS]        Release build in build/, then ctest
#   scripts/test.sh --sanitize [ARGS]   the whole suite built with AddressSanitizer and
#                                       UndefinedBehaviorSanitizer in build-sanitize/, run with
#                                       every finding fatal (halt_on_error=1, leaks checked);
#                                       cli.bench (timings) is left out there
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--sanitize" ]]; then
  shift
  export ZOO_BUILD_DIR="${ZOO_BUILD_DIR:-build-sanitize}" ZOO_BUILD_TYPE="${ZOO_BUILD_TYPE:-RelWithDebInfo}"
  export ZOO_CMAKE_ARGS="${ZOO_CMAKE_ARGS:-} -DZOO_SANITIZE=ON"
  export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=1"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  # cli.bench times gpt2-small workloads against a 300 s limit; instrumented code is several
  # times slower and its timings mean nothing. Its code paths run in the other tests.
  set -- -E '^cli\.bench$' "$@"
fi
scripts/setup.sh
build_dir="${ZOO_BUILD_DIR:-build}"
# Tests pin their own thread counts where it matters; 2 parallel ctest jobs use both cores.
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"
