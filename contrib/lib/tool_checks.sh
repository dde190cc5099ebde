# Sourced by the tiers that check UCX's tools over two devices
# (test/rxe/run.sh: rxe0:1 and rxe1:1 in the soft-RoCE guest;
# test/tnic/run.sh: tnic0:1 and tnic1:1 on the stand-in NIC). Needs
# contrib/lib/wait_listen.sh, and from the sourcing script:
#   B           the build directory (test/mpi/mpi_verify)
#   LOG         a directory for the tools' output
#   PORT        the next TCP port to use (advanced by each check)
#   DEV_A DEV_B the devices: servers on DEV_A, clients on DEV_B
#   MPI_ARGS    optional array: more mpirun arguments (-x VAR, --mca ...)
#
# has_rc_gdr_on DEV
#   ucx_info -d lists rc_gdr on DEV.
# perftest_uct ARGS...
#   ucx_perftest at UCT level, rc_gdr (ARGS may say -x rc_verbs), server on
#   DEV_A, client on DEV_B: exits 0 with a "Final:" line.
# perftest_ucp ARGS...
#   ucx_perftest at UCP level with UCX_TLS=rc_gdr,ud_verbs:aux,self: rc_gdr
#   must be the lane UCP chose and must have posted work.
# wire_check_late TL
#   test/wire/wire_check over UCP (UCX_TLS=TL,ud_verbs:aux,self), its server
#   posting each receive only once the message has arrived (-u): every one
#   takes UCP's path for a message that came first; byte-exact and echoed.
# mpi_verify NAME ARGS...
#   test/mpi/mpi_verify on 2 ranks of Open MPI (pml ucx, osc ucx, rc_gdr):
#   byte-exact ("verification: PASSED") and rc_gdr posted work. Output in
#   $LOG/NAME.out.

has_rc_gdr_on() {
    # (no grep -q in pipes: an early exit would fail them under pipefail)
    ucx_info -d | grep -A1 'Transport: rc_gdr' | grep "Device: $1"
}

# Up to 1.21 the server takes -x/-d from the client; 1.22 wants its own
# (older releases accept and override them).
perftest_uct() {
    local port=$((PORT++))
    timeout 120 ucx_perftest -p "$port" -x rc_gdr -d "$DEV_A" \
        > "$LOG/server.$port" 2>&1 &
    local server=$!
    wait_listen "$port" || return 1
    timeout 100 ucx_perftest -p "$port" 127.0.0.1 -x rc_gdr -d "$DEV_B" "$@" \
        > "$LOG/client.$port" 2>&1
    local rc=$?
    wait "$server"
    cat "$LOG/client.$port"
    [ "$rc" = 0 ] && grep -q '^Final:' "$LOG/client.$port"
}

# The server on DEV_A and the client on DEV_B (in the guest the traffic
# crosses the veth); rc_gdr must be the lane UCP chose and must have posted
# work, with rc_verbs absent from UCX_TLS.
perftest_ucp() {
    local port=$((PORT++))
    export UCX_TLS=rc_gdr,ud_verbs:aux,self UCX_LOG_LEVEL=info
    UCX_NET_DEVICES=$DEV_A timeout 120 ucx_perftest -p "$port" \
        > "$LOG/server.$port" 2>&1 &
    local server=$!
    wait_listen "$port" || return 1
    UCX_NET_DEVICES=$DEV_B timeout 100 ucx_perftest -p "$port" 127.0.0.1 \
        "$@" > "$LOG/client.$port" 2>&1
    local rc=$?
    wait "$server"
    unset UCX_TLS UCX_LOG_LEVEL
    grep -E '^Final:|ep_cfg|rc_gdr:' "$LOG/client.$port"
    [ "$rc" = 0 ] && grep -q '^Final:' "$LOG/client.$port" &&
        grep -q "(rc_gdr/$DEV_B)" "$LOG/client.$port" &&
        grep -Eq "rc_gdr: $DEV_B closed: [1-9][0-9]* work requests" \
            "$LOG/client.$port"
}

wire_check_late() {
    local port=$((PORT++)) rc
    UCX_TLS=$1,ud_verbs:aux,self UCX_NET_DEVICES=$DEV_A timeout 120 \
        "$B/test/wire/wire_check" -s -u -p "$port" -m 262144 \
        > "$LOG/server.$port" 2>&1 &
    local server=$!
    wait_listen "$port" || return 1
    UCX_TLS=$1,ud_verbs:aux,self UCX_NET_DEVICES=$DEV_B timeout 100 \
        "$B/test/wire/wire_check" -c 127.0.0.1 -p "$port" -m 262144 -n 15 \
        -w 20 > "$LOG/client.$port" 2>&1
    rc=$?
    wait "$server"
    cat "$LOG/client.$port" "$LOG/server.$port"
    [ "$rc" = 0 ] && grep -q '^RESULT ok iters=15 .* bad=0' "$LOG/client.$port" &&
        grep -q 'server: 15 messages checked, 0 bad bytes' "$LOG/server.$port"
}

mpi_verify() {
    local name=$1 out=$LOG/$1.out rc
    shift
    timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 \
        --mca pml ucx --mca btl ^openib,ofi,uct --mca osc ucx \
        -x UCX_TLS=rc_gdr,ud_verbs:aux,self -x UCX_LOG_LEVEL=info \
        ${MPI_ARGS[@]+"${MPI_ARGS[@]}"} \
        "$B/test/mpi/mpi_verify" "$@" > "$out" 2>&1
    rc=$?
    grep -E '^(ok|BAD|verification)|rc_gdr:' "$out"
    [ "$rc" = 0 ] && grep -q '^verification: PASSED' "$out" &&
        grep -Eq "rc_gdr: ($DEV_A|$DEV_B) closed: [1-9][0-9]* work requests" \
            "$out"
}
