#!/usr/bin/env bash
# Installs what zoo needs, then configures and builds it (Release) into build/. Safe to run
# again: each step is skipped when already done.
#   1. Debian's packages, only the missing ones (apt-get).
#   2. A Python virtual environment outside the source tree ($ZOO_DATA_DIR/venv, scripts/env.sh)
#      with the pinned packages of scripts/requirements.txt: torch 2.15, whose wheel carries the
#      LibTorch zoo builds against (CUDA build, C++11 ABI), and the Hugging Face libraries the
#      tests compare with. Several GB the first time; reused while requirements.txt is unchanged.
#   3. xgrammar's source archive from PyPI (pinned version and hash), extracted into the cache
#      folder: zoo serve's structured output builds its C++ core.
#   4. CMake against that LibTorch (C++20), through ccache where it is installed.
#
#   ZOO_BUILD_DIR     build folder (default: build)
#   ZOO_BUILD_TYPE    CMake build type (default: Release)
#   ZOO_LIBTORCH      another LibTorch 2.x to build against (an official archive's libtorch/
#                     folder, a CUDA build): its root, or its share/cmake; CMAKE_PREFIX_PATH works too
#   ZOO_SKIP_INSTALL  set to 1 to skip the apt-get step (when you install dependencies yourself)
#   ZOO_CMAKE_ARGS    more CMake arguments (scripts/test.sh --sanitize passes -DZOO_SANITIZE=ON)
# It changes nothing on the system but installing packages: everything else it writes is under
# the cache folder or the build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

packages=(
  cmake g++ make pkg-config ccache
  python3 python3-venv      # the virtual environment holding torch (LibTorch) and the test references
  libsentencepiece-dev sentencepiece
  libyaml-cpp-dev libgtest-dev libgloo-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libpcre2-dev libutf8proc-dev   # the tokenizers' regular expressions and Unicode data
  libxxhash-dev             # content hashes of weights files (LoRA checkpoints name their base)
  libboost-dev              # zoo serve's HTTP front (Boost.Beast and Asio, header-only)
  libcpp-httplib-dev        # zoo bench's load client
  python3.11-doc            # the default corpus: the Python documentation's sources
  gnuplot-nox               # zoo plot: training curves as PNG
  clang libclang-rt-14-dev  # the fuzz tests (libFuzzer, ASan, UBSan)
)

sudo=""
[[ $(id -u) == 0 ]] || sudo="sudo"
if [[ "${ZOO_SKIP_INSTALL:-0}" != 1 ]]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    echo "setup: all packages present"
  fi
fi

# Earlier versions of this script switched the system's libblas.so.3 / liblapack.so.3 /
# libopenblas.so.0 alternatives to Debian's OpenMP OpenBLAS for every program on the machine:
# where that switch is still in place, give the choice back to the system.
if [[ "${ZOO_SKIP_INSTALL:-0}" != 1 ]] && command -v update-alternatives > /dev/null; then
  multiarch="$(gcc -print-multiarch)"
  for lib in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
    name="$lib-$multiarch"
    query="$(update-alternatives --query "$name" 2>/dev/null || true)"
    if grep -q "^Status: manual" <<<"$query" &&
       grep -q "^Value: /usr/lib/$multiarch/openblas-openmp/$lib$" <<<"$query"; then
      echo "setup: returning $name to the system's automatic choice (an earlier zoo setup had switched it)"
      $sudo update-alternatives --auto "$name"
    fi
  done
fi

# The Python environment: made once, installed again only when requirements.txt changes.
stamp="$zoo_venv/.zoo-requirements.txt"
if [[ ! -x "$zoo_python" ]]; then
  echo "setup: creating the Python environment $zoo_venv"
  mkdir -p "$(dirname "$zoo_venv")"
  /usr/bin/python3 -m venv "$zoo_venv"
fi
if ! cmp -s scripts/requirements.txt "$stamp"; then
  echo "setup: installing scripts/requirements.txt into $zoo_venv (torch with its CUDA libraries: several GB)"
  "$zoo_python" -m pip install --disable-pip-version-check -q -r scripts/requirements.txt
  cp scripts/requirements.txt "$stamp"
else
  echo "setup: Python environment $zoo_venv up to date"
fi

# xgrammar's sources (its C++ core is built with zoo). The package index is pip's own configuration.
xgrammar_version=0.2.9
xgrammar_sha256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
xgrammar_dir="$zoo_cache/xgrammar-$xgrammar_version"
if [[ ! -f "$xgrammar_dir/include/xgrammar/xgrammar.h" ]]; then
  echo "setup: fetching xgrammar $xgrammar_version's sources into $xgrammar_dir"
  work="$(mktemp -d "${TMPDIR:-/tmp}/zoo-xgrammar.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  "$zoo_python" -m pip download -q --no-deps --no-binary xgrammar "xgrammar==$xgrammar_version" -d "$work"
  echo "$xgrammar_sha256  $work/xgrammar-$xgrammar_version.tar.gz" | sha256sum -c --quiet -
  tar xzf "$work/xgrammar-$xgrammar_version.tar.gz" -C "$work"
  rm -rf "$xgrammar_dir.new" && mv "$work/xgrammar-$xgrammar_version" "$xgrammar_dir.new"
  mv "$xgrammar_dir.new" "$xgrammar_dir"  # whole, or not there
else
  echo "setup: xgrammar $xgrammar_version's sources present"
fi

# LibTorch: ZOO_LIBTORCH or CMAKE_PREFIX_PATH if given, else the environment's torch.
torch_cmake="${ZOO_LIBTORCH:-}"
if [[ -n "$torch_cmake" && -d "$torch_cmake/share/cmake" ]]; then torch_cmake="$torch_cmake/share/cmake"; fi
if [[ -z "$torch_cmake" && -z "${CMAKE_PREFIX_PATH:-}" ]]; then
  torch_cmake="$("$zoo_python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
fi
prefix_args=()
[[ -n "$torch_cmake" ]] && prefix_args=(-DCMAKE_PREFIX_PATH="$torch_cmake${CMAKE_PREFIX_PATH:+;$CMAKE_PREFIX_PATH}")
launcher_args=()
if command -v ccache > /dev/null; then
  # The precompiled LibTorch header is part of every compilation: ccache may reuse results only
  # when it hashes that header's content rather than its time stamps. Paths inside the source
  # tree are hashed relative to it, so another clone (CI's) reuses them too.
  launcher_args=(-DCMAKE_CXX_COMPILER_LAUNCHER="env;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;CCACHE_BASEDIR=$PWD;CCACHE_NOHASHDIR=1;ccache")
fi

build_dir="${ZOO_BUILD_DIR:-build}"
jobs="$(nproc)"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${ZOO_BUILD_TYPE:-Release}" "${prefix_args[@]}" \
  -DZOO_PYTHON="$zoo_python" -DZOO_REFERENCE_DIR="$zoo_cache/references" -DZOO_XGRAMMAR_DIR="$xgrammar_dir" \
  "${launcher_args[@]}" ${ZOO_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$jobs"
