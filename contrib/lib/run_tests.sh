# Sourced by the tiers that print one result line per test (test/rxe/run.sh
# in the soft-RoCE guest, test/tnic/run.sh on the stand-in NIC): counting,
# filtering, and the UCT suites run as one result per gtest test.
#
# The sourcing script sets, before calling these:
#   LOG         a directory for the tests' output (shown on failure)
#   GT          the gtest binary run_suite runs (default: the UCT suites)
#   RESULT_TAG  optional: a note on every result line, "PASS name (TAG)"
#               (the stand-in NIC's tier sets "STAND-IN NIC")
# and reads PASSED, FAILED, SKIPPED at the end (run_tests_summary).
#
# selected NAME
#   Whether test NAME runs: RC_GDR_TEST_FILTER=REGEX runs only the tests
#   whose names match.
# run_test NAME CMD...
#   One result: PASS when CMD exits 0, else FAIL and the end of its output.
# run_skip NAME WHY
#   One SKIP result, with the reason.
# run_suite [WRAPPER...] -- GTEST_FILTER
#   The tests of GT that match the filter (and RC_GDR_TEST_FILTER), in one
#   process under WRAPPER (env VAR=..., a shell function). Each gtest test
#   is one result; a failed one shows its output, and a process that
#   crashes or hangs (SUITE_TIMEOUT, default 900 s) fails every test it did
#   not finish. A test whose output says EMULATED GPU or STAND-IN NIC has
#   its result line say so too.
# run_tests_summary
#   "N passed, N failed, N skipped"; returns 1 when any test failed.

PASSED=${PASSED:-0}
FAILED=${FAILED:-0}
SKIPPED=${SKIPPED:-0}
SUITE_RUNS=${SUITE_RUNS:-0}

selected() {
    [ -z "${RC_GDR_TEST_FILTER:-}" ] || [[ $1 =~ $RC_GDR_TEST_FILTER ]]
}

# " (TAG, NOTE...)" for a result line: RESULT_TAG, then the notes given
run_tests_tag() {
    local tags=${RESULT_TAG:-} note
    for note in "$@"; do
        tags=${tags:+$tags, }$note
    done
    [ -z "$tags" ] || echo " ($tags)"
}

run_test() {
    local name=$1; shift
    selected "$name" || return 0
    if "$@" > "$LOG/$name.log" 2>&1; then
        echo "PASS $name$(run_tests_tag)"
        PASSED=$((PASSED + 1))
    else
        echo "FAIL $name$(run_tests_tag)"
        sed 's/^/    | /' "$LOG/$name.log" | tail -40
        FAILED=$((FAILED + 1))
    fi
}

run_skip() {
    selected "$1" || return 0
    echo "SKIP $1$(run_tests_tag): $2"
    SKIPPED=$((SKIPPED + 1))
}

# (A TEST_P test's name has a '/', hence the '%' of the sed addresses, and
# its FAILED line names its parameter.)
run_suite() {
    local wrap=() names=() notes=() name log rc out unfinished=""
    while [ "$1" != -- ]; do wrap+=("$1"); shift; done
    shift
    while read -r name; do
        [ -n "$name" ] && selected "$name" && names+=("$name")
    done <<< "$("${GT:-$B/test/gtest/uct/gtest_rc_gdr_uct}" \
                    --gtest_list_tests --gtest_filter="$1" |
                awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }')"
    [ ${#names[@]} -gt 0 ] || return 0

    log=$LOG/suite.$((++SUITE_RUNS))
    "${wrap[@]}" timeout "${SUITE_TIMEOUT:-900}" \
        "${GT:-$B/test/gtest/uct/gtest_rc_gdr_uct}" --gtest_color=no \
        --gtest_filter="$(IFS=:; echo "${names[*]}")" > "$log" 2>&1
    rc=$?
    for name in "${names[@]}"; do
        # what the test said of itself, between its RUN and its end line
        out=$(sed -n "\%^\[ RUN      \] $name\$%,\%^\[ \{2,7\}[A-Z]* *\] $name[ ,(]%p" \
                  "$log")
        notes=()
        if echo "$out" | grep 'STAND-IN NIC' > /dev/null &&
           [ "${RESULT_TAG:-}" != "STAND-IN NIC" ]; then
            notes+=("STAND-IN NIC")
        fi
        if echo "$out" | grep 'EMULATED GPU' > /dev/null; then
            notes+=("EMULATED GPU")
        fi
        if grep -qF "[       OK ] $name (" "$log"; then
            echo "PASS $name$(run_tests_tag "${notes[@]}")"
            PASSED=$((PASSED + 1))
        elif grep -qF "[  SKIPPED ] $name (" "$log"; then
            echo "SKIP $name$(run_tests_tag "${notes[@]}"): $(awk -v t="$name" '
                $0 == "[ RUN      ] " t { on = 1 }
                on && why { print; exit }
                on && /: Skipped$/ { why = 1 }' "$log")"
            SKIPPED=$((SKIPPED + 1))
        else
            echo "FAIL $name$(run_tests_tag "${notes[@]}")"
            # its output, or the end of the log when it never finished
            if grep -qF -e "[  FAILED  ] $name (" \
                        -e "[  FAILED  ] $name, where GetParam()" "$log"; then
                sed -n "\%^\[ RUN      \] $name\$%,\%^\[  FAILED  \] $name[ ,]%p" \
                    "$log" | sed 's/^/    | /' | tail -60
            elif [ -z "$unfinished" ]; then
                unfinished=$name
                echo "    | (exit status $rc; the test did not finish)"
                # the test's watchdog (uct_test_watchdog.cc) printed every
                # thread's stack: all of it, else the end of the log
                if grep -q '^WATCHDOG: ' "$log"; then
                    sed -n "\%^\[ RUN      \] $name\$%,\$p" "$log" |
                        sed 's/^/    | /' | head -400
                else
                    sed 's/^/    | /' "$log" | tail -40
                fi
            else
                echo "    | (exit status $rc; did not run to its end: $unfinished did not finish)"
            fi
            FAILED=$((FAILED + 1))
        fi
    done
}

run_tests_summary() {
    echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
    [ "$FAILED" = 0 ]
}
