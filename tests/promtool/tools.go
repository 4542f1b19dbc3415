//go:build tools

// Package promtool pins promtool, the Prometheus rule tester that
// `cargo xtask test`'s alert check runs (`promtool test rules`) against the
// alerting rules the chart renders. Nothing here is compiled into evictkit;
// build.sh builds the command into a cache directory keyed by the Prometheus
// module version.
package promtool

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
