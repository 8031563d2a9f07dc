"""One run: the controller of ``ddsup start``, the node agents, and how they talk.

``_start`` (the command), ``_controller`` (the run from plan to result), ``_agent`` (one
node's instances), ``_node_runner`` (the services of one node), ``_launcher`` (local or
srun), ``_preflight``, ``_ordering`` (start and stop order), ``_lane_feed`` (the ready
lanes for the endpoint), ``_console`` (what ``ddsup start`` prints).
"""

from __future__ import annotations
