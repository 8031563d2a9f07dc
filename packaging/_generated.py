"""The one ``main`` of the generated packaging files (bash completion, man page).

Each generator renders its file from ddsup's own parser; this writes it, or with
``--check`` says whether the committed copy is stale (CI and a test run that).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def write_or_check(output: Path, render: Callable[[], str], script: str, summary: str) -> int:
    parser = argparse.ArgumentParser(description=summary)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        current = output.read_text(encoding="utf-8") if output.exists() else ""
        if current != text:
            print(
                f"{output} is stale: run `python {Path(script).name}` in packaging/",
                file=sys.stderr,
            )
            return 1
        print(f"{output.name} is up to date", file=sys.stderr)
        return 0
    output.write_text(text, encoding="utf-8")
    print(f"wrote {output}", file=sys.stderr)
    return 0
