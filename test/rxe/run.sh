#!/bin/bash
#
# Tier 2: real verbs. Runs inside the soft-RoCE guest (contrib/rxe-vm.sh),
# from the repository root, after a build in $RC_GDR_BUILD (default build/).
# Prints one "PASS name" / "FAIL name" / "SKIP name: why" line per test (a
# shell check here, or a gtest test of the UCT suites, test/gtest/uct), the
# output of a failed test, and "N passed, N failed, N skipped" at the end;
# exits non-zero on any failure.
#
# Soft-RoCE under qemu TCG is slow: message counts are kept small.
#
set -uo pipefail

cd "$(dirname "$0")/../.."
. contrib/env.sh "${RC_GDR_BUILD:-build}" || exit 2
B=$RC_GDR_BUILD
LOG=$(mktemp -d /tmp/rc_gdr_rxe.XXXXXX)
PORT=13500

# selected, run_test, run_suite (the UCT suites, GT), run_tests_summary
GT=$B/test/gtest/uct/gtest_rc_gdr_uct
. contrib/lib/run_tests.sh

# wait_listen PORT [PID]: a server must listen before its client starts
. contrib/lib/wait_listen.sh
# has_rc_gdr_on, perftest_uct, perftest_ucp, mpi_verify on DEV_A, DEV_B
DEV_A=rxe0:1
DEV_B=rxe1:1
. contrib/lib/tool_checks.sh

test_ucx_info_devices() {
    has_rc_gdr_on rxe0:1 && has_rc_gdr_on rxe1:1
}

# The System device line of a transport's device in ucx_info -d
sys_dev_of() {
    ucx_info -d | grep -A3 "Transport: $1\$" | grep -A2 "Device: $2\$" |
        grep 'System device' | head -1
}

# rc_gdr reports each device's system device as rc_verbs does for the same
# port (UCP ranks lanes by it); rxe has no PCI function: both unknown here
test_ucx_info_system_device() {
    local dev ours theirs
    for dev in rxe0:1 rxe1:1; do
        ours=$(sys_dev_of rc_gdr "$dev")
        theirs=$(sys_dev_of rc_verbs "$dev")
        echo "rc_gdr   $dev: $ours"
        echo "rc_verbs $dev: $theirs"
        [ -n "$ours" ] && [ "${ours#*:}" = "${theirs#*:}" ] || return 1
    done
}

test_ucx_info_config() {
    ucx_info -c | grep -E '^UCX_RC_GDR_(FAILURE_TIMEOUT|TX_QUEUE_LEN)='
}

# Without memory events (UCX_MEM_EVENTS=no, what a run under valgrind sets)
# the rc_gdr md still opens (host memory uncached), so a UCT perftest that
# opens every md works over rc_verbs and over rc_gdr.
test_no_mem_events() {
    UCX_MEM_EVENTS=no perftest_uct -x rc_verbs -t put_bw -D zcopy -s 65536 \
        -n 100 &&
        UCX_MEM_EVENTS=no perftest_uct -t put_bw -D zcopy -s 65536 -n 100
}

# A UCT perftest whose client runs under valgrind's memcheck (which turns
# UCX's memory events off): no error, and no leak lost for good, with an
# rc_gdr frame in its stack. Errors in UCX or the verbs provider alone are
# printed, not counted: they are not this module's.
test_valgrind_perftest() {
    local port=$((PORT++)) vlog="$LOG/memcheck.log" rc bad
    timeout 300 ucx_perftest -p "$port" -x rc_gdr -d rxe0:1 \
        > "$LOG/server.$port" 2>&1 &
    local server=$!
    wait_listen "$port" || return 1
    timeout 600 valgrind --tool=memcheck --leak-check=full \
        --show-leak-kinds=definite --errors-for-leak-kinds=definite \
        --num-callers=30 --log-file="$vlog" \
        ucx_perftest -p "$port" 127.0.0.1 -x rc_gdr -d rxe1:1 \
        -t put_bw -D zcopy -s 65536 -n 50 > "$LOG/client.$port" 2>&1
    rc=$?
    wait "$server"
    grep '^Final:' "$LOG/client.$port"
    grep 'ERROR SUMMARY\|definitely lost' "$vlog"
    # valgrind's report: blocks separated by "==PID== " lines
    bad=$(awk '/^==[0-9]+== $/ { if (blk ~ /rc_gdr|ib_gdr/ && blk ~ /Invalid|uninitialised|Mismatched|definitely lost|Syscall param|overlap|free\(\)/) { n++; print blk > "/dev/stderr" } blk = ""; next }
               { blk = blk $0 "\n" }
               END { print n + 0 }' "$vlog")
    echo "memcheck: $bad error(s) with an rc_gdr frame"
    [ "$rc" = 0 ] && grep -q '^Final:' "$LOG/client.$port" && [ "$bad" = 0 ]
}

# --- Emulated GPU: the stand-in CUDA driver, "GPU" memory is host memory ---

with_emulated_gpu() {
    ( . contrib/env.sh --emulated-gpu "$B" && "$@" )
}

# rxe refuses DMA-BUF, a test registration proves peermem, the distance
# check does not apply to emulated GPU memory: GDR by peermem.
test_gpu_info() {
    local out
    out=$(with_emulated_gpu rc_gdr_info 2>&1); echo "$out"
    echo "$out" | grep -E 'nic.dmabuf_probe +fail +EOPNOTSUPP' > /dev/null &&
        echo "$out" | grep -E 'nic.peermem_registration +pass' > /dev/null &&
        echo "$out" | grep -E 'registration.mechanism +pass +peermem' \
            > /dev/null &&
        echo "$out" | grep 'EMULATED' > /dev/null &&
        echo "$out" | grep -E '^  relaxed ordering (on|off) ' > /dev/null &&
        echo "$out" | grep -E '^GPU x NIC:' > /dev/null &&
        echo "$out" | grep -E '^GPU0 .*peermem/peermem' > /dev/null &&
        with_emulated_gpu rc_gdr_info --json --require-gdr |
            grep '"matrix": {"gpus": \["GPU0"' > /dev/null
}

# Open MPI moving "GPU" buffers: point-to-point and one-sided, over the GDR
# lane (peermem) and over the bounce lane, which must show staged bytes.
test_mpi_gpu() {
    with_emulated_gpu timeout 300 mpirun --allow-run-as-root --oversubscribe \
        -np 2 --mca pml ucx --mca btl ^openib,ofi,uct --mca osc ucx \
        -x UCX_TLS=rc_gdr,ud_verbs:aux,self -x UCX_LOG_LEVEL=info \
        -x RC_GDR_CUDA_LIBRARY -x UCX_RC_GDR_REG_METHODS \
        "$B/test/mpi/mpi_verify" --gpu > "$LOG/mpi_gpu.out" 2>&1
    local rc=$?
    grep -E '^(ok|BAD|verification)|rc_gdr:' "$LOG/mpi_gpu.out"
    [ "$rc" = 0 ] && grep -q '^verification: PASSED' "$LOG/mpi_gpu.out"
}

test_mpi_gpu_gdr() {
    UCX_RC_GDR_REG_METHODS=dmabuf,peermem test_mpi_gpu
}

test_mpi_gpu_bounce() {
    UCX_RC_GDR_REG_METHODS=dmabuf test_mpi_gpu &&
        grep -Eq 'bounce lane closed: .* [1-9][0-9]* bytes staged' \
            "$LOG/mpi_gpu.out"
}

run_test ucx_info_lists_rc_gdr_on_rxe_ports test_ucx_info_devices
run_test ucx_info_system_device_as_rc_verbs test_ucx_info_system_device
run_test ucx_info_shows_rc_gdr_config      test_ucx_info_config
run_suite -- 'data.*'
run_suite -- 'bad_address.*'
run_suite -- 'pending.*'
run_suite -- 'fork.*'
run_suite -- 'contract.*:contract_keep.*'
run_suite -- 'release.*'
run_suite -- 'peer_death.*'
run_suite -- 'event.*:event_short_cq.*:event_ucp.*'
run_suite -- 'ucp_rndv.*'
run_test perftest_uct_put_bw_zcopy  perftest_uct -t put_bw -D zcopy -s 65536 -n 200
run_test perftest_uct_put_bw_bcopy  perftest_uct -t put_bw -D bcopy -s 8192 -n 200
run_test perftest_uct_get_zcopy     perftest_uct -t get -D zcopy -s 65536 -n 200
run_test perftest_uct_get_bcopy     perftest_uct -t get -D bcopy -s 8192 -n 200
run_test perftest_uct_am_bw_bcopy   perftest_uct -t am_bw -D bcopy -s 8192 -n 200
run_test perftest_uct_am_lat        perftest_uct -t am_lat -s 8 -n 500
run_test perftest_uct_put_lat       perftest_uct -t put_lat -s 8 -n 500
run_test perftest_uct_without_mem_events test_no_mem_events
run_test perftest_uct_under_valgrind_memcheck test_valgrind_perftest
run_test perftest_ucp_tag_bw        perftest_ucp -t tag_bw -s 65536 -n 100
run_test perftest_ucp_tag_lat       perftest_ucp -t tag_lat -s 8 -n 200
run_test perftest_ucp_put_bw        perftest_ucp -t ucp_put_bw -s 65536 -n 100
run_test perftest_ucp_get           perftest_ucp -t ucp_get -s 65536 -n 100
run_test perftest_ucp_stream_bw     perftest_ucp -t stream_bw -s 65536 -n 100
run_test mpi_2ranks_p2p_and_rma_verified mpi_verify mpi
# MPI_THREAD_MULTIPLE (mpi_verify --threads): four threads per rank
# exchange at once, each allocating and freeing its buffers (memory hooks on
# one thread while the others transfer); UCP opens its UCT worker
# SERIALIZED, which rc_gdr serves.
run_test mpi_2ranks_thread_multiple_verified mpi_verify mpi_threads --threads
# uct_md_query: host memory only without a CUDA driver, cuda with one (the
# driver is found once per process)
run_suite env RC_GDR_CUDA_LIBRARY=/nonexistent/libcuda.so.1 -- \
    'memtypes.host_only_without_cuda_driver'
run_suite with_emulated_gpu -- 'memtypes.cuda_with_cuda_driver'
run_test gpu_emulated_info_dmabuf_refused_peermem_proven test_gpu_info
# "GPU" memory through UCT and UCP; the lanes rc_gdr's knobs force
run_suite with_emulated_gpu -- \
    'gpu.*:gpu_emulated.gdr_lane_by_peermem:gpu_emulated.ucp_put_get_beside_cuda_copy:gpu_lanes.*'
# Flush by RDMA READ: a GPU that does not order incoming writes (attribute
# NONE) gets one read per flush, one that does (OWNER) none, "never" never;
# the stand-in reads the attribute when it loads
run_suite with_emulated_gpu env RC_GDR_FAKE_CUDA_WRITES_ORDERING=0 -- \
    'gpu_flush.read_once_for_ordering_none:gpu_flush.never_means_no_read'
run_suite with_emulated_gpu env RC_GDR_FAKE_CUDA_WRITES_ORDERING=100 -- \
    'gpu_flush.no_read_for_ordering_owner'
run_suite -- 'flush.*'
# The bounce lane (no mechanism: rxe refuses DMA-BUF, peermem not allowed;
# or the policy turns GDR off), UCT and UCP, and a peer killed mid-transfer
run_suite with_emulated_gpu -- 'bounce.*/dmabuf_refused'
run_suite with_emulated_gpu -- 'bounce_peer_death.*'
run_suite with_emulated_gpu -- 'bounce_ucp.*'
run_suite with_emulated_gpu -- 'bounce.*/policy_gdr_off'
run_suite with_emulated_gpu -- 'bounce_attacker.*'
run_suite -- 'callback_destroy.*'
run_suite with_emulated_gpu -- 'callback_destroy_gpu_emulated.*'
# One direction on the GDR lane, the other bounced (an ordering GPU keeps
# one direction on GDR with NIC_READS_GPU=no)
run_suite with_emulated_gpu env RC_GDR_FAKE_CUDA_WRITES_ORDERING=100 -- \
    'gpu_emulated.*_on_ordering_gpu'
run_suite with_emulated_gpu -- \
    'gpu_emulated.uct_nic_writes_gpu_off:gpu_emulated.ucp_nic_reads_gpu_off_flush_always'
run_test mpi_2ranks_gpu_buffers_gdr_lane        test_mpi_gpu_gdr
run_test mpi_2ranks_gpu_buffers_bounce_lane     test_mpi_gpu_bounce

rm -rf "$LOG"
run_tests_summary
