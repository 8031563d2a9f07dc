"""Every class of unit-file error, each pinned to its exact ``line:col`` and message."""

from __future__ import annotations

from pathlib import Path

import pytest
from units_helpers import WriteUnits, lines, problems_of

W = ["[unit]", 'type = "worker"', "[service]", 'exec = ["w"]']  # lines 1-4
L = ["[unit]", 'type = "lane"', "[service]", 'exec = ["v"]', "[lane]", 'model = "m"']  # 1-6
E = ["[unit]", 'type = "endpoint"', "[service]", 'exec = ["e"]']  # lines 1-4


# (id, file name, contents, line, col, message substring)
CASES = [
    (
        "unknown-section",
        "w.toml",
        lines(*W, "[servce]"),
        5,
        2,
        "unknown section [servce]; did you mean [service]?",
    ),
    (
        "unknown-section-far",
        "w.toml",
        lines(*W, "[zzz]"),
        5,
        2,
        "unknown section [zzz]; sections are [unit]",
    ),
    (
        "unknown-key",
        "w.toml",
        lines(*W, 'restat = "no"'),
        5,
        1,
        "unknown key 'restat' in [service]; did you mean 'restart'?",
    ),
    (
        "key-in-wrong-section",
        "w.toml",
        lines(*W, 'model = "x"'),
        5,
        1,
        "unknown key 'model' in [service]; it belongs in [lane]",
    ),
    (
        "unknown-dotted-key",
        "w.toml",
        lines('service.exec = ["w"]', 'service.restat = "no"', "[unit]", 'type = "worker"'),
        2,
        9,
        "did you mean 'restart'?",
    ),
    (
        "unknown-inline-key",
        "w.toml",
        lines('service = { exec = ["w"], restat = "no" }', "[unit]", 'type = "worker"'),
        1,
        27,
        "unknown key 'restat'",
    ),
    (
        "section-not-table",
        "w.toml",
        lines("unit = 3", "[service]", 'exec = ["w"]'),
        1,
        1,
        "[unit] must be a table",
    ),
    (
        "int-as-string",
        "w.toml",
        lines(*W, 'start_limit_burst = "3"'),
        5,
        21,
        "[service] start_limit_burst: expected an integer, got string",
    ),
    (
        "bool-as-int",
        "w.toml",
        lines(*W, "start_limit_burst = true"),
        5,
        21,
        "expected an integer, got boolean",
    ),
    (
        "burst-range",
        "w.toml",
        lines(*W, "start_limit_burst = 0"),
        5,
        21,
        "must be at least 1, got 0",
    ),
    (
        "enum",
        "w.toml",
        lines(*W, 'restart = "sometimes"'),
        5,
        11,
        "expected one of 'no', 'on-failure', 'always'",
    ),
    (
        "enum-typo",
        "w.toml",
        lines(*W, 'restart = "on-failur"'),
        5,
        11,
        "did you mean 'on-failure'?",
    ),
    (
        "on-failure-enum",
        "w.toml",
        lines(*W, 'on_failure = "ignore"'),
        5,
        14,
        "expected one of 'stop-all', 'continue'",
    ),
    (
        "type-enum",
        "w.toml",
        lines("[unit]", 'type = "wrker"', "[service]", 'exec = ["w"]'),
        2,
        8,
        "did you mean 'worker'?",
    ),
    (
        "on-enum",
        "s.toml",
        lines("[unit]", 'type = "service"', 'on = "everywhere"', "[service]", 'exec = ["s"]'),
        3,
        6,
        "expected one of 'client', 'each-node'",
    ),
    (
        "duration-bare-number",
        "w.toml",
        lines(*W, "timeout_stop = 30"),
        5,
        16,
        'duration 30 has no unit; write a string with one: "30s" or "30m"',
    ),
    (
        "duration-bare-string",
        "w.toml",
        lines(*W, 'timeout_stop = "30"'),
        5,
        16,
        'duration "30" has no unit; add one: "30s" or "30m"',
    ),
    (
        "duration-garbage",
        "w.toml",
        lines(*W, 'timeout_stop = "soon"'),
        5,
        16,
        'invalid duration "soon"',
    ),
    ("duration-zero", "w.toml", lines(*W, 'timeout_start = "0s"'), 5, 17, "must be longer than 0"),
    (
        "restart-delays",
        "w.toml",
        lines(*W, 'restart_sec = "5s"', 'restart_max_sec = "1s"'),
        6,
        19,
        "restart_max_sec must not be shorter than restart_sec",
    ),
    (
        "signal-unknown",
        "w.toml",
        lines(*W, 'kill_signal = "SIGFOO"'),
        5,
        15,
        'unknown signal "SIGFOO"',
    ),
    (
        "signal-lowercase",
        "w.toml",
        lines(*W, 'kill_signal = "sigterm"'),
        5,
        15,
        'upper case: "SIGTERM"',
    ),
    (
        "signal-number",
        "w.toml",
        lines(*W, "kill_signal = 15"),
        5,
        15,
        "signals are names, not numbers",
    ),
    (
        "forward-uncatchable",
        "w.toml",
        lines(*W, 'forward_signals = ["USR1", "KILL"]'),
        5,
        28,
        "forward_signals[1]: SIGKILL cannot be caught",
    ),
    (
        "exec-string",
        "w.toml",
        lines("[unit]", 'type = "worker"', "[service]", 'exec = "vllm serve"'),
        4,
        8,
        'exec must be an argument vector, e.g. ["vllm", "serve"] — ddsup never runs a shell',
    ),
    (
        "exec-empty",
        "w.toml",
        lines("[unit]", 'type = "worker"', "[service]", "exec = []"),
        4,
        8,
        "must not be empty",
    ),
    (
        "exec-element",
        "w.toml",
        lines("[unit]", 'type = "worker"', "[service]", 'exec = ["a", 1]'),
        4,
        14,
        "[service] exec[1]: expected a string, got integer",
    ),
    (
        "exec-multiline",
        "w.toml",
        lines("[unit]", 'type = "worker"', "[service]", "exec = [", '  "a",', "  false,", "]"),
        6,
        3,
        "exec[1]: expected a string, got boolean",
    ),
    (
        "exec-missing",
        "w.toml",
        lines("[unit]", 'type = "worker"', "[service]", 'restart = "no"'),
        3,
        2,
        """[service] is missing 'exec', the program to run: e.g. exec = ["python3", "{unit_dir}/client.py"]""",
    ),
    (
        "env-name",
        "w.toml",
        lines(*W, 'environment = { "1X" = "a" }'),
        5,
        17,
        "environment.1X: '1X' is not a valid environment variable name",
    ),
    (
        "env-value",
        "w.toml",
        lines(*W, "environment = { A = 1 }"),
        5,
        21,
        'value of A must be a string, got integer; quote it: A = "1"',
    ),
    (
        "env-not-table",
        "w.toml",
        lines(*W, 'environment = ["A=1"]'),
        5,
        15,
        "expected a table of strings",
    ),
    (
        "env-subtable",
        "w.toml",
        lines(*W, "[service.environment]", "B = 2"),
        6,
        5,
        "value of B must be a string",
    ),
    (
        "unset-env-name",
        "w.toml",
        lines(*W, 'unset_environment = ["ok", "no way"]'),
        5,
        28,
        "'no way' is not a valid environment variable name",
    ),
    (
        "exit-status-range",
        "w.toml",
        lines(*W, "success_exit_status = [0, 256]"),
        5,
        27,
        "success_exit_status[1]: must be from 0 to 255, got 256",
    ),
    (
        "exit-status-type",
        "w.toml",
        lines(*W, "success_exit_status = 0"),
        5,
        23,
        "expected an array of integers, got an integer; write [0]",
    ),
    (
        "after-string",
        "w.toml",
        lines("[unit]", 'type = "worker"', 'after = "x"', "[service]", 'exec = ["w"]'),
        3,
        9,
        'got a string; write ["x"]',
    ),
    (
        "ready-none",
        "w.toml",
        lines(*W, "[ready]", 'interval = "1s"'),
        5,
        2,
        "[ready] needs exactly one of http, tcp, exec",
    ),
    (
        "ready-two",
        "w.toml",
        lines(*W, "[ready]", 'http = "http://{host}:{port}/"', 'tcp = "{host}:{port}"'),
        7,
        1,
        "[ready] has both http and tcp",
    ),
    (
        "ready-url",
        "w.toml",
        lines(*W, "[ready]", 'http = "localhost:80/health"'),
        6,
        8,
        "expected an http:// or https:// URL",
    ),
    (
        "ready-tcp",
        "w.toml",
        lines(*W, "[ready]", 'tcp = "localhost"'),
        6,
        7,
        'expected "host:port"',
    ),
    (
        "ready-interval",
        "w.toml",
        lines(*W, "[ready]", 'tcp = "{host}:1"', "interval = 1"),
        7,
        12,
        "has no unit",
    ),
    (
        "missing-type",
        "w.toml",
        lines("[unit]", 'description = "x"', "[service]", 'exec = ["w"]'),
        1,
        2,
        "[unit] is missing 'type' = one of \"lane\"",
    ),
    ("missing-unit", "w.toml", lines("[service]", 'exec = ["w"]'), 1, 1, "missing section [unit]"),
    (
        "missing-service",
        "w.toml",
        lines("[unit]", 'type = "worker"'),
        1,
        1,
        'missing section [service]: a worker unit says what to run, e.g. [service] exec = ["python3", "{unit_dir}/client.py"]',
    ),
    (
        "lane-section-on-worker",
        "w.toml",
        lines(*W, "[lane]", 'model = "m"'),
        5,
        2,
        "[lane] is only allowed in lane units; this unit is of type 'worker'",
    ),
    (
        "endpoint-section-on-worker",
        "w.toml",
        lines(*W, "[endpoint]", "port = 1"),
        5,
        2,
        "[endpoint] is only allowed in endpoint units",
    ),
    (
        "slurm-section-on-endpoint",
        "e.toml",
        lines(*E, "[slurm]", "srun_args = []"),
        5,
        2,
        "[slurm] is only allowed in lane units",
    ),
    (
        "exec-follower-on-worker",
        "w.toml",
        lines(*W, 'exec_follower = ["f"]'),
        5,
        1,
        "[service] exec_follower is only allowed in lane units",
    ),
    (
        "on-on-worker",
        "w.toml",
        lines("[unit]", 'type = "worker"', 'on = "client"', "[service]", 'exec = ["w"]'),
        3,
        1,
        "[unit] on is only allowed in oneshot and service units",
    ),
    (
        "lane-without-section",
        "l@.toml",
        lines(*L[:4]),
        1,
        1,
        'missing section [lane]: a lane unit says what it serves, e.g. [lane] model = "llama-8b"',
    ),
    ("lane-missing-model", "l@.toml", lines(*L[:5], "gpus = 1"), 5, 2, "[lane] is missing 'model'"),
    (
        "lane-not-template",
        "l.toml",
        lines(*L),
        2,
        1,
        "a lane unit is a template: rename l.toml to l@.toml",
    ),
    (
        "worker-template",
        "w@.toml",
        lines(*W),
        2,
        1,
        'only lanes and on = "each-node" services/oneshots are templates',
    ),
    (
        "each-node-not-template",
        "s.toml",
        lines("[unit]", 'type = "service"', 'on = "each-node"', "[service]", 'exec = ["s"]'),
        3,
        1,
        "an each-node unit is a template",
    ),
    ("bad-unit-name", "a@b.toml", lines(*W), 1, 1, "invalid unit name 'a@b'"),
    ("gpus", "l@.toml", lines(*L, "gpus = 0"), 7, 8, "[lane] gpus: must be at least 1, got 0"),
    ("nodes", "l@.toml", lines(*L, "nodes = -2"), 7, 9, "[lane] nodes: must be at least 1, got -2"),
    ("replicas-zero", "l@.toml", lines(*L, "replicas = 0"), 7, 12, "must be at least 1, got 0"),
    (
        "replicas-word",
        "l@.toml",
        lines(*L, 'replicas = "many"'),
        7,
        12,
        "expected an integer or \"auto\", got 'many'",
    ),
    (
        "lane-port-range",
        "l@.toml",
        lines(*L, "port = 70000"),
        7,
        8,
        "[lane] port: must be from 1 to 65535, got 70000",
    ),
    ("lane-port-zero", "l@.toml", lines(*L, "port = 0"), 7, 8, "must be from 1 to 65535, got 0"),
    (
        "lane-port-float",
        "l@.toml",
        lines(*L, "port = 80.5"),
        7,
        8,
        "expected an integer, got float",
    ),
    (
        "endpoint-port-auto",
        "e.toml",
        lines(*E, "[endpoint]", 'port = "auto"'),
        6,
        8,
        "expected an integer, got string",
    ),
    (
        "retries",
        "e.toml",
        lines(*E, "[endpoint]", "retries = -1"),
        6,
        11,
        "must be at least 0, got -1",
    ),
    (
        "min-ready-zero",
        "e.toml",
        lines(*E, "[endpoint]", "min_ready = 0"),
        6,
        13,
        "must be at least 1, got 0",
    ),
    (
        "min-ready-zero-percent",
        "e.toml",
        lines(*E, "[endpoint]", 'min_ready = "0%"'),
        6,
        13,
        "above 0% and at most 100%",
    ),
    (
        "min-ready-over",
        "e.toml",
        lines(*E, "[endpoint]", 'min_ready = "150%"'),
        6,
        13,
        "above 0% and at most 100%",
    ),
    (
        "min-ready-word",
        "e.toml",
        lines(*E, "[endpoint]", 'min_ready = "half"'),
        6,
        13,
        'write a count (2) or a percentage ("50%")',
    ),
    (
        "workers-zero",
        "e.toml",
        lines(*E, "[endpoint]", "workers = 0"),
        6,
        11,
        "must be at least 1, got 0",
    ),
    (
        "workers-word",
        "e.toml",
        lines(*E, "[endpoint]", 'workers = "all"'),
        6,
        11,
        """expected an integer or "auto", got 'all'""",
    ),
    (
        "api-key-env",
        "e.toml",
        lines(*E, "[endpoint]", 'api_key_env = "MY-KEY"'),
        6,
        15,
        "not a valid environment variable name",
    ),
    (
        "specifier-unknown",
        "w.toml",
        lines("[unit]", 'type = "worker"', "[service]", 'exec = ["x", "--port={prot}"]'),
        4,
        14,
        "exec[1]: unknown specifier {prot}; did you mean {port}?",
    ),
    (
        "specifier-unclosed",
        "w.toml",
        lines("[unit]", 'type = "worker"', "[service]", 'exec = ["{port"]'),
        4,
        9,
        "unclosed '{'",
    ),
    (
        "specifier-stray-close",
        "w.toml",
        lines("[unit]", 'type = "worker"', "[service]", 'exec = ["a}"]'),
        4,
        9,
        "unbalanced '}'",
    ),
    (
        "specifier-attribute",
        "w.toml",
        lines("[unit]", 'type = "worker"', "[service]", 'exec = ["{port.real}"]'),
        4,
        9,
        "invalid specifier {port.real}",
    ),
    (
        "specifier-env",
        "w.toml",
        lines(*W, 'environment = { X = "{nod}" }'),
        5,
        21,
        "environment.X: unknown specifier {nod}; did you mean {node}?",
    ),
    (
        "specifier-follower",
        "l@.toml",
        lines(*L[:4], 'exec_follower = ["{rnak}"]', *L[4:]),
        5,
        18,
        "exec_follower[0]: unknown specifier {rnak}",
    ),
    (
        "specifier-ready",
        "w.toml",
        lines(*W, "[ready]", 'http = "http://{hots}:{port}/"'),
        6,
        8,
        "[ready] http: unknown specifier {hots}; did you mean {host}?",
    ),
    (
        "specifier-ready-exec",
        "w.toml",
        lines(*W, "[ready]", 'exec = ["test", "{foo}"]'),
        6,
        17,
        "[ready] exec[1]: unknown specifier {foo}",
    ),
    (
        "toml-syntax",
        "w.toml",
        lines("[unit]", "type = ", "[service]"),
        2,
        8,
        "invalid TOML: Invalid value",
    ),
    (
        "toml-duplicate",
        "w.toml",
        lines(*W, "[unit]"),
        5,
        6,
        "invalid TOML: Cannot declare ('unit',) twice",
    ),
    (
        "section-as-key",
        "w.toml",
        lines("[unit]", 'type = "worker"', 'service.exec = ["w"]'),
        3,
        1,
        "'service' is a section, not a key of [unit]",
    ),
    (
        "toml-at-end",
        "w.toml",
        '[unit]\ntype = "worker"\nexec',
        3,
        5,
        "invalid TOML: Expected '=' after a key",
    ),
]


@pytest.mark.parametrize(
    ("name", "content", "line", "col", "message"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_problem_position_and_message(
    write_units: WriteUnits, name: str, content: str, line: int, col: int, message: str
) -> None:
    directory = write_units({name: content})
    problems = problems_of(directory)
    path = str(directory / name)
    located = [(p.path, p.line, p.col) for p in problems if message in p.message]
    assert located, f"no problem says {message!r}; got {[str(p) for p in problems]}"
    assert located[0] == (path, line, col), [str(p) for p in problems]
    rendered = next(str(p) for p in problems if message in p.message)
    assert rendered.startswith(f"{path}:{line}:{col}: error: ")


def test_every_problem_of_every_file_is_reported(write_units: WriteUnits) -> None:
    directory = write_units(
        {
            "a.toml": lines(*W, "timeout_stop = 3", 'kill_signal = "NOPE"', "[lane]"),
            "b@.toml": lines(*L, "gpus = 0", "port = -1"),
        }
    )
    problems = problems_of(directory)
    assert {(Path(p.path).name, p.line) for p in problems} >= {
        ("a.toml", 5),
        ("a.toml", 6),
        ("a.toml", 7),
        ("b@.toml", 7),
        ("b@.toml", 8),
    }


def test_every_bad_entry_of_one_value_is_reported(write_units: WriteUnits) -> None:
    directory = write_units({"w.toml": lines(*W, 'environment = { "1X" = "a", B = 2, C = "ok" }')})
    problems = problems_of(directory)
    assert [(p.line, p.col) for p in problems] == [(5, 17), (5, 33)]


def test_non_utf8_points_at_the_byte(write_units: WriteUnits) -> None:
    directory = write_units({"w.toml": b'[unit]\ntype = "wo\xffrker"\n'})
    (problem,) = problems_of(directory)
    assert (problem.line, problem.col) == (2, 11)
    assert "not UTF-8 text (byte 0xff)" in problem.message


def test_binary_file(write_units: WriteUnits) -> None:
    directory = write_units({"w.toml": bytes(range(256)) * 4})
    (problem,) = problems_of(directory)
    assert problem.message.startswith(("not UTF-8", "invalid TOML"))


def test_ten_megabyte_file(write_units: WriteUnits) -> None:
    directory = write_units({"w.toml": lines(*W) + "# " + "x" * 10_000_000 + "\n"})
    (problem,) = problems_of(directory)
    assert (problem.line, problem.col) == (1, 1)
    assert "a unit file may be at most 1 MiB" in problem.message


@pytest.mark.parametrize(
    "content",
    [
        "a = " + "[" * 5000 + "]" * 5000,
        "a = " + "{b = " * 3000 + "1" + "}" * 3000,
        lines(*W, "[" + ".".join(["a"] * 2000) + "]"),
        lines(*W, "environment = " + "[" * 400 + "]" * 400),
    ],
    ids=["arrays", "inline-tables", "dotted-header", "nested-value"],
)
def test_deep_nesting_is_a_problem(write_units: WriteUnits, content: str) -> None:
    directory = write_units({"w.toml": content})
    assert problems_of(directory)


def test_wrong_types_everywhere(write_units: WriteUnits) -> None:
    from ddsup.units._schema import SECTIONS

    body = []
    for section in SECTIONS:
        body.append(f"[{section.name}]")
        body += [f"{key.name} = {{ x = [1, 2.5, true] }}" for key in section.keys]
    directory = write_units({"l@.toml": lines(*body)})
    problems = problems_of(directory)
    keys = sum(len(section.keys) for section in SECTIONS)
    assert len(problems) >= keys - 2  # every key but env-like tables is wrong
    assert all(p.line > 1 for p in problems)


def test_missing_dependency(write_units: WriteUnits) -> None:
    directory = write_units(
        {
            "w.toml": lines(
                "[unit]", 'type = "worker"', 'after = ["endpont"]', "[service]", 'exec = ["w"]'
            ),
            "endpoint.toml": lines(*E),
        }
    )
    (problem,) = problems_of(directory)
    assert (problem.line, problem.col) == (3, 10)
    assert "[unit] after[0]: no unit named 'endpont'; did you mean 'endpoint'?" in problem.message


def test_dependency_on_template_by_base_name(write_units: WriteUnits) -> None:
    from ddsup.units import load_unit_set

    directory = write_units(
        {
            "l@.toml": lines(*L),
            "w.toml": lines(
                "[unit]", 'type = "worker"', 'after = ["l", "l@"]', "[service]", 'exec = ["w"]'
            ),
        }
    )
    assert load_unit_set(directory).worker is not None


def test_self_dependency(write_units: WriteUnits) -> None:
    directory = write_units(
        {
            "w.toml": lines(
                "[unit]", 'type = "worker"', 'requires = ["w"]', "[service]", 'exec = ["w"]'
            )
        }
    )
    (problem,) = problems_of(directory)
    assert (problem.line, problem.col, "cannot depend on itself" in problem.message) == (
        3,
        13,
        True,
    )


def test_dependency_cycle_reported_once(write_units: WriteUnits) -> None:
    def unit(after: str) -> str:
        return lines(
            "[unit]", 'type = "service"', f'after = ["{after}"]', "[service]", 'exec = ["s"]'
        )

    directory = write_units({"a.toml": unit("b"), "b.toml": unit("c"), "c.toml": unit("a")})
    (problem,) = problems_of(directory)
    assert problem.message == "dependency cycle: a → b → c → a"
    assert (Path(problem.path).name, problem.line, problem.col) == ("c.toml", 3, 10)


def test_two_endpoints_and_two_workers(write_units: WriteUnits) -> None:
    directory = write_units(
        {"e1.toml": lines(*E), "e2.toml": lines(*E), "w1.toml": lines(*W), "w2.toml": lines(*W)}
    )
    problems = problems_of(directory)
    assert [(Path(p.path).name, p.line, p.col) for p in problems] == [
        ("e2.toml", 2, 8),
        ("w2.toml", 2, 8),
    ]
    assert "more than one endpoint unit (e1, e2)" in problems[0].message
    assert "more than one worker unit (w1, w2)" in problems[1].message


def test_two_auto_lanes(write_units: WriteUnits) -> None:
    directory = write_units(
        {
            "a@.toml": lines(*L),
            "b@.toml": lines(*L, 'replicas = "auto"'),
            "c@.toml": lines(*L, "replicas = 2"),
        }
    )
    (problem,) = problems_of(directory)
    assert (Path(problem.path).name, problem.line, problem.col) == ("b@.toml", 7, 12)
    assert 'more than one lane unit with replicas = "auto" (a@, b@)' in problem.message


def test_same_base_name_twice(write_units: WriteUnits) -> None:
    directory = write_units(
        {
            "s@.toml": lines(
                "[unit]", 'type = "service"', 'on = "each-node"', "[service]", 'exec = ["s"]'
            ),
            "s.toml": lines("[unit]", 'type = "service"', "[service]", 'exec = ["s"]'),
        }
    )
    (problem,) = problems_of(directory)
    assert "unit name 's' is already used by" in problem.message


def test_empty_and_missing_directory(tmp_path: Path) -> None:
    assert "no unit files (*.toml)" in problems_of(tmp_path)[0].message
    assert "no such directory" in problems_of(tmp_path / "nope")[0].message


def test_unreadable_entry(write_units: WriteUnits) -> None:
    directory = write_units({"w.toml": lines(*W)})
    (directory / "d.toml").mkdir()
    (problem,) = problems_of(directory)
    assert (Path(problem.path).name, problem.message) == (
        "d.toml",
        "cannot read unit file: not a regular file",
    )


# Messages that say what to write, for values of the right meaning in the wrong form.
HINTS = [
    (
        "interval-ms",
        "w.toml",
        lines(*W, "[ready]", 'http = "http://x/"', "interval = 250"),
        '[ready] interval: duration 250 has no unit; write a string with one: "250ms" or "250s"',
    ),
    (
        "timeout-start-s",
        "w.toml",
        lines(*W, "timeout_start = 20"),
        '[service] timeout_start: duration 20 has no unit; write a string with one: "20s" or "20m"',
    ),
    (
        "stagger-ms",
        "l@.toml",
        lines(*L, "stagger = 200"),
        '[lane] stagger: duration 200 has no unit; write a string with one: "200ms" or "200s"',
    ),
    (
        "retry-after-s",
        "e.toml",
        lines(*E, "[endpoint]", "retry_after = 2"),
        '[endpoint] retry_after: duration 2 has no unit; write a string with one: "2s" or "2m"',
    ),
    (
        "spelled-unit",
        "w.toml",
        lines(*W, 'timeout_stop = "10 seconds"'),
        '[service] timeout_stop: invalid duration "10 seconds"; did you mean "10s"?',
    ),
    (
        "zero-interval",
        "w.toml",
        lines(*W, "[ready]", 'http = "http://x/"', 'interval = "0s"'),
        '[ready] interval: must be longer than 0, e.g. "500ms"',
    ),
    (
        "quoted-int",
        "w.toml",
        lines(*W, 'start_limit_burst = "3"'),
        "[service] start_limit_burst: expected an integer, got string; write 3 without quotes",
    ),
    (
        "float-int",
        "l@.toml",
        lines(*L, "gpus = 2.0"),
        "[lane] gpus: expected an integer, got float; write 2",
    ),
    (
        "quoted-replicas",
        "l@.toml",
        lines(*L, 'replicas = "4"'),
        """[lane] replicas: expected an integer or "auto", got '4'; write 4 without quotes""",
    ),
    (
        "fraction-min-ready",
        "e.toml",
        lines(*E, "[endpoint]", "min_ready = 0.5"),
        '[endpoint] min_ready: expected a count or a percentage, got 0.5; write "50%"',
    ),
    (
        "number-min-ready",
        "e.toml",
        lines(*E, "[endpoint]", 'min_ready = "50"'),
        """[endpoint] min_ready: invalid min_ready '50'; write 50 (a count) or "50%\"""",
    ),
    (
        "scalar-exit-status",
        "w.toml",
        lines(*W, "success_exit_status = 0"),
        "[service] success_exit_status: expected an array of integers, got an integer; write [0]",
    ),
]


@pytest.mark.parametrize(
    ("name", "content", "message"), [pytest.param(*c[1:], id=c[0]) for c in HINTS]
)
def test_messages_say_what_to_write(
    write_units: WriteUnits, name: str, content: str, message: str
) -> None:
    problems = problems_of(write_units({name: content}))
    assert [p.message.removesuffix(" (units: ms, s, m, h)") for p in problems] == [message]
