"""Credentials the client serves itself and the one it leaves to the client library,
against the local control plane: tokens from ServiceAccounts the test creates, checked by
who the API server says the caller is (SelfSubjectReview).

- a token file (kubeconfig tokenFile, the pod's service account) is read again when it
  changes: the kubelet rotates the projected token by swapping a symlink;
- an exec credential plugin goes through the client library, which runs the plugin
  again when its credential expires; building that client imports all it needs, so
  nothing is loaded later (a package upgrade must not mix versions);
- a token kubeconfig never imports the client library (its memory is the point);
- the daemon in a pod sends its requests with the service account it names, never
  with a person's kubeconfig lying in $HOME (credentials.plan decides, alone).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack import kubeutil as ku
from nodeagent.config import Config
from nodeagent.kube import credentials, endpoint
from nodeagent.kube.client import Kube, KubeConfigError
from nodeagent.kube.endpoint import Endpoint, in_cluster
from nodeagent.kube.transport import _env_proxy

REPO = Path(__file__).resolve().parent.parent
REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"

PLUGIN = """
import datetime, json, pathlib, sys
calls, token = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]).read_text()
calls.write_text((calls.read_text() if calls.exists() else "") + "x")
soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=10)
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": {"token": token, "expirationTimestamp": soon.strftime("%Y-%m-%dT%H:%M:%SZ")},
}))
"""

# In a fresh interpreter, as the daemon: preload, build the client, then use it.
PROBE = """
import json, pathlib, sys
from nodeagent.host.preload import preload
from nodeagent.kube.client import Kube
preload()
kc, token_file, next_token, path = sys.argv[1:5]
kube = Kube.from_kubeconfig(kc)
before = set(sys.modules)
review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
users = [kube.post(path, review)["status"]["userInfo"]["username"]]
pathlib.Path(token_file).write_text(pathlib.Path(next_token).read_text())
users.append(kube.post(path, review)["status"]["userInfo"]["username"])
std = sys.stdlib_module_names
late = sorted(m for m in set(sys.modules) - before if m.split(".")[0] not in std)
print(json.dumps({"users": users, "late": late, "library": "kubernetes" in sys.modules}))
"""


def whoami(kube: Kube) -> str:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    return str(kube.post(REVIEW, body)["status"]["userInfo"]["username"])


@pytest.fixture(scope="module")
def tokens(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """user name -> a file holding a fresh token of that ServiceAccount."""
    ns = ku.namespace(kube, ku.unique("creds"))
    out = {}
    tmp = tmp_path_factory.mktemp("tokens")
    for sa in ("first", "second"):
        kube.post(f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": sa}})
        issued = kube.post(
            f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
            {"spec": {"expirationSeconds": 3600}},
        )
        out[f"system:serviceaccount:{ns}:{sa}"] = ku.write(tmp / sa, issued["status"]["token"])
    return out


def kubeconfig(cluster: Any, user: dict[str, Any], path: Path) -> Path:
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": admin["clusters"][0]["name"],
                                               "user": "u"}}],
        "current-context": "x",
    }  # fmt: skip
    path.write_text(yaml.safe_dump(doc))
    return path


def probe(kc: Path, token_file: Path, next_token: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(kc), str(token_file), str(next_token), REVIEW],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def test_exec_plugin_credentials_go_through_the_client_library(
    cluster: Any, tokens: dict[str, Path], tmp_path: Path
) -> None:
    (first, first_token), (second, second_token) = tokens.items()
    plugin, calls, current = tmp_path / "plugin.py", tmp_path / "calls", tmp_path / "token"
    plugin.write_text(PLUGIN)
    current.write_text(first_token.read_text())
    exec_ = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": sys.executable,
        "args": [str(plugin), str(calls), str(current)],
        "interactiveMode": "Never",
    }
    kc = kubeconfig(cluster, {"exec": exec_}, tmp_path / "kc")
    got = probe(kc, current, second_token)
    # The credential expires within the library's 5 minutes of margin: every request runs
    # the plugin again, so the second one carries the new token.
    assert got["users"] == [first, second]
    assert len(calls.read_text()) >= 2
    assert got["library"] and got["late"] == []


def test_a_token_file_is_read_again_when_it_changes(
    cluster: Any, tokens: dict[str, Path], tmp_path: Path
) -> None:
    (first, first_token), (second, second_token) = tokens.items()
    current = tmp_path / "token"
    current.write_text(first_token.read_text() + "\n")
    kc = kubeconfig(cluster, {"tokenFile": "token"}, tmp_path / "kc")  # relative to kc
    got = probe(kc, current, second_token)  # rewritten in place
    assert got["users"] == [first, second]
    assert not got["library"] and got["late"] == []


def test_the_service_account_token_is_read_again_after_the_kubelet_rotates_it(
    cluster: Any, tokens: dict[str, Path], tmp_path: Path
) -> None:
    """The kubelet's projected volume: files are symlinks into ..data, a symlink to a
    timestamped directory that is swapped atomically."""
    (first, first_token), (second, second_token) = tokens.items()
    sa_dir = tmp_path / "serviceaccount"
    env = project(cluster, sa_dir, "..v1", first_token)
    kube = Kube.from_endpoint(in_cluster(env, sa_dir))
    assert whoami(kube) == first
    project(cluster, sa_dir, "..v2", second_token)
    assert whoami(kube) == second


def project(cluster: Any, sa_dir: Path, version: str, token: Path) -> dict[str, str]:
    """Mount (or rotate to) `token` into `sa_dir` as the kubelet does; the pod's
    KUBERNETES_SERVICE_* variables for the local API server."""
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())["clusters"][0]["cluster"]
    data = sa_dir / version
    data.mkdir(parents=True)
    (data / "token").write_text(token.read_text())
    (data / "ca.crt").write_bytes(base64.b64decode(admin["certificate-authority-data"]))
    (sa_dir / "..data_tmp").symlink_to(version)
    os.replace(sa_dir / "..data_tmp", sa_dir / "..data")
    for name in ("token", "ca.crt"):
        if not (sa_dir / name).is_symlink():
            (sa_dir / name).symlink_to(f"..data/{name}")
    host, port = admin["server"].removeprefix("https://").rsplit(":", 1)
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}


def test_the_daemon_in_a_pod_never_takes_a_kubeconfig_in_home(
    cluster: Any, tokens: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A person's kubeconfig in $HOME (left on the node, or in the image) next to the
    pod's service account: the agent says it runs as the service account, and its
    requests must carry that token too, not the person's credentials."""
    (pod, pod_token), (person, person_token) = tokens.items()
    sa_dir = tmp_path / "serviceaccount"
    for name, value in project(cluster, sa_dir, "..v1", pod_token).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(endpoint, "SA_DIR", sa_dir)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    kubeconfig(cluster, {"token": person_token.read_text()}, home / ".kube" / "config")
    monkeypatch.setenv("HOME", str(home))
    kube, identity = credentials.connect(Config(), daemon=True, notify=lambda *_: None)
    assert identity.source is credentials.Source.IN_CLUSTER
    assert identity.describe().endswith("from the pod's service account (in-cluster)")
    assert identity.kubeconfig is None
    assert whoami(kube) == pod, f"{person} is the one whose kubeconfig lies in HOME"


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({}, "Service host/port is not set."),
        ({"KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": "443"}, "set but empty"),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, "token"),
    ],
)
def test_an_unusable_service_account_is_one_line(
    env: dict[str, str], says: str, tmp_path: Path
) -> None:
    with pytest.raises(KubeConfigError) as err:
        in_cluster(env, tmp_path)
    assert str(err.value).startswith("kubeconfig (in-cluster service account): ")
    assert says in str(err.value)


def test_a_proxy_the_client_cannot_use_is_one_line() -> None:
    with pytest.raises(KubeConfigError) as err:
        Kube.from_endpoint(Endpoint(server="https://127.0.0.1:1", proxy="socks5://127.0.0.1:2"))
    assert str(err.value) == (
        "cannot connect to https://127.0.0.1:1: proxy socks5://127.0.0.1:2: "
        "only http and https proxies are supported"
    )


@pytest.mark.parametrize(
    ("env", "proxy"),
    [
        ({}, ""),
        ({"HTTPS_PROXY": "http://proxy:3128"}, "http://proxy:3128"),
        ({"https_proxy": "http://proxy:3128", "no_proxy": "10.0.0.1"}, ""),
        ({"https_proxy": "http://proxy:3128", "NO_PROXY": "other.example"}, "http://proxy:3128"),
        ({"http_proxy": "http://proxy:3128"}, ""),  # not for an https server
        ({"all_proxy": "http://proxy:3128"}, "http://proxy:3128"),
    ],
)
def test_the_proxy_from_the_environment(
    env: dict[str, str], proxy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert _env_proxy("https://10.0.0.1:6443") == proxy
