#!/bin/bash
#
# The wire tier's verdict can fail: test/wire/run.sh --verdict judges
# made-up runs of the CI subset (cells.tsv, results.tsv; no guest), one
# fault each, and each must come out as it should: a hang, a cell that never
# ran, bytes that differed, an error past its bound, a kill that was never
# noticed each fail the run; rc_verbs' reference cells that do not hold are
# skipped, not failed, and so is a loss cell whose soft-RoCE QP gave up (an
# error there; a hang still fails), and a cut whose wire had failed before
# the cable was pulled. Prints "PASS name" / "FAIL name: why"
# per case and "N passed, N failed, N skipped".
#
set -uo pipefail

cd "$(dirname "$0")/../.." || exit 2
TMP=$(mktemp -d /tmp/rc_gdr_wire_verdict.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
PASSED=0
FAILED=0

# The CI subset's cells, every one as it should be
cells() {
    printf '%s\t%s\twire_check\n' \
        rc_gdr none rc_verbs none rc_gdr loss1 rc_verbs loss1 \
        rc_gdr linkdown2s rc_verbs linkdown2s \
        rc_gdr hostkilled-busy rc_gdr hostkilled-idle \
        rc_verbs hostkilled-busy rc_verbs hostkilled-idle \
        rc_gdr hostkilled-idle-ka4s
}
good_rows() {
    local ok='byte-exact iters=24 bytes=4266768' tl
    for tl in rc_gdr rc_verbs; do
        printf '%s\tnone\twire_check\tcompleted\t%s\t4.1\n' "$tl" "$ok"
        printf '%s\tloss1\twire_check\tcompleted\t%s\t12.8\n' "$tl" "$ok"
        printf '%s\tlinkdown2s\twire_check\tcompleted\t%s, cable out 2.1 s\t27.0\n' \
            "$tl" "byte-exact iters=443 bytes=88963920"
    done
    printf 'rc_gdr\thostkilled-busy\twire_check\terror\tEndpoint timeout (put) after the fault\t5.3\n'
    printf 'rc_gdr\thostkilled-idle\twire_check\terror\tEndpoint timeout (idle_recv) after the fault\t15.8\n'
    printf 'rc_verbs\thostkilled-busy\twire_check\terror\tEndpoint timeout (put) after the fault\t45.0\n'
    printf 'rc_verbs\thostkilled-idle\twire_check\terror\tEndpoint timeout (idle_recv) after the fault\t50.2\n'
    printf 'rc_gdr\thostkilled-idle-ka4s\twire_check\terror\tEndpoint timeout (idle_recv) after the fault\t6.9\n'
}

# check NAME RC "COUNTS" LINE_REGEX SED_SCRIPT [DELTA [LOG [NET]]]: the good
# run changed by SED_SCRIPT (and with DELTA as rc_gdr's loss1 cell's kernel
# counters, LOG and NET as its cut cell's log and link state)
# must end with exit status RC, the line "COUNTS" and a line matching
# LINE_REGEX
check() {
    local name=$1 want_rc=$2 counts=$3 line=$4 edit=$5 delta=${6:-} log=${7:-}
    local net=${8:-}
    local d rc
    d=$TMP/$name
    mkdir -p "$d"
    cells >"$d/cells.tsv"
    good_rows | sed -E "$edit" >"$d/results.tsv"
    [ -z "$delta" ] || printf '%b' "$delta" >"$d/rc_gdr.loss1.wire.rxe-delta"
    [ -z "$log" ] || printf '%b' "$log" >"$d/rc_gdr.linkdown2s.wire"
    [ -z "$net" ] || printf '%b' "$net" >"$d/rc_gdr.linkdown2s.wire.net"
    test/wire/run.sh --verdict "$d" >"$d/out" 2>&1
    rc=$?
    if [ "$rc" != "$want_rc" ]; then
        echo "FAIL verdict.$name: exit status $rc, expected $want_rc"
    elif [ "$(tail -n1 "$d/out")" != "$counts" ]; then
        echo "FAIL verdict.$name: '$(tail -n1 "$d/out")', expected '$counts'"
    elif ! grep -qE "$line" "$d/out"; then
        echo "FAIL verdict.$name: no line matching '$line'"
    else
        echo "PASS verdict.$name"
        PASSED=$((PASSED + 1))
        return
    fi
    sed 's/^/    /' "$d/out"
    FAILED=$((FAILED + 1))
}

check all_hold 0 "11 passed, 0 failed, 0 skipped" \
    '^PASS wire\.rc_gdr\.linkdown2s\.wire_check: completed' ''
check hang_fails 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.linkdown2s\.wire_check: expected completes byte-exact; got HANG' \
    's/^(rc_gdr\tlinkdown2s\twire_check)\t.*/\1\tHANG\tnothing reported within the 102 s watch\t>111/'
check error_under_loss_fails 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.loss1\.wire_check: expected completes byte-exact; got error' \
    's/^(rc_gdr\tloss1\twire_check)\t.*/\1\terror\tEndpoint timeout (get) after the fault\t9.0/'
GAVE_UP='client completer_retry_err +17\nclient retry_exceeded_err +1\nserver rcvd_pkts +626\n'
check loss_rxe_gave_up_skipped 0 "10 passed, 0 failed, 1 skipped" \
    '^SKIP wire\.rc_gdr\.loss1\.wire_check: soft-RoCE gave up \(client retry_exceeded_err \+1' \
    's/^(rc_gdr\tloss1\twire_check)\t.*/\1\terror\tEndpoint timeout (tag_echo), last answer 7.6 s before\t18.4/' \
    "$GAVE_UP"
check loss_rxe_gave_up_hang_fails 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.loss1\.wire_check: expected completes byte-exact; got HANG' \
    's/^(rc_gdr\tloss1\twire_check)\t.*/\1\tHANG\tnothing reported within the 90 s watch\t>99/' \
    "$GAVE_UP"
check loss_retries_without_giving_up_fail 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.loss1\.wire_check: expected completes byte-exact; got error' \
    's/^(rc_gdr\tloss1\twire_check)\t.*/\1\terror\tEndpoint timeout (tag_echo), last answer 7.6 s before\t18.4/' \
    'client completer_retry_err +17\nclient rcvd_seq_err +4\n'
check missing_cell_fails 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.hostkilled-idle-ka4s\.wire_check: .*got no result' \
    '/^rc_gdr\thostkilled-idle-ka4s/d'
check bad_bytes_fail 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.none\.wire_check: .*got BAD-BYTES' \
    's/^(rc_gdr\tnone\twire_check)\t.*/\1\tBAD-BYTES\tRESULT bad iters=3 bytes=9 bad=8\t-/'
check kill_past_bound_fails 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.hostkilled-busy\.wire_check: expected an error, no hang, within 10 s' \
    's/^(rc_gdr\thostkilled-busy\twire_check\terror\t[^\t]*)\t.*/\1\t10.4/'
check kill_unnoticed_fails 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.hostkilled-idle\.wire_check: .*got completed' \
    's/^(rc_gdr\thostkilled-idle\twire_check)\t.*/\1\tcompleted\tbyte-exact iters=1 bytes=8\t200.0/'
check crash_fails 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.hostkilled-idle\.wire_check: .*got FAILED' \
    's/^(rc_gdr\thostkilled-idle\twire_check)\t.*/\1\tFAILED\trc 134, no result line\t-/'
check reference_not_held_skipped 0 "10 passed, 0 failed, 1 skipped" \
    '^SKIP wire\.rc_verbs\.hostkilled-idle\.wire_check \(reference\): not counted' \
    's/^(rc_verbs\thostkilled-idle\twire_check)\t.*/\1\tFAILED\trc 134, no result line\t-/'
check reference_bad_bytes_skipped 0 "10 passed, 0 failed, 1 skipped" \
    '^SKIP wire\.rc_verbs\.loss1\.wire_check \(reference\): .*got BAD-BYTES' \
    's/^(rc_verbs\tloss1\twire_check)\t.*/\1\tBAD-BYTES\tRESULT bad iters=3 bytes=9 bad=8\t-/'
check long_cut_skipped 0 "10 passed, 0 failed, 1 skipped" \
    '^SKIP wire\.rc_gdr\.linkdown2s\.wire_check: the cable was out 8\.1 s' \
    's/^(rc_gdr\tlinkdown2s\twire_check)\t.*/\1\terror\tEndpoint timeout (get) after the fault, cable out 8.1 s, last answer 7.7 s before\t9.9/'
check short_cut_error_fails 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.linkdown2s\.wire_check: expected completes byte-exact; got error' \
    's/^(rc_gdr\tlinkdown2s\twire_check)\t.*/\1\terror\tEndpoint timeout (get) after the fault, cable out 2.1 s, last answer 2.6 s before\t3.1/'

# CI's run of 541b307: the ping-pong went on 17 s after the 2.1 s cut, then
# the kernel's QP ran out of retries (and rc_verbs' reference found no
# route to the other host)
LATE=$'s/^(rc_gdr\tlinkdown2s\twire_check)\t.*/\\1\terror\tEndpoint timeout (tag_echo) after the fault, cable out 2.1 s, last answer 7.7 s before\t27.8/'
RETRY_EXC='rc_gdr_ep.c:982  UCX  ERROR rc_gdr: QP 0x13: transport retry counter exceeded (vendor error 0x0): Endpoint timeout\n'
check cut_ridden_out_then_wire_failed_skipped 0 "10 passed, 0 failed, 1 skipped" \
    '^SKIP wire\.rc_gdr\.linkdown2s\.wire_check: the cut was ridden out \(answers until 18\.0 s' \
    "$LATE" '' "$RETRY_EXC"
check cut_ridden_out_other_error_fails 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.linkdown2s\.wire_check: expected completes byte-exact; got error' \
    "$LATE" '' 'rc_gdr: tx stall: Endpoint timeout\n'
check cut_not_ridden_out_fails 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.linkdown2s\.wire_check: expected completes byte-exact; got error' \
    's/^(rc_gdr\tlinkdown2s\twire_check)\t.*/\1\terror\tEndpoint timeout (get) after the fault, cable out 2.1 s, last answer 7.7 s before\t9.9/' \
    '' "$RETRY_EXC"

# CI's run of a7dc05d: the answers stopped 2.7 s before the cable was
# pulled, with the cable in (and rc_verbs then found no route to the other
# host); answers that stopped during the cut still fail
check wire_failed_before_cut_skipped 0 "9 passed, 0 failed, 2 skipped" \
    '^SKIP wire\.rc_gdr\.linkdown2s\.wire_check: the answers stopped 2\.7 s before the cable was pulled' \
    's/^(rc_gdr\tlinkdown2s\twire_check)\t.*/\1\terror\tEndpoint timeout (get) after the fault, cable out 2.1 s, last answer 7.6 s before\t4.9/; s/^(rc_verbs\tlinkdown2s\twire_check)\t.*/\1\tFAILED\trc 4, no result line\t-/'
check wire_failed_during_cut_fails 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.linkdown2s\.wire_check: expected completes byte-exact; got error' \
    's/^(rc_gdr\tlinkdown2s\twire_check)\t.*/\1\terror\tEndpoint timeout (get) after the fault, cable out 2.1 s, last answer 6.0 s before\t4.9/'
check wire_failed_before_cut_hang_fails 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.linkdown2s\.wire_check: expected completes byte-exact; got HANG' \
    's/^(rc_gdr\tlinkdown2s\twire_check)\t.*/\1\tHANG\tnothing reported within the 102 s watch, last answer 7.6 s before\t>111/'

# A test run of e5704d2: the cut ridden out, then rxevm1's emulated NIC
# sent nothing more (165 frames queued with the carrier up); frames that
# drain are no excuse, and neither is a stopped link for a hang
STOPPED='txq rxevm1: backlog 165p, 1 s later 165p, carrier 1\ntxq rxevm2: backlog 0p, 1 s later 0p, carrier 1\n'
DRAINED='txq rxevm1: backlog 165p, 1 s later 0p, carrier 1\ntxq rxevm2: backlog 0p, 1 s later 0p, carrier 1\n'
TAG_SEND=$'s/^(rc_gdr\tlinkdown2s\twire_check)\t.*/\\1\terror\tEndpoint timeout (tag_send) after the fault, cable out 2.1 s, last answer 35.2 s before\t43.2/'
check link_stopped_skipped 0 "10 passed, 0 failed, 1 skipped" \
    '^SKIP wire\.rc_gdr\.linkdown2s\.wire_check: the emulated link stopped \(txq rxevm1: backlog 165p' \
    "$TAG_SEND" '' '' "$STOPPED"
check link_drained_fails 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.linkdown2s\.wire_check: expected completes byte-exact; got error' \
    "$TAG_SEND" '' '' "$DRAINED"
check link_stopped_hang_fails 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.linkdown2s\.wire_check: expected completes byte-exact; got HANG' \
    's/^(rc_gdr\tlinkdown2s\twire_check)\t.*/\1\tHANG\tnothing reported within the 102 s watch\t>111/' \
    '' '' "$STOPPED"
# wire_check's own TCP connect failed: no transport ran
check no_connection_skipped 0 "10 passed, 0 failed, 1 skipped" \
    "^SKIP wire\\.rc_gdr\\.linkdown2s\\.wire_check: the hosts' IP path had failed before the cell" \
    's/^(rc_gdr\tlinkdown2s\twire_check)\t.*/\1\tFAILED\trc 4, no result line\t-/' \
    '' 'wire_check: cannot connect to 10.77.0.2:14001: No route to host\n'
check failed_otherwise_fails 1 "10 passed, 1 failed, 0 skipped" \
    '^FAIL wire\.rc_gdr\.linkdown2s\.wire_check: expected completes byte-exact; got FAILED' \
    's/^(rc_gdr\tlinkdown2s\twire_check)\t.*/\1\tFAILED\trc 139, no result line\t-/' \
    '' 'Segmentation fault\n'

echo "$PASSED passed, $FAILED failed, 0 skipped"
[ "$FAILED" = 0 ]
