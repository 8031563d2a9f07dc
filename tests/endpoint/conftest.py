"""Endpoint tests that start an endpoint run with one worker and with two.

With two, the endpoint's workers are real child processes (``ddsup endpoint
--worker-of``) that share the port, the lane table and the admission counts: every
behaviour a user relies on must hold either way. Tests take the ``workers`` fixture and
pass it on to :func:`endpoint_fakes.running_endpoint`.
"""

from __future__ import annotations

import pytest


@pytest.fixture(params=[1, 2], ids=["1-worker", "2-workers"])
def workers(request: pytest.FixtureRequest) -> int:
    count: int = request.param
    return count
