"""docs/units.md alone makes a working job: its files, taken from the page, run to exit 0.

The page's "A complete job" section holds the files of ``units/my-job/`` (lanes, the
endpoint, the worker and its client) as fenced blocks whose first line names the file,
and the same client written with the stock ``openai`` package (``units/openai-job/``);
"Two models" holds the two lane units of ``units/two-models/``, which reuses the rest.
Each job is written out exactly as shown and run for real with ``ddsup start --nodes 1
--gpus-per-node 2``, as the page says: fake-vllm lanes, the built-in endpoint, and the
client asking every model through ``OPENAI_BASE_URL``. The one change is the endpoint's
port, moved from the page's 9000 to a free one, since other runs share this machine.

The page's table of what a unit's process sees is held to the code here too.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
import trio

from ddsup.plan import local_nodes, make_plan
from ddsup.service._environment import RunContext, specifier_context, unit_environment
from ddsup.units import UnitType, load_unit_set, parse_unit_set
from support.ports import free_port

DOC = Path(__file__).resolve().parents[2] / "docs" / "units.md"
BLOCK = re.compile(
    r"^```(?:toml|python)\n(?P<marker># units/(?P<job>[\w-]+)/(?P<name>\S+)\n)(?P<body>.*?)^```",
    re.S | re.M,
)


def doc_jobs() -> dict[str, dict[str, str]]:
    """Job directory name → {file name: contents}, from the page's marked blocks."""
    jobs: dict[str, dict[str, str]] = {}
    for match in BLOCK.finditer(DOC.read_text(encoding="utf-8")):
        files = jobs.setdefault(match["job"], {})
        assert match["name"] not in files, f"{match['name']} shown twice in {DOC.name}"
        files[match["name"]] = match["marker"] + match["body"]
    return jobs


def job_files(job: str) -> dict[str, str]:
    jobs = doc_jobs()
    if job == "my-job":
        return jobs["my-job"]
    # "Replace lane@.toml by two lane units (…; endpoint, worker and client stay)";
    # "this client.py does what the one above does" (the rest of my-job stays)
    replaced = "lane@.toml" if job == "two-models" else "client.py"
    kept = {name: text for name, text in jobs["my-job"].items() if name != replaced}
    return {**kept, **jobs[job]}


def test_the_page_shows_every_job() -> None:
    jobs = doc_jobs()
    assert sorted(jobs["my-job"]) == ["client.py", "endpoint.toml", "lane@.toml", "worker.toml"]
    assert sorted(jobs["two-models"]) == ["chat@.toml", "code@.toml"]
    assert sorted(jobs["openai-job"]) == ["client.py"]
    assert "from openai import OpenAI" in jobs["openai-job"]["client.py"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("job", "models"),
    [
        ("my-job", {"my-model": 2}),
        ("two-models", {"chat-model": 1, "code-model": 1}),
        ("openai-job", {"my-model": 2}),  # the stock client, no key asked: a placeholder
    ],
)
async def test_the_documented_job_runs(tmp_path: Path, job: str, models: dict[str, int]) -> None:
    directory = tmp_path / "units" / job
    directory.mkdir(parents=True)
    for name, text in job_files(job).items():
        if name == "endpoint.toml":
            assert text.count("port = 9000\n") == 1
            text = text.replace("port = 9000\n", f"port = {free_port()}\n")
        (directory / name).write_text(text, encoding="utf-8")
    state = tmp_path / "state"
    argv = [sys.executable, "-m", "ddsup", "start", str(directory)]
    argv += ["--nodes", "1", "--gpus-per-node", "2", "--state-dir", str(state)]
    env = {  # a laptop, where nobody set a key for the OpenAI client
        k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "OPENAI_"))
    }
    with trio.fail_after(120):
        done = await trio.run_process(
            argv, capture_stdout=True, capture_stderr=True, check=False, env=env
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]

    result = json.loads((state / "result.json").read_text())
    assert (result["status"], result["exit_code"]) == ("ok", 0)
    plan = json.loads((state / "plan.json").read_text())
    lanes = [i for i in plan["instances"] if i["type"] == "lane"]
    assert len(lanes) == sum(models.values())
    answers = (state / "logs" / "worker.log").read_text().splitlines()
    assert sorted(line.split(" answers: ")[0] for line in answers if " answers: " in line) == (
        sorted(models)
    )


def test_every_unit_file_on_the_page_verifies() -> None:
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"^```toml\n(.*?)^```", text, re.S | re.M)
    units = [b for b in blocks if "[unit]" in b]
    assert len(units) >= 6
    for index, block in enumerate(units):
        first = block.splitlines()[0]
        name = first.rsplit("/", 1)[-1] if first.startswith("# units/") else "endpoint.toml"
        parse_unit_set(f"units.md block {index}", {name: block})


def _documented_variables() -> dict[str, str]:
    """Variable → who it is set for, from the page's table of a unit's environment."""
    rows = re.findall(r"^\| `([A-Z_]+)` \| ([a-z ]+) \|", DOC.read_text(encoding="utf-8"), re.M)
    return dict(rows)


def test_the_documented_environment_is_what_units_get(tmp_path: Path) -> None:
    directory = tmp_path / "my-job"
    directory.mkdir()
    for name, text in job_files("my-job").items():
        (directory / name).write_text(text, encoding="utf-8")
    units = load_unit_set(directory)
    plan = make_plan(units, local_nodes(1, 2), client="node0", shared_address=True)
    run = RunContext("inv", "/state", str(directory), "job", plan.endpoint_url, api_key="k")
    seen: dict[UnitType, set[str]] = {}
    for planned in plan.instances:
        unit = units.by_name(planned.unit)
        context = specifier_context(unit, planned, plan, run)
        env = unit_environment({}, unit, planned, context, run)
        seen.setdefault(unit.type, set()).update(env)
    who = {"the worker": {UnitType.WORKER}, "lanes": {UnitType.LANE}, "every unit": set(seen)}
    documented = _documented_variables()
    assert documented["OPENAI_BASE_URL"] == "the worker"
    for variable, audience in documented.items():
        for kind, names in seen.items():
            assert (variable in names) == (kind in who[audience]), (variable, kind)
    ours = {v for names in seen.values() for v in names}
    assert ours <= set(documented), f"undocumented: {sorted(ours - set(documented))}"
