#!/usr/bin/env bash
# Builds the real descheduler (sigs.k8s.io/descheduler/cmd/descheduler) into a
# cache directory keyed by its version; a warm run takes milliseconds.
# Usage: build.sh [CACHE_DIR]   (prints the bin directory on the last line)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1 == "require" && $2 == "sigs.k8s.io/descheduler" {print $3; exit} $1 == "sigs.k8s.io/descheduler" {print $2; exit}' "$here/go.mod")
[ -n "$version" ] || { echo "error: no sigs.k8s.io/descheduler requirement in $here/go.mod" >&2; exit 1; }
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/evictkit/descheduler-$version}
bin=$cache/bin
mkdir -p "$bin"

command -v go >/dev/null || { echo "error: no 'go' on PATH: install Go $(awk '$1 == "go" {print $2; exit}' "$here/go.mod") or newer (the descheduler is built from its Go module)" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

if [ ! -x "$bin/descheduler" ]; then
  if ! (cd "$here" && timeout 300 go mod download sigs.k8s.io/descheduler >/dev/null 2>&1); then
    echo "error: cannot download sigs.k8s.io/descheduler $version from the Go module proxy ($(go env GOPROXY)); check the network or GOPROXY" >&2
    exit 1
  fi
  echo "==> building descheduler $version ..." >&2
  start=$SECONDS
  (cd "$here" && go build -trimpath -o "$bin/descheduler.tmp" sigs.k8s.io/descheduler/cmd/descheduler)
  mv "$bin/descheduler.tmp" "$bin/descheduler"
  echo "    descheduler built in $((SECONDS - start))s" >&2
fi
echo "$bin"
