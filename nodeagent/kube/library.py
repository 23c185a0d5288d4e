"""Credentials only the client library can give: exec credential plugins, auth-providers,
username and password.

The `kubernetes` package is imported here, and only for such a kubeconfig: its import
costs about 20 MB and 0.1 s that a token or a client certificate does not need. Requests
still go through the agent's own transport; the library supplies the Authorization header
(running the plugin again when its credential expires) and the files of a client
certificate a plugin returned.

Everything the library may import while refreshing is imported when the client is built,
at start (`MODULES`), so a package upgrade under a running agent never mixes versions
(see nodeagent/host/preload.py, which does not load this for every agent).
"""

from __future__ import annotations

import importlib
import threading

from nodeagent.kube.endpoint import Endpoint, Pem
from nodeagent.kube.errors import KubeConfigError

# The library's modules a refresh can reach: the loader, the exec plugin runner and the
# configuration object (tests/test_preload.py checks that nothing else loads later).
MODULES = (
    "kubernetes",
    "kubernetes.client",
    "kubernetes.client.configuration",
    "kubernetes.config",
    "kubernetes.config.config_exception",
    "kubernetes.config.exec_provider",
    "kubernetes.config.kube_config",
)


def import_modules() -> None:
    for name in MODULES:
        importlib.import_module(name)


def load(path: str) -> Endpoint:
    """The Endpoint for the kubeconfig at `path` (checked already), through the library."""
    import_modules()
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        config.load_kube_config(config_file=path, client_configuration=cfg)
    except config.ConfigException as exc:
        raise KubeConfigError(f"kubeconfig {path}: {_one_line(exc)}") from None
    except (ValueError, TypeError, KeyError, AttributeError, OSError) as exc:
        # The library assumes a well-formed file; anything it trips over in one that
        # passed the checks (a field of the wrong type, a plugin's bad output) is still
        # the file's fault, not ours.
        why = _one_line(exc) or type(exc).__name__
        raise KubeConfigError(f"kubeconfig {path}: unusable credentials: {why}") from None
    lock = threading.Lock()

    def authorization() -> str | None:
        # Runs the library's refresh hook: an expired exec credential is fetched again,
        # by one thread while the others wait for it.
        with lock:
            value = cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
        return str(value) if value else None

    # A proxy the library took from the environment is left to the transport, which also
    # honours $NO_PROXY (the library does that only in its own REST layer).
    from_env = getattr(cfg, "_proxy_from_env", False)
    return Endpoint(
        server=str(cfg.host).rstrip("/"),
        ca=Pem(path=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else None,
        cert=Pem(path=cfg.cert_file) if cfg.cert_file else None,
        key=Pem(path=cfg.key_file) if cfg.key_file else None,
        verify=bool(cfg.verify_ssl),
        server_name=str(cfg.tls_server_name or ""),
        proxy="" if from_env else str(cfg.proxy or ""),
        authorization=authorization,
    )


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
