"""The vllm-llama-8b example's unit files, pointed at the tiny model.

A scenario runs what a user would copy: ``units/examples/vllm-llama-8b`` (its restart
policy, timeouts, probes and endpoint settings), with only what a CPU machine and a
shared test host need changed, each named in :func:`write_job`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

from support.ports import free_port
from support.vllm import REPO, VllmInstall

EXAMPLE = REPO / "units" / "examples" / "vllm-llama-8b"
# vLLM's CPU build: the tiny model's context, full precision (the CPU kernels' choice)
CPU_FLAGS = ("--max-model-len", "512", "--dtype", "float32")


def write_job(
    directory: Path,
    install: VllmInstall,
    *,
    vllm_flags: Sequence[str] = (),
    endpoint: Mapping[str, Any] | None = None,
    worker: Sequence[str] | None = None,
) -> int:
    """Write the example's lane and endpoint units (and ``worker``'s argv as the worker,
    if given) into ``directory``; the endpoint's port.

    What differs from the example: the lanes serve the tiny model (``model_path``) with
    ``CPU_FLAGS`` and ``vllm_flags``, listen on the address ddsup probes them at (not every
    interface) on ports picked at preflight (other jobs share the host); the endpoint
    listens on a free port, with ``endpoint``'s keys over the example's.
    """
    directory.mkdir(parents=True, exist_ok=True)
    lane = _example("lane@.toml")
    words = ["{host}" if word == "0.0.0.0" else word for word in lane["service"]["exec"]]
    lane["service"]["exec"] = [*words, *CPU_FLAGS, *vllm_flags]
    lane["lane"]["model_path"] = str(install.model)
    lane["lane"]["port"] = "auto"
    port = free_port()
    section = {**_example("endpoint.toml")["endpoint"], "port": port, **(endpoint or {})}
    files: dict[str, dict[str, Any]] = {
        "lane@.toml": lane,
        "endpoint.toml": {**_example("endpoint.toml"), "endpoint": section},
    }
    if worker is not None:
        files["worker.toml"] = {
            "unit": {"type": "worker", "after": ["endpoint"], "requires": ["endpoint"]},
            "service": {"exec": list(worker)},
        }
    for name, sections in files.items():
        (directory / name).write_text(toml(sections))
    return port


def model_name() -> str:
    """The name the example's lanes serve (its ``[lane] model``)."""
    return str(_example("lane@.toml")["lane"]["model"])


def _example(name: str) -> dict[str, Any]:
    sections: dict[str, Any] = tomllib.loads((EXAMPLE / name).read_text())
    return sections


def toml(sections: Mapping[str, Mapping[str, Any]]) -> str:
    """TOML for sections of strings, numbers, booleans, arrays and inline tables."""
    lines = []
    for section, keys in sections.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {_value(value)}" for key, value in keys.items()]
        lines.append("")
    return "\n".join(lines)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a TOML basic string


def python() -> str:
    """The interpreter a worker unit runs (the tests' own: it has the openai client)."""
    return sys.executable
