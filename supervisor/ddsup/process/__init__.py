"""Processes: start one without a shell, stop it with everything it started, leave nothing.

Bottom up: ``_proc`` (the one reader of ``/proc``), ``_cgroup`` (a run's control
groups), ``_registry`` (the (PID, start time) records of what a run had), ``_sweep``
(SIGKILL by invocation id), ``_ending`` (all of those without a supervisor),
``_sentinel`` (runs ``_ending`` when the supervisor dies), ``_table`` (the process tree,
read once for concurrent stops), ``_managed`` (children whose owner reaps them),
``_subreaper_flag`` and ``_subreaper`` (orphans of our units become ours, and are
reaped), ``_spawner_program`` and ``_spawner`` (a unit's process cloned into its cgroup
by a process of its own, and the supervisor's end of it), ``_unit_scope`` (one unit's
cgroup and records), ``_opening`` (all layers of one supervisor, opened before any
child, without trio, and the records of what it has seen) and ``_containment`` (the
same layers owned inside trio, closed once: the entry point; the end-of-run sweep),
``_output_log`` (a unit's output into its rotating log file,
named in a held directory by ``_file_at``),
``_popen`` (a child started before trio runs), ``_adopted`` (such children waited for
once trio runs, and a child another process forked, ours once it ended),
``_title`` (a command line rewritten in place) and ``_child`` (spawn or adopt, wait,
stop a tree).
``docs/no-orphans.md`` tells which layer catches what.

Its names are imported when first used (PEP 562, as in ``ddsup.channel``): a command
that only reads one module of it (``ddsup status`` checking a pid with ``_proc``) then
imports neither trio nor psutil.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddsup._exit import ExitStatus as ExitStatus
from ddsup._lazy import lazy_names

if TYPE_CHECKING:
    from ddsup.process._adopted import AdoptedProcess as AdoptedProcess
    from ddsup.process._adopted import ReparentedChild as ReparentedChild
    from ddsup.process._cgroup import find_run_cgroups as find_run_cgroups
    from ddsup.process._child import ChildProcess as ChildProcess
    from ddsup.process._child import adopt as adopt
    from ddsup.process._child import identity_of as identity_of
    from ddsup.process._child import spawn as spawn
    from ddsup.process._child import supervised as supervised
    from ddsup.process._containment import Containment as Containment
    from ddsup.process._containment import open_containment as open_containment
    from ddsup.process._containment import sweep_until_gone as sweep_until_gone
    from ddsup.process._ending import Ended as Ended
    from ddsup.process._ending import end_on_this_node as end_on_this_node
    from ddsup.process._file_at import FileAt as FileAt
    from ddsup.process._file_at import LogFile as LogFile
    from ddsup.process._layers import Layers as Layers
    from ddsup.process._managed import ManagedChildren as ManagedChildren
    from ddsup.process._managed import fork_lock as fork_lock
    from ddsup.process._managed import managed_children as managed_children
    from ddsup.process._opening import CGROUP_ENV as CGROUP_ENV
    from ddsup.process._opening import OpenedLayers as OpenedLayers
    from ddsup.process._opening import open_layers as open_layers
    from ddsup.process._output_log import CopyTask as CopyTask
    from ddsup.process._output_log import OutputLog as OutputLog
    from ddsup.process._output_log import output_pipe as output_pipe
    from ddsup.process._output_log import rotated_log as rotated_log
    from ddsup.process._popen import LogError as LogError
    from ddsup.process._popen import SpawnError as SpawnError
    from ddsup.process._popen import open_log as open_log
    from ddsup.process._popen import start_child as start_child
    from ddsup.process._popen import start_forker as start_forker
    from ddsup.process._proc import pids as pids
    from ddsup.process._proc import read_environ as read_environ
    from ddsup.process._proc import read_stat as read_stat
    from ddsup.process._registry import records_directory as records_directory
    from ddsup.process._sentinel import Sentinel as Sentinel
    from ddsup.process._sentinel import start_sentinel as start_sentinel
    from ddsup.process._subreaper import reap_adopted_children as reap_adopted_children
    from ddsup.process._subreaper_flag import become_subreaper as become_subreaper
    from ddsup.process._subreaper_flag import is_subreaper as is_subreaper
    from ddsup.process._sweep import AGENT_ENV as AGENT_ENV
    from ddsup.process._sweep import find_run_processes as find_run_processes
    from ddsup.process._sweep import sweep as sweep
    from ddsup.process._sweep import sweep_until_gone_sync as sweep_until_gone_sync
    from ddsup.process._table import ProcessTable as ProcessTable
    from ddsup.process._table import process_table as process_table
    from ddsup.process._table import read_process_table as read_process_table
    from ddsup.process._title import retitle as retitle

_LAZY = {
    "AdoptedProcess": "ddsup.process._adopted",
    "open_log": "ddsup.process._popen",
    "start_forker": "ddsup.process._popen",
    "pids": "ddsup.process._proc",
    "read_stat": "ddsup.process._proc",
    "records_directory": "ddsup.process._registry",
    "ReparentedChild": "ddsup.process._adopted",
    "retitle": "ddsup.process._title",
    "find_run_cgroups": "ddsup.process._cgroup",
    "ChildProcess": "ddsup.process._child",
    "LogError": "ddsup.process._popen",
    "SpawnError": "ddsup.process._popen",
    "identity_of": "ddsup.process._child",
    "spawn": "ddsup.process._child",
    "supervised": "ddsup.process._child",
    "adopt": "ddsup.process._child",
    "CGROUP_ENV": "ddsup.process._opening",
    "OpenedLayers": "ddsup.process._opening",
    "open_layers": "ddsup.process._opening",
    "start_child": "ddsup.process._popen",
    "Containment": "ddsup.process._containment",
    "Layers": "ddsup.process._layers",
    "open_containment": "ddsup.process._containment",
    "Ended": "ddsup.process._ending",
    "end_on_this_node": "ddsup.process._ending",
    "FileAt": "ddsup.process._file_at",
    "LogFile": "ddsup.process._file_at",
    "sweep_until_gone": "ddsup.process._containment",
    "ManagedChildren": "ddsup.process._managed",
    "fork_lock": "ddsup.process._managed",
    "managed_children": "ddsup.process._managed",
    "CopyTask": "ddsup.process._output_log",
    "OutputLog": "ddsup.process._output_log",
    "output_pipe": "ddsup.process._output_log",
    "rotated_log": "ddsup.process._output_log",
    "read_environ": "ddsup.process._proc",
    "Sentinel": "ddsup.process._sentinel",
    "start_sentinel": "ddsup.process._sentinel",
    "become_subreaper": "ddsup.process._subreaper_flag",
    "is_subreaper": "ddsup.process._subreaper_flag",
    "reap_adopted_children": "ddsup.process._subreaper",
    "AGENT_ENV": "ddsup.process._sweep",
    "find_run_processes": "ddsup.process._sweep",
    "sweep": "ddsup.process._sweep",
    "sweep_until_gone_sync": "ddsup.process._sweep",
    "ProcessTable": "ddsup.process._table",
    "process_table": "ddsup.process._table",
    "read_process_table": "ddsup.process._table",
}

__getattr__ = lazy_names(__name__, _LAZY, globals())
