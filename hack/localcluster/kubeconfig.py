"""Self-contained kubeconfig files (certificates embedded), and kubelet-style ones that
point at a certificate file the kubelet rotates."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from .pki import KeyPair


def write_kubeconfig(path: Path, server: str, ca: KeyPair, user: str, creds: KeyPair) -> Path:
    """Write a kubeconfig for `user` authenticating with the client cert `creds`."""
    entry = {"client-certificate-data": creds.cert_b64(), "client-key-data": creds.key_b64()}
    return _write(path, server, ca, user, entry)


def write_rotating_kubeconfig(path: Path, server: str, ca: KeyPair, user: str, pem: Path) -> Path:
    """A kubeconfig as kubeadm writes the kubelet's: certificate and key both read from
    `pem` (kubelet-client-current.pem, a symlink the kubelet moves on rotation)."""
    entry = {"client-certificate": str(pem), "client-key": str(pem)}
    return _write(path, server, ca, user, entry)


def _write(path: Path, server: str, ca: KeyPair, user: str, entry: dict[str, Any]) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": server, "certificate-authority-data": ca.cert_b64()},
            }
        ],
        "users": [{"name": user, "user": entry}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
    path = path.expanduser().absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path
