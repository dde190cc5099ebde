# Sourced by the scripts that start a ucx_perftest server and then its client
# (test/rxe/run.sh, contrib/bench-*.sh, contrib/site/validate-site.sh).
#
# wait_listen PORT [PID [SECONDS]]
#   Returns 0 once a TCP socket listens on PORT; 1 when the server PID (if
#   given) has exited first, or after SECONDS (default 30). The socket table
#   is read instead of connecting: ucx_perftest would take a test connection
#   for its client. A fixed sleep is not enough on a loaded 2-core host.
#   WAIT_LISTEN_REMOTE, when set, is a command prefix that reads the table on
#   the server's machine (e.g. "ssh peer"). Without ss, one second's sleep.
wait_listen() {
    local port=$1 pid=${2:-} secs=${3:-30} i
    if [ -z "${WAIT_LISTEN_REMOTE:-}" ] && ! command -v ss >/dev/null; then
        sleep 1
        return 0
    fi
    for ((i = 0; i < secs * 10; i++)); do
        # shellcheck disable=SC2086  # WAIT_LISTEN_REMOTE is a command line
        [ -n "$(${WAIT_LISTEN_REMOTE:-} ss -Hltn "sport = :$port" \
                </dev/null 2>/dev/null)" ] && return 0
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
            echo "wait_listen: the server (pid $pid) exited before listening on port $port" >&2
            return 1
        fi
        sleep 0.1
    done
    echo "wait_listen: nothing listens on port $port after $secs s" >&2
    return 1
}
