#!/bin/bash
# A ddsup batch job: copy this file next to your units, edit the lines marked EDIT, then
#   sbatch job.sh
# Its numbers fit units/examples/vllm-pp-2node (2 nodes × 8 GPUs: one 2-node lane).
#
#SBATCH --job-name=llama-batch     # EDIT: also names the job's state directory (below)
#SBATCH --nodes=2                 # EDIT: nodes the plan needs (`ddsup plan` tells)
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8         # EDIT: explicit GPUs: job steps get the job's GPUs
#SBATCH --exclusive
#SBATCH --mem=0                   # all of each node's memory
#SBATCH --time=12:00:00           # EDIT
#SBATCH --output=%x-%j.out
# SIGUSR1 to ddsup 300 s (Slurm: 300-330 s) before the time limit; ddsup passes it on to
# units with forward_signals = ["SIGUSR1"] (the example worker writes a checkpoint).
# For an ordered stop before the limit instead, use --signal=B:TERM@120 (docs/slurm.md).
#SBATCH --signal=B:USR1@300

set -euo pipefail

# EDIT: ddsup's installation, unit directory and where state directories go. All three
# must be at the same path on every node (the shared file system): node agents run this
# same Python, read the unit files and write logs into the state directory.
DDSUP_ENV=/shared/software/ddsup       # a virtual environment with ddsup (and vLLM)
UNITS=/shared/jobs/llama/units
STATE_ROOT=/shared/jobs/llama/runs
# The job's state directory, by its name: the same for every attempt (a requeue, or the
# script submitted again), so the next one resumes: the worker skips what it finished
# (its results.jsonl there), and ddsup keeps each earlier attempt's record in attempts/.
# The epilog finds it by a glob with * for the name (slurm-epilog.sh: slurmd does not
# tell an epilog the job's name), e.g. DDSUP_EPILOG_STATE_DIRS="/shared/jobs/*/runs/*".
STATE_DIR="$STATE_ROOT/$SLURM_JOB_NAME"

# shellcheck source=/dev/null
source "$DDSUP_ENV/bin/activate"       # units inherit PATH: python3, vllm, ddsup
# export HF_HOME=/shared/hf-cache      # EDIT: whatever vLLM needs; units inherit it
# export DDSUP_API_KEY=$(openssl rand -hex 16)   # with [endpoint] api_key_env

mkdir -p "$STATE_ROOT"
ddsup verify "$UNITS"                  # invalid units: the job ends here with 65

# Slurm gives a job step ntasks × cpus-per-task CPUs; with one agent per node and the
# default of 1 CPU per task, every lane of a node would share one core. Give the
# agents' step every CPU of the node (see packaging/README.md).
SRUN_ARGS=(--srun-arg="--cpus-per-task=${SLURM_CPUS_ON_NODE}")
# Containers (pyxis/enroot), for every lane unit at once; see packaging/README.md:
# SRUN_ARGS+=(--srun-arg=--container-image=/images/vllm.sqsh
#             --srun-arg=--container-mounts=/shared:/shared,/models:/models)

# `exec`: ddsup replaces this shell, so --signal=B:…, scancel --batch and the job's exit
# code (ddsup's: 0, 65, 69, 70, 75, 128+N; see docs/cli.md) all reach and come from it.
exec ddsup start "$UNITS" --state-dir "$STATE_DIR" "${SRUN_ARGS[@]}"
