//go:build tools

// Package tools pins podman's Quadlet generator, which the tests run on
// ignition/fcos/nodeagent.container (Debian 12's podman predates Quadlet).
package tools

import _ "github.com/containers/podman/v5/cmd/quadlet"
