#!/usr/bin/env bash
# Builds krew (sigs.k8s.io/krew/cmd/krew, as the kubectl plugin kubectl-krew) and
# its manifest validator (cmd/validate-krew-manifest) into a cache directory
# keyed by the krew version; a warm run takes milliseconds.
# Usage: build.sh [CACHE_DIR]   (prints the bin directory on the last line)
set -euo pipefail
# shellcheck source=tests/go-tool.sh
source "$(dirname "$0")/../go-tool.sh"
go_tool krew sigs.k8s.io/krew krew 300 "${1:-}" \
  kubectl-krew=sigs.k8s.io/krew/cmd/krew \
  validate-krew-manifest=sigs.k8s.io/krew/cmd/validate-krew-manifest
