#!/usr/bin/env bash
# Builds the test control plane into a cache directory keyed by the Kubernetes
# version: only what is missing is built, so a warm run takes seconds.
# Usage: build.sh [CACHE_DIR]   (prints the bin directory on the last line)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit} $1 == "require" && $2 == "k8s.io/kubernetes" {print $3; exit}' "$here/go.mod")
[ -n "$k8s_version" ] || { echo "error: no k8s.io/kubernetes requirement in $here/go.mod" >&2; exit 1; }
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

# Fail fast with one line when the module proxy cannot be reached.
if ! (cd "$here" && timeout 300 go mod download k8s.io/kubernetes >/dev/null 2>&1); then
  echo "error: cannot download k8s.io/kubernetes $k8s_version from the Go module proxy ($(go env GOPROXY)); check the network or GOPROXY" >&2
  exit 1
fi

build() { # name package
  local name=$1 pkg=$2
  if [ -x "$bin/$name" ]; then return; fi
  echo "==> building $name ($pkg) ..." >&2
  local start=$SECONDS
  (cd "$here" && go build -trimpath -tags selinux,notest,grpcnotrace -o "$bin/$name.tmp" "$pkg")
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
echo "$bin"
