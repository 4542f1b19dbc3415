//go:build tools

// Package krew pins krew (the kubectl plugin manager) and its manifest validator
// (validate-krew-manifest, the check krew-index runs on every plugin manifest),
// which the release's tests run over plugins/evictkit.yaml rendered for a
// stand-in archive: the validator installs each platform with `kubectl krew
// install --manifest`. Nothing here is compiled into evictkit; build.sh builds
// the commands into a cache directory keyed by the krew version.
package krew

import (
	_ "sigs.k8s.io/krew/cmd/krew"
	_ "sigs.k8s.io/krew/cmd/validate-krew-manifest"
)
