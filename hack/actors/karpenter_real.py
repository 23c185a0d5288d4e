"""The real Karpenter against the harness's control plane: sigs.k8s.io/karpenter v1.15.0, its
kwok provider (built from the Go module proxy by hack/build-karpenter.sh), whose cloud
provider creates the Node objects that the simulated kubelet then runs (the NodePool's
template labels them nodeagent.io/simulated). Its provisioning, registration (finalizer,
labels), disruption and Node termination (taint, load-balancer label, tiered drain,
do-not-disrupt, finalizer) are Karpenter's own code; only the instances are fake.

The NodePool carries a taint of its own, so that Karpenter launches nodes only for the pods
of the test that tolerates it, never for another test's pending pods.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from hack.actors import api
from hack.agentproc import free_port
from hack.kubeutil import GROUP_LABEL, SIM_LABEL, wait_until
from nodeagent.kube.client import JSON, ApiError, Kube, api_stamp, node_path

NAMESPACE = "karpenter"
POOL_TAINT = "test.nodeagent.io/karpenter"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
INITIALIZED = "karpenter.sh/initialized"


def toleration(group: str) -> JSON:
    """What a pod needs to run on (and be provisioned for by) this NodePool."""
    return {"key": POOL_TAINT, "operator": "Equal", "value": group, "effect": "NoSchedule"}


def _ensure(kube: Kube, path: str, body: JSON) -> None:
    try:
        kube.post(path, body)
    except ApiError as exc:
        if exc.status != 409:
            raise


@dataclass
class RealKarpenter:
    kube: Kube
    group: str
    proc: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, kube: Kube, kubeconfig: str, group: str, workdir: Path) -> RealKarpenter:
        """Install the CRDs, start the controller, create a KWOKNodeClass and a NodePool
        named `group` whose nodes carry the group label."""
        exe = api.built("build-karpenter.sh")  # built and cached on first use
        api.install_crds(kube, api.yaml_files(exe.parent / "crds"))
        _ensure(kube, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        log = workdir / f"karpenter-{group}.log"
        env = dict(
            os.environ,
            KUBECONFIG=kubeconfig,
            SYSTEM_NAMESPACE=NAMESPACE,
            DISABLE_LEADER_ELECTION="true",
            METRICS_PORT=str(free_port()),
            HEALTH_PROBE_PORT=str(free_port()),
            LOG_LEVEL="debug",
        )
        with log.open("ab") as out:
            proc = subprocess.Popen([str(exe)], env=env, stdout=out, stderr=subprocess.STDOUT)
        karp = cls(kube, group, proc, log)
        try:
            karp._pool()
        except BaseException:
            api.stop_process(proc)
            raise
        return karp

    def _pool(self) -> None:
        kube, group = self.kube, self.group
        nodeclass: JSON = {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass"}
        nodeclass["metadata"] = {"name": group}
        _ensure(kube, "/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses", nodeclass)
        ref = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": group}
        linux = {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}
        template = {
            "metadata": {"labels": {SIM_LABEL: "true", GROUP_LABEL: group}},
            "spec": {
                "nodeClassRef": ref,
                "expireAfter": "Never",
                "requirements": [linux],
                "taints": [{"key": POOL_TAINT, "value": group, "effect": "NoSchedule"}],
            },
        }
        spec = {
            "template": template,
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
        }
        pool: JSON = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool"}
        pool |= {"metadata": {"name": group}, "spec": spec}
        _ensure(kube, "/apis/karpenter.sh/v1/nodepools", pool)

    def running(self) -> bool:
        return self.proc.poll() is None

    def nodes(self) -> list[JSON]:
        query = {"labelSelector": f"{NODEPOOL_LABEL}={self.group}"}
        return list(self.kube.request("GET", "/api/v1/nodes", query=query)["items"])

    def wait_node(self, timeout: float = 120) -> str:
        """A node Karpenter launched, registered and initialized for this NodePool."""

        def ready() -> str:
            if not self.running():
                raise AssertionError(f"Karpenter exited with {self.proc.returncode}: {self.log}")
            for node in self.nodes():
                if node["metadata"]["labels"].get(INITIALIZED) == "true":
                    return str(node["metadata"]["name"])
            return ""

        return str(wait_until(ready, timeout, f"Karpenter's node for {self.group}"))

    def nodeclaim(self, node: str, timeout: float = 30) -> JSON:
        """The NodeClaim whose status names `node`. Waited for, bounded: Karpenter writes
        the claim's nodeName in a status write of its own, which can land after the Node's
        initialized label (seen under load)."""

        def named() -> JSON | None:
            claims = self.kube.get("/apis/karpenter.sh/v1/nodeclaims")["items"]
            found = [c for c in claims if (c.get("status") or {}).get("nodeName") == node]
            return dict(found[0]) if len(found) == 1 else None

        return dict(wait_until(named, timeout, f"the NodeClaim of {node}"))

    def request_reboot(self, node: str) -> None:
        """What Karpenter's repair controller writes to reboot a node
        (pkg/controllers/disruption/repair.go, v1.15.0): the NodeClaim's condition
        Rebooting=True, reason RebootRequested, by status merge patch with the optimistic
        lock. The reboot controller (pkg/controllers/nodeclaim/reboot) does the rest."""
        claim = self.nodeclaim(node)
        meta = claim["metadata"]
        kept = [c for c in claim["status"].get("conditions") or [] if c["type"] != "Rebooting"]
        rebooting = {
            "type": "Rebooting",
            "status": "True",
            "reason": "RebootRequested",
            "message": "rebooting for a test",
            "lastTransitionTime": api_stamp(),
            "observedGeneration": meta["generation"],
        }
        body = {
            "metadata": {"resourceVersion": meta["resourceVersion"]},
            "status": {"conditions": [*kept, rebooting]},
        }
        self.kube.merge_patch(f"/apis/karpenter.sh/v1/nodeclaims/{meta['name']}/status", body)

    def rebooting(self, node: str) -> str:
        """The reason of the NodeClaim's Rebooting condition ("" when it has none)."""
        conds = self.nodeclaim(node)["status"].get("conditions") or []
        return next((str(c["reason"]) for c in conds if c["type"] == "Rebooting"), "")

    def stop(self) -> None:
        """Stop the controller (the process this object started), then delete the NodePool
        and whatever nodes it left, finalizers taken off: no Karpenter is left to act."""
        api.stop_process(self.proc)
        for path in (
            f"/apis/karpenter.sh/v1/nodepools/{self.group}",
            f"/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses/{self.group}",
        ):
            api.delete_path(self.kube, path)
        claims = self.kube.get("/apis/karpenter.sh/v1/nodeclaims")["items"]
        for claim in claims:
            if claim["metadata"].get("labels", {}).get(NODEPOOL_LABEL) == self.group:
                path = f"/apis/karpenter.sh/v1/nodeclaims/{claim['metadata']['name']}"
                api.release(self.kube, path)
        for node in self.nodes():
            api.release(self.kube, node_path(node["metadata"]["name"]))
