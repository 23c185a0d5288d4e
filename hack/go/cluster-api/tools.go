//go:build tools

// Package tools pins Cluster API's core manager (its Machine controller drains and deletes
// the Node of a deleted Machine), run against the harness's control plane as both the
// management and the workload cluster (hack/build-cluster-api.sh,
// hack/actors/cluster_api_real.py).
package tools

import _ "sigs.k8s.io/cluster-api/core"
