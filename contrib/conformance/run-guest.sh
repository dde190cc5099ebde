#!/bin/bash
#
# The conformance tier's runner inside the soft-RoCE guest (started by
# contrib/conformance.sh through contrib/rxe-vm.sh), from the repository root,
# with rc_gdr preloaded (contrib/env.sh).
#
# Runs UCX's gtest binary on the tests that FILTER selects, all in one
# process while they pass, and survives crashes and hangs: UCX's own watchdog
# (-t) aborts a test that runs longer than TIMEOUT seconds, a monitor here
# kills a process whose tests stop advancing, and the run resumes after the
# test that took the process down. Writes OUTDIR/results.tsv, one line per
# test:
#
#   NAME <tab> passed|failed|skipped|crashed|hung <tab> ms <tab> REASON
#
# and the output of every test that did not pass to OUTDIR/logs/.
#
# Tests already in OUTDIR/results.tsv (a resumed run) or in the results file
# SEED (rc_verbs results of earlier runs) are not run again; those from SEED
# are copied into OUTDIR/results.tsv.
#
# Tests that contrib/conformance/slow.txt names run in batches of their own
# with the limit it gives them.
#
# Usage: contrib/conformance/run-guest.sh GTEST OUTDIR FILTER TIMEOUT [SEED]
#
set -uo pipefail

GTEST=$1
OUT=$2
FILTER=$3
TIMEOUT=$4
SEED=${5:-/dev/null}
GRACE=30        # the monitor's margin over UCX's watchdog
SLOW=contrib/conformance/slow.txt

log() { echo "conformance: $*"; }

# Runs the gtest binary on the tests named in the file $1 (one per line),
# output to $2, each test limited to $3 seconds; kills it when no test has
# started or finished for $3 + GRACE seconds. Returns 124 when it had to.
run_batch() {
    local list=$1 blog=$2 limit=$3 pid job last=-1 now count stalled=0 rc
    # gtest in a session of its own (a test may fork; the monitor kills
    # them all), inside a subshell whose stderr hides the shell's "Aborted"
    ( setsid "$GTEST" -t "$limit" \
          --gtest_filter="$(paste -sd: "$list")" > "$blog" 2>&1 &
      echo $! > "$OUT/gtest.pid"
      wait $! ) 2>/dev/null &
    job=$!
    while [ ! -s "$OUT/gtest.pid" ]; do sleep 0.1; done
    pid=$(cat "$OUT/gtest.pid")
    rm -f "$OUT/gtest.pid"
    while kill -0 "$job" 2>/dev/null; do
        sleep 2
        count=$(grep -c '^\[ \(RUN \|      OK\|  FAILED\) ' "$blog")
        now=$SECONDS
        if [ "$count" != "$last" ]; then
            last=$count stalled=$now
        elif [ $((now - stalled)) -gt $((limit + GRACE)) ]; then
            echo "conformance-watchdog: no progress for $((now - stalled)) s," \
                 "killed" >> "$blog"
            kill -KILL -- "-$pid" 2>/dev/null
            wait "$job"
            return 124
        fi
    done
    wait "$job"
    rc=$?
    return "$rc"
}

# Reads one batch's output: a results line for every test that ended, and
# for a test that started and never ended (the process died in it) a crashed
# or hung line. Per-test output of tests that did not pass goes to logs/.
parse_batch() { # BATCH_LOG RC LIMIT
    awk -v rc="$2" -v logs="$OUT/logs" -v limit="$3" '
    function flush_log(name,   f) {
        f = name; gsub(/[^A-Za-z0-9_.-]/, "_", f)
        printf "%s", buf > (logs "/" f ".log"); close(logs "/" f ".log")
    }
    function ms_of(line) {
        if (line !~ /\([0-9]+ ms\)$/) return ""
        sub(/.*\(/, "", line); sub(/ ms\).*/, "", line); return line
    }
    # where it stood: the first frame in rc_gdr and the first in the test
    # (its suite'"'"'s code), else the first frame past the error handler
    function where(   w) {
        w = (gdr != "") ? gdr : top
        if (tframe != "" && tframe != w) w = w " in " tframe
        return (w == "") ? "" : " at " w
    }
    function reason_of(st,   r) {
        if (st == "hung") {
            r = "no progress in " limit " s" where()
        } else if (sig != "") {
            r = sig where()
        } else if (fail != "") {
            r = fail
        } else {
            r = err
        }
        gsub(/\t/, " ", r); gsub(/  +/, " ", r)
        return r
    }
    function frame_of(line) {
        sub(/^ *[0-9]+ +/, "", line); sub(/ *\[0x[0-9a-f]+\] *$/, "", line)
        sub(/^.*\//, "", line)
        return line
    }
    /^\[ RUN      \] / {
        cur = $4; buf = $0 "\n"; fail = ""; want = 0; sig = ""; top = ""
        gdr = ""; err = ""; skip = ""; inbt = 0; tframe = ""
        suite = cur; sub(/^[^\/]*\//, "", suite); sub(/\..*/, "", suite)
        next
    }
    cur == "" { next }
    { buf = buf $0 "\n" }
    /^\[     SKIP \]/ { skip = $0; sub(/^\[     SKIP \] */, "", skip); sub(/^\(/, "", skip); sub(/\)$/, "", skip); next }
    (/^\[       OK \] / || /^\[  SKIPPED \] /) && $4 == cur {
        st = (skip != "" || $0 ~ /SKIPPED/) ? "skipped" : "passed"
        printf "%s\t%s\t%s\t%s\n", cur, st, ms_of($0), skip
        if (st != "passed") flush_log(cur)
        cur = ""; next
    }
    /^\[  FAILED  \] / && ($4 == cur || $4 == cur ",") {
        printf "%s\t%s\t%s\t%s\n", cur, "failed", ms_of($0), reason_of("failed")
        flush_log(cur); cur = ""; next
    }
    # gtest: "file:line: Failure" and up to 3 lines of message
    want > 0 && (/^\[/ || /: Failure$/) { want = 0 }
    want > 0 {
        if ($0 != "" && $0 != "Failed") fail = fail " " $0
        want--; next
    }
    /: Failure$/ && fail == "" {
        fail = $0; sub(/^.*\//, "", fail); sub(/: Failure$/, ":", fail)
        want = 3; next
    }
    /Caught signal|Assertion .* failed|Fatal error|ucs_fatal/ && sig == "" {
        sig = $0; sub(/^\[[^]]*\] */, "", sig); next
    }
    /^==== backtrace/ { inbt = 1; next }
    /^=====/ { inbt = 0; next }
    inbt && /^ *[0-9]+ / {
        if ($0 ~ /libucs\.so[^(]*\((ucs_handle_error|ucs_debug|ucs_error_signal|\+0x)/ ||
            $0 ~ /libc\.so|libpthread|watchdog/) next
        if (top == "") top = frame_of($0)
        if (gdr == "" && $0 ~ /gdr/) gdr = frame_of($0)
        if (tframe == "" && index($0, length(suite) suite) > 0) tframe = frame_of($0)
        next
    }
    / error[: ]|ERROR|[Ee]rror:/ && err == "" {
        err = $0; sub(/^\[[^]]*\] */, "", err)
    }
    END {
        if (cur != "") {
            st = (rc == 124 || buf ~ /abort testing|conformance-watchdog/) ? "hung" : "crashed"
            r = reason_of(st)
            if (r == "") {
                r = "the process ended (status " rc ") without a message"
                if (rc == 137) r = r "; SIGKILL: out of memory?"
            }
            printf "%s\t%s\t%s\t%s\n", cur, st, "", r
            flush_log(cur)
        }
    }' "$1"
}

# slow.txt as "REGEX<tab>SECONDS" lines, each SUITE.TEST pattern turned into
# a regular expression on PREFIX/SUITE.TEST/INDEX.
slow_tests() {
    local pat secs _
    while read -r pat secs _; do
        [[ -z $pat || $pat == \#* ]] && continue
        pat=${pat//./\\.}; pat=${pat//\*/.*}
        printf '^[^/]*/%s(/|$)\t%s\n' "$pat" "$secs"
    done < "$SLOW"
}

# The tests of the next batch, from the list $1 into $2: those slow.txt
# gives a longer limit first (one limit per batch), then the rest; prints
# the batch's limit.
next_batch() { # REMAINING NEXT
    local re secs
    # files, not process substitution: the guest has no /dev/fd
    slow_tests > "$OUT/slow.tsv"
    while IFS=$'\t' read -r re secs; do
        if grep -E "$re" "$1" > "$2"; then
            echo "$secs"
            return
        fi
    done < "$OUT/slow.tsv"
    { cut -f1 "$OUT/slow.tsv"; echo '^$'; } > "$OUT/slow.re"
    grep -vE -f "$OUT/slow.re" "$1" > "$2" || true
    echo "$TIMEOUT"
}

main() {
    local list remaining done_ batch rc n before limit
    . contrib/env.sh "${RC_GDR_BUILD:-build}" || exit 2
    mkdir -p "$OUT/logs"
    touch "$OUT/results.tsv"
    export UCX_HANDLE_ERRORS=bt UCX_LOG_LEVEL=warn UCX_LOG_PRINT_ENABLE=y
    export UCX_ERROR_SIGNALS=ILL,SEGV,BUS,FPE,ABRT

    list="$OUT/tests.txt"
    "$GTEST" --gtest_list_tests --gtest_filter="$FILTER" > "$OUT/list.out" 2>&1
    awk '/^[^ ]/ { suite = $1; next }
         /^  / { print suite $1 "\t" $0 }' "$OUT/list.out" |
        sed 's/\t *[^ ]* *# *GetParam() = /\t/' > "$OUT/params.tsv"
    cut -f1 "$OUT/params.tsv" > "$list"
    n=$(wc -l < "$list")
    # earlier results of the selected tests that have none here yet
    cut -f1 "$OUT/results.tsv" | sort > "$OUT/done.txt"
    awk -F'\t' 'FILENAME == ARGV[1] { want[$1] = 1; next }
                FILENAME == ARGV[2] { done_[$1] = 1; next }
                ($1 in want) && !($1 in done_)' \
        "$list" "$OUT/done.txt" "$SEED" >> "$OUT/results.tsv"
    remaining="$OUT/remaining.txt"
    cut -f1 "$OUT/results.tsv" | sort > "$OUT/done.txt"
    grep -vxF -f "$OUT/done.txt" "$list" > "$remaining" || true
    log "$n tests selected, $(wc -l < "$remaining") to run" \
        "($(wc -l < "$OUT/results.tsv") results known)"
    batch=$(find "$OUT" -maxdepth 1 -name 'batch*.log' | wc -l)
    while [ -s "$remaining" ]; do
        batch=$((batch + 1))
        before=$(wc -l < "$OUT/results.tsv")
        limit=$(next_batch "$remaining" "$OUT/next.txt")
        run_batch "$OUT/next.txt" "$OUT/batch$batch.log" "$limit"
        rc=$?
        parse_batch "$OUT/batch$batch.log" "$rc" "$limit" |
            tee -a "$OUT/results.tsv" |
            awk -F'\t' '$2 != "passed" { print "  " $2 ": " $1 (($4 != "") ? "  (" $4 ")" : "") }'
        if [ "$(wc -l < "$OUT/results.tsv")" = "$before" ]; then
            log "batch $batch ended (rc $rc) before any test ran:"
            tail -n 20 "$OUT/batch$batch.log"
            break
        fi
        done_="$OUT/done.txt"
        cut -f1 "$OUT/results.tsv" | sort > "$done_"
        grep -vxF -f "$done_" "$list" > "$remaining" || true
        log "batch $batch: rc $rc, $(wc -l < "$OUT/results.tsv")/$n done"
    done
    # what never ran (the process could not start at all) is a crash
    while read -r t; do
        printf '%s\tcrashed\t\t%s\n' "$t" "the test process did not start" >> "$OUT/results.tsv"
    done < "$remaining"
}

main
