#!/usr/bin/env bash
# Runs a command that must fail: non-zero exit and stderr matching a pattern.
# Usage: expect_failure.sh PATTERN COMMAND [ARGS...]
pattern="$1"
shift
stderr=$("$@" 2>&1 >/dev/null)
status=$?
if [[ $status -eq 0 ]]; then
  echo "expected failure, but '$*' exited 0" >&2
  exit 1
fi
if ! grep -qE -- "$pattern" <<<"$stderr"; then
  echo "stderr of '$*' (exit $status) does not match '$pattern':" >&2
  echo "$stderr" >&2
  exit 1
fi
echo "failed as expected (exit $status): $stderr"
