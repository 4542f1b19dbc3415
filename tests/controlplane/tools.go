//go:build tools

// Package controlplane pins the Kubernetes control plane that evictkit's
// end-to-end tests, demo and chart checks run against. Nothing here is
// compiled into evictkit; build.sh builds each command below into a cache
// directory keyed by the Kubernetes version.
package controlplane

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
