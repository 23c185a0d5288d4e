"""A CSI node plugin on a real node: Kubernetes' mock CSI driver as a service in the node's
root, registered with the kubelet through its plugin registration socket
(hack/csi/mockdriver/main.go; hack/csi/build.sh builds it).

    node = RealNode.create(cluster, name, workdir, binds=csi.binds(csi_dir))
    csi.install_plugin(node.root, DRIVER)
    node.boot()
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from .paths import REPO

BINARY = "/usr/local/bin/csi-mock"
UNIT = "csi-mock.service"
BUILD_TIMEOUT = 3600.0


def build() -> Path:
    """The directory holding csi-mock and csi-attacher, built once and cached."""
    out = subprocess.run(
        [str(REPO / "hack" / "csi" / "build.sh")],
        stdout=subprocess.PIPE,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def binds(csi_dir: Path) -> list[str]:
    return [f"--bind-ro={csi_dir / 'csi-mock'}:{BINARY}"]


def unit(driver: str) -> str:
    # Before the kubelet: started first and, at shutdown, stopped after it, so the kubelet
    # can still unmount (NodeUnpublish, NodeUnstage) while pods leave.
    endpoint = f"/var/lib/kubelet/plugins/{driver}/csi.sock"
    registration = f"/var/lib/kubelet/plugins_registry/{driver}-reg.sock"
    return f"""[Unit]
Description=CSI node plugin {driver} (Kubernetes' mock CSI driver)
Before=kubelet.service
# It exits when the kubelet refuses its registration (its Node not there yet): as many
# restarts as that takes.
StartLimitIntervalSec=0

[Service]
ExecStart={BINARY} -driver-name={driver} -endpoint={endpoint} -registration={registration}
Restart=on-failure
RestartSec=1

[Install]
WantedBy=multi-user.target
"""


def install_plugin(node_root: Path, driver: str) -> None:
    """Write and enable the node plugin's unit in a node's root (before it boots)."""
    units = node_root / "etc" / "systemd" / "system"
    (units / UNIT).write_text(unit(driver))
    wants = units / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / UNIT
    link.unlink(missing_ok=True)
    link.symlink_to(f"/etc/systemd/system/{UNIT}")
