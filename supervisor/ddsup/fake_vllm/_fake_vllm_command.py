"""``ddsup fake-vllm``: the command line of the vLLM stand-in.

It takes ``vllm serve``'s own argv (``ddsup fake-vllm MODEL --served-model-name m
--tensor-parallel-size 4 …``): the vLLM flags it can act on are defined here, every other
vLLM flag is accepted and named in one ``fake-vllm: ignoring …`` line on stderr at
start-up (names only, never values), and an argument that is neither the fake's nor
vLLM's is a usage error (:mod:`~ddsup.fake_vllm._vllm_cli`).

Output contract (tests and scripts rely on it): once the port is bound, the first line
on stdout is ``fake-vllm listening on http://HOST:PORT`` (with ``--port 0`` that is how
the chosen port is learnt); with ``--headless`` (no API server, as vLLM's ranks > 0) it is
``fake-vllm headless: no API server``. Everything else goes to stderr; with a startup
delay that includes the line ``fake-vllm: loading the model for Ns``, printed once
signals are handled. With ``--spawn-engine`` the engine child's PID is printed to stderr
as ``fake-vllm: engine pid N`` and written to ``--engine-pid-file`` when given.

Exit statuses: 0 after a SIGTERM/SIGINT drain (or a signal during startup), 1 when a
``--crash-after-*`` knob fires (``os._exit``, no cleanup), 64 for a bad command line.
A second SIGTERM/SIGINT during the drain stops at once.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

from ddsup._errors import UsageError
from ddsup.fake_vllm import _behaviour as defaults
from ddsup.fake_vllm._behaviour import Behaviour, LoraModule
from ddsup.fake_vllm._engine_core import EngineOptions
from ddsup.fake_vllm._vllm_cli import (
    IGNORED_DEST,
    EnableDisable,
    add_vllm_flags,
    parse_like_vllm,
    vllm_flag,
)
from ddsup.fake_vllm._vllm_flags import VLLM_VERSION

HEADLESS_BANNER = "fake-vllm headless: no API server"


def configure_fake_vllm(parser: argparse.ArgumentParser) -> None:
    """Add the flags of ``ddsup fake-vllm`` (its own and all of ``vllm serve``'s)."""
    parser.usage = "ddsup fake-vllm [MODEL] [options]"
    parser.description = (
        "Serve a vLLM-compatible stand-in (OpenAI API, /health, /metrics) for rehearsals "
        "and tests. The first stdout line is 'fake-vllm listening on http://HOST:PORT'."
    )
    parser.epilog = (
        f"Every other flag of 'vllm serve' (vLLM {VLLM_VERSION}) is accepted too, so a "
        "real unit's argv runs unchanged; the ones fake-vllm does not act on are named in "
        "one line on stderr at start-up. Exit status: 0 after SIGTERM/SIGINT (graceful "
        "drain), 1 when a --crash-after-* knob fires, 64 for a bad command line."
    )
    _serving_flags(parser.add_argument_group("serving (vLLM's flags, honoured)"))
    _parallel_flags(parser.add_argument_group("parallelism (vLLM's flags: engine processes)"))
    _timing_flags(parser.add_argument_group("speed and capacity"))
    _failure_flags(parser.add_argument_group("failures and shutdown"))
    _engine_flags(parser.add_argument_group("engine processes (vLLM's process model)"))
    add_vllm_flags(parser)
    parse_like_vllm(parser)


def _names(flag: str) -> list[str]:
    """All of vLLM's spellings of ``flag``, so the fake's definition covers each."""
    return list(vllm_flag(flag).names)


def _serving_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "model_tag", nargs="?", default=None, metavar="MODEL",
        help=f"the model, as in 'vllm serve MODEL' (default: --model, else "
        f"{defaults.DEFAULT_MODEL})",
    )  # fmt: skip
    group.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    group.add_argument(
        "--port",
        type=int,
        default=8000,
        help="port to bind; 0 picks a free one (default: %(default)s)",
    )
    group.add_argument(
        "--model", default=None, help="the model, like MODEL (default: MODEL, else fake-model)"
    )
    group.add_argument(
        *_names("--served-model-name"), nargs="+", default=None, metavar="NAME",
        help="names the model answers to (aliases; the first one is used in answers "
        "and metrics; default: the model)",
    )  # fmt: skip
    group.add_argument(
        *_names("--api-key"), nargs="+", default=None, metavar="KEY",
        help="require 'Authorization: Bearer KEY' on /v1 routes (default: $VLLM_API_KEY)",
    )  # fmt: skip
    group.add_argument(*_names("--enable-lora"), action=EnableDisable, help="allow LoRA adapters")
    group.add_argument(
        *_names("--lora-modules"), nargs="+", default=[], metavar="NAME=PATH",
        help="LoRA adapters served as extra model names: NAME=PATH or vLLM's JSON "
        '\'{"name": …, "path": …, "base_model_name": …}\' (needs --enable-lora; default: none)',
    )  # fmt: skip
    group.add_argument(
        *_names("--max-model-len"), type=_model_len, default=defaults.DEFAULT_MAX_MODEL_LEN,
        help="context length (1k, 32K, auto): prompt + max_tokens beyond it is a 400 "
        "(default: %(default)s)",
    )  # fmt: skip
    group.add_argument(
        *_names("--headless"), action="store_true",
        help="no API server (vLLM's ranks > 0): run until SIGTERM/SIGINT",
    )  # fmt: skip
    group.add_argument(
        "--lane-id",
        default=None,
        help="lane identity in the x-fake-vllm-lane header and in every generated text "
        "(default: the bound port)",
    )


def _parallel_flags(group: argparse._ArgumentGroup) -> None:
    for flag, what in (
        ("--tensor-parallel-size", "GPUs per pipeline stage: a worker process each"),
        ("--pipeline-parallel-size", "pipeline stages: tensor-parallel-size workers each"),
        ("--nnodes", "nodes the workers are spread over"),
    ):
        group.add_argument(
            *_names(flag), type=int, default=1, metavar="N", help=f"{what} (default: 1)"
        )
    group.add_argument(
        *_names("--node-rank"), type=int, default=0, metavar="N",
        help="this node's rank: which of the workers run here (default: 0)",
    )  # fmt: skip


def _timing_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--startup-delay", type=float, default=0.0, metavar="SECONDS",
        help="seconds before the port is bound (connections are refused until then; "
        "default: 0)",
    )  # fmt: skip
    group.add_argument(
        "--ttft",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="time to first token (default: 0)",
    )
    group.add_argument(
        "--tokens-per-second", type=float, default=0.0, metavar="N",
        help="generation speed per request after the first token; 0 = as fast as possible "
        "(default: 0)",
    )  # fmt: skip
    group.add_argument(
        "--max-num-seqs", type=int, default=defaults.DEFAULT_MAX_NUM_SEQS, metavar="N",
        help="requests generated at once; the rest wait in a FIFO queue "
        "(vllm:num_requests_waiting; default: %(default)s)",
    )  # fmt: skip
    group.add_argument(
        "--default-max-tokens", type=int, default=defaults.DEFAULT_MAX_TOKENS, metavar="N",
        help="tokens generated when a request gives no max_tokens (default: %(default)s)",
    )  # fmt: skip


def _failure_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--crash-after-requests", type=int, default=None, metavar="N",
        help="exit abruptly (status 1, no cleanup) once the engine answered N requests "
        "(generation, responses, pooling; default: never)",
    )  # fmt: skip
    group.add_argument(
        "--crash-after-seconds", type=float, default=None, metavar="T",
        help="exit abruptly (status 1, no cleanup) T seconds after the port opened "
        "(default: never)",
    )  # fmt: skip
    group.add_argument("--fail-health", action="store_true", help="/health answers 503")
    group.add_argument(
        "--fail-health-after", type=float, default=None, metavar="T",
        help="/health answers 503 from T seconds after the port opened (default: never)",
    )  # fmt: skip
    group.add_argument(
        "--ignore-sigterm", action="store_true", help="ignore SIGTERM (only SIGKILL ends it)"
    )
    group.add_argument(
        "--shutdown-timeout", type=float, default=defaults.DEFAULT_SHUTDOWN_TIMEOUT,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT: stop accepting, let in-flight requests finish this long, "
        "then exit 0 (default: %(default)s)",
    )  # fmt: skip


def _engine_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--spawn-engine", action="store_true",
        help="start a 'VLLM::EngineCore' child (setproctitle, like vLLM's engine; with "
        "--tensor/--pipeline-parallel-size its 'VLLM::Worker_TP0' … children too) that "
        "outlives a SIGKILLed server; a normal exit ends it",
    )  # fmt: skip
    group.add_argument(
        "--engine-setsid", action=argparse.BooleanOptionalAction, default=True,
        help="the engine starts a session of its own, out of the server's process group "
        "(default: on; --no-engine-setsid keeps it in the group, as vLLM does)",
    )  # fmt: skip
    group.add_argument(
        "--engine-outlives-server", action="store_true",
        help="a normal server exit leaves the engine running too (only a kill ends it)",
    )  # fmt: skip
    group.add_argument(
        "--engine-clear-env", action="store_true",
        help="start the engine with a cleared environment (env -i, PATH only): no DDSUP_* "
        "tag at all",
    )  # fmt: skip
    group.add_argument(
        "--engine-pid-file", type=Path, default=None, metavar="PATH",
        help="write the engine child's PID here (with --spawn-engine; default: nowhere)",
    )  # fmt: skip


def _model_len(value: str) -> int:
    """vLLM's ``--max-model-len``: ``4096``, ``32k`` (×1000), ``32K`` (×1024), ``auto``."""
    if value.strip().lower() in {"auto", "-1"}:
        return defaults.DEFAULT_MAX_MODEL_LEN
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT]?)", value.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"not a length: {value!r} (e.g. 4096, 32k, 32K)")
    number, suffix = match.groups()
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
    binary = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    return int(float(number) * (scale.get(suffix) or binary[suffix]))


def behaviour_from_args(args: argparse.Namespace) -> Behaviour:
    """The validated :class:`Behaviour` of parsed flags (``UsageError`` names a bad one)."""
    if "--config" in getattr(args, IGNORED_DEST, ()):
        raise UsageError(
            "fake-vllm: --config: vLLM's YAML config file is not read by fake-vllm; "
            "pass its options as flags"
        )
    if args.lora_modules and not args.enable_lora:
        raise UsageError("fake-vllm: --lora-modules needs --enable-lora (as vLLM does)")
    return Behaviour(
        host=args.host,
        port=args.port,
        model=_model(args),
        served_model_names=tuple(args.served_model_name or ()),
        lora_modules=tuple(_lora_module(item) for item in args.lora_modules),
        api_keys=_api_keys(args.api_key),
        lane_id=args.lane_id,
        startup_delay=args.startup_delay,
        ttft=args.ttft,
        tokens_per_second=args.tokens_per_second,
        max_num_seqs=args.max_num_seqs,
        default_max_tokens=args.default_max_tokens,
        max_model_len=args.max_model_len,
        crash_after_requests=args.crash_after_requests,
        crash_after_seconds=args.crash_after_seconds,
        ignore_sigterm=args.ignore_sigterm,
        shutdown_timeout=args.shutdown_timeout,
        spawn_engine=args.spawn_engine,
        engine_pid_file=args.engine_pid_file,
        engine_setsid=args.engine_setsid,
        engine_outlives_server=args.engine_outlives_server,
        engine_clear_env=args.engine_clear_env,
        headless=args.headless,
        tensor_parallel_size=args.tensor_parallel_size,
        pipeline_parallel_size=args.pipeline_parallel_size,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        fail_health=args.fail_health,
        fail_health_after=args.fail_health_after,
    )


def engine_options(behaviour: Behaviour) -> EngineOptions:
    """What :func:`~ddsup.fake_vllm._engine_core.spawn_engine_core` needs of ``behaviour``."""
    return EngineOptions(
        setsid=behaviour.engine_setsid,
        outlives_server=behaviour.engine_outlives_server,
        clear_env=behaviour.engine_clear_env,
        tensor_parallel_size=behaviour.tensor_parallel_size,
        pipeline_parallel_size=behaviour.pipeline_parallel_size,
        nnodes=behaviour.nnodes,
        node_rank=behaviour.node_rank,
        pid_file=behaviour.engine_pid_file,
    )


def ignored_flags_line(args: argparse.Namespace) -> str | None:
    """The one start-up line naming the vLLM flags given but not acted on (no values)."""
    ignored = getattr(args, IGNORED_DEST, ())
    if not ignored:
        return None
    return (
        f"fake-vllm: ignoring {len(ignored)} vLLM flag{'s' if len(ignored) > 1 else ''} "
        f"it does not act on: {' '.join(ignored)}"
    )


def _model(args: argparse.Namespace) -> str:
    """``MODEL``, else ``--model``: vLLM's serve command lets the positional win."""
    for given in (args.model_tag, args.model):
        if given is not None:
            return str(given)
    return defaults.DEFAULT_MODEL


def _api_keys(keys: list[str] | None) -> tuple[str, ...]:
    """``--api-key`` keys, else ``$VLLM_API_KEY`` (vLLM's order); empty keys mean none."""
    return tuple(key for key in (keys or [os.environ.get("VLLM_API_KEY", "")]) if key)


def _lora_module(item: str) -> LoraModule:
    """``name=path`` or vLLM's JSON object with ``name``, ``path``, ``base_model_name``."""
    if "=" in item and "," not in item and not item.lstrip().startswith("{"):
        name, path = item.split("=", 1)
        return LoraModule(name, path)
    try:
        data = json.loads(item)
        return LoraModule(str(data["name"]), str(data["path"]), data.get("base_model_name") or None)
    except (ValueError, TypeError, KeyError) as err:
        raise UsageError(
            f"fake-vllm: --lora-modules {item!r}: expected NAME=PATH or a JSON object "
            'with "name" and "path"'
        ) from err
