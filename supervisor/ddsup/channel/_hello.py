"""What every connection to ``ddsup start`` begins with: the hello, who sends it, the
protocol's error and its longest line.

Apart from ``_messages`` (the run's own messages: agents', the endpoint's) so that an
operator's one-request client (``ddsup status``) imports the hello and its own messages
(``_operator_messages``) and none of the thirty others, nor the plan and the unit
sections they carry; ``_messages`` re-exports these names.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import ClassVar

from ddsup._errors import DdsupError

# An authenticated peer's longest line: a Setup carries its node's part of the plan (a
# thousand lanes are a few MB). Before authentication the server allows far less
# (``_server``). Here, not in ``_channel``, so that the blocking client imports no trio.
MAX_LINE = 16 * 1024 * 1024
MAX_NAME = 255  # a node name (a hostname) in a hello or a report

# Where a run's processes reach ``ddsup start`` and how they authenticate (their
# environment, never argv). Here, not in ``_channel``, so that ``ddsup start`` can launch
# its agents before it imports the channel's messages and codec (``controller._head_start``).
SECRET_ENV = "DDSUP_CONTROL_SECRET"
ADDRESS_ENV = "DDSUP_CONTROL_ADDRESS"


def new_secret() -> str:
    """256 random bits as hex: ``secrets.token_hex(32)`` is this, and ``ddsup status``
    (which imports this module) need not import ``secrets``."""
    return os.urandom(32).hex()


class ChannelError(DdsupError):
    """The peer broke the protocol, failed authentication, or vanished mid-message."""


class Role(str, enum.Enum):
    """Who is on the other end of a connection, as its hello says."""

    AGENT = "agent"
    LANES = "lanes"  # the endpoint's live lane feed
    CONTROL = "control"  # an operator command (status, stop)


def check_name(what: str, name: str) -> None:
    """ValueError unless ``name`` (a node, a GPU) is 1 to MAX_NAME printable characters."""
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise ValueError(f"{what} must be 1 to {MAX_NAME} printable characters")


@dataclass(frozen=True)
class Hello:
    """The first line of every connection; ``secret`` authenticates it."""

    op: ClassVar[str] = "hello"
    role: Role
    secret: str = field(repr=False)
    node: str | None = None  # agents: the node they run on
    pid: int | None = None

    def __post_init__(self) -> None:
        if self.node is not None:
            check_name("node", self.node)
