"""The locator follows every TOML text that tomllib accepts, to its end.

The parser trusts the locator's scan to refuse keys of absurdly many parts *before*
tomllib sees them; a text that tomllib accepts but the scanner cannot follow would slip
past that guard. So the scanner is held to TOML's whole lexical grammar here: bare,
quoted and dotted keys, every string form, dates, arrays over several lines with
comments, inline tables, table and array-of-table headers.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddsup.units._locate import KeyPath, Locator

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

bare = st.from_regex(r"[A-Za-z0-9_-]{1,6}", fullmatch=True)
basic_chars = st.sampled_from(["a", " ", "#", "]", "[", "=", ",", "'", "\\\\", '\\"', "\\n", "é"])
basic = st.lists(basic_chars, max_size=6).map(lambda p: '"' + "".join(p) + '"')
literal = st.lists(st.sampled_from(["a", " ", '"', "#", "]", "\\", "="]), max_size=6).map(
    lambda p: "'" + "".join(p) + "'"
)
ml_basic = st.lists(
    st.sampled_from(["a", "\n", '"', '""', "\\\n  ", "#", "]", "'''"]), max_size=6
).map(lambda p: '"""' + "".join(p) + '"""')
ml_literal = st.lists(st.sampled_from(["a", "\n", "'", "''", '"""', "\\", "#"]), max_size=6).map(
    lambda p: "'''" + "".join(p) + "'''"
)
simple_key = st.one_of(bare, basic, literal)
dot = st.sampled_from([".", " . ", ". ", " ."])
key = st.lists(simple_key, min_size=1, max_size=3).flatmap(
    lambda parts: st.lists(dot, min_size=len(parts) - 1, max_size=len(parts) - 1).map(
        lambda dots: parts[0] + "".join(d + p for d, p in zip(dots, parts[1:], strict=True))
    )
)
SCALARS = [
    "1",
    "-17",
    "+3",
    "1_000",
    "0xDEAD_beef",
    "0o755",
    "0b1101",
    "3.14",
    "-0.01",
    "5e+22",
    "6.626e-34",
    "inf",
    "-nan",
    "true",
    "false",
    "1979-05-27T07:32:00Z",
    "1979-05-27 07:32:00.999-07:00",
    "1979-05-27T07:32:00",
    "1979-05-27",
    "07:32:00",
    "00:32:00.5",
]
STRINGS = [
    r'"a # ] , } \" \\"',
    r"'a # ] \ " + '"' + "'",
    '"""a\n"" ]\n\\\n  b"""',
    '"""a""""',
    "'''a\n'' ] \"\"\"'''",
    "'''a'''''",
]
scalar = st.one_of(st.sampled_from(SCALARS + STRINGS), basic, literal, ml_basic, ml_literal)
gap = st.sampled_from(["", " ", "\n", " # c ] , }\n", "\n\n  "])


def _array(items: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(st.lists(st.tuples(gap, items, gap), max_size=3), st.booleans(), gap).map(
        lambda t: (
            "["
            + ",".join(a + v + b for a, v, b in t[0])
            + ("," if t[1] and t[0] else "")
            + t[2]
            + "]"
        )
    )


def _inline(items: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(st.tuples(key, items), max_size=3).map(
        lambda kvs: "{" + ", ".join(f"{k} = {v}" for k, v in kvs) + "}"
    )


value = st.recursive(scalar, lambda inner: st.one_of(_array(inner), _inline(inner)), max_leaves=8)
line = st.one_of(
    st.tuples(key, scalar).map(lambda kv: f"{kv[0]} = {kv[1]}"),
    st.tuples(key, value).map(lambda kv: f"{kv[0]} = {kv[1]}"),
    st.tuples(key, value).map(lambda kv: f"  {kv[0]}={kv[1]}   # trailing comment"),
    key.map(lambda k: f"[{k}]"),
    key.map(lambda k: f"[ {k} ]  # header comment"),
    key.map(lambda k: f"[[{k}]]"),
    st.just("# a comment with [brackets] and key = value"),
    st.just(""),
)
document = st.lists(line, max_size=8).map(
    lambda ls: "\r\n".join(ls) if len(ls) % 2 else "\n".join(ls)
)


def _paths(value: object, prefix: KeyPath = ()) -> Iterator[KeyPath]:
    """Every key path of a parsed document: table keys, array elements by index."""
    items: Iterable[tuple[str | int, object]]
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for part, item in items:
        yield (*prefix, part)
        yield from _paths(item, (*prefix, part))


@settings(max_examples=400, deadline=None)
@given(text=document)
def test_the_scan_follows_every_valid_text_to_its_end(text: str) -> None:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return  # only texts tomllib accepts matter: the rest never reach it unguarded
    locator = Locator(text)
    assert locator.complete, text
    missed = [path for path in _paths(doc) if not locator.has(path)]
    assert not missed, (text, missed)


@pytest.mark.parametrize("literal", SCALARS + STRINGS)
@pytest.mark.parametrize(
    "shape",
    ["k = {}", "k = [ {} , {} ]", "k = {{ a = {}, b.c = {} }}"],
    ids=["key", "array", "inline"],
)
def test_every_value_form_is_followed(literal: str, shape: str) -> None:
    text = shape.format(literal, literal) + "\n[after]\nx = 1\n"
    tomllib.loads(text)  # the case itself is valid TOML
    locator = Locator(text)
    assert locator.complete
    assert locator.key(("after", "x")) == (text.count("\n"), 1)
