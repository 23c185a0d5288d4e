"""The departure benchmark's node shapes (hack/departure/shapes.py, hack/departure/vm.py) and
the VM's link to the client (hack/vmnode/config.py, hack/vmnode/tap.py): what each shape
runs, why nspawn-trixie does not, the guest's journal times put on the host's clock, and the
second NIC kept inside the client's network namespace."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import yaml

from hack.departure.shapes import shape_error
from hack.departure.vm import on_host_clock, parse_entries
from hack.vmnode.config import Machine, VmLink, VmOptions, link_unit, qemu_argv, vm_kubelet_config
from hack.vmnode.tap import IFF_NO_PI, IFF_TAP, ifreq

V1_BOUND = {"hugetlb"}  # this host's v2 hierarchy: cpu, memory, pids are bound to v1
ALL_V2 = {"cpuset", "cpu", "io", "memory", "hugetlb", "pids"}


@pytest.mark.parametrize(
    ("shape", "kinds", "v2", "refused"),
    [
        ("nspawn", ["poweroff", "reboot", "stop"], V1_BOUND, None),
        ("nspawn", ["poweroff", "soft-reboot"], V1_BOUND, "needs systemd 254+"),
        ("vm", ["poweroff", "reboot", "stop", "soft-reboot"], V1_BOUND, None),
        ("vm", ["poweroff", "rolling-reboot"], V1_BOUND, "kind rolling-reboot does not run"),
        ("vm", ["daemonset-poweroff"], V1_BOUND, "kind daemonset-poweroff does not run"),
        ("nspawn-trixie", ["poweroff"], V1_BOUND, "lacks cpu, memory, pids"),
        ("nspawn-trixie", ["poweroff"], set(), "it has nothing"),
        ("nspawn-trixie", ["poweroff"], ALL_V2, "not built yet"),
    ],
)
def test_each_shape_runs_its_kinds_and_says_why_not(
    shape: str, kinds: list[str], v2: set[str], refused: str | None
) -> None:
    error = shape_error(shape, kinds, v2)
    if refused is None:
        assert error is None
    else:
        assert error is not None and refused in error
        assert "\n" not in error


def test_the_guests_journal_times_are_put_on_the_hosts_clock_by_their_boot() -> None:
    text = "\n".join(
        [
            '{"MESSAGE": "drain for reboot: drained", "_BOOT_ID": "aa", '
            '"__REALTIME_TIMESTAMP": "100500000"}',
            '{"MESSAGE": "Started kubelet", "_BOOT_ID": "bb", "__REALTIME_TIMESTAMP": "200000000"}',
            '{"MESSAGE": [1, 2], "_BOOT_ID": "bb", "__REALTIME_TIMESTAMP": "1"}',
            "not json",
        ]
    )
    entries = parse_entries(text)
    assert [e["MESSAGE"] for e in entries] == ["drain for reboot: drained", "Started kubelet"]
    # The guest's clock half a second ahead in the first boot, 0.9 s behind in the second.
    moved = on_host_clock(entries, {"aa": 0.5, "bb": -0.9})
    assert [e["__REALTIME_TIMESTAMP"] for e in moved] == ["100000000", "200900000"]
    # A boot never measured takes the last offset measured.
    assert on_host_clock(entries[:1], {"bb": -0.9})[0]["__REALTIME_TIMESTAMP"] == "101400000"


def test_the_vms_second_nic_is_a_tap_handed_over_by_descriptor() -> None:
    w = Path("/w")
    m = Machine(w / "k", w / "i", w / "d", w / "c", w / "q", w / "g")
    link = VmLink("natr-abc123", "vmtabc123")
    opts = VmOptions(link=link, exit_on_reboot=True)
    argv = qemu_argv(m, opts, tap_fd=7)
    netdevs = [argv[i + 1] for i, a in enumerate(argv) if a == "-netdev"]
    # The user-mode NIC first (eth0: the API server on the host's loopback), then the tap.
    assert netdevs == ["user,id=n0", "tap,id=n1,fd=7"]
    assert "-no-reboot" in argv
    assert "-no-reboot" not in qemu_argv(m, VmOptions())
    with pytest.raises(ValueError):
        qemu_argv(m, opts)
    unit = link_unit(link)
    assert f"ip addr add {link.guest}/30 dev eth1" in unit
    assert "BindsTo=sys-subsystem-net-devices-eth1.device" in unit


def test_the_tap_is_asked_for_by_name_without_packet_info() -> None:
    raw = ifreq("vmtabc123", IFF_TAP | IFF_NO_PI)
    assert len(raw) == 40
    name, flags = struct.unpack("16sH", raw[:18])
    assert name.rstrip(b"\0") == b"vmtabc123"
    assert flags == IFF_TAP | IFF_NO_PI
    with pytest.raises(ValueError):
        ifreq("x" * 16, IFF_TAP)


def test_the_vm_kubelet_takes_the_configs_graceful_shutdown() -> None:
    config = yaml.safe_load(
        vm_kubelet_config("vm-a", VmOptions(shutdown_grace=150, shutdown_grace_critical=30))
    )
    assert (config["shutdownGracePeriod"], config["shutdownGracePeriodCriticalPods"]) == (
        "150s",
        "30s",
    )
    assert yaml.safe_load(vm_kubelet_config("vm-a"))["shutdownGracePeriod"] == "0s"
