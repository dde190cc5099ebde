#!/bin/bash
#
# The conformance tier's report, from the results a run left in DIR
# (results.tsv and params.tsv, written by run-guest.sh in the guest):
#   - a per-suite table, rc_gdr vs rc_verbs, both devices together, and the
#     totals per device;
#   - every rc_gdr test that did not pass: the reason (the assertion, or the
#     signal and frame of a crash, or where a hang stood) and what rc_verbs
#     did in the same test on the same device;
#   - the tests not counted, each with its reason;
#   - one line "N passed, N failed, N skipped" over rc_gdr's tests.
# Exit status 1 when a test counts as failed.
#
# Counting, per rc_gdr test (one per device): passed; failed when it fails,
# crashes or hangs, or skips where rc_verbs passes; skipped when rc_verbs
# skips too, or fails too (a soft-RoCE limit), or the test is listed in
# NOT_APPLICABLE. A crash or a hang is a failure unless rc_verbs crashes or
# hangs in the same test too.
#
# Usage: contrib/conformance/report.sh DIR NOT_APPLICABLE [--markdown]
#   --markdown  the table and lists as Markdown (for doc/CONFORMANCE.md)
#
set -euo pipefail

DIR=$1
NA=$2
MD=${3:-}

usage() { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; }

# "lib.so(+0x1234)" frames in the reasons, resolved to function names where
# the binary is at hand (binaries.tsv: the gtest binary, the module copied
# into DIR at the start of the run).
resolve_frames() {
    local gtest_bin lib line rest out whole obj off file fn
    gtest_bin=$(sed -n 's/^gtest\t//p' "$DIR/binaries.tsv" 2>/dev/null || true)
    lib=$(sed -n 's/^module\t//p' "$DIR/binaries.tsv" 2>/dev/null || true)
    while IFS= read -r line; do
        out="" rest=$line
        while [[ $rest =~ (gtest|libuct_ib_gdr\.so)\(\+(0x[0-9a-f]+)\) ]]; do
            whole=${BASH_REMATCH[0]} obj=${BASH_REMATCH[1]}
            off=${BASH_REMATCH[2]} fn=""
            file=$lib
            [ "$obj" = gtest ] && file=$gtest_bin
            if [ -n "$file" ] && [ -f "$file" ]; then
                fn=$(addr2line -f -C -e "$file" "$off" 2>/dev/null | head -n1)
            fi
            [ -n "$fn" ] && [ "$fn" != "??" ] || fn="+$off"
            out="$out${rest%%"$whole"*}$obj($fn)"
            rest=${rest#*"$whole"}
        done
        printf '%s\n' "$out$rest"
    done
}

report() {
    awk -F'\t' -v md="$MD" -v na_file="$NA" '
    function glob2re(g) {
        gsub(/[.+^$(){}|\[\]\\]/, "\\\\&", g)
        gsub(/\*/, ".*", g); gsub(/\?/, ".", g)
        return "^" g "$"
    }
    function add(list, t, outcome, d, text,   g) {
        g = list SUBSEP t SUBSEP outcome
        if (!(g in gdev)) {
            n[list]++; glist[list, n[list]] = g; gtext[g] = t "\t" text
            gdev[g] = d
        } else {
            gdev[g] = gdev[g] ", " d
        }
        ntests[list]++
    }
    # prints one list: "TAG test (devices): text[; rc_verbs: ...]"
    function print_list(list, tag,   i, g, f) {
        for (i = 1; i <= n[list]; i++) {
            g = glist[list, i]; split(gtext[g], f, "\t")
            if (md != "") {
                printf "- `%s` (%s): %s%s\n", f[1], gdev[g], f[2], (f[3] != "") ? "; rc_verbs: " f[3] : ""
            } else {
                printf "%s %s (%s): %s\n", tag, f[1], gdev[g], f[2]
                if (f[3] != "") printf "     rc_verbs: %s\n", f[3]
            }
        }
    }
    function na_reason(name,   i) {
        for (i = 1; i <= nna; i++) if (name ~ na_re[i]) return na_why[i]
        return ""
    }
    # "rc_gdr/uct_flush_test.x/1" + "rc_gdr/rxe1:1" -> side, "suite.test", dev
    function split_name(full, param,   p, n) {
        p = index(full, "/"); side = substr(full, 1, p - 1)
        n = substr(full, p + 1); sub(/\/[0-9]+$/, "", n); tname = n
        suite = n; sub(/\..*/, "", suite)
        dev = param
        if (index(dev, side "/") == 1) dev = substr(dev, length(side) + 2)
        if (dev == "") dev = "?"
        side = (side == "rc_gdr") ? "gdr" : "verbs"
    }
    FILENAME == na_file {
        if ($0 ~ /^#/ || $0 ~ /^[ \t]*$/) next
        line = $0; pat = line; sub(/[ \t].*/, "", pat)
        w = line; sub(/^[^ \t]+[ \t]+/, "", w)
        nna++; na_re[nna] = glob2re(pat); na_why[nna] = w
        next
    }
    # suites in the order gtest runs them
    FILENAME ~ /params.tsv$/ {
        param[$1] = $2
        split_name($1, $2)
        if (!(suite in sidx)) { sidx[suite] = ++nsuites; suites[nsuites] = suite }
        next
    }
    {
        split_name($1, param[$1])
        key = tname "\t" dev
        st[side, key] = $2; why[side, key] = $4
        if (side == "gdr" && !(key in seen)) { seen[key] = 1; order[++nkeys] = key }
        if (!(suite in sidx)) { sidx[suite] = ++nsuites; suites[nsuites] = suite }
        cnt[side, suite, $2]++
    }
    END {
        ncol = split("passed failed crashed hung skipped", col, " ")
        # count rc_gdr, per test
        for (i = 1; i <= nkeys; i++) {
            key = order[i]; split(key, kp, "\t"); t = kp[1]; d = kp[2]
            s = st["gdr", key]; v = (("verbs", key) in st) ? st["verbs", key] : "-"
            vw = why["verbs", key]; r = na_reason(t)
            s2 = t; sub(/\..*/, "", s2)
            if (r != "") {
                verdict = "skipped"; note = "not applicable: " r
                na_cnt[s2]++
            } else if (s == "passed") {
                verdict = "passed"
            } else if (s == "skipped") {
                if (v == "passed") {
                    verdict = "failed"; note = "skipped (" why["gdr", key] ") where rc_verbs passes"
                } else {
                    verdict = "skipped"; note = "skipped: " why["gdr", key] \
                        ((v == "skipped") ? "" : "; rc_verbs " v)
                }
            } else if ((s == "failed" && (v == "failed" || v == "crashed" || v == "hung")) ||
                       ((s == "crashed" || s == "hung") && (v == "crashed" || v == "hung"))) {
                verdict = "skipped"; note = "rc_gdr " s ", rc_verbs " v " too: " vw
            } else {
                verdict = "failed"; note = s ": " why["gdr", key]
            }
            tot[verdict]++; pdev[d, verdict]++
            # the lists: one line per test and outcome, the devices together
            # (the first device'"'"'s reason stands for them)
            if (verdict == "failed") {
                add("fl", t, s "," v, d, note "\t" v ((v != "passed" && vw != "") ? " (" vw ")" : ""))
            } else if (verdict == "skipped" && (s != "skipped" || r != "")) {
                add("sk", t, s "," v, d, note)
            } else if (verdict == "skipped") {
                add("sb", t, s "," v, d, note)
            }
        }
        if (md != "") {
            print "| suite | rc_gdr pass | fail | crash | hang | skip | rc_verbs pass | fail | crash | hang | skip | n/a |"
            print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        } else {
            printf "%-38s | %-29s | %-29s | %s\n", "", "rc_gdr", "rc_verbs", ""
            printf "%-38s |", "suite (rxe0:1 + rxe1:1)"
            for (k = 1; k <= 2; k++) printf " %5s %5s %5s %5s %5s |", "pass", "fail", "crash", "hang", "skip"
            printf " %s\n", "n/a"
        }
        for (i = 1; i <= nsuites; i++) {
            s = suites[i]
            if (md != "") {
                row = "| " s
                for (k = 1; k <= ncol; k++) row = row " | " (cnt["gdr", s, col[k]] + 0)
                for (k = 1; k <= ncol; k++) row = row " | " (cnt["verbs", s, col[k]] + 0)
                print row " | " (na_cnt[s] + 0) " |"
            } else {
                printf "%-38s |", s
                for (k = 1; k <= ncol; k++) printf " %5d", cnt["gdr", s, col[k]]
                printf " |"
                for (k = 1; k <= ncol; k++) printf " %5d", cnt["verbs", s, col[k]]
                printf " | %d\n", na_cnt[s]
            }
            for (k = 1; k <= ncol; k++) {
                sum["gdr", col[k]] += cnt["gdr", s, col[k]]
                sum["verbs", col[k]] += cnt["verbs", s, col[k]]
            }
            nasum += na_cnt[s]
        }
        if (md != "") {
            row = "| **all**"
            for (k = 1; k <= ncol; k++) row = row " | **" (sum["gdr", col[k]] + 0) "**"
            for (k = 1; k <= ncol; k++) row = row " | **" (sum["verbs", col[k]] + 0) "**"
            print row " | **" (nasum + 0) "** |"
        } else {
            printf "%-38s |", "all"
            for (k = 1; k <= ncol; k++) printf " %5d", sum["gdr", col[k]]
            printf " |"
            for (k = 1; k <= ncol; k++) printf " %5d", sum["verbs", col[k]]
            printf " | %d\n", nasum
        }
        print ""
        # devices: rxe0:1 (transports) and rxe0 (md suites) are one device
        printf "rc_gdr, counted per device:"
        for (key in pdev) { split(key, kp, SUBSEP); dn = kp[1]; sub(/:.*/, "", dn); sub(/\/.*/, "", dn); bydev[dn, kp[2]] += pdev[key]; dl[dn] = 1 }
        for (dn in dl) printf " %s %d passed, %d failed, %d skipped;", dn, bydev[dn, "passed"], bydev[dn, "failed"], bydev[dn, "skipped"]
        print ""
        print ""
        hdr = (md != "") ? "### " : "== "
        print hdr "rc_gdr failures (" ntests["fl"] + 0 " tests): test (devices): what happened; what rc_verbs did"
        print_list("fl", "FAIL")
        print ""
        print hdr "not counted (" ntests["sk"] + 0 " tests): not applicable, or rc_verbs fails too"
        print_list("sk", "SKIP")
        print ""
        print hdr "skipped by rc_gdr, not where rc_verbs passes (" ntests["sb"] + 0 " tests): the reason"
        print_list("sb", "SKIP")
        print ""
        printf "%d passed, %d failed, %d skipped\n", tot["passed"], tot["failed"], tot["skipped"]
        exit (tot["failed"] > 0)
    }' "$NA" "$DIR/params.tsv" "$DIR/results.tsv"
}

main() {
    local rc=0 raw
    if [ $# -lt 2 ] || [ ! -f "$1/results.tsv" ]; then
        usage >&2
        exit 2
    fi
    raw=$(mktemp)
    report > "$raw" || rc=$?
    resolve_frames < "$raw" | c++filt
    rm -f "$raw"
    return "$rc"
}

main "$@"
