"""Pure builders for the node and pod status documents the kubelet simulator writes."""

from __future__ import annotations

import hashlib
import uuid
import zlib
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from hack.k8sversion import kubelet_version

from .quantity import kubelet_units, parse_quantity

JSON = dict[str, Any]

DEFAULT_CAPACITY = {"cpu": "32", "memory": "64Gi", "pods": "250", "ephemeral-storage": "100Gi"}
MEMORY_OK = "kubelet has sufficient memory available"
NODE_CONDITIONS = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", MEMORY_OK),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)
REJECT_MESSAGES = {
    "NodeShutdown": "Pod was rejected as the node is shutting down.",
    "NodeAffinity": (
        "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
    ),
    "NodeName": "Predicate NodeName failed: node(s) didn't match the requested node name",
    "Evicted": "The node had condition: [MemoryPressure]. ",
}


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def node_ip(node: JSON) -> str:
    """Keep the InternalIP the node has; else a stable loopback address from its name."""
    for addr in (node.get("status") or {}).get("addresses") or []:
        if addr.get("type") == "InternalIP":
            return str(addr["address"])
    h = zlib.crc32(node["metadata"]["name"].encode()) % 65000 + 1
    return f"127.1.{h >> 8}.{h & 255}"


def pod_ip(counter: int) -> str:
    """The counter-th pod address, in 127.128.0.0/9 (never routable off this machine)."""
    n = counter % (1 << 23) + 1
    return f"127.{128 + (n >> 16)}.{(n >> 8) & 255}.{n & 255}"


def _condition(old: JSON | None, ctype: str, status: str, stamp: str, **extra: str) -> JSON:
    same = old is not None and old.get("status") == status and old.get("lastTransitionTime")
    since = old["lastTransitionTime"] if same and old else stamp
    return {"type": ctype, "status": status, "lastTransitionTime": since, **extra}


def node_status(node: JSON, boot_id: str) -> JSON:
    """A status patch (strategic merge) that makes the node Ready with this boot ID."""
    name = node["metadata"]["name"]
    status = node.get("status") or {}
    stamp = now()
    old = {c.get("type"): c for c in status.get("conditions") or []}
    conditions = [
        _condition(old.get(t), t, s, stamp, reason=r, message=m, lastHeartbeatTime=stamp)
        for t, s, r, m in NODE_CONDITIONS
    ]
    ip = node_ip(node)
    patch: JSON = {
        "conditions": conditions,
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": _node_info(name, boot_id),
    }
    capacity = status.get("capacity") or DEFAULT_CAPACITY
    if not status.get("capacity"):
        patch["capacity"] = capacity
    if not status.get("allocatable"):
        patch["allocatable"] = capacity
    return {"status": patch}


def _node_info(name: str, boot_id: str) -> JSON:
    return {
        "machineID": hashlib.md5(name.encode()).hexdigest(),
        "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
        "bootID": boot_id,
        "kernelVersion": "6.1.0-sim",
        "osImage": "nodeagent kubelet simulator",
        "containerRuntimeVersion": "sim://1.0.0",
        "kubeletVersion": kubelet_version(),
        "operatingSystem": "linux",
        "architecture": "amd64",
    }


def node_is_current(node: JSON, boot_id: str) -> bool:
    status = node.get("status") or {}
    if (status.get("nodeInfo") or {}).get("bootID") != boot_id:
        return False
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    return bool(ready) and ready[0].get("status") == "True"


def pod_conditions(pod: JSON, wanted: dict[str, bool], stamp: str) -> list[JSON]:
    """The pod's conditions with `wanted` types set; others (DisruptionTarget...) kept."""
    old = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
    gates = [g.get("conditionType") for g in (pod["spec"].get("readinessGates") or [])]
    if "Ready" in wanted:
        wanted = dict(wanted)
        wanted["Ready"] = wanted["Ready"] and all(
            (old.get(g) or {}).get("status") == "True" for g in gates
        )
    out = [c for t, c in old.items() if t not in wanted]
    for ctype, value in wanted.items():
        out.append(_condition(old.get(ctype), ctype, "True" if value else "False", stamp))
    return out


def _container(pod_uid: str, spec: JSON, ready: bool, state: JSON) -> JSON:
    image = str(spec.get("image") or "")
    return {
        "name": spec["name"],
        "image": image,
        "imageID": f"sim://{image}",
        "containerID": f"sim://{pod_uid[:8]}-{spec['name']}",
        "ready": ready,
        "started": "running" in state,
        "restartCount": 0,
        "state": state,
    }


def running_status(pod: JSON, host_ip: str, ip: str, ready: bool) -> JSON:
    """Status patch (merge) for a pod whose containers have all started."""
    stamp = now()
    spec, uid = pod["spec"], pod["metadata"]["uid"]
    start = (pod.get("status") or {}).get("startTime") or stamp
    running = {"running": {"startedAt": start}}
    done = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": start}}
    done["terminated"]["finishedAt"] = start
    inits = []
    for c in spec.get("initContainers") or []:
        sidecar = c.get("restartPolicy") == "Always"  # keeps running next to the app
        inits.append(_container(uid, c, ready or not sidecar, running if sidecar else done))
    conditions = {
        "PodReadyToStartContainers": True,
        "Initialized": True,
        "ContainersReady": ready,
        "Ready": ready,
        "PodScheduled": True,
    }
    status: JSON = {
        "phase": "Running",
        "conditions": pod_conditions(pod, conditions, stamp),
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": host_ip if spec.get("hostNetwork") else ip,
        "podIPs": [{"ip": host_ip if spec.get("hostNetwork") else ip}],
        "startTime": start,
        "containerStatuses": [_container(uid, c, ready, running) for c in spec["containers"]],
    }
    if inits:
        status["initContainerStatuses"] = inits
    return {"metadata": {"uid": uid}, "status": status}


def ready_status(pod: JSON) -> JSON:
    """Status patch (merge) flipping a running pod's containers to ready."""
    status = pod.get("status") or {}
    conditions = pod_conditions(pod, {"ContainersReady": True, "Ready": True}, now())
    containers = [{**c, "ready": True} for c in status.get("containerStatuses") or []]
    patch: JSON = {"conditions": conditions, "containerStatuses": containers}
    return {"metadata": {"uid": pod["metadata"]["uid"]}, "status": patch}


def rejected_status(pod: JSON, reason: str, message: str) -> JSON:
    """Status patch (merge) like the kubelet's rejectPod: Failed, reason, message."""
    status = {"phase": "Failed", "reason": reason, "message": f"Pod was rejected: {message}"}
    return {"metadata": {"uid": pod["metadata"]["uid"]}, "status": status}


SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."


def shutdown_status(pod: JSON, at: str) -> JSON:
    """Status patch (merge) like the kubelet's graceful node shutdown
    (pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go): Failed, reason
    Terminated, DisruptionTarget=True/TerminationByKubelet, containers terminated."""
    target = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "TerminationByKubelet",
        "message": SHUTDOWN_MESSAGE,
        "lastTransitionTime": at,
    }
    conditions = [
        c
        for c in pod_conditions(pod, {"Ready": False, "ContainersReady": False}, at)
        if c.get("type") != "DisruptionTarget"
    ]
    terminated = {"terminated": {"exitCode": 137, "reason": "Error", "finishedAt": at}}
    containers = [
        _container(pod["metadata"]["uid"], c, False, terminated)
        for c in pod["spec"].get("containers") or []
    ]
    status = {
        "phase": "Failed",
        "reason": "Terminated",
        "message": SHUTDOWN_MESSAGE,
        "conditions": [*conditions, target],
        "containerStatuses": containers,
    }
    return {"metadata": {"uid": pod["metadata"]["uid"]}, "status": status}


def pod_request(pod: JSON, resource: str) -> Decimal:
    """Effective request of a pod: max(sum of app + sidecar containers, largest init)."""
    if resource == "pods":
        return Decimal(1)
    spec = pod["spec"]
    inits = spec.get("initContainers") or []
    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    total = sum((_request(c, resource) for c in [*spec["containers"], *sidecars]), Decimal(0))
    plain = [_request(c, resource) for c in inits if c.get("restartPolicy") != "Always"]
    return max([total, *plain])


def _request(container: JSON, resource: str) -> Decimal:
    value = ((container.get("resources") or {}).get("requests") or {}).get(resource)
    return parse_quantity(value) if value is not None else Decimal(0)


def insufficient_message(pod: JSON, others: list[JSON], node: JSON, resource: str) -> str:
    """The kubelet's InsufficientResourceError text for `resource`."""
    allocatable = (node.get("status") or {}).get("allocatable") or DEFAULT_CAPACITY
    capacity = parse_quantity(allocatable.get(resource, "0"))
    used = sum((pod_request(p, resource) for p in others), Decimal(0))
    nums = [kubelet_units(resource, v) for v in (pod_request(pod, resource), used, capacity)]
    return (
        f"Node didn't have enough resource: {resource}, "
        f"requested: {nums[0]}, used: {nums[1]}, capacity: {nums[2]}"
    )
