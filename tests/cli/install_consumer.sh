#!/usr/bin/env bash
# Installs zoo into a temporary prefix and builds a separate CMake project against it with
# find_package(zoo): the export rules, the header layout and the SentencePiece module lookup.
set -euo pipefail
build_dir="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
mkdir -p "$work/app"
cat > "$work/app/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.18)
project(consumer CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(zoo REQUIRED)
add_executable(consumer main.cpp)
target_link_libraries(consumer PRIVATE zoo::zoo)
CMAKE
cat > "$work/app/main.cpp" <<'CPP'
#include <iostream>
#include "core/runtime.h"
#include "models/config.h"
#include "tokenizers/tokenizer.h"
int main() {
  auto config = zoo::load_config(zoo::find_config("gpt2-small"));
  std::cout << "zoo " << zoo::version() << " d_model " << config.d_model << "\n";
  std::cout << "sentencepiece module: " << zoo::sentencepiece_module_path() << "\n";
}
CPP
cmake -S "$work/app" -B "$work/app/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/app/build" >/dev/null
# A program installed into the prefix finds the module in its ../lib, without help.
cp "$work/app/build/consumer" "$work/prefix/bin/"
out=$(cd "$work" && unset ZOO_SENTENCEPIECE_MODULE && ZOO_CONFIG_DIR="$work/prefix/share/zoo/configs" "$work/prefix/bin/consumer")
echo "$out"
grep -q "d_model 768" <<<"$out"
grep -q "$work/prefix/lib/libzoo_sentencepiece.so" <<<"$out"
echo "install: ok"
