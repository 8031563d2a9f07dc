#!/bin/bash
# Slurm epilog: end whatever a ddsup run of the finished job left on this node.
#
# Install on every compute node, as (or called from) the node's Epilog in slurm.conf:
#   Epilog=/etc/slurm/epilog.d/ddsup-epilog.sh
# slurmd runs it as root after every job, with SLURM_JOB_ID and SLURM_JOB_UID set.
#
# Usually there is nothing to do: ddsup ends every process of a run before it exits,
# its sentinels do so when it is SIGKILLed, and with ProctrackType=proctrack/cgroup Slurm
# kills the job's cgroup anyway. This catches the rest (proctrack/linuxproc lets a
# process that daemonized escape; docs/no-orphans.md, layer 7).
#
# What it trusts: the job id and the job's user, which slurmd gives it, and nothing a
# process on the node could choose (any process may carry any SLURM_JOB_ID and any run's
# DDSUP_INVOCATION_ID in its environment). `ddsup cleanup --job ID --user UID`:
#   1. becomes the job's user (a root job's epilog stays root), so that it cannot touch
#      another user's processes, cgroups or files;
#   2. finds that user's state directories of the job: DDSUP_STATE_DIR in the
#      environment of that user's processes that say SLURM_JOB_ID=<this job>, and
#      those DDSUP_EPILOG_STATE_DIRS matches (a glob, %j for the job id), for runs
#      none of whose processes kept theirs: "/shared/jobs/*/runs/*" for directories
#      named after their jobs, as sbatch-template.sh names them (slurmd does not give
#      an epilog the job's name: other jobs' directories are passed over silently), or
#      "/shared/jobs/*/runs/ddsup-%j" for ddsup's default name;
#   3. ends a run only when its state directory, the user's own and private, says in
#      run.json (written by ddsup start) that the run is this job's, and then only what
#      that directory's records name (with start times), the run's cgroups, and what
#      carries the run's id. It prints a line per run it ended or left alone.
#
# An epilog that fails drains the node, so this script always exits 0 and reports to
# syslog (tag ddsup-epilog) instead.
#
# Settings (environment, or edit the defaults):
#   DDSUP              the ddsup command (default: ddsup on PATH, then /opt/ddsup/venv/bin/ddsup)
#   DDSUP_EPILOG_STATE_DIRS   optional glob of state directories, %j = job id
#                             (e.g. "/shared/jobs/*/runs/*", see step 2)
set -uo pipefail

log() { logger -t ddsup-epilog -- "job ${SLURM_JOB_ID:-?}: $*" 2>/dev/null || echo "ddsup-epilog: $*" >&2; }

job=${SLURM_JOB_ID:-}
uid=${SLURM_JOB_UID:-}
[[ -n "$job" && -n "$uid" ]] || { log "SLURM_JOB_ID or SLURM_JOB_UID is not set; nothing to do"; exit 0; }

ddsup=${DDSUP:-$(command -v ddsup || echo /opt/ddsup/venv/bin/ddsup)}
[[ -x "$ddsup" ]] || { log "no ddsup at '$ddsup' (set DDSUP); skipped"; exit 0; }

args=(cleanup --job "$job" --user "$uid")
[[ -n "${DDSUP_EPILOG_STATE_DIRS:-}" ]] && args+=(--state-dirs "$DDSUP_EPILOG_STATE_DIRS")

if out=$(cd / && "$ddsup" "${args[@]}" 2>&1); then
    [[ -z "$out" ]] || log "$out"
else
    log "cleanup failed: $out"
fi
exit 0
