"""What ``ddsup start --rehearse`` changes in a job, and nothing else (``controller._prepare``)."""

from __future__ import annotations

import dataclasses
import sys

from ddsup.controller._prepare import rehearsal_request, rehearsed_lanes
from ddsup.decide import rehearsal_units
from ddsup.plan._resolve import AllocationRequest, LauncherChoice
from ddsup.units import Unit, UnitType
from support.units import lane, unit_set, worker

FAKE = (sys.executable, "-m", "ddsup", "fake-vllm")


def _lane(
    name: str, exec: tuple[str, ...], follower: tuple[str, ...] | None = None, nodes: int = 1
) -> Unit:
    base = lane(name, nodes=nodes)
    service = dataclasses.replace(base.service, exec=exec, exec_follower=follower)
    rehearsed: Unit = dataclasses.replace(base, service=service)
    return rehearsed


def test_vllm_serve_becomes_fake_vllm_with_the_same_flags() -> None:
    serve = ("vllm", "serve", "{model_path}", "--host", "0.0.0.0", "--port", "{port}", "-tp", "4")
    headless = ("/opt/vllm/bin/vllm", "serve", "{model_path}", "--headless", "--host=::")
    units = unit_set(_lane("big@", serve, headless, nodes=2), worker())
    rehearsed = rehearsal_units(units)
    big = rehearsed.by_name("big@")
    assert big.service.exec == (
        *FAKE,
        "{model_path}",
        "--host",
        "{host}",
        "--port",
        "{port}",
        "-tp",
        "4",
    )
    assert big.service.exec_follower == (*FAKE, "{model_path}", "--headless", "--host={host}")
    assert rehearsed.by_name("worker") == units.by_name("worker")  # only lanes change
    assert rehearsed_lanes(units) == ("big@",) and rehearsed_lanes(rehearsed) == ()


def test_wrappers_go_and_other_lanes_stay() -> None:
    wrapped = ("apptainer", "exec", "--nv", "img.sif", "vllm", "serve", "m", "--port", "{port}")
    own = ("python3", "my_server.py", "--port", "{port}")
    rehearsed = rehearsal_units(unit_set(_lane("a@", wrapped), _lane("b@", own)))
    assert rehearsed.by_name("a@").service.exec == (*FAKE, "m", "--port", "{port}")
    assert rehearsed.by_name("b@").service.exec == own


def test_gpus_and_nodes_are_simulated_only_where_nothing_gives_them() -> None:
    units = unit_set(lane("a@", gpus=4, nodes=2), lane("b@", gpus=2), worker())
    local = AllocationRequest(launcher=LauncherChoice.LOCAL)
    none: dict[str, str] = {"PATH": ""}  # no GPU variables, no nvidia-smi on PATH
    assert rehearsal_request(local, units, none) == AllocationRequest(
        launcher=LauncherChoice.LOCAL, gpus_per_node=4, nodes=2
    )
    given = AllocationRequest(launcher=LauncherChoice.LOCAL, gpus_per_node=8, nodes=3)
    assert rehearsal_request(given, units, none) == given
    detected = rehearsal_request(local, units, {"CUDA_VISIBLE_DEVICES": "0,1"})
    assert detected.gpus_per_node is None  # the machine's own GPUs are used
    slurm = AllocationRequest(launcher=LauncherChoice.SLURM)
    assert rehearsal_request(slurm, units, none).nodes is None  # the allocation says
    assert rehearsal_request(local, unit_set(worker()), none) == local  # no lane: no change
    assert units.by_name("a@").type is UnitType.LANE
