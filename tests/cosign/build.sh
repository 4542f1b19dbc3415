#!/usr/bin/env bash
# Builds cosign (github.com/sigstore/cosign/v2/cmd/cosign, sigstore's signing
# and verification command) into a cache directory keyed by its version; the
# installed stage of `cargo xtask test` verifies a release's signatures with it.
# A cold build takes minutes, a warm run milliseconds.
# Usage: build.sh [CACHE_DIR]   (prints the bin directory on the last line)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
module=github.com/sigstore/cosign/v2
version=$(awk -v m="$module" '$1 == "require" && $2 == m {print $3; exit} $1 == m {print $2; exit}' "$here/go.mod")
[ -n "$version" ] || { echo "error: no $module requirement in $here/go.mod" >&2; exit 1; }
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/evictkit/cosign-$version}
bin=$cache/bin
mkdir -p "$bin"

command -v go >/dev/null || { echo "error: no 'go' on PATH: install Go $(awk '$1 == "go" {print $2; exit}' "$here/go.mod") or newer (cosign is built from its Go module)" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

if [ ! -x "$bin/cosign" ]; then
  if ! (cd "$here" && timeout 600 go mod download "$module" >/dev/null 2>&1); then
    echo "error: cannot download $module $version from the Go module proxy ($(go env GOPROXY)); check the network or GOPROXY" >&2
    exit 1
  fi
  echo "==> building cosign $version ..." >&2
  start=$SECONDS
  (cd "$here" && go build -trimpath -o "$bin/cosign.tmp" "$module/cmd/cosign")
  mv "$bin/cosign.tmp" "$bin/cosign"
  echo "    cosign built in $((SECONDS - start))s" >&2
fi
echo "$bin"
