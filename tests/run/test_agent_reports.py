"""An agent's reports are held to its own node: every kind of instance event passes.

The controller drops an agent that reports an event "not of its node" (a hostile or
confused agent). An event kind that names an instance but is missing from the check's
list would make every honest agent that emits it "lost": liveness events did, after two
branches met. This pins the list to the vocabulary itself.
"""

from __future__ import annotations

import dataclasses
import typing

from ddsup.controller._connections import _INSTANCE_EVENTS
from ddsup.record._events import RecordedEvent


def test_every_event_that_names_an_instance_is_checked_against_the_node() -> None:
    kinds = [kind for kind in typing.get_args(RecordedEvent) if dataclasses.is_dataclass(kind)]
    naming = {k for k in kinds if "instance" in {f.name for f in dataclasses.fields(k)}}
    assert naming, "the vocabulary has instance events"
    assert naming == set(_INSTANCE_EVENTS)
