"""The departure benchmark's client (run inside the client namespace, hack/realnode/traffic.py).

    python -m hack.departure.loadgen steady --url http://10.96.0.10/ --rate 50 > out.jsonl
    python -m hack.departure.loadgen long --url http://10.96.0.10/slow?s=20 --url ... > long.jsonl

`steady` sends `rate` requests a second on a fixed schedule, half on a new connection each,
half over keep-alive connections, until SIGTERM; then waits for what is in flight. `long`
sends each URL once, all at once, and waits for every answer. One JSON line per request:
start (wall clock), seconds, mode, ok, error class, status.

A keep-alive request that fails on a reused connection before any byte of an answer is sent
again once on a new connection, as Go's net/http and urllib3 do for idempotent requests: the
server may close an idle connection at any moment (it does so while draining). Anything else
that fails is counted, and never retried.
"""

from __future__ import annotations

import argparse
import errno
import http.client
import json
import signal
import socket
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

TIMEOUT = 5.0
LONG_TIMEOUT = 120.0
KEEPALIVE_CONNS = 4


@dataclass
class Result:
    start: float
    seconds: float
    mode: str  # new | keepalive | long
    ok: bool
    error: str = ""  # refused | reset | timeout | unreachable | 5xx | other
    status: int = 0
    detail: str = ""
    retried: bool = False
    served_by: str = ""  # the pod that answered (the server names itself)


def classify(exc: BaseException) -> str:
    """The failure's class, as a client sees it."""
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, ConnectionResetError | BrokenPipeError | http.client.HTTPException):
        return "reset"  # RemoteDisconnected, IncompleteRead, BadStatusLine: the peer went
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timeout"
    if isinstance(exc, OSError) and exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "unreachable"
    return "other"


class Target:
    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host = parts.hostname or ""
        self.port = parts.port or 80
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    def conn(self, timeout: float) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


def _exchange(conn: http.client.HTTPConnection, path: str, close: bool) -> tuple[int, str]:
    headers = {"Connection": "close"} if close else {}
    conn.request("GET", path, headers=headers)
    resp = conn.getresponse()
    body = resp.read().decode(errors="replace").split()
    if resp.will_close:
        conn.close()
    return int(resp.status), body[1] if len(body) > 1 else ""


def one(target: Target, mode: str, timeout: float) -> Result:
    """A request on a connection of its own."""
    start, t0 = time.time(), time.monotonic()
    conn = target.conn(timeout)
    try:
        status, by = _exchange(conn, target.path, close=True)
    except Exception as exc:
        return Result(start, time.monotonic() - t0, mode, False, classify(exc), 0, repr(exc))
    finally:
        conn.close()
    ok = status < 500
    took = time.monotonic() - t0
    return Result(start, took, mode, ok, "" if ok else "5xx", status, served_by=by)


class KeepAlive:
    """One persistent connection, sending on its own schedule."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.conn: http.client.HTTPConnection | None = None
        self.used = False

    def send(self) -> Result:
        start, t0 = time.time(), time.monotonic()
        retried = False
        while True:
            if self.conn is None or self.conn.sock is None:
                self.conn, self.used = self.target.conn(TIMEOUT), False
            reused = self.used
            try:
                status, by = _exchange(self.conn, self.target.path, close=False)
                self.used = True
                break
            except Exception as exc:
                self.conn.close()
                self.conn = None
                nothing_back = isinstance(
                    exc, ConnectionResetError | BrokenPipeError | http.client.RemoteDisconnected
                )
                if reused and nothing_back and not retried:
                    retried = True
                    continue
                took = time.monotonic() - t0
                return Result(start, took, "keepalive", False, classify(exc), 0, repr(exc), retried)
        ok = status < 500
        took = time.monotonic() - t0
        error = "" if ok else "5xx"
        return Result(start, took, "keepalive", ok, error, status, "", retried, by)


class Output:
    def __init__(self) -> None:
        self.lock = threading.Lock()

    def write(self, result: Result) -> None:
        line = json.dumps(asdict(result))
        with self.lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


def steady(target: Target, rate: float) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    out = Output()
    pool = ThreadPoolExecutor(max_workers=64)
    keepers = [KeepAlive(target) for _ in range(KEEPALIVE_CONNS)]
    busy = [threading.Lock() for _ in keepers]

    def keepalive(i: int) -> None:
        with busy[i]:
            out.write(keepers[i].send())

    interval = 1.0 / rate
    due = time.monotonic()
    n = 0
    while not stop.is_set():
        if n % 2 == 0:
            pool.submit(lambda: out.write(one(target, "new", TIMEOUT)))
        else:
            i = (n // 2) % len(keepers)
            pool.submit(keepalive, i)
        n += 1
        due += interval
        stop.wait(max(0.0, due - time.monotonic()))
    # What is in flight finishes and is written; what waits for a worker (a backlog while
    # requests time out) was never sent and is dropped.
    pool.shutdown(wait=True, cancel_futures=True)


def long(targets: list[Target]) -> None:
    out = Output()

    def send(target: Target) -> None:
        out.write(one(target, "long", LONG_TIMEOUT))

    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        for t in targets:
            pool.submit(send, t)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack.departure.loadgen")
    parser.add_argument("mode", choices=("steady", "long"))
    parser.add_argument("--url", action="append", required=True)
    parser.add_argument("--rate", type=float, default=50.0)
    args = parser.parse_args(argv)
    if args.rate <= 0:
        print("error: --rate must be positive", file=sys.stderr)
        return 2
    targets = [Target(u) for u in args.url]
    if args.mode == "steady":
        steady(targets[0], args.rate)
    else:
        long(targets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
