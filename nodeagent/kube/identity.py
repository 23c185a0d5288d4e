"""What the agent's identity may do, checked where it matters.

Under the kubelet's identity the Node authorizer and NodeRestriction give the agent what a
drain needs on its own node, but not two things: listing PodDisruptionBudgets (a
cluster-side ClusterRole bound to `system:nodes` adds it, read-only) and creating pods
(nodes cannot have it, so re-creating rejected pods is off). On a cluster without the Node
authorizer `system:nodes` has no rights at all: the agent finds that out at start and says
which right is missing and how to fix it, rather than failing in a drain.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from nodeagent.kube.client import Kube
from nodeagent.kube.errors import ApiError

log = logging.getLogger(__name__)

SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
PDB_READER = "packaging/kubelet-pdb-reader.yaml"


@dataclass(frozen=True)
class Right:
    verb: str
    resource: str
    subresource: str = ""
    group: str = ""
    name: str = ""
    # The Node authorizer lets a node list its pods only with this selector.
    field_selector: str = ""

    def describe(self) -> str:
        sub = f"/{self.subresource}" if self.subresource else ""
        group = f"{self.group}/" if self.group else ""
        named = f" {self.name}" if self.name else ""
        where = f" ({self.field_selector})" if self.field_selector else ""
        return f"{self.verb} {group}{self.resource}{sub}{named}{where}"

    def attributes(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {"verb": self.verb, "resource": self.resource}
        attrs["group"] = self.group
        if self.subresource:
            attrs["subresource"] = self.subresource
        if self.name:
            attrs["name"] = self.name
        if self.field_selector:
            attrs["fieldSelector"] = {"rawSelector": self.field_selector}
        return attrs


def needed(node: str) -> list[Right]:
    """What a drain and the daemon's loops need on `node`, in the order they need it."""
    return [
        Right("get", "nodes", name=node),
        Right("patch", "nodes", name=node),
        Right("patch", "nodes", "status", name=node),
        Right("list", "pods", field_selector=f"spec.nodeName={node}"),
        Right("create", "pods", "eviction"),
        Right("delete", "pods"),
        Right("create", "events"),
    ]


def allowed(kube: Kube, right: Right) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": right.attributes()},
    }
    return bool((kube.post(SSAR_PATH, review).get("status") or {}).get("allowed"))


def first_missing(kube: Kube, node: str) -> Right | None:
    """The first right the identity lacks, or None. Raises KubeError if it cannot ask."""
    return next((r for r in needed(node) if not allowed(kube, r)), None)


def missing_right_message(user: str, right: Right) -> str:
    return (
        f"{user} may not {right.describe()}: the API server must run the Node authorizer "
        "and NodeRestriction (--authorization-mode=Node,RBAC "
        "--enable-admission-plugins=NodeRestriction), or give the agent a dedicated "
        "identity (packaging/rbac.yaml and --kubeconfig)"
    )


RECREATE_OFF = (
    "re-creating rejected pods is off: the kubelet's identity may not create pods "
    "(a dedicated identity with packaging/rbac.yaml's nodeagent-recreate role may)"
)


# -- PodDisruptionBudgets not readable ------------------------------------------------------

_pdbs_said = threading.Event()


def pdbs_forbidden(exc: ApiError) -> None:
    """A 403 on PDBs: say so once per process (log and metric); drains go on without
    watching them and retry refused evictions on backoff."""
    # Imported here: defining every metric costs a one-shot command (`nodeagent drain`)
    # about 30 ms at start (python -X importtime); the daemon has it loaded anyway.
    from nodeagent import metrics

    metrics.PDBS_UNREADABLE.set(1)
    if not _pdbs_said.is_set():
        _pdbs_said.set()
        log.warning(
            "PodDisruptionBudgets are not readable (%s): evictions a PDB refuses are retried "
            "on backoff instead of when the PDB changes; apply %s to let nodes read them",
            exc,
            PDB_READER,
        )
