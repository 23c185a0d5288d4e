"""Cordon and uncordon a Node, with the agent's marker as the record of what it did.

The marker annotations go onto the Node in the same write that cordons it, so the
record can never lag behind the mutation it describes; uncordon only undoes a cordon
that carries the marker, so a node a person cordoned stays cordoned.

The same write takes the node out of external load balancers (EXCLUDE_LB_LABEL), so
they stop sending it traffic before its pods go; the marker records that the agent set
the label, and only then does the uncordon remove it (a person's label stays). Why a
label and not the autoscaler's ToBeDeletedByClusterAutoscaler taint (which kube-proxy's
/healthz also honours): the cluster-autoscaler removes that taint from every node when it
starts and would treat the node as its own scale-down; see docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from nodeagent.fence.others import DELAY_DELETION
from nodeagent.kube.client import JSON, ApiError, Kube, KubeError, api_stamp, node_path
from nodeagent.types import DEPARTING

PREFIX = "nodeagent.io/"
CORDONED_BY = PREFIX + "cordoned-by"
DRAIN_REASON = PREFIX + "drain-reason"
DRAIN_STARTED_AT = PREFIX + "drain-started-at"
BOOT_ID = PREFIX + "boot-id"
DRAIN_RESULT = PREFIX + "drain-result"
# The agent set EXCLUDE_LB_LABEL with its cordon (it was absent): its uncordon removes it.
EXCLUDED_LB = PREFIX + "excluded-from-lb"
# The Node object (metadata.uid) the marker was written on: a marker on another object (a
# Node deleted and its manifest applied again) is no record of this one (N4).
NODE_UID = PREFIX + "node-uid"
# The boot the agent last started in: a new one without a drain record was unclean.
LAST_BOOT_ID = PREFIX + "last-boot-id"
# The cloud event ID of a warning whose departure already happened: the machine went down
# and came back since its fence was taken, so the event the endpoint still lists for a
# while (Azure keeps a Reboot `Started` for minutes) fences no more. While that fence's
# marker stands it says so itself (`NodeFence.departed`); the write that clears or replaces
# the marker moves the ID here. Not a marker key: the agent clears it once the endpoint no
# longer lists that ID, so a later warning reusing it (GCP's, AWS's Spot) fences.
WARNING_DEPARTED = PREFIX + "warning-departed"
# A drain for the cloud's early warning: which warning, the cloud's event ID, and when the
# cloud acts (RFC 3339; absent when it did not say). nodeagent/fence/warning.py.
WARNING = PREFIX + "warning"
WARNING_ID = PREFIX + "warning-id"
WARNING_DEADLINE = PREFIX + "warning-deadline"
WARNING_KEYS = (WARNING, WARNING_ID, WARNING_DEADLINE)
MARKER_KEYS = (
    CORDONED_BY,
    DRAIN_REASON,
    DRAIN_STARTED_AT,
    BOOT_ID,
    DRAIN_RESULT,
    EXCLUDED_LB,
    NODE_UID,
    *WARNING_KEYS,
)
Notes = Mapping[str, str]  # marker keys written beside the reason (the warning's)
# Cloud service controllers and the AWS load balancer controller drop a node carrying it
# from their target sets (aws-node-termination-handler's --exclude-from-load-balancers).
EXCLUDE_LB_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
AGENT = "nodeagent"
# The label's value when the agent set it: ownership by value, as Karpenter (`karpenter`)
# and aws-node-termination-handler do. An earlier agent wrote "true" (with EXCLUDED_LB).
LB_VALUES = (AGENT, "true")
# The agent's own fence beside the cordon, for as long as a departure lasts: the shared
# `spec.unschedulable` has no owner (the autoscaler's clean-up, kured and NTH uncordon
# whoever cordoned), while every one of them removes taints by its own key only, and the
# scheduler honours this one with the node uncordoned. Written in the same guarded write
# as the cordon and the marker; its value is the departure's reason.
TAINT = PREFIX + "departing"


class NodeNotFound(KubeError):
    pass


class NodeChanged(KubeError):
    """The Node changed since it was read (409 on the resourceVersion precondition): the
    caller reads it again and decides again on what it says now."""


class CordonedByOther(KubeError):
    """The node is cordoned but not by the agent: leave it to whoever did it."""


def get_node(kube: Kube, name: str) -> JSON:
    try:
        return kube.get(node_path(name))
    except ApiError as exc:
        if exc.status == 404:
            raise NodeNotFound(f'node "{name}" not found') from None
        raise


@dataclass(frozen=True)
class NodeFence:
    """What the Node says about its cordon, read from one observed object."""

    unschedulable: bool
    marked: bool  # the agent's marker is present
    reason: str
    started_at: str
    boot_id: str
    result: str
    excluded_lb: bool = False  # the agent set EXCLUDE_LB_LABEL with this cordon
    warning_id: str = ""  # the cloud event a warning's drain was for
    warning: str = ""  # which warning: "<cloud> <kind>" (nodeagent/fence/warning.py)
    tainted: bool = False  # the agent's TAINT is on the Node
    lb_label: str | None = None  # EXCLUDE_LB_LABEL's value, None when absent

    @classmethod
    def of(cls, node: JSON) -> NodeFence:
        ann = _own_marker(node)
        return cls(
            unschedulable=bool(node["spec"].get("unschedulable")),
            marked=ann.get(CORDONED_BY) == AGENT,
            reason=ann.get(DRAIN_REASON, ""),
            started_at=ann.get(DRAIN_STARTED_AT, ""),
            boot_id=ann.get(BOOT_ID, ""),
            result=ann.get(DRAIN_RESULT, ""),
            excluded_lb=ann.get(EXCLUDED_LB) == "true",
            warning_id=ann.get(WARNING_ID, ""),
            warning=ann.get(WARNING, ""),
            tainted=has_taint(node, TAINT),
            lb_label=(node["metadata"].get("labels") or {}).get(EXCLUDE_LB_LABEL),
        )

    def departed(self, boot_id: str) -> str:
        """The event ID of the departing warning this fence was taken for, if the machine
        went down and came back since (the marker is of another boot than `boot_id`, the
        Node's), else "". A shutdown's marker keeps the warning's keys for this."""
        kind = self.warning.rpartition(" ")[2]  # WARNING is "<cloud> <kind>"
        if not self.warning_id or kind not in DEPARTING:
            return ""
        rebooted = bool(self.boot_id and boot_id) and self.boot_id != boot_id
        return self.warning_id if rebooted else ""

    @property
    def cordoned_by_agent(self) -> bool:
        return self.unschedulable and self.marked

    @property
    def cordoned_by_other(self) -> bool:
        return self.unschedulable and not self.marked

    @property
    def recorded(self) -> bool:
        """A departure of the agent's is written on the Node: its cordon's marker, or its
        drain's record under someone else's cordon."""
        return self.marked or bool(self.reason)

    @property
    def lb_ours(self) -> bool:
        """EXCLUDE_LB_LABEL is the agent's: it set it (EXCLUDED_LB) and the value is still
        its own (Karpenter overwrites the value; then the label is Karpenter's)."""
        return self.excluded_lb and self.lb_label in LB_VALUES


def _own_marker(node: JSON) -> Mapping[str, str]:
    """The Node's annotations, less a marker written on another Node object (its NODE_UID
    is not this one's): nothing of it is inherited, nothing of it undone."""
    ann: Mapping[str, str] = node["metadata"].get("annotations") or {}
    uid, written_on = node["metadata"].get("uid", ""), ann.get(NODE_UID, "")
    if uid and written_on and written_on != uid:
        return {k: v for k, v in ann.items() if k not in MARKER_KEYS}
    return ann


def departed_note(node: JSON) -> str:
    """The Node's WARNING_DEPARTED: a warning's event ID whose departure happened, or ''."""
    return str((node["metadata"].get("annotations") or {}).get(WARNING_DEPARTED) or "")


def forget_departed(kube: Kube, node: JSON) -> None:
    """Clear WARNING_DEPARTED, guarded by the resourceVersion like `cordon`: a note written
    since `node` was read (another boot's) is decided on again, not lost."""
    patch = {
        "metadata": {
            "resourceVersion": node["metadata"]["resourceVersion"],
            "annotations": {WARNING_DEPARTED: None},
        }
    }
    _guarded_patch(kube, node, patch)


def first_taint(node: JSON, keys: Collection[str]) -> str:
    """The first taint on the node whose key is one of `keys` (any effect), or ''."""
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("key") in keys:
            return str(taint["key"])
    return ""


def has_taint(node: JSON, key: str) -> bool:
    return bool(first_taint(node, (key,)))


def taints_with(node: JSON, reason: str) -> list[JSON]:
    """The Node's taints with the agent's TAINT for `reason` (replacing its own, if any);
    every other taint carried over unchanged. A merge patch replaces the whole list, so
    this is only written guarded by the resourceVersion it was read at."""
    own = {"key": TAINT, "value": reason or "departing", "effect": "NoSchedule"}
    return [*taints_without(node), own]


def taints_without(node: JSON) -> list[JSON]:
    """The Node's taints less the agent's own (matched by key, as every other tool does)."""
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != TAINT]


def excludes_lb(node: JSON) -> bool:
    """The agent's cordon of `node` sets EXCLUDE_LB_LABEL as its own: the label is absent,
    or the agent's marker already says it set it. A label a person set is never the
    agent's to remove."""
    labels = node["metadata"].get("labels") or {}
    return NodeFence.of(node).excluded_lb or EXCLUDE_LB_LABEL not in labels


def boot_id(node: JSON) -> str:
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or "")


def cordon(
    kube: Kube,
    node: JSON,
    reason: str,
    keep: Collection[str] = (),
    notes: Notes | None = None,
    *,
    taint: bool = True,
) -> bool:
    """Cordon `node` for `reason`, writing the marker in the same patch.

    Returns False (and writes nothing) when someone else already cordoned it: the
    drain still proceeds, but the cordon is theirs to undo (`record_drain` notes the
    drain). Likewise for the agent's own cordon when its reason is in `keep` and it was
    written in this boot. The patch carries the observed resourceVersion, so a concurrent
    cordon is not overwritten: raises NodeChanged when the Node moved on since `node` was
    read. `notes`: the warning's keys, written with the reason (the others are cleared).
    `taint`: the agent's TAINT goes on too (False where the identity may not change its
    Node's taints: the kubelet's, under NodeRestriction).
    """
    fence = NodeFence.of(node)
    if fence.cordoned_by_other:
        return False
    if fence.cordoned_by_agent and fence.reason in keep and fence.boot_id == boot_id(node):
        return False
    ours = excludes_lb(node)
    patch = _drain_record(node, reason, notes)
    patch["metadata"]["annotations"] |= {CORDONED_BY: AGENT, EXCLUDED_LB: "true" if ours else None}
    patch["spec"] = {"unschedulable": True}
    if taint:
        patch["spec"]["taints"] = taints_with(node, reason)
    if ours:
        patch["metadata"]["labels"] = {EXCLUDE_LB_LABEL: AGENT}
    _guarded_patch(kube, node, patch)
    return True


def record_drain(
    kube: Kube, node: JSON, reason: str, notes: Notes | None = None, *, taint: bool = True
) -> None:
    """Note a drain for `reason` under someone else's cordon, before it evicts: the
    marker's drain keys without CORDONED_BY (the cordon stays theirs), so the Node, not
    the agent's memory, says that an evacuation already drained there, and its undo
    (`uncordon` with `only_reasons`) clears the record and leaves the cordon. Guarded by
    the resourceVersion like `cordon`. The agent's TAINT goes on with the record: their
    cordon is theirs to lift, the taint keeps the fence while the departure lasts."""
    patch = _drain_record(node, reason, notes)
    if taint:
        patch["spec"] = {"taints": taints_with(node, reason)}
    _guarded_patch(kube, node, patch)


def refence(
    kube: Kube,
    node: JSON,
    *,
    cordon: bool,
    taint: bool,
    label: bool,
    reason: str,
    adopt: bool = False,
) -> JSON:
    """Put back the pieces of the agent's fence someone else removed (fence/refence.py):
    the cordon, the TAINT for `reason`, the load-balancer label; `adopt`: the cordon put
    back becomes the agent's (CORDONED_BY; the drain record beside it stays as it is, its
    result too). One write, guarded by the resourceVersion `node` was read at (the taint
    list is written whole): raises NodeChanged when the Node moved on. Returns the Node as
    written."""
    spec: JSON = {}
    if cordon:
        spec["unschedulable"] = True
    if taint:
        spec["taints"] = taints_with(node, reason)
    patch: JSON = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}}
    if cordon and adopt:
        patch["metadata"]["annotations"] = {CORDONED_BY: AGENT}
    if spec:
        patch["spec"] = spec
    if label:
        patch["metadata"]["labels"] = {EXCLUDE_LB_LABEL: AGENT}
    return _guarded_patch(kube, node, patch)


def untaint(kube: Kube, node: JSON) -> None:
    """Remove the agent's TAINT alone (the cordon and marker stay), guarded like `cordon`."""
    patch = {
        "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
        "spec": {"taints": taints_without(node)},
    }
    _guarded_patch(kube, node, patch)


def _drain_record(node: JSON, reason: str, notes: Notes | None) -> JSON:
    return {
        "metadata": {
            "resourceVersion": node["metadata"]["resourceVersion"],
            "annotations": {
                DRAIN_REASON: reason,
                DRAIN_STARTED_AT: api_stamp(),
                BOOT_ID: boot_id(node),
                NODE_UID: node["metadata"].get("uid") or None,
                DRAIN_RESULT: None,
                **dict.fromkeys(WARNING_KEYS),
                **_departed_note(node),
                **(notes or {}),
            },
        },
    }


def _departed_note(node: JSON) -> dict[str, str]:
    """WARNING_DEPARTED for a write that drops the marker of a departed warning: its
    memory passes from the marker to the note in the same write, never lost between."""
    gone = NodeFence.of(node).departed(boot_id(node))
    return {WARNING_DEPARTED: gone} if gone else {}


def _guarded_patch(kube: Kube, node: JSON, patch: JSON) -> JSON:
    try:
        return kube.merge_patch(node_path(node["metadata"]["name"]), patch)
    except ApiError as exc:
        if exc.status != 409:
            raise
        raise NodeChanged(f"node {node['metadata']['name']} changed since it was read") from None


def hold_deletion(kube: Kube, name: str, why: str | None) -> None:
    """Set (`why`) or remove (None) the Cluster Autoscaler's delay-deletion annotation of
    the agent's own (fence/others.DELAY_DELETION): one key, nobody else's."""
    patch = {"metadata": {"annotations": {DELAY_DELETION: why}}}
    kube.merge_patch(node_path(name), patch)


def record_boot(kube: Kube, name: str, boot: str) -> None:
    """Note the boot the agent started in (LAST_BOOT_ID): the next one tells from it
    whether this boot ended with a drain."""
    kube.merge_patch(node_path(name), {"metadata": {"annotations": {LAST_BOOT_ID: boot}}})


def record_result(
    kube: Kube, name: str, result: str, uid: str = "", resource_version: str = ""
) -> None:
    """Note how the drain ended, so the next boot can tell a drained departure. `uid`: only
    on that Node object (the API server refuses another's: a Node deleted and registered
    again during the drain gets no result of a drain it never had). `resource_version`:
    only on the Node as read (a result written late, after a check of its marker)."""
    meta: JSON = {"annotations": {DRAIN_RESULT: result}}
    if uid:
        meta["uid"] = uid
    if resource_version:
        meta["resourceVersion"] = resource_version
    kube.merge_patch(node_path(name), {"metadata": meta})


def uncordon(
    kube: Kube,
    name: str,
    force: bool = False,
    only_reasons: Collection[str] = (),
    started_at: str = "",
) -> bool:
    """Undo the agent's cordon and clear its marker. Returns True if it uncordoned.

    Raises CordonedByOther for a cordon without the marker unless `force`. With
    `only_reasons`, only a marker with one of those drain reasons is undone (and a
    `record_drain` record with one of them is cleared, the cordon left); with
    `started_at`, only the marker of that drain. The check and the write are one
    guarded patch, so a cordon taken in between is left alone.
    """
    node = get_node(kube, name)
    fence = NodeFence.of(node)
    if only_reasons and fence.reason not in only_reasons:
        return False
    if started_at and fence.started_at != started_at:
        return False
    # The agent's record of a drain under someone else's cordon: the record goes, the
    # cordon stays theirs.
    record_only = bool(only_reasons) and not fence.marked
    if fence.cordoned_by_other and not force and not record_only:
        raise CordonedByOther(
            f'node "{name}" was cordoned by someone else (no {CORDONED_BY} marker); '
            "leaving it cordoned (use --force to uncordon anyway)"
        )
    patch: JSON = {
        "metadata": {
            "resourceVersion": node["metadata"]["resourceVersion"],
            "annotations": dict.fromkeys(MARKER_KEYS) | _departed_note(node),
        },
    }
    if fence.lb_ours:
        patch["metadata"]["labels"] = {EXCLUDE_LB_LABEL: None}
    spec: JSON = {}
    if fence.tainted:
        spec["taints"] = taints_without(node)
    if fence.unschedulable and not record_only:
        spec["unschedulable"] = False
    elif not fence.marked and not fence.reason and not fence.tainted:
        return False  # nothing to undo, nothing to write
    if spec:
        patch["spec"] = spec
    try:
        kube.merge_patch(node_path(name), patch)
    except ApiError as exc:
        if exc.status != 409:
            raise
        return uncordon(kube, name, force, only_reasons, started_at)  # changed: decide again
    return fence.unschedulable and not record_only
