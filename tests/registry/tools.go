//go:build tools

// Package registry pins the OCI registry (the CNCF distribution registry) that
// `cargo xtask registry up` runs and `cargo xtask release` pushes to. Nothing
// here is compiled into evictkit; build.sh builds the command into a cache
// directory keyed by the registry version.
package registry

import (
	_ "github.com/distribution/distribution/v3/cmd/registry"
)
