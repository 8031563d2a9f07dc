#!/usr/bin/env bash
# GPU truth (bench/gpu_truth.py) on a machine with GPUs whose python3 (3.12) holds
# PyTorch and which cannot fetch anything: ddsup's runtime wheels that it lacks travel
# with the checkout in .whl/ (ignored by git).
#
#   bench/gpu_truth.sh --wheels   here, once: download them into .whl/
#   bash bench/gpu_truth.sh       there, in a copy of the checkout with .whl/: install
#                                 them into /tmp/site, run the check, figures to
#                                 $OUT/gpu_truth.json (/tmp without OUT)
#
# Such a machine's image is expected to hold h11, httpx, attrs, idna, sortedcontainers
# and psutil already.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=(trio==0.35.0 outcome==1.3.0.post0 sniffio==1.3.1 hypercorn==0.18.0 h2==4.4.1
    hpack==4.2.0 hyperframe==6.1.0 priority==2.0.0 wsproto==1.3.2 httptools==0.9.0
    setproctitle==1.3.8)
pure=(python-hostlist==2.3.0)  # an sdist only: made into a wheel here
if [ "${1:-}" = "--wheels" ]; then
    grep -qx '/.whl/' .git/info/exclude || echo '/.whl/' >> .git/info/exclude
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform any \
        -d .whl "${missing[@]}"
    python3 -m pip wheel -q --no-deps -w .whl "${pure[@]}"
    ls .whl
    exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$PWD/supervisor" PYTHONUNBUFFERED=1
nvidia-smi -L
exec python3 bench/gpu_truth.py --json "${OUT:-/tmp}/gpu_truth.json" "$@"
