"""A copy of the tree with the endpoint's modules compiled by mypyc: issue 18's fourth pass.

The fourth pass asked whether compiling the modules on the per-request path to C (mypyc,
which ships with mypy) brings the endpoint's CPU per proxied request down by 20 % or
more, while trio stays interpreted. This builds such a copy, apart from the checkout (it
never leaves compiled modules in the source tree, where they would shadow the ``.py``
files for every test), so that the usual benches can run it beside ``main``:

    .venv/bin/python bench/endpoint_compiled.py --out /tmp/compiled [--rev HEAD] [--all]
    PYTHONPATH=/tmp/compiled/supervisor .venv/bin/python bench/endpoint_compare.py \\
        --only cpu --baseline main
    PYTHONPATH=/tmp/compiled/supervisor .venv/bin/python bench/endpoint_path.py

``--rev`` is the git revision exported (``git archive``); the per-request modules are
compiled by default, every endpoint module mypyc accepts with ``--all`` (all but
``_server.py``, whose async generators mypyc does not implement). The build checks that
``ddsup`` then imports the compiled modules from the copy, and says so.

The answer (BENCHMARKS.md, "Compiled with mypyc (issue 18, fourth pass)"): in-process,
0.62x the instructions and ~0.83x the CPU per plain request; live, 0.84-1.15x main's CPU
per plain request in four runs (median 0.96), not the 0.80x asked. A compiled build also
behaves differently from the Python one wherever mypy's view of a value differs from
what runs (12 endpoint tests failed on it), so it was not integrated.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MYPYC = Path(sys.executable).with_name("mypyc")

# On the path of every plain proxied request (bench/endpoint_path.py --opcodes, cProfile).
PER_REQUEST = [
    *("_admission", "_body_budget", "_connection", "_deadlines", "_ejection", "_errors"),
    *("_fast_client", "_http1", "_lanes", "_metrics", "_model_field", "_proxy"),
    *("_route_table", "_routes", "_shared_counts", "_timeseries", "_upstream", "_wire"),
]
# async generators (contextlib.asynccontextmanager): "async generators are unimplemented"
REFUSED = {"_server"}


def export(rev: str, out: Path) -> Path:
    """``supervisor/`` of git revision ``rev``, under ``out``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "supervisor"], capture_output=True, check=False
    )
    if archive.returncode:
        raise SystemExit(f"--rev {rev}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out / "supervisor"


def modules(source: Path, every: bool) -> list[str]:
    if not every:
        return PER_REQUEST
    found = sorted(p.stem for p in (source / "ddsup" / "endpoint").glob("_*.py"))
    return [m for m in found if m != "__init__" and m not in REFUSED]


def build(source: Path, names: list[str]) -> None:
    """mypyc over ``names`` in ``source`` (in place: the extension modules land beside
    the ``.py`` files, which the import system then passes over)."""
    files = [f"ddsup/endpoint/{name}.py" for name in names]
    done = subprocess.run([str(MYPYC), *files], cwd=source, capture_output=True, text=True)
    if done.returncode:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"mypyc failed (status {done.returncode})")
    shutil.rmtree(source / "build", ignore_errors=True)


def check(source: Path, names: list[str]) -> None:
    """``ddsup`` imported from ``source`` runs the compiled modules, not the ``.py`` files."""
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n"
    code += "    print(importlib.import_module('ddsup.endpoint.' + n).__file__)\n"
    env = {"PYTHONPATH": str(source), "PATH": "/usr/bin:/bin"}
    found = subprocess.run(
        [sys.executable, "-c", code, *names], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    plain = [f for f in found if not f.startswith(str(source)) or not f.endswith(".so")]
    if plain:
        raise SystemExit(f"not compiled from {source}: {plain}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="an empty or new directory")
    parser.add_argument("--rev", default="HEAD", help="git revision to export (default HEAD)")
    parser.add_argument("--all", action="store_true", help="every endpoint module mypyc takes")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if any(args.out.iterdir()):
        raise SystemExit(f"--out {args.out}: not empty")
    source = export(args.rev, args.out)
    names = modules(source, args.all)
    build(source, names)
    check(source, names)
    print(f"{len(names)} endpoint modules compiled; run with PYTHONPATH={source}")


if __name__ == "__main__":
    main()
