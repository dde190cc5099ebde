#!/bin/bash
#
# Everything a fresh machine needs before rc_gdr runs: the distribution's
# packages, the UCX source tree of the installed version (cached outside the
# clone), and an out-of-tree build in build/ with its test programs.
#
# Usage: contrib/build.sh [BUILD_DIR]
#
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD=${1:-build}

contrib/ucx-deps.sh
UCX_DIR=$(contrib/ucx-deps.sh --print-dir)

if [ ! -x configure ] || [ configure.ac -nt configure ] ||
   [ Makefile.am -nt configure ]; then
    ./autogen.sh > /dev/null
fi

mkdir -p "$BUILD"
if [ ! -f "$BUILD/Makefile" ] || [ configure -nt "$BUILD/Makefile" ]; then
    (cd "$BUILD" && ../configure --with-ucx-src="$UCX_DIR" > configure.out) ||
        { cat "$BUILD/configure.out" "$BUILD/config.log" | tail -40; exit 1; }
fi

make -C "$BUILD" -j"$(nproc)" -s
# The test programs and stand-in libraries, without running the tests.
make -C "$BUILD" -j"$(nproc)" -s check TESTS= > "$BUILD/check-build.out" 2>&1 ||
    { tail -40 "$BUILD/check-build.out"; exit 1; }
echo "build: ready in $BUILD"
