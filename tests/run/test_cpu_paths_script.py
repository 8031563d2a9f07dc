"""``bench/cpu_paths.py`` sorts ``perf``'s samples by kind of process and kernel path.

Its figures (how much of the agents' CPU in a start's first wave is copy-on-write faults,
how busy the two CPUs were) go into BENCHMARKS, so the reading is held to hand-made
``perf script`` text: a stack's innermost matching path wins over an outer one (a
copy-on-write fault is a page fault too), a stack without kernel frames is Python's own
work, a command name with spaces is read whole, a thread's samples count for its
process, and a window takes the samples from its start up to its end.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENT, LANE = 200, 300


def _load_script(name: str) -> ModuleType:
    """A bench script as a module, known by its name (``cpu_paths`` imports its sibling
    ``sched_waits`` so; dataclasses look their module up), without ``bench`` on the path."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


Roles = _load_script("sched_waits").Roles
cpu_paths = _load_script("cpu_paths")

KERNEL = "([kernel.kallsyms])"
PYTHON = "(/usr/lib/libpython3.11.so.1.0)"


def _sample(comm: str, pid: int, tid: int, at: float, frames: list[str]) -> str:
    lines = [f"{comm:>16} {pid}/{tid} {at:.6f}: "]
    lines += [f"\t    ffffffff8{n:07x} {frame}" for n, frame in enumerate(frames)]
    return "\n".join(lines)


COW = [
    f"copy_mc_enhanced_fast_string {KERNEL}",
    f"do_wp_page {KERNEL}",
    f"__handle_mm_fault {KERNEL}",
    f"handle_mm_fault {KERNEL}",
    f"exc_page_fault {KERNEL}",
    f"_PyEval_EvalFrameDefault {PYTHON}",
]
CGROUP_WRITE = [
    f"_raw_spin_unlock_irqrestore {KERNEL}",
    f"cgroup_migrate {KERNEL}",
    f"__cgroup_procs_write {KERNEL}",
    f"vfs_write {KERNEL}",
    f"ksys_write {KERNEL}",
    f"__libc_write {PYTHON}",
]
PYTHON_ONLY = [f"_PyEval_EvalFrameDefault {PYTHON}", f"PyEval_EvalCode {PYTHON}"]
IRQ_EXIT = [f"irqentry_exit_to_user_mode {KERNEL}", f"_PyObject_Malloc {PYTHON}"]


def test_a_stack_is_named_by_its_first_listed_path() -> None:
    assert cpu_paths.path_of(COW) == "copy-on-write fault"
    assert cpu_paths.path_of(COW[2:]) == "other page fault"
    assert cpu_paths.path_of(CGROUP_WRITE) == "cgroup"  # not "file": cgroup is listed first
    assert cpu_paths.path_of(CGROUP_WRITE[3:]) == "file"
    assert cpu_paths.path_of(PYTHON_ONLY) == "user"
    assert cpu_paths.path_of(IRQ_EXIT) == "other kernel"
    # CPython's socket module has its own sock_recv: user space, not the kernel's socket path
    socket_module = "(/usr/lib/python3.11/lib-dynload/_socket.cpython-311-x86_64-linux-gnu.so)"
    assert cpu_paths.path_of([f"sock_recv {socket_module}", *PYTHON_ONLY]) == "user"


def test_samples_by_kind_and_window() -> None:
    thread = AGENT + 7
    text = "\n\n".join(
        [
            _sample("python", AGENT, AGENT, 10.000, COW),
            _sample("Trio thread 0", AGENT, thread, 10.010, CGROUP_WRITE),  # the agent's thread
            _sample("python", AGENT, AGENT, 10.020, PYTHON_ONLY),
            _sample("busybox", LANE, LANE, 10.030, COW),
            _sample("busybox", LANE + 1, LANE + 1, 10.040, PYTHON_ONLY),  # a lane's child
            _sample("swapper", 0, 0, 10.050, IRQ_EXIT),
            _sample("python", AGENT, AGENT, 10.500, COW),  # the window's end: not in it
        ]
    )
    found = list(cpu_paths.samples(text + "\n", offset=100.0))
    assert [s.comm for s in found[:2]] == ["python", "Trio thread 0"]
    assert found[0].at == pytest.approx(110.0)
    roles = Roles(controller=100, kinds={AGENT: "agent", LANE: "lane"})
    counts = cpu_paths.table(found, roles, 110.0, 110.5)
    assert {kind: dict(paths) for kind, paths in counts.items()} == {
        "agent": {"copy-on-write fault": 1, "cgroup": 1, "user": 1},
        "lane": {"copy-on-write fault": 1},
        "lane's child": {"user": 1},
        "idle": {"other kernel": 1},
    }
