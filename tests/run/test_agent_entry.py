"""The node agent's entry: what it imports before it can connect, and its command line.

``ddsup start`` spawns one agent per node (``python -m ddsup agent …``), three at once
on two CPUs in the Slurm test cluster and 128 in the simulated 128 × 8 allocation, and
every module an agent loads before its first lane starts is on the run's path to it
The modules below it are not needed there; this pins that they stay out, so that a new import cannot bring them back unnoticed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ddsup.agent._agent_command import AgentUsage, parse_agent_args, prepare_agents
from ddsup.channel import ADDRESS_ENV, SECRET_ENV
from support.runs import PY

# module → why an agent does not need it
NOT_IMPORTED = {
    "argparse": "the agent's three options are read by hand (agent/_agent_command)",
    "ddsup._cli": "python -m ddsup agent goes to agent/_agent_command",
    "ddsup.channel._messages": "an agent's messages are channel/_agent_messages",
    "ddsup.channel._codec": "an agent's codec is channel/_agent_codec",
    "ddsup.channel._operator_messages": "operators talk to the controller, not to agents",
    "ddsup.record._status": "the run's status is the controller's",
    "ddsup.record._event_parse": "an agent sends events, it never reads them",
    "ddsup.record._events": "an agent emits its node's events (record/_node_events)",
    "ddsup.record._outcome": "how the run ended is the controller's",
    "ddsup.plan._allocation": "the allocation is the controller's (decide/_rehearsal_units)",
    "ddsup.plan._resolve": "the allocation and what the flags ask of it are the controller's",
    "ddsup.endpoint": "the endpoint runs in its own process",
    "httpx": "only an https:// readiness probe imports it, when it runs",
    "psutil": "the process layer reads /proc",
}


# Runs ``python -m ddsup ARGS`` and, as it exits, prints every module it holds. Read from
# sys.modules, not from ``-X importtime``: that one misses what a package's front door
# imports by name when first used (importlib.import_module).
MODULES_AT_EXIT = (
    "import atexit, runpy, sys\n"
    "atexit.register(lambda: print('MODULES', *sorted(sys.modules), file=sys.stderr))\n"
    "sys.argv = ['ddsup', *sys.argv[1:]]\n"
    "runpy.run_module('ddsup', run_name='__main__', alter_sys=True)\n"
)


def _modules_at_exit(done: subprocess.CompletedProcess[str]) -> set[str]:
    lines = [line for line in done.stderr.splitlines() if line.startswith("MODULES ")]
    assert len(lines) == 1, done.stderr[-2000:]
    return set(lines[0].split()[1:])


def _agent_imports() -> set[str]:
    """Every module ``python -m ddsup agent`` imports, as ``ddsup start`` spawns it.

    Without the channel's secret and address it stops with a usage error right after its
    imports (all at module level: nothing it needs later is imported later).
    """
    env = {k: v for k, v in os.environ.items() if k not in (SECRET_ENV, ADDRESS_ENV)}
    done = subprocess.run(
        [PY, "-c", MODULES_AT_EXIT, "agent", "--node", "node1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 64, done.stderr[-2000:]
    assert "ddsup agent is started by ddsup start, not by hand" in done.stderr
    return _modules_at_exit(done)


def test_the_agent_imports_only_what_it_needs() -> None:
    imported = _agent_imports()
    assert {"trio", "ddsup.agent._agent", "ddsup.channel._agent_codec"} <= imported
    found = {
        module: why
        for module, why in NOT_IMPORTED.items()
        if module in imported or any(m.startswith(module + ".") for m in imported)
    }
    assert not found, found


def test_the_agents_forker_imports_only_what_an_agent_needs() -> None:
    """The simulated nodes' forker (``ddsup agents``) imports what its agents run and
    nothing else: every module it holds is one more in each of 128 forked agents and in
    its start before the first fork (the allocation's resolution was, via the launcher)."""
    done = subprocess.run(
        [PY, "-c", MODULES_AT_EXIT, "agents"],
        input='{"nodes": {}, "units": null}',
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = _modules_at_exit(done)
    assert {"trio", "ddsup.agent._agent", "ddsup.agent._agent_forker"} <= imported
    not_needed = {
        **NOT_IMPORTED,
        "ddsup.controller._launcher": "ddsup start's",
        "ddsup.plan._resolve": "ddsup start's",
    }
    not_needed.pop("psutil")  # preloaded: an agent imports it when it first stops a unit
    found = {m: why for m, why in not_needed.items() if m in imported}
    assert not found, found


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], {}),
        (["--node", "n1"], {"--node": "n1"}),
        (["--node=n1", "--gpus-per-node", "8"], {"--node": "n1", "--gpus-per-node": "8"}),
        (["--covered-by", "controller", "--node", "a", "--node", "b"], {
            "--covered-by": "controller", "--node": "b"
        }),
    ],
)  # fmt: skip
def test_the_agent_reads_its_options(argv: list[str], expected: dict[str, str]) -> None:
    assert parse_agent_args(argv) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "n1"], "unrecognized arguments: --nodes"),
        (["n1"], "unrecognized arguments: n1"),
        (["--node"], "argument --node: expected one argument"),
        (["--node", "--gpus-per-node", "2"], "argument --node: expected one argument"),
    ],
)
def test_a_bad_agent_command_line_is_a_usage_error(argv: list[str], message: str) -> None:
    with pytest.raises(AgentUsage, match=message):
        parse_agent_args(argv)


def test_a_bad_agent_command_line_exits_64_with_its_usage() -> None:
    done = subprocess.run(
        [PY, "-m", "ddsup", "agent", "--gpus-per-node", "two"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 64
    assert done.stderr.startswith("usage: ddsup agent")
    assert "argument --gpus-per-node: invalid int value: 'two'" in done.stderr
    assert "Traceback" not in done.stderr


PREPARED_AGENT = """
import json, socket, sys, typing
from ddsup.channel._agent_codec import decode_for_agent, encode_agent
from ddsup.channel._agent_messages import Setup
from ddsup.plan import Node, Plan
from ddsup.agent._agent_command import prepare_agents
from ddsup.units import _unitset, load_unit_set

assert "encodings.idna" not in sys.modules
prepare_agents(sys.argv[1])
# from here on, what an agent does first must find it worked out
def worked_out_again(*args, **kwargs):
    raise AssertionError("worked out again")
_unitset.parse_bytes = worked_out_again
typing.get_type_hints = worked_out_again
before = set(sys.modules)
socket.getaddrinfo("127.0.0.1", 1)  # an agent's connect, which encodes the host: IDNA
plan = Plan(nodes=(Node("n1", "127.0.0.1", (0,)),), client="n1", instances=())
setup = decode_for_agent(encode_agent(Setup(plan, "inv", "/s", sys.argv[1], "7")))
units = load_unit_set(sys.argv[1])
print(json.dumps({"new_modules": sorted(set(sys.modules) - before),
                  "units": [u.name for u in units.units], "job": setup.job_id}))
"""


def test_the_forker_works_out_once_what_each_agent_would(tmp_path: Path) -> None:
    """``prepare_agents`` (the forker, before it forks): an agent then connects, decodes
    its Setup and loads the run's units without importing, evaluating annotations or
    parsing a unit file again. A fresh interpreter, so no other test warmed anything."""
    (tmp_path / "w.toml").write_text('[unit]\ntype = "worker"\n[service]\nexec = ["w"]\n')
    done = subprocess.run(
        [PY, "-c", PREPARED_AGENT, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"new_modules": [], "units": ["w"], "job": "7"}


def test_a_unit_directory_that_does_not_load_is_left_to_the_agents(tmp_path: Path) -> None:
    """The forker does not fail for bad units: each agent reports them, as without it."""
    (tmp_path / "w.toml").write_text("[unit]\ntype = \n")
    prepare_agents(str(tmp_path))
    prepare_agents(str(tmp_path / "missing"))
