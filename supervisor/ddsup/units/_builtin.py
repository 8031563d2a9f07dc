"""Built-in kinds: what an endpoint unit runs, and how it is found ready, by default.

The endpoint is ddsup's own program, so its unit file should not have to spell out how
to start it or probe it: ``type = "endpoint"`` and an ``[endpoint]`` section are a
complete unit. An explicit ``[service] exec`` or ``[ready]`` section still wins.

- **exec**: the running ddsup, with the same interpreter (``sys.executable -m ddsup
  endpoint``), so a virtual environment or a container that runs ``ddsup start`` runs
  the same ddsup's endpoint, whatever ``ddsup`` on ``PATH`` would be. It is only the
  base command: ``ddsup start`` hands the endpoint its run's settings itself.
- **readiness**: HTTP ``GET /health`` on the endpoint's own port (the ``{port}``
  specifier, which is ``[endpoint] port`` for the endpoint's instance), at an address
  where its ``bind`` accepts connections from the same machine: the bind address
  itself, or loopback when it binds every interface. Probes run where the endpoint
  runs (the client node). ``/health`` answers 200 once every model has a ready lane.
  It asks without the endpoint's key, so with ``api_key_env`` set, ``/health`` must
  stay among ``open_routes`` unless the unit gives its own ``[ready]``
  (:func:`closed_health`).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from ddsup.units._model import EndpointSection, ProbeKind, ReadySection

ENDPOINT_PROBE_INTERVAL = 0.1  # a local HTTP probe is cheap; the worker waits on it
_WILDCARD_BINDS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1"}


def endpoint_exec() -> tuple[str, ...]:
    """``[service] exec`` of an endpoint unit that gives none: this ddsup's endpoint."""
    if not sys.executable:  # an embedded interpreter that cannot say where it is
        return ("ddsup", "endpoint")
    return (_literal(sys.executable), "-m", "ddsup", "endpoint")


def endpoint_ready(section: EndpointSection) -> ReadySection:
    """``[ready]`` of an endpoint unit that gives none: its ``/health`` on its port."""
    host = _WILDCARD_BINDS.get(section.bind.strip(), section.bind.strip())
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 literal in a URL
    return ReadySection(
        kind=ProbeKind.HTTP,
        target=f"http://{_literal(host)}:{{port}}/health",
        interval=ENDPOINT_PROBE_INTERVAL,
    )


def closed_health(endpoint: Mapping[str, object] | None, *, has_ready: bool) -> str | None:
    """What is wrong when ``[endpoint]`` closes ``/health`` to the built-in probe, if it does."""
    if endpoint is None or has_ready or not endpoint.get("api_key_env"):
        return None
    routes = endpoint.get("open_routes", ("/health",))
    if isinstance(routes, tuple | list) and "/health" in routes:
        return None
    return (
        'the built-in readiness probe asks GET /health without the key: keep "/health" '
        "in open_routes, or give the unit a [ready] probe of your own"
    )


def _literal(text: str) -> str:
    """``text`` as it must be written where specifiers are resolved (braces doubled)."""
    return text.replace("{", "{{").replace("}", "}}")
