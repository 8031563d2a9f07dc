"""Valid unit files load into the frozen model with the values written in them."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from units_helpers import WriteUnits, lines, problems_of

from ddsup._errors import UnitFileError
from ddsup.units import UnitType, _unitset, load_unit_files, load_unit_set
from ddsup.units._model import MinReady, OnFailure, Placement, ProbeKind, Restart

ROOT = Path(__file__).resolve().parents[2]
REHEARSAL = ROOT / "units" / "examples" / "rehearsal"
VLLM = ROOT / "units" / "examples" / "vllm-llama-8b"


def test_rehearsal_example() -> None:
    units = load_unit_set(REHEARSAL)
    assert [u.name for u in units.units] == ["endpoint", "lane@", "worker"]
    (lane,) = units.lanes
    assert lane.template
    assert lane.base_name == "lane"
    assert lane.lane is not None
    assert (lane.lane.model, lane.lane.replicas, lane.lane.port, lane.lane.stagger) == (
        "fake-llama",
        None,
        None,
        0.2,
    )
    assert lane.service.exec == ("ddsup", "fake-vllm", "--port", "{port}", "--model", "{model}")
    assert lane.ready is not None
    assert (lane.ready.kind, lane.ready.target) == (ProbeKind.HTTP, "http://{host}:{port}/health")
    assert units.endpoint is not None
    assert units.endpoint.endpoint is not None
    assert units.endpoint.endpoint.min_ready == MinReady(count=None, percent=100.0)
    assert units.worker is not None
    assert units.worker.after == ("endpoint",)
    assert units.worker.service.forward_signals == (signal.SIGUSR1,)


def test_vllm_example() -> None:
    units = load_unit_set(VLLM)
    (lane,) = units.lanes
    assert lane.service.timeout_start == 1200.0
    assert "--tensor-parallel-size" in lane.service.exec
    assert lane.service.environment["VLLM_LOGGING_LEVEL"] == "INFO"
    assert lane.service.restart is Restart.ON_FAILURE
    assert units.endpoint is not None
    assert units.endpoint.endpoint is not None
    assert units.endpoint.endpoint.min_ready.required(8) == 4


def test_everything_converts(write_units: WriteUnits) -> None:
    directory = write_units(
        {
            "prep@.toml": lines(
                "[unit]",
                'type = "oneshot"',
                'on = "each-node"',
                "[service]",
                'exec = ["true"]',
                'unset_environment = ["http_proxy"]',
                "success_exit_status = [0, 3]",
                'kill_signal = "INT"',
                'on_failure = "continue"',
                'restart_sec = "1m30s"',
                'restart_max_sec = "1h"',
                "[ready]",
                'exec = ["test", "-e", "{state_dir}/ok"]',
                'interval = "250ms"',
            ),
            "e.toml": lines(
                "[unit]",
                'type = "endpoint"',
                'after = ["prep@"]',
                "[service]",
                'exec = ["ddsup", "endpoint"]',
                "[endpoint]",
                "min_ready = 2",
                'api_key_env = "KEY"',
                'workers = "auto"',
            ),
            "big@.toml": lines(
                "[unit]",
                'type = "lane"',
                "[service]",
                'exec = ["v", "{model_path}"]',
                'exec_follower = ["v", "--headless", "{rank}"]',
                "[lane]",
                'model = "big"',
                "nodes = 2",
                "gpus = 8",
                "replicas = 1",
                "port = 8100",
                "[slurm]",
                'srun_args = ["--container-image=x.sqsh"]',
            ),
        }
    )
    units = load_unit_set(directory)
    prep = units.by_name("prep")
    assert prep.on is Placement.EACH_NODE
    assert prep.template
    assert prep.service.success_exit_status == frozenset({0, 3})
    assert prep.service.kill_signal is signal.SIGINT
    assert prep.service.on_failure is OnFailure.CONTINUE
    assert (prep.service.restart_sec, prep.service.restart_max_sec) == (90.0, 3600.0)
    assert prep.ready is not None
    assert prep.ready.target == ("test", "-e", "{state_dir}/ok")
    assert prep.ready.interval == 0.25
    endpoint = units.by_name("e")
    assert endpoint.endpoint is not None
    assert endpoint.endpoint.min_ready == MinReady(count=2, percent=None)
    assert endpoint.endpoint.api_key_env == "KEY"
    assert endpoint.endpoint.workers is None  # "auto": one per CPU, resolved where it runs
    big = units.by_name("big@")
    assert big.type is UnitType.LANE
    assert big.lane is not None
    assert (big.lane.nodes, big.lane.gpus, big.lane.replicas, big.lane.port) == (2, 8, 1, 8100)
    assert big.service.exec_follower == ("v", "--headless", "{rank}")
    assert big.slurm.srun_args == ("--container-image=x.sqsh",)


def test_endpoint_section_is_optional(write_units: WriteUnits) -> None:
    directory = write_units(
        {"e.toml": lines("[unit]", 'type = "endpoint"', "[service]", 'exec = ["e"]')}
    )
    endpoint = load_unit_set(directory).endpoint
    assert endpoint is not None
    assert endpoint.endpoint is not None
    assert endpoint.endpoint.port == 9000
    assert endpoint.endpoint.workers == 1


def test_files_may_depend_on_siblings_not_given() -> None:
    units = load_unit_files([REHEARSAL / "worker.toml"])
    assert [u.name for u in units.units] == ["worker"]
    assert units.directory == str(REHEARSAL)


def test_files_checked_as_a_set(tmp_path: Path) -> None:
    worker = tmp_path / "w.toml"
    worker.write_text(
        lines("[unit]", 'type = "worker"', 'after = ["gone"]', "[service]", 'exec = ["w"]')
    )
    with pytest.raises(UnitFileError) as info:
        load_unit_files([worker, tmp_path / "missing.toml"])
    messages = sorted(p.message for p in info.value.problems)
    assert messages == [
        "[unit] after[0]: no unit named 'gone'",
        "cannot read unit file: no such file or directory",
    ]


def test_dotfiles_are_skipped(write_units: WriteUnits) -> None:
    directory = write_units(
        {
            "w.toml": lines("[unit]", 'type = "worker"', "[service]", 'exec = ["w"]'),
            ".#w.toml": "garbage",
        }
    )
    assert len(load_unit_set(directory).units) == 1


def test_model_is_frozen() -> None:
    import dataclasses

    unit = load_unit_set(REHEARSAL).units[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        unit.name = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        unit.service.environment["X"] = "1"  # type: ignore[index]


def test_a_directory_with_problems_loads_nothing(write_units: WriteUnits) -> None:
    directory = write_units(
        {"w.toml": lines("[unit]", 'type = "worker"', "[service]", 'exec = "w"')}
    )
    assert len(problems_of(directory)) == 1


def test_the_same_bytes_are_the_same_set_without_parsing_again(
    write_units: WriteUnits, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agents' forker loads the run's units once and its agents take that set;
    any change to the files, even one that keeps size and time, is parsed."""
    worker = lines("[unit]", 'type = "worker"', "[service]", 'exec = ["w1"]')
    directory = write_units({"w.toml": worker})
    first = load_unit_set(directory)
    parses: list[str] = []
    real = _unitset.parse_bytes
    monkeypatch.setattr(
        _unitset, "parse_bytes", lambda path, data: parses.append(path) or real(path, data)
    )
    assert load_unit_set(directory) is first
    assert parses == []
    stamp = (directory / "w.toml").stat()
    write_units({"w.toml": worker.replace('"w1"', '"w2"')})  # same size
    os.utime(directory / "w.toml", ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert load_unit_set(directory).units[0].service.exec == ("w2",)
    write_units({"e.toml": lines("[unit]", 'type = "endpoint"')})
    assert [u.name for u in load_unit_set(directory).units] == ["e", "w"]
    assert len(parses) == 3


def test_a_set_with_problems_is_loaded_again_each_time(write_units: WriteUnits) -> None:
    directory = write_units({"w.toml": lines("[unit]", 'type = "worker"', "[service]")})
    for _ in range(2):
        with pytest.raises(UnitFileError):
            load_unit_set(directory)
    write_units({"w.toml": lines("[unit]", 'type = "worker"', "[service]", 'exec = ["w"]')})
    assert load_unit_set(directory).units[0].service.exec == ("w",)
