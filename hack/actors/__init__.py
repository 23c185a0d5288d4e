"""The other actors on a Node, as API writes: what the Cluster Autoscaler, Karpenter, kured,
aws-node-termination-handler, Cluster API and a person with kubectl write to a Node and its
pods, in their order, with their verbs and patch types, against the harness's control plane.

The Go module proxy refuses kured, the autoscaler and NTH, so each module below re-enacts one
tool's writes step by step, each write citing the tool's file, version and function so that
anyone can check it against the original:

- cluster_autoscaler.py  kubernetes/autoscaler cluster-autoscaler-1.36.1 (scale-down actuation)
- karpenter.py           kubernetes-sigs/karpenter v1.14.1 (Node termination, disruption taint)
- kured.py               kubereboot/kured 1.23.0 (lock, drain, reboot, uncordon after boot)
- nth.py                 aws/aws-node-termination-handler v1.25.6 (IMDS mode drain and cancel)
- cluster_api.py         kubernetes-sigs/cluster-api v1.14.0 (Machine deletion: drain, delete)
- kubectl.py             kubernetes/kubectl v0.36.2 (pkg/drain, the library kured and NTH use;
                         kubectl cordon, drain, delete node)

Where the proxy serves the tool, the real controller runs against the control plane too:
- karpenter_real.py      sigs.k8s.io/karpenter v1.15.0, its kwok provider (hack/build-karpenter.sh):
                         the simulated kubelet runs the Nodes it creates; termination and reboot
- cluster_api_real.py    sigs.k8s.io/cluster-api v1.14.2's core manager (hack/build-cluster-api.sh),
                         with stand-in provider objects; a Machine's deletion drains its Node

Every wait is bounded: where the tool itself waits forever (kubectl's drain with Timeout 0),
the harness's `bound` ends it with ActorTimeout.
"""
