"""``vllm serve``'s command line inside ``ddsup fake-vllm``: accept it all, say what is ignored.

A rehearsal runs a real unit's argv with ``vllm serve`` replaced by ``ddsup fake-vllm``
(:func:`fake_vllm_argv`), so the fake's parser must read that argv the way vLLM's
``FlexibleArgumentParser`` does:

- every flag of :data:`~ddsup.fake_vllm._vllm_flags.VLLM_SERVE_FLAGS` with its arity;
  the ones the fake does not act on are recorded by name (:data:`IGNORED_DEST`) so that
  start-up names them in one log line, never their values (``--hf-token`` and
  ``--api-key`` carry secrets);
- ``--max_model_len`` is ``--max-model-len`` (underscores in flag names), ``--flag=value``,
  ``--help=GROUP`` is ``--help``, ``-O3`` / ``-O 3`` for ``--optimization-level``, and dotted
  JSON keys
  (``--compilation-config.mode 3``, ``--speculative-config.method=ngram``, ``--x.list+ a``)
  merged into one JSON value per flag;
- an argument that is neither the fake's nor vLLM's is still an error, reported by the
  ``ddsup fake-vllm`` parser itself (argparse would otherwise hand it up to ``ddsup``'s
  parser, whose usage line does not name the subcommand).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from ddsup._errors import UsageError
from ddsup._json import Json, JsonObject
from ddsup.fake_vllm._vllm_flags import VLLM_SERVE_FLAGS, VLLM_VERSION, Arity, VllmFlag
from ddsup.units import vllm_command_span

IGNORED_DEST = "vllm_ignored"
"""Namespace attribute: the names of the vLLM flags given but not acted on, as spelt."""

_NARGS: dict[Arity, int | str | None] = {
    Arity.SWITCH: 0,
    Arity.ONE: None,
    Arity.OPTIONAL: "?",
    Arity.ONE_OR_MORE: "+",
}
_BY_NAME = {name: flag for flag in VLLM_SERVE_FLAGS for name in flag.names}
_OPTIMIZATION_LEVEL = "--optimization-level"


def vllm_flag(name: str) -> VllmFlag:
    """The vLLM flag spelt ``name`` (any spelling); ``KeyError`` if vLLM has none."""
    return _BY_NAME[name]


class _Ignored(argparse.Action):
    """Accepts a vLLM flag's values and records only the flag's name, as spelt."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        seen = getattr(namespace, IGNORED_DEST, ())
        name = option_string or self.option_strings[0]
        if name not in seen:
            setattr(namespace, IGNORED_DEST, (*seen, name))


class EnableDisable(argparse.Action):
    """vLLM's boolean pairs: ``--enable-x`` sets True; ``--disable-x``/``--no-…`` False."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        negative = option_string is not None and option_string.startswith(("--no-", "--disable-"))
        setattr(namespace, self.dest, not negative)


def add_vllm_flags(parser: argparse.ArgumentParser) -> None:
    """Accept every vLLM flag the parser does not define itself, hidden from ``--help``.

    A flag the fake defines (``--port``) must define all of vLLM's spellings of it
    (``-tp`` with ``--tensor-parallel-size``): a partial overlap is a programming error.
    """
    taken = parser._option_string_actions
    parser.set_defaults(**{IGNORED_DEST: ()})
    for flag in VLLM_SERVE_FLAGS:
        own = [name for name in flag.names if name in taken]
        if own:
            missing = set(flag.names) - set(own)
            assert not missing, f"fake-vllm defines {flag.name} without {sorted(missing)}"
            continue
        parser.add_argument(
            *flag.names,
            action=_Ignored,
            nargs=_NARGS[flag.arity],
            dest=f"vllm_{flag.name.lstrip('-').replace('-', '_')}",
            help=argparse.SUPPRESS,
        )


def parse_like_vllm(parser: argparse.ArgumentParser) -> None:
    """Make ``parser`` normalise argv as vLLM does and report unknown arguments itself.

    argparse calls a sub-parser's ``parse_known_args`` and lets the top-level parser
    complain about what is left; this instance-level override (argparse has no hook for
    it) keeps both the normalisation and the error inside ``ddsup fake-vllm``.
    """
    inner = parser.parse_known_args

    def parse_known_args(
        args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        try:
            argv = normalise_vllm_argv(list(args or ()))
        except UsageError as err:
            parser.error(str(err))
        parsed, extras = inner(argv, namespace)
        if extras:
            parser.error(
                f"unrecognized arguments: {' '.join(extras)} (neither a flag of "
                f"ddsup fake-vllm nor of vllm serve {VLLM_VERSION})"
            )
        return parsed, extras

    setattr(parser, "parse_known_args", parse_known_args)  # noqa: B010 - see docstring


def normalise_vllm_argv(args: list[str]) -> list[str]:
    """vLLM's spellings → plain argparse ones (see the module docstring)."""
    plain: list[str] = []
    dotted: dict[str, JsonObject] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            plain += args[i - 1 :]
            break
        if arg.startswith("-O") and not arg.startswith("--"):
            value, i = _optimization_level(arg, args, i)
            plain += [_OPTIMIZATION_LEVEL, value] if value is not None else [arg]
            continue
        if not arg.startswith("--"):
            plain.append(arg)
            continue
        if arg.startswith("--help="):  # vLLM's help search: plain help here
            plain.append("--help")
            continue
        key, eq, value = arg.partition("=")
        head, dot, rest = key.partition(".")
        head = "--" + head[2:].replace("_", "-")
        if not dot:
            plain.append(f"{head}={value}" if eq else head)
            continue
        if not eq:
            if i >= len(args):
                raise UsageError(f"argument {key}: expected one argument")
            value, i = args[i], i + 1
        _merge_dotted(dotted.setdefault(head, {}), rest, value)
    for head, tree in dotted.items():
        plain += [head, json.dumps(tree)]
    return plain


def _optimization_level(arg: str, args: list[str], i: int) -> tuple[str | None, int]:
    """``-O3``, ``-O=3`` and ``-O 3`` (a digit 0-3 next) are ``--optimization-level``."""
    if arg == "-O":
        if i < len(args) and args[i] in {"0", "1", "2", "3"}:
            return args[i], i + 1
        return None, i
    return arg[3:] if arg[2] == "=" else arg[2:], i


def _merge_dotted(tree: JsonObject, path: str, raw: str) -> None:
    """``a.b`` = raw into ``tree``; a trailing ``+`` appends comma-separated items. A
    later key replaces an earlier plain value on its path (``x.a=1 x.a.b=2``)."""
    append = path.endswith("+")
    keys = path.removesuffix("+").split(".")
    items: list[Json] = [*raw.split(",")]
    for key in keys[:-1]:
        child = tree.get(key)
        if not isinstance(child, dict):
            child = tree[key] = {}
        tree = child
    last = keys[-1]
    earlier = tree.get(last)
    if append and isinstance(earlier, list):
        earlier += items
    else:
        tree[last] = items if append else _json_or_text(raw)


def _json_or_text(raw: str) -> Json:
    try:
        loaded: Json = json.loads(raw)
        return loaded
    except ValueError:
        return raw


def is_vllm_serve(argv: Sequence[str]) -> bool:
    """Whether ``argv`` starts a vLLM OpenAI server (see :func:`fake_vllm_argv`)."""
    return vllm_command_span(argv) is not None


def fake_vllm_argv(
    argv: Sequence[str], command: Sequence[str] = ("ddsup", "fake-vllm")
) -> list[str]:
    """The ``ddsup fake-vllm`` argv that rehearses the vLLM server argv ``argv``.

    ``vllm serve MODEL …`` (``vllm`` by name or path, also after a wrapper such as
    ``apptainer exec … image.sif``, which is dropped) and the older ``python -m
    vllm.entrypoints.openai.api_server --model MODEL …`` become ``command`` followed by
    the same arguments, which ``ddsup fake-vllm`` accepts. ``command`` is how to start
    fake-vllm (e.g. ``[sys.executable, "-m", "ddsup", "fake-vllm"]``). Raises
    :class:`~ddsup._errors.UsageError` when ``argv`` is not a vLLM server command.
    """
    span = vllm_command_span(argv)
    if span is None:
        shown = " ".join(argv[:3])
        raise UsageError(f"not a 'vllm serve' command: {shown!r} (expected 'vllm serve MODEL …')")
    return [*command, *argv[span[1] :]]
