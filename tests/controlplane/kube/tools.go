//go:build tools

// Package tools only exists so that `go mod tidy` keeps the control-plane
// commands (and all of their dependencies) in go.mod / go.sum. It is never
// compiled: build.sh builds the commands by import path instead.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
