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
    from ddsup.record._efficiency import Efficiency as Efficiency
    from ddsup.record._efficiency import efficiency as efficiency
    from ddsup.record._efficiency import efficiency_json as efficiency_json
    from ddsup.record._efficiency import efficiency_line as efficiency_line
    from ddsup.record._event_log import EventLog as EventLog
    from ddsup.record._event_log import read_events as read_events
    from ddsup.record._event_parse import parse_event as parse_event
    from ddsup.record._events import ProcessExited as ProcessExited
    from ddsup.record._events import ProcessStarted as ProcessStarted
    from ddsup.record._events import RecordedEvent as RecordedEvent
    from ddsup.record._events import UnitTransition as UnitTransition
    from ddsup.record._instance import InstanceRecord as InstanceRecord
    from ddsup.record._outcome import Outcome as Outcome
    from ddsup.record._run_files import RunFiles as RunFiles
    from ddsup.record._run_files import load_run as load_run
    from ddsup.record._series import Series as Series
    from ddsup.record._series import read_series as read_series
    from ddsup.record._state_dir import StateDir as StateDir
    from ddsup.record._states import IllegalTransition as IllegalTransition
    from ddsup.record._states import InstanceState as InstanceState
    from ddsup.record._status import InstanceStatus as InstanceStatus
    from ddsup.record._status import RunSnapshot as RunSnapshot

_LAZY = {
    "Efficiency": "ddsup.record._efficiency",
    "efficiency": "ddsup.record._efficiency",
    "efficiency_json": "ddsup.record._efficiency",
    "efficiency_line": "ddsup.record._efficiency",
    "EventLog": "ddsup.record._event_log",
    "read_events": "ddsup.record._event_log",
    "parse_event": "ddsup.record._event_parse",
    "ProcessExited": "ddsup.record._events",
    "ProcessStarted": "ddsup.record._events",
    "RecordedEvent": "ddsup.record._events",
    "UnitTransition": "ddsup.record._events",
    "InstanceRecord": "ddsup.record._instance",
    "Outcome": "ddsup.record._outcome",
    "RunFiles": "ddsup.record._run_files",
    "load_run": "ddsup.record._run_files",
    "Series": "ddsup.record._series",
    "read_series": "ddsup.record._series",
    "StateDir": "ddsup.record._state_dir",
    "IllegalTransition": "ddsup.record._states",
    "InstanceState": "ddsup.record._states",
    "InstanceStatus": "ddsup.record._status",
    "RunSnapshot": "ddsup.record._status",
}

__getattr__ = lazy_names(__name__, _LAZY, globals())
