"""``ddsup fake-vllm`` reads ``vllm serve``'s command line: every flag, arity, spelling.

Parsed in-process with ddsup's real parser (``build_parser``), as ``ddsup fake-vllm``
does; what a real unit's argv becomes is checked on the example units themselves.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from ddsup._cli import build_parser, main
from ddsup._errors import UsageError
from ddsup.fake_vllm import VLLM_VERSION, behaviour_from_args, fake_vllm_argv, is_vllm_serve
from ddsup.fake_vllm._fake_vllm_command import ignored_flags_line
from ddsup.fake_vllm._vllm_flags import VLLM_SERVE_FLAGS, Arity

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the backport, as in ddsup.units
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

EXAMPLES = Path(__file__).parents[2] / "units" / "examples"
_SAMPLE = {Arity.SWITCH: [], Arity.ONE: ["1"], Arity.OPTIONAL: [], Arity.ONE_OR_MORE: ["a", "b"]}
_OWN_ONLY = {  # the fake's own knobs: none may shadow a vLLM flag
    "--lane-id", "--startup-delay", "--ttft", "--tokens-per-second", "--default-max-tokens",
    "--crash-after-requests", "--crash-after-seconds", "--fail-health", "--fail-health-after",
    "--ignore-sigterm", "--spawn-engine", "--engine-setsid", "--no-engine-setsid",
    "--engine-outlives-server", "--engine-clear-env", "--engine-pid-file",
}  # fmt: skip


def _parse(*argv: str) -> object:
    return build_parser(["fake-vllm"]).parse_args(["fake-vllm", *argv])


def test_the_table_is_vllm_0_34() -> None:
    names = [name for flag in VLLM_SERVE_FLAGS for name in flag.names]
    assert VLLM_VERSION == "0.34.0"
    assert len(VLLM_SERVE_FLAGS) == 327 and len(names) == len(set(names)) == 494
    for flag in ("--tensor-parallel-size", "--no-enable-prefix-caching", "--disable-lora", "-tp"):
        assert flag in names


def test_every_vllm_flag_and_spelling_is_accepted_with_its_arity() -> None:
    parser = build_parser(["fake-vllm"])
    for flag in VLLM_SERVE_FLAGS:
        for name in flag.names:
            args = parser.parse_args(["fake-vllm", "/models/m", name, *_SAMPLE[flag.arity]])
            assert args.model_tag == "/models/m", name  # the values did not spill over


def test_the_fake_keeps_its_own_flags_apart_from_vllms() -> None:
    vllm = {name for flag in VLLM_SERVE_FLAGS for name in flag.names}
    assert not _OWN_ONLY & vllm
    text = build_parser(["fake-vllm"])._subparsers._group_actions[0].choices["fake-vllm"]  # type: ignore[union-attr]
    assert set(text._option_string_actions) >= _OWN_ONLY


def test_vllm_spellings_underscores_equals_dotted_and_O() -> None:
    args = _parse(
        "m", "--max_model_len=32k", "--served_model_name", "a", "b", "-tp=2",
        "--compilation-config.mode", "3", "--speculative_config.method=ngram", "-O3",
        "--hf-token", "--enable-prefix-caching",
    )  # fmt: skip
    behaviour = behaviour_from_args(args)  # type: ignore[arg-type]
    assert behaviour.max_model_len == 32_000
    assert behaviour.served_names() == ("a", "b")
    assert behaviour.tensor_parallel_size == 2
    line = ignored_flags_line(args)  # type: ignore[arg-type]
    assert line is not None
    for flag in ("--compilation-config", "--speculative-config", "--optimization-level"):
        assert flag in line
    assert "--hf-token" in line and "--enable-prefix-caching" in line


def test_a_dotted_key_below_a_plain_value_replaces_it() -> None:
    # vllm serve reads ``--x.a=1 --x.a.b=2`` without complaint; the fake must too
    args = _parse("m", "--compilation-config.mode=3", "--compilation-config.mode.level=1")
    line = ignored_flags_line(args)  # type: ignore[arg-type]
    assert line is not None and "--compilation-config" in line


@pytest.mark.parametrize(("value", "tokens"), [("4096", 4096), ("1K", 1024), ("auto", 4096)])
def test_max_model_len_is_human_readable(value: str, tokens: int) -> None:
    assert behaviour_from_args(_parse("--max-model-len", value)).max_model_len == tokens  # type: ignore[arg-type]


def test_the_ignored_line_names_flags_never_values() -> None:
    args = _parse("m", "--hf-token", "hf_SECRET", "--ssl-keyfile", "/k/SECRET.pem", "-dp", "2")
    line = ignored_flags_line(args)  # type: ignore[arg-type]
    assert (
        line == "fake-vllm: ignoring 3 vLLM flags it does not act on: --hf-token --ssl-keyfile -dp"
    )
    assert "SECRET" not in line
    assert ignored_flags_line(_parse("m", "--port", "1")) is None  # type: ignore[arg-type]


def test_an_unknown_flag_is_a_usage_error_of_fake_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    assert_exit = pytest.raises(SystemExit)
    with assert_exit as exit_info:
        main(["fake-vllm", "m", "--tensor-parallel-size", "2", "--no-such-flag"])
    assert exit_info.value.code == 64
    err = capsys.readouterr().err
    assert err.startswith("usage: ddsup fake-vllm ")
    assert "ddsup fake-vllm: error: unrecognized arguments: --no-such-flag" in err
    assert f"nor of vllm serve {VLLM_VERSION}" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--config", "serve.yaml"], "--config: vLLM's YAML config file is not read"),
        (["--lora-modules", "a=/l"], "--lora-modules needs --enable-lora"),
        (["--enable-lora", "--lora-modules", "{bad"], "expected NAME=PATH or a JSON object"),
        (["--nnodes", "2", "--node-rank", "2"], "--node-rank must be in [0, --nnodes)"),
        (["--engine-clear-env"], "--engine-clear-env needs --spawn-engine"),
        (["--served-model-name", "a", "a"], "names must be unique"),
    ],
)
def test_bad_vllm_arguments_say_what_to_fix(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["fake-vllm", *argv]) == 64
    assert message in capsys.readouterr().err


def test_the_drain_defaults_to_none_as_in_vllm() -> None:
    """vLLM 0.32's ``--shutdown-timeout`` is 0: SIGTERM aborts what is in flight."""
    assert behaviour_from_args(_parse()).shutdown_timeout == 0  # type: ignore[arg-type]


def test_the_positional_model_wins_over_model_as_in_vllm() -> None:
    """``vllm serve`` sets ``args.model = args.model_tag`` when both are given."""
    assert behaviour_from_args(_parse("m", "--model", "n")).model == "m"  # type: ignore[arg-type]
    assert behaviour_from_args(_parse("--model", "n")).model == "n"  # type: ignore[arg-type]


def test_lora_modules_in_both_of_vllms_forms() -> None:
    args = _parse(
        "base", "--enable-lora", "--lora-modules", "sql=/l/sql",
        '{"name": "chat", "path": "/l/chat", "base_model_name": "other"}',
    )  # fmt: skip
    loras = behaviour_from_args(args).lora_modules  # type: ignore[arg-type]
    assert [(lora.name, lora.path, lora.base_model_name) for lora in loras] == [
        ("sql", "/l/sql", None),
        ("chat", "/l/chat", "other"),
    ]


def test_api_key_falls_back_to_vllm_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "from-env")
    assert behaviour_from_args(_parse()).api_keys == ("from-env",)  # type: ignore[arg-type]
    assert behaviour_from_args(_parse("--api-key", "a", "b")).api_keys == ("a", "b")  # type: ignore[arg-type]
    assert "from-env" not in repr(behaviour_from_args(_parse()))  # type: ignore[arg-type]


def test_fake_vllm_argv_maps_vllm_serve() -> None:
    command = ["python", "-m", "ddsup", "fake-vllm"]
    assert fake_vllm_argv(["/opt/venv/bin/vllm", "serve", "m", "--port", "1"], command) == [
        *command, "m", "--port", "1",
    ]  # fmt: skip
    legacy = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    assert fake_vllm_argv(legacy) == ["ddsup", "fake-vllm", "--model", "m"]
    assert is_vllm_serve(legacy) and not is_vllm_serve(["vllm", "bench"])
    with pytest.raises(UsageError, match="not a 'vllm serve' command"):
        fake_vllm_argv(["ddsup", "endpoint"])


def _specifiers(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], text)


def _example_argvs() -> list[tuple[str, list[str]]]:
    values = {
        "model_path": "/models/x", "model": "served-x", "port": "8123", "gpus": "4",
        "nnodes": "2", "rank": "1", "master_addr": "127.0.0.1", "master_port": "9001",
    }  # fmt: skip
    found = []
    for lane in sorted(EXAMPLES.glob("vllm-*/lane@.toml")):
        service = tomllib.loads(lane.read_text())["service"]
        for key in ("exec", "exec_follower"):
            if key in service:
                argv = [_specifiers(arg, values) for arg in service[key]]
                found.append((f"{lane.parent.name}:{key}", argv))
    return found


EXAMPLE_ARGVS = _example_argvs()


def test_every_vllm_example_has_a_vllm_serve_argv() -> None:
    assert {name.split(":")[0] for name, _ in EXAMPLE_ARGVS} == {
        p.name for p in EXAMPLES.glob("vllm-*")
    }
    assert len(EXAMPLE_ARGVS) >= 4  # three lanes, one follower


@pytest.mark.parametrize(("name", "argv"), EXAMPLE_ARGVS, ids=[n for n, _ in EXAMPLE_ARGVS])
def test_the_example_units_argv_is_accepted_and_honoured(name: str, argv: list[str]) -> None:
    fake = fake_vllm_argv(argv)
    assert fake[:2] == ["ddsup", "fake-vllm"]
    behaviour = behaviour_from_args(_parse(*fake[2:]))  # type: ignore[arg-type]
    assert behaviour.model == "/models/x"
    assert behaviour.served_names() == ("served-x",)
    assert behaviour.tensor_parallel_size == 4
    assert behaviour.headless == name.endswith("exec_follower")
    if not behaviour.headless:
        assert (behaviour.host, behaviour.port) == ("0.0.0.0", 8123)
        assert behaviour.shutdown_timeout in (20, 30)
    if "32768" in argv:
        assert behaviour.max_model_len == 32768
    if "--nnodes" in argv:
        assert (behaviour.nnodes, behaviour.node_rank, behaviour.pipeline_parallel_size) == (
            2,
            1,
            2,
        )


def test_vllms_help_search_is_plain_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fake-vllm", "--help=ModelConfig"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage: ddsup fake-vllm [MODEL] [options]")
