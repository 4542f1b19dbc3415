#!/usr/bin/env bash
# Builds the OCI registry (github.com/distribution/distribution/v3/cmd/registry,
# the CNCF distribution registry) into a cache directory keyed by its version;
# a warm run takes milliseconds.
# Usage: build.sh [CACHE_DIR]   (prints the bin directory on the last line)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
module=github.com/distribution/distribution/v3
version=$(awk -v m="$module" '$1 == "require" && $2 == m {print $3; exit} $1 == m {print $2; exit}' "$here/go.mod")
[ -n "$version" ] || { echo "error: no $module requirement in $here/go.mod" >&2; exit 1; }
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/evictkit/registry-$version}
bin=$cache/bin
mkdir -p "$bin"

command -v go >/dev/null || { echo "error: no 'go' on PATH: install Go $(awk '$1 == "go" {print $2; exit}' "$here/go.mod") or newer (the registry is built from its Go module)" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

if [ ! -x "$bin/registry" ]; then
  if ! (cd "$here" && timeout 300 go mod download "$module" >/dev/null 2>&1); then
    echo "error: cannot download $module $version from the Go module proxy ($(go env GOPROXY)); check the network or GOPROXY" >&2
    exit 1
  fi
  echo "==> building registry $version ..." >&2
  start=$SECONDS
  (cd "$here" && go build -trimpath -o "$bin/registry.tmp" "$module/cmd/registry")
  mv "$bin/registry.tmp" "$bin/registry"
  echo "    registry built in $((SECONDS - start))s" >&2
fi
echo "$bin"
