"""A run's record: the state vocabulary, its events, its outcome, its status, its state dir.

Everything that writes what a run did (the service, the controller) and everything that
reads it back (``status``, ``logs``, metrics, the console) shares these: ``_states`` (the
one enum of instance states and its named sets), ``_outcome`` (the typed causes that end
a run, ``result.json``), ``_events`` (one frozen dataclass per kind of event;
``_event_parse`` and ``_fields`` read them back),
``_event_log`` (``events.jsonl`` written and read), ``_instance`` (an instance's record,
the fold of its events), ``_status`` (``status`` rows and the live snapshot),
``_state_dir`` (where it all lives, held open by its writers), ``_attempts`` (a job's
attempts in one state directory, the earlier ones moved aside), ``_run_info``
(``run.json``: how to find and recognise a run), ``_private`` (files written without
following links, directories held by descriptor, both checked before being trusted),
``_faults`` (a full or read-only disk: one warning, the run goes on) and ``_display``
(how states and durations look to a person).
Reading a whole run back:
``_series`` (the endpoint's time series format), ``_run_files`` (every file of a run,
tolerantly), ``_timeline`` (events replayed into segments) and ``_efficiency`` (where the
GPU time went).

Its names are imported when first used (PEP 562, ``ddsup._lazy``): the node agents and
``ddsup start`` write a run without importing what reads a whole run back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddsup._lazy import lazy_names

if TYPE_CHECKING:
    from ddsup.record._attempts import ATTEMPTS as ATTEMPTS
    from ddsup.record._attempts import begin_attempt as begin_attempt
    from ddsup.record._display import duration as duration
    from ddsup.record._display import human_duration as human_duration
    from ddsup.record._display import paint as paint
    from ddsup.record._display import symbol as symbol
    from ddsup.record._efficiency import CATEGORIES as CATEGORIES
    from ddsup.record._efficiency import MEANINGS as MEANINGS
    from ddsup.record._efficiency import Efficiency as Efficiency
    from ddsup.record._efficiency import EfficiencyJson as EfficiencyJson
    from ddsup.record._efficiency import GpuTime as GpuTime
    from ddsup.record._efficiency import LaneTime as LaneTime
    from ddsup.record._efficiency import efficiency as efficiency
    from ddsup.record._efficiency import efficiency_json as efficiency_json
    from ddsup.record._efficiency import efficiency_line as efficiency_line
    from ddsup.record._efficiency import efficiency_of as efficiency_of
    from ddsup.record._efficiency import gpu_time_text as gpu_time_text
    from ddsup.record._efficiency import summary_line as summary_line
    from ddsup.record._efficiency import whole_percents as whole_percents
    from ddsup.record._event_log import EventLog as EventLog
    from ddsup.record._event_log import read_events as read_events
    from ddsup.record._event_parse import parse_event as parse_event
    from ddsup.record._events import EventLine as EventLine
    from ddsup.record._events import KillingEverything as KillingEverything
    from ddsup.record._events import PreflightWarning as PreflightWarning
    from ddsup.record._events import RecordedEvent as RecordedEvent
    from ddsup.record._events import RunEnding as RunEnding
    from ddsup.record._events import RunFinished as RunFinished
    from ddsup.record._events import RunLine as RunLine
    from ddsup.record._events import RunStarting as RunStarting
    from ddsup.record._events import RunStopping as RunStopping
    from ddsup.record._events import SignalForwarded as SignalForwarded
    from ddsup.record._events import SweepLeftSurvivors as SweepLeftSurvivors
    from ddsup.record._faults import FaultsJson as FaultsJson
    from ddsup.record._faults import incomplete as incomplete
    from ddsup.record._faults import say as say
    from ddsup.record._faults import silence as silence
    from ddsup.record._fields import FieldReader as FieldReader
    from ddsup.record._instance import InstanceRecord as InstanceRecord
    from ddsup.record._instance import fold as fold
    from ddsup.record._log_files import last_lines as last_lines
    from ddsup.record._log_files import log_files as log_files
    from ddsup.record._log_files import tail_offset as tail_offset
    from ddsup.record._node_events import COMPLETED as COMPLETED
    from ddsup.record._node_events import NODE_EVENTS as NODE_EVENTS
    from ddsup.record._node_events import Contained as Contained
    from ddsup.record._node_events import ContainmentLine as ContainmentLine
    from ddsup.record._node_events import LivenessFailed as LivenessFailed
    from ddsup.record._node_events import NodeEvent as NodeEvent
    from ddsup.record._node_events import NodeEventLine as NodeEventLine
    from ddsup.record._node_events import ProbeAnswered as ProbeAnswered
    from ddsup.record._node_events import ProcessExited as ProcessExited
    from ddsup.record._node_events import ProcessStarted as ProcessStarted
    from ddsup.record._node_events import UnitTransition as UnitTransition
    from ddsup.record._outcome import Cause as Cause
    from ddsup.record._outcome import CauseJson as CauseJson
    from ddsup.record._outcome import Outcome as Outcome
    from ddsup.record._outcome import OutcomeJson as OutcomeJson
    from ddsup.record._outcome import Stopped as Stopped
    from ddsup.record._outcome import UnitFailure as UnitFailure
    from ddsup.record._outcome import WorkerEnded as WorkerEnded
    from ddsup.record._private import HeldDir as HeldDir
    from ddsup.record._private import check_private as check_private
    from ddsup.record._private import open_private_dir as open_private_dir
    from ddsup.record._private import write_private as write_private
    from ddsup.record._run_files import PlanFile as PlanFile
    from ddsup.record._run_files import PlannedInstance as PlannedInstance
    from ddsup.record._run_files import PlannedNode as PlannedNode
    from ddsup.record._run_files import RunFiles as RunFiles
    from ddsup.record._run_files import load_run as load_run
    from ddsup.record._run_info import ControlAddress as ControlAddress
    from ddsup.record._run_info import RunInfo as RunInfo
    from ddsup.record._run_info import RunInfoJson as RunInfoJson
    from ddsup.record._samples import LaneSamples as LaneSamples
    from ddsup.record._series import CUT as CUT
    from ddsup.record._series import FAILED as FAILED
    from ddsup.record._series import FINISHED as FINISHED
    from ddsup.record._series import SERIES_DIR as SERIES_DIR
    from ddsup.record._series import Series as Series
    from ddsup.record._series import SeriesLine as SeriesLine
    from ddsup.record._series import header_line as header_line
    from ddsup.record._series import read_series as read_series
    from ddsup.record._series import series_file_name as series_file_name
    from ddsup.record._state_dir import WORKERS_FILE as WORKERS_FILE
    from ddsup.record._state_dir import StateDir as StateDir
    from ddsup.record._state_dir import hold_state_dir as hold_state_dir
    from ddsup.record._state_dir import newest_state_dir as newest_state_dir
    from ddsup.record._state_dir import open_state_dir as open_state_dir
    from ddsup.record._state_dir import run_dirs as run_dirs
    from ddsup.record._states import ALLOWED as ALLOWED
    from ddsup.record._states import FINAL as FINAL
    from ddsup.record._states import LIVE as LIVE
    from ddsup.record._states import LOADING as LOADING
    from ddsup.record._states import NOTABLE as NOTABLE
    from ddsup.record._states import IllegalTransition as IllegalTransition
    from ddsup.record._states import InstanceState as InstanceState
    from ddsup.record._status import InstanceStatus as InstanceStatus
    from ddsup.record._status import InstanceStatusJson as InstanceStatusJson
    from ddsup.record._status import PlannedFacts as PlannedFacts
    from ddsup.record._status import RunSnapshot as RunSnapshot
    from ddsup.record._status import SnapshotJson as SnapshotJson
    from ddsup.record._status import StatusRows as StatusRows
    from ddsup.record._status import planned_facts as planned_facts
    from ddsup.record._timeline import Life as Life
    from ddsup.record._timeline import Mark as Mark
    from ddsup.record._timeline import MarkKind as MarkKind
    from ddsup.record._timeline import RunSpan as RunSpan
    from ddsup.record._timeline import replay as replay
    from ddsup.record._timeline import run_span as run_span

_LAZY = {
    "ATTEMPTS": "ddsup.record._attempts",
    "begin_attempt": "ddsup.record._attempts",
    "duration": "ddsup.record._display",
    "human_duration": "ddsup.record._display",
    "paint": "ddsup.record._display",
    "symbol": "ddsup.record._display",
    "CATEGORIES": "ddsup.record._efficiency",
    "GpuTime": "ddsup.record._efficiency",
    "LaneTime": "ddsup.record._efficiency",
    "MEANINGS": "ddsup.record._efficiency",
    "efficiency_of": "ddsup.record._efficiency",
    "gpu_time_text": "ddsup.record._efficiency",
    "summary_line": "ddsup.record._efficiency",
    "whole_percents": "ddsup.record._efficiency",
    "KillingEverything": "ddsup.record._events",
    "PreflightWarning": "ddsup.record._events",
    "RunEnding": "ddsup.record._events",
    "RunFinished": "ddsup.record._events",
    "RunStarting": "ddsup.record._events",
    "RunStopping": "ddsup.record._events",
    "SignalForwarded": "ddsup.record._events",
    "SweepLeftSurvivors": "ddsup.record._events",
    "incomplete": "ddsup.record._faults",
    "say": "ddsup.record._faults",
    "silence": "ddsup.record._faults",
    "fold": "ddsup.record._instance",
    "last_lines": "ddsup.record._log_files",
    "log_files": "ddsup.record._log_files",
    "tail_offset": "ddsup.record._log_files",
    "COMPLETED": "ddsup.record._node_events",
    "Contained": "ddsup.record._node_events",
    "LivenessFailed": "ddsup.record._node_events",
    "NODE_EVENTS": "ddsup.record._node_events",
    "NodeEvent": "ddsup.record._node_events",
    "ProbeAnswered": "ddsup.record._node_events",
    "Cause": "ddsup.record._outcome",
    "Stopped": "ddsup.record._outcome",
    "UnitFailure": "ddsup.record._outcome",
    "WorkerEnded": "ddsup.record._outcome",
    "HeldDir": "ddsup.record._private",
    "check_private": "ddsup.record._private",
    "open_private_dir": "ddsup.record._private",
    "write_private": "ddsup.record._private",
    "ControlAddress": "ddsup.record._run_info",
    "RunInfo": "ddsup.record._run_info",
    "LaneSamples": "ddsup.record._samples",
    "CUT": "ddsup.record._series",
    "FAILED": "ddsup.record._series",
    "FINISHED": "ddsup.record._series",
    "SERIES_DIR": "ddsup.record._series",
    "SeriesLine": "ddsup.record._series",
    "header_line": "ddsup.record._series",
    "series_file_name": "ddsup.record._series",
    "WORKERS_FILE": "ddsup.record._state_dir",
    "hold_state_dir": "ddsup.record._state_dir",
    "newest_state_dir": "ddsup.record._state_dir",
    "open_state_dir": "ddsup.record._state_dir",
    "run_dirs": "ddsup.record._state_dir",
    "ALLOWED": "ddsup.record._states",
    "FINAL": "ddsup.record._states",
    "LIVE": "ddsup.record._states",
    "LOADING": "ddsup.record._states",
    "NOTABLE": "ddsup.record._states",
    "StatusRows": "ddsup.record._status",
    "planned_facts": "ddsup.record._status",
    "Life": "ddsup.record._timeline",
    "Mark": "ddsup.record._timeline",
    "MarkKind": "ddsup.record._timeline",
    "RunSpan": "ddsup.record._timeline",
    "replay": "ddsup.record._timeline",
    "run_span": "ddsup.record._timeline",
    "Efficiency": "ddsup.record._efficiency",
    "efficiency": "ddsup.record._efficiency",
    "efficiency_json": "ddsup.record._efficiency",
    "efficiency_line": "ddsup.record._efficiency",
    "EventLog": "ddsup.record._event_log",
    "read_events": "ddsup.record._event_log",
    "parse_event": "ddsup.record._event_parse",
    "ProcessExited": "ddsup.record._node_events",
    "ProcessStarted": "ddsup.record._node_events",
    "RecordedEvent": "ddsup.record._events",
    "UnitTransition": "ddsup.record._node_events",
    "InstanceRecord": "ddsup.record._instance",
    "Outcome": "ddsup.record._outcome",
    "PlanFile": "ddsup.record._run_files",
    "PlannedInstance": "ddsup.record._run_files",
    "PlannedNode": "ddsup.record._run_files",
    "RunFiles": "ddsup.record._run_files",
    "load_run": "ddsup.record._run_files",
    "Series": "ddsup.record._series",
    "read_series": "ddsup.record._series",
    "StateDir": "ddsup.record._state_dir",
    "IllegalTransition": "ddsup.record._states",
    "InstanceState": "ddsup.record._states",
    "InstanceStatus": "ddsup.record._status",
    "RunSnapshot": "ddsup.record._status",
    "FieldReader": "ddsup.record._fields",
    "InstanceStatusJson": "ddsup.record._status",
    "SnapshotJson": "ddsup.record._status",
    "PlannedFacts": "ddsup.record._status",
    "OutcomeJson": "ddsup.record._outcome",
    "CauseJson": "ddsup.record._outcome",
    "EventLine": "ddsup.record._events",
    "RunLine": "ddsup.record._events",
    "NodeEventLine": "ddsup.record._node_events",
    "ContainmentLine": "ddsup.record._node_events",
    "FaultsJson": "ddsup.record._faults",
    "EfficiencyJson": "ddsup.record._efficiency",
    "RunInfoJson": "ddsup.record._run_info",
}

__getattr__ = lazy_names(__name__, _LAZY, globals())
