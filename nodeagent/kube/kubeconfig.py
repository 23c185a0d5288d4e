"""A kubeconfig: checked, then its current context resolved into an `Endpoint`.

The checks turn every malformed file (random bytes, a YAML scalar, a list where entries
belong, a certificate that is not one, which the client library would report as
TypeError, UnicodeDecodeError, binascii.Error or an unreachable server at the first TLS
handshake) into one line naming the kubeconfig, the entry, the referenced file and the
fault. Resolving the current context follows the client library's rules and keeps its
messages, so both ways of loading a kubeconfig fail alike.

Tokens and client certificates are resolved here; a user that authenticates through an
exec credential plugin, an auth-provider or a username and password is left to the
client library (`nodeagent.kube.library`), imported only then.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodeagent.kube import plainyaml
from nodeagent.kube.endpoint import Endpoint, Pem, TokenFile, load_cert_chain
from nodeagent.kube.errors import KubeConfigError

ENTRY_KEYS = ("clusters", "users", "contexts")


def _kind(doc: Any) -> str:
    return {str: "a string", list: "a list", int: "a number", float: "a number"}.get(
        type(doc), type(doc).__name__
    )


# Ways of authenticating only the client library implements (kubeconfig user keys).
LIBRARY_AUTH = ("auth-provider", "exec", "username")


def endpoint(path: str) -> Endpoint:
    """The Endpoint of the kubeconfig at `path`, through the client library when its user
    authenticates in one of the LIBRARY_AUTH ways. Raises KubeConfigError (one line)."""
    found = load(Path(path))
    if found is not None:
        return found
    from nodeagent.kube import library  # exec plugins and the like: see there

    return library.load(path)


def load(path: Path) -> Endpoint | None:
    """The current context's Endpoint; None when its user authenticates in one of the
    LIBRARY_AUTH ways. Raises KubeConfigError (one line) for a file that cannot work."""
    return _Resolver(path, check_kubeconfig(path)).endpoint()


def check_kubeconfig(path: Path) -> dict[str, Any]:
    """Raise KubeConfigError, one line naming `path` and the fault, unless the file
    is a kubeconfig whose credentials can be loaded; return its contents."""
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
    return doc


class YamlError(ValueError):
    """Text that is not YAML: PyYAML's problem, and the line it found it on."""

    def __init__(self, problem: str, line: int | None) -> None:
        super().__init__(problem)
        self.problem, self.line = problem, line


def parse_yaml(text: str) -> Any:
    """YAML as `yaml.safe_load` reads it: the plain subset kubeconfigs are written in by
    nodeagent/kube/plainyaml.py, anything else by PyYAML (with libyaml's parser where it
    has it: a kubeconfig in 0.1 ms instead of 1.5), imported only then. Only connecting
    reads a kubeconfig, at start (nodeagent/kube/credentials.py), never the stop path,
    so a daemon may import PyYAML after its preload (nodeagent/host/preload.py)."""
    try:
        return plainyaml.parse(text)
    except plainyaml.Unsupported:
        pass
    import yaml

    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise YamlError(problem, mark.line + 1 if mark else None) from None


def _read(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise KubeConfigError(
            f"kubeconfig {path}: {'not a file' if path.exists() else 'no such file'}"
        )
    try:
        doc = parse_yaml(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise KubeConfigError(f"kubeconfig {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise KubeConfigError(
            f"kubeconfig {path}: not a text file (invalid UTF-8 at byte {exc.start})"
        ) from None
    except YamlError as exc:
        where = f" at line {exc.line}" if exc.line else ""
        raise KubeConfigError(f"kubeconfig {path}: not YAML{where}: {exc.problem}") from None
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

    def source(self, name: str) -> tuple[str, Pem] | None:
        """(what, material) of `name` (a file, relative to the kubeconfig) or `name-data`."""
        data = self.body.get(f"{name}-data")
        if data:
            try:
                return f"{name}-data", Pem(data=base64.b64decode(str(data), validate=True))
            except (binascii.Error, ValueError):
                raise self.fail(f"{name}-data", "not base64") from None
        file = self.body.get(name)
        if not file:
            return None
        target = self.path.parent / str(file)  # an absolute path stays absolute
        # Read again later (rotation): independent of the working directory by then.
        return f"{name} {target}", Pem(path=os.path.abspath(target))

    def material(self, name: str) -> tuple[str, bytes] | None:
        """(what, bytes) of `name`, read now."""
        found = self.source(name)
        if found is None:
            return None
        what, pem = found
        try:
            return what, pem.read()
        except OSError as exc:
            raise self.fail(what, exc.strerror or type(exc).__name__) from None

    def check_ca(self) -> None:
        found = self.material("certificate-authority")
        if found is None:
            return
        what, pem = found
        try:
            _bare_context().load_verify_locations(cadata=pem.decode("ascii"))
        except UnicodeDecodeError:
            raise self.fail(what, "not a PEM certificate (not text)") from None
        except (ssl.SSLError, ValueError) as exc:
            raise self.fail(what, f"not a PEM certificate ({_reason(exc)})") from None

    def check_client(self) -> None:
        cert, key = self.material("client-certificate"), self.material("client-key")
        if self.body.get("tokenFile"):
            self.material("tokenFile")
        if cert is None:
            return
        try:
            load_cert_chain(
                _bare_context(),
                Pem(data=cert[1]),
                Pem(data=key[1]) if key is not None else None,
            )
        except (ssl.SSLError, ValueError) as exc:
            raise self.fail(
                f"{cert[0]}, {key[0]}" if key is not None else cert[0],
                f"not a PEM certificate and its private key ({_reason(exc)})",
            ) from None


def _bare_context() -> ssl.SSLContext:
    """A context to test PEM material in: without the system's CA bundle, whose loading
    (about 15 ms) would be most of what `nodeagent drain` does before its first request."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class _Resolver:
    """The current context of a checked kubeconfig, resolved as the client library does
    (the first entry of a name wins; a context's user that is not listed is anonymous)."""

    def __init__(self, path: Path, doc: dict[str, Any]) -> None:
        self.path = path
        self.doc = doc

    def invalid(self, what: str) -> KubeConfigError:
        what = " ".join(what.split())
        return KubeConfigError(f"kubeconfig {self.path}: Invalid kube-config file. {what}")

    def named(self, key: str, name: Any, safe: bool = False) -> dict[str, Any] | None:
        found = None
        for entry in self.doc.get(key) or []:
            if "name" not in entry:
                raise self.invalid(
                    f"Expected all values in {self.path}/{key} list to have 'name' key"
                )
            if found is None and entry["name"] == name:
                found = entry
        if found is None and not safe:
            raise self.invalid(f"Expected object with name {name} in {self.path}/{key} list")
        return found

    def body(self, key: str, entry: dict[str, Any], field: str) -> dict[str, Any]:
        """`entry[field]`, which must be a mapping."""
        where = f"{self.path}/{key}[name={entry.get('name')}]"
        value = entry.get(field)
        if value is None:
            raise self.invalid(f"Expected key {field} in {where}")
        if not isinstance(value, dict):
            raise KubeConfigError(
                f"kubeconfig {self.path}: unusable credentials: {where}: {field} is "
                f"{_kind(value)}, expected a mapping"
            )
        return value

    def endpoint(self) -> Endpoint | None:
        name = self.doc.get("current-context")
        if name is None:
            raise self.invalid(f"Expected key current-context in {self.path}")
        context_entry = self.named("contexts", name)
        assert context_entry is not None
        context = self.body("contexts", context_entry, "context")
        user_entry = None
        if context.get("user") and self.doc.get("users"):
            user_entry = self.named("users", context["user"], safe=True)
        if "cluster" not in context or context["cluster"] is None:
            raise self.invalid(f"Expected key cluster in {self.path}/contexts[name={name}]/context")
        cluster_entry = self.named("clusters", context["cluster"])
        assert cluster_entry is not None
        cluster = self.body("clusters", cluster_entry, "cluster")
        user = self.body("users", user_entry, "user") if user_entry else {}
        if any(key in user for key in LIBRARY_AUTH) and not _token_set(user):
            return None
        return self._endpoint(cluster_entry, cluster, user_entry, user)

    def _endpoint(
        self,
        cluster_entry: dict[str, Any],
        cluster: dict[str, Any],
        user_entry: dict[str, Any] | None,
        user: dict[str, Any],
    ) -> Endpoint:
        server = cluster.get("server")
        where = f"{self.path}/clusters[name={cluster_entry.get('name')}]/cluster"
        if not server:
            raise self.invalid(f"Expected key server in {where} (the API server's URL)")
        if not isinstance(server, str):
            raise KubeConfigError(
                f"kubeconfig {self.path}: unusable credentials: {where}: server is "
                f"{_kind(server)}, expected a URL"
            )
        tls: dict[str, Pem | None] = {}
        if server.startswith("https"):
            tls["ca"] = _pem(_Entry(self.path, "clusters", cluster_entry), "certificate-authority")
            if user_entry is not None:
                creds = _Entry(self.path, "users", user_entry)
                tls["cert"] = _pem(creds, "client-certificate")
                tls["key"] = _pem(creds, "client-key")
        proxy = cluster.get("proxy-url") or ""
        return Endpoint(
            server=server.rstrip("/"),
            verify=not cluster.get("insecure-skip-tls-verify"),
            server_name=str(cluster.get("tls-server-name") or ""),
            proxy=str(proxy),
            authorization=self._authorization(user_entry, user),
            **tls,
        )

    def _authorization(
        self, user_entry: dict[str, Any] | None, user: dict[str, Any]
    ) -> Callable[[], str | None]:
        where = f"kubeconfig {self.path}: users entry {(user_entry or {}).get('name')!r}"
        if "token" in user:
            token = str(user["token"] or "").strip()
            if not token:
                raise KubeConfigError(f"{where}: token: empty value")
            header = f"Bearer {token}"
            return lambda: header
        if user.get("tokenFile"):
            target = self.path.parent / str(user["tokenFile"])
            where = f"{where}: tokenFile {target}"
            return TokenFile(os.path.abspath(target), where).authorization
        return lambda: None


def _token_set(user: dict[str, Any]) -> bool:
    """The client library takes a token before an exec plugin or a password."""
    return "auth-provider" not in user and ("token" in user or bool(user.get("tokenFile")))


def _pem(entry: _Entry, name: str) -> Pem | None:
    """Material from a file stays a file (read again when the pool is rebuilt, so a
    rotated certificate is picked up); embedded material is kept as bytes."""
    found = entry.source(name)
    return found[1] if found else None


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or " ".join(str(exc).split()) or type(exc).__name__)
