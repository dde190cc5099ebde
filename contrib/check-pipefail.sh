#!/bin/bash
#
# In a script under `set -o pipefail`, `producer | grep -q PATTERN` can fail
# although the pattern is there: grep -q exits at its first match, the
# producer's next write meets a closed pipe, the producer dies of SIGPIPE
# (141) and pipefail makes that the pipeline's status. Whether it happens is
# a race the reader wins more often on a loaded host: one CI run failed
# rcache_knobs_in_ucx_config so, with the three lines it looked for printed
# just above. Write `grep -q PATTERN <<<"$text"` (or test the producer's
# captured output) instead.
#
# Usage: contrib/check-pipefail.sh [--self-test] [FILE...]
#   FILEs default to the tracked shell scripts. Prints each
#   offending line as FILE:LINE: TEXT and exits 1 on any.
#   --self-test: checks the check, on a planted script (one bad line, and
#   the safe forms beside it).
#
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2

# `| grep` with -q among its options (-q, -qE, -Eq, -c -q, ...)
BAD='\|[[:space:]]*grep([[:space:]]+-[a-zA-Z]+)*[[:space:]]+-[a-zA-Z]*q'

scan() {
    local f rc=0
    for f in "$@"; do
        # comment lines may show the pattern; code may not
        if grep -nE "$BAD" "$f" | grep -vE '^[0-9]+:[[:space:]]*#' |
                sed "s|^|$f:|" | grep .; then
            rc=1
        fi
    done
    return $rc
}

if [ "${1:-}" = --self-test ]; then
    t=$(mktemp -d)
    trap 'rm -rf "$t"' EXIT
    cat > "$t/planted.sh" <<'EOF'
set -o pipefail
# a comment may say: echo "$x" | grep -q y
grep -q y <<<"$x"
echo "$x" | grep y > /dev/null
echo "$x" | grep -Eq 'y|z' && echo found
EOF
    out=$(scan "$t/planted.sh")
    echo "$out"
    if [ "$out" = "$t/planted.sh:5:echo \"\$x\" | grep -Eq 'y|z' && echo found" ]; then
        echo "PASS check-pipefail finds the planted line, and only it"
        exit 0
    fi
    echo "FAIL check-pipefail: expected line 5 of the planted script alone"
    exit 1
fi

# Every tracked shell file, not only those that set pipefail: a sourced
# one (contrib/lib) runs under its caller's, and one rule everywhere keeps
# a script that gains pipefail later safe.
if [ $# = 0 ]; then
    mapfile -t files < <(git ls-files | while read -r f; do
        # this file's self-test holds a planted line: not a pipe it runs
        [ "$f" != contrib/check-pipefail.sh ] || continue
        first=""
        [ -f "$f" ] && read -r first < "$f"
        if [[ $first == '#!'*sh* || $f == *.sh ]] ||
               grep -q '^# shellcheck shell=' "$f"; then
            echo "$f"
        fi
    done)
    set -- "${files[@]}"
fi
if scan "$@"; then
    echo "check-pipefail: $# shell scripts, no pipe into grep -q"
    exit 0
fi
echo "check-pipefail: the lines above pipe into grep -q"
exit 1
