#!/usr/bin/env bash
# Long chaos run: N seeded schedules (default 200) against a real `ddsup start`.
#
#   bench/chaos_long.sh [RUNS] [SEED]
#
# Every schedule is one test id, schedule-SEED-I, reproducible on its own with
#   .venv/bin/pytest tests/chaos --chaos-seed SEED --chaos-only I
# The last line of the session is the figure line:
#   chaos: schedules run N, orphans found X, wrong exit codes Y, hangs Z
# (schedules that hit a bug listed in tests/chaos/chaos_known_bugs.py are xfail and
# still counted in the figures).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-200}"
seed="${2:-1}"
exec .venv/bin/pytest tests/chaos -q -p no:cacheprovider -rxXf \
    --chaos-runs "$runs" --chaos-seed "$seed" -k "test_schedule"
