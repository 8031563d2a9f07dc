"""Fuzz a live controller's control port: nothing anyone sends changes how the run ends.

A real ``ddsup start`` runs two simulated nodes (so node agents are connected) and a
worker that exits 7 once the test releases it. While it runs, Hypothesis throws junk at
its control port, one connection per example: raw bytes, JSON of any shape, hellos with
wrong secrets, every message kind with fields of any type, nesting 200 000 deep,
100 KB lines; then, with the run's own secret, operator connections that send junk and
agent hellos for nodes that are not theirs to take. After every example the controller
is alive and has hung up on the junk; afterwards it still answers ``ddsup status``, has
written nothing about the junk (no event, no console line, nothing outside its state
directory), and ends 7 with
``worker_failed`` once the worker is released: the run's outcome is unchanged.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from hostile_helpers import (
    WORKER_STATUS,
    Junk,
    examples,
    exchange,
    labelled,
    messages,
    nested,
    release_units,
    unauthenticated,
)
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from support.polls import until_sync
from support.runs import end, read_events, simulated, start_process

EXAMPLES = examples(300)


def _worker_running(state: Path) -> bool:
    events = read_events(state, live=True)
    return any(e.get("instance") == "worker" and e.get("to") == "ready" for e in events)


def test_junk_on_the_control_port_leaves_the_run_and_its_outcome_unchanged(
    tmp_path: Path,
) -> None:
    state, release = tmp_path / "state", tmp_path / "release"
    units = release_units(tmp_path / "units", release)
    output = (tmp_path / "output").open("wb")
    workdir = tmp_path / "workdir"  # ddsup start's working directory: stays empty
    workdir.mkdir()
    process = start_process(
        units, state, *simulated(2, 1), output=output, cwd=workdir, verbose=True
    )
    try:
        until_sync(lambda: _worker_running(state), "the worker to run", limit=30)
        run = json.loads((state / "run.json").read_text())
        port, secret = run["control"]["port"], (state / "control.secret").read_text().strip()
        events_before = len(read_events(state, live=True))
        output_before = (tmp_path / "output").stat().st_size
        tried = _fuzz(process, port, secret)
        assert process.poll() is None
        status = subprocess.run(
            [sys.executable, "-m", "ddsup", "status", "--state-dir", str(state), "--json"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["live"] is True
        assert len(read_events(state, live=True)) == events_before, "junk was recorded as events"
        assert (tmp_path / "output").stat().st_size == output_before, "junk reached the console"
        release.touch()
        returncode = process.wait(timeout=60)
    finally:
        end(process)
        output.close()
    text = (tmp_path / "output").read_text(errors="replace")
    assert returncode == WORKER_STATUS, text
    result = json.loads((state / "result.json").read_text())
    assert (result["status"], result["exit_code"]) == ("worker_failed", WORKER_STATUS)
    assert "Traceback" not in text
    assert tried >= EXAMPLES
    assert list(workdir.iterdir()) == [], "ddsup wrote outside its state directory"


def _fuzz(process: subprocess.Popen[bytes], port: int, secret: str) -> int:
    """Throw junk at ``port``; after each example the controller is alive. Examples run."""
    tried: Counter[str] = Counter()
    hello = json.dumps({"op": "hello", "role": "control", "secret": secret}).encode() + b"\n"
    operator_junk = st.lists(
        messages(exclude=frozenset({"stop_run"})) | st.binary(max_size=500),
        min_size=1,
        max_size=4,
    ).map(lambda lines: hello + b"".join(lines))
    foreign_agents = st.sampled_from(["node0", "node1", "node9", "x" * 300]).map(
        lambda node: (
            json.dumps({"op": "hello", "role": "agent", "secret": secret, "node": node}).encode()
            + b"\n"
            + b'{"op": "event", "event": {"event": "unit"}}\n'
        )
    )
    junk = st.one_of(
        unauthenticated(["node0", "node1"]),
        labelled("operator with the secret, then junk", operator_junk),
        labelled("agent hello with the secret for a node not its own", foreign_agents),
        labelled("nesting 200000 deep", st.just(200_000).map(nested)),
    )

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(junk)
    def throw(junk: Junk) -> None:
        event(junk.kind)
        exchange(port, junk.data)
        assert process.poll() is None, f"the controller ended after {junk}"
        tried[junk.kind] += 1

    throw()
    print(f"controller fuzz: {sum(tried.values())} connections: {dict(tried)}")
    return sum(tried.values())
