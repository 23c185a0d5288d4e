//go:build tools

// Package tools pins Karpenter's kwok provider: Karpenter's own controllers (provisioning,
// disruption, Node termination) with a cloud provider that creates Node objects, which the
// harness's simulated kubelet runs (hack/build-karpenter.sh, hack/actors/karpenter_real.py).
package tools

import _ "sigs.k8s.io/karpenter/kwok"
