# Shared by the command-line test scripts (sourced): a scratch directory removed on exit, a
# 200 kB slice of the corpus, and `fails`, which runs a command that must fail.

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# fails PATTERN COMMAND...: non-zero exit and stderr matching PATTERN (extended regex).
fails() {
  local pattern="$1"; shift
  local status=0
  err=$("$@" 2>&1 >/dev/null) || status=$?
  [[ $status -ne 0 ]] || { echo "expected failure: $*"; exit 1; }
  grep -qE -- "$pattern" <<<"$err" || { echo "stderr of '$*' lacks '$pattern': $err"; exit 1; }
}

# slice CORPUS: writes the first 200 kB of CORPUS to $work/slice.txt.
slice() { head -c 200000 "$1" > "$work/slice.txt"; }
