#!/usr/bin/env bash
# Builds actionlint (github.com/rhysd/actionlint/cmd/actionlint, the linter of
# GitHub Actions workflows) into a cache directory keyed by its version; a warm
# run takes milliseconds.
# Usage: build.sh [CACHE_DIR]   (prints the bin directory on the last line)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
module=github.com/rhysd/actionlint
version=$(awk -v m="$module" '$1 == "require" && $2 == m {print $3; exit} $1 == m {print $2; exit}' "$here/go.mod")
[ -n "$version" ] || { echo "error: no $module requirement in $here/go.mod" >&2; exit 1; }
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/evictkit/actionlint-$version}
bin=$cache/bin
mkdir -p "$bin"

command -v go >/dev/null || { echo "error: no 'go' on PATH: install Go $(awk '$1 == "go" {print $2; exit}' "$here/go.mod") or newer (actionlint is built from its Go module)" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

if [ ! -x "$bin/actionlint" ]; then
  if ! (cd "$here" && timeout 300 go mod download "$module" >/dev/null 2>&1); then
    echo "error: cannot download $module $version from the Go module proxy ($(go env GOPROXY)); check the network or GOPROXY" >&2
    exit 1
  fi
  echo "==> building actionlint $version ..." >&2
  start=$SECONDS
  (cd "$here" && go build -trimpath -o "$bin/actionlint.tmp" "$module/cmd/actionlint")
  mv "$bin/actionlint.tmp" "$bin/actionlint"
  echo "    actionlint built in $((SECONDS - start))s" >&2
fi
echo "$bin"
