"""Relay a TCP port of the host's loopback into a network namespace's loopback.

    python -m hack.realnode.nsrelay NETNS PORT

The local control plane listens on the host's 127.0.0.1 only (hack/localcluster/cluster.py);
a process in another network namespace (the client's kube-proxy, hack/realnode/traffic.py)
cannot reach it. This process stays in the host's namespace, makes its listening socket inside
NETNS (a socket belongs to the namespace it was made in) and relays each connection to the
same port on the host. TLS passes through untouched. It runs until SIGTERM.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import threading
from contextlib import suppress

CLONE_NEWNET = 0x40000000


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def listen_in(netns: str, port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:`port` inside `netns`; the caller stays where it was."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            return socket.create_server(("127.0.0.1", port))
        finally:
            _setns(home)
    finally:
        os.close(home)
        os.close(target)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def _serve(conn: socket.socket, port: int) -> None:
    try:
        upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError:
        conn.close()
        return
    upstream.settimeout(None)
    back = threading.Thread(target=_pipe, args=(upstream, conn), daemon=True)
    back.start()
    _pipe(conn, upstream)
    back.join()
    conn.close()
    upstream.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or not args[1].isdigit():
        print("usage: python -m hack.realnode.nsrelay NETNS PORT", file=sys.stderr)
        return 2
    netns, port = args[0], int(args[1])
    try:
        listener = listen_in(netns, port)
    except OSError as exc:
        print(f"error: listening in {netns}: {exc}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print(f"relaying 127.0.0.1:{port} of {netns} to the host's", flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve, args=(conn, port), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
