//go:build tools

// Package tools pins butane and ignition-validate, which hack/build-ignition builds to compile
// and check the Ignition configs in ignition/.
package tools

import (
	_ "github.com/coreos/butane/internal"
	_ "github.com/coreos/ignition/v2/validate"
)
