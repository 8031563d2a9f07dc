"""How a process ended: the one value every layer uses to say so.

A plain value with no process machinery behind it, apart from ``ddsup.process`` (which
imports trio and psutil), so that what only reads a run's record — ``ddsup status``,
events, results, the control channel's messages — never pays for an event loop.
``ddsup.process`` re-exports it.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import TypedDict


class ExitJson(TypedDict, total=False):
    """An exit status in JSON: exactly one of ``code`` and ``signal`` (its name)."""

    code: int
    signal: str


@dataclass(frozen=True)
class ExitStatus:
    """How a process ended: ``code`` when it exited, ``signal`` when a signal killed it."""

    code: int | None = None
    signal: int | None = None

    def __post_init__(self) -> None:
        if (self.code is None) == (self.signal is None):
            raise ValueError("ExitStatus needs exactly one of code and signal")

    @classmethod
    def from_returncode(cls, returncode: int) -> ExitStatus:
        """From Popen's convention, where a negative return code is the killing signal."""
        return cls(signal=-returncode) if returncode < 0 else cls(code=returncode)

    def signal_name(self) -> str:
        assert self.signal is not None
        try:
            return signal.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"

    def describe(self) -> str:
        if self.code is not None:
            return f"exit status {self.code}"
        return f"killed by {self.signal_name()}"

    def to_json(self) -> ExitJson:
        if self.code is not None:
            return {"code": self.code}
        return {"signal": self.signal_name()}

    def is_success(self, success_codes: frozenset[int]) -> bool:
        return self.code is not None and self.code in success_codes
