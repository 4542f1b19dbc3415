#!/usr/bin/env bash
# Builds the real descheduler (sigs.k8s.io/descheduler/cmd/descheduler) into a
# cache directory keyed by its version; a warm run takes milliseconds.
# Usage: build.sh [CACHE_DIR]   (prints the bin directory on the last line)
set -euo pipefail
# shellcheck source=tests/go-tool.sh
source "$(dirname "$0")/../go-tool.sh"
go_tool descheduler sigs.k8s.io/descheduler "the descheduler" 300 "${1:-}" \
  descheduler=sigs.k8s.io/descheduler/cmd/descheduler
