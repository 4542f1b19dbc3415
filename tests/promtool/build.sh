#!/usr/bin/env bash
# Builds promtool (github.com/prometheus/prometheus/cmd/promtool) into a cache
# directory keyed by the Prometheus module version; a warm run takes
# milliseconds. The alert check runs its `test rules` against the chart's
# rendered PrometheusRule. Service discovery is left out (-tags remove_all_sd):
# rule tests read no targets, and the build is a third of the size.
# Usage: build.sh [CACHE_DIR]   (prints the bin directory on the last line)
set -euo pipefail
# shellcheck source=tests/go-tool.sh
source "$(dirname "$0")/../go-tool.sh"
go_tool --tags remove_all_sd promtool github.com/prometheus/prometheus promtool 300 "${1:-}" \
  promtool=github.com/prometheus/prometheus/cmd/promtool
