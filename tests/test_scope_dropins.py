"""The package's container-scope drop-ins reach every runtime's scopes, in a booted systemd.

The harness's nodes run containerd only, and tests/test_system.py shows a cri-containerd scope
stopping after the agent at a shutdown that bypasses logind. CRI-O's and Docker's scopes get
the same drop-in through their own prefix directories (crio-.scope.d, docker-.scope.d); the
scopes are transient, and only a running systemd (252 or later) applies drop-ins to those.
So each is started here by name, as the runtimes' systemd cgroup driver names them, in a
container where the .deb was installed as on a node image, and systemd itself is asked what
the scope is ordered before.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from hack import kubeutil as ku
from tests.nspawn import Machine, nspawn_root, packaged_root

DROPIN = "50-nodeagent.conf"
AGENT = "nodeagent.service"
ID = "0123456789abcdef"
# Each runtime's container scope, and the package's drop-in directory that reaches it. CRI-O
# puts conmon in a scope of its own, which systemd's prefix lookup takes through crio-.scope.d.
SCOPES = {
    f"cri-containerd-{ID}.scope": "cri-containerd-.scope.d",
    f"crio-{ID}.scope": "crio-.scope.d",
    f"crio-conmon-{ID}.scope": "crio-.scope.d",
    f"docker-{ID}.scope": "docker-.scope.d",
}
# Named like no runtime's: it must get nothing, or the check below could not tell.
OTHER = f"runc-{ID}.scope"


@pytest.fixture
def machine(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Machine:
    template = packaged_root(nspawn_root(), tmp_path_factory.getbasetemp() / "packaged")
    return Machine(template, tmp_path, f"scopes-{secrets.token_hex(3)}")


def start_scope(machine: Machine, name: str) -> None:
    """A transient scope as runc's systemd driver makes one: DefaultDependencies=no."""
    run = f"systemd-run --scope --unit={name} -p DefaultDependencies=no sleep infinity"
    out = machine.run("sh", "-c", f"{run} >/dev/null 2>&1 &")
    assert out.returncode == 0, out.stderr
    ku.wait_until(
        lambda: machine.run("systemctl", "is-active", name).stdout.strip() == "active",
        30,
        f"{name} active",
    )


def ordering(machine: Machine, name: str) -> tuple[str, list[str], list[str]]:
    """The scope's state, its Before= list and the drop-ins systemd applied to it."""
    out = machine.run(
        "systemctl", "show", name, "-p", "ActiveState", "-p", "Before", "-p", "DropInPaths"
    )
    assert out.returncode == 0, out.stderr
    props = dict(line.partition("=")[::2] for line in out.stdout.splitlines())
    return props["ActiveState"], props["Before"].split(), props["DropInPaths"].split()


def test_every_runtimes_container_scope_is_ordered_before_the_agent(machine: Machine) -> None:
    try:
        machine.boot()
        version = machine.run("systemctl", "--version").stdout.split()[1]
        for name in [*SCOPES, OTHER]:
            start_scope(machine, name)
        for name, directory in SCOPES.items():
            state, before, dropins = ordering(machine, name)
            assert state == "active", (name, state)
            assert AGENT in before, (name, before, f"systemd {version}")
            assert f"/usr/lib/systemd/system/{directory}/{DROPIN}" in dropins, (name, dropins)
        state, before, dropins = ordering(machine, OTHER)
        assert state == "active"
        assert AGENT not in before, before
        assert dropins == [], dropins
    finally:
        machine.destroy()
