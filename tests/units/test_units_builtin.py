"""An endpoint unit needs no boilerplate: its exec and readiness are built in.

``type = "endpoint"`` plus ``[endpoint]`` is a complete unit: it runs the running ddsup's
endpoint with the same interpreter, and is ready when its own ``/health`` answers. What
the file says explicitly still wins; a unit that truly lacks ``[service]`` is told what
to write. (That the defaults really start and probe an endpoint is shown end to end by
``tests/examples/test_units_doc_job.py``.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jsonschema  # type: ignore[import-untyped,unused-ignore]
import pytest
from units_helpers import WriteUnits, lines, problems_of

from ddsup.units import Unit, json_schema, load_unit_set, resolve_argv, resolve_specifiers
from ddsup.units._model import ProbeKind

ENDPOINT = ["[unit]", 'type = "endpoint"']
WORKER = ["[unit]", 'type = "worker"', "[service]", 'exec = ["w"]']


def _endpoint(write_units: WriteUnits, *extra: str) -> Unit:
    units = load_unit_set(write_units({"endpoint.toml": lines(*ENDPOINT, *extra)}))
    assert units.endpoint is not None
    return units.endpoint


def test_type_and_endpoint_section_are_a_whole_unit(write_units: WriteUnits) -> None:
    unit = _endpoint(write_units, "[endpoint]", "port = 9100")
    assert unit.service.exec == (sys.executable, "-m", "ddsup", "endpoint")
    assert unit.ready is not None
    assert (unit.ready.kind, unit.ready.target) == (
        ProbeKind.HTTP,
        "http://127.0.0.1:{port}/health",
    )
    assert unit.ready.interval == 0.1
    # {port} of the endpoint's instance is [endpoint] port (see the plan): the probe's URL.
    assert resolve_specifiers(unit.ready.target, {"port": "9100"}) == (
        "http://127.0.0.1:9100/health"
    )


def test_even_the_endpoint_section_may_be_left_out(write_units: WriteUnits) -> None:
    unit = _endpoint(write_units)
    assert unit.service.exec[1:] == ("-m", "ddsup", "endpoint")
    assert unit.endpoint is not None
    assert unit.endpoint.port == 9000


@pytest.mark.parametrize(
    ("bind", "host"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("0.0.0.0", "127.0.0.1"),
        ("::", "[::1]"),
        ("::1", "[::1]"),
        ("fd00::5", "[fd00::5]"),
        ("10.1.2.3", "10.1.2.3"),
        ("localhost", "localhost"),
    ],
)
def test_the_probe_goes_where_bind_accepts_local_connections(
    write_units: WriteUnits, bind: str, host: str
) -> None:
    unit = _endpoint(write_units, "[endpoint]", f'bind = "{bind}"')
    assert unit.ready is not None
    assert unit.ready.target == f"http://{host}:{{port}}/health"


def test_explicit_exec_and_ready_win(write_units: WriteUnits) -> None:
    unit = _endpoint(
        write_units,
        "[service]",
        'exec = ["my-ddsup", "endpoint"]',
        "[ready]",
        'tcp = "{host}:{port}"',
        "[endpoint]",
        "port = 9100",
    )
    assert unit.service.exec == ("my-ddsup", "endpoint")
    assert unit.ready is not None
    assert (unit.ready.kind, unit.ready.target) == (ProbeKind.TCP, "{host}:{port}")


def test_a_service_section_without_exec_keeps_its_other_keys(write_units: WriteUnits) -> None:
    unit = _endpoint(write_units, "[service]", 'timeout_start = "30s"', 'timeout_stop = "5s"')
    assert unit.service.exec[1:] == ("-m", "ddsup", "endpoint")
    assert (unit.service.timeout_start, unit.service.timeout_stop) == (30.0, 5.0)


def test_an_interpreter_path_with_braces_stays_literal(
    write_units: WriteUnits, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", "/opt/{venv}/bin/python3")
    unit = _endpoint(write_units)
    assert resolve_argv(unit.service.exec, {})[0] == "/opt/{venv}/bin/python3"


def test_the_default_exec_is_this_ddsup(tmp_path: Path) -> None:
    """``sys.executable -m ddsup`` is the ddsup these tests import (venvs, containers)."""
    done = subprocess.run(
        [sys.executable, "-m", "ddsup", "endpoint", "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=tmp_path,  # the endpoint runs in the unit directory, not in the checkout
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ddsup endpoint")


@pytest.mark.parametrize(
    ("kind", "example"),
    [
        ("worker", '["python3", "{unit_dir}/client.py"]'),
        ("service", '["my-server", "--port", "9100"]'),
        ("oneshot", '["python3", "{unit_dir}/prepare.py"]'),
    ],
)
def test_other_kinds_are_told_what_to_write(
    write_units: WriteUnits, kind: str, example: str
) -> None:
    directory = write_units({"x.toml": lines("[unit]", f'type = "{kind}"')})
    (problem,) = problems_of(directory)
    assert problem.message == (
        f"missing section [service]: a {kind} unit says what to run, "
        f"e.g. [service] exec = {example}"
    )
    directory = write_units({"x.toml": lines("[unit]", f'type = "{kind}"', "[service]")})
    (problem,) = problems_of(directory)
    assert problem.message == (
        f"[service] is missing 'exec', the program to run: e.g. exec = {example}"
    )


def test_a_lane_is_told_what_to_write(write_units: WriteUnits) -> None:
    directory = write_units({"l@.toml": lines("[unit]", 'type = "lane"', "[lane]", 'model = "m"')})
    (problem,) = problems_of(directory)
    assert problem.message == (
        "missing section [service]: a lane unit says what to run, "
        'e.g. [service] exec = ["vllm", "serve", "{model_path}", "--port", "{port}"]'
    )


@pytest.mark.parametrize(
    ("document", "valid"),
    [
        ({"unit": {"type": "endpoint"}}, True),
        ({"unit": {"type": "endpoint"}, "endpoint": {"port": 9100}}, True),
        ({"unit": {"type": "endpoint"}, "service": {"timeout_start": "30s"}}, True),
        ({"unit": {"type": "worker"}}, False),
        ({"unit": {"type": "worker"}, "service": {"timeout_start": "30s"}}, False),
        ({"unit": {"type": "lane"}, "service": {}, "lane": {"model": "m"}}, False),
        ({"unit": {"type": "worker"}, "service": {"exec": ["w"]}}, True),
    ],
)
def test_the_schema_agrees(document: dict[str, object], valid: bool) -> None:
    errors = list(jsonschema.Draft202012Validator(json_schema()).iter_errors(document))
    assert not errors if valid else errors


def test_verify_and_plan_accept_the_minimal_form(write_units: WriteUnits) -> None:
    directory = write_units(
        {"endpoint.toml": lines(*ENDPOINT, "[endpoint]", "port = 9100"), "w.toml": lines(*WORKER)}
    )
    for args in (["verify"], ["plan", "--gpus-per-node", "0"]):
        done = subprocess.run(
            [sys.executable, "-m", "ddsup", args[0], str(directory), *args[1:]],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    assert "endpoint  endpoint  node0  -     9100" in done.stdout
