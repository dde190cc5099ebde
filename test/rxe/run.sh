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
PASSED=0
FAILED=0
SKIPPED=0
PORT=13500

# Whether test NAME runs: RC_GDR_TEST_FILTER=REGEX runs only the tests
# whose names match
selected() {
    [ -z "${RC_GDR_TEST_FILTER:-}" ] || [[ $1 =~ $RC_GDR_TEST_FILTER ]]
}

# Runs one test: NAME CMD... ; the command's output goes to a log shown on
# failure.
run_test() {
    local name=$1; shift
    selected "$name" || return 0
    if "$@" > "$LOG/$name.log" 2>&1; then
        echo "PASS $name"
        PASSED=$((PASSED + 1))
    else
        echo "FAIL $name"
        sed 's/^/    | /' "$LOG/$name.log" | tail -40
        FAILED=$((FAILED + 1))
    fi
}

# The UCT suites (test/gtest/uct): gtest tests over two rc_gdr nodes
GT=$B/test/gtest/uct/gtest_rc_gdr_uct
SUITE_RUNS=0

# run_suite [WRAPPER...] -- GTEST_FILTER: the suites' tests that match the
# filter (and RC_GDR_TEST_FILTER), in one process under WRAPPER (env VAR=...,
# with_emulated_gpu). Each gtest test is one result, counted like run_test's;
# a failed one shows its output, and a process that crashes or hangs fails
# every test it did not finish.
run_suite() {
    local wrap=() names=() name log rc
    while [ "$1" != -- ]; do wrap+=("$1"); shift; done
    shift
    while read -r name; do
        [ -n "$name" ] && selected "$name" && names+=("$name")
    done <<< "$("$GT" --gtest_list_tests --gtest_filter="$1" |
                awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }')"
    [ ${#names[@]} -gt 0 ] || return 0

    log=$LOG/suite.$((++SUITE_RUNS))
    "${wrap[@]}" timeout "${SUITE_TIMEOUT:-900}" "$GT" --gtest_color=no \
        --gtest_filter="$(IFS=:; echo "${names[*]}")" > "$log" 2>&1
    rc=$?
    for name in "${names[@]}"; do
        if grep -qF "[       OK ] $name (" "$log"; then
            echo "PASS $name"
            PASSED=$((PASSED + 1))
        elif grep -qF "[  SKIPPED ] $name (" "$log"; then
            echo "SKIP $name: $(sed -n "/^\[ RUN      \] $name\$/,/^\[  SKIPPED \]/p" \
                                 "$log" | sed -n '3p')"
            SKIPPED=$((SKIPPED + 1))
        else
            echo "FAIL $name"
            # its output, or the end of the log when it never finished
            if grep -qF "[  FAILED  ] $name (" "$log"; then
                sed -n "/^\[ RUN      \] $name\$/,/^\[  FAILED  \] $name (/p" \
                    "$log" | sed 's/^/    | /' | tail -60
            else
                echo "    | (exit status $rc; the test did not finish)"
                sed 's/^/    | /' "$log" | tail -40
            fi
            FAILED=$((FAILED + 1))
        fi
    done
}

# wait_listen PORT [PID]: a server must listen before its client starts
. contrib/lib/wait_listen.sh

has_rc_gdr_on() {
    # (no grep -q in pipes: an early exit would fail them under pipefail)
    ucx_info -d | grep -A1 'Transport: rc_gdr' | grep "Device: $1"
}

test_ucx_info_devices() {
    has_rc_gdr_on rxe0:1 && has_rc_gdr_on rxe1:1
}

test_ucx_info_config() {
    ucx_info -c | grep -E '^UCX_RC_GDR_(FAILURE_TIMEOUT|TX_QUEUE_LEN)='
}

# The UCT programs check every byte themselves and end with "0 failed".
test_uct_verify() {
    timeout 300 "$B/test/apps/uct_verify" "$@" > "$LOG/uct.out" 2>&1
    local rc=$?
    grep -v '^PASS' "$LOG/uct.out"
    [ "$rc" = 0 ] && grep -q '^[0-9]* passed, 0 failed$' "$LOG/uct.out"
}

# What UCX's own UCT suites found, each check reduced (test/apps/uct_contract.c)
test_uct_contract() {
    timeout 300 "$B/test/apps/uct_contract" "$@" > "$LOG/contract.out" 2>&1
    local rc=$?
    cat "$LOG/contract.out"
    [ "$rc" = 0 ] && grep -q '^[0-9]* passed, 0 failed$' "$LOG/contract.out"
}

test_peer_death() {
    test_uct_verify peer-death rxe1:1 rxe0:1 "$1"
}

test_peer_death_configured() {
    UCX_RC_GDR_FAILURE_TIMEOUT=2s test_peer_death 3
}

# The transport's own timeout never fires (rxe retries forever at
# RETRY_COUNT=7, as when a NIC loses its retry timer): the stall check
# (UCX_RC_GDR_TX_STALL_TIMEOUT) reports the dead peer instead.
test_peer_death_stalled() {
    UCX_RC_GDR_RETRY_COUNT=7 UCX_RC_GDR_TX_STALL_TIMEOUT=4s test_peer_death 8
}

# The same with active messages and a flush: the survivor's SENDs to the dead
# peer, which UCX's test_uct_peer_failure_multiple waits on (issue 10), end
# with the stall check's error too.
test_peer_death_am_stalled() {
    UCX_RC_GDR_RETRY_COUNT=7 UCX_RC_GDR_TX_STALL_TIMEOUT=4s \
        test_uct_verify peer-death-am rxe1:1 rxe0:1 8
}

# Interface events: event fd and arm at UCT level (woken by a message and by
# a completion, BUSY until progress took them), then UCP's blocking progress
# (ucp_worker_wait) with the data on rc_gdr.
test_events() {
    timeout 200 "$B/test/apps/uct_event" uct rxe0:1 rxe1:1 \
        > "$LOG/event.out" 2>&1 &&
    UCX_TLS=rc_gdr,ud_verbs:aux,self UCX_LOG_LEVEL=info \
        timeout 200 "$B/test/apps/uct_event" ucp >> "$LOG/event.out" 2>&1
    local rc=$?
    grep -Ev '^PASS|UCX  INFO' "$LOG/event.out"
    [ "$rc" = 0 ] &&
        [ "$(grep -c '^[0-9]* passed, 0 failed$' "$LOG/event.out")" = 2 ] &&
        grep -Eq 'rc_gdr: rxe[01]:1 closed: [1-9][0-9]* work requests' \
            "$LOG/event.out"
}

# ucx_perftest at UCT level. Up to 1.21 the server takes -x/-d from the
# client; 1.22 wants its own (older releases accept and override them).
perftest_uct() {
    local port=$((PORT++))
    timeout 120 ucx_perftest -p "$port" -x rc_gdr -d rxe0:1 \
        > "$LOG/server.$port" 2>&1 &
    local server=$!
    wait_listen "$port" || return 1
    timeout 100 ucx_perftest -p "$port" 127.0.0.1 -x rc_gdr -d rxe1:1 "$@" \
        > "$LOG/client.$port" 2>&1
    local rc=$?
    wait "$server"
    cat "$LOG/client.$port"
    [ "$rc" = 0 ] && grep -q '^Final:' "$LOG/client.$port"
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

# ucx_perftest at UCP level, server on rxe0 and client on rxe1 (the traffic
# crosses the veth); rc_gdr must be the lane UCP chose and must have posted
# work, with rc_verbs absent from UCX_TLS.
perftest_ucp() {
    local port=$((PORT++))
    export UCX_TLS=rc_gdr,ud_verbs:aux,self UCX_LOG_LEVEL=info
    UCX_NET_DEVICES=rxe0:1 timeout 120 ucx_perftest -p "$port" \
        > "$LOG/server.$port" 2>&1 &
    local server=$!
    wait_listen "$port" || return 1
    UCX_NET_DEVICES=rxe1:1 timeout 100 ucx_perftest -p "$port" 127.0.0.1 \
        "$@" > "$LOG/client.$port" 2>&1
    local rc=$?
    wait "$server"
    unset UCX_TLS UCX_LOG_LEVEL
    grep -E '^Final:|ep_cfg|rc_gdr:' "$LOG/client.$port"
    [ "$rc" = 0 ] && grep -q '^Final:' "$LOG/client.$port" &&
        grep -q '(rc_gdr/rxe1:1)' "$LOG/client.$port" &&
        grep -Eq 'rc_gdr: rxe1:1 closed: [1-9][0-9]* work requests' \
            "$LOG/client.$port"
}

test_mpi() {
    timeout 200 mpirun --allow-run-as-root --oversubscribe -np 2 \
        --mca pml ucx --mca btl ^openib,ofi,uct --mca osc ucx \
        -x UCX_TLS=rc_gdr,ud_verbs:aux,self -x UCX_LOG_LEVEL=info \
        "$B/test/apps/mpi_verify" > "$LOG/mpi.out" 2>&1
    local rc=$?
    grep -E '^(PASS|FAIL|verification)|rc_gdr:' "$LOG/mpi.out"
    [ "$rc" = 0 ] && grep -q '^verification: PASSED' "$LOG/mpi.out" &&
        grep -Eq 'rc_gdr: rxe[01]:1 closed: [1-9][0-9]* work requests' \
            "$LOG/mpi.out"
}

# MPI_THREAD_MULTIPLE: four threads per rank exchange at once, each
# allocating and freeing its buffers (memory hooks on one thread while the
# others transfer); UCP opens its UCT worker SERIALIZED, which rc_gdr serves.
test_mpi_threads() {
    timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 \
        --mca pml ucx --mca btl ^openib,ofi,uct --mca osc ucx \
        -x UCX_TLS=rc_gdr,ud_verbs:aux,self -x UCX_LOG_LEVEL=info \
        "$B/test/apps/mpi_verify" --threads > "$LOG/mpi_threads.out" 2>&1
    local rc=$?
    grep -E '^(PASS|FAIL|verification)|rc_gdr:' "$LOG/mpi_threads.out"
    [ "$rc" = 0 ] && grep -q '^verification: PASSED' "$LOG/mpi_threads.out" &&
        grep -Eq 'rc_gdr: rxe[01]:1 closed: [1-9][0-9]* work requests' \
            "$LOG/mpi_threads.out"
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
        with_emulated_gpu rc_gdr_info --json --require-gdr > /dev/null
}

# uct_md_query: cuda among the registered and detected memory types with a
# CUDA driver, host memory only without one.
test_memtypes_host() {
    RC_GDR_CUDA_LIBRARY=/nonexistent/libcuda.so.1 \
        "$B/test/apps/uct_gpu" memtypes rxe0:1 host
}

test_memtypes_cuda() {
    with_emulated_gpu "$B/test/apps/uct_gpu" memtypes rxe0:1 cuda
}

test_gpu_uct() {
    with_emulated_gpu "$B/test/apps/uct_gpu" uct rxe0:1 rxe1:1 > "$LOG/gpu.out"
    local rc=$?
    cat "$LOG/gpu.out"
    [ "$rc" = 0 ] && grep -q 'peermem 1, dmabuf 0, bounce 0' "$LOG/gpu.out"
}

test_gpu_ucp() {
    UCX_TLS=rc_gdr,ud_verbs:aux,self with_emulated_gpu \
        "$B/test/apps/uct_gpu" ucp
}

# A CUDA build of UCX: its cuda_copy loaded on the stand-in driver and
# listed, and UCP, with cuda_copy among its transports for its own copies,
# moving "GPU" memory over rc_gdr (the module's counters: work requests)
has_cuda_copy() {
    with_emulated_gpu ucx_info -d 2>/dev/null | grep 'Transport: cuda_copy'
}

test_gpu_ucp_cuda_copy() {
    UCX_TLS=rc_gdr,ud_verbs:aux,self,cuda_copy UCX_LOG_LEVEL=info \
        with_emulated_gpu "$B/test/apps/uct_gpu" ucp > "$LOG/cuda_copy.out" 2>&1
    local rc=$?
    grep -Ev 'UCX  INFO' "$LOG/cuda_copy.out"
    [ "$rc" = 0 ] && grep -q '^2 passed, 0 failed$' "$LOG/cuda_copy.out" &&
        grep -Eq 'rc_gdr: rxe[01]:1 closed: [1-9][0-9]* work requests' \
            "$LOG/cuda_copy.out"
}

# No mechanism left (DMA-BUF only, which rxe refuses): a bounce
# registration, which succeeds without any NIC registration.
test_gpu_bounce_registration() {
    local out
    out=$(UCX_RC_GDR_REG_METHODS=dmabuf with_emulated_gpu \
          "$B/test/apps/uct_gpu" lanes rxe0:1 2>&1); echo "$out"
    echo "$out" | grep -q 'peermem 0 dmabuf 0 bounce 1' &&
        UCX_RC_GDR_REG_METHODS=dmabuf with_emulated_gpu \
            "$B/test/apps/uct_gpu" estimate rxe0:1 bounce &&
        with_emulated_gpu "$B/test/apps/uct_gpu" estimate rxe0:1 gdr
}

# am_zcopy from GPU memory on the GDR lane (a NIC key) and on the bounce
# lane (none: the send stages the bytes), byte-exact.
test_gpu_am_zcopy() {
    local out rc
    with_emulated_gpu "$B/test/apps/uct_gpu" am rxe0:1 rxe1:1 || return 1
    out=$(UCX_RC_GDR_REG_METHODS=dmabuf with_emulated_gpu \
          "$B/test/apps/uct_gpu" am rxe0:1 rxe1:1 2>&1); rc=$?
    echo "$out"
    [ "$rc" = 0 ] && echo "$out" | grep -q 'bounce 1'
}

# Flush by RDMA READ: a GPU that does not order incoming writes (attribute
# NONE) gets one read per flush, one that does (OWNER) none; "always" reads
# for host memory too, "never" never; a peer that dies while the read is
# outstanding ends the flush with an error.
test_flush_gpu_ordering_none() {
    RC_GDR_FAKE_CUDA_WRITES_ORDERING=0 with_emulated_gpu \
        "$B/test/apps/uct_gpu" flush rxe0:1 rxe1:1 1
}

test_flush_gpu_ordering_owner() {
    RC_GDR_FAKE_CUDA_WRITES_ORDERING=100 with_emulated_gpu \
        "$B/test/apps/uct_gpu" flush rxe0:1 rxe1:1 0
}

test_flush_gpu_never() {
    UCX_RC_GDR_FLUSH=never RC_GDR_FAKE_CUDA_WRITES_ORDERING=0 \
        with_emulated_gpu "$B/test/apps/uct_gpu" flush rxe0:1 rxe1:1 0
}

test_flush_counts() {
    test_uct_flush counts rxe0:1 rxe1:1
}

test_flush_peer_death() {
    test_uct_flush peer-death rxe0:1 rxe1:1 3
}

test_uct_flush() {
    timeout 300 "$B/test/apps/uct_flush" "$@" > "$LOG/flush.out" 2>&1
    local rc=$?
    grep -v '^PASS' "$LOG/flush.out"
    [ "$rc" = 0 ] && grep -q '^[0-9]* passed, 0 failed$' "$LOG/flush.out"
}

# The bounce lane: no mechanism (rxe refuses DMA-BUF and peermem is not
# allowed), so GPU memory moves through pinned staging and, at a keyless
# target, through messages the target copies in.
test_bounce() {
    UCX_RC_GDR_REG_METHODS=dmabuf with_emulated_gpu \
        "$B/test/apps/uct_bounce" "$@" > "$LOG/bounce.out" 2>&1
    local rc=$?
    grep -v '^PASS' "$LOG/bounce.out"
    [ "$rc" = 0 ] && grep -q '^[0-9]* passed, 0 failed$' "$LOG/bounce.out"
}

test_bounce_peer_death() {
    UCX_RC_GDR_FAILURE_TIMEOUT=2s test_bounce peer-death rxe0:1 rxe1:1
}

test_bounce_ucp() {
    UCX_TLS=rc_gdr,ud_verbs:aux,self test_bounce ucp
}

test_bounce_direction_policy() {
    UCX_RC_GDR_REG_METHODS=dmabuf,peermem UCX_RC_GDR_NIC_READS_GPU=no \
        UCX_RC_GDR_NIC_WRITES_GPU=no with_emulated_gpu \
        "$B/test/apps/uct_bounce" uct rxe0:1 rxe1:1 > "$LOG/bounce.out" 2>&1
    local rc=$?
    grep -v '^PASS' "$LOG/bounce.out"
    [ "$rc" = 0 ]
}

# A user callback destroys its endpoint: the receive path (after an active
# message handler) and the bounce lane (a completion called from its
# receive path or from its sweep of a dead endpoint) never touch it again;
# freed memory poisoned, so that a use after free crashes
test_callback_destroy() {
    MALLOC_PERTURB_=165 timeout 120 \
        "$B/test/apps/uct_callback_destroy" am rxe0:1 rxe1:1 &&
    MALLOC_PERTURB_=165 UCX_RC_GDR_REG_METHODS=dmabuf with_emulated_gpu \
        timeout 120 "$B/test/apps/uct_callback_destroy" bounce rxe0:1 rxe1:1 &&
    MALLOC_PERTURB_=165 UCX_RC_GDR_REG_METHODS=dmabuf \
        UCX_RC_GDR_FAILURE_TIMEOUT=2s with_emulated_gpu timeout 120 \
        "$B/test/apps/uct_callback_destroy" bounce-death rxe0:1 rxe1:1
}

# One direction on the GDR lane, the other bounced: the target's policy
# travels in its rkey (NO_READ / NO_WRITE), and peers bounce accordingly,
# the flush read still reaching GPUs that need it.
# (NIC_READS_GPU=no on a GPU that needs the flush read would bounce writes
# too: the read is what the NIC may not do. An ordering GPU keeps one
# direction on GDR; the last case is the other.)
test_one_direction() {
    RC_GDR_FAKE_CUDA_WRITES_ORDERING=100 UCX_RC_GDR_NIC_READS_GPU=no \
        with_emulated_gpu "$B/test/apps/uct_gpu" uct rxe0:1 rxe1:1 &&
    UCX_RC_GDR_NIC_WRITES_GPU=no with_emulated_gpu \
        "$B/test/apps/uct_gpu" uct rxe0:1 rxe1:1 &&
    RC_GDR_FAKE_CUDA_WRITES_ORDERING=100 UCX_RC_GDR_NIC_READS_GPU=no \
        UCX_TLS=rc_gdr,ud_verbs:aux,self \
        with_emulated_gpu "$B/test/apps/uct_gpu" ucp &&
    UCX_RC_GDR_NIC_READS_GPU=no UCX_RC_GDR_FLUSH=always \
        UCX_TLS=rc_gdr,ud_verbs:aux,self \
        with_emulated_gpu "$B/test/apps/uct_gpu" ucp
}

# Open MPI moving "GPU" buffers: point-to-point and one-sided, over the GDR
# lane (peermem) and over the bounce lane, which must show staged bytes.
test_mpi_gpu() {
    with_emulated_gpu timeout 300 mpirun --allow-run-as-root --oversubscribe \
        -np 2 --mca pml ucx --mca btl ^openib,ofi,uct --mca osc ucx \
        -x UCX_TLS=rc_gdr,ud_verbs:aux,self -x UCX_LOG_LEVEL=info \
        -x RC_GDR_CUDA_LIBRARY -x UCX_RC_GDR_REG_METHODS \
        "$B/test/apps/mpi_verify" --gpu > "$LOG/mpi_gpu.out" 2>&1
    local rc=$?
    grep -E '^(PASS|FAIL|verification)|rc_gdr:' "$LOG/mpi_gpu.out"
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

# Requiring GDR where no mechanism works: opening fails, naming the check.
test_gpu_require_refused() {
    local out rc
    out=$(UCX_RC_GDR_REG_METHODS=dmabuf UCX_RC_GDR_REQUIRE=gdr \
          with_emulated_gpu "$B/test/apps/uct_gpu" lanes rxe0:1 2>&1); rc=$?
    echo "$out"
    [ "$rc" != 0 ] && echo "$out" | grep -q 'registration.mechanism'
}

run_test ucx_info_lists_rc_gdr_on_rxe_ports test_ucx_info_devices
run_test ucx_info_shows_rc_gdr_config      test_ucx_info_config
run_test uct_data_all_ops_byte_exact       test_uct_verify data rxe0:1 rxe1:1
run_test uct_corrupt_addresses_refused     test_uct_verify bad-address rxe0:1
run_test uct_pending_before_connect_sent   test_uct_verify pending-connect rxe0:1 rxe1:1
run_test uct_fork_children_leave_registrations test_uct_verify fork rxe0:1 rxe1:1
run_test uct_contract_regressions         test_uct_contract rxe0:1 rxe1:1
run_suite -- 'release.*'
run_test uct_peer_killed_reported_in_10s   test_peer_death 10
run_test uct_peer_killed_configured_bound  test_peer_death_configured
run_test uct_peer_killed_retries_forever_stall_reported test_peer_death_stalled
run_test uct_peer_killed_am_retries_forever_stall_reported test_peer_death_am_stalled
run_test uct_ucp_events_fd_arm_and_wait    test_events
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
run_test mpi_2ranks_p2p_and_rma_verified test_mpi
run_test mpi_2ranks_thread_multiple_verified test_mpi_threads
run_test md_memory_types_host_only_without_cuda test_memtypes_host
run_test md_memory_types_cuda_with_cuda_driver  test_memtypes_cuda
run_test gpu_emulated_info_dmabuf_refused_peermem_proven test_gpu_info
run_test gpu_emulated_uct_put_get_and_reuse     test_gpu_uct
run_test gpu_emulated_ucp_put_get               test_gpu_ucp
if ! selected gpu_emulated_ucp_beside_cuda_copy; then
    :
elif has_cuda_copy > /dev/null; then
    run_test gpu_emulated_ucp_beside_cuda_copy  test_gpu_ucp_cuda_copy
else
    echo "SKIP gpu_emulated_ucp_beside_cuda_copy: this UCX has no cuda_copy" \
         "(a CUDA build of UCX has)"
    SKIPPED=$((SKIPPED + 1))
fi
run_test gpu_emulated_bounce_registration       test_gpu_bounce_registration
run_test gpu_emulated_am_zcopy_either_lane      test_gpu_am_zcopy
run_test gpu_emulated_require_gdr_names_check   test_gpu_require_refused
run_test flush_read_once_for_gpu_ordering_none  test_flush_gpu_ordering_none
run_test flush_no_read_for_gpu_ordering_owner   test_flush_gpu_ordering_owner
run_test flush_never_means_no_read              test_flush_gpu_never
run_test flush_always_and_counts_host_memory    test_flush_counts
run_test flush_read_peer_killed_reports_error   test_flush_peer_death
run_test bounce_uct_put_get_gpu_either_side     test_bounce uct rxe0:1 rxe1:1
run_test bounce_peer_killed_buffers_returned    test_bounce_peer_death
run_test bounce_ucp_put_get_gpu                 test_bounce_ucp
run_test bounce_when_policy_turns_gdr_off       test_bounce_direction_policy
# A malicious peer over raw verbs against a target serving keyless memory:
# every crafted request refused and counted, guards intact, queues bounded,
# an honest peer served afterwards (test/gtest/uct/test_bounce_attacker.cc)
run_suite with_emulated_gpu -- 'bounce_attacker.*'
run_test uct_callback_destroys_endpoint        test_callback_destroy
run_test gdr_one_direction_bounce_the_other     test_one_direction
run_test mpi_2ranks_gpu_buffers_gdr_lane        test_mpi_gpu_gdr
run_test mpi_2ranks_gpu_buffers_bounce_lane     test_mpi_gpu_bounce

rm -rf "$LOG"
echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" = 0 ]
