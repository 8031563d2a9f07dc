#!/usr/bin/env bash
# bench/endpoint_compare.py on a machine with 16 cores (room for two proxy cores of their
# own, wrk and the lanes elsewhere) where nothing can be installed: Debian's wrk and
# nginx and the libraries they need travel in .benchbin/ (ignored by git), ddsup's
# runtime wheels in .whl/ (bench/gpu_truth.sh --wheels).
#
#   bench/endpoint_device.sh --binaries   here, once: copy wrk, nginx and their libraries
#   bash bench/endpoint_device.sh [ARGS]  there, in a copy of the checkout with both folders
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--binaries" ]; then
    grep -qx '/.benchbin/' .git/info/exclude || echo '/.benchbin/' >> .git/info/exclude
    rm -rf .benchbin
    mkdir -p .benchbin/bin .benchbin/real .benchbin/lib
    cp "$(command -v wrk)" .benchbin/real/wrk
    cp "$(readlink -f "$(command -v nginx || echo /usr/sbin/nginx)")" .benchbin/real/nginx
    for lib in libluajit-5.1.so.2 libpcre2-8.so.0 libcrypt.so.1 libssl.so.3 libcrypto.so.3 libz.so.1; do
        cp -L "/lib/x86_64-linux-gnu/$lib" .benchbin/lib/
    done
    # wrappers: the libraries for these two programs alone (python3 keeps its own), and
    # exec, so that the PID the bench pins and measures is the program's
    for tool in wrk nginx; do
        printf '#!/bin/sh\nhere="$(dirname "$(readlink -f "$0")")/.."\n' > ".benchbin/bin/$tool"
        printf 'LD_LIBRARY_PATH="$here/lib" exec "$here/real/%s" "$@"\n' "$tool" >> ".benchbin/bin/$tool"
        chmod +x ".benchbin/bin/$tool"
    done
    exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$PWD/supervisor" PYTHONUNBUFFERED=1
export PATH="$PWD/.benchbin/bin:$PATH"
nproc
wrk --version 2>&1 | head -1 || true
nginx -v
exec python3 bench/endpoint_compare.py "$@"
