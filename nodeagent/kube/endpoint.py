"""Where the API server is and how to authenticate to it, as plain data.

A kubeconfig (`nodeagent.kube.kubeconfig`), the pod's service account (here) or, for
credential plugins, the client library (`nodeagent.kube.library`) each give an
`Endpoint`; the transport (`nodeagent.kube.transport`) sends requests to it. Certificate
material named by a file is read when a connection pool is built, so a rotated file is
picked up when the pool is rebuilt.
"""

from __future__ import annotations

import os
import ssl
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from nodeagent.kube.errors import KubeConfigError

# The pod's service account, as the kubelet mounts it (a projected, rotating token).
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class Pem:
    """PEM material: a file, read when a pool is built, or embedded bytes."""

    path: str = ""
    data: bytes = b""

    def read(self) -> bytes:
        return self.data if self.data else Path(self.path).read_bytes()


@dataclass(frozen=True)
class Endpoint:
    """One API server and the credentials for it."""

    server: str  # scheme://host[:port], no trailing slash
    ca: Pem | None = None  # None: the system's trust store
    cert: Pem | None = None
    key: Pem | None = None
    verify: bool = True
    server_name: str = ""  # TLS server name, when it is not the server's host
    proxy: str = ""  # proxy URL ("" for none)
    # The Authorization header's value (None: send none); called before every request.
    authorization: Callable[[], str | None] = lambda: None


def load_cert_chain(ctx: ssl.SSLContext, cert: Pem, key: Pem | None) -> None:
    """Load a client certificate and key into `ctx`. ssl reads them only from files:
    embedded ones are written to a private directory for the moment of reading."""
    if not cert.data and (key is None or not key.data):
        ctx.load_cert_chain(cert.path, key.path if key is not None else None)
        return
    with tempfile.TemporaryDirectory() as tmp:  # 0700
        paths = []
        for name, pem in (("cert", cert), ("key", key)):
            if pem is not None:
                path = Path(tmp) / name
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(pem.read())
                paths.append(str(path))
        ctx.load_cert_chain(paths[0], paths[1] if len(paths) > 1 else None)


class TokenFile:
    """A bearer token read from a file, again whenever the file changes.

    The service account token the kubelet mounts is projected and rotated (the file is
    replaced through a symlink swap well before it expires); a kubeconfig's tokenFile
    may be rotated the same way. A stat per request is cheap next to the request.
    """

    def __init__(self, path: str, where: str) -> None:
        self.path = path
        self.where = where  # names the file in errors
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._token = ""
        self.read()

    def _identity(self) -> tuple[int, int, int]:
        st = os.stat(self.path)  # follows the symlink: a swap shows as a new inode
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def read(self) -> str:
        """The token, read again if the file changed; KubeConfigError if there is none."""
        with self._lock:
            try:
                now = self._identity()
                if now != self._seen:
                    token = Path(self.path).read_text().strip()
                    if not token:
                        raise KubeConfigError(f"{self.where}: empty file")
                    self._token, self._seen = token, now
            except (OSError, UnicodeDecodeError) as exc:
                if not self._token:
                    why = getattr(exc, "strerror", None) or "not a text file"
                    raise KubeConfigError(f"{self.where}: {why}") from None
                # Mid-swap or briefly unreadable: the last token is still valid.
            return self._token

    def authorization(self) -> str:
        return f"Bearer {self.read()}"


def in_cluster(environ: Mapping[str, str], sa_dir: Path | None = None) -> Endpoint:
    """The API server and token a pod's service account gives (as client-go's
    rest.InClusterConfig; the messages are the ones the client library gave). `sa_dir`
    defaults to SA_DIR, read when called so that a test can mount a service account of
    its own (tests/test_client_credentials.py)."""
    sa_dir = SA_DIR if sa_dir is None else sa_dir
    where = "kubeconfig (in-cluster service account)"
    if "KUBERNETES_SERVICE_HOST" not in environ or "KUBERNETES_SERVICE_PORT" not in environ:
        raise KubeConfigError(f"{where}: Service host/port is not set.")
    host, port = environ["KUBERNETES_SERVICE_HOST"], environ["KUBERNETES_SERVICE_PORT"]
    if not host or not port:
        raise KubeConfigError(f"{where}: Service host/port is set but empty.")
    if ":" in host or "%" in host:  # an IPv6 address
        host = f"[{host}]"
    token_path, ca_path = sa_dir / "token", sa_dir / "ca.crt"
    if not token_path.is_file():
        raise KubeConfigError(f"{where}: Service token file does not exist.")
    token = TokenFile(str(token_path), f"{where}: token file {token_path}")
    if not ca_path.is_file():
        raise KubeConfigError(f"{where}: Service certification file does not exist.")
    try:
        if not ca_path.read_bytes().strip():
            raise KubeConfigError(f"{where}: Cert file exists but empty.")
    except OSError as exc:
        raise KubeConfigError(f"{where}: {ca_path}: {exc.strerror}") from None
    return Endpoint(
        server=f"https://{host}:{port}",
        ca=Pem(path=str(ca_path)),
        authorization=token.authorization,
    )
