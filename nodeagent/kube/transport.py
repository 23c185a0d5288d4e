"""The connection pool to one API server: TLS material, proxy, client certificate rotation.

A urllib3 pool used directly (the client library's REST layer adds nothing the agent
needs and costs about 20 MB to import). The TLS context is built once per pool, so
certificates and keys are parsed once, not at every new connection.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from typing import Any
from urllib.parse import urlsplit

import urllib3
from urllib3.util.ssl_ import create_urllib3_context

from nodeagent import __version__
from nodeagent.kube.endpoint import Endpoint, load_cert_chain
from nodeagent.kube.errors import KubeConfigError

log = logging.getLogger(__name__)

USER_AGENT = f"nodeagent/{__version__}"


class _WatchedFile:
    """A certificate file the pool was built from, watched for rotation.

    The kubelet rotates its client certificate by moving the `kubelet-client-current.pem`
    symlink to a new file; a pod's CA bundle (ca.crt) is replaced the same way when the
    cluster's CA rotates. Pooled keep-alive connections keep the old certificate, and the
    API server checks a client certificate's expiry at every request. So when a file
    changes, the pool is rebuilt (reading the new one) and the old one emptied.
    """

    def __init__(self, what: str, path: str) -> None:
        self.what = what
        self.path = path
        self.seen = self.identity()

    def identity(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)  # follows the symlink: a move shows as a new inode
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def changed(self) -> tuple[int, int, int] | None:
        """The file's new identity if it changed since it was last accepted."""
        now = self.identity()
        return None if now is None or now == self.seen else now


class Transport:
    """A pool of connections to `endpoint`, shared by threads."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        pool_size: int,
        retries: urllib3.Retry,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.endpoint = endpoint
        self._pool_args: dict[str, Any] = {"maxsize": pool_size, "retries": retries}
        # The API server records a write's field manager as its User-Agent up to the "/".
        self._headers = {"Accept": "application/json", "User-Agent": user_agent}
        pems = (("client certificate", endpoint.cert), ("CA bundle", endpoint.ca))
        self._files = [_WatchedFile(what, p.path) for what, p in pems if p is not None and p.path]
        self._lock = threading.Lock()
        try:
            self._pool = self._build()
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise KubeConfigError(
                f"cannot connect to {endpoint.server}: {' '.join(str(exc).split())}"
            ) from None
        if not endpoint.verify:
            import warnings

            from urllib3.exceptions import InsecureRequestWarning

            # One line at start instead of a warning on every request.
            warnings.simplefilter("ignore", InsecureRequestWarning)
            log.warning("kubeconfig disables TLS verification")

    def headers(self, extra: dict[str, str]) -> dict[str, str]:
        """The request's headers: ours, fresh credentials, then `extra`."""
        headers = dict(self._headers)
        auth = self.endpoint.authorization()
        if auth:
            headers["Authorization"] = auth
        headers.update(extra)
        return headers

    def pool(self) -> urllib3.PoolManager:
        """The pool; rebuilt first when a certificate file has changed."""
        if not self._files:
            return self._pool
        with self._lock:
            changed = [(f, now) for f in self._files if (now := f.changed()) is not None]
            if not changed:
                return self._pool
            names = ", ".join(f"{f.what} {f.path}" for f, _ in changed)
            try:
                fresh = self._build()
            except (ssl.SSLError, OSError, ValueError) as exc:
                # Half-written, or the key not yet beside it: the old one is still used.
                log.warning("%s changed, unusable: %s", names, exc)
                return self._pool
            log.info("%s changed: reconnecting with it", names)
            old, self._pool = self._pool, fresh
            for f, now in changed:
                f.seen = now
        old.clear()  # idle connections close; ones in use close when released
        return fresh

    def forget_idle(self) -> None:
        """Close the idle connections (ones in use close when released)."""
        self.pool().clear()

    def _build(self) -> urllib3.PoolManager:
        e = self.endpoint
        args = dict(self._pool_args)
        if e.server.startswith("https"):
            args["ssl_context"] = _context(e)
            args["cert_reqs"] = "CERT_REQUIRED" if e.verify else "CERT_NONE"
            if e.server_name:
                args["server_hostname"] = e.server_name
        proxy = e.proxy or _env_proxy(e.server)
        if not proxy:
            return urllib3.PoolManager(**args)
        if not proxy.startswith(("http://", "https://")):
            raise ValueError(f"proxy {proxy}: only http and https proxies are supported")
        return urllib3.ProxyManager(proxy, **args)


def _context(e: Endpoint) -> ssl.SSLContext:
    ctx = create_urllib3_context(cert_reqs=ssl.CERT_REQUIRED if e.verify else ssl.CERT_NONE)
    if e.verify:
        if e.ca is not None:
            ctx.load_verify_locations(cadata=e.ca.read().decode("ascii"))
        else:
            ctx.load_default_certs()
    if e.cert is not None:
        load_cert_chain(ctx, e.cert, e.key)
    return ctx


def _env_proxy(server: str) -> str:
    """The proxy $HTTPS_PROXY/$HTTP_PROXY name for `server`, unless $NO_PROXY exempts it
    (as the client library, which reads them the same way)."""
    if not any(name.lower().endswith("_proxy") for name in os.environ):
        return ""  # the common case, without importing urllib.request (5 ms of start-up)
    import urllib.request

    proxies = urllib.request.getproxies_environment()
    url = urlsplit(server)
    proxy = proxies.get(url.scheme) or proxies.get("all") or ""
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if proxy and url.hostname and bypass(url.netloc, proxies):
        return ""
    return proxy
