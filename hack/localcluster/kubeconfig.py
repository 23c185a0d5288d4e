"""Self-contained kubeconfig files (certificates embedded)."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from .pki import KeyPair


def write_kubeconfig(path: Path, server: str, ca: KeyPair, user: str, creds: KeyPair) -> Path:
    """Write a kubeconfig for `user` authenticating with the client cert `creds`."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": server, "certificate-authority-data": ca.cert_b64()},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": creds.cert_b64(),
                    "client-key-data": creds.key_b64(),
                },
            }
        ],
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
