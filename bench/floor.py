"""The floor drain: the least code that does a drain's work, to measure nodeagent against.

Cordon, list the node's pods, evict all but DaemonSet pods with 32 in flight (nodeagent's
default), and wait, by a watch started at the list's resourceVersion, until every evicted pod
is deleted or finished. No policy, no Events, no reporting; a 429 is retried after its
Retry-After (or 0.25 s, the PDB case). Raw HTTPS on the standard library, one connection
per thread, credentials from the same kubeconfig nodeagent gets.

With --events it also records one core/v1 Event per evicted pod right after its eviction,
on the evicting thread: the floor plus the per-pod Event nodeagent sends, to price that
Event apart from the rest of nodeagent.

    python -m bench.floor --node NODE --kubeconfig KUBECONFIG [--events]
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import ssl
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

import yaml

CONCURRENCY = 32
PDB_RETRY = 0.25
WATCH_SECONDS = 600
JSON = dict[str, Any]


class Api:
    """One HTTPS connection per thread to the kubeconfig's server, with its client cert."""

    def __init__(self, kubeconfig: str) -> None:
        with open(kubeconfig) as fh:
            doc = yaml.safe_load(fh)
        ctx_name = doc["current-context"]
        ctx = next(c["context"] for c in doc["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in doc["users"] if u["name"] == ctx["user"])
        url = urlsplit(cluster["server"])
        self.host, self.port = url.hostname or "", url.port or 443
        self.tls = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
        with tempfile.TemporaryDirectory() as tmp:  # ssl wants the key pair in a file
            pem = os.path.join(tmp, "client.pem")
            with open(pem, "wb") as out:
                out.write(base64.b64decode(user["client-certificate-data"]))
                out.write(b"\n" + base64.b64decode(user["client-key-data"]))
            self.tls.load_cert_chain(pem)
        self.local = threading.local()

    def connect(self, timeout: float = 60) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.tls, timeout=timeout)

    def call(
        self, method: str, path: str, body: JSON | None = None, ctype: str = ""
    ) -> tuple[int, http.client.HTTPMessage, JSON]:
        """(status, headers, decoded body) on this thread's connection."""
        conn = getattr(self.local, "conn", None) or self.connect()
        self.local.conn = conn
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = ctype or "application/json"
        conn.request(method, path, data, headers)
        resp = conn.getresponse()
        return resp.status, resp.headers, json.loads(resp.read() or b"{}")


def drainable(pod: JSON) -> bool:
    owners = pod["metadata"].get("ownerReferences") or []
    return not any(o.get("kind") == "DaemonSet" for o in owners) and not finished(pod)


def finished(pod: JSON) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def evict(api: Api, pod: JSON, record: bool) -> None:
    meta = pod["metadata"]
    path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/eviction"
    target = {"name": meta["name"], "namespace": meta["namespace"]}
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": target}
    while True:
        status, headers, reply = api.call("POST", path, body)
        if status < 300 or status == 404:
            if record and status < 300:
                event(api, pod)
            return
        if status != 429:
            raise RuntimeError(f"evicting {meta['name']}: HTTP {status} {reply.get('message')}")
        time.sleep(float(headers.get("Retry-After") or 0) or PDB_RETRY)


def event(api: Api, pod: JSON) -> None:
    meta = pod["metadata"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ref = {"kind": "Pod", "apiVersion": "v1", "uid": meta["uid"]}
    body = {
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}"},
        "involvedObject": {**ref, "name": meta["name"], "namespace": meta["namespace"]},
        "reason": "Evicted",
        "message": "Evicted by the floor drain",
        "type": "Normal",
        "source": {"component": "floor"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    api.call("POST", f"/api/v1/namespaces/{meta['namespace']}/events", body)


def wait_gone(api: Api, selector: str, rv: str, pending: set[str]) -> None:
    """Read the watch until no UID of `pending` is left running on the node. The API server
    may end a watch early (it drops watchers that fall behind): watch again from the last
    resourceVersion seen, as any watcher must."""
    conn = api.connect(timeout=WATCH_SECONDS + 30)  # a quiet watch is no dead one
    while pending:
        query = f"{selector}&watch=1&timeoutSeconds={WATCH_SECONDS}&resourceVersion={rv}"
        conn.request("GET", f"/api/v1/pods?{query}")
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"watch: HTTP {resp.status} {resp.read()[:200]!r}")
        for line in resp:
            event = json.loads(line)
            pod = event["object"]
            if event["type"] == "ERROR":
                raise RuntimeError(f"watch: {pod.get('message')}")
            rv = pod["metadata"]["resourceVersion"]
            if event["type"] == "DELETED" or finished(pod):
                pending.discard(pod["metadata"]["uid"])
            if not pending:
                return


def drain(kubeconfig: str, node: str, record: bool = False) -> int:
    api = Api(kubeconfig)
    patch = {"spec": {"unschedulable": True}}
    status, _, _ = api.call("PATCH", f"/api/v1/nodes/{node}", patch, "application/merge-patch+json")
    if status >= 300:
        raise RuntimeError(f"cordon {node}: HTTP {status}")
    selector = "fieldSelector=" + quote(f"spec.nodeName={node}")
    _, _, pods = api.call("GET", f"/api/v1/pods?{selector}")
    evicting = [p for p in pods["items"] if drainable(p)]
    pending = {p["metadata"]["uid"] for p in evicting}
    rv = pods["metadata"]["resourceVersion"]
    with ThreadPoolExecutor(CONCURRENCY + 1) as pool:  # the watch, and 32 evictions
        waiter = pool.submit(wait_gone, api, selector, rv, pending)
        list(pool.map(lambda p: evict(api, p, record), evicting))
        waiter.result()
    return len(evicting)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--node", required=True)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--events", action="store_true", help="one Event per evicted pod")
    args = parser.parse_args()
    start = time.monotonic()
    evicted = drain(args.kubeconfig, args.node, args.events)
    print(f"floor: drained {evicted} pods from {args.node} in {time.monotonic() - start:.2f}s")
    sys.exit(0)


if __name__ == "__main__":
    main()
