"""The real Cluster API against the harness's control plane: sigs.k8s.io/cluster-api v1.14.2's
core manager (built from the Go module proxy by hack/build-cluster-api.sh), the control plane
being both its management cluster and the workload cluster of one Cluster, through the
admin kubeconfig in the Cluster's `<name>-kubeconfig` Secret.

No infrastructure, bootstrap or control-plane provider is served here, so this module stands
in for them with the least the contracts ask (CRDs labelled cluster.x-k8s.io/v1beta2:
v1alpha1): a FakeCluster provisioned with an endpoint, a FakeControlPlane that says it is
externally managed (so deleting a worker Machine is allowed, machine_controller.go
isDeleteNodeAllowed), a FakeMachine provisioned with the Node's providerID, and a bootstrap
data Secret. Everything the Machine controller then does to the Node (the Node found by its
providerID, the join-time annotations, the cordon, the evictions, the DELETE) is Cluster
API's own code. Its webhooks serve on loopback with a certificate from the harness's CA but
are not registered: objects are written complete.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from hack.actors import api
from hack.agentproc import free_port
from hack.kubeutil import wait_until
from hack.localcluster import pki
from nodeagent.kube.client import JSON, Kube, node_path

INFRA = "infrastructure.test.nodeagent.io"
CONTROL_PLANE = "controlplane.test.nodeagent.io"
CAPI = "/apis/cluster.x-k8s.io/v1beta2"
PROVIDER_PREFIX = "fake://"


def fake_crd(group: str, kind: str) -> JSON:
    """A provider CRD as the contract reads it: the version label, a status subresource."""
    plural = kind.lower() + "s"
    version = {
        "name": "v1alpha1",
        "served": True,
        "storage": True,
        "subresources": {"status": {}},
        "schema": {
            "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        },
    }
    names = {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": kind + "List"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{group}",
            "labels": {"cluster.x-k8s.io/v1beta2": "v1alpha1"},
        },
        "spec": {"group": group, "scope": "Namespaced", "names": names, "versions": [version]},
    }


FAKE_CRDS = (
    fake_crd(INFRA, "FakeCluster"),
    fake_crd(INFRA, "FakeMachine"),
    fake_crd(CONTROL_PLANE, "FakeControlPlane"),
)


def webhook_certs(workdir: Path) -> Path:
    """A serving certificate for the manager's (unregistered) webhook server."""
    ca = pki.ensure_ca(workdir / "capi-pki")
    certs = workdir / "capi-certs"
    pair = pki.KeyPair(certs / "tls.crt", certs / "tls.key")
    pki.issue(ca, pair, pki.subject("capi-webhook"), server_sans=("IP:127.0.0.1",))
    return certs


@dataclass
class RealClusterAPI:
    kube: Kube
    ns: str  # where the Cluster and its Machines live (the name of the Cluster too)
    proc: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, kube: Kube, kubeconfig: str, ns: str, workdir: Path) -> RealClusterAPI:
        """Install the CRDs, start the manager, create the Cluster `ns` in namespace `ns`."""
        exe = api.built("build-cluster-api.sh")  # built and cached on first use
        api.install_crds(kube, [*api.yaml_files(exe.parent / "crds"), *FAKE_CRDS])
        log = workdir / f"capi-{ns}.log"
        args = [
            str(exe),
            f"--kubeconfig={kubeconfig}",
            f"--webhook-cert-dir={webhook_certs(workdir)}",
            f"--webhook-port={free_port()}",
            f"--health-addr=127.0.0.1:{free_port()}",
            f"--diagnostics-address=127.0.0.1:{free_port()}",
            "--insecure-diagnostics",
            f"--namespace={ns}",  # this Cluster's objects only
        ]
        with log.open("ab") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        capi = cls(kube, ns, proc, log)
        try:
            capi._cluster(Path(kubeconfig).read_text())
        except BaseException:
            api.stop_process(proc)
            raise
        return capi

    def _post(self, path: str, body: JSON, status: JSON | None = None) -> None:
        created = self.kube.post(path, body)
        if status is not None:
            name = created["metadata"]["name"]
            self.kube.merge_patch(f"{path}/{name}/status", {"status": status})

    def _cluster(self, kubeconfig: str) -> None:
        ns, kube = self.ns, self.kube
        secret = {
            "metadata": {
                "name": f"{ns}-kubeconfig",
                "labels": {"cluster.x-k8s.io/cluster-name": ns},
            },
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"value": kubeconfig},
        }
        kube.post(f"/api/v1/namespaces/{ns}/secrets", secret)
        bootstrap = {"metadata": {"name": "bootstrap"}, "stringData": {"value": "#!/bin/true"}}
        kube.post(f"/api/v1/namespaces/{ns}/secrets", bootstrap)
        endpoint = {"host": "127.0.0.1", "port": int(kube.host.rsplit(":", 1)[1])}
        infra: JSON = {
            "apiVersion": f"{INFRA}/v1alpha1",
            "kind": "FakeCluster",
            "metadata": {"name": ns},
        }
        infra["spec"] = {"controlPlaneEndpoint": endpoint}
        provisioned = {"initialization": {"provisioned": True}, "ready": True}
        self._post(f"/apis/{INFRA}/v1alpha1/namespaces/{ns}/fakeclusters", infra, provisioned)
        cp = {
            "apiVersion": f"{CONTROL_PLANE}/v1alpha1",
            "kind": "FakeControlPlane",
            "metadata": {"name": ns},
        }
        external = {
            "externalManagedControlPlane": True,
            "initialization": {"controlPlaneInitialized": True},
        }
        cp_path = f"/apis/{CONTROL_PLANE}/v1alpha1/namespaces/{ns}/fakecontrolplanes"
        self._post(cp_path, cp | {"spec": {}}, external | {"ready": True, "initialized": True})
        spec = {
            "controlPlaneRef": {"apiGroup": CONTROL_PLANE, "kind": "FakeControlPlane", "name": ns},
            "infrastructureRef": {"apiGroup": INFRA, "kind": "FakeCluster", "name": ns},
        }
        body = {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster"}
        kube.post(
            f"{CAPI}/namespaces/{ns}/clusters", body | {"metadata": {"name": ns}, "spec": spec}
        )

    def adopt(self, node: str, timeout: float = 60) -> str:
        """A Machine for the simulated `node` (its providerID set to match), waited for until
        Cluster API has found the Node (status.nodeRef). Returns the Machine's name."""
        ns, kube, pid = self.ns, self.kube, PROVIDER_PREFIX + node
        kube.merge_patch(node_path(node), {"spec": {"providerID": pid}})
        fake: JSON = {"apiVersion": f"{INFRA}/v1alpha1", "kind": "FakeMachine"}
        fake |= {"metadata": {"name": node}, "spec": {"providerID": pid}}
        provisioned = {"initialization": {"provisioned": True}, "ready": True}
        self._post(f"/apis/{INFRA}/v1alpha1/namespaces/{ns}/fakemachines", fake, provisioned)
        spec = {
            "clusterName": ns,
            "bootstrap": {"dataSecretName": "bootstrap"},
            "infrastructureRef": {"apiGroup": INFRA, "kind": "FakeMachine", "name": node},
            "providerID": pid,
        }
        meta = {"name": node, "labels": {"cluster.x-k8s.io/cluster-name": ns}}
        body = {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine"}
        kube.post(f"{CAPI}/namespaces/{ns}/machines", body | {"metadata": meta, "spec": spec})
        wait_until(lambda: self.node_ref(node), timeout, f"Cluster API to find Node {node}")
        return node

    def node_ref(self, machine: str) -> str:
        if self.proc.poll() is not None:
            raise AssertionError(f"Cluster API exited with {self.proc.returncode}: {self.log}")
        obj = self.kube.get(f"{CAPI}/namespaces/{self.ns}/machines/{machine}")
        return str(((obj.get("status") or {}).get("nodeRef") or {}).get("name") or "")

    def delete_machine(self, machine: str) -> None:
        self.kube.delete(f"{CAPI}/namespaces/{self.ns}/machines/{machine}")

    def stop(self) -> None:
        """Stop the manager (the process this object started); release what it left."""
        api.stop_process(self.proc)
        for kind in ("machines", "clusters"):
            for obj in self.kube.get(f"{CAPI}/namespaces/{self.ns}/{kind}")["items"]:
                api.release(
                    self.kube, f"{CAPI}/namespaces/{self.ns}/{kind}/{obj['metadata']['name']}"
                )
