//go:build tools

// Package tools keeps the etcd server command in go.mod / go.sum for
// `go mod tidy`; it is never compiled.
package tools

import _ "go.etcd.io/etcd/server/v3"
