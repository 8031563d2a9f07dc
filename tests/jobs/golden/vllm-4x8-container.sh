#!/bin/bash
# A ddsup job, made by `ddsup submit` from /jobs/llama/units
# with ddsup @VERSIONS@ on @HOST@;
# settings: /home/.config/ddsup/profiles/cluster-a.toml, /jobs/llama/units/job.toml.
# Submit it again (sbatch) to go on in the same state directory:
# /shared/runs/llama-batch
#SBATCH --job-name=llama-batch
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time=12:00:00
#SBATCH --account=llm-inference
#SBATCH --partition=gpu
#SBATCH --signal=B:USR1@300
#SBATCH --requeue
#SBATCH --output=/shared/runs/llama-batch/slurm-%j.out
#SBATCH --open-mode=append
#SBATCH --exclusive
#SBATCH --mem=0

set -euo pipefail

# Every node runs this ddsup and Python (each node's preflight compares them with
# these) and needs this much space for logs; units find its programs on PATH.
export PATH=/shared/venvs/ddsup/bin:"$PATH"
export DDSUP_SUBMIT_VERSION=@DDSUP@
export DDSUP_SUBMIT_PYTHON=@PYTHON@
export DDSUP_SUBMIT_HOST=@HOST@
export DDSUP_MIN_FREE_SPACE=1073741824
export HF_HOME=/shared/hf-cache

# setup (job.toml or profile)
module load cuda/12.4

# exec: ddsup replaces this shell, so Slurm's signals (--signal=B:…, scancel --batch,
# ddsup stop --job) reach it, and the job's exit code is ddsup's own.
exec /shared/venvs/ddsup/bin/python -m ddsup start /jobs/llama/units \
    --state-dir /shared/runs/llama-batch \
    --srun-arg=--cpus-per-task="$SLURM_CPUS_ON_NODE" \
    --srun-arg=--container-mounts=/shared:/shared,/models:/models \
    --srun-arg=--container-image=/images/vllm-0.34.sqsh
