#!/usr/bin/env bash
# The layout's rules (ARCHITECTURE.md, "The picture"), checked on the source tree:
#  1. a folder includes only folders before it in the order below;
#  2. every folder holding C++ sources is in that order (a new system gets its place first);
#  3. tests mirror the sources: tests/F/NAME_test.cpp tests F/NAME.{h,cpp}.
# Usage: layout.sh SOURCE_DIR
set -euo pipefail
cd "$1"
order=(core templates tokenizers data kernels layers models inference train interop serve bench apps)
declare -A rank
for i in "${!order[@]}"; do rank[${order[$i]}]=$i; done
failures=0
fail() { echo "layout: $*" >&2; failures=$((failures + 1)); }

while IFS= read -r folder; do
  [[ -n "${rank[$folder]+x}" ]] || fail "$folder/ holds C++ sources but has no place in the order (${order[*]}): add it to ARCHITECTURE.md and here"
done < <(git ls-files '*.h' '*.cpp' | grep -v '^tests/' | grep / | cut -d/ -f1 | sort -u)

while IFS=: read -r file line text; do
  own="${file%%/*}"
  used=$(sed -E 's/^#include "([a-z_]+)\/.*/\1/' <<<"$text")
  [[ -n "${rank[$used]+x}" && -n "${rank[$own]+x}" ]] || continue
  if (( rank[$used] > rank[$own] )); then
    fail "$file:$line: $own/ includes $used/, which comes after it (${order[*]})"
  fi
done < <(git grep -n -E '^#include "[a-z_]+/' -- $(printf '%s/ ' "${order[@]}") | grep -v '^tests/')

while IFS= read -r test; do
  folder=$(cut -d/ -f2 <<<"$test")
  name=$(basename "$test" _test.cpp)
  [[ -n "${rank[$folder]+x}" ]] || continue
  [[ -e "$folder/$name.h" || -e "$folder/$name.cpp" ]] || fail "$test tests $folder/$name.{h,cpp}, which does not exist"
done < <(git ls-files 'tests/*_test.cpp')

if (( failures > 0 )); then
  echo "layout: $failures finding(s)" >&2
  exit 1
fi
echo "layout: ${#order[@]} folders in order, every include and test in place"
