#!/bin/bash
# Slurm epilog: end whatever a ddsup run of the finished job left on this node.
#
# Install on every compute node, as (or called from) the node's Epilog in slurm.conf:
#   Epilog=/etc/slurm/epilog.d/ddsup-epilog.sh
# slurmd runs it as root after every job, with SLURM_JOB_ID (and SLURM_JOB_USER) set.
#
# Usually there is nothing to do: ddsup ends every process of a run before it exits,
# its sentinels do so when it is SIGKILLed, and with ProctrackType=proctrack/cgroup Slurm
# kills the job's cgroup anyway. This catches the rest (proctrack/linuxproc lets a
# process that daemonized escape; docs/no-orphans.md, layer 5).
#
# How the run is found. Every process ddsup starts carries DDSUP_INVOCATION_ID, one id
# per `ddsup start`, in its environment (and, inside a job, the job's SLURM_JOB_ID). The
# same id is the "invocation_id" key of run.json in the run's state directory. So:
#   1. every process on this node whose environment has SLURM_JOB_ID=<this job> gives
#      its DDSUP_INVOCATION_ID (read from /proc/PID/environ: needs root, as epilogs are);
#   2. if DDSUP_EPILOG_STATE_DIRS is set (a glob with %j for the job id, e.g.
#      "/shared/jobs/*/runs/ddsup-%j"), every run.json it matches gives its invocation_id;
#      this finds a process that kept the run's id but lost SLURM_JOB_ID.
# Then `ddsup cleanup --invocation ID` runs once per id found. It only ever signals
# processes that carry that id (or sit in a process group led by one that does).
#
# An epilog that fails drains the node, so this script always exits 0 and reports to
# syslog (tag ddsup-epilog) instead.
#
# Settings (environment, or edit the defaults):
#   DDSUP              the ddsup command (default: ddsup on PATH, then /opt/ddsup/venv/bin/ddsup)
#   DDSUP_EPILOG_STATE_DIRS   optional glob of state directories, %j = job id
set -uo pipefail

log() { logger -t ddsup-epilog -- "job ${SLURM_JOB_ID:-?}: $*" 2>/dev/null || echo "ddsup-epilog: $*" >&2; }

job=${SLURM_JOB_ID:-}
[[ -n "$job" ]] || { log "SLURM_JOB_ID is not set; nothing to do"; exit 0; }

ddsup=${DDSUP:-$(command -v ddsup || echo /opt/ddsup/venv/bin/ddsup)}
[[ -x "$ddsup" ]] || { log "no ddsup at '$ddsup' (set DDSUP); skipped"; exit 0; }

declare -A ids=()

# 1. processes of this job that carry an invocation id
for environ in /proc/[0-9]*/environ; do
    vars=$( { tr '\0' '\n' <"$environ"; } 2>/dev/null) || continue
    grep -qx "SLURM_JOB_ID=$job" <<<"$vars" || continue
    id=$(sed -n 's/^DDSUP_INVOCATION_ID=//p' <<<"$vars")
    [[ -n "$id" ]] && ids[$id]=1
done

# 2. state directories named after the job
if [[ -n "${DDSUP_EPILOG_STATE_DIRS:-}" ]]; then
    pattern=${DDSUP_EPILOG_STATE_DIRS//%j/$job}
    shopt -s nullglob
    for dir in $pattern; do
        [[ -f "$dir/run.json" ]] || continue
        id=$(sed -n 's/.*"invocation_id": *"\([0-9A-Za-z_-]*\)".*/\1/p' "$dir/run.json" | head -n1)
        [[ -n "$id" ]] && ids[$id]=1
    done
fi

for id in "${!ids[@]}"; do
    if out=$("$ddsup" cleanup --invocation "$id" 2>&1); then
        log "$out"
    else
        log "cleanup of run $id failed: $out"
    fi
done
exit 0
