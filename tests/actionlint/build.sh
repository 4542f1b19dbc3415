#!/usr/bin/env bash
# Builds actionlint (github.com/rhysd/actionlint/cmd/actionlint, the linter of
# GitHub Actions workflows) into a cache directory keyed by its version; a warm
# run takes milliseconds.
# Usage: build.sh [CACHE_DIR]   (prints the bin directory on the last line)
set -euo pipefail
# shellcheck source=tests/go-tool.sh
source "$(dirname "$0")/../go-tool.sh"
go_tool actionlint github.com/rhysd/actionlint actionlint 300 "${1:-}" \
  actionlint=github.com/rhysd/actionlint/cmd/actionlint
