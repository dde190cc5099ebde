#!/bin/bash
#
# Registration cache hit cost: rc_gdr's cache beside UCX's ucs_rcache from
# the same libucs, in one process (contrib/bench/rcache_bench.c): median ns
# per get+put over live one-page entries, and the ratio. Prints figures, is
# not a test.
#
# Usage: contrib/bench-rcache.sh [BUILD_DIR] [-- rcache_bench options]
#   default: 10,000 entries in pseudo-random order, then 10,000 in
#   sequential order, then 1 entry, then 10,000 pseudo-random whose gets
#   start 64 bytes into the page (each hit also updates the hull)
#
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD=build
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
    BUILD=$1
    shift
fi
[ "${1:-}" != "--" ] || shift

BENCH=$BUILD/contrib/bench/rcache_bench
if [ ! -x "$BENCH" ]; then
    make -C "$BUILD" -s contrib/bench/rcache_bench
fi

echo "== $(date -u '+%F %H:%M UTC') $(uname -n):" \
     "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)," \
     "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== UCX $(ucx_info -v |
             sed -n 's/^# \(Library version:\|Version\) *\([0-9.]*\).*/\2/p' |
             head -n1)"

if [ $# -gt 0 ]; then
    "$BENCH" "$@"
    exit
fi

for args in "-n 10000" "-n 10000 -s" "-n 1" "-n 10000 -o 64"; do
    # shellcheck disable=SC2086 # the words are options
    "$BENCH" $args
    echo
done
