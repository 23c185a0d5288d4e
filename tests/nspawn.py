"""Boot throwaway systemd-nspawn containers that run nodeagent.service for system tests.

Each :class:`Machine` is a copy of the cached root built by ``hack/nspawn-root`` with the
agent's Debian package (``hack/build-deb``) installed as on a node image: by ``dpkg -i`` in the
root while no systemd runs in it, which enables the unit and installs the logind drop-in and
/etc/nodeagent/config.toml. :func:`packaged_root` does that once per build of the package; a
plain template gets it in :meth:`Machine.install_agent`. A stand-in kubelet is added too. The
container shares the host's network, so the agent inside reaches the test control plane on
127.0.0.1. The repository is bind-mounted read-only at /opt/nodeagent-src (not at its own path:
a checkout under /tmp would vanish behind the unit's PrivateTmp=yes).
"""

from __future__ import annotations

import re
import select
import shutil
import socket
import subprocess
import threading
from pathlib import Path

from hack.deb import VERBOSE_DROPIN, build_deb, dpkg_offline, hack
from hack.nspawn import Container

REPO = Path(__file__).resolve().parent.parent
LOGIND_DROPIN_NAME = "zz-nodeagent.conf"
INNER_SRC = "/opt/nodeagent-src"
KUBELET_STOPPED = "var/lib/kubelet-stopped"
INSTALLED = "usr/lib/nodeagent/bin/nodeagent"
# Where EKS and GKE keep the kubelet's kubeconfig; the agent finds it there by itself.
KUBELET_KUBECONFIG = "var/lib/kubelet/kubeconfig"

# Starts with the machine and records when it is stopped: nodeagent.service is ordered
# After= the kubelet, so at shutdown the agent stops (and drains) before this runs.
KUBELET_UNIT = f"""[Unit]
Description=Stand-in kubelet for nodeagent system tests

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/true
ExecStop=/bin/sh -c 'date +%%s.%%N >> /{KUBELET_STOPPED}'

[Install]
WantedBy=multi-user.target
"""


SITE_PACKAGES = "usr/lib/nodeagent/lib/python3.11/site-packages"


def next_deb(deb: Path, workdir: Path, version: str, *, poison: bool = False) -> Path:
    """The built package again as ``version``, whose ``nodeagent version`` says so.

    With ``poison`` every module of the agent in it raises on import: a process that loads
    any of them after dpkg put them in place fails loudly.
    """
    tree = workdir / f"deb-{version}"
    subprocess.run(["dpkg-deb", "-R", str(deb), str(tree)], check=True, timeout=120)
    control = tree / "DEBIAN" / "control"
    lines = control.read_text().splitlines()
    control.write_text(
        "\n".join(f"Version: {version}" if x.startswith("Version:") else x for x in lines) + "\n"
    )
    package = tree / SITE_PACKAGES / "nodeagent"
    (package / "__init__.py").write_text(f'__version__ = "{version}"\n')
    if poison:
        for module in package.rglob("*.py"):
            module.write_text(f"raise ImportError('{version} loaded into a running process')\n")
    for cache in list(package.rglob("__pycache__")):
        shutil.rmtree(cache)
    out = workdir / f"nodeagent_{version}.deb"
    subprocess.run(
        ["dpkg-deb", "-Zgzip", "-z1", "-b", str(tree), str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    shutil.rmtree(tree)
    return out


def packaged_root(template: Path, cache: Path) -> Path:
    """A copy of ``template`` with the package installed, under ``cache`` (once per build)."""
    deb = build_deb()
    key = subprocess.run(
        ["sha256sum", str(deb)], capture_output=True, text=True, check=True
    ).stdout[:16]
    root = cache / f"packaged-{key}"
    if not (root / INSTALLED).exists():
        shutil.rmtree(root, ignore_errors=True)
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["cp", "-a", "--reflink=auto", str(template), str(root)], check=True, timeout=120
        )
        dpkg_offline(root, deb)
    return root


def nspawn_root(suite: str = "bookworm", arch: str | None = None) -> Path:
    """The cached template root of ``suite`` and ``arch`` (the host's unless told; built on
    first use, needs root and debootstrap, and hack/binfmt for a foreign architecture)."""
    return hack("nspawn-root", 3600, suite, *([arch] if arch else []))[-1]


class Machine(Container):
    """One container: a private copy of the template root and its nspawn process."""

    run_timeout = 30.0

    def __init__(self, template: Path, workdir: Path, name: str) -> None:
        self.name = name
        self.workdir = workdir
        self.boots = 0
        subprocess.run(
            ["cp", "-a", "--reflink=auto", str(template), str(self.root)],
            check=True,
            timeout=120,
        )

    # -- setup -----------------------------------------------------------------------------

    def install_agent(self, kubeconfig: Path, config: str, *, kubelet: bool = False) -> None:
        """Install the package (unless the template has it), a stand-in kubelet and the config.

        The package enables nodeagent.service and installs the logind drop-in; a drop-in of
        the test's adds ``-v`` to the agent's command line. ``kubeconfig`` goes to
        /etc/nodeagent/kubeconfig, or with ``kubelet`` to the kubelet's place.
        """
        if not self.path(INSTALLED).exists():
            dpkg_offline(self.root, build_deb())
        self.install_kubelet()
        self.verbose_agent()
        if kubelet:
            self.write_kubelet_kubeconfig(kubeconfig.read_text())
        else:
            self.write_kubeconfig(kubeconfig.read_text())
        self.write_config(config)

    def verbose_agent(self) -> None:
        """A drop-in that adds ``-v`` to the agent's command line (works before the install)."""
        verbose = self.path("etc/systemd/system/nodeagent.service.d/verbose.conf")
        verbose.parent.mkdir(parents=True, exist_ok=True)
        verbose.write_text(VERBOSE_DROPIN)

    def install_kubelet(self) -> None:
        """The stand-in kubelet, enabled: the agent is ordered after it."""
        units = self.path("etc/systemd/system")
        wants = units / "multi-user.target.wants"
        wants.mkdir(parents=True, exist_ok=True)
        (units / "kubelet.service").write_text(KUBELET_UNIT)
        link = wants / "kubelet.service"
        link.unlink(missing_ok=True)
        link.symlink_to("/etc/systemd/system/kubelet.service")

    def write_kubeconfig(self, text: str) -> None:
        etc = self.path("etc/nodeagent")
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "kubeconfig").write_text(text)
        (etc / "kubeconfig").chmod(0o600)

    def write_kubelet_kubeconfig(self, text: str) -> None:
        path = self.path(KUBELET_KUBECONFIG)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o600)

    def write_config(self, config: str) -> None:
        """The agent's config.toml. The cloud's warnings are off unless the config says
        otherwise: a container sees the host's DMI strings, and on a cloud CI machine the
        agent would read that machine's real metadata endpoint."""
        path = self.path("etc/nodeagent/config.toml")
        path.parent.mkdir(parents=True, exist_ok=True)
        if not re.search(r"^\[warnings\]", config, re.M):
            config = config.rstrip("\n") + '\n\n[warnings]\ncloud = "off"\n'
        path.write_text(config)

    # -- lifecycle -------------------------------------------------------------------------

    def boot(self, timeout: float = 60.0) -> None:
        """Start the container and return once systemd reports the boot finished."""
        self.spawn(self.nspawn_args(f"--bind-ro={REPO}:{INNER_SRC}"))
        self.wait_booted(timeout, lambda: self._system_running(timeout), "did not boot")

    def _system_running(self, timeout: float) -> bool:
        if self.leader() is None:
            return False
        out = self.run("systemctl", "is-system-running", "--wait", timeout=timeout)
        return out.stdout.strip() in ("running", "degraded")

    def destroy(self) -> None:
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- what happened inside --------------------------------------------------------------

    def messages(self, unit: str = "nodeagent.service") -> list[str]:
        return super().messages(unit)

    def inhibitors(self) -> list[list[str]]:
        """logind's inhibitors, one row each: who, uid, user, pid, comm, what, why, mode."""
        out = self.run("systemd-inhibit", "--list", "--no-legend", "--no-pager")
        if out.returncode != 0:
            raise RuntimeError(f"systemd-inhibit --list failed: {out.stderr.strip()}")
        # WHY may hold spaces; every other column is one word.
        rows = []
        for line in out.stdout.splitlines():
            words = line.split()
            if len(words) >= 8:
                rows.append([*words[:6], " ".join(words[6:-1]), words[-1]])
        return rows

    def logind_delay(self) -> float:
        """logind's effective InhibitDelayMaxUSec, in seconds, read over the container's bus."""
        out = self.run(
            "busctl",
            "get-property",
            "org.freedesktop.login1",
            "/org/freedesktop/login1",
            "org.freedesktop.login1.Manager",
            "InhibitDelayMaxUSec",
        )
        if out.returncode != 0:
            raise RuntimeError(f"busctl get-property failed: {out.stderr.strip()}")
        kind, value = out.stdout.split()
        assert kind == "t", out.stdout
        return int(value) / 1e6

    def kubelet_stops(self) -> list[float]:
        """Wall-clock times at which the stand-in kubelet was stopped, one per shutdown."""
        path = self.path(KUBELET_STOPPED)
        if not path.exists():
            return []
        return [float(line) for line in path.read_text().split()]


class ApiRelay:
    """A TCP relay on the host's loopback in front of the API server, which can go silent.

    The container shares the host's network, so an agent whose kubeconfig names the relay's
    port talks to the API server through it. TLS passes through untouched: the agent still
    verifies the real server's certificate.

    :meth:`blackhole` makes it behave like a server that stopped answering on a path that
    still accepts packets: the listening socket stays open, so the kernel completes new TCP
    handshakes, but nothing is ever accepted, read or answered (a TLS handshake never
    completes); connections already open stay established, and what the agent sends on them
    is never read and never answered. Nothing is refused or reset.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.accepted = 0
        self._silent = threading.Event()
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._listener.settimeout(0.1)
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    def blackhole(self) -> None:
        self._silent.set()

    def close(self) -> None:
        self._silent.set()
        with self._lock:
            socks, self._socks = [*self._socks, self._listener], []
        for sock in socks:
            sock.close()

    def _accept(self) -> None:
        while not self._silent.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._socks += [client, upstream]
                self.accepted += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                readable, _, _ = select.select([src], [], [], 0.1)
                if self._silent.is_set():
                    return  # leave the bytes unread and the connection open
                if not readable:
                    continue
                data = src.recv(65536)
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
        except (OSError, ValueError):  # closed by close() or by the other side
            return
