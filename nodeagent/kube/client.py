"""A small JSON client for the Kubernetes API.

Bodies stay plain dicts (building model objects for a hundred pods costs more than the
drain itself) and requests go through a urllib3 pool of our own (nodeagent.kube.transport).
The client is given an Endpoint and looks for no credentials itself: which ones is
nodeagent.kube.credentials.plan's choice alone; a kubeconfig (nodeagent.kube.kubeconfig),
the pod's service account (nodeagent.kube.endpoint) or, for exec plugins and the like
only, the official client library (nodeagent.kube.library) gives the Endpoint. API
Priority and Fairness 429s are waited out here (nodeagent.kube.throttle).
"""

from __future__ import annotations

import copy
import json
import logging
import random
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

# The errors live in their own module (no import circle in nodeagent.kube); callers take
# them from here along with the client.
from nodeagent.kube.errors import ApiError as ApiError
from nodeagent.kube.errors import KubeConfigError as KubeConfigError
from nodeagent.kube.errors import KubeError as KubeError
from nodeagent.kube.errors import OutOfTime as OutOfTime
from nodeagent.kube.errors import Silent as Silent
from nodeagent.kube.errors import Unreachable as Unreachable

if TYPE_CHECKING:
    from nodeagent.kube.endpoint import Endpoint
    from nodeagent.kube.transport import Transport

JSON = dict[str, Any]
log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 3.0
READ_TIMEOUT = 15.0
POOL_SIZE = 64
# Under a deadline a request waits at most this share of the time left for its connect
# and its answer: one lost to a partition leaves time for three more (a 15 s read inside
# a 30 s shutdown budget would leave one), and none waits less than REQUEST_FLOOR.
DEADLINE_SHARE = 0.25
REQUEST_FLOOR = 1.0


def request_timeouts(connect: float, read: float, left: float) -> tuple[float, float]:
    """The connect and read timeouts of a request with `left` seconds to its deadline."""
    share = max(REQUEST_FLOOR, left * DEADLINE_SHARE)
    return min(connect, share, left), min(read, share, left)


class Stream:
    """One watch's open stream: when its last byte came, and its socket, so that another
    thread can cut it (Reachability.cut) and its blocked read ends at once."""

    def __init__(self, sock: Any, path: str) -> None:
        self.sock = sock
        self.path = path
        self.last_byte = time.monotonic()  # its headers, then each chunk
        self.cut_why = ""  # why it was cut ("": it was not)


class Reachability:
    """Whether the API server answers this client (and its bounded copies): the time of
    its last answer of any status, and why the requests since got none.

    It also knows the open watch streams. A stream blackholed with the rest of the path
    (packets dropped, no RST) stays open and silent after the path heals, and its watch
    would wait out its silence (kube/watch.py SILENCE_SECONDS, 90 s) before starting again.
    So when an answer ends an outage in which a request got none, every stream that has
    carried nothing since the outage began is cut, and its watch starts again at once
    (from its resourceVersion: no list). This asks the API server nothing: the evidence
    is the agent's own requests, and in steady state there is no outage, so no cut. A
    watch's silence alone (Silent, `request=False`) arms no cut: where the API server
    sends no bookmarks, a quiet watch ends every 90 s, and its new watch must not take the
    other watches down with it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last_answer = time.monotonic()
        self.why = ""  # "" while it answers
        self.outage_began: float | None = None  # the last answer before the last outage
        self._request_lost = False  # a request got no answer in the outage under way
        self._streams: set[Stream] = set()
        self.recoveries = 0  # outages ended by an answer

    def answered(self, stream: Stream | None = None) -> bool:
        """Note an answer (a byte of `stream`); True when it ends an outage."""
        with self._lock:
            now = time.monotonic()
            if stream is not None:
                stream.last_byte = now
            self.last_answer = now
            ended, self.why = bool(self.why), ""
            self.recoveries += ended
            if ended and self._request_lost:
                self._cut_stale(now)
            self._request_lost = False
            return ended

    def failed(self, why: str, *, request: bool = True) -> None:
        """A request (`request`), or a watch's silence, got no answer."""
        with self._lock:
            if not self.why:
                self.outage_began = self.last_answer
            self.why = why
            self._request_lost = self._request_lost or request

    def silent_for(self) -> float:
        """Seconds since the last answer."""
        return time.monotonic() - self.last_answer

    def down_for(self) -> float | None:
        """Seconds since the last answer while requests since got none; None while it
        answers."""
        with self._lock:
            return time.monotonic() - self.last_answer if self.why else None

    def opened(self, stream: Stream) -> None:
        with self._lock:
            self._streams.add(stream)

    def closed(self, stream: Stream) -> None:
        """Before its connection goes back to the pool: a cut never reaches a socket that
        serves another request."""
        with self._lock:
            self._streams.discard(stream)

    def cut(self, stream: Stream, why: str) -> bool:
        """End `stream`'s blocked read now (its watch starts again); False when it is
        closed already."""
        with self._lock:
            if stream not in self._streams:
                return False
            _shut(stream, why)
            return True

    def _cut_stale(self, now: float) -> None:
        began = self.outage_began if self.outage_began is not None else now
        for stream in self._streams:
            if stream.last_byte <= began:
                lost = now - began
                _shut(
                    stream,
                    f"the API server answers again, and {stream.path} carried nothing "
                    f"since it was lost {lost:.0f}s ago: connection presumed dead",
                )


def _shut(stream: Stream, why: str) -> None:
    stream.cut_why = stream.cut_why or why
    with suppress(OSError):  # closed meanwhile: its read has ended anyway
        # The plain socket's shutdown, under TLS too (SSLSocket.shutdown would drop its
        # SSL object under the reading thread): the blocked read sees the end at once.
        socket.socket.shutdown(stream.sock, socket.SHUT_RDWR)


def _api_error(status: int, reason: str, data: bytes, headers: Any) -> ApiError:
    try:
        body = json.loads(data or b"{}")
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    retry = (headers or {}).get("Retry-After")
    return ApiError(
        status=status,
        reason=str(body.get("reason") or reason or ""),
        message=str(body.get("message") or reason or "request failed"),
        body=body,
        retry_after=float(retry) if retry and retry.isdigit() else None,
    )


def _unreachable(host: str, exc: BaseException) -> Unreachable:
    text = str(getattr(exc, "reason", None) or exc)
    # urllib3 nests the OS error deep in its message: keep only that part.
    m = re.search(r"\[Errno -?\d+\] ([^'\"\)]+)", text)
    detail = m.group(1) if m else text.rsplit(": ", 1)[-1].strip(" \"'")
    if detail.count(")") > detail.count("("):
        detail = detail.rstrip(")")
    detail = detail or type(exc).__name__
    return Unreachable(f"API server {host} unreachable: {detail}")


class Kube:
    """Plain-JSON requests against one API server.

    Thread-safe: the connection pool underneath is shared by worker threads.
    """

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self.host: str = transport.endpoint.server
        self.deadline: float | None = None  # time.monotonic() bound on every request
        self.reach = Reachability()  # shared with the bounded copies

    def bounded(self, deadline: float) -> Kube:
        """The same client (and connection pool) with every request cut to end by
        `deadline` (monotonic): no connect, TLS handshake, read or wait outlives it."""
        clone = copy.copy(self)
        clone.deadline = deadline
        return clone

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str, user_agent: str | None = None) -> Kube:
        """The client of the kubeconfig at `kubeconfig`. It looks for no other: which
        credentials the agent uses is `nodeagent.kube.credentials.plan`'s choice.
        `user_agent`: another than the agent's (a harness's client of another tool)."""
        from nodeagent.kube import kubeconfig as kc

        return cls.from_endpoint(kc.endpoint(kubeconfig), user_agent)

    @classmethod
    def from_endpoint(cls, endpoint: Endpoint, user_agent: str | None = None) -> Kube:
        import urllib3

        from nodeagent.kube.transport import USER_AGENT, Transport

        # One retry of a failed connect; reads are never retried (not every verb is
        # idempotent), nor are answers: urllib3 would by itself resend a 429 with a
        # Retry-After of an idempotent verb and, with no status retries left, raise
        # "too many 429 error responses"; APF's 429s are waited out in _call instead.
        retries = urllib3.Retry(
            total=1,
            connect=1,
            read=0,
            redirect=0,
            status=0,
            backoff_factor=0.1,
            respect_retry_after_header=False,
        )
        agent = user_agent or USER_AGENT
        return cls(Transport(endpoint, pool_size=POOL_SIZE, retries=retries, user_agent=agent))

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = READ_TIMEOUT,
    ) -> JSON:
        """Send one request; return the decoded JSON body (or {} when empty)."""
        data = self._call(method, path, query, body, content_type, timeout).data
        return json.loads(data) if data else {}

    def _call(
        self,
        method: str,
        path: str,
        query: dict[str, str] | None,
        body: Any,
        content_type: str,
        read_timeout: float,
    ) -> Any:
        """Send a request, waiting out APF's 429s; return the raw (unread) urllib3
        response, or raise."""
        from nodeagent.kube import throttle

        url = f"{self.host}{path}" + (f"?{urlencode(query)}" if query else "")
        payload = None if body is None else json.dumps(body).encode()
        extra = {"Content-Type": content_type} if body is not None else {}
        attempt = 0
        while True:
            resp = self._send(method, url, payload, extra, read_timeout)
            if resp.status < 300:
                return resp
            data = resp.data
            error = _api_error(resp.status, resp.reason, data, resp.headers)
            left = None if self.deadline is None else self.deadline - time.monotonic()
            why = throttle.refusal(resp.status, resp.headers, error.body)
            wait = throttle.retry_wait(why, attempt, left, random.random())
            if wait is None:
                raise error
            _count_throttled(method, path, wait)
            time.sleep(wait)
            attempt += 1

    def _send(
        self,
        method: str,
        url: str,
        payload: bytes | None,
        extra: dict[str, str],
        read: float,
        connect: float = CONNECT_TIMEOUT,
        retries: Any = None,  # None: the pool's (one more connect); False: none
    ) -> Any:
        import urllib3
        from urllib3.exceptions import HTTPError

        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0.05:
                raise OutOfTime(f"no time left for {method} {url.removeprefix(self.host)}")
            connect, read = request_timeouts(connect, read, left)
        try:
            resp = self._transport.pool().request(
                method,
                url,
                body=payload,
                headers=self._transport.headers(extra),
                timeout=urllib3.Timeout(connect=connect, read=read),
                preload_content=False,
                retries=retries,
            )
        except (HTTPError, OSError) as exc:
            unreachable = _unreachable(self.host, exc)
            self.reach.failed(str(unreachable))
            raise unreachable from None
        if self.reach.answered():
            # The pool's idle connections may be dead ones of the outage (a partition drops
            # them silently): each would cost a request its whole timeout.
            self._transport.forget_idle()
        return resp

    def probe(self, timeout: float) -> None:
        """One quick request to tell whether the API server answers at all; raises
        Unreachable when it does not. GET /livez: readable by every authenticated user
        (system:public-info-viewer), and matched by the API server's default `probes` flow
        schema, which is exempt from Priority and Fairness, so a throttled level neither
        queues nor refuses it. Any answer proves the server is there, even a 429 or a 500."""
        url = f"{self.host}/livez"
        resp = self._send("GET", url, None, {}, timeout, connect=timeout, retries=False)
        _ = resp.data  # read to the end: the connection goes back to the pool

    def server_time(self) -> float:
        """The API server's clock (its Date header, whole seconds), for judging the
        timestamps it writes without trusting this host's clock."""
        from email.utils import parsedate_to_datetime

        resp = self._call("GET", "/version", None, None, "", READ_TIMEOUT)
        _ = resp.data  # read to the end: the connection goes back to the pool
        try:
            return parsedate_to_datetime(resp.headers["Date"]).timestamp()
        except (KeyError, TypeError, ValueError):
            raise KubeError(f"API server {self.host} sent no usable Date header") from None

    def get(self, path: str, **query: str) -> JSON:
        return self.request("GET", path, query=query or None)

    def post(self, path: str, body: JSON) -> JSON:
        return self.request("POST", path, body=body)

    def merge_patch(self, path: str, body: JSON) -> JSON:
        return self.request("PATCH", path, body=body, content_type="application/merge-patch+json")

    def strategic_patch(self, path: str, body: JSON) -> JSON:
        return self.request(
            "PATCH", path, body=body, content_type="application/strategic-merge-patch+json"
        )

    def delete(self, path: str, body: JSON | None = None) -> JSON:
        return self.request("DELETE", path, body=body)

    def watch(
        self,
        path: str,
        query: dict[str, str],
        timeout_seconds: int,
        silence: float,
        opened: Callable[[Stream], None] = lambda _stream: None,
    ) -> Iterator[JSON]:
        """Yield watch events ({"type", "object"}) until the server ends the stream.

        The answer's headers are awaited as any answer's; then the stream may be quiet for
        `silence` seconds at most, however long the watch (`timeout_seconds`): a read that
        gets no byte for longer raises Silent. A read timeout is a silence deadline, one
        recv at a time. `opened` is handed the open stream: `reach.cut(stream, why)` ends
        it early, as Silent(why)."""
        params = dict(query, watch="true", timeoutSeconds=str(timeout_seconds))
        resp = self._call("GET", path, params, None, "", READ_TIMEOUT)
        if self.deadline is not None:
            silence = max(0.05, min(silence, self.deadline - time.monotonic()))
        stream = Stream(getattr(resp.connection, "sock", None), path)
        clean = False
        try:
            _set_read_timeout(resp, silence)
            if stream.sock is not None:
                self.reach.opened(stream)
                opened(stream)
            yield from _json_lines(resp, self.host, stream, silence, self.reach)
            clean = True
        finally:
            self.reach.closed(stream)
            if not clean:
                # Dead, cut or left midway: its connection is not one to send on again.
                resp.close()
            resp.release_conn()


def _set_read_timeout(resp: Any, seconds: float) -> None:
    """Every later read on `resp`'s connection waits at most `seconds` for a byte."""
    sock = getattr(resp.connection, "sock", None)
    if sock is not None:
        sock.settimeout(seconds)


def _count_throttled(method: str, path: str, wait: float) -> None:
    from nodeagent import metrics  # as in identity.pdbs_forbidden: kept off one-shots

    metrics.API_THROTTLED.labels(method).inc()
    log.debug(
        "%s %s: throttled by the API server (429), sending again in %.1fs", method, path, wait
    )


def _json_lines(
    resp: Any, host: str, stream: Stream, silence: float, reach: Reachability
) -> Iterator[JSON]:
    from urllib3.exceptions import HTTPError, ReadTimeoutError

    buf = b""
    path = stream.path
    try:
        for chunk in resp.stream(amt=None, decode_content=False):
            reach.answered(stream)  # a watch's bytes are answers too (events, bookmarks)
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    yield json.loads(line)
    except (ReadTimeoutError, TimeoutError):
        if stream.cut_why:
            raise Silent(stream.cut_why) from None
        silent = Silent(
            f"nothing from {host} on {path} for {silence:.0f}s, not even a bookmark: "
            "connection presumed dead"
        )
        reach.failed(str(silent), request=False)
        raise silent from None
    except (HTTPError, OSError) as exc:
        if stream.cut_why:
            raise Silent(stream.cut_why) from None
        unreachable = _unreachable(host, exc)
        reach.failed(str(unreachable))
        raise unreachable from None
    if stream.cut_why:  # the cut read as the stream's end
        raise Silent(stream.cut_why)


def pods_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{quote(namespace)}/pods"
    return f"{base}/{quote(name)}" if name else base


def node_path(name: str) -> str:
    return f"/api/v1/nodes/{quote(name)}"


def api_stamp(seconds: float | None = None) -> str:
    """Epoch seconds (default: now) as an API timestamp; the inverse of :func:`api_time`."""
    from datetime import UTC, datetime

    when = time.time() if seconds is None else seconds
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def api_time(text: str | None) -> float | None:
    """An API timestamp (RFC 3339, e.g. 2026-11-23T18:01:02Z) as epoch seconds."""
    if not text:
        return None
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
