"""A run's record: the state vocabulary, its events, its outcome and its state directory.

Everything that writes what a run did (the service, the controller) and everything that
reads it back (``status``, ``logs``, metrics, the console) shares these: ``_states`` (the
one enum of instance states), ``_events`` (``events.jsonl``), ``_outcome`` (how a run
ended, ``result.json``), ``_state_dir`` (where it all lives) and ``_display`` (how states
and durations look to a person).
"""

from __future__ import annotations

from ddsup.record._events import Event as Event
from ddsup.record._events import EventLog as EventLog
from ddsup.record._events import read_events as read_events
from ddsup.record._outcome import Outcome as Outcome
from ddsup.record._state_dir import StateDir as StateDir
from ddsup.record._states import IllegalTransition as IllegalTransition
from ddsup.record._states import InstanceState as InstanceState
