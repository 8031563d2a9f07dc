"""What a unit is for (``[unit] type``): the one vocabulary of unit kinds every layer shares.

Apart from ``_model`` (the unit files' frozen sections, dozens of dataclasses) so that
what only reads a run's record, ``ddsup status`` and its rows, imports this enum and not
those (a noticeable part of its CPU). ``_model`` re-exports it.
"""

from __future__ import annotations

import enum


class UnitType(str, enum.Enum):
    """What a unit is for; it decides where it runs and when it starts."""

    LANE = "lane"
    ENDPOINT = "endpoint"
    WORKER = "worker"
    SERVICE = "service"
    ONESHOT = "oneshot"
