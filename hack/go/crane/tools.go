//go:build tools

// Package tools pins crane from go-containerregistry: `crane registry serve` is the OCI
// registry the release tests push to and a real node pulls from, on loopback; `crane push`
// is how hack/release pushes the image index.
package tools

import _ "github.com/google/go-containerregistry/cmd/crane"
