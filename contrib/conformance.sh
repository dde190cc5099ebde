#!/bin/bash
#
# The conformance tier (doc/DESIGN.md section 6, tier 4): UCX's own UCT test suites
# (test/gtest/uct of the UCX source tree the build uses, with rc_gdr added to
# the transport lists by contrib/conformance/ucx-1.13.1-rc_gdr.patch), run in
# the soft-RoCE guest for rc_gdr and for rc_verbs, on both devices (rxe0:1
# and rxe1:1). Crashes and hangs are counted per test, not fatal.
#
# Prints a per-suite table rc_gdr vs rc_verbs, every rc_gdr test that did not
# pass with its reason and what rc_verbs did, and ends with one line
# "N passed, N failed, N skipped" counted over rc_gdr's tests: a test is
# failed when rc_gdr fails, crashes or hangs (or skips where rc_verbs passes),
# unless rc_verbs does the same (fails where rc_gdr fails, crashes or hangs
# where rc_gdr does: a limit of soft-RoCE; then skipped, and said why) or it
# is listed in contrib/conformance/not-applicable.txt.
#
# Usage: contrib/conformance.sh [--core | --full] [options]
#   --core          the CI subset (default): flush, cancel, pending, p2p
#                   rma/am/err/mix, ep, peer failure, event and md suites
#   --full          every suite built for rc_gdr and rc_verbs
#   --filter PAT    only SUITE.TEST matching PAT (gtest syntax, e.g.
#                   'uct_flush_test.*:test_uct_ep.*'); a PAT with '/' is
#                   passed to gtest as it is
#   --timeout S     per-test limit in seconds (default 60)
#   --vm-timeout S  limit of the whole guest run (default 3000)
#   --fresh-verbs   run rc_verbs' tests even where the cache or the baseline
#                   has their results (see below)
#   --save-baseline write this run's rc_verbs results into
#                   contrib/conformance/rc_verbs-baseline.tsv
#   --no-build      use the build as it is (do not run contrib/build.sh)
#   --ucx VERSION   an upstream release (1.16.0, 1.19.1, 1.22.0): its own
#                   gtest (patched by contrib/conformance/
#                   ucx-VERSION-rc_gdr.patch) and rc_gdr's build against it
#                   (RC_GDR_BUILD, default build-VERSION); rc_verbs' baseline
#                   is then
#                   contrib/conformance/rc_verbs-baseline-VERSION.tsv (where
#                   there is none, rc_verbs' tests run)
#   --out DIR       keep the raw results in DIR (default: a temporary
#                   directory, removed at the end)
#   --resume        with --out: run only the tests that have no result in
#                   DIR yet (after an interrupted run)
#   --report DIR    only print the report of results kept with --out
#   --tnic          run natively on the stand-in NIC (test/tnic of the
#                   build: tnic0:1 and tnic1:1), not in the guest; rc_verbs
#                   runs too (its guest results, cached or baseline, are
#                   not the stand-in's), and nothing is cached or saved
#
# Environment: RC_GDR_BUILD, the build directory (default build/).
#
# rc_verbs' results depend only on UCX, the gtest build, the guest kernel and
# rdma-core, not on rc_gdr: they are kept beside the cached gtest binary
# (rc_verbs-results-<key>.tsv) and reused, so a later run runs rc_gdr's
# tests only (rc_verbs hangs in a few tests on soft-RoCE, which costs minutes).
# For the tests the cache has no result of, contrib/conformance/
# rc_verbs-baseline.tsv (a measured run, kept with the key it was measured
# under: UCX package, gtest build, per-test limit) gives them when the key
# matches; --fresh-verbs runs rc_verbs instead, --save-baseline writes this
# run's rc_verbs results there.
#
set -euo pipefail

cd "$(dirname "$0")/.."
CONF=contrib/conformance
MODE=core
FILTER=""
TIMEOUT=60
VM_TIMEOUT=3000
BUILD=1
OUT=""
REPORT_ONLY=0
RESUME=0
FRESH_VERBS=0
SAVE_BASELINE=0
BASELINE=contrib/conformance/rc_verbs-baseline.tsv
UPSTREAM=""
TNIC=0

# The CI subset, as gtest suite patterns (the transport prefix is added).
CORE_SUITES="uct_flush_test uct_cancel_test test_uct_pending
             uct_p2p_rma_test uct_p2p_am_* uct_p2p_err_test uct_p2p_mix_test
             test_uct_ep test_uct_peer_failure* test_uct_event test_md*"
# gtest prefixes: the transports, and the md components (rc_verbs' md is ib)
PREFIXES="rc_gdr rc_verbs ib"

usage() { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "conformance: $*" >&2; exit 2; }

parse_args() {
    while [ $# -gt 0 ]; do
        case $1 in
        --core)       MODE=core ;;
        --full)       MODE=full ;;
        --filter)     [ $# -ge 2 ] || die "--filter needs a pattern"
                      FILTER=$2; shift ;;
        --timeout|--vm-timeout)
                      [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] ||
                          die "$1 needs a number of seconds"
                      if [ "$1" = --timeout ]; then TIMEOUT=$2
                      else VM_TIMEOUT=$2; fi
                      shift ;;
        --no-build)   BUILD=0 ;;
        --ucx)        [ $# -ge 2 ] || die "--ucx needs a version"
                      UPSTREAM=$2; shift ;;
        --out)        [ $# -ge 2 ] || die "--out needs a directory"
                      OUT=$2; shift ;;
        --resume)     RESUME=1 ;;
        --fresh-verbs) FRESH_VERBS=1 ;;
        --save-baseline) SAVE_BASELINE=1 ;;
        --tnic)       TNIC=1 ;;
        --report)     [ $# -ge 2 ] || die "--report needs a directory"
                      OUT=$2; REPORT_ONLY=1; shift ;;
        -h|--help)    usage; exit 0 ;;
        *)            usage >&2; exit 2 ;;
        esac
        shift
    done
}

# The gtest filter: each suite pattern under each prefix.
gtest_filter() {
    local pats=() p pre out=""
    if [ -n "$FILTER" ]; then
        if [[ $FILTER == */* ]]; then
            echo "$FILTER"
            return
        fi
        IFS=: read -ra pats <<< "$FILTER"
    elif [ "$MODE" = core ]; then
        for p in $CORE_SUITES; do pats+=("$p.*"); done
    else
        pats=("*")
    fi
    for pre in $PREFIXES; do
        for p in "${pats[@]}"; do
            out="$out${out:+:}$pre/$p"
        done
    done
    echo "$out"
}

# Where rc_verbs' results are kept: beside the gtest binary (whose directory
# is keyed by the UCX version and the patch), keyed further by what else they
# depend on: the guest kernel, rdma-core's providers, the per-test limit.
verbs_cache() { # GTEST
    local key
    key=$( { ls "${RXEVM_CACHE:-${RC_GDR_CACHE:-/var/cache/rc_gdr}/rxe-vm}/debs" 2>/dev/null
             dpkg-query -W ibverbs-providers libucx0 2>/dev/null
             echo "$TIMEOUT"; } | sha256sum | cut -c1-12)
    echo "$(dirname "$1")/rc_verbs-results-$key.tsv"
}

# Keeps this run's rc_verbs results (transport rc_verbs, md component ib)
# for the next runs; a newer result of a test replaces the older one.
verbs_cache_update() { # GTEST
    local cache new
    cache=$(verbs_cache "$1")
    new=$(mktemp)
    grep -E '^(rc_verbs|ib)/' "$OUT/results.tsv" |
        grep -v 'no result: the guest run ended$' > "$new" || true
    if [ -s "$new" ]; then
        { cat "$new"; [ -f "$cache" ] && cat "$cache"; true; } |
            awk -F'\t' '!seen[$1]++' > "$cache.tmp"
        mv "$cache.tmp" "$cache"
    fi
    rm -f "$new"
}

# The key of the baseline: what rc_verbs' results depend on and a fresh
# machine can tell before any run.
baseline_key() { # GTEST
    if [ -n "$UPSTREAM" ]; then
        echo "# key: ucx=$UPSTREAM" \
             "gtest=$(basename "$(dirname "$1")") timeout=$TIMEOUT"
        return
    fi
    echo "# key: libucx0=$(dpkg-query -W -f='${Version}' libucx0)" \
         "gtest=$(basename "$(dirname "$1")") timeout=$TIMEOUT"
}

# Writes this run's rc_verbs results as the baseline, under its key.
baseline_save() { # GTEST
    { echo "# rc_verbs results in the soft-RoCE guest (contrib/conformance.sh" \
           "--save-baseline, $(date -u +%Y-%m-%d))"
      baseline_key "$1"
      grep -E '^(rc_verbs|ib)/' "$OUT/results.tsv" |
          grep -v 'no result: the guest run ended$' | sort
    } > "$BASELINE.tmp"
    mv "$BASELINE.tmp" "$BASELINE"
    echo "conformance: rc_verbs results saved in $BASELINE"
}

run_guest() { # GTEST
    local rc=0 seed=/dev/null cache
    echo "== conformance ($MODE${FILTER:+, filter $FILTER}${UPSTREAM:+, UCX $UPSTREAM}): UCX's UCT gtest" \
         "in the soft-RoCE guest, ${TIMEOUT} s per test"
    cache=$(verbs_cache "$1")
    if [ "$FRESH_VERBS" = 0 ]; then
        # earlier runs' results first, then the baseline's for the others
        seed="$OUT/verbs-seed.tsv"
        { [ -f "$cache" ] && cat "$cache"
          [ -f "$BASELINE" ] &&
              grep -qxF "$(baseline_key "$1")" "$BASELINE" &&
              grep -v '^#' "$BASELINE"
          true; } | awk -F'\t' '!seen[$1]++' > "$seed"
        if [ -s "$seed" ]; then
            echo "conformance: rc_verbs results reused where known ($cache," \
                 "$BASELINE); --fresh-verbs runs them again"
        fi
    fi
    contrib/rxe-vm.sh --timeout "$VM_TIMEOUT" --rw "$OUT" -- \
        "$CONF/run-guest.sh" "$1" "$OUT" "$(gtest_filter)" "$TIMEOUT" \
        "$seed" || rc=$?
    if [ "$rc" != 0 ]; then
        echo "conformance: the guest run ended with status $rc" \
             "(124: the whole run timed out); tests that did not run are" \
             "counted as crashed"
    fi
    # tests listed but with no result (the guest run ended early)
    if [ -f "$OUT/tests.txt" ]; then
        cut -f1 "$OUT/results.tsv" | sort > "$OUT/done.txt"
        grep -vxF -f "$OUT/done.txt" "$OUT/tests.txt" |
            awk '{ printf "%s\tcrashed\t\tno result: the guest run ended\n", $0 }' \
            >> "$OUT/results.tsv" || true
    fi
}

# The same runner as in the guest, here, over the stand-in NIC: every test
# of rc_gdr and of rc_verbs runs (the parity rule needs both on the
# stand-in), on a fabric of this run's own.
run_native() { # GTEST
    local rc=0 lib fabric=conf$$
    lib=$(cd "${RC_GDR_BUILD:-build}/test/tnic/lib" 2>/dev/null && pwd) ||
        die "no stand-in NIC in ${RC_GDR_BUILD:-build}/test/tnic/lib" \
            "(make check TESTS=)"
    echo "== conformance ($MODE${FILTER:+, filter $FILTER}): UCX's UCT gtest" \
         "natively on the STAND-IN NIC (test/tnic), ${TIMEOUT} s per test"
    LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
        RC_GDR_TNIC_FABRIC=$fabric "$CONF/run-guest.sh" "$1" "$OUT" \
        "$(gtest_filter)" "$TIMEOUT" /dev/null || rc=$?
    rm -f "/dev/shm/rc_gdr_tnic.$fabric".*
    if [ "$rc" != 0 ]; then
        echo "conformance: the run ended with status $rc"
    fi
}

main() {
    local gtest t0=$SECONDS keep=1 rc=0
    parse_args "$@"
    if [ "$TNIC" = 1 ] && [ "$SAVE_BASELINE" = 1 ]; then
        die "--save-baseline keeps the guest's rc_verbs results, not the" \
            "stand-in's (--tnic)"
    fi
    if [ "$RESUME" = 1 ] && [ -z "$OUT" ]; then
        die "--resume needs --out DIR"
    fi
    if [ -z "$OUT" ]; then
        OUT=$(mktemp -d /tmp/rc_gdr_conformance.XXXXXX)
        keep=0
    fi
    mkdir -p "$OUT"
    OUT=$(cd "$OUT" && pwd)
    if [ -n "$UPSTREAM" ]; then
        export RC_GDR_BUILD=${RC_GDR_BUILD:-build-$UPSTREAM}
        BASELINE=contrib/conformance/rc_verbs-baseline-$UPSTREAM.tsv
    fi

    if [ "$REPORT_ONLY" = 0 ]; then
        if [ "$BUILD" = 1 ]; then
            contrib/build.sh ${UPSTREAM:+--ucx "$UPSTREAM"} \
                "${RC_GDR_BUILD:-build}"
        fi
        gtest=$("$CONF/build-gtest.sh" ${UPSTREAM:+--ucx "$UPSTREAM"} \
                --print-path)
        # what the report resolves crash frames with: the binaries of the run
        cp "${RC_GDR_BUILD:-build}/src/uct/ib_gdr/.libs/libuct_ib_gdr.so" \
            "$OUT/libuct_ib_gdr.so"
        printf 'gtest\t%s\nmodule\t%s\n' "$gtest" "$OUT/libuct_ib_gdr.so" \
            > "$OUT/binaries.tsv"
        if [ "$RESUME" = 1 ] && [ -f "$OUT/results.tsv" ]; then
            grep -v 'no result: the guest run ended$' "$OUT/results.tsv" \
                > "$OUT/results.tsv.old" || true
            mv "$OUT/results.tsv.old" "$OUT/results.tsv"
        else
            rm -rf "$OUT/logs" "$OUT"/batch*.log
            : > "$OUT/results.tsv"
        fi
        if [ "$TNIC" = 1 ]; then
            run_native "$gtest"
        else
            run_guest "$gtest"
            verbs_cache_update "$gtest"
        fi
        if [ "$SAVE_BASELINE" = 1 ]; then
            baseline_save "$gtest"
        fi
        echo "conformance: $((SECONDS - t0)) s in all"
    fi
    "$CONF/report.sh" "$OUT" "$CONF/not-applicable.txt" || rc=$?
    if [ "$keep" = 0 ]; then
        rm -rf "$OUT"
    fi
    return "$rc"
}

main "$@"
