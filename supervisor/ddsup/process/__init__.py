"""Processes: start one without a shell, stop it with everything it started, leave nothing.

Bottom up: ``_proc`` (the one reader of ``/proc``), ``_cgroup`` (a run's control
groups), ``_registry`` (the (PID, start time) records of what a run had), ``_sweep``
(SIGKILL by invocation id), ``_ending`` (all of those without a supervisor),
``_sentinel`` (runs ``_ending`` when the supervisor dies), ``_table`` (the process tree,
read once for concurrent stops), ``_managed`` (children whose owner reaps them),
``_subreaper`` (orphans of our units become ours), ``_final_sweep`` (the end-of-run
sweep), ``_unit_scope`` (one unit's cgroup and records), ``_containment`` (all layers of
one supervisor, opened once: the entry point), ``_child`` (spawn, wait, stop a tree).
``docs/no-orphans.md`` tells which layer catches what.
"""

from __future__ import annotations

from ddsup._exit import ExitStatus as ExitStatus
from ddsup.process._cgroup import find_run_cgroups as find_run_cgroups
from ddsup.process._child import ChildProcess as ChildProcess
from ddsup.process._child import SpawnError as SpawnError
from ddsup.process._child import identity_of as identity_of
from ddsup.process._child import spawn as spawn
from ddsup.process._child import supervised as supervised
from ddsup.process._containment import CGROUP_ENV as CGROUP_ENV
from ddsup.process._containment import Containment as Containment
from ddsup.process._containment import Layers as Layers
from ddsup.process._containment import open_containment as open_containment
from ddsup.process._ending import Ended as Ended
from ddsup.process._ending import end_on_this_node as end_on_this_node
from ddsup.process._final_sweep import sweep_until_gone as sweep_until_gone
from ddsup.process._managed import ManagedChildren as ManagedChildren
from ddsup.process._managed import managed_children as managed_children
from ddsup.process._proc import read_environ as read_environ
from ddsup.process._sentinel import Sentinel as Sentinel
from ddsup.process._sentinel import start_sentinel as start_sentinel
from ddsup.process._subreaper import become_subreaper as become_subreaper
from ddsup.process._subreaper import is_subreaper as is_subreaper
from ddsup.process._subreaper import reap_adopted_children as reap_adopted_children
from ddsup.process._sweep import find_run_processes as find_run_processes
from ddsup.process._sweep import sweep as sweep
from ddsup.process._sweep import sweep_until_gone_sync as sweep_until_gone_sync
from ddsup.process._table import ProcessTable as ProcessTable
from ddsup.process._table import process_table as process_table
from ddsup.process._table import read_process_table as read_process_table
