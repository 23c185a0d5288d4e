"""The other actors on a Node, as API writes: what the Cluster Autoscaler, Karpenter, kured,
aws-node-termination-handler, Cluster API and a person with kubectl write to a Node and its
pods, in their order, with their verbs and patch types, against the harness's control plane.

None of these tools can be built here (the Go module proxy refuses kured, the autoscaler and
NTH; Karpenter's and Cluster API's controllers need their own CRDs and cloud), so each module
re-enacts one tool's writes step by step, each write citing the tool's file, version and
function so that anyone can check it against the original:

- cluster_autoscaler.py  kubernetes/autoscaler cluster-autoscaler-1.36.1 (scale-down actuation)
- karpenter.py           kubernetes-sigs/karpenter v1.14.1 (Node termination, disruption taint)
- kured.py               kubereboot/kured 1.23.0 (lock, drain, reboot, uncordon after boot)
- nth.py                 aws/aws-node-termination-handler v1.25.6 (IMDS mode drain and cancel)
- cluster_api.py         kubernetes-sigs/cluster-api v1.14.0 (Machine deletion: drain, delete)
- kubectl.py             kubernetes/kubectl v0.36.2 (pkg/drain, the library kured and NTH use;
                         kubectl cordon, drain, delete node)

Every wait is bounded: where the tool itself waits forever (kubectl's drain with Timeout 0),
the harness's `bound` ends it with ActorTimeout.
"""
