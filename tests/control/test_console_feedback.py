"""What ``ddsup start`` shows a person at a terminal when a unit fails (through a pty).

Like ``systemctl status``: the failed unit's last exit status, the last lines of its log
and the command that shows the rest; delays in human units (``restart in 103ms``); and
the run's end announced with its cause, after the failure, not before it.
"""

from __future__ import annotations

import re
from pathlib import Path

from control_helpers import PY, on_pty

from support.runs import start_argv
from support.unit_dirs import UnitDir

ANSI = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]|\r")
# Prints 30 numbered lines, then exits 64 (a usage error, say).
NOISY_FAILURE = "import sys\nfor i in range(30): print('line', i)\nsys.exit(64)"


def test_a_failed_unit_shows_its_exit_last_lines_and_how_to_see_more(tmp_path: Path) -> None:
    units = UnitDir(tmp_path / "units")
    service = {"restart": "on-failure", "restart_sec": "100ms", "start_limit_burst": 2}
    units.add("flaky", "service", [PY, "-c", NOISY_FAILURE], service=service)
    units.add("worker", "worker", ["sleep", "300"], unit={"after": ["flaky"]})
    state = tmp_path / "ddsup-run"
    with on_pty(start_argv(units, state, verbose=False), tmp_path) as (process, tty):
        tty.read_until(b"finished: unit_failed, exit 70")
        assert process.wait(timeout=30) == 70
        screen = ANSI.sub(b"", tty.read_to_end(limit=5)).decode()
    lines = screen.splitlines()
    restarting = next(line for line in lines if "flaky (node0): ↻ restarting" in line)
    assert re.search(r"exit status 64; restart in \d+ms$", restarting), restarting  # not 0.1s
    failed = next(n for n, line in enumerate(lines) if "flaky (node0): ✗ failed" in line)
    assert lines[failed].endswith(
        "start limit hit: 2 starts within 10s (start_limit_burst = 2); last exit: exit status 64"
    )
    block = lines[failed + 1 : failed + 13]
    assert block[0].strip() == "last 10 lines of logs/flaky.log:"
    assert [line.strip() for line in block[1:11]] == [f"line {i}" for i in range(20, 30)]
    assert block[11].strip() == "more: ddsup logs flaky --state-dir ddsup-run"
    ending = next(n for n, line in enumerate(lines) if "ddsup: run ending:" in line)
    assert ending > failed + 11  # the cause comes after the failure, and says what it was
    assert lines[ending].endswith(
        "run ending: flaky: start limit hit: 2 starts within 10s "
        "(start_limit_burst = 2); last exit: exit status 64"
    )
    assert sum("error" in line for line in lines) == 0  # no separate error line repeats it
