//go:build tools

// Package descheduler pins the real descheduler that descheduler-bridge's
// end-to-end tests and demo run against. Nothing here is compiled into
// evictkit; build.sh builds the command into a cache directory keyed by the
// descheduler version.
package descheduler

import (
	_ "sigs.k8s.io/descheduler/cmd/descheduler"
)
