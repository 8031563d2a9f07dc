"""One unit instance's life: its environment, its readiness probe, start, restart, stop.

``_environment`` (what the process sees), ``_readiness`` (is it ready yet), ``_spec``
(what a service is given and shows), ``_restart_policy`` (start limit and backoff),
``_service`` (the state machine, owned by one task). Both the controller and every
node agent run their instances through these, so supervision behaves the same wherever
a unit runs.
"""

from __future__ import annotations

from ddsup.service._environment import RunContext as RunContext
from ddsup.service._readiness import Probe as Probe
from ddsup.service._service import Service as Service
from ddsup.service._service import ServiceSpec as ServiceSpec
