#!/bin/bash
#
# The rc_gdr demonstration: builds everything on a fresh machine, boots a
# soft-RoCE guest (real verbs, Linux rdma_rxe) and shows, step by step:
#   1. the rxe devices, and rc_gdr registered as a UCX transport on them;
#   2. why GDR is or is not used here (the capability chain);
#   3. rc_gdr carrying data: UCT operations checked byte for byte, then
#      ucx_perftest over rc_gdr, UCP choosing rc_gdr, and Open MPI over it;
#   4. the same traffic with UCX's own rc_verbs, for comparison;
#   5. GPU memory, with the project's stand-in CUDA driver (EMULATED: no
#      machine here has a GPU and an RDMA NIC): why the GDR lane is chosen,
#      then GPU buffers over the GDR lane and over the bounce lane.
#
# Usage: contrib/demo.sh
#
set -euo pipefail

cd "$(dirname "$0")/.."

if [ "${1:-}" != "--inside" ]; then
    contrib/build.sh
    exec contrib/rxe-vm.sh --timeout 900 -- contrib/demo.sh --inside
fi

. contrib/env.sh build
# shellcheck source=contrib/lib/wait_listen.sh
. contrib/lib/wait_listen.sh
step() { printf '\n=== %s\n' "$*"; }
say()  { printf '    %s\n' "$*"; }

perftest_pair() { # TL TEST SIZE ITERS
    ucx_perftest -p 13700 > /tmp/demo-server.log 2>&1 &
    local server=$!
    wait_listen 13700 "$server" 10 || true
    ucx_perftest -p 13700 127.0.0.1 -x "$1" -d rxe1:1 -t $2 -s "$3" \
        -n "$4" 2>&1 | grep -E '^Final|ERROR' |
        awk -v tl="$1" -v t="$2" -v s="$3" \
            '/Final/ {printf "    %-8s %-16s %8s B: %8.1f MB/s, latency %8.2f us\n", tl, t, s, $7, $3}
             /ERROR/ {print "    " $0}'
    wait "$server"
}

step "1. Real verbs devices in this guest (soft-RoCE over a veth pair)"
ibv_devices | sed 's/^/    /'

step "1. UCX (Debian's ucx_info 1.13.1) with the rc_gdr module preloaded"
ucx_info -d | grep -E 'Memory domain|Transport|Device' |
    grep -B1 -A1 'rc_gdr' | sed 's/^#/   /'
say "Configuration knobs (ucx_info -c):"
ucx_info -c | grep '^UCX_RC_GDR_' | sed 's/^/      /'

step "2. Is GPUDirect RDMA possible here, and if not, why? (rc_gdr_info)"
rc_gdr_info || true
say "(This guest has no GPU; see README 'Emulated GPU' for the stand-in driver.)"

step "3. rc_gdr carrying data: every UCT operation, many sizes and offsets, checked byte for byte"
say "(the data suite of test/gtest/uct: one line per test, then the summary)"
RC_GDR_DEV_A=rxe0:1 RC_GDR_DEV_B=rxe1:1 build/test/gtest/uct/gtest_rc_gdr_uct \
    --gtest_filter='data.*' --gtest_color=no 2>&1 |
    grep -v -e '^\[ RUN' -e '^\[----------\]' -e '^\[==========\] Running' \
        -e '^Note: Google Test filter' -e '^ *$' \
        -e 'ERROR rc_gdr: atomic on unaligned' |
    sed 's/^/    /'

step "3. ucx_perftest over rc_gdr (UCT level, rxe1 -> rxe1)"
perftest_pair rc_gdr "put_bw -D zcopy" 65536 300
perftest_pair rc_gdr "get -D zcopy" 65536 300
perftest_pair rc_gdr am_lat 8 1000

step "3. UCP picks rc_gdr (UCX_TLS=rc_gdr,ud_verbs:aux,self; server rxe0, client rxe1)"
UCX_TLS=rc_gdr,ud_verbs:aux,self UCX_NET_DEVICES=rxe0:1 \
    ucx_perftest -p 13701 > /tmp/demo-ucp-server.log 2>&1 &
server=$!
wait_listen 13701 "$server" 10 || true
UCX_TLS=rc_gdr,ud_verbs:aux,self UCX_NET_DEVICES=rxe1:1 UCX_LOG_LEVEL=info \
    ucx_perftest -p 13701 127.0.0.1 -t tag_bw -s 65536 -n 100 2>&1 |
    grep -E 'ep_cfg|^Final|rc_gdr:' | sed 's/^.*UCX  INFO  */    /; s/^Final:/    Final:/'
wait "$server"

step "3. Open MPI (pml ucx) over rc_gdr: 2 ranks, 8 B .. 4 MiB and MPI_Put/MPI_Get, verified"
mpirun --allow-run-as-root --oversubscribe -np 2 --mca pml ucx \
    --mca btl ^openib,ofi,uct --mca osc ucx \
    -x UCX_TLS=rc_gdr,ud_verbs:aux,self build/test/mpi/mpi_verify 2>&1 |
    sed 's/^/    /'

step "4. For comparison: UCX's own rc_verbs on the same guest"
perftest_pair rc_verbs "put_bw -D zcopy" 65536 300
perftest_pair rc_verbs "get -D zcopy" 65536 300
perftest_pair rc_verbs am_lat 8 1000
say "Soft-RoCE under qemu TCG is slow and noisy: compare ratios, not absolutes"
say "(contrib/bench-rc.sh runs the interleaved comparison with medians)."

step "5. GPU memory, EMULATED (stand-in CUDA driver: host memory behind device pointers)"
(
    . contrib/env.sh --emulated-gpu build
    say "The capability chain for GPU0 <-> rxe0 (rc_gdr_info, abridged):"
    rc_gdr_info 2>/dev/null | sed -n '/<-> rxe0/,/^$/p' |
        grep -E '<->|dmabuf_probe|peermem_registration|mechanism|distance|GDR|bounce' |
        sed 's/^/    /'
    # the GPU tests of the UCT suites (test/gtest/uct/test_gpu.cc): one
    # "[       OK ]" line per test, and what they print about the lanes
    say "GPU buffers over the GDR lane (peermem), UCT level:"
    build/test/gtest/uct/gtest_rc_gdr_uct --gtest_color=no \
        --gtest_filter='gpu.uct_*' 2>&1 |
        grep -E '^\[ +(OK|FAILED|SKIPPED) +\] gpu|^lane|PASSED' |
        sed 's/^/      /'
    say "The same with no registration mechanism allowed: the bounce lane (staging):"
    build/test/gtest/uct/gtest_rc_gdr_uct --gtest_color=no \
        --gtest_filter='gpu_lanes.bounce_registration_when_dmabuf_only' 2>&1 |
        grep -E '^lanes|rc_gdr:|^\[ +(OK|FAILED|SKIPPED) +\]' | sed 's/^/      /'
    say "The bounce lane end to end, GPU buffers on either side (test/gtest/uct/test_bounce.cc):"
    RC_GDR_DEV_A=rxe0:1 RC_GDR_DEV_B=rxe1:1 build/test/gtest/uct/gtest_rc_gdr_uct \
        --gtest_filter='bounce.*/dmabuf_refused' 2>&1 |
        grep -E '^counters|^\[ +(OK|FAILED|SKIPPED|PASSED) +\]' |
        sed 's/, where GetParam().*//; s/ ([0-9]* ms)$//; s/^/      /'
)
