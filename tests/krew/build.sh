#!/usr/bin/env bash
# Builds krew (sigs.k8s.io/krew/cmd/krew, as the kubectl plugin kubectl-krew) and
# its manifest validator (cmd/validate-krew-manifest) into a cache directory
# keyed by the krew version; a warm run takes milliseconds.
# Usage: build.sh [CACHE_DIR]   (prints the bin directory on the last line)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
module=sigs.k8s.io/krew
version=$(awk -v m="$module" '$1 == "require" && $2 == m {print $3; exit} $1 == m {print $2; exit}' "$here/go.mod")
[ -n "$version" ] || { echo "error: no $module requirement in $here/go.mod" >&2; exit 1; }
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/evictkit/krew-$version}
bin=$cache/bin
mkdir -p "$bin"

command -v go >/dev/null || { echo "error: no 'go' on PATH: install Go $(awk '$1 == "go" {print $2; exit}' "$here/go.mod") or newer (krew is built from its Go module)" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

if [ ! -x "$bin/kubectl-krew" ] || [ ! -x "$bin/validate-krew-manifest" ]; then
  if ! (cd "$here" && timeout 300 go mod download "$module" >/dev/null 2>&1); then
    echo "error: cannot download $module $version from the Go module proxy ($(go env GOPROXY)); check the network or GOPROXY" >&2
    exit 1
  fi
  echo "==> building krew $version ..." >&2
  start=$SECONDS
  (cd "$here" && go build -trimpath -o "$bin/kubectl-krew.tmp" "$module/cmd/krew" \
    && go build -trimpath -o "$bin/validate-krew-manifest.tmp" "$module/cmd/validate-krew-manifest")
  mv "$bin/kubectl-krew.tmp" "$bin/kubectl-krew"
  mv "$bin/validate-krew-manifest.tmp" "$bin/validate-krew-manifest"
  echo "    krew built in $((SECONDS - start))s" >&2
fi
echo "$bin"
