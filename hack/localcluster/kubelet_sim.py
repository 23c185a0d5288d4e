"""A kubelet simulator for every Node labelled nodeagent.io/simulated=true.

Run: python -m hack.localcluster.kubelet_sim --kubeconfig FILE [--ready-file FILE]

Nodes: kept Ready (status every --status-interval, Lease every --lease-interval); nodeInfo
bootID follows the node annotation sim.nodeagent.io/boot-id (set to a new uuid when absent;
change it to simulate a reboot). sim.nodeagent.io/shutdown-at: "<RFC 3339 time>" plays the
kubelet's graceful node shutdown at that time, once per value: every pod of the node that
still runs is left Failed/Terminated with DisruptionTarget=True/TerminationByKubelet.

Pods bound to such a node (watch-driven, writes on a thread pool):
- started at once: Running, Ready, container statuses, podIP, startTime;
- sim.nodeagent.io/ready-delay: "1s"      Running at once, Ready only after the delay;
- sim.nodeagent.io/reject: "OutOfcpu"     Failed with that reason and a kubelet-like message
  (sim.nodeagent.io/reject-message overrides the text after "Pod was rejected: ");
- deletion (deletionTimestamp): finished with DELETE gracePeriodSeconds=0 (uid precondition)
  at once, or after sim.nodeagent.io/termination-delay ("2s", "500ms"), never later than the
  pod's deletionGracePeriodSeconds.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeagent.kube.client import ApiError, Kube, KubeError

from . import podstatus as ps
from .quantity import parse_duration
from .reflector import Reflector

JSON = dict[str, Any]
log = logging.getLogger("kubelet-sim")

SIM_LABEL = "nodeagent.io/simulated"
BOOT_ID = "sim.nodeagent.io/boot-id"
SHUTDOWN_AT = "sim.nodeagent.io/shutdown-at"
TERMINATION_DELAY = "sim.nodeagent.io/termination-delay"
READY_DELAY = "sim.nodeagent.io/ready-delay"
REJECT = "sim.nodeagent.io/reject"
REJECT_MESSAGE = "sim.nodeagent.io/reject-message"
LEASE_NS = "kube-node-lease"
LEASE_DURATION = 40

Key = tuple[str, str]


class Timers:
    """One thread running callbacks at monotonic deadlines; one pending entry per key."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Key, Callable[[], None]]] = []
        self._due: dict[Key, float] = {}
        self._seq = itertools.count()
        self._cv = threading.Condition()
        threading.Thread(target=self._run, name="timers", daemon=True).start()

    def schedule(self, key: Key, delay: float, fn: Callable[[], None]) -> None:
        """Run `fn` after `delay`s, unless `key` is already due no later than that."""
        when = time.monotonic() + delay
        with self._cv:
            if key in self._due and self._due[key] <= when:
                return
            self._due[key] = when
            heapq.heappush(self._heap, (when, next(self._seq), key, fn))
            self._cv.notify()

    def has(self, key: Key) -> bool:
        with self._cv:
            return key in self._due

    def cancel(self, key: Key) -> None:
        with self._cv:
            self._due.pop(key, None)

    def _run(self) -> None:
        while True:
            with self._cv:
                fn = self._next_due()
            if fn is not None:
                try:
                    fn()
                except Exception:
                    log.exception("timer callback failed")

    def _next_due(self) -> Callable[[], None] | None:
        if not self._heap:
            self._cv.wait()
            return None
        when, _, key, fn = self._heap[0]
        wait = when - time.monotonic()
        if wait > 0:
            self._cv.wait(wait)
            return None
        heapq.heappop(self._heap)
        if self._due.get(key) != when:
            return None  # cancelled or rescheduled
        del self._due[key]
        return fn


@dataclass
class SimNode:
    name: str
    uid: str
    boot_id: str
    obj: JSON
    last_status: float = 0.0
    shutdown_at: str = ""  # the last sim.nodeagent.io/shutdown-at played


def _meta(obj: JSON) -> JSON:
    return obj.get("metadata") or {}


def _annotations(obj: JSON) -> dict[str, str]:
    return _meta(obj).get("annotations") or {}


def _rv(obj: JSON) -> int:
    try:
        return int(_meta(obj).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _pod_path(pod: JSON, sub: str = "") -> str:
    meta = _meta(pod)
    return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}{sub}"


def _duration(pod: JSON, annotation: str) -> float:
    text = _annotations(pod).get(annotation)
    if not text:
        return 0.0
    try:
        return parse_duration(text)
    except ValueError:
        log.warning("%s: ignoring bad %s=%r", _pod_path(pod), annotation, text)
        return 0.0


def _is_ready(pod: JSON) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class Simulator:
    """Keeps simulated nodes Ready and plays the kubelet's part for their pods."""

    def __init__(
        self,
        kube: Kube,
        *,
        workers: int = 16,
        lease_interval: float = 2.0,
        status_interval: float = 10.0,
    ) -> None:
        self.kube = kube
        self.lease_interval = lease_interval
        self.status_interval = status_interval
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="write")
        self.timers = Timers()
        self.lock = threading.RLock()
        self.stopping = threading.Event()
        self.nodes: dict[str, SimNode] = {}
        self.pods: dict[str, JSON] = {}
        self.busy: set[Key] = set()
        self.written_rv: dict[str, int] = {}
        self.deleting_since: dict[str, float] = {}
        self.finished: set[str] = set()
        self.made_ready: set[str] = set()
        self.pod_ips: dict[str, str] = {}
        self.ip_counter = itertools.count()
        self.synced: set[str] = set()
        self.all_synced = threading.Event()
        self.node_reflector = Reflector(
            kube, "/api/v1/nodes", self.on_node,
            params={"labelSelector": f"{SIM_LABEL}=true"},
            on_synced=lambda: self._mark_synced("nodes"),
        )  # fmt: skip
        self.pod_reflector = Reflector(
            kube, "/api/v1/pods", self.on_pod,
            params={"fieldSelector": "spec.nodeName!="},
            on_synced=lambda: self._mark_synced("pods"),
        )  # fmt: skip

    def start(self) -> None:
        self.node_reflector.start()
        self.pod_reflector.start()
        threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True).start()

    def _mark_synced(self, what: str) -> None:
        with self.lock:
            self.synced.add(what)
            if len(self.synced) == 2:
                self.all_synced.set()

    # ---- write queue -------------------------------------------------------------------

    def submit(self, key: Key, fn: Callable[..., None], *args: Any) -> None:
        """Run fn(*args) on the pool unless the same key is already queued or running."""
        with self.lock:
            if key in self.busy:
                return
            self.busy.add(key)
        self.pool.submit(self._run_task, key, fn, args)

    def _run_task(self, key: Key, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        try:
            fn(*args)
        except KubeError as exc:
            log.warning("%s %s: %s", key[1], key[0], exc)
        except Exception:
            log.exception("%s %s failed", key[1], key[0])
        finally:
            with self.lock:
                self.busy.discard(key)

    # ---- nodes -------------------------------------------------------------------------

    def on_node(self, kind: str, node: JSON) -> None:
        name = str(_meta(node).get("name"))
        if kind == "DELETED":
            with self.lock:
                self.nodes.pop(name, None)
            log.info("node %s deleted", name)
            return
        boot_id = _annotations(node).get(BOOT_ID)
        with self.lock:
            sim = self.nodes.get(name)
            new = sim is None
            if sim is None:
                sim = SimNode(name, str(_meta(node).get("uid")), boot_id or str(uuid.uuid4()), node)
                self.nodes[name] = sim
            sim.obj = node
            sim.uid = str(_meta(node).get("uid"))
            if boot_id:
                sim.boot_id = boot_id
        if new:
            log.info("node %s: managing (boot id %s)", name, sim.boot_id)
            self.submit((name, "lease"), self._renew_lease, name)
        if not boot_id:
            self.submit((name, "boot-id"), self._annotate_boot_id, name)
        elif new or not ps.node_is_current(node, boot_id):
            self.submit((name, "status"), self._post_status, name)
        if new:
            self._node_appeared(name)
        shutdown_at = _annotations(node).get(SHUTDOWN_AT, "")
        if shutdown_at and shutdown_at != sim.shutdown_at:
            sim.shutdown_at = shutdown_at
            self.submit((name, "shutdown"), self._shut_down_pods, name, shutdown_at)

    def _shut_down_pods(self, name: str, at: str) -> None:
        """What the kubelet's graceful shutdown writes for each pod it kills."""
        with self.lock:
            pods = [p for p in self.pods.values() if p["spec"].get("nodeName") == name]
        for pod in pods:
            if _meta(pod).get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            uid = str(_meta(pod)["uid"])
            body = ps.shutdown_status(pod, at)
            self._note_written(uid, self.kube.merge_patch(_pod_path(pod, "/status"), body))
            log.info("killed at shutdown %s", _pod_path(pod))

    def _node_appeared(self, name: str) -> None:
        with self.lock:
            pods = [p for p in self.pods.values() if p["spec"].get("nodeName") == name]
        for pod in pods:
            self._reconcile(pod)

    def _annotate_boot_id(self, name: str) -> None:
        with self.lock:
            sim = self.nodes.get(name)
        if sim is None:
            return
        body = {"metadata": {"annotations": {BOOT_ID: sim.boot_id}}}
        self.kube.merge_patch(f"/api/v1/nodes/{name}", body)

    def _post_status(self, name: str) -> None:
        with self.lock:
            sim = self.nodes.get(name)
        if sim is None:
            return
        started = time.monotonic()
        body = ps.node_status(sim.obj, sim.boot_id)
        body["metadata"] = {"uid": sim.uid}
        sim.obj = self.kube.strategic_patch(f"/api/v1/nodes/{name}/status", body)
        sim.last_status = started

    def _renew_lease(self, name: str) -> None:
        with self.lock:
            sim = self.nodes.get(name)
        if sim is None:
            return
        spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION}
        spec["renewTime"] = ps.now_micro()
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases"
        try:
            self.kube.merge_patch(f"{path}/{name}", {"spec": spec})
        except ApiError as exc:
            if exc.status != 404:
                raise
            owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": sim.uid}
            meta = {"name": name, "namespace": LEASE_NS, "ownerReferences": [owner]}
            lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta}
            self.kube.post(path, {**lease, "spec": spec})

    def _heartbeat(self) -> None:
        while not self.stopping.wait(self.lease_interval):
            with self.lock:
                nodes = list(self.nodes.values())
            for sim in nodes:
                self.submit((sim.name, "lease"), self._renew_lease, sim.name)
                if time.monotonic() - sim.last_status >= self.status_interval:
                    self.submit((sim.name, "status"), self._post_status, sim.name)

    # ---- pods --------------------------------------------------------------------------

    def on_pod(self, kind: str, pod: JSON) -> None:
        uid = str(_meta(pod).get("uid"))
        if kind == "DELETED":
            self._forget(uid)
            return
        with self.lock:
            self.pods[uid] = pod
            if pod["spec"].get("nodeName") not in self.nodes:
                return
            if _rv(pod) < self.written_rv.get(uid, 0):
                return  # older than what this simulator already wrote
        self._reconcile(pod)

    def _forget(self, uid: str) -> None:
        with self.lock:
            for table in (self.pods, self.written_rv, self.deleting_since, self.pod_ips):
                table.pop(uid, None)
            self.finished.discard(uid)
            self.made_ready.discard(uid)
        self.timers.cancel((uid, "finish"))
        self.timers.cancel((uid, "ready"))

    def _reconcile(self, pod: JSON) -> None:
        uid = str(_meta(pod)["uid"])
        if _meta(pod).get("deletionTimestamp"):
            self._schedule_finish(pod)
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            return
        if phase != "Running":
            start = self._reject if _annotations(pod).get(REJECT) else self._run
            self.submit((uid, "start"), start, uid)
            return
        if _is_ready(pod) or uid in self.made_ready or READY_DELAY not in _annotations(pod):
            return
        if not self.timers.has((uid, "ready")):  # e.g. after a restart of the simulator
            started = ps.parse_time(pod["status"].get("startTime") or ps.now())
            left = max(0.0, started + _duration(pod, READY_DELAY) - time.time())
            self._schedule_ready(uid, left)

    def _latest(self, uid: str) -> JSON | None:
        with self.lock:
            return self.pods.get(uid)

    def _note_written(self, uid: str, result: JSON) -> None:
        with self.lock:
            self.written_rv[uid] = _rv(result)
            if uid in self.pods and _rv(result) > _rv(self.pods[uid]):
                self.pods[uid] = result

    def _host_ip(self, pod: JSON) -> str:
        with self.lock:
            sim = self.nodes.get(pod["spec"].get("nodeName"))
            return ps.node_ip(sim.obj) if sim else "127.1.0.1"

    def _pod_ip(self, uid: str) -> str:
        with self.lock:
            if uid not in self.pod_ips:
                self.pod_ips[uid] = ps.pod_ip(next(self.ip_counter))
            return self.pod_ips[uid]

    def _run(self, uid: str) -> None:
        pod = self._latest(uid)
        if pod is None or _meta(pod).get("deletionTimestamp"):
            return
        delay = _duration(pod, READY_DELAY)
        if delay > 0:
            self._schedule_ready(uid, delay)  # before the write: its watch event may come first
        body = ps.running_status(pod, self._host_ip(pod), self._pod_ip(uid), ready=delay <= 0)
        self._note_written(uid, self.kube.merge_patch(_pod_path(pod, "/status"), body))
        log.info("running %s%s", _pod_path(pod), f" (ready in {delay}s)" if delay > 0 else "")

    def _schedule_ready(self, uid: str, delay: float) -> None:
        self.timers.schedule(
            (uid, "ready"), delay, lambda: self.submit((uid, "ready"), self._make_ready, uid)
        )

    def _make_ready(self, uid: str) -> None:
        pod = self._latest(uid)
        if pod is None or _meta(pod).get("deletionTimestamp"):
            return
        if (pod.get("status") or {}).get("phase") != "Running":
            return
        self._note_written(
            uid, self.kube.merge_patch(_pod_path(pod, "/status"), ps.ready_status(pod))
        )
        with self.lock:
            self.made_ready.add(uid)
        log.info("ready %s", _pod_path(pod))

    def _reject(self, uid: str) -> None:
        pod = self._latest(uid)
        if pod is None or _meta(pod).get("deletionTimestamp"):
            return
        reason = _annotations(pod)[REJECT]
        message = _annotations(pod).get(REJECT_MESSAGE) or self._reject_message(pod, reason)
        body = ps.rejected_status(pod, reason, message)
        self._note_written(uid, self.kube.merge_patch(_pod_path(pod, "/status"), body))
        log.info("rejected %s: %s", _pod_path(pod), reason)

    def _reject_message(self, pod: JSON, reason: str) -> str:
        if not reason.startswith("OutOf"):
            return ps.REJECT_MESSAGES.get(reason, f"Predicate {reason} failed")
        node_name = pod["spec"].get("nodeName")
        with self.lock:
            sim = self.nodes.get(node_name)
            others = [
                p for p in self.pods.values()
                if p["spec"].get("nodeName") == node_name and p is not pod
                and (p.get("status") or {}).get("phase") in ("Running", "Pending")
            ]  # fmt: skip
        node = sim.obj if sim else {}
        try:
            return ps.insufficient_message(pod, others, node, reason.removeprefix("OutOf"))
        except ValueError:
            return f"Node didn't have enough resource: {reason.removeprefix('OutOf')}"

    def _schedule_finish(self, pod: JSON) -> None:
        uid = str(_meta(pod)["uid"])
        delay = _duration(pod, TERMINATION_DELAY)
        grace = _meta(pod).get("deletionGracePeriodSeconds")
        if grace is not None:
            delay = min(delay, float(grace))
        with self.lock:
            if uid in self.finished:
                return
            since = self.deleting_since.setdefault(uid, time.monotonic())
        left = since + delay - time.monotonic()
        if left <= 0:
            self.timers.cancel((uid, "finish"))
            self.submit((uid, "finish"), self._finish, uid)
        else:
            self.timers.schedule(
                (uid, "finish"), left, lambda: self.submit((uid, "finish"), self._finish, uid)
            )

    def _finish(self, uid: str) -> None:
        pod = self._latest(uid)
        if pod is None:
            return
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        }
        try:
            self.kube.delete(_pod_path(pod), body)
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise
        with self.lock:
            self.finished.add(uid)
        log.info("finished %s", _pod_path(pod))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kubelet_sim", description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--ready-file", help="touched once nodes and pods are listed")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--lease-interval", type=float, default=2.0)
    parser.add_argument("--status-interval", type=float, default=10.0)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s.%(msecs)03d %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
    )  # fmt: skip
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    # The product's client: its pool (64 connections) holds the workers' and the watches'.
    kube = Kube.from_kubeconfig(args.kubeconfig)
    sim = Simulator(
        kube,
        workers=args.workers,
        lease_interval=args.lease_interval,
        status_interval=args.status_interval,
    )
    sim.start()
    if args.ready_file:
        threading.Thread(
            target=_touch_when, args=(sim.all_synced, args.ready_file), daemon=True
        ).start()
    stop.wait()
    log.info("stopping")
    logging.shutdown()
    os._exit(0)


def _touch_when(event: threading.Event, path: str) -> None:
    event.wait()
    Path(path).touch()
    log.info("synced; wrote %s", path)


if __name__ == "__main__":
    raise SystemExit(main())
