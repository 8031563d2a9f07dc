"""Fixtures for tests that need a real Slurm cluster.

One private cluster (``slurmctld`` + 3 ``slurmd``) serves the whole session: it starts in
a few seconds, and each test submits its own jobs. Its daemons are detached from the
test process (see ``cluster.py``), so the suite's no-leftover-children guard holds; the
fixture stops them by PID at the end of the session.

Without Slurm installed the tests skip and say how to install it; in CI (``CI=true``) a
skip is a failure (``support.ci``): a skipped required test would hide a broken runner.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .cluster import SlurmCluster, missing_binaries


@pytest.fixture(scope="session")
def slurm_installed() -> None:
    """Skip the test when Slurm is not installed (in CI a failure)."""
    missing = missing_binaries()
    if missing:
        pytest.skip(
            f"Slurm is not installed (missing: {', '.join(missing)}); run .ci/install-slurm"
        )


@pytest.fixture(scope="session")
def slurm_cluster(
    slurm_installed: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SlurmCluster]:
    """A running 3-node cluster for the session; use ``slurm_cluster.env`` for clients."""
    cluster = SlurmCluster.start(tmp_path_factory.mktemp("slurm"), nodes=3)
    try:
        yield cluster
    finally:
        cluster.stop()
