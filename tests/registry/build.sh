#!/usr/bin/env bash
# Builds the OCI registry (github.com/distribution/distribution/v3/cmd/registry,
# the CNCF distribution registry) into a cache directory keyed by its version;
# a warm run takes milliseconds.
# Usage: build.sh [CACHE_DIR]   (prints the bin directory on the last line)
set -euo pipefail
# shellcheck source=tests/go-tool.sh
source "$(dirname "$0")/../go-tool.sh"
go_tool registry github.com/distribution/distribution/v3 "the registry" 300 "${1:-}" \
  registry=github.com/distribution/distribution/v3/cmd/registry
