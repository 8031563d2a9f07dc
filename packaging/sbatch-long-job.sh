#!/bin/bash
# A ddsup job longer than its time limit: it checkpoints, requeues itself and resumes,
# attempt after attempt, until its worker has done everything. Copy it next to your
# units, edit the lines marked EDIT, then
#   sbatch job.sh
# once; Slurm runs the next attempts by itself. Its units: units/examples/long-job (the
# worker's comments say what happens when). Each step of the way is in docs/slurm.md
# ("A long job"); the rest is as in sbatch-template.sh.
#
#SBATCH --job-name=llama-long      # EDIT: also names the job's state directory (below)
#SBATCH --nodes=2                  # EDIT: nodes the plan needs (`ddsup plan` tells)
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8          # EDIT: explicit GPUs: job steps get the job's GPUs
#SBATCH --exclusive
#SBATCH --mem=0                    # all of each node's memory
#SBATCH --time=24:00:00            # EDIT: each attempt's time limit
#SBATCH --output=%x-%j.out         # requeued attempts append to the same file
#SBATCH --open-mode=append
# The worker's exit 85 asks ddsup to requeue the job: Slurm allows it with --requeue.
#SBATCH --requeue
# SIGUSR1 to ddsup 15 min (Slurm: 15-15.5 min) before the time limit, forwarded to the
# worker (forward_signals): it checkpoints and knows that the end is near. The worker's
# stop_before_end (10 min) must be shorter, so that the signal comes first.
#SBATCH --signal=B:USR1@900

set -euo pipefail

# EDIT: ddsup's installation, unit directory and where state directories go, at the
# same path on every node (the shared file system).
DDSUP_ENV=/shared/software/ddsup       # a virtual environment with ddsup (and vLLM)
UNITS=/shared/jobs/llama/units         # a copy of units/examples/long-job, adapted
STATE_ROOT=/shared/jobs/llama/runs
# The job's state directory, by its name: the same for every attempt, so each one goes
# on from the last (results.jsonl there; each earlier attempt's record in attempts/).
STATE_DIR="$STATE_ROOT/$SLURM_JOB_NAME"

# shellcheck source=/dev/null
source "$DDSUP_ENV/bin/activate"       # units inherit PATH: python3, vllm, ddsup
# export HF_HOME=/shared/hf-cache      # EDIT: whatever vLLM needs; units inherit it

mkdir -p "$STATE_ROOT"
ddsup verify "$UNITS"                  # invalid units: the job ends here with 65
echo "attempt ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID in $STATE_DIR"

SRUN_ARGS=(--srun-arg="--cpus-per-task=${SLURM_CPUS_ON_NODE}")

# `exec`: ddsup replaces this shell, so --signal=B:USR1 reaches it, and the job's exit
# code is ddsup's: 0 once the work is done; 85 (requeued) for each attempt before.
exec ddsup start "$UNITS" --state-dir "$STATE_DIR" "${SRUN_ARGS[@]}"
