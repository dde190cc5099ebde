#!/bin/bash
#
# Tier 6: the stand-in NIC, native (doc/DESIGN.md section 6). Runs on this
# machine, no qemu: the stand-in's libibverbs.so.1 (test/tnic/README.md)
# serves UCX's IB md, rc_verbs, ud_verbs and rc_gdr on tnic0:1 and tnic1:1.
# From the repository root, after a build in $RC_GDR_BUILD (default build/)
# that made the stand-in (make check).
#
# The same checks as the soft-RoCE guest (test/rxe/run.sh, whose helpers
# are contrib/lib/): the stand-in's own suite, rc_gdr's UCT and UCP gtest
# suites (plain and with the stand-in CUDA driver), ucx_info, ucx_perftest
# at UCT and UCP level between two processes, 2-rank Open MPI byte-exact,
# the fault tests (test/gtest/uct/test_tnic_faults.cc, test_ucp_cut.cc);
# and, with RC_GDR_TNIC_CONFORMANCE=1 (off by default here: it builds UCX's gtest
# once; contrib/test.sh runs them after tier 4, which built it), UCX's own
# UCT suites on the stand-in (contrib/conformance.sh --tnic).
# Prints one "PASS name (STAND-IN NIC)" / "FAIL ..." / "SKIP ...: why" line
# per result, the output of a failed one, and "N passed, N failed,
# N skipped" at the end; exits non-zero on any failure.
#
# Each run has a fabric of its own (RC_GDR_TNIC_FABRIC), removed at the end.
#
set -uo pipefail

cd "$(dirname "$0")/../.."
. contrib/env.sh "${RC_GDR_BUILD:-build}" || exit 2
B=$RC_GDR_BUILD
TNIC_LIB=$B/test/tnic/lib
if [ ! -f "$TNIC_LIB/libibverbs.so.1" ]; then
    echo "test/tnic/run.sh: no stand-in NIC in $TNIC_LIB (make -C $B check" \
         "TESTS=)" >&2
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
fi
export LD_LIBRARY_PATH=$TNIC_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export RC_GDR_TNIC_FABRIC=${RC_GDR_TNIC_FABRIC:-ci$$}
export RC_GDR_DEV_A=tnic0:1 RC_GDR_DEV_B=tnic1:1
LOG=$(mktemp -d /tmp/rc_gdr_tnic.XXXXXX)
PORT=$((14000 + $$ % 1000 * 10))
START_S=$SECONDS

cleanup() {
    rm -rf "$LOG"
    rm -f "/dev/shm/rc_gdr_tnic.$RC_GDR_TNIC_FABRIC".*
}
trap cleanup EXIT

# selected, run_test, run_skip, run_suite, run_tests_summary; every result
# line says STAND-IN NIC
GT=$B/test/gtest/uct/gtest_rc_gdr_uct
RESULT_TAG="STAND-IN NIC"
. contrib/lib/run_tests.sh
. contrib/lib/wait_listen.sh
# has_rc_gdr_on, perftest_uct, perftest_ucp, mpi_verify
DEV_A=tnic0:1
DEV_B=tnic1:1
# The ranks load the stand-in and rc_gdr, on this run's fabric (Open MPI's
# openib BTL, which would open the stand-in too, is left out by
# mpi_verify's --mca btl ^openib,ofi,uct)
MPI_ARGS=(-x LD_LIBRARY_PATH -x LD_PRELOAD -x RC_GDR_TNIC_FABRIC)
. contrib/lib/tool_checks.sh

with_emulated_gpu() {
    ( . contrib/env.sh --emulated-gpu "$B" && "$@" )
}

# The stand-in's own suite (test/gtest/tnic), one result per test; its
# CUDA memory tests over the stand-in CUDA driver (EMULATED GPU; tier 3
# runs them on a real GPU: test/gpu/run_tnic_gpu.sh)
run_tnic_suite() {
    GT=$B/test/gtest/tnic/gtest_tnic run_suite -- '*:-tnic_cuda.*'
    GT=$B/test/gtest/tnic/gtest_tnic run_suite with_emulated_gpu -- \
        'tnic_cuda.*'
}

test_ucx_info_devices() {
    local out
    out=$(ucx_info -d 2>&1)
    for tl in rc_gdr rc_verbs ud_verbs; do
        for dev in tnic0:1 tnic1:1; do
            echo "$out" | grep -A1 "Transport: $tl\$" |
                grep "Device: $dev" > /dev/null ||
                { echo "ucx_info -d lists no $tl on $dev"; return 1; }
        done
    done
    echo "rc_gdr, rc_verbs, ud_verbs on tnic0:1 and tnic1:1"
}

run_test ucx_info_lists_rc_gdr_rc_verbs_ud_verbs_on_tnic test_ucx_info_devices
run_tnic_suite
# rc_gdr's suites as the guest runs them (test/rxe/run.sh), and the faults
run_suite -- 'data.*:bad_address.*:pending.*:state_signal.*:fork.*:contract.*:contract_keep.*:release.*:peer_death.*:event.*:event_short_cq.*:event_ucp.*:ucp_rndv.*:flush.*:callback_destroy.*'
run_suite -- 'tnic_fault.*:tnic_fault_reg.*:ucp_cut.*'
run_suite env RC_GDR_CUDA_LIBRARY=/nonexistent/libcuda.so.1 -- \
    'memtypes.host_only_without_cuda_driver'
run_suite with_emulated_gpu -- 'memtypes.cuda_with_cuda_driver'
run_suite with_emulated_gpu -- \
    'gpu.*:gpu_emulated.gdr_lane_by_peermem:gpu_emulated.gdr_lane_by_dmabuf:gpu_emulated.ucp_put_get_beside_cuda_copy:gpu_lanes.*'
run_suite with_emulated_gpu env RC_GDR_FAKE_CUDA_WRITES_ORDERING=0 -- \
    'gpu_flush.read_once_for_ordering_none:gpu_flush.never_means_no_read'
run_suite with_emulated_gpu env RC_GDR_FAKE_CUDA_WRITES_ORDERING=100 -- \
    'gpu_flush.no_read_for_ordering_owner'
run_suite with_emulated_gpu -- \
    'bounce.*/dmabuf_refused:bounce_peer_death.*:bounce_ucp.*:bounce.*/policy_gdr_off:bounce_attacker.*:callback_destroy_gpu_emulated.*'
run_suite with_emulated_gpu env RC_GDR_FAKE_CUDA_WRITES_ORDERING=100 -- \
    'gpu_emulated.*_on_ordering_gpu'
run_suite with_emulated_gpu -- \
    'gpu_emulated.uct_nic_writes_gpu_off:gpu_emulated.ucp_nic_reads_gpu_off_flush_always'

# UCX's tools between two processes, rc_gdr and rc_verbs
for tl in rc_gdr rc_verbs; do
    run_test "perftest_uct_${tl}_put_bw_zcopy" \
        perftest_uct -x $tl -t put_bw -D zcopy -s 65536 -n 1000
    run_test "perftest_uct_${tl}_get_zcopy" \
        perftest_uct -x $tl -t get -D zcopy -s 65536 -n 1000
    run_test "perftest_uct_${tl}_am_lat" \
        perftest_uct -x $tl -t am_lat -s 8 -n 2000
done
# UCP's path for a message that arrived before its receive (UCX 1.13 leaves
# recv_info unwritten there: wire_check's server once took the previous
# message's tag and length, and the wire tier hung)
for tl in rc_gdr rc_verbs; do
    run_test "wire_check_${tl}_receive_after_arrival" wire_check_late $tl
done
run_test perftest_ucp_tag_bw perftest_ucp -t tag_bw -s 65536 -n 500
run_test perftest_ucp_put_bw perftest_ucp -t ucp_put_bw -s 65536 -n 500
run_test perftest_ucp_get    perftest_ucp -t ucp_get -s 65536 -n 500
run_test mpi_2ranks_p2p_and_rma_verified mpi_verify mpi

# UCX's own UCT suites on the stand-in, rc_gdr beside rc_verbs
if [ "${RC_GDR_TNIC_CONFORMANCE:-0}" = 1 ] && selected conformance; then
    contrib/conformance.sh --core --tnic --no-build > "$LOG/conformance" 2>&1
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' \
           "$LOG/conformance" | tail -n1)
    grep -E '^ *(failed|crashed|hung):' "$LOG/conformance" | head -40
    if [ -n "$line" ]; then
        # shellcheck disable=SC2046  # three numbers
        set -- $(echo "$line" | awk '{print $1, $3, $5}')
        echo "${1} passed, ${2} failed, ${3} skipped: UCX's UCT suites" \
             "(conformance --tnic) ($RESULT_TAG)"
        PASSED=$((PASSED + $1)) FAILED=$((FAILED + $2)) SKIPPED=$((SKIPPED + $3))
    else
        echo "FAIL conformance_on_stand_in ($RESULT_TAG)"
        tail -20 "$LOG/conformance" | sed 's/^/    | /'
        FAILED=$((FAILED + 1))
    fi
else
    run_skip conformance "UCX's UCT suites on the stand-in run with\
 RC_GDR_TNIC_CONFORMANCE=1, or after tier 4 in contrib/test.sh"
fi

echo "stand-in NIC tier: $((SECONDS - START_S)) s"
run_tests_summary
