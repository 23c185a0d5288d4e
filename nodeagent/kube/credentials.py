"""Which credentials the agent uses, and which node it is.

In order: a kubeconfig named explicitly (`--kubeconfig`, the `kubeconfig` key,
`$KUBECONFIG`); for the one-shot commands `~/.kube/config`; the pod's service account
(DaemonSet form); then the kubelet's own kubeconfig, the host form's default. :func:`plan`
is the only place that order is decided: the client is given the Endpoint of the
credentials chosen and looks for none itself, so what the agent says it runs as is what
its requests carry. Under the Node authorizer and NodeRestriction (how kubeadm, EKS and
GKE run the API server) the kubelet's identity may cordon and annotate its own Node,
patch its conditions, watch, evict and delete its pods and write Events, and nothing on
another node.

`nodeagent run` never falls back from the kubelet's identity to another one: at a node's
first boot the kubelet writes its kubeconfig only after its TLS bootstrap, so the agent
waits for it (see :func:`wait_for_kubelet`).

The node name, when none is given, is the one in the client certificate
(`CN=system:node:<name>`): the name the API knows, which often differs from the host name.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from nodeagent.config import Config, is_node_name
from nodeagent.kube import kubeconfig as kc
from nodeagent.kube.client import Kube
from nodeagent.kube.endpoint import Endpoint, in_cluster
from nodeagent.kube.errors import KubeConfigError
from nodeagent.kube.kubeconfig import parse_yaml

log = logging.getLogger(__name__)

# Where kubelets keep their kubeconfig: EKS and GKE, kubeadm, k3s.
KUBELET_KUBECONFIGS = (
    "/var/lib/kubelet/kubeconfig",
    "/etc/kubernetes/kubelet.conf",
    "/var/lib/rancher/k3s/agent/kubelet.kubeconfig",
)
NODE_USER_PREFIX = "system:node:"
WAIT_POLL = 1.0
WAIT_REMINDER = 600.0  # say again that the agent still waits, this often


class Source(StrEnum):
    """Where the credentials come from."""

    EXPLICIT = "kubeconfig"
    IN_CLUSTER = "in-cluster"
    USER = "user kubeconfig"
    KUBELET = "kubelet"


@dataclass(frozen=True)
class Plan:
    """Which credentials to use: a kubeconfig path, or in-cluster (path None).

    For the kubelet's, `path` is the first candidate that exists ("" while none does).
    """

    source: Source
    path: str | None
    candidates: tuple[str, ...] = ()


def plan(
    explicit: str,
    kubelet_kubeconfig: str,
    environ: Mapping[str, str],
    *,
    daemon: bool,
    exists: Callable[[str], bool] = os.path.isfile,
) -> Plan:
    """Decide where the credentials come from (pure, given `exists`).

    `kubelet_kubeconfig` (the config key) replaces the list of places the kubelet's
    kubeconfig is looked for. The daemon skips `~/.kube/config`: a person's credentials
    lying on a node must not become the agent's by accident.
    """
    if explicit or "KUBECONFIG" in environ:  # an empty one is refused when it is loaded
        return Plan(Source.EXPLICIT, explicit or environ["KUBECONFIG"])
    home = str(Path("~/.kube/config").expanduser())
    if not daemon and exists(home):
        return Plan(Source.USER, home)
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return Plan(Source.IN_CLUSTER, None)
    candidates = (kubelet_kubeconfig,) if kubelet_kubeconfig else KUBELET_KUBECONFIGS
    found = next((c for c in candidates if exists(c)), "")
    return Plan(Source.KUBELET, found, candidates)


def missing(p: Plan) -> str:
    """One line saying that no credentials were found, for the one-shot commands."""
    return (
        "no kubeconfig: pass --kubeconfig, set KUBECONFIG, or run on a node whose kubelet "
        f"kubeconfig exists (looked for {', '.join(p.candidates)})"
    )


# -- the identity in a kubeconfig -----------------------------------------------------------


# What reading a kubeconfig leniently may raise: a missing or unreadable file, bad YAML
# (kubeconfig.YamlError), base64 or UTF-8, and entries that are not the mappings and lists
# expected.
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, AttributeError)


def client_user(kubeconfig: str) -> str:
    """The user a kubeconfig authenticates as by client certificate (its CN), or "".

    Only what is needed to name the identity; a kubeconfig the client cannot load is
    reported by the client, so anything unreadable here just gives "".
    """
    try:
        pem = _client_certificate(Path(kubeconfig))
    except _UNREADABLE:
        return ""
    return common_name(pem) if pem else ""


def node_of(user: str) -> str:
    """`system:node:<name>` -> `<name>`; "" for any other user."""
    return user.removeprefix(NODE_USER_PREFIX) if user.startswith(NODE_USER_PREFIX) else ""


def cert_path(kubeconfig: str) -> str:
    """The client certificate file a kubeconfig points at ("" when embedded or none)."""
    try:
        user = _current_user(Path(kubeconfig))
    except _UNREADABLE:
        return ""
    ref = user.get("client-certificate")
    return str(Path(kubeconfig).parent / ref) if isinstance(ref, str) and ref else ""


def _current_user(path: Path) -> dict[str, Any]:
    doc = parse_yaml(path.read_text())
    contexts = {c["name"]: c.get("context") or {} for c in doc.get("contexts") or []}
    users = {u["name"]: u.get("user") or {} for u in doc.get("users") or []}
    context = contexts.get(doc.get("current-context") or "") or next(iter(contexts.values()), {})
    user = users.get(context.get("user") or "")
    return dict(user) if isinstance(user, dict) else {}


def _client_certificate(path: Path) -> bytes:
    user = _current_user(path)
    if user.get("client-certificate-data"):
        return base64.b64decode(user["client-certificate-data"])
    ref = user.get("client-certificate")
    return (path.parent / ref).read_bytes() if ref else b""


_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.S)
_CN_OID = bytes.fromhex("550403")  # 2.5.4.3 commonName


def common_name(pem: bytes) -> str:
    """The subject CN of the first certificate in `pem` ("" if none can be read).

    A few lines of DER walking instead of a crypto library: only the subject is needed,
    of a certificate the kubelet wrote.
    """
    m = _PEM.search(pem)
    if not m:
        return ""
    try:
        der = base64.b64decode(b"".join(m.group(1).split()))
        return _subject_cn(der)
    except (ValueError, IndexError):
        return ""


def _tlv(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of value, end of value) of the DER element at `pos`."""
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        n = length & 0x7F
        length = int.from_bytes(data[pos : pos + n], "big")
        pos += n
    if pos + length > len(data):
        raise ValueError("truncated DER")
    return tag, pos, pos + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    out = []
    while start < end:
        element = _tlv(data, start)
        out.append(element)
        start = element[2]
    return out


def _subject_cn(der: bytes) -> str:
    _, cert_start, cert_end = _tlv(der, 0)
    _, tbs_start, tbs_end = _children(der, cert_start, cert_end)[0]
    fields = _children(der, tbs_start, tbs_end)
    if fields[0][0] == 0xA0:  # explicit version
        fields = fields[1:]
    # serialNumber, signature, issuer, validity, subject
    _, subj_start, subj_end = fields[4]
    found = ""
    for _, set_start, set_end in _children(der, subj_start, subj_end):
        for _, atv_start, atv_end in _children(der, set_start, set_end):
            (_, oid_s, oid_e), (_, val_s, val_e) = _children(der, atv_start, atv_end)[:2]
            if der[oid_s:oid_e] == _CN_OID:
                found = der[val_s:val_e].decode("utf-8")
    return found


# -- first boot -----------------------------------------------------------------------------


def usable(kubeconfig: str) -> bool:
    """The kubeconfig exists and so does the client certificate it points at."""
    if not os.path.isfile(kubeconfig):
        return False
    cert = cert_path(kubeconfig)
    return not cert or os.path.isfile(cert)


def wait_for_kubelet(
    candidates: Sequence[str],
    notify: Callable[..., None],
    *,
    poll: float = WAIT_POLL,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Block until one of the kubelet's kubeconfigs is usable; return its path.

    The kubelet writes it after its TLS bootstrap, which has no bound the agent could
    know. Meanwhile READY=1 is sent (a node's boot never waits on the agent), STATUS=
    and the log say what the agent waits for, and the watchdog is fed. SIGTERM ends the
    wait (the default handler: there is nothing to drain without credentials).
    """
    what = f"waiting for the kubelet's kubeconfig ({' or '.join(candidates)})"
    message = f"{what}: the kubelet writes it after its TLS bootstrap; no other identity is used"
    log.warning("%s", message)
    notify("READY=1", f"STATUS={what}")
    remind = clock() + WAIT_REMINDER
    while True:
        found = next((c for c in candidates if usable(c)), "")
        if found:
            log.info("found the kubelet's kubeconfig %s", found)
            return found
        notify("WATCHDOG=1")
        if clock() >= remind:
            log.warning("still %s", what)
            remind = clock() + WAIT_REMINDER
        time.sleep(poll)


# -- putting it together --------------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """Who the agent is towards the API server."""

    source: Source
    kubeconfig: str | None  # None: in-cluster
    user: str  # the client certificate's CN; "" when not a certificate

    @property
    def node(self) -> str:
        return node_of(self.user)

    @property
    def is_kubelet(self) -> bool:
        """The kubelet's own identity (from its kubeconfig or named explicitly)."""
        return bool(self.node)

    def describe(self) -> str:
        who = self.user or "(no client certificate)"
        where = self.kubeconfig or "the pod's service account"
        return f"{who} from {where} ({self.source.value})"


def connect(
    cfg: Config,
    *,
    daemon: bool = False,
    notify: Callable[..., None] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[Kube, Identity]:
    """A client on the credentials :func:`plan` chooses; fills in `cfg.node` from the
    certificate.

    The daemon (`notify` given) waits for the kubelet's kubeconfig at first boot; the
    commands fail at once with one line.
    """
    environ = os.environ if environ is None else environ
    p = plan(cfg.kubeconfig, cfg.kubelet_kubeconfig, environ, daemon=daemon)
    path = p.path
    if p.source is Source.KUBELET and not (path and usable(path)):
        if notify is None:
            raise KubeConfigError(missing(p))
        path = wait_for_kubelet(p.candidates, notify)
    identity = Identity(p.source, path, client_user(path) if path else "")
    if not cfg.node and identity.node:
        if not is_node_name(identity.node):
            raise KubeConfigError(f"kubeconfig {path}: {identity.user!r} names no valid node")
        cfg.node = identity.node
    return Kube.from_endpoint(endpoint(path, environ)), identity


def endpoint(path: str | None, environ: Mapping[str, str]) -> Endpoint:
    """The Endpoint of planned credentials: the kubeconfig at `path`, or the pod's
    service account (None). Nothing else is looked for."""
    if path is None:
        return in_cluster(environ)
    if not path.strip():  # only $KUBECONFIG can be empty (the config refuses "")
        raise KubeConfigError("KUBECONFIG: empty value (unset it, or name a kubeconfig file)")
    return kc.endpoint(path)
