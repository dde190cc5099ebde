#!/bin/bash
#
# Tier 1b across releases: a module built for one UCX release, loaded into a
# process of every other one, never crashes: one clear line, not registered.
# Each pair is tried the way that process would load it: LD_PRELOAD (every
# release), and UCX_PLUGIN_PATH where the process has it (1.22 on), with
# every symbol bound at load; and the module's UCX symbols are checked
# against that release's libraries.
#
# Usage: test/host/cross.sh BUILD_DIR BUILD_DIR...   (builds for different
#        releases, e.g. build build-1.16.0 build-1.19.1 build-1.22.0)
# Prints "PASS name" / "FAIL name" per pair and "N passed, N failed".
#
set -uo pipefail

cd "$(dirname "$0")/../.."
LOG=$(mktemp -d /tmp/rc_gdr_cross.XXXXXX)
PASSED=0
FAILED=0

# ucx.env of a build, as "VERSION BINDIR LIBDIR PLUGIN"
describe() {
    local b=$1 RC_GDR_UCX_VERSION="" RC_GDR_UCX_BINDIR="" RC_GDR_UCX_LIBDIR=""
    # shellcheck disable=SC1091
    . "$b/ucx.env"
    echo "$RC_GDR_UCX_VERSION ${RC_GDR_UCX_BINDIR:--} ${RC_GDR_UCX_LIBDIR:--}" \
         "$(cd "$b" && pwd)/src/uct/ib_gdr/.libs/libuct_ib_gdr.so"
}

has_plugin_path() {
    case "$1" in
    1.1[0-9].*|1.2[01].*) return 1 ;;
    esac
    return 0
}

# Runs the process of release $2 (programs in $3, libraries in $4) with the
# module $5, loaded by $6 (preload|plugin_path); the module is for release $1.
check_pair() {
    local mver=$1 pver=$2 bindir=$3 libdir=$4 plugin=$5 how=$6
    local env=(env LD_BIND_NOW=1) out rc
    if [ "$bindir" != - ]; then
        env+=(PATH="$bindir:$PATH" LD_LIBRARY_PATH="$libdir")
    fi
    if [ "$how" = preload ]; then
        env+=(LD_PRELOAD="$plugin")
    else
        env+=(UCX_PLUGIN_PATH="$(dirname "$plugin")")
    fi
    out=$("${env[@]}" ucx_info -c 2>&1); rc=$?
    echo "$out" | grep -v '^UCX_' | head -5
    echo "exit status $rc"
    [ "$rc" = 0 ] &&
        [ "$(echo "$out" | sed 's|/rc_gdr/|/|g' | grep -ci 'rc_gdr')" = 1 ] &&
        grep -q "built for UCX $mver but this process runs UCX $pver; the transport is not registered" <<<"$out" &&
        ! grep -q '^UCX_RC_GDR_' <<<"$out"
}

# Every UCX symbol the module needs from the process's release is there, or
# is weak: the dynamic link never fails, even with LD_BIND_NOW.
check_symbols() {
    local plugin=$1 libdir=$2 missing
    [ "$libdir" != - ] || libdir=$(dirname "$(ldconfig -p |
                                   sed -n 's/.*libuct.so.0 .*=> //p' | head -1)")
    missing=$(comm -23 \
        <(nm -D --undefined-only "$plugin" | awk '$1 == "U" {print $2}' |
          grep -E '^uc[pstm]_' | sort -u) \
        <(for l in libucs libuct libucp libucm; do
              nm -D --defined-only "$libdir/$l.so.0"
          done | awk '{print $3}' | sort -u))
    [ -z "$missing" ] || { echo "not in $libdir, and not weak:"; echo "$missing"; return 1; }
}

run_test() {
    local name=$1; shift
    if "$@" > "$LOG/$name.log" 2>&1; then
        echo "PASS $name"
        PASSED=$((PASSED + 1))
    else
        echo "FAIL $name"
        sed 's/^/    | /' "$LOG/$name.log" | tail -20
        FAILED=$((FAILED + 1))
    fi
}

[ $# -ge 2 ] || { echo "usage: $0 BUILD_DIR BUILD_DIR..." >&2; exit 2; }
for m in "$@"; do
    read -r mver _ _ plugin <<< "$(describe "$m")"
    for p in "$@"; do
        read -r pver bindir libdir _ <<< "$(describe "$p")"
        [ "$mver" != "$pver" ] || continue
        run_test "module_${mver}_symbols_in_${pver}" \
            check_symbols "$plugin" "$libdir"
        run_test "module_${mver}_in_${pver}_preload" \
            check_pair "$mver" "$pver" "$bindir" "$libdir" "$plugin" preload
        if has_plugin_path "$pver"; then
            run_test "module_${mver}_in_${pver}_plugin_path" \
                check_pair "$mver" "$pver" "$bindir" "$libdir" "$plugin" \
                           plugin_path
        fi
    done
done

rm -rf "$LOG"
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
