#!/usr/bin/env bash
# Builds the test control plane into a cache directory keyed by the Kubernetes
# version: only what is missing is built, so a warm run takes seconds.
# Usage: build.sh [--kubernetes VERSION] [CACHE_DIR]   (prints the bin directory on the last line)
# Without --kubernetes it builds the version go.mod pins. Another version (e.g. v1.35.4) is
# built from a module generated in its cache directory: the same tools.go, k8s.io/kubernetes at
# that version and its staging modules (k8s.io/api, ...) at the matching v0.x.y, as
# k8s.io/kubernetes's own go.mod replaces them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pinned=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit} $1 == "require" && $2 == "k8s.io/kubernetes" {print $3; exit}' "$here/go.mod")
[ -n "$pinned" ] || { echo "error: no k8s.io/kubernetes requirement in $here/go.mod" >&2; exit 1; }
k8s_version=$pinned
if [ "${1:-}" = --kubernetes ]; then
  k8s_version=${2:?--kubernetes needs a version, e.g. v1.35.4}
  shift 2
fi
[[ $k8s_version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "error: $k8s_version is not a Kubernetes release (vMAJOR.MINOR.PATCH)" >&2; exit 1; }
staging_version=v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}
kwok_version=v0.8.0
helm_version=v3.19.5
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/evictkit/k8s-$k8s_version}
bin=$cache/bin
mkdir -p "$bin"
# One build at a time per cache: two at once would write the same temporary files.
exec 9>"$cache/.build.lock"
flock 9

command -v go >/dev/null || { echo "error: no 'go' on PATH: install Go 1.26 or newer (the control plane is built from Go modules)" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
# A build cache of the control plane's own, removed once every binary is in place (the end of
# this script): the binaries are what is kept, and the compiled packages (6 GB) would otherwise
# fill the user's Go cache until Go trims them days later (a CI machine ran out of disk).
export GOCACHE=$cache/go-build

# Fail fast with one line when the module proxy cannot be reached (or does not serve the version).
if ! k8s_gomod=$(cd "$cache" && GOFLAGS= timeout 300 go mod download -json "k8s.io/kubernetes@$k8s_version" | awk -F'"' '$2 == "GoMod" {print $4}') || [ -z "$k8s_gomod" ]; then
  echo "error: cannot download k8s.io/kubernetes $k8s_version from the Go module proxy ($(go env GOPROXY)); check the network, GOPROXY and the version" >&2
  exit 1
fi

module=$here
if [ "$k8s_version" != "$pinned" ]; then
  module=$cache/module
  if [ ! -f "$module/go.sum" ]; then
    echo "==> resolving the modules of k8s.io/kubernetes $k8s_version ..." >&2
    rm -rf "$module.tmp" && mkdir -p "$module.tmp"
    cp "$here/tools.go" "$module.tmp/"
    {
      echo "module evictkit.io/tests/controlplane"
      echo
      echo "go 1.26.0"
      echo
      echo "require k8s.io/kubernetes $k8s_version"
      echo
      echo "replace ("
      # k8s.io/kubernetes replaces each staging module by its ./staging/src copy; the
      # published copy of each is tagged v0.MINOR.PATCH.
      awk '$2 == "=>" && $3 ~ /^\.\/staging\/src\// {print $1}' "$k8s_gomod" | sort -u |
        while read -r staging; do echo "	$staging => $staging $staging_version"; done
      echo ")"
    } >"$module.tmp/go.mod"
    (cd "$module.tmp" && go mod tidy >&2)
    rm -rf "$module" && mv "$module.tmp" "$module"
  fi
fi

build() { # name package
  local name=$1 pkg=$2
  if [ -x "$bin/$name" ]; then return; fi
  echo "==> building $name ($pkg) ..." >&2
  local start=$SECONDS
  (cd "$module" && go build -trimpath -tags selinux,notest,grpcnotrace -o "$bin/$name.tmp" "$pkg")
  mv "$bin/$name.tmp" "$bin/$name"
  echo "    $name built in $((SECONDS - start))s" >&2
}

install() { # name module@version
  local name=$1 pkg=$2
  if [ -x "$bin/$name" ]; then return; fi
  echo "==> installing $name ($pkg) ..." >&2
  local start=$SECONDS tmp
  tmp=$(mktemp -d)
  GOBIN=$tmp GOFLAGS= go install -trimpath "$pkg"
  mv "$tmp/$name" "$bin/$name"
  rmdir "$tmp"
  echo "    $name installed in $((SECONDS - start))s" >&2
}

build etcd go.etcd.io/etcd/server/v3
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build kubectl k8s.io/kubernetes/cmd/kubectl
build kubelet k8s.io/kubernetes/cmd/kubelet
build kube-proxy k8s.io/kubernetes/cmd/kube-proxy
install kwok "sigs.k8s.io/kwok/cmd/kwok@$kwok_version"
install helm "helm.sh/helm/v3/cmd/helm@$helm_version"

# kwok's stage files (how simulated nodes and pods move through their lives)
# come from its module source.
if [ ! -d "$cache/kwok-stages" ]; then
  src=$(GOFLAGS= go mod download -json "sigs.k8s.io/kwok@$kwok_version" | awk -F'"' '$2 == "Dir" {print $4}')
  mkdir -p "$cache/kwok-stages.tmp"
  cp -r "$src/kustomize/stage/." "$cache/kwok-stages.tmp/"
  chmod -R u+w "$cache/kwok-stages.tmp"
  mv "$cache/kwok-stages.tmp" "$cache/kwok-stages"
fi
rm -rf "$GOCACHE"
echo "$bin"
