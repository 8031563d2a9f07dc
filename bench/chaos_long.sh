#!/usr/bin/env bash
# Long chaos run: N seeded schedules (default 200) against a real `ddsup start`.
#
#   bench/chaos_long.sh [RUNS] [SEED]
#
# Every schedule is one test id, schedule-SEED-I, reproducible on its own with
#   .venv/bin/pytest tests/chaos --chaos-seed SEED --chaos-only I
# Each runs in its own PID namespace (unshare; root, else a user namespace) whose PID 1
# counts every process left when ddsup start returns. The last line is the figure line:
#   chaos: seed S, schedules run N, orphans found X, wrong exit codes Y, wrong statuses W,
#   hangs Z, injections not fired M
# (schedules that hit a bug listed in tests/chaos/chaos_known_bugs.py are xfail and
# still counted in the figures).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-200}"
seed="${2:-1}"
exec .venv/bin/pytest tests/chaos -q -p no:cacheprovider -rxXf \
    --chaos-runs "$runs" --chaos-seed "$seed" -k "test_schedule"
