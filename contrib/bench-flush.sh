#!/bin/bash
#
# bench-flush.sh: what the flush-by-RDMA-READ costs. In one soft-RoCE guest
# run, put + flush with the read (UCX_RC_GDR_FLUSH=always) against put +
# plain flush (never), at 8 B and 64 KiB, medians of interleaved
# iterations, printed as a table by build/contrib/bench/flush_bench
# (contrib/bench/flush_bench.c).
#
# Usage: contrib/bench-flush.sh [ITERATIONS (51)]
# Under qemu TCG the absolute times are an emulator's: read the difference.
#
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
case ${1:-} in -h|--help) sed -n '3,10p' contrib/bench-flush.sh; exit 0 ;; esac
ITERS=${1:-51}

if [ "${RC_GDR_BENCH_INSIDE:-}" != 1 ]; then
    # die; bench_guest_run (the guest inherits the exported environment)
    CLI_NAME=bench-flush
    # shellcheck source=contrib/lib/cli.sh
    . contrib/lib/cli.sh
    # shellcheck source=contrib/lib/bench_guest.sh
    . contrib/lib/bench_guest.sh
    contrib/build.sh > /dev/null
    export RC_GDR_BENCH_INSIDE=1
    bench_guest_run --timeout 900 -- contrib/bench-flush.sh "$ITERS"
fi

. contrib/env.sh build
echo "== flush read cost, soft-RoCE (rxe0 -> rxe1), $ITERS iterations"
build/contrib/bench/flush_bench rxe0:1 rxe1:1 "$ITERS"
