"""Certificates for the local control plane, made with the openssl CLI.

Everything is signed by one throw-away CA. Keys are P-256 (fast to make); the service
account signing key is RSA, the algorithm every consumer of those tokens supports.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

CA_SUBJECT = "/CN=nodeagent-local-ca"
DAYS = "3650"
SERVER_SANS = (
    "IP:127.0.0.1",
    "DNS:localhost",
    "IP:10.96.0.1",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
)


class PKIError(RuntimeError):
    """openssl failed."""


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path

    def cert_b64(self) -> str:
        return base64.b64encode(self.cert.read_bytes()).decode()

    def key_b64(self) -> str:
        return base64.b64encode(self.key.read_bytes()).decode()


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise PKIError(f"openssl {args[0]} failed: {proc.stderr.strip()}")


def _ec_key(path: Path) -> None:
    _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path)
    )
    path.chmod(0o600)


def _escape(value: str) -> str:
    return re.sub(r"([/\\])", r"\\\1", value)


def subject(common_name: str, organizations: list[str] | tuple[str, ...] = ()) -> str:
    """An openssl -subj string: one O= per organization (Kubernetes groups), then CN."""
    parts = [f"/O={_escape(o)}" for o in organizations]
    return "".join(parts) + f"/CN={_escape(common_name)}"


def ensure_ca(pki: Path) -> KeyPair:
    ca = KeyPair(pki / "ca.crt", pki / "ca.key")
    if ca.cert.exists() and ca.key.exists():
        return ca
    pki.mkdir(parents=True, exist_ok=True)
    _ec_key(ca.key)
    _openssl(
        "req", "-x509", "-new", "-key", str(ca.key), "-subj", CA_SUBJECT, "-days", DAYS,
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        "-out", str(ca.cert),
    )  # fmt: skip
    return ca


def issue(ca: KeyPair, out: KeyPair, subj: str, *, server_sans: tuple[str, ...] = ()) -> KeyPair:
    """Sign a new key pair for `subj`: a serving cert when SANs are given, else a client cert."""
    out.key.parent.mkdir(parents=True, exist_ok=True)
    _ec_key(out.key)
    usage = "serverAuth" if server_sans else "clientAuth"
    ext = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usage}",
    ]
    if server_sans:
        ext.append("subjectAltName=" + ",".join(server_sans))
    with tempfile.TemporaryDirectory() as tmp:
        csr, extfile = Path(tmp) / "req.csr", Path(tmp) / "ext.cnf"
        extfile.write_text("\n".join(ext) + "\n")
        _openssl("req", "-new", "-key", str(out.key), "-subj", subj, "-out", str(csr))
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key),
            "-set_serial", "0x" + secrets.token_hex(15), "-days", DAYS,
            "-extfile", str(extfile), "-out", str(out.cert),
        )  # fmt: skip
    return out


def issue_until(ca: KeyPair, pem: Path, subj: str, not_after: datetime) -> Path:
    """A client certificate valid until `not_after` (UTC), written with its key into one
    PEM file, as the kubelet writes kubelet-client-<timestamp>.pem."""
    pem.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        pair = KeyPair(d / "out.crt", d / "out.key")
        _ec_key(pair.key)
        (d / "index.txt").write_text("")
        (d / "ext.cnf").write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=clientAuth\n"
        )
        (d / "ca.cnf").write_text(
            "[ca]\ndefault_ca = local\n[local]\n"
            f"database = {d}/index.txt\nnew_certs_dir = {d}\nrand_serial = yes\n"
            "default_md = sha256\npolicy = any\nunique_subject = no\n"
            "[any]\norganizationName = optional\ncommonName = supplied\n"
        )
        _openssl("req", "-new", "-key", str(pair.key), "-subj", subj, "-out", str(d / "req.csr"))
        start = datetime.now(UTC) - timedelta(minutes=5)  # tolerate clock skew, as CAs do
        _openssl(
            "ca", "-batch", "-config", str(d / "ca.cnf"), "-in", str(d / "req.csr"),
            "-cert", str(ca.cert), "-keyfile", str(ca.key), "-preserveDN", "-notext",
            "-startdate", start.strftime("%Y%m%d%H%M%SZ"),
            "-enddate", not_after.astimezone(UTC).strftime("%Y%m%d%H%M%SZ"),
            "-extfile", str(d / "ext.cnf"), "-out", str(pair.cert),
        )  # fmt: skip
        tmp_pem = pem.with_name(f".{pem.name}.tmp")
        tmp_pem.write_bytes(pair.cert.read_bytes() + pair.key.read_bytes())
        tmp_pem.chmod(0o600)
        tmp_pem.replace(pem)
    return pem


def ensure_pair(ca: KeyPair, out: KeyPair, subj: str, server_sans: tuple[str, ...] = ()) -> KeyPair:
    if out.cert.exists() and out.key.exists():
        return out
    return issue(ca, out, subj, server_sans=server_sans)


def ensure_service_account_keys(pki: Path) -> tuple[Path, Path]:
    """RSA key pair the API server signs and verifies service account tokens with."""
    key, pub = pki / "sa.key", pki / "sa.pub"
    if not (key.exists() and pub.exists()):
        _openssl(
            "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(key)
        )
        key.chmod(0o600)
        _openssl("pkey", "-in", str(key), "-pubout", "-out", str(pub))
    return key, pub


def user_pair(pki: Path, user: str, groups: list[str]) -> KeyPair:
    """File names for a user's client cert: readable, and unique per (user, groups)."""
    digest = hashlib.sha256("\0".join([user, *sorted(groups)]).encode()).hexdigest()[:10]
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", user)[:40] + "-" + digest
    return KeyPair(pki / "users" / f"{stem}.crt", pki / "users" / f"{stem}.key")
