#!/usr/bin/env bash
# Builds promtool (github.com/prometheus/prometheus/cmd/promtool) into a cache
# directory keyed by the Prometheus module version; a warm run takes
# milliseconds. The alert check runs its `test rules` against the chart's
# rendered PrometheusRule. Service discovery is left out (-tags remove_all_sd):
# rule tests read no targets, and the build is a third of the size.
# Usage: build.sh [CACHE_DIR]   (prints the bin directory on the last line)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
module=github.com/prometheus/prometheus
version=$(awk -v m="$module" '$1 == "require" && $2 == m {print $3; exit} $1 == m {print $2; exit}' "$here/go.mod")
[ -n "$version" ] || { echo "error: no $module requirement in $here/go.mod" >&2; exit 1; }
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/evictkit/promtool-$version}
bin=$cache/bin
mkdir -p "$bin"

command -v go >/dev/null || { echo "error: no 'go' on PATH: install Go $(awk '$1 == "go" {print $2; exit}' "$here/go.mod") or newer (promtool is built from its Go module)" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

if [ ! -x "$bin/promtool" ]; then
  if ! (cd "$here" && timeout 300 go mod download "$module" >/dev/null 2>&1); then
    echo "error: cannot download $module $version from the Go module proxy ($(go env GOPROXY)); check the network or GOPROXY" >&2
    exit 1
  fi
  echo "==> building promtool $version ..." >&2
  start=$SECONDS
  (cd "$here" && go build -trimpath -tags remove_all_sd -o "$bin/promtool.tmp" "$module/cmd/promtool")
  mv "$bin/promtool.tmp" "$bin/promtool"
  echo "    promtool built in $((SECONDS - start))s" >&2
fi
echo "$bin"
