"""Fuzz the unit-file loader: random and mutated unit files must only ever give problems.

``test_units_fuzz.py`` runs it on every test run; for a longer run,
``.venv/bin/python tests/units/fuzz_units.py [COUNT] [--seed N]`` (default 10,000
inputs) prints the number of inputs, how many were accepted, how many were rejected with
``UnitFileError``, and how many raised anything else (must be 0), then exits 1 if any did.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from ddsup._errors import UnitFileError
from ddsup.units import load_unit_set, parse_unit_set
from ddsup.units._schema import SECTIONS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "units" / "examples").glob("*/*.toml"))
FILE_NAMES = ("lane@", "endpoint", "worker", "svc", "svc@", "other", "x y", "lane")
JUNK_WORDS = (
    "",
    "auto",
    "{port}",
    "{nope}",
    "{{",
    "}",
    "{",
    "5",
    "2s",
    "SIGTERM",
    "lane",
    "é",
    "\\",
)
ALL_KEYS = tuple(key.name for section in SECTIONS for key in section.keys)
SECTION_NAMES = tuple(section.name for section in SECTIONS)


def toml_key(key: str) -> str:
    """A key, quoted when it is not bare."""
    bare = key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key)
    return key if bare else toml_string(key)


def toml_string(text: str) -> str:
    """A TOML basic string (JSON escaping is valid TOML for every character)."""
    return json.dumps(text)


def toml_value(value: object) -> str:
    """Serialise a parsed-TOML-like value (our own writer: no dependency)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(type(value))


def toml_document(doc: dict[str, object]) -> str:
    """Tables as ``[section]`` headers, everything else as top-level ``key = value``."""
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for name, table in doc.items():
        if isinstance(table, dict):
            lines.append(f"[{toml_key(name)}]")
            lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def random_value(rng: random.Random, depth: int = 0) -> object:
    choice = rng.randrange(10 if depth < 3 else 7)
    if choice == 0:
        return rng.choice([True, False])
    if choice in (1, 2):
        return rng.choice([0, 1, -1, 8000, 65536, 2**63 - 1, rng.randrange(-5, 300)])
    if choice == 3:
        return rng.choice([0.5, -1.0, 1e300, math.inf, math.nan])
    if choice in (4, 5, 6):
        parts = rng.choices(JUNK_WORDS + ALL_KEYS, k=rng.randrange(1, 4))
        return rng.choice(["", " "]).join(parts)
    if choice in (7, 8):
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = rng.choices((*ALL_KEYS, "A", "BAD-NAME", ""), k=rng.randrange(3))
    return {k: random_value(rng, depth + 1) for k in keys}


def random_document(rng: random.Random) -> str:
    doc: dict[str, object] = {}
    for name in rng.sample((*SECTION_NAMES, "servce", "junk"), k=rng.randrange(1, 6)):
        keys = rng.sample((*ALL_KEYS, "typo", "x"), k=rng.randrange(0, 6))
        doc[name] = {key: random_value(rng) for key in keys}
    if rng.random() < 0.7:
        unit = doc.setdefault("unit", {})
        assert isinstance(unit, dict)
        unit["type"] = rng.choice(["lane", "endpoint", "worker", "service", "oneshot", "x"])
    return toml_document(doc)


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One random edit: delete/duplicate a line, insert junk, flip a byte, truncate."""
    lines = data.split(b"\n")
    op = rng.randrange(6)
    at = rng.randrange(len(lines))
    if op == 0:
        del lines[at]
    elif op == 1:
        lines.insert(at, lines[at])
    elif op == 2:
        junk = rng.choice(
            [b"[", b"]", b"{", b'"', b"=", b"{prot}", b"\xff", b"\x00", b"x = 1", b"#"]
        )
        pos = rng.randrange(len(lines[at]) + 1)
        lines[at] = lines[at][:pos] + junk + lines[at][pos:]
    elif op == 3:
        if b"=" in lines[at]:
            key = lines[at].split(b"=", 1)[0]
            lines[at] = key + b"= " + toml_value(random_value(rng)).encode()
    elif op == 4:
        return data[: rng.randrange(len(data) + 1)]
    else:
        pos = rng.randrange(len(data) + 1)
        return data[:pos] + bytes([rng.randrange(256)]) + data[pos + 1 :]
    return b"\n".join(lines)


def random_unit_files(rng: random.Random) -> dict[str, bytes]:
    """File name → contents of one random unit directory."""
    files: dict[str, bytes] = {}
    for _ in range(rng.randrange(1, 4)):
        if rng.random() < 0.5:
            example = rng.choice(EXAMPLES)
            data = example.read_bytes()
            for _ in range(rng.randrange(1, 4)):
                data = mutate(rng, data)
            name = example.stem if rng.random() < 0.8 else rng.choice(FILE_NAMES)
        else:
            data = random_document(rng).encode()
            name = rng.choice(FILE_NAMES)
        files[f"{name}.toml"] = data
    return files


def check_files(files: dict[str, bytes]) -> str:
    """``ok``, ``rejected``, or the traceback of anything that is not a UnitFileError."""
    try:
        parse_unit_set("units", files)
    except UnitFileError as err:
        bad = [p for p in err.problems if p.line < 1 or p.col < 1 or not p.message]
        return f"bad problem positions: {bad}" if bad or not err.problems else "rejected"
    except Exception:
        return traceback.format_exc()
    return "ok"


def check_directory(directory: Path, files: dict[str, bytes]) -> str:
    """Like :func:`check_files`, through real files in ``directory`` (emptied first)."""
    for old in directory.iterdir():
        old.unlink()
    for name, data in files.items():
        (directory / name).write_bytes(data)
    try:
        load_unit_set(directory)
    except UnitFileError as err:
        bad = [p for p in err.problems if p.line < 1 or p.col < 1 or not p.message]
        return f"bad problem positions: {bad}" if bad or not err.problems else "rejected"
    except Exception:
        return traceback.format_exc()
    return "ok"


def run(count: int, seed: int) -> Iterator[tuple[dict[str, bytes], str]]:
    """Check ``count`` random unit sets in memory; yields each input with its outcome."""
    rng = random.Random(seed)
    for _ in range(count):
        files = random_unit_files(rng)
        yield files, check_files(files)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("count", nargs="?", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("FUZZ_SEED", "1")))
    args = parser.parse_args()
    outcomes = {"ok": 0, "rejected": 0, "other": 0}
    started = time.perf_counter()
    for files, outcome in run(args.count, args.seed):
        if outcome in outcomes:
            outcomes[outcome] += 1
            continue
        outcomes["other"] += 1
        if outcomes["other"] <= 3:
            print(f"untyped failure for {sorted(files)}:\n{outcome}", file=sys.stderr)
    elapsed = time.perf_counter() - started
    print(
        f"inputs: {args.count}  accepted: {outcomes['ok']}  rejected: {outcomes['rejected']}  "
        f"non-typed exceptions: {outcomes['other']}  ({elapsed:.1f} s, seed {args.seed})"
    )
    return 1 if outcomes["other"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
