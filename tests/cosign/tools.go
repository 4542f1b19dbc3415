//go:build tools

// Package cosign pins the cosign command the installed stage of `cargo xtask test` verifies a
// release's image signatures with, as a user does (`cosign verify --key cosign.pub`). Nothing
// here is compiled into evictkit; build.sh builds the command into a cache directory keyed by
// the cosign version.
package cosign

import (
	_ "github.com/sigstore/cosign/v2/cmd/cosign"
)
