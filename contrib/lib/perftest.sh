# shellcheck shell=bash
# Sourced by the scripts that measure with a ucx_perftest server and its
# client (contrib/bench-rc.sh, contrib/bench-callgrind.sh,
# contrib/site/validate-site.sh): the one launcher of such a pair.
#
# perftest_pair PORT LIMIT SERVER_LOG CLIENT_LOG SERVER_CMD CLIENT_CMD [REMOTE]
#   Starts the server (the array named SERVER_CMD: the whole command, with
#   its environment and its "-p PORT"), waits until something listens on
#   PORT, then runs the client (the array named CLIENT_CMD) to its end. Both
#   run under 'timeout -k 5 LIMIT' with stdin from /dev/null; the server's
#   output goes to SERVER_LOG, the client's is appended to CLIENT_LOG. A
#   server that never listens leaves "(server never listened on port PORT)"
#   in CLIENT_LOG. REMOTE, when the server runs on another machine, is the
#   command prefix that reads that machine's socket table (wait_listen's
#   WAIT_LISTEN_REMOTE, e.g. "ssh peer").
#   Returns the client's exit status (124 when LIMIT stopped it), 1 when the
#   server never listened. The server is reaped before returning (stopped
#   first when the client failed: it may still wait for a connection), so
#   nothing outlives the pair; the port is not reused by the caller's next
#   pair (a late server could take its client), hence one port per pair.
#
# perftest_final FIELD LOG
#   Field FIELD of the client's last "Final:" line, or nothing. The fields:
#   Final: iters typical avg overall avg-bw overall-bw avg-mr overall-mr
#   (3 typical latency usec, 7 overall MB/s, 9 overall messages/s).

# wait_listen PORT PID
# shellcheck source=contrib/lib/wait_listen.sh
. "$(dirname "${BASH_SOURCE[0]}")/wait_listen.sh"

perftest_pair() {
    local port=$1 limit=$2 srv_log=$3 cli_log=$4 remote=${7:-}
    local -n _perftest_srv=$5 _perftest_cli=$6
    local srv_pid rc=0

    timeout -k 5 "$limit" "${_perftest_srv[@]}" </dev/null >"$srv_log" 2>&1 &
    srv_pid=$!
    if WAIT_LISTEN_REMOTE=$remote wait_listen "$port" "$srv_pid"; then
        timeout -k 5 "$limit" "${_perftest_cli[@]}" </dev/null \
            >>"$cli_log" 2>&1 || rc=$?
    else
        rc=1
        echo "(server never listened on port $port)" >>"$cli_log"
    fi
    # The server ends by itself after its one test (only our own pid)
    [ "$rc" = 0 ] || kill "$srv_pid" 2>/dev/null || true
    wait "$srv_pid" 2>/dev/null || true
    return "$rc"
}

perftest_final() {
    awk -v f="$1" '$1 == "Final:" { v = $f } END { if (v != "") print v }' "$2"
}
