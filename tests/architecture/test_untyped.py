"""JSON with a known shape is typed where it crosses a boundary.

An event line, the status document, a run's outcome and the channel's messages each
have a ``TypedDict`` or a dataclass with one codec; a value that is genuinely open (a
user's table, a body passed through untouched) is ``ddsup._json.Json``. What is left
as a bag of anything, ``dict[str, Any]`` and its renames, is counted here and may only
shrink: a new one is a record someone has not described yet.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import ddsup

PACKAGE = Path(ddsup.__file__).parent
UNTYPED = re.compile(r"\b(?:dict|Mapping)\[\s*str\s*,\s*(?:Any|object)\s*\]")
BUDGET = 26
"""The bags of anything the package still holds; lower it as they get their types."""


def untyped_by_module() -> Counter[str]:
    found: Counter[str] = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        hits = len(UNTYPED.findall(path.read_text(encoding="utf-8")))
        if hits:
            found[str(path.relative_to(PACKAGE))] = hits
    return found


def test_untyped_json_stays_within_its_budget() -> None:
    found = untyped_by_module()
    total = sum(found.values())
    where = "\n".join(f"  {n:3} {name}" for name, n in found.most_common())
    assert total <= BUDGET, (
        f"{total} dict/Mapping[str, Any | object] annotations, {BUDGET} allowed: give the "
        f"new ones a TypedDict, a dataclass with one codec, or ddsup._json.Json\n{where}"
    )


def test_the_pattern_sees_each_spelling() -> None:
    seen = [
        "x: dict[str, Any]",
        "def f(m: Mapping[str, object]) -> None",
        "-> dict[str,  object]",
        "Alias = Mapping[str, Any]",
    ]
    assert [len(UNTYPED.findall(text)) for text in seen] == [1, 1, 1, 1]
    assert not UNTYPED.findall("dict[str, Json] | Mapping[str, int] | dict[int, Any]")
