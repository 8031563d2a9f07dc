"""``ddsup plan`` end to end: exit statuses, output, the --json round trip."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from plan_units import endpoint, lane, unit_set

from ddsup._cli import main
from ddsup.plan import Plan
from ddsup.plan import _plan_command as commands
from ddsup.units._model import UnitSet

LANE = """\
[unit]
type = "lane"

[service]
exec = ["ddsup", "fake-vllm", "--port", "{port}", "--model", "{model}"]

[lane]
model = "llama"
gpus = 2
replicas = REPLICAS
"""

ENDPOINT = """\
[unit]
type = "endpoint"

[service]
exec = ["ddsup", "endpoint"]

[endpoint]
port = 9000
"""


def _units_dir(tmp_path: Path, replicas: str = "3") -> Path:
    directory = tmp_path / "units"
    directory.mkdir()
    (directory / "llama@.toml").write_text(LANE.replace("REPLICAS", replicas))
    (directory / "endpoint.toml").write_text(ENDPOINT)
    return directory


def _ddsup(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m ddsup ARGS`` with no GPU hints, no Slurm and no tools on PATH."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "CUDA_"))}
    empty = tmp_path / "empty-path"
    empty.mkdir(exist_ok=True)
    clean["PATH"] = str(empty)
    clean.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "ddsup", *args],
        capture_output=True,
        text=True,
        env=clean,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodelist", "gpu[01-", "--gpus-per-node", "8"], "bad nodelist 'gpu[01-'"),
        (["--nodelist", "gpu[1-2]"], "pass --gpus-per-node"),
        (["--nodelist", "a", "--launcher", "local"], "excludes --launcher local"),
        (["--launcher", "slurm", "--gpus-per-node", "1"], "SLURM_JOB_NODELIST unset"),
        (["--nodes", "2", "--nodelist", "a", "--gpus-per-node", "1"], "exclude each other"),
        (["--nodes", "0", "--gpus-per-node", "1"], "--nodes must be at least 1"),
        (["--gpus-per-node", "-2"], "--gpus-per-node must be 0 or more"),
        (["--gpus-per-node", "many"], "invalid int value"),
    ],
)
def test_usage_errors_exit_64(tmp_path: Path, args: list[str], message: str) -> None:
    done = _ddsup(tmp_path, "plan", str(tmp_path), *args)
    assert done.returncode == 64, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_missing_directory_exits_64(tmp_path: Path) -> None:
    done = _ddsup(tmp_path, "plan", str(tmp_path / "nope"), "--gpus-per-node", "1")
    assert done.returncode == 64
    assert "not a directory of unit files" in done.stderr


def test_json_round_trip_and_determinism(tmp_path: Path) -> None:
    units = _units_dir(tmp_path)
    args = ("plan", str(units), "--nodelist", "gpu[01-02]", "--gpus-per-node", "4", "--json")
    first = _ddsup(tmp_path, *args)
    assert first.returncode == 0, first.stderr
    plan = Plan.from_dict(json.loads(first.stdout))
    assert plan.to_json() == first.stdout
    assert [(i.instance, i.node, i.gpus, i.port) for i in plan.instances] == [
        ("llama@0", "gpu01", (0, 1), 8000),
        ("llama@1", "gpu01", (2, 3), 8001),
        ("llama@2", "gpu02", (0, 1), 8000),
        ("endpoint", "gpu01", (), 9000),
    ]
    assert plan.client == "gpu01"
    assert plan.endpoint_url == "http://127.0.0.1:9000"  # the worker runs beside it
    assert not plan.shared_address
    assert _ddsup(tmp_path, *args).stdout == first.stdout


def test_does_not_fit_exits_69(tmp_path: Path) -> None:
    units = _units_dir(tmp_path, replicas="9")
    done = _ddsup(tmp_path, "plan", str(units), "--nodes", "2", "--gpus-per-node", "4")
    assert done.returncode == 69
    assert "lane unit 'llama@' asks for 9 replicas of 2 GPUs, but only 4 fit" in done.stderr
    assert done.stdout == ""


def test_invalid_units_exit_65(tmp_path: Path) -> None:
    units = _units_dir(tmp_path, replicas='"many"')
    done = _ddsup(tmp_path, "plan", str(units), "--gpus-per-node", "4")
    assert done.returncode == 65
    assert "llama@.toml" in done.stderr
    assert "Traceback" not in done.stderr


def test_slurm_nodelist_and_detected_gpus(tmp_path: Path) -> None:
    """Inside an allocation without scontrol on PATH: python-hostlist, Slurm's GPU count."""
    units = _units_dir(tmp_path)
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[7-8]", "SLURM_GPUS_ON_NODE": "4"}
    done = _ddsup(tmp_path, "plan", str(units), "--json", env={**env, "SLURMD_NODENAME": "n7"})
    assert done.returncode == 0, done.stderr
    plan = Plan.from_dict(json.loads(done.stdout))
    assert [n.name for n in plan.nodes] == ["n7", "n8"]
    assert plan.client == "n7"
    assert plan.nodes[0].gpus == (0, 1, 2, 3)
    # no slurmd started us (salloc on a login node): the client is this host, no lanes there
    done = _ddsup(tmp_path, "plan", str(units), "--json", env=env)
    assert done.returncode == 0, done.stderr
    plan = Plan.from_dict(json.loads(done.stdout))
    here = socket.gethostname()
    assert [(n.name, n.gpus) for n in plan.nodes][-1] == (here, ())
    assert plan.client == here and {i.node for i in plan.instances if i.type == "lane"} <= {
        "n7",
        "n8",
    }


def test_a_machine_without_gpus_plans_zero_and_says_what_to_pass(tmp_path: Path) -> None:
    """As ddsup start does: no GPUs found is 0 GPUs, and lanes needing some cannot fit."""
    units = _units_dir(tmp_path, replicas="1")
    done = _ddsup(tmp_path, "plan", str(units), "--nodes", "2")
    assert done.returncode == 69, done.stderr
    assert "2 nodes x 0 GPUs = 0 GPUs" in done.stderr and "--gpus-per-node G" in done.stderr


# In-process: the same command with units built directly, independent of unit files.


def _patch_units(monkeypatch: pytest.MonkeyPatch, units: UnitSet) -> None:
    monkeypatch.setattr(commands, "_load_units", lambda directory: units)
    for name in ("SLURM_JOB_NODELIST", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)


def test_local_nodes_share_an_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _patch_units(monkeypatch, unit_set(lane("a@", gpus=1, replicas=None), endpoint()))
    assert main(["plan", str(tmp_path), "--nodes", "2", "--gpus-per-node", "2", "--json"]) == 0
    plan = Plan.from_dict(json.loads(capsys.readouterr().out))
    assert [n.name for n in plan.nodes] == ["node0", "node1"]
    assert {n.address for n in plan.nodes} == {"127.0.0.1"}
    assert plan.shared_address
    assert plan.endpoint_url == "http://127.0.0.1:9000"
    ports = [i.port for i in plan.instances if i.unit == "a@"]
    assert ports == [8000, 8001, 8002, 8003]  # unique across the simulated nodes


def test_nodes_inside_an_allocation_are_its_first_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As ``ddsup start`` does: Slurm's nodes, the first N; ``--launcher local`` simulates."""
    _patch_units(monkeypatch, unit_set(lane("a@")))
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[1-4]")
    monkeypatch.setenv("SLURMD_NODENAME", "gpu1")  # in the batch step (not salloc's shell)
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol
    assert main(["plan", str(tmp_path), "--nodes", "3", "--gpus-per-node", "1", "--json"]) == 0
    plan = Plan.from_dict(json.loads(capsys.readouterr().out))
    assert [n.name for n in plan.nodes] == ["gpu1", "gpu2", "gpu3"]
    argv = ["plan", str(tmp_path), "--launcher", "local", "--nodes", "3", "--gpus-per-node", "1"]
    assert main([*argv, "--json"]) == 0
    plan = Plan.from_dict(json.loads(capsys.readouterr().out))
    assert [n.name for n in plan.nodes] == ["node0", "node1", "node2"]


def test_table_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _patch_units(monkeypatch, unit_set(lane("a@", gpus=2, replicas=2)))
    assert main(["plan", str(tmp_path), "--nodelist", "gpu[1-2]", "--gpus-per-node", "2"]) == 0
    out = capsys.readouterr().out
    assert "a@0       lane  gpu1  0 1   8000  0        0/1   0s" in out
    assert "gpu2  [0 1]=a@1" in out


def test_placement_error_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _patch_units(monkeypatch, unit_set(lane("a@", gpus=4, replicas=1)))
    assert main(["plan", str(tmp_path), "--gpus-per-node", "2"]) == 69
    assert "only 0 fit" in capsys.readouterr().err


def test_a_slurm_plan_says_what_it_assumed_of_the_other_nodes(tmp_path: Path) -> None:
    """It cannot ask the other nodes: it plans every one like this one, and says so; the
    GPU map shows which GPU each position is; plan.json lists each node's devices."""
    units = _units_dir(tmp_path, replicas='"auto"')
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[7-8]", "SLURMD_NODENAME": "n7"}
    env["CUDA_VISIBLE_DEVICES"] = "4,5"
    table = _ddsup(tmp_path, "plan", str(units), env=env)
    assert table.returncode == 0, table.stderr
    assert table.stderr == (
        "ddsup: note: every node is assumed to have what n7 has: 2 GPUs "
        "(CUDA_VISIBLE_DEVICES=4,5); ddsup start plans with the GPUs each node's agent "
        "finds there\n"
    )
    assert "n7  [0 1]=llama@0  (CUDA_VISIBLE_DEVICES 4,5)" in table.stdout
    done = _ddsup(tmp_path, "plan", str(units), "--json", env=env)
    assert [n["devices"] for n in json.loads(done.stdout)["nodes"]] == [["4", "5"]] * 2
    simulated = _ddsup(tmp_path, "plan", str(units), "--gpus-per-node", "2", env=env)
    assert simulated.stderr == "" and "CUDA_VISIBLE_DEVICES" not in simulated.stdout
