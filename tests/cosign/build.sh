#!/usr/bin/env bash
# Builds cosign (github.com/sigstore/cosign/v2/cmd/cosign, sigstore's signing
# and verification command) into a cache directory keyed by its version; the
# installed stage of `cargo xtask test` verifies a release's signatures with it.
# A cold build takes minutes, a warm run milliseconds.
# Usage: build.sh [CACHE_DIR]   (prints the bin directory on the last line)
set -euo pipefail
# shellcheck source=tests/go-tool.sh
source "$(dirname "$0")/../go-tool.sh"
go_tool cosign github.com/sigstore/cosign/v2 cosign 600 "${1:-}" \
  cosign=github.com/sigstore/cosign/v2/cmd/cosign
