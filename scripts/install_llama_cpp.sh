#!/usr/bin/env bash
# llama.cpp for zoo bench's anchor rows (--llama-cpp): llama-cpp-python, which builds llama.cpp
# from its source for this CPU, installed beside setup's Python environment (not into it), and
# the converter its source carries (convert_hf_to_gguf.py with gguf-py), which writes GGUF files
# from a Hugging Face directory. Not part of setup or CI: building takes ~15 minutes on 2 cores.
# Pinned by version and hash; the package index is pip's own configuration.
#   scripts/install_llama_cpp.sh      installs into $ZOO_DATA_DIR/llama-cpp (site/, convert/)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
[[ -x "$zoo_python" ]] || { echo "install_llama_cpp: $zoo_python not found: run scripts/setup.sh first" >&2; exit 1; }

version=0.3.36
sdist="llama_cpp_python-$version.tar.gz"
sdist_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
diskcache_sha256=5e31b2d5fbad117cc363ebaf6b689474db18a1f6438bc82358b024abd4c2ca19
# For this CPU, but without ggml's AMX int8 product: on a Xeon with amx_int8, llama.cpp 0.3.36's
# ggml_backend_amx_mul_mat crashed (SIGSEGV) on the first Q8_0 product of gpt2-small. GCC's
# explicit -mno-* flags win over -march=native's.
cmake_args="-DGGML_NATIVE=ON -DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8 ${ZOO_LLAMA_CMAKE_ARGS:-}"
stamp="$version $cmake_args"
target="$zoo_cache/llama-cpp"
if [[ -f "$target/.version" && "$(cat "$target/.version")" == "$stamp" ]]; then
  echo "install_llama_cpp: llama-cpp-python $version already in $target"
  exit 0
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/zoo-llama-cpp.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$zoo_python" -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$work"
echo "$sdist_sha256  $work/$sdist" | sha256sum -c --quiet -
cat > "$work/requirements.txt" <<REQ
$work/$sdist --hash=sha256:$sdist_sha256
diskcache==5.6.3 --hash=sha256:$diskcache_sha256
REQ
echo "install_llama_cpp: building llama.cpp $version for this CPU ($cmake_args; minutes)"
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" CMAKE_ARGS="$cmake_args" \
  "$zoo_python" -m pip install -q --no-deps --require-hashes --target "$work/site" -r "$work/requirements.txt"
tar xzf "$work/$sdist" -C "$work" "llama_cpp_python-$version/vendor/llama.cpp/convert_hf_to_gguf.py" \
  "llama_cpp_python-$version/vendor/llama.cpp/conversion" "llama_cpp_python-$version/vendor/llama.cpp/gguf-py"
mv "$work/llama_cpp_python-$version/vendor/llama.cpp" "$work/convert"
echo "$stamp" > "$work/.version-new"

# In place of an earlier version only once the new one is whole.
rm -rf "$target.new" && mkdir -p "$target.new"
mv "$work/site" "$work/convert" "$target.new/"
mv "$work/.version-new" "$target.new/.version"
rm -rf "$target" && mv "$target.new" "$target"
echo "install_llama_cpp: installed into $target"
