"""``{specifiers}`` in argv, environment values and readiness probes.

A tiny parser of its own rather than :meth:`str.format`: format would allow attribute
and index access (``{port.__class__}``), conversions and format specs, none of which a
unit file should be able to reach. The grammar is just ``{name}`` with ``name`` a plain
identifier, and ``{{`` / ``}}`` for literal braces.

Names are checked when unit files are loaded (:func:`specifier_problems`) and resolved
per instance once the plan is known (:func:`resolve_specifiers`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ddsup._errors import DdsupError

# The names every unit may use; the keys of ``[lane]`` are added by the schema module.
BASE_SPECIFIERS: frozenset[str] = frozenset(
    {
        "attempt",
        "unit",
        "instance",
        "node",
        "host",
        "port",
        "gpus",
        "replica",
        "rank",
        "nnodes",
        "master_addr",
        "master_port",
        "model",
        "state_dir",
        "job_id",
        "endpoint_url",
        "unit_dir",
    }
)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"\{\{|\}\}|\{|\}|[^{}]+")


class SpecifierError(DdsupError):
    """A specifier could not be resolved (no value for it in this instance's context)."""

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.text = text
        super().__init__(f"no value for specifier {{{name}}} in {text!r}")


class SpecifierSyntaxError(ValueError):
    """``text`` is not well formed: an unclosed ``{``, a stray ``}``, a bad name."""


@dataclass(frozen=True)
class Literal:
    """Text copied as is (braces already unescaped)."""

    text: str


@dataclass(frozen=True)
class Specifier:
    """A ``{name}`` to replace."""

    name: str


def tokenize(text: str) -> tuple[Literal | Specifier, ...]:
    """Split ``text`` into literals and specifiers; SpecifierSyntaxError when malformed."""
    parts: list[Literal | Specifier] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        assert match is not None  # the pattern matches any non-empty rest
        token, pos = match.group(), match.end()
        if token in ("{{", "}}"):
            parts.append(Literal(token[0]))
        elif token == "}":
            raise SpecifierSyntaxError("unbalanced '}'; write '}}' for a literal brace")
        elif token == "{":
            end = text.find("}", pos)
            name = text[pos:end] if end >= 0 else ""
            if end < 0 or "{" in name:
                raise SpecifierSyntaxError("unclosed '{'; write '{{' for a literal brace")
            if not _NAME.fullmatch(name):
                raise SpecifierSyntaxError(
                    f"invalid specifier {{{name}}}: a specifier is a plain name like {{port}}"
                )
            parts.append(Specifier(name))
            pos = end + 1
        else:
            parts.append(Literal(token))
    return tuple(parts)


def specifier_problems(text: str, allowed: Iterable[str]) -> list[str]:
    """Messages for everything wrong with ``text``; empty when it is fine."""
    try:
        parts = tokenize(text)
    except SpecifierSyntaxError as err:
        return [str(err)]
    allowed = frozenset(allowed)
    problems = []
    for part in parts:
        if isinstance(part, Specifier) and part.name not in allowed:
            close = difflib.get_close_matches(part.name, sorted(allowed), n=1)
            hint = f"; did you mean {{{close[0]}}}?" if close else ""
            problems.append(f"unknown specifier {{{part.name}}}{hint}")
    return problems


def resolve_specifiers(text: str, context: Mapping[str, str]) -> str:
    """``text`` with every ``{name}`` replaced by ``context[name]`` and braces unescaped."""
    try:
        parts = tokenize(text)
    except SpecifierSyntaxError as err:
        raise DdsupError(f"malformed {text!r}: {err}") from err
    out = []
    for part in parts:
        if isinstance(part, Literal):
            out.append(part.text)
        elif part.name in context:
            out.append(str(context[part.name]))
        else:
            raise SpecifierError(part.name, text)
    return "".join(out)


def resolve_argv(argv: Iterable[str], context: Mapping[str, str]) -> tuple[str, ...]:
    """Each argument resolved on its own: a value never splits into several arguments."""
    return tuple(resolve_specifiers(arg, context) for arg in argv)
