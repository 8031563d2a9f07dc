"""The repository speaks of the product, not of how the work on it went.

A reader of the docs, the code's comments, the benches or the changelog cannot follow
"this stop", "the nineteenth stop", a machine "lent", "issue 19" or "SPEC §8": no work
round, issue tracker or SPEC file ships with ddsup. Say what the product does and why;
history belongs in git, measured figures in BENCHMARKS.md with their command.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The product tree: what a user or a maintainer reads.
PRODUCT = (
    "README.md",
    "CHANGELOG.md",
    "BENCHMARKS.md",
    "CONTRIBUTING.md",
    "pyproject.toml",
    "docs",
    "supervisor",
    "bench",
    "units",
    "packaging",
    "scripts",
    ".ci",
)
ORDINALS = [
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "seventh",
    "eighth",
    "ninth",
    "tenth",
    "eleventh",
    "twelfth",
    "thirteenth",
    "fourteenth",
    "fifteenth",
    "sixteenth",
    "seventeenth",
    "eighteenth",
    "nineteenth",
    "twentieth",
]
# Words may wrap onto the next line, a comment's ``#`` before them.
GAP = r"[\s#]+"
# "a second stop signal" and "the first stop string" are the product's own words.
WORDS = re.compile(
    rf"\bthis{GAP}stop\b"
    rf"|\b(?:{'|'.join(ORDINALS)}|\d+(?:st|nd|rd|th)){GAP}stop\b(?!{GAP}(?:signal|string))"
    r"|\blent\b"
    rf"|\bdevice{GAP}draw\b"
    rf"|\bissues?{GAP}\d+"
    rf"|\bSPEC{GAP}§",
    re.IGNORECASE,
)


def _texts() -> list[Path]:
    files: list[Path] = []
    for name in PRODUCT:
        path = ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += (
                p for p in sorted(path.rglob("*")) if p.is_file() and "__pycache__" not in p.parts
            )
    return files


def find_words(text: str) -> list[tuple[int, str]]:
    """(line number, words) of each place in ``text`` that speaks of the work process."""
    return [
        (text.count("\n", 0, match.start()) + 1, " ".join(match.group(0).split()))
        for match in WORDS.finditer(text)
    ]


def test_the_words_are_found() -> None:
    spoken = (
        "the nineteenth stop's code; this stop; on a lent H200; the device draw;\n"
        "issue 19 and issue #22; issues 18 and 19; SPEC §8; the 19th stop; (issue\n"
        "    # 17); the tenth\nstop"
    )
    assert find_words(spoken) == [
        (1, "nineteenth stop"),
        (1, "this stop"),
        (1, "lent"),
        (1, "device draw"),
        (2, "issue 19"),
        (2, "issue #22"),
        (2, "issues 18"),
        (2, "SPEC §"),
        (2, "19th stop"),
        (2, "issue # 17"),
        (3, "tenth stop"),
    ]
    product = "a second stop signal kills everything; cut at the first stop\nstring; lentils"
    assert find_words(product) == []


def test_the_product_tree_speaks_of_the_product() -> None:
    found = []
    for path in _texts():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # images
            continue
        relative = path.relative_to(ROOT)
        found += [f"{relative}:{number}: {words}" for number, words in find_words(text)]
    assert not found, (
        "say what the product does and why; history belongs in git, figures in "
        "BENCHMARKS.md:\n" + "\n".join(found[:40]) + f"\n({len(found)} places)"
    )
