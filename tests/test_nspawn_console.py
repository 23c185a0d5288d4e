"""The harness's containers (hack/nspawn.py): their console is read, as a real one is.

systemd writes its status lines to the console and blocks while the console does not take
them. A container whose pty nobody reads fills it within a shutdown's status lines, and its
PID 1 then hangs in the next one: seen as a real node that drained and never powered off
(bench/departure.py, kind poweroff-target), with `systemctl` unanswered.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import hack.kubeutil as ku
from tests.nspawn import Machine, nspawn_root

# Far past what a pty holds unread (some 12 KiB: the line discipline's 4 KiB and the pty's
# 8 KiB of buffers; a node's boot and shutdown status lines came to 24 KiB).
CONSOLE_BYTES = 512 * 1024


def test_console_output_is_read_into_the_log(tmp_path: Path) -> None:
    machine = Machine(nspawn_root(), tmp_path, f"console-{secrets.token_hex(3)}")
    try:
        machine.boot()
        marker = f"console-read-{secrets.token_hex(4)}"
        fill = f"yes 'status line of the console test' | head -c {CONSOLE_BYTES}"
        out = machine.run(
            "sh", "-c", f"{fill} > /dev/console && echo {marker} > /dev/console", timeout=60
        )
        assert out.returncode == 0, out.stderr
        ku.wait_until(lambda: marker in machine.console(), 10, "the marker in the console log")
    finally:
        machine.destroy()
