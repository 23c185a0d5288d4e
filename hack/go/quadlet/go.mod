// Wrapper module: builds podman's Quadlet generator alone from the Go module proxy.
module nodeagent.local/hack/go/quadlet

go 1.26.0

require github.com/containers/podman/v5 v5.7.1

require go.podman.io/storage v1.61.0 // indirect
