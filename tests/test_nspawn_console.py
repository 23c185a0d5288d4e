"""The harness's containers (hack/nspawn.py): nothing PID 1 writes to a console holds it up.

systemd writes a status line to the console for every unit it starts and stops, and blocks
while the console does not take it. A console that nobody reads (a pty nspawn leaves alone,
or one whose reader stopped) fills within a node's boot and shutdown lines, and PID 1 then
hangs in the next one: seen as a real node that drained and never powered off
(bench/departure.py, kind poweroff-target), `systemctl` unanswered. No real console does
that to a node.
"""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

from tests.nspawn import Machine, nspawn_root

# Units stopped at the poweroff, each a status line or two: far past the few KiB a pty holds
# unread (a node's boot and shutdown came to 24 KiB).
UNITS = 400
OFF_WITHIN = 60.0  # the poweroff itself took 1.0 s


def test_a_shutdown_of_many_units_is_not_held_by_the_console(tmp_path: Path) -> None:
    machine = Machine(nspawn_root(), tmp_path, f"console-{secrets.token_hex(3)}")
    try:
        machine.boot()
        start = (
            f"for i in $(seq 1 {UNITS}); do systemd-run -q --unit=filler-$i sleep infinity; done"
        )
        out = machine.run("sh", "-c", start, timeout=180)
        assert out.returncode == 0, out.stderr
        machine.run("systemctl", "poweroff", "--no-block")
        try:
            assert machine.wait_exit(OFF_WITHIN) == 0
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still up {OFF_WITHIN:.0f}s after the poweroff") from None
    finally:
        machine.destroy()
