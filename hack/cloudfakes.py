"""Loopback stand-ins for GCP's and Azure's metadata endpoints, following their contracts.

AWS has a real mock that its own node termination handler is tested against
(amazon-ec2-metadata-mock, hack/build-aemm.sh); GCP and Azure have none served here, so
these follow the documented contracts, cited per class. Each also answers badly on
request (`fault`, on the paths in `faulty`, every path when empty): a 500, a body
outside the contract, no answer at all, a reset, a reply trickling a byte a second, or a
body of the test's own (`bodies`: a notice with a time far off), which the agent must
survive without acting. `FaultingRelay` puts the same faults in front of a real endpoint
(amazon-ec2-metadata-mock).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit


class Fault(Enum):
    NONE = "none"
    ERROR = "500"  # HTTP 500
    MALFORMED = "malformed"  # 200 with a body outside the contract
    HANG = "hang"  # accepts, never answers (until the fake stops)
    RESET = "reset"  # reads the request, then resets the connection (RST)
    TRICKLE = "trickle"  # the true answer's headers, then its body a byte a second
    BODY = "body"  # 200 with the test's own body for the path (`bodies`)


TRICKLE_EVERY = 1.0  # seconds between two bytes of a trickling reply


Reply = tuple[int, dict[str, str], bytes]


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class FakeEndpoint:
    """An HTTP server on 127.0.0.1 at a free port; `url` is its base."""

    def __init__(self) -> None:
        self.fault = Fault.NONE
        self.faulty: set[str] = set()  # the paths (without query) the fault is on; empty: all
        self.bodies: dict[str, bytes] = {}  # Fault.BODY's body per path
        self.requests: list[tuple[float, str, str]] = []  # (time, method, path)
        self._stopped = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer("GET", b"")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self._answer("POST", self.rfile.read(length))

            def do_PUT(self) -> None:
                self._answer("PUT", b"")

            def _answer(self, method: str, body: bytes) -> None:
                fake.requests.append((time.time(), method, self.path))
                fault = fake.fault_for(method, self.path)
                if fault is Fault.RESET:
                    self._reset()
                    return
                status, headers, data = fake.reply(method, self.path, dict(self.headers), body)
                try:
                    self._send(status, headers, data, fault)
                except OSError:  # the reader gave up (its deadline passed)
                    self.close_connection = True

            def _send(
                self, status: int, headers: dict[str, str], data: bytes, fault: Fault
            ) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if fault is Fault.TRICKLE:
                    self._trickle(data)
                else:
                    self.wfile.write(data)

            def _reset(self) -> None:
                # Linger 0: close() sends a RST, as a proxy or a crashed server does.
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()
                self.close_connection = True

            def _trickle(self, data: bytes) -> None:
                self.wfile.flush()
                for i in range(len(data)):
                    if fake._stopped.wait(TRICKLE_EVERY):
                        return
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        self.server.shutdown()
        self.server.server_close()

    def fault_for(self, method: str, path: str) -> Fault:
        """The fault on this request: never on a token's PUT (a reading's items are what
        the tests break), only on the `faulty` paths when some are named, and a body of
        the test's own only where it gave one."""
        where = urlsplit(path).path
        if method == "PUT" or (self.faulty and where not in self.faulty):
            return Fault.NONE
        if self.fault is Fault.BODY and where not in self.bodies:
            return Fault.NONE  # a body of its own for some paths only: the others answer true
        return self.fault

    def reads(self, path: str) -> int:
        """How many GETs of `path` (without query) came: a test waits for readings."""
        return sum(1 for _, m, p in list(self.requests) if m == "GET" and urlsplit(p).path == path)

    def reply(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        fault = self.fault_for(method, path)
        if fault is Fault.HANG:
            self._stopped.wait(120)
            return 503, {}, b""
        if fault is Fault.ERROR:
            return 500, {}, b"internal error"
        if fault is Fault.BODY:
            return 200, {"Content-Type": "text/plain"}, self.bodies[urlsplit(path).path]
        return self.answer(method, path, headers, body)

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        raise NotImplementedError


class FaultingRelay(FakeEndpoint):
    """A real endpoint (`upstream`, e.g. amazon-ec2-metadata-mock) behind the faults: every
    request relayed as it came, its answer relayed back, unless a fault is on. A malformed
    body is the relay's own: "<html>" for any path."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        super().__init__()

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        if self.fault_for(method, path) is Fault.MALFORMED:
            return _text(200, "<html>metadata</html>")
        conn = http.client.HTTPConnection(
            self.upstream.hostname or "", self.upstream.port or 80, timeout=5
        )
        try:
            keep = {k: v for k, v in headers.items() if k.lower() not in ("host", "connection")}
            conn.request(method, path, body=body or None, headers=keep)
            resp = conn.getresponse()
            data = resp.read()
            skip = ("content-length", "connection", "transfer-encoding", "date", "server")
            out = {k: v for k, v in resp.getheaders() if k.lower() not in skip}
            return resp.status, out, data
        finally:
            conn.close()


def _text(status: int, text: str, **headers: str) -> Reply:
    return status, {"Content-Type": "text/plain", **headers}, text.encode()


class GceMetadataFake(FakeEndpoint):
    """Compute Engine's metadata server, for the two keys the agent reads.

    Contract (cloud.google.com/compute/docs/metadata/querying-metadata, "Waiting for
    updates", and .../getting-live-migration-notice): requests need
    ``Metadata-Flavor: Google`` (else 403); every answer carries an ``ETag``; with
    ``?wait_for_change=true&last_etag=E`` the server answers at once if the value's ETag is
    not E, else when it changes or ``timeout_sec`` runs out (then with the same value).
    ``maintenance-event`` is NONE, MIGRATE_ON_HOST_MAINTENANCE or
    TERMINATE_ON_HOST_MAINTENANCE; ``preempted`` is TRUE or FALSE.
    """

    KEYS: ClassVar[dict[str, str]] = {
        "/computeMetadata/v1/instance/maintenance-event": "maintenance",
        "/computeMetadata/v1/instance/preempted": "preempted",
    }

    def __init__(self) -> None:
        self.values = {"maintenance": "NONE", "preempted": "FALSE"}
        self._changed = threading.Condition()
        super().__init__()

    def set(self, **values: str) -> None:
        with self._changed:
            self.values.update(values)
            self._changed.notify_all()

    @staticmethod
    def etag(value: str) -> str:
        return hashlib.sha256(value.encode()).hexdigest()[:16]

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        if headers.get("Metadata-Flavor") != "Google":
            return _text(403, "Missing Metadata-Flavor:Google header.")
        url = urlsplit(path)
        key = self.KEYS.get(url.path)
        if key is None:
            return _text(404, "Not Found")
        if self.fault_for(method, path) is Fault.MALFORMED:
            return _text(200, "<html>maintenance</html>", ETag="garbled")
        query = parse_qs(url.query)
        if query.get("wait_for_change") == ["true"]:
            last = (query.get("last_etag") or [""])[0]
            until = time.monotonic() + float((query.get("timeout_sec") or ["60"])[0])
            with self._changed:
                self._changed.wait_for(
                    lambda: self.etag(self.values[key]) != last or time.monotonic() >= until,
                    timeout=max(0.0, until - time.monotonic()),
                )
        value = self.values[key]
        return _text(200, value, ETag=self.etag(value))


def http_date(epoch: float) -> str:
    """Azure's NotBefore: Mon, 19 Sep 2016 18:29:47 GMT."""
    return formatdate(epoch, usegmt=True)


@dataclass
class AzureEvent:
    event_id: str
    event_type: str  # Preempt, Terminate, Reboot, Redeploy, Freeze
    resources: list[str]
    not_before: float  # epoch seconds
    status: str = "Scheduled"

    def as_json(self) -> dict[str, Any]:
        return {
            "EventId": self.event_id,
            "EventStatus": self.status,
            "EventType": self.event_type,
            "ResourceType": "VirtualMachine",
            "Resources": self.resources,
            "NotBefore": "" if self.status == "Started" else http_date(self.not_before),
            "Description": f"fake {self.event_type}",
            "EventSource": "Platform",
            "DurationInSeconds": -1,
        }


@dataclass
class Approval:
    at: float
    event_id: str


class AzureScheduledEventsFake(FakeEndpoint):
    """Azure's Scheduled Events and the VM's name from the instance metadata service.

    Contract (learn.microsoft.com/azure/virtual-machines/linux/scheduled-events): requests
    need ``Metadata: true`` (else 400); ``GET /metadata/scheduledevents`` answers
    ``{"DocumentIncarnation", "Events"}``, the incarnation moving on every change; an event
    ends by leaving the list (no completed state; a canceled one leaves too); a ``POST`` of
    ``{"StartRequests": [{"EventId"}]}`` starts the event (``Started``, NotBefore empty) for
    every VM it names, answers 200 for any known ID, 400 for a malformed body.
    """

    def __init__(self, vm_name: str = "vm1") -> None:
        self.vm_name = vm_name
        self.events: list[AzureEvent] = []
        self.incarnation = 1
        self.approvals: list[Approval] = []
        self.on_approve: Callable[[AzureEvent], None] = lambda _event: None
        self._lock = threading.Lock()
        super().__init__()

    def add(self, event: AzureEvent) -> None:
        with self._lock:
            self.events.append(event)
            self.incarnation += 1

    def remove(self, event_id: str) -> None:
        with self._lock:
            self.events = [e for e in self.events if e.event_id != event_id]
            self.incarnation += 1

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        if headers.get("Metadata") != "true":
            return _text(400, "Bad request. Required metadata header not specified")
        url = urlsplit(path)
        if url.path == "/metadata/instance/compute/name":
            return _text(200, self.vm_name)
        if url.path != "/metadata/scheduledevents":
            return _text(404, "Not found")
        if method == "POST":
            return self._approve(body)
        if self.fault_for(method, path) is Fault.MALFORMED:
            return 200, {"Content-Type": "application/json"}, b'{"DocumentIncarnation": "x"'
        with self._lock:
            doc = {
                "DocumentIncarnation": self.incarnation,
                "Events": [e.as_json() for e in self.events],
            }
        return 200, {"Content-Type": "application/json"}, json.dumps(doc).encode()

    def _approve(self, body: bytes) -> Reply:
        try:
            ids = [r["EventId"] for r in json.loads(body)["StartRequests"]]
        except (ValueError, KeyError, TypeError):
            return _text(400, "Bad request")
        with self._lock:
            for event in self.events:
                if event.event_id in ids:
                    event.status = "Started"
                    self.approvals.append(Approval(time.time(), event.event_id))
                    self.incarnation += 1
                    self.on_approve(event)
        return _text(200, "")
