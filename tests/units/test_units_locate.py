"""The key → line:col scanner over raw TOML text."""

from __future__ import annotations

import pytest

from ddsup.units._locate import Locator

TEXT = '''# [fake] header in a comment, key = "value"
top = 1
[service]
exec = [
  "a",   # comment with ] and ,
  """multi
line = [not a key]""",
  'lit',
]
"quoted key" = { inner = { deep = 'x' }, other.dotted = 2 }
environment.X = "1"
[[arr]]
a = 1
[[arr]]
a = 2
[ready]
when = 1979-05-27 07:32:00Z
after = [1979-05-27 07:32:00, 3]
'''


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("top",), False, (2, 1)),
        (("top",), True, (2, 7)),
        (("service",), False, (3, 2)),
        (("service", "exec"), False, (4, 1)),
        (("service", "exec", 0), True, (5, 3)),
        (("service", "exec", 1), True, (6, 3)),
        (("service", "exec", 2), True, (8, 3)),
        (("service", "quoted key"), False, (10, 1)),
        (("service", "quoted key", "inner", "deep"), True, (10, 35)),
        (("service", "quoted key", "other", "dotted"), False, (10, 48)),
        (("service", "environment", "X"), False, (11, 13)),
        (("arr", 1, "a"), True, (15, 5)),
        (("arr", 1), False, (14, 1)),
        (("ready", "after", 1), True, (18, 31)),
        (("service", "exec", 7), True, (4, 1)),  # no such element: falls back to the key
        (("service", "nope"), False, (3, 2)),  # no such key: the table header
        (("nope", "nope"), False, (1, 1)),
    ],
)
def test_positions(path: tuple[str | int, ...], value: bool, expected: tuple[int, int]) -> None:
    locator = Locator(TEXT)
    found = locator.value(path) if value else locator.key(path)
    assert found == expected


def test_garbage_falls_back_to_what_was_recorded() -> None:
    locator = Locator("a = 1\nb = [1, \n")
    assert locator.key(("a",)) == (1, 1)
    assert locator.value(("b", 0)) == (2, 6)
    assert locator.key(("c",)) == (1, 1)
