"""A client beside the real nodes that reaches Services as a pod on a surviving node would.

    client = ClientNet.start(cluster, workdir, as_node="node-b")
    client.attach(node_a.slot); client.attach(node_b.slot)
    client.run("curl", "http://10.96.12.34/")             # through the real kube-proxy
    client.stop()                                           # nothing left on the host

The real nodes' pods sit on per-node bridges in the host's network namespace, and the host has
no address on them (hack/realnode/config.py). The client gets a network namespace of its own
with one veth leg into each node's bridge (address .254 of that node's pod subnet), and a real
kube-proxy (hack/build-kube-proxy.sh), iptables mode, programs the namespace's own rules:
nothing is written to the host's iptables or sysctls, and deleting the namespace takes the
rules, the conntrack table and the legs with it.

Why a namespace and not a pod: a pod's traffic to a ClusterIP is translated by the kube-proxy
of its node, which would have to run in that node's (here: the host's) network namespace. The
namespace's kube-proxy runs *as* a surviving node (``--hostname-override``), so it reads the
same EndpointSlices with the same readiness a pod on that node would see.

Pods have only their subnet's route (no gateway, hack/realnode/config.py), so a reply can only
go back to an address on the pod's own bridge: kube-proxy masquerades everything
(``masqueradeAll``), giving each translated connection the leg's address on the target's bridge.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from hack.localcluster.cluster import Cluster
from hack.localcluster.procs import ProcRef, spawn, terminate

from .config import NodeSlot
from .paths import REPO

STATE_FILE = "client.json"
SERVICE_CIDR = "10.96.0.0/16"  # hack/localcluster/cluster.py --service-cluster-ip-range
LEG_HOST = 254
HEALTHZ = "127.0.0.1:10256"
# kube-proxy's user: kubeadm's default ClusterRoleBinding system:node-proxier names it.
PROXY_USER = "system:kube-proxy"
NETNS_DIR = Path("/run/netns")
BUILD_TIMEOUT = 3600.0


class ClientError(RuntimeError):
    """The client namespace or its kube-proxy could not be set up, reached or removed."""


def ensure_kube_proxy() -> Path:
    script = REPO / "hack" / "build-kube-proxy.sh"
    try:
        out = subprocess.run(
            [str(script)], stdout=subprocess.PIPE, text=True, timeout=BUILD_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise ClientError(f"{script} took over {BUILD_TIMEOUT:.0f}s") from exc
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        raise ClientError(f"{script} failed with exit code {out.returncode}")
    return Path(lines[-1])


def proxy_config(kubeconfig: Path, as_node: str, legs_cidr: str) -> str:
    """KubeProxyConfiguration: iptables mode, confined to the client's namespace."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": as_node,
        "mode": "iptables",
        "iptables": {"masqueradeAll": True, "syncPeriod": "30s", "minSyncPeriod": "0s"},
        # Zero: leave the conntrack limits as they are (nf_conntrack_max is kernel-global).
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
            "udpTimeout": "0s",
            "udpStreamTimeout": "0s",
        },
        "oomScoreAdj": 0,
        "healthzBindAddress": HEALTHZ,
        "metricsBindAddress": "127.0.0.1:10249",
        # No NodePorts on loopback: that needs route_localnet.
        "nodePortAddresses": [legs_cidr],
        "bindAddressHardFail": False,
    }
    return yaml.safe_dump(config, sort_keys=False)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if check and out.returncode != 0:
        raise ClientError(f"ip {' '.join(args)}: {out.stderr.strip()}")
    return out


def _link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


@dataclass
class ClientNet:
    cluster: Cluster
    workdir: Path
    as_node: str
    tag: str
    legs: dict[int, str] = field(default_factory=dict)  # slot -> host end of its veth
    proxy: ProcRef | None = None
    relay: ProcRef | None = None
    _children: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    @property
    def netns(self) -> str:
        return f"natr-{self.tag}"

    def leg_address(self, slot: NodeSlot) -> str:
        return slot.subnet.rsplit(".", 1)[0] + f".{LEG_HOST}"

    # ---- lifecycle ---------------------------------------------------------------------

    @classmethod
    def start(cls, cluster: Cluster, workdir: Path, as_node: str) -> ClientNet:
        """A namespace with loopback up and a kube-proxy programming it (no legs yet)."""
        binary = ensure_kube_proxy()
        workdir = Path(workdir).absolute()
        workdir.mkdir(parents=True, exist_ok=True)
        client = cls(cluster, workdir, as_node, secrets.token_hex(3))
        client._save()
        try:
            _ip("netns", "add", client.netns)
            client.run_checked("ip", "link", "set", "lo", "up")
            client._start_relay()
            client._start_proxy(binary)
        except BaseException:
            client.stop()
            raise
        return client

    @classmethod
    def load(cls, cluster: Cluster, workdir: Path) -> ClientNet:
        try:
            state = json.loads((Path(workdir) / STATE_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise ClientError(f"no client recorded in {workdir}") from exc
        proxy, relay = state.get("proxy"), state.get("relay")
        return cls(
            cluster,
            Path(workdir),
            state["as_node"],
            state["tag"],
            {int(k): v for k, v in state["legs"].items()},
            ProcRef(**proxy) if proxy else None,
            ProcRef(**relay) if relay else None,
        )

    def _start_relay(self) -> None:
        """The API server listens on the host's loopback: relay its port into ours."""
        port = str(self.cluster.ports["apiserver"])
        args = [sys.executable, "-m", "hack.realnode.nsrelay", self.netns, port]
        child, self.relay = spawn(args, self.workdir / "relay.log", cwd=REPO)
        self._children.append(child)
        self._save()
        end = time.monotonic() + 10
        while "relaying" not in (self.workdir / "relay.log").read_text():
            if child.poll() is not None or time.monotonic() > end:
                raise ClientError(
                    f"the API relay failed: {(self.workdir / 'relay.log').read_text()}"
                )
            time.sleep(0.05)

    def _start_proxy(self, binary: Path) -> None:
        kubeconfig = self.workdir / "kube-proxy.kubeconfig"
        self.cluster.mint_kubeconfig(PROXY_USER, [], kubeconfig)
        config = self.workdir / "kube-proxy.yaml"
        config.write_text(proxy_config(kubeconfig, self.as_node, "10.250.0.0/16"))
        args = ["ip", "netns", "exec", self.netns, str(binary), f"--config={config}", "--v=2"]
        child, self.proxy = spawn(args, self.log, cwd=self.workdir)
        self._children.append(child)
        self._save()
        end = time.monotonic() + 60
        while not self._healthy():
            if child.poll() is not None or time.monotonic() > end:
                tail = self.log.read_text(errors="replace")[-3000:]
                raise ClientError(f"kube-proxy did not become healthy:\n{tail}")
            time.sleep(0.2)

    @property
    def log(self) -> Path:
        return self.workdir / "kube-proxy.log"

    def _healthy(self) -> bool:
        out = self.run("wget", "-q", "-O", "-", f"http://{HEALTHZ}/healthz", timeout=5)
        return out.returncode == 0 and '"lastUpdated"' in out.stdout

    def attach(self, slot: NodeSlot) -> None:
        """A leg into the node's bridge (made here if its first pod has not made it yet)."""
        if slot.slot in self.legs:
            return
        host_end = f"ntr{self.tag}{slot.slot}"
        peer = f"ntp{self.tag}{slot.slot}"
        leg = f"leg{slot.slot}"
        self.legs[slot.slot] = host_end
        self._save()
        if not _link_exists(slot.bridge):
            # The CNI bridge plugin takes over an existing bridge; the node's stop deletes it.
            _ip("link", "add", slot.bridge, "type", "bridge")
            _ip("link", "set", slot.bridge, "up")
        _ip("link", "add", host_end, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", self.netns)
        _ip("link", "set", host_end, "master", slot.bridge)
        _ip("link", "set", host_end, "up")
        self.run_checked("ip", "link", "set", peer, "name", leg)
        self.run_checked("ip", "addr", "add", f"{self.leg_address(slot)}/24", "dev", leg)
        self.run_checked("ip", "link", "set", leg, "up")

    def add_tap(self, name: str, address: str, subnet: str, via: str) -> None:
        """A tap inside the namespace (a VM node's second NIC, hack/vmnode/tap.py) holding
        `address`/30, with `subnet` (the VM's pods) routed through it to `via` (the guest).
        It goes with the namespace."""
        self.run_checked("ip", "tuntap", "add", "dev", name, "mode", "tap")
        self.run_checked("ip", "addr", "add", f"{address}/30", "dev", name)
        self.run_checked("ip", "link", "set", name, "up")
        # onlink: the tap has no carrier until qemu attaches to it.
        self.run_checked("ip", "route", "add", subnet, "via", via, "dev", name, "onlink")

    def route_services(self, slot: NodeSlot) -> None:
        """ClusterIPs are routed (before kube-proxy's DNAT) out of this node's leg."""
        self.run_checked(
            "ip", "route", "replace", SERVICE_CIDR, "dev", f"leg{slot.slot}",
            "src", self.leg_address(slot),
        )  # fmt: skip

    def stop(self) -> None:
        """Stop kube-proxy, delete the namespace and the legs; raises if anything is left."""
        refs = [r for r in (self.proxy, self.relay) if r is not None]
        if refs:
            terminate(refs, self._children)
        if (NETNS_DIR / self.netns).exists():
            _ip("netns", "del", self.netns, check=False)
        for host_end in self.legs.values():
            if _link_exists(host_end):
                _ip("link", "del", host_end, check=False)
        end = time.monotonic() + 10
        while self.leftovers() and time.monotonic() < end:
            time.sleep(0.1)
        (self.workdir / STATE_FILE).unlink(missing_ok=True)
        left = self.leftovers()
        if left:
            raise ClientError(f"the client namespace left on the host: {left}")

    def leftovers(self) -> list[str]:
        found = []
        for what, ref in (("kube-proxy", self.proxy), ("relay", self.relay)):
            if ref is not None and ref.alive():
                found.append(f"{what} pid {ref.pid}")
        if (NETNS_DIR / self.netns).exists():
            found.append(f"netns {self.netns}")
        found += [f"link {n}" for n in self.legs.values() if _link_exists(n)]
        return found

    # ---- inside ------------------------------------------------------------------------

    def command(self, *cmd: str) -> list[str]:
        """A command line that runs `cmd` inside the namespace."""
        return ["ip", "netns", "exec", self.netns, *cmd]

    def run(self, *cmd: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                self.command(*cmd), capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(cmd, 124, "", f"timed out after {timeout}s")

    def run_checked(self, *cmd: str) -> str:
        out = self.run(*cmd)
        if out.returncode != 0:
            raise ClientError(f"{' '.join(cmd)} in {self.netns}: {out.stderr.strip()}")
        return out.stdout

    def service_endpoints(self, namespace: str, service: str) -> list[str]:
        """The endpoints kube-proxy programmed for a Service ("ip:port"), from its rules."""
        rules = self.run_checked("iptables-save", "-t", "nat")
        marker = f'"{namespace}/{service}'
        found = []
        for line in rules.splitlines():
            if line.startswith("-A KUBE-SVC-") and marker in line and " -> " in line:
                found.append(line.split(" -> ", 1)[1].split('"', 1)[0].strip())
        return sorted(set(found))

    def wait_endpoints(self, namespace: str, service: str, count: int, timeout: float) -> None:
        end = time.monotonic() + timeout
        while len(self.service_endpoints(namespace, service)) < count:
            if time.monotonic() > end:
                seen = self.service_endpoints(namespace, service)
                raise ClientError(f"kube-proxy programs {seen} for {service}, wanted {count}")
            time.sleep(0.5)

    def _save(self) -> None:
        state = {
            "as_node": self.as_node,
            "tag": self.tag,
            "legs": self.legs,
            "proxy": asdict(self.proxy) if self.proxy else None,
            "relay": asdict(self.relay) if self.relay else None,
        }
        tmp = self.workdir / f".{STATE_FILE}.tmp{os.getpid()}"
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.workdir / STATE_FILE)


def netns_leftovers() -> list[str]:
    """Client namespaces of any run still on the host (none once every client stopped)."""
    with contextlib.suppress(FileNotFoundError):
        return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith("natr-"))
    return []
