#!/usr/bin/env bash
# Fails when a production Go file under the given folders is longer than
# MAX_LINES (default 500), naming each such file and its length. Tests
# (*_test.go) and generated code (a "// Code generated ... DO NOT EDIT."
# line, the Go convention) are exempt. Usage: filelength.sh DIR...
set -euo pipefail
max=${MAX_LINES:-500}
[ $# -gt 0 ] || { echo "usage: $0 DIR..." >&2; exit 2; }

over=0
while IFS= read -r -d '' f; do
  if grep -qE '^// Code generated .* DO NOT EDIT\.$' "$f"; then
    continue
  fi
  n=$(wc -l < "$f")
  if [ "$n" -gt "$max" ]; then
    echo "$f: $n lines, over the $max-line limit for production Go files" >&2
    over=1
  fi
done < <(find "$@" -name '*.go' ! -name '*_test.go' -type f -print0 | sort -z)

if [ "$over" -ne 0 ]; then
  echo "split the files above along their concerns" >&2
  exit 1
fi
