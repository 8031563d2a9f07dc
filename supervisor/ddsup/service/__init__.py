"""One unit instance's life: its environment, its readiness probe, start, restart, stop.

``_environment`` (what the process sees), ``_readiness`` (is it ready yet), ``_spec``
(what a service is given and shows), ``_restart_policy`` (start limit and backoff),
``_service`` (the state machine, owned by one task), with ``_one_start`` (one process
and its watchers of exit, readiness, liveness), ``_verdict`` (restart, exit or fail after
an end), ``_replica_hold`` (a replica rank held until the run resumes it) and
``_transition`` (a checked move and its event). Both the controller and every
node agent run their instances through these, so supervision behaves the same wherever
a unit runs.

Its names are imported when first used (PEP 562, ``ddsup._lazy``), as in the other
layers, so that importing one of its modules does not import them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddsup._lazy import lazy_names

if TYPE_CHECKING:
    from ddsup.service._environment import INVOCATION_ENV as INVOCATION_ENV
    from ddsup.service._environment import RunContext as RunContext
    from ddsup.service._environment import specifier_context as specifier_context
    from ddsup.service._environment import unit_environment as unit_environment
    from ddsup.service._environment import withheld_variables as withheld_variables
    from ddsup.service._readiness import Probe as Probe
    from ddsup.service._restart_policy import RestartPolicy as RestartPolicy
    from ddsup.service._service import Service as Service
    from ddsup.service._spec import REPLICA_RESTARTS as REPLICA_RESTARTS
    from ddsup.service._spec import ServiceSpec as ServiceSpec

_LAZY = {
    "INVOCATION_ENV": "ddsup.service._environment",
    "specifier_context": "ddsup.service._environment",
    "unit_environment": "ddsup.service._environment",
    "withheld_variables": "ddsup.service._environment",
    "RestartPolicy": "ddsup.service._restart_policy",
    "REPLICA_RESTARTS": "ddsup.service._spec",
    "RunContext": "ddsup.service._environment",
    "Probe": "ddsup.service._readiness",
    "Service": "ddsup.service._service",
    "ServiceSpec": "ddsup.service._spec",
}

__getattr__ = lazy_names(__name__, _LAZY, globals())
