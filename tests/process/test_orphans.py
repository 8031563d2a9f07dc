"""Subreaper and reaper, sweeps by invocation id, and the sentinel."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import trio
from process_helpers import SETSID_PARENT, SLEEP, alive, py, reporter, run_env, wait_gone

from ddsup.process import (
    find_run_processes,
    is_subreaper,
    start_sentinel,
    sweep,
    sweep_until_gone,
)

# Both scripts below read a process's state letter (None once it is gone) with this.
STATE_OF = textwrap.dedent(
    """
    def state(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return None
    """
)

# Runs in its own process, so that the pytest process never becomes a subreaper.
SUBREAPER_SCRIPT = STATE_OF + textwrap.dedent(
    """
    import json, os, sys, trio
    from ddsup.process import become_subreaper, is_subreaper, reap_adopted_children
    from ddsup.process import spawn

    FORKER = '''
    import os, random, sys, time
    for i in range(100):
        if os.fork() == 0:
            if i % 2:
                os.setsid()
            time.sleep(random.random() * 0.3)  # some die before their parent, some after
            os._exit(0)
    sys.exit(7)
    '''

    def children():
        import psutil
        return {p.pid for p in psutil.Process().children()}

    async def main():
        become_subreaper()
        env = dict(os.environ)
        async with trio.open_nursery() as nursery:
            await nursery.start(reap_adopted_children)
            forker = await spawn(
                [sys.executable, "-c", FORKER], env=env, cwd=".", log_path=sys.argv[1]
            )
            quick = [
                (code, await spawn(
                    ["/bin/sh", "-c", f"exit {code}"], env=env, cwd=".", log_path=sys.argv[1]
                ))
                for code in range(50)
            ]
            # a child forked by other code in our own session is left to its owner
            helper = await trio.run_process(["/bin/sh", "-c", "exit 5"], check=False)
            # Until every adopted orphan is reaped and every managed child has ended, the
            # managed ones stay zombies for their owner, whatever SIGCHLDs came meanwhile.
            managed = {forker.pid, *(child.pid for _, child in quick)}
            with trio.move_on_after(10):
                while children() - managed or any(state(p) not in ("Z", None) for p in managed):
                    await trio.sleep(0.02)
            zombies_left = [p for p in children() - managed if state(p) == "Z"]
            stolen = [p for p in managed if state(p) is None]
            forker_status = (await forker.wait()).code
            statuses = [(code, (await child.wait()).code) for code, child in quick]
            nursery.cancel_scope.cancel()
        print(json.dumps({
            "subreaper": is_subreaper(),
            "forker": forker_status,
            "quick": statuses,
            "helper": helper.returncode,
            "stolen": stolen,
            "children": sorted(children()),
            "zombies": zombies_left,
        }))

    trio.run(main)
    """
)


async def test_subreaper_reaps_adopted_children_and_spares_managed_ones(tmp_path: Path) -> None:
    result = await trio.run_process(
        [sys.executable, "-c", SUBREAPER_SCRIPT, str(tmp_path / "log")],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    assert report["subreaper"] is True
    assert report["forker"] == 7  # the managed child's status was not stolen by the reaper
    assert report["quick"] == [[code, code] for code in range(50)]
    assert report["stolen"] == []
    assert report["helper"] == 5
    assert report["children"] == []
    assert report["zombies"] == []
    assert not is_subreaper()  # the test process itself was never made one


# A managed child's zombie, not yet waited for, comes first in the kernel's walk of our
# children; an orphan adopted after it comes behind it. Runs in its own process too.
HIDDEN_ZOMBIE_SCRIPT = STATE_OF + textwrap.dedent(
    """
    import json, os, subprocess, sys, trio
    from ddsup.process import adopt, become_subreaper, reap_adopted_children, spawn

    ORPHANER = '''
    import os, sys
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        os.close(write_end)
        os.read(read_end, 1)  # end of file: its parent has exited, it was adopted
        os._exit(0)
    with open(sys.argv[1], "w") as out:
        out.write(str(pid))
    '''

    async def main():
        become_subreaper()
        env, log = dict(os.environ), sys.argv[1]
        # forked by this thread, as ddsup start's head start forks its first children:
        # the kernel walks this thread's children first, the orphan comes behind it
        first = adopt(subprocess.Popen(["/bin/sh", "-c", "exit 3"], start_new_session=True), env)
        os.waitid(os.P_PID, first.pid, os.WEXITED | os.WNOWAIT)  # until it is a zombie
        async with trio.open_nursery() as nursery:
            await nursery.start(reap_adopted_children)
            orphaner = await spawn(
                [sys.executable, "-c", ORPHANER, sys.argv[2]], env=env, cwd=".", log_path=log
            )
            await orphaner.wait()
            with open(sys.argv[2]) as pid_file:
                orphan = int(pid_file.read())
            with trio.move_on_after(10):
                while state(orphan) is not None:
                    await trio.sleep(0.01)
            left, first_state = state(orphan), state(first.pid)
            code = (await first.wait()).code
            nursery.cancel_scope.cancel()
        print(json.dumps({"orphan": left, "first": first_state, "code": code}))

    trio.run(main)
    """
)


async def test_reaper_reaps_an_orphan_behind_a_managed_zombie(tmp_path: Path) -> None:
    """The kernel shows one zombie at a time, and a unit's zombie that its owner has not
    yet waited for hides an adopted orphan's: the orphan is reaped all the same, and the
    unit's exit status is left to its owner."""
    argv = [
        sys.executable,
        "-c",
        HIDDEN_ZOMBIE_SCRIPT,
        str(tmp_path / "log"),
        str(tmp_path / "pid"),
    ]
    result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout) == {"orphan": None, "first": "Z", "code": 3}


def _popen(code: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(py(code), env=env, start_new_session=True)


async def test_sweep_kills_only_the_run_it_names(invocation_id: str) -> None:
    mine = [_popen(SLEEP, run_env(invocation_id)) for _ in range(3)]
    decoy = _popen(SLEEP, run_env(invocation_id + "-other"))
    plain = _popen(SLEEP, dict(os.environ))
    try:
        found = sorted(p.pid for p in mine)
        assert find_run_processes(invocation_id) == found
        assert sweep(invocation_id) == found
        for proc in mine:
            assert proc.wait() == -signal.SIGKILL
        assert find_run_processes(invocation_id) == []
        assert sweep(invocation_id) == []  # nothing left: a second sweep finds nothing
        assert alive(decoy.pid)
        assert alive(plain.pid)
    finally:
        for proc in [*mine, decoy, plain]:
            proc.kill()
            proc.wait()


async def test_sweep_kills_the_group_a_run_process_leads(invocation_id: str) -> None:
    """A group member that cleared its environment still dies with its run's leader
    (it is in the leader's group, and below it)."""
    async with reporter() as rep:
        code = (
            "import socket, subprocess, sys, time\n"
            "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], env={})\n"
            f"socket.create_connection(('127.0.0.1', {rep.port})).sendall(str(g.pid).encode())\n"
            "time.sleep(600)\n"
        )
        leader = _popen(code, run_env(invocation_id))
        member = int(await rep.receive())
    try:
        assert member not in find_run_processes(invocation_id)  # no id in its environment
        assert sweep(invocation_id) == sorted([leader.pid, member])
        assert leader.wait() == -signal.SIGKILL
        assert await wait_gone(member)
    finally:
        leader.kill()
        leader.wait()


async def test_sweep_until_gone_reports_a_clean_run(invocation_id: str) -> None:
    procs = [_popen(SLEEP, run_env(invocation_id)) for _ in range(5)]
    try:
        assert await sweep_until_gone(invocation_id, timeout=5.0) == []
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert all(proc.returncode == -signal.SIGKILL for proc in procs)


# The supervisor stand-in: starts a unit (with a setsid grandchild) and the sentinel,
# says so on stdout, then waits to be SIGKILLed.
PARENT_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, trio
    from ddsup.process import start_sentinel
    from ddsup.process import spawn
    invocation_id, port, log, unit_code = sys.argv[1:5]

    async def main():
        env = dict(os.environ, DDSUP_INVOCATION_ID=invocation_id)
        child = await spawn(
            [sys.executable, "-c", unit_code, port, "sleep"], env=env, cwd=".", log_path=log
        )
        sentinel = start_sentinel(invocation_id)
        print(json.dumps({"child": child.pid, "sentinel": sentinel.pid}), flush=True)
        await trio.sleep_forever()

    trio.run(main)
    """
)


async def test_sentinel_sweeps_the_run_when_the_supervisor_is_sigkilled(
    invocation_id: str, tmp_path: Path
) -> None:
    async with reporter() as rep:
        argv = py(PARENT_SCRIPT, invocation_id, str(rep.port), str(tmp_path / "log"), SETSID_PARENT)
        parent = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE)
        try:
            grandchild = int(await rep.receive())
            assert parent.stdout is not None
            line = await parent.stdout.receive_some()
            pids = json.loads(line)
            assert set(find_run_processes(invocation_id)) == {pids["child"], grandchild}
            assert os.getsid(pids["sentinel"]) == pids["sentinel"]
            environ = await trio.Path(f"/proc/{pids['sentinel']}/environ").read_bytes()
            assert b"DDSUP_INVOCATION_ID" not in environ
        finally:
            parent.kill()
            await parent.wait()
            await parent.stdout.aclose()
    killed_at = trio.current_time()
    with trio.move_on_after(10.0):
        while find_run_processes(invocation_id):  # noqa: ASYNC110 (external, bounded)
            await trio.sleep(0.02)
    assert find_run_processes(invocation_id) == []
    assert trio.current_time() - killed_at < 10.0
    assert await wait_gone(pids["sentinel"])


async def test_sentinel_close_quits_without_sweeping(invocation_id: str) -> None:
    unit = _popen(SLEEP, run_env(invocation_id))
    try:
        sentinel = start_sentinel(invocation_id)
        sentinel.close()
        sentinel.close()  # idempotent
        assert not alive(sentinel.pid)
        assert alive(unit.pid)  # a normal exit cleans up by itself, not through the sentinel
    finally:
        unit.kill()
        unit.wait()


async def test_sweep_kills_what_lies_below_a_tagged_process(invocation_id: str) -> None:
    """An engine that called setsid and cleared its environment is found below its
    tagged parent (and an orphan adopted by a tagged node agent, below the agent)."""
    async with reporter() as rep:
        code = (
            "import socket, subprocess, sys, time\n"
            "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
            " env={}, start_new_session=True)\n"
            f"socket.create_connection(('127.0.0.1', {rep.port})).sendall(str(g.pid).encode())\n"
            "time.sleep(600)\n"
        )
        parent = _popen(code, run_env(invocation_id))
        engine = int(await rep.receive())
    try:
        assert os.getsid(engine) == engine  # its own session: no group kill reaches it
        assert engine not in find_run_processes(invocation_id)
        assert sweep(invocation_id) == sorted([parent.pid, engine])
        assert parent.wait() == -signal.SIGKILL
        assert await wait_gone(engine)
    finally:
        parent.kill()
        parent.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(engine, signal.SIGKILL)  # untagged: the leak guard would not see it
