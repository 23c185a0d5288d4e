"""hack/release: a release of nodeagent pushed to an OCI registry, for the clusters whose
nodes pull their images (`helm install oci://...`, `kubectl apply -f`).

    hack/release --registry HOST[:PORT]/PATH [--version V] [--dist DIR] [--set KEY=VALUE]...

pushes, in this order:
- the image index of hack/build-image (linux/amd64 and linux/arm64) as HOST/PATH/nodeagent:V
  (`crane push` of the OCI layout);
- the Helm chart as the OCI artifact HOST/PATH/charts/nodeagent, version V (`helm push`), its
  default image that index pinned by digest, so `helm install` needs no image value;
and writes DIR/nodeagent_V.yaml, one manifest for `kubectl apply -f` rendered from that same
chart (hack/render-manifests), the image pinned by digest. The manifest is not pushed:
`kubectl apply -f` reads a file or a URL, not an OCI artifact. `--set` values go into the
manifest only (the chart's are given at `helm install`). V defaults to pyproject.toml's
version; another V tags the same build (whose `nodeagent version` is still the package's).

Loopback registries (127.0.0.0/8, localhost, ::1) are spoken to in plain HTTP, as containerd
and crane do; any other over TLS, with the credentials of `crane auth login` and
`helm registry login`. Bad input and an unreachable registry end in one line and exit 2,
before anything is built or pushed.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from hack.chart import CHART, helm_binary
from hack.ociregistry import crane_binary, unanswered

ROOT = Path(__file__).resolve().parent.parent
NAME = "nodeagent"
REF_NAME = "org.opencontainers.image.ref.name"
PROBE_TIMEOUT = 10.0
BUILD_TIMEOUT = 3600.0
PUSH_TIMEOUT = 900.0
# The distribution spec's repository path components, and a host with an optional port.
COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
HOST = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(?::[0-9]{1,5})?")
# SemVer 2 without build metadata: helm's chart version, and an image tag ("+" is not one).
SEMVER = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
)


class ReleaseError(Exception):
    """What stops the release, in one line."""


class Unreachable(ReleaseError):
    """The registry does not answer: bad input, like a misspelt host."""


@dataclass(frozen=True)
class Target:
    """Where the release goes: a registry host and a path inside it."""

    host: str
    path: str

    @property
    def image(self) -> str:
        return "/".join(p for p in (self.host, self.path, NAME) if p)

    @property
    def chart(self) -> str:
        """helm push's destination, to which helm appends the chart's name: a path of its
        own, the image's repository holding the same tag."""
        return "oci://" + "/".join(p for p in (self.host, self.path, "charts") if p)

    @property
    def plain_http(self) -> bool:
        return loopback(self.host)

    @property
    def api(self) -> str:
        return f"{'http' if self.plain_http else 'https'}://{self.host}/v2/"


def loopback(host: str) -> bool:
    """Whether a registry host (with its port) is on this machine's loopback."""
    name = re.sub(r":[0-9]+$", "", host).strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def registry_host(text: str) -> bool:
    """Whether a reference's first component names a registry: as for docker and
    containerd, one with a dot or a port, or localhost (else it is a Docker Hub path)."""
    named = "." in text or ":" in text or text == "localhost"
    return bool(HOST.fullmatch(text)) and named


def parse_registry(text: str) -> Target:
    """HOST[:PORT][/PATH] as given to --registry."""
    text = text.strip().removeprefix("oci://").rstrip("/")
    if not text:
        raise ReleaseError("--registry is empty: give HOST[:PORT]/PATH, e.g. ghcr.io/you")
    host, _, path = text.partition("/")
    if not registry_host(host):
        raise ReleaseError(f"--registry {text!r}: {host!r} is not a registry host[:port]")
    bad = [c for c in path.split("/") if path and not COMPONENT.fullmatch(c)]
    if bad:
        raise ReleaseError(
            f"--registry {text!r}: {bad[0]!r} is not a repository path component "
            "(lowercase letters, digits, and . _ - between them)"
        )
    return Target(host, path)


def check_version(text: str) -> str:
    if not SEMVER.fullmatch(text):
        raise ReleaseError(
            f"--version {text!r} is not a SemVer version without build metadata (e.g. 0.2.0, "
            "0.2.0-rc.1): helm needs SemVer, and an image tag cannot hold '+'"
        )
    return text


def package_version(pyproject: Path = ROOT / "pyproject.toml") -> str:
    return str(tomllib.loads(pyproject.read_text())["project"]["version"])


def single_index(index: dict[str, Any], ref: str) -> dict[str, Any]:
    """An OCI layout's index.json with only the entry named `ref` (hack/build-image's image
    index; hack/oci_refs.py also names each architecture's manifest there): `crane push` of
    a layout pushes its one entry."""
    kept = [m for m in index["manifests"] if (m.get("annotations") or {}).get(REF_NAME) == ref]
    if len(kept) != 1:
        raise ReleaseError(f"the image archive has {len(kept)} entries named {ref}, not 1")
    return {**index, "manifests": kept}


def _replace_line(text: str, pattern: str, line: str, what: str) -> str:
    new, count = re.subn(pattern, line, text, flags=re.M)
    if count != 1:
        raise ReleaseError(f"the chart's {what}: {count} lines match {pattern!r}, not 1")
    return new


def chart_yaml(text: str, version: str) -> str:
    """Chart.yaml with version and appVersion set to the release's."""
    text = _replace_line(text, r"^version: .*$", f"version: {version}", "Chart.yaml version")
    return _replace_line(text, r"^appVersion: .*$", f'appVersion: "{version}"', "appVersion")


def chart_values(text: str, repository: str, digest: str) -> str:
    """values.yaml (its comments kept) naming the pushed image, pinned by its digest."""
    text = _replace_line(
        text, r'^  repository: ""$', f'  repository: "{repository}"', "image.repository"
    )
    return _replace_line(text, r'^  digest: ""$', f'  digest: "{digest}"', "image.digest")


def probe(target: Target) -> None:
    """The registry answers its API root, or the release stops before building anything."""
    reason = unanswered(target.api, PROBE_TIMEOUT)
    if reason:
        raise Unreachable(f"registry {target.host} unreachable at {target.api}: {reason}")


def run(cmd: list[str], what: str, timeout: float, show: bool = False) -> str:
    """A step's command; its output (helm prints to stderr what crane prints to stdout).
    `show` passes its stderr (progress) through instead."""
    try:
        done = subprocess.run(
            cmd,
            stdout=subprocess.PIPE,
            stderr=None if show else subprocess.PIPE,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ReleaseError(f"{what}: no end after {timeout:.0f}s") from exc
    if done.returncode != 0:
        last = (done.stderr or "").strip().splitlines()[-1:] or ["see its output above"]
        raise ReleaseError(f"{what} failed (exit {done.returncode}): {last[0]}")
    return done.stdout + (done.stderr or "")


def log(message: str) -> None:
    print(f"hack/release: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Pushed:
    image: str  # repository:tag@digest
    chart: str  # oci://... --version V
    chart_digest: str
    manifest: Path


def image_sizes(layout: Path, index: dict[str, Any]) -> dict[str, int]:
    """Each platform's compressed size (config and layers): what a node of it pulls."""

    def blob(digest: str) -> Any:
        return json.loads((layout / "blobs" / digest.replace(":", "/")).read_text())

    (entry,) = index["manifests"]
    sizes = {}
    for manifest in blob(entry["digest"])["manifests"]:
        body = blob(manifest["digest"])
        arch = manifest["platform"]["architecture"]
        sizes[arch] = body["config"]["size"] + sum(layer["size"] for layer in body["layers"])
    return sizes


def push_image(target: Target, archive: Path, version: str, tag: str, work: Path) -> str:
    """The archive's image index pushed as target.image:tag; its reference by digest."""
    layout = work / "layout"
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="data")
    index = single_index(json.loads((layout / "index.json").read_text()), version)
    (layout / "index.json").write_text(json.dumps(index))
    sizes = ", ".join(f"{a} {s / 2**20:.1f} MiB" for a, s in image_sizes(layout, index).items())
    started = time.monotonic()
    out = run(
        [crane_binary(), "push", str(layout), f"{target.image}:{tag}"],
        "crane push",
        PUSH_TIMEOUT,
    )
    found = re.search(rf"^{re.escape(target.image)}@(sha256:[0-9a-f]{{64}})$", out, re.M)
    if not found:
        raise ReleaseError(f"crane push printed no digest: {out.strip()[-200:]!r}")
    digest = found.group(1)
    log(f"pushed {target.image}:{tag}@{digest} ({sizes}) in {time.monotonic() - started:.1f}s")
    return digest


def push_chart(target: Target, version: str, digest: str, dist: Path, work: Path) -> str:
    """The chart, its version and default image the release's, packaged into `dist` and
    pushed; its digest."""
    chart = work / NAME
    shutil.copytree(CHART, chart)
    meta = chart / "Chart.yaml"
    meta.write_text(chart_yaml(meta.read_text(), version))
    values = chart / "values.yaml"
    values.write_text(chart_values(values.read_text(), target.image, digest))
    helm = helm_binary()
    run([helm, "package", str(chart), "-d", str(dist)], "helm package", 120)
    package = dist / f"{NAME}-{version}.tgz"
    started = time.monotonic()
    plain = ["--plain-http"] if target.plain_http else []
    out = run([helm, "push", str(package), target.chart, *plain], "helm push", PUSH_TIMEOUT)
    found = re.search(r"^Digest: (sha256:[0-9a-f]{64})$", out, re.M)
    if not found:
        raise ReleaseError(f"helm push printed no digest: {out.strip()[-200:]!r}")
    log(f"pushed the chart {target.chart}/{NAME} {version} in {time.monotonic() - started:.1f}s")
    return found.group(1)


def write_manifest(package: Path, out: Path, sets: list[str]) -> Path:
    args = [arg for value in sets for arg in ("--set", value)]
    run(
        [str(ROOT / "hack" / "render-manifests"), str(out), str(package), *args],
        "hack/render-manifests",
        120,
    )
    return out


def release(target: Target, version: str, dist: Path, sets: list[str]) -> Pushed:
    probe(target)
    built = run([str(ROOT / "hack" / "build-image")], "hack/build-image", BUILD_TIMEOUT, True)
    archive = Path(built.splitlines()[0])
    dist.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nodeagent-release-") as tmp:
        digest = push_image(target, archive, package_version(), version, Path(tmp))
        chart_digest = push_chart(target, version, digest, dist, Path(tmp))
    manifest = write_manifest(dist / f"{NAME}-{version}.tgz", dist / f"{NAME}_{version}.yaml", sets)
    run([str(ROOT / "hack" / "sha256sums"), str(dist)], "hack/sha256sums", 120)
    return Pushed(
        f"{target.image}:{version}@{digest}",
        f"{target.chart}/{NAME} --version {version}",
        chart_digest,
        manifest,
    )


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, not argparse's usage block."""
        self.exit(2, f"hack/release: {message} (see hack/release --help)\n")


def parser() -> Parser:
    p = Parser(
        prog="hack/release",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--registry", required=True, metavar="HOST/PATH", help="e.g. ghcr.io/you")
    p.add_argument("--version", metavar="V", help="default: pyproject.toml's version")
    p.add_argument(
        "--dist", type=Path, default=ROOT / "dist", metavar="DIR",
        help="where the chart package and the manifest go (default: dist/)",
    )  # fmt: skip
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
        help="a chart value for the manifest, as helm's --set",
    )  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        target = parse_registry(args.registry)
        version = check_version(package_version() if args.version is None else args.version)
        for value in args.sets:
            if "=" not in value:
                raise ReleaseError(f"--set {value!r} is not KEY=VALUE")
    except ReleaseError as exc:
        print(f"hack/release: {exc}", file=sys.stderr)
        return 2
    try:
        pushed = release(target, version, args.dist.absolute(), args.sets)
    except ReleaseError as exc:
        print(f"hack/release: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, Unreachable) else 1
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        # A tool that could not be built or run (helm, crane), a full disk: its first line.
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"hack/release: {first}", file=sys.stderr)
        return 1
    print(f"image {pushed.image}")
    print(f"chart {pushed.chart} ({pushed.chart_digest})")
    print(f"manifest {pushed.manifest}")
    return 0
