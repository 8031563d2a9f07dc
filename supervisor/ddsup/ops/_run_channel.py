"""An operator command's open channel to the live run (``ddsup stop``, ``ddsup restart``).

Those commands hold a connection for the run's answers as they come (the stop's end, a
restart's progress), so they speak trio's :class:`~ddsup.channel.Channel`. ``ddsup
status`` asks one question and needs no event loop: it uses ``_run_handle.ask``, which
is why this lives apart from the trust checks both share (``_run_handle.reach``).
"""

from __future__ import annotations

from ddsup.channel import Channel, ChannelError, connect_channel
from ddsup.ops._run_handle import reach
from ddsup.record import StateDir


async def connect(state: StateDir) -> Channel | None:
    """An authenticated channel to the live run; None when nothing answers there."""
    reached = reach(state)
    if reached is None:
        return None
    control, hello = reached
    try:
        return await connect_channel(str(control), hello)
    except (OSError, ChannelError):
        return None
