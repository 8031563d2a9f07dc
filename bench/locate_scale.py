"""Time and peak memory of the unit-file position locator on keys of many dotted parts.

Usage: ``python bench/locate_scale.py [--sizes 10,40,160,1024] [--baseline REV]
[--limit SECONDS] [--memory MIB]``.

Each measurement runs in a child process that caps its own address space (``--memory``)
and is killed after ``--limit`` seconds, so that a quadratic implementation reports
"memory" or "time" instead of taking the machine down. Inputs are the shapes of issue
#17: one ``[a.a.a…]`` header and one ``a.a.a… = 1`` dotted key, ``--sizes`` KiB each.
``--baseline REV`` also measures ``supervisor/ddsup/units/_locate.py`` as it was at git
revision ``REV`` (e.g. ``a9e7ec1``, before the linear rewrite), side by side in one run.
The last column is ``ddsup verify`` end to end on the same file (the current tree only).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCATOR = "supervisor/ddsup/units/_locate.py"

CHILD = """
import importlib.util, resource, sys, time
cap = int(sys.argv[2]) * 1024 * 1024
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
spec = importlib.util.spec_from_file_location("locate_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
text = sys.stdin.read()
start = time.perf_counter()
try:
    module.Locator(text).key(("a",))
except MemoryError:
    print("memory")
    sys.exit(0)
elapsed = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{elapsed:.3f}s {peak:.0f}MiB")
"""


def make_text(kind: str, kib: int) -> str:
    parts = max(1, kib * 1024 // 2)
    key = ".".join(["a"] * parts)
    return f"[{key}]\n" if kind == "header" else f"{key} = 1\n"


def measure(locator: Path, text: str, limit: float, memory: int) -> str:
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(locator), str(memory)],
            input=text,
            capture_output=True,
            text=True,
            timeout=limit,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"time (>{limit:g}s)"
    if done.returncode != 0:
        return f"failed ({done.stderr.strip().splitlines()[-1:]})"
    return done.stdout.strip()


def verify_seconds(text: str, limit: float) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        unit = Path(tmp) / "w.toml"
        unit.write_text(text)
        start = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, "-m", "ddsup", "verify", str(unit)],
                capture_output=True,
                text=True,
                timeout=limit,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"time (>{limit:g}s)"
        return f"{time.perf_counter() - start:.3f}s (exit {done.returncode})"


def baseline_file(rev: str, directory: str) -> Path:
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:{LOCATOR}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(directory) / "locate_baseline.py"
    path.write_text(source)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default="10,40,160,1024", help="KiB per input (default: %(default)s)"
    )
    parser.add_argument(
        "--baseline", metavar="REV", help="also measure _locate.py at this git revision"
    )
    parser.add_argument(
        "--limit", type=float, default=60.0, help="seconds per measurement (default: %(default)s)"
    )
    parser.add_argument(
        "--memory",
        type=int,
        default=2048,
        help="MiB of address space per child (default: %(default)s)",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        variants = [("current", ROOT / LOCATOR)]
        if args.baseline:
            variants.append((f"at {args.baseline}", baseline_file(args.baseline, tmp)))
        print(
            f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.2f}, cap {args.memory} MiB, limit {args.limit:g}s"
        )
        header = ["input", "KiB", "parts", *(name for name, _ in variants), "ddsup verify"]
        print("  ".join(f"{h:<22}" for h in header).rstrip())
        for kind in ("header", "dotted-key"):
            for kib in sizes:
                text = make_text(kind, kib)
                row = [kind, str(kib), str(text.count(".") + 1)]
                row += [measure(path, text, args.limit, args.memory) for _, path in variants]
                row.append(verify_seconds(text, args.limit))
                print("  ".join(f"{c:<22}" for c in row).rstrip(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
