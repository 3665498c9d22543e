#!/usr/bin/env bash
# zoo's CUDA path on a machine with an NVIDIA GPU and PyTorch already installed.
#
#   scripts/gpu_check.sh fetch-deps DIR   (where apt-get works: this project's Debian 12 machines)
#       Downloads the Debian packages zoo builds with (headers and libraries of yaml-cpp,
#       GoogleTest, nlohmann-json, CLI11, fmt, PCRE2, utf8proc, xxHash, SentencePiece, Gloo) as
#       .deb files into DIR, for a GPU machine that cannot install packages.
#   scripts/gpu_check.sh [--deps DIR] [--build-only]
#       1. Builds zoo into build-gpu/ against the LibTorch of the machine's PyTorch (python3, or
#          $ZOO_GPU_PYTHON), with CUDA. Dependencies come from the system, or, with --deps, from
#          DIR's .deb files unpacked into build-gpu/deps (nothing is installed on the system).
#       2. Runs the CUDA tests: the device-parameterised unit tests on cuda, then through the
#          command line: training on CUDA (fp32 and bf16 autocast), stop and resume equal to a
#          straight run, evaluation, generation, export of a CUDA-trained model and the export
#          generating what zoo generates, and two-rank data parallelism over NCCL where the
#          machine has two GPUs.
#       3. Prints the training and decoding figures of gpt2-small on CUDA (tokens/s, fp32 and
#          bf16), for the README.
#       --build-only stops after 1 (what can be checked on a machine without a GPU).
# Exits non-zero at the first failure, naming it.
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

deps="" build_only=0
while (($#)); do
  case "$1" in
    --deps) deps="$2"; shift 2 ;;
    --build-only) build_only=1; shift ;;
    *) echo "gpu_check: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

build=build-gpu
python="${ZOO_GPU_PYTHON:-python3}"
torch_cmake="$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
echo "gpu_check: $("$python" -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda, "devices:", torch.cuda.device_count())')"

prefix_path="$torch_cmake"
cmake_args=()
if [[ -n "$deps" ]]; then
  # Debian's packages unpacked into the build folder: headers, libraries, CMake and pkg-config files.
  root="$PWD/$build/deps"
  mkdir -p "$root"
  for deb in "$deps"/*.deb; do dpkg-deb -x "$deb" "$root"; done
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
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix_path" -DZOO_PYTHON="$(command -v "$python")" \
  "${cmake_args[@]}"
cmake --build "$build" -j "$(nproc)" --target zoo_cli zoo_tests
echo "gpu_check: built $build/zoo: $("$build/zoo" env | head -2 | tail -1)"
if ((build_only)); then exit 0; fi

zoo="$build/zoo"
"$zoo" env | grep -q "CUDA device" || { echo "gpu_check: zoo sees no CUDA device" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "== unit tests on cuda"
"$build/tests/zoo_tests" --gtest_filter='Devices/*/cuda*:*Cuda*:*CUDA*' --gtest_brief=1

echo "== training, resume, evaluation, generation and export on cuda"
"$zoo" corpus --out "$work/corpus.txt" > /dev/null
head -c 2000000 "$work/corpus.txt" > "$work/slice.txt"
tiny=(--data "$work/slice.txt" steps=8 eval_every=4 batch_size=8 block_size=64 seed=3 log_every=1)
for precision in fp32 bf16; do
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
done
"$zoo" eval "$work/straight-bf16" --data "$work/slice.txt" --device cuda | grep -q "^loss "
want=$("$zoo" generate "$work/straight-fp32" --prompt "The list" --greedy --max-new-tokens 16 --device cuda 2> /dev/null)
"$zoo" export "$work/straight-fp32" --out "$work/model.pt" > /dev/null
got=$("$python" scripts/torchscript_generate.py "$work/model.pt" --prompt "The list" --greedy --max-new-tokens 16 --device cuda)
[[ -n "$want" && "$want" == "$got" ]] || { echo "gpu_check: zoo '$want', export on cuda '$got'" >&2; exit 1; }
echo "  export of a CUDA-trained model generates what zoo generates"
gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())')
if ((gpus >= 2)); then
  "$python" -m torch.distributed.run --nproc_per_node=2 --no_python "$zoo" train gpt-tiny "${tiny[@]}" batch_size=4 \
    --device cuda --run-dir "$work/nccl" > "$work/nccl.out" 2>&1
  grep -q "NCCL" "$work/nccl.out" || { echo "gpu_check: two ranks did not use NCCL" >&2; exit 1; }
  echo "  two ranks over NCCL trained"
else
  echo "  NCCL: one GPU here, two-rank training not run"
fi

echo "== figures (gpt2-small)"
for precision in fp32 bf16; do
  "$zoo" train gpt2-small --data "$work/corpus.txt" steps=12 eval_every=0 batch_size=8 block_size=1024 \
    precision=$precision --device cuda --run-dir "$work/bench-$precision" > /dev/null
  "$python" - "$precision" "$work/bench-$precision/metrics.jsonl" <<'PY'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[2])) if r.get("split") == "train"]
rates = sorted(r["tokens_per_second"] for r in rows[2:]) or [0]
print(f"  train gpt2-small {sys.argv[1]}: {rates[len(rates) // 2]:.0f} tokens/s (median of steps 3-12)")
PY
  start=$(date +%s.%N)
  "$zoo" generate "$work/bench-$precision" --prompt "The" --greedy --max-new-tokens 256 --device cuda \
    --dtype "$precision" > /dev/null 2>&1
  end=$(date +%s.%N)
  echo "  generate gpt2-small $precision: $(echo "256 / ($end - $start)" | bc -l | cut -c1-6) tokens/s (whole command, 256 tokens)"
done
echo "gpu_check: ok"
