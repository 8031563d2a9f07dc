"""Preflight on one node compares the plan with what is really there.

The node check asks whether the plan's address for the node is one of this machine's
(where lanes are reached and peers connect), not whether a name equals itself; the GPU
check compares the plan's entries with the ones found here; and where nvidia-smi exists,
GPUs other processes hold memory on are a problem, or a warning with
``busy_gpus = "warn"``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import ddsup
from ddsup.agent._node_checks import python_version
from ddsup.agent._preflight import address_problem, run_preflight
from ddsup.channel._messages import PreflightReport
from ddsup.plan import Node, Plan, make_plan
from ddsup.plan._gpus import GpuList
from ddsup.units._model import BusyGpus, UnitSet
from support import units as u
from support.fake_smi import FakeApp, FakeGpu, FakeSmi

TEST_NET = "192.0.2.7"  # RFC 5737: never an address of this machine


def _report(*args: Any, **kwargs: Any) -> PreflightReport:
    """The report alone: the ports it picked are let go at once (no lane here binds them)."""
    report, held = run_preflight(*args, **kwargs)
    held.release()
    return report


def _plan(
    address: str, devices: tuple[str, ...], busy: BusyGpus = BusyGpus.FAIL
) -> tuple[UnitSet, Plan]:
    """Two one-GPU lanes on node n1 at ``address``, whose GPUs are ``devices`` (none:
    two simulated GPUs)."""
    lane = u.lane("lane@", replicas=2)
    assert lane.lane is not None
    units = u.unit_set(replace(lane, lane=replace(lane.lane, busy_gpus=busy)))
    node = Node("n1", address, tuple(range(len(devices) or 2)), devices)
    return units, make_plan(units, [node], client="n1")


def test_the_planned_address_must_be_this_machines() -> None:
    assert address_problem(Node("n1", "127.0.0.1", ())) is None
    problem = address_problem(Node("n2", TEST_NET, ()))
    assert problem is not None
    assert f"reaches n2 at {TEST_NET!r}, which is not an address of this machine" in problem


def test_an_unresolvable_address_is_a_problem() -> None:
    problem = address_problem(Node("n3", "no-such-host.invalid", ()))
    assert problem is not None and "does not resolve" in problem


def test_preflight_reports_a_foreign_address_and_gpus_that_differ() -> None:
    units, plan = _plan(TEST_NET, ("4", "5"))
    report = _report("n1", units, plan, gpus=GpuList(("4",), "CUDA_VISIBLE_DEVICES"))
    assert len(report.problems) == 2, report.problems
    assert "not an address of this machine" in report.problems[0]
    assert report.problems[1] == (
        "the plan gives lanes here GPUs 4,5, this node has 1 GPU (CUDA_VISIBLE_DEVICES=4)"
    )


@pytest.mark.parametrize("busy", [BusyGpus.FAIL, BusyGpus.WARN])
def test_gpus_held_by_other_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, busy: BusyGpus
) -> None:
    smi = FakeSmi([FakeGpu("GPU-a0"), FakeGpu("GPU-b1")], [FakeApp(1, 4242, 20480)])
    monkeypatch.setenv("PATH", f"{smi.install(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    units, plan = _plan("127.0.0.1", ("0", "1"), busy)
    report = _report("n1", units, plan, gpus=GpuList(("0", "1"), "nvidia-smi"))
    said = "GPU 1 of lane@1 is in use by another process: pid 4242 holds 20480 MiB"
    found = report.problems if busy is BusyGpus.FAIL else report.warnings
    other = report.warnings if busy is BusyGpus.FAIL else report.problems
    assert len(found) == 1 and found[0].startswith(said), found
    assert not other


def test_simulated_gpus_are_not_checked_for_holders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--gpus-per-node: indices that need not be this machine's GPUs at all."""
    smi = FakeSmi([FakeGpu("GPU-a0"), FakeGpu("GPU-b1")], [FakeApp(1, 4242, 20480)])
    monkeypatch.setenv("PATH", f"{smi.install(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    units, plan = _plan("127.0.0.1", ())
    report = _report("n1", units, plan, gpus=GpuList.simulated(2))
    assert (report.problems, report.warnings) == ((), ())


def test_a_job_from_ddsup_submit_needs_the_submitters_ddsup_and_room_for_logs(
    tmp_path: Path,
) -> None:
    """The batch script ``ddsup submit`` renders exports the submitter's versions and the
    space the job asks for; each node's preflight names what differs and how to fix it,
    and a run started by hand (none of these variables) is not held to them."""
    units, plan = _plan("127.0.0.1", ())
    gpus = GpuList(("0", "1"), "CUDA_VISIBLE_DEVICES")
    submitted = {
        "DDSUP_SUBMIT_VERSION": "0.0.9",
        "DDSUP_SUBMIT_PYTHON": python_version(),
        "DDSUP_SUBMIT_HOST": "login1",
        "DDSUP_MIN_FREE_SPACE": str(500 << 40),  # 500 TiB: no file system here has it
    }
    kwargs: dict[str, Any] = {"gpus": gpus, "state_dir": str(tmp_path)}
    report = _report("n1", units, plan, environ=submitted, **kwargs)
    by_hand = _report("n1", units, plan, environ={}, **kwargs)
    same = {**submitted, "DDSUP_SUBMIT_VERSION": ddsup.__version__, "DDSUP_MIN_FREE_SPACE": "1"}
    matching = _report("n1", units, plan, environ=same, **kwargs)

    assert report.problems[0] == (
        f"ddsup {ddsup.__version__} here, but the job was submitted with ddsup 0.0.9 on "
        f"login1: install the same ddsup and Python at {sys.executable} on every node (on "
        "the shared file system, or in the same image), or submit with the python that "
        "every node has"
    )
    assert f"free for logs in {tmp_path} (the job asks for 500T)" in report.problems[1]
    assert (by_hand.problems, matching.problems) == ((), ())
