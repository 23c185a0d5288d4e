"""The API calls the actors share, each in the form the tools send it: one Eviction, one
core/v1 Event as client-go's recorder writes it, a Node update retried on conflict as the
autoscaler and NTH do it, a merge patch with Karpenter's optimistic lock, and the harness's
bound on every wait."""

from __future__ import annotations

import copy
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import yaml

from hack.kubeutil import wait_until
from nodeagent.kube.client import JSON, ApiError, Kube, api_stamp, node_path, pods_path

PolicyV1 = "policy/v1"
PolicyV1beta1 = "policy/v1beta1"


class ActorTimeout(RuntimeError):
    """The harness's bound on an actor's wait ran out (the tool itself may wait longer)."""


@dataclass(frozen=True)
class Bound:
    """A monotonic deadline for one step of an actor."""

    until: float

    @classmethod
    def after(cls, seconds: float) -> Bound:
        return cls(time.monotonic() + seconds)

    def left(self) -> float:
        return self.until - time.monotonic()

    def over(self) -> bool:
        return self.left() <= 0

    def check(self, what: str) -> None:
        if self.over():
            raise ActorTimeout(f"{what}: out of time")

    def sleep(self, seconds: float, what: str) -> None:
        """Sleep `seconds`, or raise if the bound comes first."""
        if seconds >= self.left():
            time.sleep(max(0.0, self.left()))
            raise ActorTimeout(f"{what}: out of time")
        time.sleep(seconds)


def client_as(kubeconfig: Path, manager: str) -> Kube:
    """A client of `kubeconfig` whose writes the API server records under `manager` in
    managedFields: the field manager of a write that names none is its User-Agent up to the
    first "/", and the product's client says "nodeagent/..." (the agent's own manager), so
    an actor re-enacted through it would look like the agent. The tools' own: client-go's
    default User-Agent starts with the binary's name (cluster-autoscaler, kured,
    node-termination-handler), Karpenter's is "karpenter", kubectl cordon and uncordon name
    "kubectl-cordon"."""
    return Kube.from_kubeconfig(str(kubeconfig), user_agent=f"{manager}/harness")


def name_of(obj: JSON) -> str:
    return str(obj["metadata"]["name"])


def ns_of(obj: JSON) -> str:
    return str(obj["metadata"].get("namespace") or "")


def annotations_of(obj: JSON) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


def labels_of(obj: JSON) -> dict[str, str]:
    return dict(obj["metadata"].get("labels") or {})


def taints(node: JSON) -> list[JSON]:
    return list((node.get("spec") or {}).get("taints") or [])


def has_taint(node: JSON, key: str) -> bool:
    return any(t["key"] == key for t in taints(node))


def drop_taint(key: str) -> Callable[[JSON], bool]:
    """An `update_node` change: the node without taints of `key` (False: it has none)."""

    def drop(n: JSON) -> bool:
        kept = [t for t in taints(n) if t["key"] != key]
        if len(kept) == len(taints(n)):
            return False
        n["spec"]["taints"] = kept
        return True

    return drop


def controller_of(pod: JSON) -> JSON | None:
    """metav1.GetControllerOf: the owner reference with controller: true."""
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def phase(pod: JSON) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def terminal(pod: JSON) -> bool:
    return phase(pod) in ("Succeeded", "Failed")


def get_node(kube: Kube, name: str) -> JSON:
    return kube.get(node_path(name))


def get_pod(kube: Kube, ns: str, name: str) -> JSON | None:
    """The pod, or None on 404."""
    try:
        return kube.get(pods_path(ns, name))
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def list_pods(kube: Kube, node: str, label_selector: str = "") -> list[JSON]:
    """Pods bound to `node` in every namespace (a quorum read, as the tools' List calls)."""
    query = {"fieldSelector": f"spec.nodeName={node}"}
    if label_selector:
        query["labelSelector"] = label_selector
    return list(kube.request("GET", "/api/v1/pods", query=query)["items"])


def evict(
    kube: Kube,
    pod: JSON,
    *,
    grace: int | None = None,
    uid_precondition: bool = False,
    version: str = PolicyV1,
) -> None:
    """POST pods/<name>/eviction with the Eviction body a tool sends: `grace` becomes
    deleteOptions.gracePeriodSeconds, `uid_precondition` deleteOptions.preconditions.uid."""
    meta = pod["metadata"]
    options: JSON = {}
    if grace is not None:
        options["gracePeriodSeconds"] = grace
    if uid_precondition:
        options["preconditions"] = {"uid": meta["uid"]}
    body: JSON = {
        "apiVersion": version,
        "kind": "Eviction",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
    }
    if options:
        body["deleteOptions"] = options
    kube.post(pods_path(meta["namespace"], meta["name"]) + "/eviction", body)


def record_event(
    kube: Kube,
    obj: JSON,
    kind: str,
    type_: str,
    reason: str,
    message: str,
    component: str,
    extra_annotations: dict[str, str] | None = None,
) -> JSON:
    """One core/v1 Event as client-go's record.EventRecorder writes it: named after the
    object, in its namespace ("default" for a Node), the component as its source."""
    meta = obj["metadata"]
    ns = meta.get("namespace") or "default"
    now = api_stamp()
    body: JSON = {
        "metadata": {
            "generateName": f"{meta['name']}.",
            "namespace": ns,
            "annotations": extra_annotations or {},
        },
        "involvedObject": {
            "kind": kind,
            "name": meta["name"],
            "namespace": meta.get("namespace") or "",
            "uid": meta.get("uid") or "",
            "apiVersion": "v1",
        },
        "reason": reason,
        "message": message,
        "type": type_,
        "source": {"component": component},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    return kube.post(f"/api/v1/namespaces/{ns}/events", body)


def update_node(
    kube: Kube,
    node: JSON,
    mutate: Callable[[JSON], bool],
    retry_for: float = 5.0,
    interval: float = 0.75,
) -> JSON:
    """client-go's Nodes().Update as the autoscaler's AddTaints/CleanTaints and NTH's
    addTaint/removeTaint call it: the first try on the node handed in, a fresh GET and a
    new try after each 409 for `retry_for` seconds (`interval` apart). `mutate` changes the
    node in place and returns False when nothing needs changing: then, as the originals,
    the node is read once more before the update is skipped."""
    end = time.monotonic() + retry_for
    fresh = copy.deepcopy(node)
    refresh = False
    while True:
        if refresh:
            fresh = get_node(kube, name_of(node))
        if not mutate(fresh):
            if not refresh:
                refresh = True
                continue
            return fresh
        try:
            return kube.request("PUT", node_path(name_of(node)), body=fresh)
        except ApiError as exc:
            if exc.status == 409 and time.monotonic() < end:
                refresh = True
                time.sleep(interval)
                continue
            raise


def merge_patch_locked(kube: Kube, stored: JSON, patch: JSON) -> JSON:
    """controller-runtime's client.MergeFromWithOptions(stored, MergeFromWithOptimisticLock{}):
    the JSON merge patch of the change with stored's resourceVersion in it, so that a Node
    changed since it was read answers 409 instead of having a list overwritten."""
    body = copy.deepcopy(patch)
    body.setdefault("metadata", {})["resourceVersion"] = stored["metadata"]["resourceVersion"]
    return kube.merge_patch(node_path(name_of(stored)), body)


def json_patch(kube: Kube, path: str, ops: list[JSON]) -> JSON:
    """An RFC 6902 JSON patch (kured's and NTH's annotation and label removals)."""
    return kube.request("PATCH", path, body=ops, content_type="application/json-patch+json")


def pointer(key: str) -> str:
    """A map key as an RFC 6901 JSON pointer segment (kured's strings.ReplaceAll, NTH's
    jsonPatchEscape)."""
    return key.replace("~", "~0").replace("/", "~1")


def delete_node(kube: Kube, name: str) -> bool:
    """DELETE the Node; False when it was gone already."""
    try:
        kube.delete(node_path(name))
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True


CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def yaml_files(directory: Path) -> list[JSON]:
    """Every document of every *.yaml file in `directory`, in name order."""
    docs: list[JSON] = []
    for path in sorted(directory.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def install_crds(kube: Kube, crds: Iterable[JSON], timeout: float = 30.0) -> None:
    """Create the CRDs (one already there is kept) and wait until each is Established."""
    for crd in crds:
        try:
            kube.post(CRDS, crd)
        except ApiError as exc:
            if exc.status != 409:
                raise
        name = str(crd["metadata"]["name"])
        wait_until(partial(_established, kube, name), timeout, f"CRD {name} established")


def _established(kube: Kube, name: str) -> bool:
    conds = (kube.get(f"{CRDS}/{name}").get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conds)


def delete_path(kube: Kube, path: str) -> None:
    """DELETE, a 404 being as good."""
    try:
        kube.delete(path)
    except ApiError as exc:
        if exc.status != 404:
            raise


def release(kube: Kube, path: str) -> None:
    """Take an object's finalizers off and delete it: its controller is gone."""
    try:
        kube.merge_patch(path, {"metadata": {"finalizers": None}})
    except ApiError as exc:
        if exc.status != 404:
            raise
    delete_path(kube, path)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the controller this harness started, SIGKILL after 15s."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


HACK = Path(__file__).resolve().parent.parent


def built(script: str) -> Path:
    """The path a hack/ build script prints: the binary, built and cached on first use."""
    out = subprocess.run([str(HACK / script)], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())
