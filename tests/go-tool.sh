# shellcheck shell=bash
# Sourced by the build.sh of a Go tool the tests run (tests/<tool>/build.sh): builds the tool's
# binaries from its Go module, at the version the tool's go.mod requires, into a cache
# directory keyed by that version, only when one is missing (a warm run takes milliseconds),
# and prints the bin directory on the last line, which evictkit_harness::cached_build reads.
#
# go_tool [--tags TAGS] TOOL MODULE WHAT TIMEOUT CACHE_DIR BINARY=PACKAGE...
#   TAGS       Go build tags of every binary
#   TOOL       the cache's name: ~/.cache/evictkit/TOOL-<version> unless CACHE_DIR is given
#   MODULE     the Go module tests/TOOL/go.mod requires
#   WHAT       how the error for a missing Go names the tool ("cosign", "the registry")
#   TIMEOUT    seconds the module's download may take
#   CACHE_DIR  the build.sh's own argument, or empty
#   BINARY=PACKAGE  a binary of bin/ and the package it is built from

go_tool() {
  local flags=(-trimpath)
  if [ "$1" = --tags ]; then
    flags+=(-tags "$2")
    shift 2
  fi
  local tool=$1 module=$2 what=$3 timeout=$4 cache_dir=$5
  shift 5
  local here version cache bin missing=no binary start
  here=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
  version=$(awk -v m="$module" '$1 == "require" && $2 == m {print $3; exit} $1 == m {print $2; exit}' "$here/go.mod")
  [ -n "$version" ] || { echo "error: no $module requirement in $here/go.mod" >&2; exit 1; }
  cache=${cache_dir:-${XDG_CACHE_HOME:-$HOME/.cache}/evictkit/$tool-$version}
  bin=$cache/bin
  mkdir -p "$bin"

  command -v go >/dev/null || { echo "error: no 'go' on PATH: install Go $(awk '$1 == "go" {print $2; exit}' "$here/go.mod") or newer ($what is built from its Go module)" >&2; exit 1; }
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

  # One build at a time per cache (the tests' threads may ask at once): two would write the same
  # temporary binaries, and one's removal of the build cache below would break the other's build.
  exec 9>"$cache/.build.lock"
  flock 9
  for binary in "$@"; do
    [ -x "$bin/${binary%%=*}" ] || missing=yes
  done
  if [ "$missing" = yes ]; then
    if ! (cd "$here" && timeout "$timeout" go mod download "$module" >/dev/null 2>&1); then
      echo "error: cannot download $module $version from the Go module proxy ($(go env GOPROXY)); check the network or GOPROXY" >&2
      exit 1
    fi
    echo "==> building $tool $version ..." >&2
    start=$SECONDS
    # A build cache of the tool's own, removed once its binaries are in place: the binaries are
    # what is kept, and the compiled packages (gigabytes) would otherwise fill the user's Go
    # cache until Go trims them days later (a CI machine ran out of disk).
    export GOCACHE=$cache/go-build
    for binary in "$@"; do
      (cd "$here" && go build "${flags[@]}" -o "$bin/${binary%%=*}.tmp" "${binary#*=}")
    done
    for binary in "$@"; do
      mv "$bin/${binary%%=*}.tmp" "$bin/${binary%%=*}"
    done
    rm -rf "$GOCACHE"
    echo "    $tool built in $((SECONDS - start))s" >&2
  fi
  echo "$bin"
}
