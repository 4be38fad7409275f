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
  if ! diff -r -q "$tmp/notiflow" "$root/proto/notiflow" -x '*.proto' >/dev/null; then
    diff -r "$tmp/notiflow" "$root/proto/notiflow" -x '*.proto' | head -40 >&2 || true
    echo "proto: generated Go code is stale; run 'make proto' and commit the result" >&2
    exit 1
  fi
  echo "proto: generated code is up to date"
else
  gen "$root/proto"
fi
