#!/bin/bash
#
# Self-test of contrib/rxe-vm.sh: exit status, timeout, cwd/env and real
# verbs (ibv_rc_pingpong rxe1 -> rxe0) in the soft-RoCE guest.
# Prints "PASS name" / "FAIL name" per check; exits non-zero if any failed.
# Each check is one short guest run (a few seconds each, ~35 s for timeout).
#
# shellcheck disable=SC2016  # the guest expands these, not us
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
RXEVM=${RXEVM:-$HERE/../../contrib/rxe-vm.sh}
FAILED=0
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT

# check NAME EXPECTED_RC [rxe-vm args...]: run, compare the exit status.
check() {
    local name=$1 want=$2 rc=0
    shift 2
    "$RXEVM" "$@" >"$LOG" 2>&1 || rc=$?
    result "$name" "$([ "$rc" = "$want" ] && echo 0 || echo 1)" "rc $rc, want $want"
}

# result NAME 0|1 DETAIL: one line per check; the log tail on failure.
result() {
    if [ "$2" = 0 ]; then
        echo "PASS $1"
    else
        echo "FAIL $1 ($3)"
        sed 's/^/    | /' "$LOG" | tail -n 15
        FAILED=1
    fi
}

check exit_status_42 42 --nrxe 0 -- sh -c 'exit 42'
check exit_status_false 1 --nrxe 0 -- false

# The whole run is bounded by --timeout and still reports 124.
start=$(date +%s)
check timeout_124 124 --nrxe 0 --timeout 40 -- sleep 100
took=$(( $(date +%s) - start ))
ok=1; [ "$took" -le 50 ] && ok=0
result timeout_duration "$ok" "took ${took}s for --timeout 40"

# cwd and the exported environment reach the command.
rc=0
(cd /tmp && RXEVM_T=bar "$RXEVM" --nrxe 0 -- sh -c 'echo "$(pwd) $RXEVM_T"') >"$LOG" 2>&1 || rc=$?
ok=1; [ "$rc" = 0 ] && grep -qx '/tmp bar' "$LOG" && ok=0
result cwd_env "$ok" "rc $rc"

# RC ping-pong across the veth: server on rxe0, client on rxe1. The client
# retries until the server listens (the guest may be slow on a busy host).
rc=0
"$RXEVM" --timeout 180 -- sh -c '
    ibv_rc_pingpong -d rxe0 -g 0 -n 200 & srv=$!
    i=0
    until ibv_rc_pingpong -d rxe1 -g 0 -n 200 127.0.0.1; do
        i=$((i + 1)); [ $i -lt 20 ] || { kill $srv; exit 1; }; sleep 0.5
    done
    wait $srv' >"$LOG" 2>&1 || rc=$?
ok=1; [ "$rc" = 0 ] && [ "$(grep -c '200 iters in' "$LOG")" = 2 ] && ok=0
result rc_pingpong "$ok" "rc $rc"

exit "$FAILED"
