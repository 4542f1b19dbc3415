//go:build tools

// Package actionlint pins actionlint, the linter of GitHub Actions workflows that
// `cargo xtask test` runs over .github/workflows/ (the release workflow cannot
// run here: no forge, no OIDC token). Nothing here is compiled into evictkit;
// build.sh builds the command into a cache directory keyed by its version.
package actionlint

import (
	_ "github.com/rhysd/actionlint/cmd/actionlint"
)
