"""A kubeconfig checked before the client library reads it.

The library assumes a well-formed file: on random bytes, a YAML scalar, a list where
entries belong or a certificate that is not one it raises TypeError,
UnicodeDecodeError, binascii.Error, or fails only when the first TLS handshake does
(reported as an unreachable server). These checks turn every such file into one line
naming the kubeconfig, the entry, the referenced file and the fault.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from pathlib import Path
from typing import Any

from nodeagent.kube.client import KubeConfigError

ENTRY_KEYS = ("clusters", "users", "contexts")


def _kind(doc: Any) -> str:
    return {str: "a string", list: "a list", int: "a number", float: "a number"}.get(
        type(doc), type(doc).__name__
    )


def check_kubeconfig(path: Path) -> None:
    """Raise KubeConfigError, one line naming `path` and the fault, unless the file
    is a kubeconfig whose credentials can be loaded."""
    doc = _read(path)
    for key in ENTRY_KEYS:
        entries = doc.get(key)
        if entries is not None and not (
            isinstance(entries, list) and all(isinstance(e, dict) for e in entries)
        ):
            raise KubeConfigError(
                f"kubeconfig {path}: {key} is {_kind(entries)}, expected a list of entries"
            )
    for entry in doc.get("clusters") or []:
        _Entry(path, "clusters", entry).check_ca()
    for entry in doc.get("users") or []:
        _Entry(path, "users", entry).check_client()


def _read(path: Path) -> dict[str, Any]:
    import yaml

    if not path.is_file():
        raise KubeConfigError(
            f"kubeconfig {path}: {'not a file' if path.exists() else 'no such file'}"
        )
    try:
        doc = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise KubeConfigError(f"kubeconfig {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise KubeConfigError(
            f"kubeconfig {path}: not a text file (invalid UTF-8 at byte {exc.start})"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise KubeConfigError(f"kubeconfig {path}: not YAML{where}: {problem}") from None
    if doc is None:
        raise KubeConfigError(f"kubeconfig {path}: empty file")
    if not isinstance(doc, dict):
        raise KubeConfigError(
            f"kubeconfig {path}: not a kubeconfig: the top level is {_kind(doc)}, "
            "expected a mapping with clusters, users and contexts"
        )
    return doc


class _Entry:
    """One clusters[] or users[] entry and the credential material it names."""

    def __init__(self, path: Path, key: str, entry: dict[str, Any]) -> None:
        self.path = path
        self.where = f"kubeconfig {path}: {key} entry {entry.get('name')!r}"
        body = entry.get(key.rstrip("s"))
        self.body: dict[str, Any] = body if isinstance(body, dict) else {}

    def fail(self, what: str, problem: str) -> KubeConfigError:
        return KubeConfigError(f"{self.where}: {what}: {problem}")

    def material(self, name: str) -> tuple[str, bytes] | None:
        """(what, bytes) of `name` (a file, relative to the kubeconfig) or `name-data`."""
        data = self.body.get(f"{name}-data")
        if data:
            try:
                return f"{name}-data", base64.b64decode(str(data), validate=True)
            except (binascii.Error, ValueError):
                raise self.fail(f"{name}-data", "not base64") from None
        file = self.body.get(name)
        if not file:
            return None
        target = self.path.parent / str(file)  # an absolute path stays absolute
        try:
            return f"{name} {target}", target.read_bytes()
        except OSError as exc:
            raise self.fail(f"{name} {target}", exc.strerror or type(exc).__name__) from None

    def check_ca(self) -> None:
        found = self.material("certificate-authority")
        if found is None:
            return
        what, pem = found
        try:
            ssl.create_default_context().load_verify_locations(cadata=pem.decode("ascii"))
        except UnicodeDecodeError:
            raise self.fail(what, "not a PEM certificate (not text)") from None
        except (ssl.SSLError, ValueError) as exc:
            raise self.fail(what, f"not a PEM certificate ({_reason(exc)})") from None

    def check_client(self) -> None:
        cert, key = self.material("client-certificate"), self.material("client-key")
        if self.body.get("tokenFile"):
            self.material("tokenFile")
        if cert is None or key is None:
            return
        with tempfile.TemporaryDirectory() as tmp:  # private: 0700
            files = [Path(tmp) / "cert", Path(tmp) / "key"]
            for file, (_, data) in zip(files, (cert, key), strict=True):
                fd = os.open(file, os.O_WRONLY | os.O_CREAT, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
            try:
                ssl.create_default_context().load_cert_chain(files[0], files[1])
            except (ssl.SSLError, ValueError) as exc:
                raise self.fail(
                    f"{cert[0]}, {key[0]}",
                    f"not a PEM certificate and its private key ({_reason(exc)})",
                ) from None


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or " ".join(str(exc).split()) or type(exc).__name__)
