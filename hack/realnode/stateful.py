"""A stateful workload on the real nodes' CSI attach path: the objects, built as data.

A static PersistentVolume on the mock CSI driver (hack/realnode/csi.py, attachRequired),
its ReadWriteOnce claim, and a StatefulSet of one replica using it. The builders are pure:
the storage tests (tests/test_storage_realnode.py) and the departure benchmark
(hack/departure/scene.py) post them with their own clients.
"""

from __future__ import annotations

from typing import Any

DRIVER = "csi-mock.nodeagent.test"
VA_PATH = "/apis/storage.k8s.io/v1/volumeattachments"
CSIDRIVERS = "/apis/storage.k8s.io/v1/csidrivers"
CLAIM = "data"

Obj = dict[str, Any]


def csidriver() -> Obj:
    return {
        "metadata": {"name": DRIVER},
        "spec": {
            "attachRequired": True,
            "podInfoOnMount": False,
            "volumeLifecycleModes": ["Persistent"],
        },
    }


def volume_id(handle: str) -> str:
    """The name the kubelet and the attach/detach controller give the volume."""
    return f"kubernetes.io/csi/{DRIVER}^{handle}"


def persistent_volume(name: str, ns: str, handle: str) -> Obj:
    """A static volume bound ahead to the claim `CLAIM` in `ns`.

    `handle`: one of the mock driver's own volumes, "1" to "3" (they live in its memory).
    """
    return {
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {"namespace": ns, "name": CLAIM},
            "csi": {"driver": DRIVER, "volumeHandle": handle},
        },
    }


def claim(ns: str, volume: str) -> Obj:
    return {
        "metadata": {"name": CLAIM, "namespace": ns},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": volume,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def statefulset(ns: str, name: str, labels: dict[str, str], spec: Obj) -> Obj:
    """One replica of `spec` with the claim mounted at /data in its first container."""
    spec = {**spec, "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": CLAIM}}]}
    first = {**spec["containers"][0], "volumeMounts": [{"name": "data", "mountPath": "/data"}]}
    spec["containers"] = [first, *spec["containers"][1:]]
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def on_node(attachments: list[Obj], node: str) -> list[Obj]:
    """The VolumeAttachments (a list's items) for `node`."""
    return [va for va in attachments if va["spec"]["nodeName"] == node]


def multi_attach(events: list[Obj]) -> list[str]:
    """The attach/detach controller's Multi-Attach errors among `events` (a list's items)."""
    return [e["message"] for e in events if "Multi-Attach" in (e.get("message") or "")]
