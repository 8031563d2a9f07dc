"""The key → line:col scanner over raw TOML text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


# --------------------------------------------------------------------------- hostile input
# A child process caps its own address space and reads the text from stdin, so that a
# quadratic locator fails fast with MemoryError instead of taking the machine's memory
# (the old one needed 1.9 GB and 12 s for the 40 KB file, and ~40 GB for these).
MEMORY_CAP = 1024 * 1024 * 1024
CAPPED = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_CAP}, {MEMORY_CAP}))
"""
LOCATE = (
    CAPPED
    + """
from ddsup.units._locate import Locator
locator = Locator(sys.stdin.read())
deep = ("a",) * 100_000
print(locator.key(("a",)), locator.key(deep), locator.value((*deep, "k")))
"""
)
PARTS = 100_000  # 200 KB of "a.a.a…": linear work is a fraction of a second


def _run_capped(program: str, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", program, *args],
        input=text,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[" + ".".join(["a"] * PARTS) + "]\nk = 1\n", "(1, 2) (1, 200000) (2, 5)"),
        (".".join(["a"] * PARTS) + ".k = 1\n", "(1, 1) (1, 199999) (1, 200005)"),
    ],
    ids=["header", "dotted-key"],
)
def test_a_key_of_many_parts_is_located_in_linear_time_and_memory(text: str, expected: str) -> None:
    done = _run_capped(LOCATE, text)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == expected


VERIFY = (
    CAPPED
    + """
from ddsup._cli import main
sys.exit(main(["verify", *sys.argv[1:]]))
"""
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("template", "col"),
    [("[{}]\n", 2), ("{} = 1\n", 1), ("x = {{ {} = 1 }}\n", 7)],
    ids=["header", "dotted-key", "inline-table"],
)
def test_verify_refuses_a_key_of_many_parts_before_tomllib_sees_it(
    tmp_path: Path, template: str, col: int
) -> None:
    # A whole 1 MiB file of one key: tomllib alone would take minutes and gigabytes.
    key = ".".join(["a"] * ((1024 * 1024 - 20) // 2))
    unit = tmp_path / "w.toml"
    unit.write_text(template.format(key))
    done = _run_capped(VERIFY, "", str(unit))
    assert done.returncode == 65, done.stderr[-2000:]
    assert done.stdout == (
        f"{unit}:1:{col}: error: a key with more than 64 dotted parts; "
        "keys of unit files have at most 3 (section.key.name)\n"
    )


def test_a_key_of_64_parts_still_gets_its_own_message(tmp_path: Path) -> None:
    unit = tmp_path / "w.toml"
    unit.write_text("[" + ".".join(["zzz"] * 64) + "]\n")
    done = _run_capped(VERIFY, "", str(unit))
    assert done.returncode == 65
    assert f"{unit}:1:2: error: unknown section [zzz]; sections are" in done.stdout
