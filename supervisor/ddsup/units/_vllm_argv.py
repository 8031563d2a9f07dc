"""What a lane's ``vllm serve …`` argv says about it: where vLLM's arguments begin, and
the model names the server answers to.

Two readers need this without running anything:

- the plan and the endpoint: a lane answers to its ``[lane] model`` and to every alias
  of ``--served-model-name`` and adapter of ``--lora-modules`` (vLLM lists them all in
  its ``/v1/models``), so the endpoint can route those names to it;
- ``ddsup start --rehearse`` and ``ddsup fake-vllm``: the words up to and including
  ``vllm serve`` are what a rehearsal replaces by fake-vllm, keeping the arguments.

Names are read from the argv as written, with ``[lane]`` specifiers resolved
(``--served-model-name {model} llama``); a name that depends on the instance
(``{replica}``) is not known before the run and is left out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

from ddsup.units._model import LaneSection, Unit
from ddsup.units._specifiers import SpecifierError, resolve_specifiers

_LEGACY_SERVER = ("-m", "vllm.entrypoints.openai.api_server")
_SERVED_NAMES = "--served-model-name"
_LORA_MODULES = "--lora-modules"


def vllm_command_span(argv: Sequence[str]) -> tuple[int, int] | None:
    """``(first, args)``: where the vLLM server command starts and where its arguments do.

    ``vllm serve MODEL …`` (``vllm`` by name or path, possibly after a wrapper such as
    ``apptainer exec --nv image.sif``) and the older ``python -m
    vllm.entrypoints.openai.api_server …``; None when ``argv`` starts no vLLM server.
    """
    for i, word in enumerate(argv[:-1]):
        base = os.path.basename(word)
        if base == "vllm" and argv[i + 1] == "serve":
            return i, i + 2
        if base.startswith("python") and tuple(argv[i + 1 : i + 3]) == _LEGACY_SERVER:
            return i, i + 3
    return None


def vllm_option_values(args: Sequence[str], flag: str) -> list[str]:
    """Every value given to ``flag`` (one or more values each time, vLLM's ``nargs="+"``).

    Accepts ``--flag a b``, ``--flag=a`` and vLLM's underscore spelling
    (``--served_model_name``); a list ends at the next word that starts with ``-``.
    """
    values: list[str] = []
    i = 0
    while i < len(args):
        head, eq, value = args[i].partition("=")
        i += 1
        if not head.startswith("--") or "--" + head[2:].replace("_", "-") != flag:
            continue
        if eq:
            values.append(value)
            continue
        while i < len(args) and not args[i].startswith("-"):
            values.append(args[i])
            i += 1
    return values


def lora_name(module: str) -> str | None:
    """The adapter name of one ``--lora-modules`` value: ``NAME=PATH`` or vLLM's JSON form."""
    if module.lstrip().startswith("{"):
        try:
            data = json.loads(module)
        except ValueError:
            return None
        name = data.get("name") if isinstance(data, dict) else None
        return name if isinstance(name, str) and name else None
    name, eq, _path = module.partition("=")
    return name if eq and name else None


def served_names(unit: Unit) -> tuple[str, ...]:
    """Every model name a lane answers to: ``[lane] model`` first, then aliases, adapters.

    ``[lane] served_model_names`` when the unit gives it; else what its ``exec`` passes to
    ``vllm serve`` in ``--served-model-name`` and ``--lora-modules``. Units that are not
    lanes serve no name.
    """
    lane = unit.lane
    if lane is None:
        return ()
    if lane.served_model_names is not None:
        return _unique((lane.model, *lane.served_model_names))
    span = vllm_command_span(unit.service.exec)
    if span is None:
        return (lane.model,)
    args = unit.service.exec[span[1] :]
    context = lane_context(unit.base_name, lane)
    names = [_resolved(v, context) for v in vllm_option_values(args, _SERVED_NAMES)]
    adapters = [
        lora_name(_resolved(v, context) or "") for v in vllm_option_values(args, _LORA_MODULES)
    ]
    return _unique((lane.model, *(n for n in (*names, *adapters) if n)))


def lane_context(unit: str, lane: LaneSection) -> dict[str, str]:
    """The specifiers whose values do not depend on the instance: the unit and ``[lane]``."""
    return {
        "unit": unit,
        "model": lane.model,
        "model_path": lane.model_path or "",
        "nodes": str(lane.nodes),
        "nnodes": str(lane.nodes),
        "gpus": str(lane.gpus),
    }


def _resolved(text: str, context: Mapping[str, str]) -> str | None:
    try:
        return resolve_specifiers(text, context)
    except SpecifierError:
        return None


def _unique(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))
