#!/usr/bin/env bash
# check-workspace-versions.sh: the workspace build (go.work: what `make
# build` and `make test` compile) and the image build (Dockerfile:
# GOWORK=off, each service from its own go.mod) resolve every external
# module the same way (make lint). For each service module it lists the
# module of every package its packages and their tests import, once in the
# workspace and once with GOWORK=off, and fails naming each module that
# resolves to two versions, with both. Modules of this repository (the
# workspace's own, directory replacements in GOWORK=off) are the same
# folders either way and are not compared.
#
# It compares packages, not `go list -m all`: the module graph also holds
# modules that contribute no package to a service (a test helper's
# dependency raised by another workspace module, e.g. the deploy module's
# Kubernetes libraries); those never reach a binary or a test run.
# To fix a mismatch, raise the requirement in the service's go.mod to the
# workspace's version (cd services/NAME && GOWORK=off go get MODULE@VERSION
# && GOWORK=off go mod tidy).
# Usage: check-workspace-versions.sh [SERVICE_DIR...] (default services/*/)
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

# path and effective version of the module behind each package; nothing for
# the main modules and for directory replacements (this repository's folders).
format='{{with .Module}}{{if not .Main}}{{if .Replace}}{{if .Replace.Version}}{{.Path}} {{if ne .Replace.Path .Path}}{{.Replace.Path}}@{{end}}{{.Replace.Version}}{{end}}{{else}}{{.Path}} {{.Version}}{{end}}{{end}}{{end}}'

list() { go list -deps -test -f "$format" ./... | sort -u; }

dirs=("$@")
if [ ${#dirs[@]} -eq 0 ]; then
  for d in services/*/; do dirs+=("${d%/}"); done
fi

failed=0
for dir in "${dirs[@]}"; do
  ws=$(cd "$dir" && list) || { echo "$dir: go list in the workspace failed" >&2; exit 1; }
  off=$(cd "$dir" && GOWORK=off list) || { echo "$dir: go list with GOWORK=off failed" >&2; exit 1; }
  mismatches=$(join <(echo "$ws") <(echo "$off") | awk '$2 != $3 {print}')
  missing=$(comm -3 <(echo "$ws" | cut -d' ' -f1) <(echo "$off" | cut -d' ' -f1))
  if [ -n "$mismatches" ]; then
    failed=1
    while read -r mod wsv offv; do
      echo "$dir: $mod resolves to $wsv in the workspace and to $offv with GOWORK=off (the image build)" >&2
    done <<< "$mismatches"
  fi
  if [ -n "$missing" ]; then
    failed=1
    echo "$dir: modules used in only one of the workspace and GOWORK=off builds:" >&2
    echo "$missing" | sed 's/^[[:space:]]*/  /' >&2
  fi
done

if [ "$failed" -ne 0 ]; then
  echo "make both agree, usually by raising the service's requirement to the workspace's version: cd DIR && GOWORK=off go get MODULE@VERSION && GOWORK=off go mod tidy" >&2
  exit 1
fi
