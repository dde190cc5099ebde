#!/bin/bash
#
# Builds UCX's UCT googletest suites (test/gtest of the UCX source tree that
# contrib/ucx-deps.sh prepares, or with --ucx that of an upstream release
# contrib/ucx-upstream.sh built), with rc_gdr added to the transport lists by
# the patch beside this script (ucx-<version>-rc_gdr.patch), linked to that
# UCX. The binary is cached outside the clone, keyed by the UCX version and
# by a hash of the patch and the makefile:
#
#   ${RC_GDR_CACHE:-/var/cache/rc_gdr}/ucx-gtest-<version>/<hash>/gtest
#   ${RC_GDR_CACHE:-/var/cache/rc_gdr}/ucx-gtest-upstream-<version>/<hash>/gtest
#
# A cached binary is reused; other hashes of the same version are removed
# once a new one is built.
#
# Usage: contrib/conformance/build-gtest.sh [--ucx VERSION] [--print-path]
#   --ucx VERSION an upstream release (1.16.0, 1.19.1, 1.22.0; built first
#                 when it is not)
#   --print-path  print only the binary's path on stdout (messages go to stderr)
#
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${RC_GDR_CACHE:-/var/cache/rc_gdr}
MAKEFILE="$HERE/gtest.mk"
PRINT_PATH=0
UPSTREAM=""

usage() { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; }

log() { echo "conformance-build: $*" >&2; }

parse_args() {
    while [ $# -gt 0 ]; do
        case $1 in
        --print-path) PRINT_PATH=1 ;;
        --ucx)        [ $# -ge 2 ] || { usage >&2; exit 2; }
                      UPSTREAM=$2; shift ;;
        -h|--help)    usage; exit 0 ;;
        *)            usage >&2; exit 2 ;;
        esac
        shift
    done
}

# The key of a build: what changes the binary besides the UCX version.
build_key() {
    cat "$PATCH" "$MAKEFILE" | sha256sum | cut -c1-12
}

build() { # UCX_DIR OUT [UCX_PREFIX UCX_API]
    local ucx_dir=$1 out=$2 prefix=${3:-} api=${4:-1.13} t0=$SECONDS
    log "building UCX's UCT gtest in $out ($(nproc) jobs; some minutes)"
    rm -rf "$out/src"
    mkdir -p "$out/src/test/gtest"
    cp -a "$ucx_dir/src/test/gtest/common" "$ucx_dir/src/test/gtest/uct" \
        "$out/src/test/gtest/"
    patch -s -p1 -d "$out/src" < "$PATCH"
    make -f "$MAKEFILE" -C "$out" -j"$(nproc)" -s \
        GTEST_DIR="$out/src/test/gtest" UCX_SRC="$ucx_dir/src" \
        UCX_CONFIG="$ucx_dir/build" UCX_PREFIX="$prefix" UCX_API="$api" \
        > "$out/build.log" 2>&1 ||
        { tail -n 40 "$out/build.log" >&2; log "build failed"; return 1; }
    touch "$out/.complete"
    log "built in $((SECONDS - t0)) s"
}

main() {
    local version ucx_dir top out old prefix api
    parse_args "$@"
    "$ROOT/contrib/ucx-deps.sh" >&2
    if [ -n "$UPSTREAM" ]; then
        "$ROOT/contrib/ucx-upstream.sh" "$UPSTREAM" >&2
        ucx_dir=$("$ROOT/contrib/ucx-upstream.sh" --print-dir "$UPSTREAM")
        version=$UPSTREAM
        top="$CACHE/ucx-gtest-upstream-$version"
        prefix="$ucx_dir/install"
        api=${version%.*}
    else
        ucx_dir=$("$ROOT/contrib/ucx-deps.sh" --print-dir)
        version=$(dpkg-query -W -f='${Version}' libucx0)
        top="$CACHE/ucx-gtest-$version"
        prefix=""
        api=1.13
        version=${version%%-*}
    fi
    PATCH="$HERE/ucx-$version-rc_gdr.patch"
    [ -f "$PATCH" ] || { log "no patch for UCX $version ($PATCH)"; exit 2; }
    out="$top/$(build_key)"

    if [ ! -f "$out/.complete" ] || [ ! -x "$out/gtest" ]; then
        mkdir -p "$out"
        build "$ucx_dir" "$out" "$prefix" "$api"
        for old in "$top"/*/; do
            [ "${old%/}" = "$out" ] || rm -rf "$old"
        done
    else
        log "cached: $out/gtest"
    fi
    if [ "$PRINT_PATH" = 1 ]; then
        echo "$out/gtest"
    fi
}

main "$@"
