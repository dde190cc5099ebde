#!/bin/bash
#
# Self-test of contrib/check-circles.sh: it must find the circles planted in
# the fixture trees here, name their files and functions, and pass a tree
# without any, so that the check of src/ cannot pass by finding nothing.
#   clean/    layers that call down, a callback handed up, a header's
#             inline falling back to its own .c, "/*" in a string: no
#             circle, exit 0
#   call/     a.c <-> b.c through calls (and a static of the same name in
#             each, which is no edge)
#   include/  x.h <-> y.h through #include
#   header/   p.c -> q.h (an inline's macro) -> r.c -> p.c
#   unreadable/  braces unbalanced by #if branches: refused (exit 2)
# Prints PASS/FAIL per case and "N passed, N failed".
#
set -uo pipefail

cd "$(dirname "$0")/../.."
F=test/circles
PASSED=0
FAILED=0

# case name, fixture, expected exit status, lines the report must contain
check() {
    local name=$1 dir=$2 want_rc=$3 out rc line
    shift 3
    out=$(contrib/check-circles.sh "$F/$dir" 2>&1)
    rc=$?
    for line in "$@"; do
        if ! grep -qxF -- "$line" <<< "$out"; then
            echo "FAIL $name: no line '$line' in:"
            echo "$out"
            FAILED=$((FAILED + 1))
            return
        fi
    done
    if [ "$rc" != "$want_rc" ]; then
        echo "FAIL $name: exit $rc, expected $want_rc:"
        echo "$out"
        FAILED=$((FAILED + 1))
        return
    fi
    echo "PASS $name"
    PASSED=$((PASSED + 1))
}

check clean_tree_passes clean 0 \
    "check-circles: 3 files, 3 call edges, 2 include edges: 0 circle(s)"
check call_circle_found call 1 \
    "call circle among 2 files: a.c b.c" \
    "    a.c -> b.c: a_start() calls b_serve()" \
    "    b.c -> a.c: b_serve() calls a_done()"
check include_circle_found include 1 \
    "include circle among 2 files: x.h y.h" \
    "    x.h includes y.h" \
    "    y.h includes x.h"
check circle_through_header_found header 1 \
    "call circle among 3 files: p.c q.h r.c" \
    "    p.c -> q.h: p_go() calls q_inline()" \
    "    q.h -> r.c: Q_CALL_R() calls r_work()" \
    "    r.c -> p.c: r_work() calls p_back()"
check unreadable_tree_refused unreadable 2 \
    "check-circles: cannot read split.c: a '{' that no '}' closes"

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
