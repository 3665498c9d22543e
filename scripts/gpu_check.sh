#!/usr/bin/env bash
# zoo's CUDA path on a machine with an NVIDIA GPU and PyTorch already installed.
#
#   scripts/gpu_check.sh fetch-deps DIR   (where apt-get works: this project's Debian 12 machines)
#       Downloads the Debian packages zoo builds with (headers and libraries of yaml-cpp,
#       GoogleTest, nlohmann-json, CLI11, fmt, PCRE2, utf8proc, xxHash, SentencePiece, Gloo) as
#       .deb files into DIR, for a GPU machine that cannot install packages.
#   scripts/gpu_check.sh [--deps DIR] [--build-only | --prebuilt] [--build-dir DIR] [--corpus FILE] [--profile]
#       1. Builds zoo into build-gpu/ (or --build-dir) against the LibTorch of the machine's PyTorch
#          (python3, or $ZOO_GPU_PYTHON), with CUDA. Dependencies come from the system, or, with
#          --deps, from DIR's .deb files unpacked into the build folder's deps/ (nothing is
#          installed on the system). --prebuilt skips the build and uses the zoo and zoo_tests
#          already in the build folder, built elsewhere against the same PyTorch version (the
#          GPU machine's LibTorch is loaded at run time): for a GPU lent by the minute.
#       2. Runs the CUDA tests: the device-parameterised unit tests on cuda, then through the
#          command line: training on CUDA (fp32 and bf16 autocast), its first steps' losses equal
#          to the CPU's, stop and resume equal to a straight run, evaluation, generation, export
#          of a CUDA-trained model and the export generating what zoo generates, and two-rank
#          data parallelism over NCCL where the machine has two GPUs.
#       3. Prints `zoo bench --device cuda --compare` against the machine's PyTorch: gemm,
#          training, BERT's forward and decoding (fp32 and bf16), for docs/cuda.md.
#       4. With --profile: the training rows and generate-gpt2-small once more, each one step
#          (or one generation) traced by Kineto for zoo and for PyTorch (zoo bench --trace), and
#          scripts/trace_summary.py's summary of each (ATen ops, kernels, launches, GPU busy and
#          idle time and gaps per step, the top kernels) written to BUILD/profile/summary.txt
#          beside the traces: what one short loan of a GPU needs to act on.
#       --build-only stops after 1 (what can be checked on a machine without a GPU); with
#       ZOO_GPU_TARGETS=zoo_cli it builds the command line alone (faster). --corpus names
#       the text to train on (default: `zoo corpus`, which needs Debian's python3.11-doc).
# Every check runs; each failure is named, and the exit status is non-zero if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

deb_packages=(libyaml-cpp-dev libyaml-cpp0.7 libgtest-dev googletest nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9
  libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2 libxxhash-dev libxxhash0 libsentencepiece-dev
  libsentencepiece0 libprotobuf-lite32 libgloo-dev libgloo0 pkgconf pkgconf-bin libpkgconf3)

if [[ "${1:-}" == fetch-deps ]]; then
  dir="${2:?usage: scripts/gpu_check.sh fetch-deps DIR}"
  mkdir -p "$dir"
  (cd "$dir" && apt-get download "${deb_packages[@]}")
  echo "gpu_check: $(ls "$dir"/*.deb | wc -l) packages in $dir"
  exit 0
fi

deps="" build_only=0 prebuilt=0 profile=0 build=build-gpu corpus=""
while (($#)); do
  case "$1" in
    --deps) deps="$2"; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --prebuilt) prebuilt=1; shift ;;
    --profile) profile=1; shift ;;
    --build-dir) build="$2"; shift 2 ;;
    --corpus) corpus="$(realpath "$2")"; shift 2 ;;
    *) echo "gpu_check: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if ((build_only && prebuilt)); then echo "gpu_check: --build-only and --prebuilt exclude each other" >&2; exit 2; fi

python="${ZOO_GPU_PYTHON:-python3}"
torch_cmake="$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
echo "gpu_check: $("$python" -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda, "devices:", torch.cuda.device_count(), *(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())))')"
# The machine's LibTorch, whatever path a build elsewhere recorded in the binaries.
torch_lib="$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

prefix_path="$torch_cmake"
cmake_args=()
if [[ -n "$deps" ]]; then
  # Debian's packages unpacked into the build folder: headers, libraries, CMake and pkg-config files.
  root="$PWD/$build/deps"
  mkdir -p "$root"
  for deb in "$deps"/*.deb; do
    if command -v dpkg-deb > /dev/null; then dpkg-deb -x "$deb" "$root"
    else ar p "$deb" "$(ar t "$deb" | grep '^data\.tar')" | tar -x -J -C "$root"; fi  # binutils' ar where dpkg is absent
  done
  multiarch=x86_64-linux-gnu
  # Their CMake and pkg-config files name /usr; point them at the unpacked copy.
  grep -rlZ "/usr/" "$root/usr/lib/$multiarch/pkgconfig" "$root/usr/share/pkgconfig" 2>/dev/null |
    xargs -0 -r sed -i "s|^prefix=/usr|prefix=$root/usr|"
  export PKG_CONFIG_PATH="$root/usr/lib/$multiarch/pkgconfig:$root/usr/share/pkgconfig"
  command -v pkg-config > /dev/null || export PATH="$root/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$root/usr/lib/$multiarch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  prefix_path="$prefix_path;$root/usr;$root/usr/lib/$multiarch/cmake"
  cmake_args+=(-DCMAKE_INCLUDE_PATH="$root/usr/include" -DCMAKE_LIBRARY_PATH="$root/usr/lib/$multiarch"
               -DCMAKE_CXX_FLAGS="-isystem $root/usr/include" -DCMAKE_EXE_LINKER_FLAGS="-L$root/usr/lib/$multiarch")
fi
if ((prebuilt)); then
  for built in zoo tests/zoo_tests libzoo_sentencepiece.so; do
    [[ -f "$build/$built" ]] || { echo "gpu_check: --prebuilt: no $build/$built" >&2; exit 1; }
  done
else
  # Make where it exists, else Ninja (PyPI's, as on machines with PyTorch and no build tools).
  generator=()
  if ! command -v make > /dev/null && command -v ninja > /dev/null && [[ ! -f "$build/CMakeCache.txt" ]]; then generator=(-G Ninja); fi
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix_path" \
    -DZOO_PYTHON="$(command -v "$python")" "${cmake_args[@]}"
  # ZOO_GPU_TARGETS: what to build (default both); zoo_cli alone for the command-line checks.
  # shellcheck disable=SC2086
  cmake --build "$build" -j "$(nproc)" --target ${ZOO_GPU_TARGETS:-zoo_cli zoo_tests}
fi
echo "gpu_check: $build/zoo: $("$build/zoo" env | head -2 | tail -1)"
if ((build_only)); then exit 0; fi

zoo="$build/zoo"
"$zoo" env | grep -qE "[0-9]+ CUDA devices?" || { echo "gpu_check: zoo sees no CUDA device: $("$zoo" env | head -2 | tail -1)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=()
# Runs "$@" under set -e in a subshell; a failure is recorded under NAME and the next check runs.
check() {
  local name="$1"; shift
  set +e; ( set -e; "$@" ); local rc=$?; set -e
  if ((rc != 0)); then failed+=("$name"); echo "gpu_check: FAILED: $name (exit $rc)" >&2; fi
}

unit_tests() {
  # Devices/* holds each device-parameterised test for cpu and cuda; none may be skipped here.
  "$build/tests/zoo_tests" --gtest_filter='Devices/*' --gtest_brief=1 2>&1 | tee "$work/unit.log"
  ! grep -q "SKIPPED" "$work/unit.log" || { echo "gpu_check: a CUDA unit test was skipped" >&2; return 1; }
  grep -q "PASSED" "$work/unit.log"
}
echo "== unit tests on cuda"
check "unit tests on cuda" unit_tests

echo "== training, resume, evaluation, generation and export on cuda"
if [[ -n "$corpus" ]]; then head -c 2000000 "$corpus" > "$work/slice.txt"; else
  "$zoo" corpus --out "$work/corpus.txt" > /dev/null
  head -c 2000000 "$work/corpus.txt" > "$work/slice.txt"
fi
tiny=(--data "$work/slice.txt" steps=8 eval_every=4 batch_size=8 block_size=64 seed=3 log_every=1)

cuda_matches_cpu() {
  # The same seed, data and weights (initialised on the CPU, then moved): the first three steps'
  # losses on CUDA equal the CPU's to fp32 rounding (no dropout; LibTorch keeps TF32 off for matmuls).
  local same=(--data "$work/slice.txt" steps=3 eval_every=0 batch_size=8 block_size=64 seed=3 log_every=1
    model.dropout=0 model.attention_dropout=0)
  "$zoo" train gpt-tiny "${same[@]}" --device cpu --run-dir "$work/on-cpu" > /dev/null
  "$zoo" train gpt-tiny "${same[@]}" --device cuda --run-dir "$work/on-cuda" > /dev/null
  "$python" - "$work/on-cpu/metrics.jsonl" "$work/on-cuda/metrics.jsonl" <<'PY'
import json, sys
def losses(path):
    return [r["loss"] for r in map(json.loads, open(path)) if r.get("split") == "train"]
cpu, cuda = losses(sys.argv[1]), losses(sys.argv[2])
assert len(cpu) == len(cuda) == 3, (cpu, cuda)
worst = max(abs(a - b) / abs(a) for a, b in zip(cpu, cuda))
print(f"  losses of steps 1-3, cpu {cpu} vs cuda {cuda}: relative difference {worst:.1e}")
assert worst < 1e-4, "training on cuda departs from the cpu"
PY
}
check "the first steps on cuda equal the cpu's" cuda_matches_cpu

resume_equals_straight() {
  local precision="$1"
  "$zoo" train gpt-tiny "${tiny[@]}" precision=$precision --device cuda --run-dir "$work/straight-$precision" > /dev/null
  "$zoo" train gpt-tiny "${tiny[@]}" precision=$precision steps=4 --device cuda --run-dir "$work/resumed-$precision" > /dev/null
  "$zoo" train --resume "$work/resumed-$precision" steps=8 > /dev/null
  "$python" - "$work/straight-$precision/metrics.jsonl" "$work/resumed-$precision/metrics.jsonl" <<'PY'
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if r.get("split") == "train"}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert a and a == b, f"stop-and-resume on cuda differs from a straight run: {a} vs {b}"
PY
  echo "  $precision: resume equals the straight run"
}
check "fp32 training and resume on cuda" resume_equals_straight fp32
check "bf16 training and resume on cuda" resume_equals_straight bf16

evaluate_generate_export() {
  "$zoo" eval "$work/straight-bf16" --data "$work/slice.txt" --device cuda | grep "^loss "
  want=$("$zoo" generate "$work/straight-fp32" --prompt "The list" --greedy --max-new-tokens 16 --device cuda 2> /dev/null)
  "$zoo" export "$work/straight-fp32" --out "$work/model.pt" > /dev/null
  got=$("$python" scripts/torchscript_generate.py "$work/model.pt" --prompt "The list" --greedy --max-new-tokens 16 --device cuda)
  [[ -n "$want" && "$want" == "$got" ]] || { echo "gpu_check: zoo '$want', export on cuda '$got'" >&2; return 1; }
  echo "  export of a CUDA-trained model generates what zoo generates: '$want'"
}
check "evaluation, generation and export on cuda" evaluate_generate_export

gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())')
two_ranks_over_nccl() {
  "$python" -m torch.distributed.run --nproc_per_node=2 --no_python "$zoo" train gpt-tiny "${tiny[@]}" batch_size=4 \
    --device cuda --run-dir "$work/nccl" > "$work/nccl.out" 2>&1
  grep -q "NCCL" "$work/nccl.out" || { echo "gpu_check: two ranks did not use NCCL" >&2; return 1; }
  echo "  two ranks over NCCL trained"
}
if ((gpus >= 2)); then check "two ranks over NCCL" two_ranks_over_nccl; else echo "  NCCL: one GPU here, two-rank training not run"; fi

echo "== figures: zoo bench --device cuda --compare (PyTorch $("$python" -c 'import torch; print(torch.__version__)'), same process layout)"
figures() {
  "$zoo" bench --device cuda --compare --python "$python" --only gemm gemm-bf16 bandwidth train-gpt2-small \
    train-gpt2-small-bf16 train-gpt-tiny forward-bert-base generate-gpt2-small generate-gpt2-small-bf16
}
check "zoo bench --device cuda --compare" figures

if ((profile)); then
  echo "== profile: one traced step each, zoo and PyTorch, summarised in $build/profile/summary.txt"
  traced() {
    local dir="$build/profile" rows=(train-gpt2-small train-gpt2-small-bf16 train-gpt-tiny generate-gpt2-small)
    rm -rf "$dir" && mkdir -p "$dir"
    "$zoo" bench --device cuda --compare --python "$python" --steps 2 --only "${rows[@]}" --trace "$dir"
    for row in "${rows[@]}"; do
      local steps=1
      [[ "$row" == generate-* ]] && steps=128  # the generation's tokens
      "$python" scripts/trace_summary.py --steps "$steps" "$dir/zoo-$row.json" "$dir/pytorch-$row.json"
    done > "$dir/summary.txt"
    cat "$dir/summary.txt"
  }
  check "traced steps and their summary" traced
fi

if ((${#failed[@]})); then
  echo "gpu_check: ${#failed[@]} failed: $(IFS=';'; echo "${failed[*]}")" >&2
  exit 1
fi
echo "gpu_check: ok"
