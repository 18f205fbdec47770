//go:build tools

// Package tools pins pilot-discovery's module so `go mod tidy` keeps it; the
// binary itself is built straight from istio.io/istio by build.sh.
package tools

import _ "istio.io/istio/pilot/cmd/pilot-discovery"
