"""Pods the kubelet rejected at admission: report, wipe node-local state, maybe re-create.

A pod can be scheduled to a node and then be refused by that node's kubelet (resources
or labels changed under it, a device plugin failed, the node is shutting down...). The
kubelet marks it `Failed` with the admission handler's reason and the pod stays there.
For each such pod on its own node the agent:

1. reports it: pod condition `PodRejected=True` (reason and message are the kubelet's),
   an Event `PodRejected`, the metric `nodeagent_pod_rejections_total{reason}`;
2. wipes the pod's node-local state once (nodeagent/rejection/wipe.py, bounded by the wipe timeout)
   and reports `StateWiped` (`True/Wiped`, or `False` with `WipeTimedOut`/`WipeFailed`),
   an Event and `nodeagent_wipes_total{result}`;
3. re-creates it when it opted in (bare pods only, annotation
   `nodeagent.io/recreate-on-rejection: "true"` or `[rejection] recreate`): delete it,
   wait the backoff, create it again with the same name and spec, counting
   `nodeagent.io/recreations` up to the limit.

Everything is decided from what the API shows, so a restarted agent carries on where it
stopped: `PodRejected` and `StateWiped` are never written twice and a wiped pod is never
wiped again. A re-creation is the one step the API cannot remember (the pod is gone once
deleted), so its intent is journalled on the node before the delete: a small JSON file per
pod under `journal_dir` with the cleaned manifest, the old uid and when the backoff ends.
On start, pending entries are finished: a pod of that name with another uid means the
re-creation happened; the old pod still there means the agent stopped before deleting it.

Why a journal and not a finalizer holding the pod (and its spec) in the API during the
backoff: a finalizer needs `patch` on every pod in the cluster (the agent's role only
patches pods/status), shows the pod as Terminating for the whole backoff, and leaves it
stuck in Terminating for good if the node (and the agent with it) never comes back. The
journal needs no extra rights; losing it with the node loses only an opt-in re-creation
of a pod that was on that node anyway. Before deleting, a server-side dry run of the
create (validation, admission, RBAC) makes sure the pod can come back.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nodeagent import metrics
from nodeagent.config import RejectionConfig
from nodeagent.context import Context
from nodeagent.drain.podfilter import find_condition
from nodeagent.kube.client import (
    CONNECT_TIMEOUT,
    JSON,
    READ_TIMEOUT,
    ApiError,
    Kube,
    KubeError,
    api_stamp,
    pods_path,
)
from nodeagent.kube.identity import RECREATE_OFF
from nodeagent.kube.watch import STUCK_AFTER, Reflector, node_pods
from nodeagent.kube.workqueue import WorkQueue
from nodeagent.rejection.journal import Journal, Recreation
from nodeagent.rejection.wipe import PodRef, WipeResult, wipe
from nodeagent.report.events import NORMAL, WARNING, EventRecorder

log = logging.getLogger(__name__)

# Names shared with users and other tools (docs/architecture.md, "Names").
POD_REJECTED = "PodRejected"
STATE_WIPED = "StateWiped"
# Set (False) on a rejected pod that opted in but is not re-created; written once, so a
# restarted agent does not repeat the decision or its Event.
RECREATED = "Recreated"
RECREATE_ANNOTATION = "nodeagent.io/recreate-on-rejection"
RECREATIONS_ANNOTATION = "nodeagent.io/recreations"
LIMIT_REACHED = "RecreateLimitReached"
RECREATE_REFUSED = "RecreateRefused"

# Kubelet admission rejection reasons (status.reason of a pod the kubelet refused).
# Sources, kubernetes/kubernetes main as read for this module (1.35 development; older
# releases have a subset):
# - pkg/kubelet/kubelet.go: `admissionRejectionReasons` (the set behind the kubelet's
#   kubelet_admission_rejections_total metric) and rejectPod(), which sets
#   phase=Failed, reason, message "Pod was rejected: " + message;
# - pkg/kubelet/lifecycle/predicate.go: InvalidNodeInfo, PodOSSelectorNodeLabelDoesNotMatch,
#   PodOSNotSupported, SupplementalGroupsPolicyNotSupported, InitContainerRestartPolicyForbidden,
#   UnexpectedAdmissionError, UnknownReason, UnexpectedPredicateFailureType, and
#   "OutOf" + resource name (OutOfcpu, OutOfmemory, OutOfpods, OutOfephemeral-storage,
#   OutOfnvidia.com/gpu ...); a failed predicate reports its name: NodeAffinity, NodeName,
#   NodePorts (pkg/scheduler/schedule_one.go AdmissionCheck) and TaintToleration
#   (NoExecute taints);
# - pkg/kubelet/lifecycle/handlers.go: AppArmor, PodLevelResourcesNotSupported,
#   PodFeatureUnsupported;
# - pkg/kubelet/sysctl/allowlist.go: SysctlForbidden;
# - pkg/kubelet/cm/topologymanager/topology_manager.go: TopologyAffinityError;
#   pkg/kubelet/cm/cpumanager/policy_static.go: SMTAlignmentError;
#   pkg/kubelet/cm/admission/errors.go: UnexpectedAdmissionError,
#   PodLevelResourcesIncompatible;
# - pkg/kubelet/nodeshutdown/nodeshutdown_manager*.go: NodeShutdown ("Pod was rejected as
#   the node is shutting down."); distinct from `Terminated`, the reason on pods the
#   shutdown manager killed, which is not a rejection;
# - pkg/kubelet/volumemanager: VolumeAttachmentLimitExceeded;
# - older kubelets (before the scheduler framework plugins, about 1.19) reported the
#   old predicate names (predicate.go: PredicateFailureError.PredicateName, from
#   pkg/scheduler/algorithm/predicates): MatchNodeSelector, HostName, PodFitsHostPorts,
#   PodToleratesNodeTaints.
# `Evicted` is deliberately absent: the eviction manager uses it both to refuse admission
# under node pressure ("Pod was rejected: The node had condition: [...]") and to evict
# running pods ("The node was low on resource: ..."); only the first is a rejection, and
# the message prefix written by rejectPod tells them apart (see rejection_of).
ADMISSION_REASONS = frozenset(
    {
        "AppArmor",
        "InitContainerRestartPolicyForbidden",
        "InvalidNodeInfo",
        "NodeAffinity",
        "NodeName",
        "NodePorts",
        "NodeShutdown",
        "PodFeatureUnsupported",
        "PodLevelResourcesIncompatible",
        "PodLevelResourcesNotSupported",
        "PodOSNotSupported",
        "PodOSSelectorNodeLabelDoesNotMatch",
        "SMTAlignmentError",
        "SupplementalGroupsPolicyNotSupported",
        "SysctlForbidden",
        "TaintToleration",
        "TopologyAffinityError",
        "UnexpectedAdmissionError",
        "UnexpectedPredicateFailureType",
        "UnknownReason",
        "VolumeAttachmentLimitExceeded",
        # older predicate names
        "HostName",
        "MatchNodeSelector",
        "PodFitsHostPorts",
        "PodToleratesNodeTaints",
    }
)
OUT_OF_PREFIX = "OutOf"
REJECTED_PREFIX = "Pod was rejected: "  # kubelet.go rejectPod (older kubelets: "Pod ")
# A pod rejected because its node is shutting down gets its state wiped, but re-creating
# it is pointless: the node is going away (a drain is usually under way) and the agent
# itself is about to stop.
NODE_SHUTDOWN = "NodeShutdown"

PROGRESS_INTERVAL = 1.0
WORKERS = 4
RETRY_START = 0.5
RETRY_MAX = 30.0
RECREATE_ATTEMPTS = 20  # creates refused after the delete, before giving the pod up
ITEM_SECONDS = 8 * (READ_TIMEOUT + CONNECT_TIMEOUT)  # bound on one work item's requests

WipeFn = Callable[[PodRef, RejectionConfig], WipeResult]


# -- detection ------------------------------------------------------------------------


@dataclass(frozen=True)
class Rejection:
    """The kubelet's verdict on a pod it refused to admit."""

    reason: str
    message: str


def rejection_of(pod: JSON) -> Rejection | None:
    """The admission rejection recorded in the pod's status, or None for any other state.

    Failed with a known admission reason or `OutOf<resource>` is a rejection; so is any
    reason whose message carries rejectPod's "Pod was rejected: " prefix (newer admit
    handlers, and the eviction manager's `Evicted` at admission). Ordinary failures
    (Error, OOMKilled, DeadlineExceeded, Evicted while running, node shutdown Terminated
    or Shutdown, no reason) are not.
    """
    status = pod.get("status") or {}
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or "")
    if status.get("phase") != "Failed" or not reason:
        return None
    if reason in ADMISSION_REASONS or reason.startswith(OUT_OF_PREFIX):
        return Rejection(reason, message)
    if message.startswith(REJECTED_PREFIX):
        return Rejection(reason, message)
    return None


def controller_owned(pod: JSON) -> bool:
    refs = pod["metadata"].get("ownerReferences") or []
    return any(ref.get("controller") is True for ref in refs)


def recreations(pod: JSON) -> int:
    """How many times the agent re-created this pod (its annotation; garbage counts as 0)."""
    text = (pod["metadata"].get("annotations") or {}).get(RECREATIONS_ANNOTATION, "0")
    try:
        return max(0, int(text))
    except ValueError:
        return 0


def wants_recreate(pod: JSON, cfg: RejectionConfig) -> bool:
    """Bare pods that opted in, by annotation or by config; controllers replace their own.

    The annotation wins over the config both ways: "false" opts a pod out.
    """
    if controller_owned(pod):
        return False
    annotation = str((pod["metadata"].get("annotations") or {}).get(RECREATE_ANNOTATION, ""))
    if annotation.lower() in ("true", "false"):
        return annotation.lower() == "true"
    return cfg.recreate


def describe(pod: JSON) -> str:
    meta = pod["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


# -- conditions and reports -----------------------------------------------------------


def pod_condition(cond_type: str, status: str, reason: str, message: str) -> JSON:
    return {
        "type": cond_type,
        "status": status,
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": api_stamp(),
    }


class PodGone(Exception):
    """The pod was deleted, or replaced by another pod of the same name."""


def patch_conditions(kube: Kube, pod: JSON, *conditions: JSON) -> JSON:
    """Merge `conditions` into the pod's status (strategic merge, key `type`).

    The pod's uid rides along as a precondition: a re-created pod of the same name is
    never written (the API answers 422, the uid being immutable). Raises PodGone.
    """
    meta = pod["metadata"]
    body = {"metadata": {"uid": meta["uid"]}, "status": {"conditions": list(conditions)}}
    try:
        return kube.strategic_patch(pods_path(meta["namespace"], meta["name"]) + "/status", body)
    except ApiError as exc:
        if exc.status in (404, 409, 422):
            raise PodGone(f"{describe(pod)}: {exc}") from None
        raise


def report_rejected(kube: Kube, pod: JSON, rejection: Rejection, events: EventRecorder) -> JSON:
    """Set PodRejected=True with the kubelet's reason and message; Event and metric."""
    cond = pod_condition(POD_REJECTED, "True", rejection.reason, rejection.message)
    updated = patch_conditions(kube, pod, cond)
    metrics.POD_REJECTIONS.labels(rejection.reason).inc()
    events.pod(
        updated,
        POD_REJECTED,
        f"The kubelet rejected the pod ({rejection.reason}): {rejection.message}",
        WARNING,
    )
    log.warning("pod %s rejected by the kubelet: %s", describe(pod), rejection.reason)
    return updated


def report_wipe(kube: Kube, pod: JSON, result: WipeResult, events: EventRecorder) -> JSON:
    """Set StateWiped (True/Wiped, or False with the failure); Event and metric.

    `nodeagent wipe --pod NS/NAME` calls this after wipe(). Raises PodGone.
    """
    status = "True" if result.ok else "False"
    message = f"{result.message} ({result.seconds:.2f}s)"
    updated = patch_conditions(
        kube, pod, pod_condition(STATE_WIPED, status, result.reason, message)
    )
    metrics.WIPES.labels(result.reason).inc()
    events.pod(updated, STATE_WIPED, message, NORMAL if result.ok else WARNING)
    return updated


# -- the per-pod step -----------------------------------------------------------------


@dataclass
class PodProgress:
    """What this process already did for one rejected pod (the API may lag behind it)."""

    seen_at: float = field(default_factory=time.time)  # wall clock, first seen rejected
    reported: bool = False
    wipe: WipeResult | None = None
    wipe_reported: bool = False
    decided: bool = False  # re-creation started or declined


def default_wipe(pod: PodRef, cfg: RejectionConfig) -> WipeResult:
    return wipe(pod, cfg)


def handle_pod(
    kube: Kube,
    pod: JSON,
    cfg: RejectionConfig,
    events: EventRecorder,
    progress: PodProgress | None = None,
    wipe_fn: WipeFn = default_wipe,
) -> tuple[JSON, Rejection] | None:
    """Report and wipe one pod if the kubelet rejected it; None when it did not.

    Level-triggered: steps whose condition the pod already carries (or that `progress`
    says this process did) are skipped, so it is safe to call on every change. Returns
    the pod as last written and the rejection. Raises PodGone and KubeError.
    """
    rejection = rejection_of(pod)
    if rejection is None:
        return None
    progress = progress or PodProgress()
    if not progress.reported and find_condition(pod, POD_REJECTED) is None:
        pod = report_rejected(kube, pod, rejection, events)
    progress.reported = True
    if not progress.wipe_reported and find_condition(pod, STATE_WIPED) is None:
        if progress.wipe is None:  # a wipe that ran is never run again, only reported
            progress.wipe = wipe_fn(PodRef.of(pod), cfg)
        pod = report_wipe(kube, pod, progress.wipe, events)
        log.info(
            "pod %s: %s %.3fs after its rejection was seen (%s)",
            describe(pod),
            progress.wipe.reason,
            time.time() - progress.seen_at,
            rejection.reason,
        )
    progress.wipe_reported = True
    return pod, rejection


# -- re-creation ------------------------------------------------------------------------

# Metadata a re-created pod keeps; everything else (uid, resourceVersion, timestamps,
# managedFields, generation, deletion fields) belongs to the old object.
KEPT_METADATA = ("name", "namespace", "labels", "annotations", "ownerReferences", "finalizers")
# Spec fields filled in for the old pod that a create must not carry: the binding, the
# priority admission plugin's values (a create with values that differ from the
# PriorityClass's is refused with 403) and ephemeral containers (not allowed on create).
DROPPED_SPEC = ("nodeName", "priority", "preemptionPolicy", "ephemeralContainers")


def recreate_manifest(pod: JSON, count: int) -> JSON:
    """The pod to create again: same name, labels, annotations and spec, no node, no status."""
    meta = pod["metadata"]
    kept = {k: copy.deepcopy(meta[k]) for k in KEPT_METADATA if meta.get(k)}
    kept["annotations"] = {**(kept.get("annotations") or {}), RECREATIONS_ANNOTATION: str(count)}
    spec = {k: copy.deepcopy(v) for k, v in pod["spec"].items() if k not in DROPPED_SPEC}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": kept, "spec": spec}


class Stopped(Exception):
    """The controller was stopped: leave the rest to the next one."""


class _Wait(KubeError):
    """Not done yet: the key is retried with backoff."""


POD_KEY = "pod/"
RECREATE_KEY = "recreate/"


class RejectionController:
    """Watches this node's pods and handles admission rejections until stopped.

    The watch thread only queues pod uids; a few workers do the API calls and wipes,
    each pod by one worker at a time, and re-creations wait out their backoff in the
    queue's timer heap without holding a worker.
    """

    def __init__(
        self,
        kube: Kube,
        node_name: str,
        cfg: RejectionConfig,
        events: EventRecorder,
        on_progress: Callable[[], None] = lambda: None,
        *,
        wipe_fn: WipeFn = default_wipe,
        workers: int = WORKERS,
        may_recreate: bool = True,
        pods: Reflector | None = None,
    ) -> None:
        """`pods`: a watch of this node's pods shared with others (the daemon's), held
        running while the controller runs; without it the controller keeps its own."""
        self.kube = kube
        self.may_recreate = may_recreate  # False under an identity that may not create pods
        self.node_name = node_name
        self.cfg = cfg
        self.events = events
        self.on_progress = on_progress
        self.wipe_fn = wipe_fn
        self.workers = workers
        self.journal = Journal(cfg.journal_dir)
        self.queue = WorkQueue()
        self.reflector = (
            pods
            if pods is not None
            else node_pods(
                kube,
                node_name,
                on_restart=lambda _why: metrics.WATCH_RESTARTS.labels("pods").inc(),
            )
        )
        # uid -> resourceVersion of the object the last finished sync looked at
        self.synced: dict[str, str] = {}
        self._progress: dict[str, PodProgress] = {}
        self._pending: dict[str, str] = {}  # old uid -> "ns/name" of a journalled re-creation
        self._failures: dict[str, int] = {}
        self._busy_since: dict[str, float] = {}
        self._lock = threading.Lock()
        self._ctx = Context.background()  # replaced by run()'s

    # -- lifecycle --

    def run(self, ctx: Context) -> None:
        """Watch this node's pods and handle rejections until `ctx` is cancelled."""
        if not self.cfg.enabled:
            return
        self._ctx = ctx
        for entry in self.journal.entries():
            self._track(entry)
            self.queue.add(RECREATE_KEY + entry.key)
        threads = [
            threading.Thread(target=self._work, name=f"rejection-{i}", daemon=True)
            for i in range(self.workers)
        ]
        for thread in threads:
            thread.start()
        unsubscribe = self.reflector.add_handler(self._on_change)
        try:
            with self.reflector.hold():
                while not ctx.wait(PROGRESS_INTERVAL):
                    if self.healthy():
                        self.on_progress()
        finally:
            unsubscribe()
            self.queue.close()
            for thread in threads:
                thread.join(timeout=1.0)

    def healthy(self) -> bool:
        """The watch is not stuck (listing, watching or retrying) and no worker hangs."""
        if not self.reflector.stats.progressed_within(STUCK_AFTER):
            return False
        # A work item makes a few bounded requests and at most one bounded wipe; one
        # busy for longer than this is stuck (a bug), and the watchdog should see it.
        limit = self.cfg.wipe_timeout + ITEM_SECONDS
        with self._lock:
            return all(time.monotonic() - t < limit for t in self._busy_since.values())

    def _on_change(self, kind: str, pod: JSON) -> None:
        uid = pod["metadata"]["uid"]
        if kind != "DELETED" and rejection_of(pod) is not None:
            self._progress.setdefault(uid, PodProgress())  # the rejection is seen now
        self.queue.add(POD_KEY + uid)

    # -- workers --

    def _work(self) -> None:
        name = threading.current_thread().name
        while (key := self.queue.get()) is not None:
            with self._lock:
                self._busy_since[name] = time.monotonic()
            try:
                self._process(key)
                self._failures.pop(key, None)
            except Stopped:
                pass
            except Exception as exc:
                self._retry(key, exc)
            finally:
                with self._lock:
                    self._busy_since.pop(name, None)
                self.queue.done(key)

    def _retry(self, key: str, exc: Exception) -> None:
        tries = self._failures.get(key, 0) + 1
        self._failures[key] = tries
        delay = min(RETRY_START * 2 ** (tries - 1), RETRY_MAX)
        if isinstance(exc, _Wait):
            log.info("%s: %s; looking again in %.1fs", key, exc, delay)
        elif isinstance(exc, KubeError | OSError):
            log.warning("%s: %s; retrying in %.1fs", key, exc, delay)
        else:
            log.exception("%s failed; retrying in %.1fs", key, delay)
        self.queue.add(key, delay)

    def _process(self, key: str) -> None:
        if key.startswith(POD_KEY):
            self._sync_pod(key.removeprefix(POD_KEY))
        else:
            namespace, name = key.removeprefix(RECREATE_KEY).split("/", 1)
            self._sync_recreation(namespace, name)

    def _running(self) -> None:
        if self._ctx.cancelled:
            raise Stopped

    # -- one pod --

    def _sync_pod(self, uid: str) -> None:
        with self.reflector.changed:
            pod = self.reflector.objects.get(uid)
        if pod is None:
            self._progress.pop(uid, None)
            self.synced.pop(uid, None)
            return
        if uid not in self._pending:
            self._reconcile(pod)
        self.synced[uid] = str(pod["metadata"].get("resourceVersion"))

    def _reconcile(self, pod: JSON) -> None:
        uid = pod["metadata"]["uid"]
        if rejection_of(pod) is None:
            return
        progress = self._progress.setdefault(uid, PodProgress())
        self._running()
        try:
            handled = handle_pod(self.kube, pod, self.cfg, self.events, progress, self.wipe_fn)
            if handled is not None and not progress.decided:
                self._maybe_recreate(*handled)
                progress.decided = True
        except PodGone as exc:
            log.info("pod gone, nothing more to do: %s", exc)

    def _maybe_recreate(self, pod: JSON, rejection: Rejection) -> None:
        if not wants_recreate(pod, self.cfg) or pod["metadata"].get("deletionTimestamp"):
            return
        if find_condition(pod, RECREATED) is not None:
            return
        if not self.may_recreate:
            self._decline(pod, RECREATE_REFUSED, RECREATE_OFF, WARNING)
            return
        done = recreations(pod)
        if rejection.reason == NODE_SHUTDOWN:
            why = "the node is shutting down; the pod is not re-created"
            self._decline(pod, NODE_SHUTDOWN, why, NORMAL)
        elif done >= self.cfg.recreate_limit:
            why = f"re-created {done} time(s), the limit; the pod is left as it is"
            self._decline(pod, LIMIT_REACHED, why, WARNING)
        else:
            self._begin_recreation(pod, rejection, done + 1)

    def _decline(self, pod: JSON, reason: str, message: str, kind: str) -> None:
        self._running()
        updated = patch_conditions(
            self.kube, pod, pod_condition(RECREATED, "False", reason, message)
        )
        self.events.pod(updated, reason, message, kind)
        log.info("pod %s not re-created: %s", describe(pod), message)

    def _begin_recreation(self, pod: JSON, rejection: Rejection, count: int) -> None:
        """Check the create would be accepted, journal the intent, hand it to the queue."""
        manifest = recreate_manifest(pod, count)
        refused = self._dry_run(manifest)
        if refused:
            self._decline(pod, RECREATE_REFUSED, f"re-creating would fail: {refused}", WARNING)
            return
        meta = pod["metadata"]
        entry = Recreation(
            namespace=meta["namespace"],
            name=meta["name"],
            old_uid=meta["uid"],
            count=count,
            due=time.time() + self.cfg.recreate_backoff,
            reason=rejection.reason,
            manifest=manifest,
        )
        self._running()
        self.journal.write(entry)
        self._track(entry)
        self.queue.add(RECREATE_KEY + entry.key)

    def _dry_run(self, manifest: JSON) -> str:
        """Why the API would refuse to create `manifest` ('' when it would accept it).

        A server-side dry run under a generated name (the old pod still holds the real
        one) runs validation, admission and RBAC: a pod is deleted only if it can come
        back.
        """
        probe = copy.deepcopy(manifest)
        probe["metadata"]["generateName"] = probe["metadata"].pop("name")[:57] + "-"
        try:
            self.kube.request(
                "POST", pods_path(manifest["metadata"]["namespace"]), query={"dryRun": "All"},
                body=probe,
            )  # fmt: skip
        except ApiError as exc:
            if 400 <= exc.status < 500 and exc.status not in (409, 429):
                return str(exc)
            raise  # the API's trouble, or a generated name taken: try again later
        return ""

    # -- one re-creation --

    def _track(self, entry: Recreation) -> None:
        with self._lock:
            self._pending[entry.old_uid] = entry.key

    def _untrack(self, entry: Recreation) -> None:
        with self._lock:
            self._pending.pop(entry.old_uid, None)

    def _sync_recreation(self, namespace: str, name: str) -> None:
        entry = self.journal.read(namespace, name)
        if entry is None:
            return
        current = self._get_pod(namespace, name)
        if current is not None and current["metadata"]["uid"] != entry.old_uid:
            log.info("pod %s already re-created (uid %s)", entry.key, current["metadata"]["uid"])
            if recreations(current) == entry.count:  # ours: created, then stopped
                self._recreated(entry, current)
            self._finish(entry)
        elif current is not None:
            if not current["metadata"].get("deletionTimestamp"):
                self._delete_old(entry)
            raise _Wait(f"pod {entry.key} (uid {entry.old_uid}) is being deleted")
        elif time.time() < entry.due:
            self.queue.add(RECREATE_KEY + entry.key, entry.due - time.time())
        else:
            self._create(entry)

    def _get_pod(self, namespace: str, name: str) -> JSON | None:
        try:
            return self.kube.get(pods_path(namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def _delete_old(self, entry: Recreation) -> None:
        """Delete the rejected pod, only if it is still the one journalled (uid)."""
        self._running()
        body = {"preconditions": {"uid": entry.old_uid}}
        try:
            self.kube.delete(pods_path(entry.namespace, entry.name), body)
        except ApiError as exc:
            if exc.status not in (404, 409):  # gone, or another pod holds the name
                raise
            return
        log.info("pod %s deleted for re-creation %d", entry.key, entry.count)

    def _create(self, entry: Recreation) -> None:
        self._running()
        try:
            new = self._post(entry)
        except ApiError as exc:
            if exc.status == 409:  # a pod of that name appeared: look again
                raise _Wait(f"pod {entry.key} exists again") from None
            tries = self._failures.get(RECREATE_KEY + entry.key, 0)
            if 400 <= exc.status < 500 and tries >= RECREATE_ATTEMPTS:
                self._give_up(entry, exc)
                return
            raise
        self._recreated(entry, new)
        self._finish(entry)

    def _recreated(self, entry: Recreation, new: JSON) -> None:
        metrics.POD_RECREATIONS.inc()
        message = (
            f"Re-created after the kubelet on {self.node_name} rejected it ({entry.reason}); "
            f"re-creation {entry.count} of at most {self.cfg.recreate_limit}"
        )
        self.events.pod(new, "PodRecreated", message)
        log.info("pod %s re-created (%d): uid %s", entry.key, entry.count, new["metadata"]["uid"])

    def _give_up(self, entry: Recreation, exc: ApiError) -> None:
        message = f"Pod {entry.key} deleted after rejection could not be re-created: {exc}"
        log.error("%s; giving up", message)
        self.events.node({"metadata": {"name": self.node_name}}, "RecreateFailed", message, WARNING)
        self._finish(entry)

    def _post(self, entry: Recreation) -> JSON:
        return self.kube.post(pods_path(entry.namespace), entry.manifest)

    def _finish(self, entry: Recreation) -> None:
        self.journal.drop(entry)
        self._untrack(entry)
