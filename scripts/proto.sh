#!/usr/bin/env bash
# Regenerates the Go code of the event contract from proto/notiflow/v1/*.proto
# with Debian's protoc and a pinned protoc-gen-go. With --check it generates
# into a temporary folder and fails when the committed code differs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
PROTOC_GEN_GO_VERSION=v1.36.12
bin="$root/.deps/bin"

if ! command -v protoc >/dev/null 2>&1; then
  echo "installing protobuf-compiler (protoc)" >&2
  apt-get install -y -qq protobuf-compiler >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq protobuf-compiler >/dev/null; }
fi
if [ ! -x "$bin/protoc-gen-go" ] || [ "$(cat "$bin/.protoc-gen-go.version" 2>/dev/null)" != "$PROTOC_GEN_GO_VERSION" ]; then
  mkdir -p "$bin"
  GOBIN="$bin" GOWORK=off go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
  echo "$PROTOC_GEN_GO_VERSION" > "$bin/.protoc-gen-go.version"
fi

gen() {
  local out=$1
  (cd "$root/proto" && PATH="$bin:$PATH" protoc -I . --go_out="$out" --go_opt=paths=source_relative notiflow/v1/*.proto)
}

if [ "${1:-}" = "--check" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  gen "$tmp"
  # Only the *.pb.go files are generated; hand-written Go files (names.go)
  # sit beside them and are not compared.
  list() { (cd "$1" && find notiflow -name '*.pb.go' | sort); }
  stale=0
  if [ "$(list "$tmp")" != "$(list "$root/proto")" ]; then
    diff <(list "$tmp") <(list "$root/proto") >&2 || true
    stale=1
  fi
  for f in $(list "$tmp"); do
    if ! cmp -s "$tmp/$f" "$root/proto/$f"; then
      diff "$tmp/$f" "$root/proto/$f" | head -40 >&2 || true
      stale=1
    fi
  done
  if [ "$stale" = 1 ]; then
    echo "proto: generated Go code is stale; run 'make proto' and commit the result" >&2
    exit 1
  fi
  echo "proto: generated code is up to date"
else
  gen "$root/proto"
fi
