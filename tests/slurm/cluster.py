"""A real, private Slurm cluster on this one machine, for tests and CI.

ddsup launches its node agents through ``srun``; the only honest test of that is a real
``slurmctld`` with real ``slurmd`` daemons. ``SlurmCluster.start`` builds one in a
directory of its own: a private ``munged`` (own key and socket), one ``slurmctld`` and N
``slurmd -N nX`` that all run on this host, on ports bound to 0 and released, so two
clusters never clash and nothing in ``/etc`` is touched.

The daemons are never children of the test process (the suite's guard in
``tests/conftest.py`` fails a test that leaves children alive, and a session-wide
cluster must outlive single tests). A detached *keeper* process (``_keeper_main``)
spawns them, reaps them and whatever daemonizes below them, and kills the lot if the
test process dies. ``stop`` ends the daemons by PID, then every process that carries
this cluster's marker variable (``slurmstepd``, job tasks, even tasks that daemonized
out of Slurm's process tracking, ``srun`` clients) and their descendants: when ``stop``
returns, no process of the cluster is left.

Run by hand: ``python tests/slurm/cluster.py DIR [--nodes N]`` (see docs/testing-slurm.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import getpass
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

MARKER = "DDSUP_TEST_SLURM_CLUSTER"
"""Set in the environment of the daemons and of every client call, so that job steps
and tasks of this cluster can be found (and ended) by ``stop``."""

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "sbatch", "scontrol", "sinfo", "squeue", "scancel")
SBIN_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin")
KILL_WAIT_S = 5
GPUS_PER_NODE = 4
"""Fake GRES GPUs per node (``fake_gpus``): jobs that ask for GPUs get them per node."""
"""Slurm's ``KillWait``: seconds between the SIGTERM and the SIGKILL of a cancelled job."""

TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)
_SOCKET_PATH_BUDGET = 60
"""Longest directory that may hold Unix sockets: sun_path is 108 bytes, and slurmd adds
``<node>_<job>.<step>`` below its spool directory."""


class SlurmNotInstalled(RuntimeError):
    """Slurm or munge binaries are missing; ``.ci/install-slurm`` installs them."""


class SlurmClusterError(RuntimeError):
    """The cluster did not come up, or a client call or job wait failed."""


@dataclass(frozen=True)
class JobResult:
    """The final state of a job as ``scontrol show job`` reports it."""

    job_id: str
    state: str
    exit_code: int
    signal: int
    fields: Mapping[str, str] = field(repr=False)


def find_binaries() -> dict[str, str]:
    """Absolute path of every daemon and client, looking in the sbin dirs too."""
    search = os.pathsep.join([os.environ.get("PATH", os.defpath), *SBIN_DIRS])
    found = {name: shutil.which(name, path=search) for name in (*DAEMONS, *CLIENTS)}
    return {name: path for name, path in found.items() if path is not None}


def missing_binaries() -> list[str]:
    """Names of the daemons and clients that are not installed."""
    present = find_binaries()
    return [name for name in (*DAEMONS, *CLIENTS) if name not in present]


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago (bound to 0, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class _Layout:
    """Where each file of one cluster lives; ``run`` holds sockets, so its path is short."""

    root: Path
    run: Path

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def logs(self) -> Path:
        return self.root / "log"

    @property
    def jobs(self) -> Path:
        return self.root / "jobs"

    @property
    def munge_key(self) -> Path:
        return self.run / "munge" / "munge.key"

    @property
    def munge_socket(self) -> Path:
        return self.run / "munge" / "munge.socket"

    def node_spool(self, node: str) -> Path:
        return self.run / "spool" / node


def render_conf(
    layout: _Layout,
    *,
    hostname: str,
    ctld_port: int,
    node_ports: Mapping[str, int],
    cpus: int,
    user: str,
    gpus: int = 0,
    epilog: Path | None = None,
) -> str:
    """slurm.conf for a one-host cluster: every node is a ``slurmd -N`` on 127.0.0.1.

    With ``gpus``, every node has that many GRES GPUs (``gres.conf``: :func:`fake_gpus`);
    with ``epilog``, slurmd runs that program after every job.
    """
    lines = [
        *([f"Epilog={epilog}"] if epilog is not None else []),
        "ClusterName=ddsuptest",
        *(["GresTypes=gpu"] if gpus else []),
        f"SlurmctldHost={hostname}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={layout.munge_socket}",
        f"SlurmUser={user}",
        f"SlurmdUser={user}",
        f"StateSaveLocation={layout.run / 'ctld'}",
        f"SlurmctldPidFile={layout.run / 'slurmctld.pid'}",
        f"SlurmctldLogFile={layout.logs / 'slurmctld.log'}",
        f"SlurmdSpoolDir={layout.run / 'spool' / '%n'}",
        f"SlurmdPidFile={layout.run / 'slurmd-%n.pid'}",
        f"SlurmdLogFile={layout.logs / 'slurmd-%n.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        # Heterogeneous jobs (``#SBATCH hetjob``) are scheduled by the backfill plugin only;
        # it runs every second here, so a het job starts as fast as any other.
        "SchedulerType=sched/backfill",
        # The main loop every second (default 60 s): a job submitted while the previous
        # job's nodes are still completing then starts within ~1 s instead of ~3 s.
        "SchedulerParameters=sched_interval=1,bf_interval=1",
        "JobRequeue=1",  # batch jobs may be requeued (scontrol requeue) unless --no-requeue
        "SlurmdParameters=config_overrides",  # nodes keep the CPUs declared here
        "MpiDefault=none",
        "ReturnToService=2",
        f"KillWait={KILL_WAIT_S}",
        "MinJobAge=300",  # finished jobs stay visible to scontrol (there is no sacct)
        "MailProg=/bin/true",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
    ]
    for node, port in node_ports.items():
        lines.append(
            f"NodeName={node} NodeHostname={hostname} NodeAddr=127.0.0.1 Port={port} "
            f"CPUs={cpus} RealMemory=1000 Features=fake State=UNKNOWN"
            + (f" Gres=gpu:{gpus}" if gpus else "")
        )
    lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


class SlurmCluster:
    """A running private cluster; build it with ``SlurmCluster.start(tmp_dir)``."""

    def __init__(self, layout: _Layout, node_names: Sequence[str], binaries: Mapping[str, str]):
        self.layout = layout
        self.node_names = tuple(node_names)
        self.binaries = dict(binaries)
        self.pids: dict[str, int] = {}
        self._keeper: _Keeper | None = None
        self.startup_seconds = 0.0
        self.gpus_per_node = 0
        self.env = _client_env(layout, binaries)

    # -- lifecycle -----------------------------------------------------------------

    @classmethod
    def start(
        cls,
        tmp_dir: Path,
        nodes: int = 3,
        *,
        cpus: int = 2,
        gpus: int = GPUS_PER_NODE,
        timeout: float = 60.0,
        epilog: Path | None = None,
    ) -> SlurmCluster:
        """Write the config, start munged, slurmctld and ``nodes`` slurmd; wait for idle.

        Each node gets ``gpus`` fake GRES GPUs where device files can be made (root);
        ``gpus_per_node`` says how many it got; ``epilog`` is slurm.conf's ``Epilog``.
        On any failure every daemon already started is stopped before the error rises.
        """
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, not nodes={nodes}")
        missing = missing_binaries()
        if missing:
            raise SlurmNotInstalled(
                f"Slurm binaries not found: {', '.join(missing)}; run .ci/install-slurm as root"
            )
        began = time.monotonic()
        cluster = cls(
            _make_layout(Path(tmp_dir)), [f"n{i}" for i in range(1, nodes + 1)], find_binaries()
        )
        try:
            cluster._write_files(cpus, gpus, epilog)
            cluster._start_daemons(timeout)
        except BaseException:
            cluster.stop()
            raise
        cluster.startup_seconds = time.monotonic() - began
        return cluster

    def stop(self, grace: float = 5.0) -> None:
        """End the daemons (TERM, ``grace``, KILL), then every process of the cluster.

        Idempotent. Steps and tasks get SIGKILL at once: a stopping test cluster owes
        them no graceful end, and slurmd would not end them on its own SIGTERM anyway.
        """
        for level in sorted({_stop_order(name) for name in self.pids}):
            _terminate(
                [pid for name, pid in self.pids.items() if _stop_order(name) == level], grace
            )
        _terminate(sorted(self._leftover_pids()), grace=0.0)
        self.pids.clear()
        if self._keeper is not None:
            self._keeper.close()
            self._keeper = None
        if self.layout.run != self.layout.root:
            shutil.rmtree(self.layout.run, ignore_errors=True)

    def __enter__(self) -> SlurmCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- clients -------------------------------------------------------------------

    def run(
        self, argv: Sequence[str], *, check: bool = True, timeout: float = 30.0, **kw: Any
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client (or anything) with this cluster's ``env``; text output.

        With ``check`` a non-zero exit raises ``SlurmClusterError`` carrying the output.
        """
        kw.setdefault("env", self.env)
        kw.setdefault("capture_output", True)
        proc = subprocess.run(list(argv), text=True, timeout=timeout, check=False, **kw)
        if check and proc.returncode != 0:
            raise SlurmClusterError(
                f"{' '.join(argv)} exited {proc.returncode}\n"
                f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
            )
        return proc

    def sbatch(self, script_text: str, *, extra_args: Iterable[str] = ()) -> str:
        """Submit a batch script; returns the job id. Output goes to ``job_output(id)``."""
        self.layout.jobs.mkdir(exist_ok=True)
        argv = [
            "sbatch",
            "--parsable",
            f"--chdir={self.layout.jobs}",
            f"--output={self.layout.jobs}/%j.out",
            *extra_args,
        ]
        out = self.run(argv, input=script_text).stdout.strip()
        return out.split(";", 1)[0]

    def job_output(self, job_id: str) -> str:
        """What the batch script of ``job_id`` wrote (default ``--output`` of ``sbatch``)."""
        return (self.layout.jobs / f"{job_id}.out").read_text()

    def job_info(self, job_id: str) -> dict[str, str]:
        """``scontrol show job -o`` as a dict (Key=Value fields)."""
        out = self.run(["scontrol", "show", "job", "-o", job_id]).stdout
        return _parse_fields(out)

    def wait_job_state(
        self, job_id: str, states: Iterable[str], timeout: float = 30.0
    ) -> dict[str, str]:
        """Poll until the job is in one of ``states`` (or ends); returns its fields."""
        wanted = frozenset(states)
        info: dict[str, str] = {}

        def reached() -> bool:
            nonlocal info
            info = self.job_info(job_id)
            state = info.get("JobState", "")
            return state in wanted or state in TERMINAL_STATES

        wait_until(reached, timeout, lambda: f"job {job_id} never reached {sorted(wanted)}: {info}")
        return info

    def wait_job(self, job_id: str, timeout: float = 30.0) -> JobResult:
        """Wait until the job has ended; its state and the batch script's exit code."""
        info = self.wait_job_state(job_id, TERMINAL_STATES, timeout)
        code, _, sig = info.get("ExitCode", "0:0").partition(":")
        return JobResult(job_id, info["JobState"], int(code), int(sig or 0), info)

    def nodes(self) -> list[str]:
        """Node names, in order (``n1``, ``n2``, …)."""
        return list(self.node_names)

    def node_states(self) -> dict[str, str]:
        """Node → compact state as ``sinfo`` shows it (``idle``, ``alloc``, ``down*``…)."""
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=10).stdout
        rows = [line.split() for line in out.splitlines()]
        return {row[0]: row[1] for row in rows if len(row) == 2}

    # -- internals -----------------------------------------------------------------

    def _write_files(self, cpus: int, gpus: int, epilog: Path | None) -> None:
        layout = self.layout
        for directory in (layout.logs, layout.jobs, layout.run / "ctld", layout.munge_key.parent):
            directory.mkdir(parents=True, exist_ok=True)
        for node in self.node_names:
            layout.node_spool(node).mkdir(parents=True, exist_ok=True)
        layout.munge_key.parent.chmod(0o755)  # munged refuses a socket dir others can write
        _write_munge_key(layout.munge_key)
        self.gpus_per_node = fake_gpus(layout, gpus)
        conf = render_conf(
            layout,
            hostname=socket.gethostname(),
            ctld_port=free_port(),
            node_ports={node: free_port() for node in self.node_names},
            cpus=cpus,
            user=getpass.getuser(),
            gpus=self.gpus_per_node,
            epilog=epilog,
        )
        layout.conf.write_text(conf)

    def _start_daemons(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self._launch("munged", self._munged_argv())
        wait_until(
            self.layout.munge_socket.exists,
            deadline - time.monotonic(),
            lambda: "munged never created its socket\n" + self._diagnostics(),
            alive=self._check_alive,
        )
        self._launch(
            "slurmctld", [self.binaries["slurmctld"], "-D", "-i", "-f", str(self.layout.conf)]
        )
        for node in self.node_names:
            argv = [self.binaries["slurmd"], "-D", "-N", node, "-f", str(self.layout.conf)]
            self._launch(f"slurmd-{node}", argv)
        wait_until(
            self._all_idle,
            deadline - time.monotonic(),
            lambda: "nodes never became idle\n" + self._diagnostics(),
            alive=self._check_alive,
        )

    def _munged_argv(self) -> list[str]:
        run = self.layout.munge_key.parent
        return [
            self.binaries["munged"],
            "-F",
            "--force",
            f"--socket={self.layout.munge_socket}",
            f"--key-file={self.layout.munge_key}",
            f"--log-file={self.layout.logs / 'munged.log'}",
            f"--pid-file={run / 'munged.pid'}",
            f"--seed-file={run / 'munged.seed'}",
        ]

    def _launch(self, name: str, argv: list[str]) -> None:
        if self._keeper is None:
            scratch = self.layout.run if self.layout.run != self.layout.root else None
            self._keeper = _Keeper.launch(self.layout.logs / "keeper.log", scratch)
        log = self.layout.logs / f"{name}.stdout"
        self.pids[name] = self._keeper.spawn(argv, self.env, log)

    def _all_idle(self) -> bool:
        try:
            states = self.node_states()
        except SlurmClusterError:
            return False  # slurmctld not answering yet
        return all(states.get(node) == "idle" for node in self.node_names)

    def _check_alive(self) -> None:
        dead = [name for name, pid in self.pids.items() if not _alive(pid)]
        if dead:
            raise SlurmClusterError(
                f"{', '.join(dead)} exited during startup\n" + self._diagnostics()
            )

    def _diagnostics(self) -> str:
        """The tails of every daemon log: the reason a start failed is in one of them."""
        parts = []
        for log in sorted(self.layout.logs.glob("*")):
            tail = log.read_text(errors="replace").splitlines()[-15:]
            if tail:
                parts.append(f"--- {log} ---\n" + "\n".join(tail))
        return "\n".join(parts)

    def _leftover_pids(self) -> set[int]:
        """Processes marked with this cluster's ``MARKER`` and all their descendants."""
        spared = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
        found = set(_pids_with_env(MARKER, self.env[MARKER]))
        if self._keeper is not None:
            found.update(self._keeper.descendants())
        for pid in list(found):
            try:
                found.update(c.pid for c in psutil.Process(pid).children(recursive=True))
            except psutil.NoSuchProcess:
                continue
        return found - spared


def fake_gpus(layout: _Layout, count: int) -> int:
    """``gres.conf`` for ``count`` GPUs per node whose device files are fake; the count
    made (0 where device files cannot be made: not root).

    Slurm takes a GPU's device file only if it is a character device; these are copies
    of ``/dev/null`` (1:3) under the cluster's directory, named ``nvidia0`` … as Slurm
    expects, so a job or step given GPUs gets its own ``CUDA_VISIBLE_DEVICES``,
    ``SLURM_STEP_GPUS`` and ``SLURM_JOB_GPUS`` per node, as on a real GPU cluster.
    No process ever opens them.
    """
    if count < 1:
        return 0
    devices = layout.root / "dev"
    devices.mkdir(exist_ok=True)
    try:
        for index in range(count):
            path = devices / f"nvidia{index}"
            if not path.exists():
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        return 0
    (layout.root / "gres.conf").write_text(f"Name=gpu File={devices}/nvidia[0-{count - 1}]\n")
    return count


def _make_layout(root: Path) -> _Layout:
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    if len(str(root)) <= _SOCKET_PATH_BUDGET:
        return _Layout(root=root, run=root)
    return _Layout(root=root, run=Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp")))


def _client_env(layout: _Layout, binaries: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment minus any enclosing job's SLURM_*, plus this cluster."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))
        and k != "DDSUP_INVOCATION_ID"
    }
    dirs = [str(Path(path).parent) for path in binaries.values()]
    path = [*dict.fromkeys(dirs), *env.get("PATH", os.defpath).split(os.pathsep)]
    env["PATH"] = os.pathsep.join(dict.fromkeys(path))
    env["SLURM_CONF"] = str(layout.conf)
    env[MARKER] = str(layout.root)
    return env


def _write_munge_key(path: Path) -> None:
    """1 KiB of randomness, mode 0400: munged refuses a key others could read."""
    if path.exists():
        path.chmod(0o600)
    path.write_bytes(os.urandom(1024))
    path.chmod(0o400)


def _parse_fields(text: str) -> dict[str, str]:
    """``Key=Value Key2=Value two`` → dict; values may hold spaces (e.g. ``Command``)."""
    text = text.strip()
    keys = list(re.finditer(r"(?:^|\s)([A-Za-z][\w/:]*)=", text))
    ends = [key.start() for key in keys[1:]] + [len(text)]
    return {key.group(1): text[key.end() : end] for key, end in zip(keys, ends, strict=True)}


def wait_until(
    condition: Callable[[], bool],
    timeout: float,
    describe: Callable[[], str],
    *,
    alive: Callable[[], None] | None = None,
    interval: float = 0.05,
) -> None:
    """Poll an external condition with a bounded deadline (Slurm offers no event to await)."""
    deadline = time.monotonic() + max(timeout, 0.0)
    while not condition():
        if alive is not None:
            alive()
        if time.monotonic() > deadline:
            raise SlurmClusterError(f"timed out after {timeout:.0f}s: {describe()}")
        time.sleep(interval)


def _stop_order(name: str) -> int:
    """slurmd first (no new steps), then slurmctld, munged last (the others use it)."""
    return {"munged": 2, "slurmctld": 1}.get(name, 0)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _terminate(pids: Sequence[int], grace: float) -> None:
    """SIGTERM and up to ``grace`` seconds to exit (none when 0), then SIGKILL."""
    if grace > 0:
        _signal_all(pids, signal.SIGTERM)
        if _wait_gone(pids, grace):
            return
    _signal_all(pids, signal.SIGKILL)
    _wait_gone(pids, 5.0)


def _signal_all(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _wait_gone(pids: Sequence[int], timeout: float) -> bool:
    """Poll (bounded) until none of ``pids`` is alive; whether that happened."""
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _pids_with_env(name: str, value: str) -> list[int]:
    """PIDs of live processes whose environment has ``name=value``."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _alive(int(entry.name)):
            found.append(int(entry.name))
    return found


# -- the keeper: parent and reaper of every daemon of one cluster ---------------------

_PR_SET_CHILD_SUBREAPER = 36


class _Keeper:
    """The test process's handle on its keeper: spawn a daemon, learn its PID, close.

    The keeper is a detached process (not a child of the test process) that is the
    parent of the daemons and, as a child subreaper, of everything that daemonizes
    below them (``slurmstepd`` double-forks), so exited processes are reaped even where
    PID 1 reaps nothing. When its socket closes (``stop``, or the test process died) it
    kills whatever is left below it and exits: a cluster cannot outlive its tests.
    """

    def __init__(self, sock: socket.socket, pid: int) -> None:
        self._sock = sock
        self._replies = sock.makefile("rb")
        self.pid = pid

    @classmethod
    def launch(cls, log: Path, scratch: Path | None) -> _Keeper:
        """Start the keeper; it removes ``scratch`` (a private dir) when it exits."""
        ours, theirs = socket.socketpair()
        with theirs, log.open("ab") as out:
            subprocess.run(
                [sys.executable, __file__, "--keeper", str(theirs.fileno()), str(scratch or "")],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                check=True,
                timeout=30,
            )
        keeper = cls(ours, 0)
        keeper.pid = int(keeper._reply()["pid"])
        return keeper

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], log: Path) -> int:
        """Start ``argv`` in a session of its own, output to ``log``; its PID."""
        request = {"argv": list(argv), "env": dict(env), "log": str(log)}
        self._sock.sendall(json.dumps(request).encode() + b"\n")
        reply = self._reply()
        if "error" in reply:
            raise SlurmClusterError(f"cannot start {argv[0]}: {reply['error']}")
        return int(reply["pid"])

    def descendants(self) -> list[int]:
        try:
            return [p.pid for p in psutil.Process(self.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def close(self, timeout: float = 5.0) -> None:
        """Close the socket; the keeper kills what is left, exits, and we see it gone."""
        self._replies.close()
        self._sock.close()
        deadline = time.monotonic() + timeout
        while _alive(self.pid) and time.monotonic() < deadline:
            time.sleep(0.02)

    def _reply(self) -> dict[str, Any]:
        line = self._replies.readline()
        if not line:
            raise SlurmClusterError("the cluster's keeper process exited; see log/keeper.log")
        reply: dict[str, Any] = json.loads(line)
        return reply


def _keeper_main(fd: int, scratch: str) -> None:
    """Body of the keeper process (``python cluster.py --keeper FD SCRATCH``)."""
    if os.fork() != 0:
        os._exit(0)  # the launcher exits: the keeper is nobody's child in the test process
    os.setsid()
    # The daemons must see SIGTERM: undo a blocked mask or ignored SIGINT inherited from
    # whoever started us (a shell's `&`, the sigwait of _serve_main).
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    signal.signal(signal.SIGCHLD, _reap_children)
    conn = socket.socket(fileno=fd)
    conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
    marker = ""
    for line in conn.makefile("rb"):
        request = json.loads(line)
        marker = request["env"].get(MARKER, marker)
        reply: dict[str, object]
        try:
            reply = {"pid": _spawn_session(request["argv"], request["env"], request["log"])}
        except OSError as exc:
            reply = {"error": str(exc)}
        conn.sendall(json.dumps(reply).encode() + b"\n")
    # The owner is gone (or done): end the cluster, and its clients that outlived it.
    doomed = {c.pid for c in psutil.Process().children(recursive=True)}
    doomed.update(_pids_with_env(MARKER, marker) if marker else [])
    _signal_all(doomed - {os.getpid()}, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while psutil.Process().children() and time.monotonic() < deadline:
        time.sleep(0.02)
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)
    os._exit(0)


def _spawn_session(argv: list[str], env: dict[str, str], log: str) -> int:
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
        )
    proc.returncode = 0  # reaped by _reap_children, never through this object
    return proc.pid


def _reap_children(signum: int, frame: object) -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# -- by hand: python tests/slurm/cluster.py DIR ------------------------------------


def _serve_main(argv: Sequence[str]) -> int:
    """Start a cluster in DIR, print how to use it, stop it on Ctrl-C or SIGTERM."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python tests/slurm/cluster.py", description="Run a private Slurm test cluster."
    )
    parser.add_argument("dir", type=Path, help="directory for config, logs and state")
    parser.add_argument("--nodes", type=int, default=3, help="number of slurmd (default 3)")
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error(f"--nodes must be at least 1, not {args.nodes}")
    wanted = {signal.SIGINT, signal.SIGTERM}
    for sig in wanted:  # a shell's `&` ignores SIGINT, and sigwait never sees ignored ones
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_BLOCK, wanted)  # delivered only to sigwait below
    try:
        cluster = SlurmCluster.start(args.dir, nodes=args.nodes)
    except (SlurmNotInstalled, SlurmClusterError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        print(f"cluster up in {cluster.startup_seconds:.1f}s: nodes {', '.join(cluster.nodes())}")
        print(f"  export SLURM_CONF={cluster.env['SLURM_CONF']}")
        print(f"  logs in {cluster.layout.logs}; Ctrl-C stops it", flush=True)
        signal.sigwait(wanted)
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--keeper"]:
        _keeper_main(int(sys.argv[2]), sys.argv[3])
    sys.exit(_serve_main(sys.argv[1:]))
