#!/bin/bash
#
# Everything a fresh machine needs before rc_gdr runs: the distribution's
# packages, the UCX source tree of the release to build against (cached
# outside the clone), and an out-of-tree build with its test programs.
#
# Usage: contrib/build.sh [--ucx VERSION] [--cuda] [BUILD_DIR]
#   (no --ucx)     the distribution's UCX (Debian 12: 1.13.1), in build/
#   --ucx VERSION  an upstream release built by contrib/ucx-upstream.sh
#                  (any with a tarball in shared/deps: 1.16.0, 1.18.1,
#                  1.19.1, 1.20.1, 1.22.0), in build-VERSION/ by default
#   --cuda         with --ucx: that release's CUDA build (cuda_copy, UCM's
#                  CUDA module), in build-VERSION-cuda/ by default
#
set -euo pipefail

cd "$(dirname "$0")/.."
UCX=""
CUDA=0
BUILD=""
while [ $# -gt 0 ]; do
    case "$1" in
    --ucx)  UCX=$2; shift ;;
    --cuda) CUDA=1 ;;
    -*)     echo "build: unknown option '$1'" >&2; exit 2 ;;
    *)      BUILD=$1 ;;
    esac
    shift
done

contrib/ucx-deps.sh
DISTRO_UCX=$(dpkg-query -W -f='${Version}' libucx0 2>/dev/null | sed 's/-.*//')
if [ -z "$UCX" ] || [ "$UCX" = "$DISTRO_UCX" ]; then
    [ "$CUDA" = 0 ] || { echo "build: --cuda needs an upstream --ucx" >&2; exit 2; }
    UCX_DIR=$(contrib/ucx-deps.sh --print-dir)
    BUILD=${BUILD:-build}
else
    flavour=()
    suffix=""
    if [ "$CUDA" = 1 ]; then
        flavour=(--cuda)
        suffix=-cuda
    fi
    contrib/ucx-upstream.sh "${flavour[@]}" "$UCX"
    UCX_DIR=$(contrib/ucx-upstream.sh "${flavour[@]}" --print-dir "$UCX")
    BUILD=${BUILD:-build-$UCX$suffix}
fi

if [ ! -x configure ] || [ configure.ac -nt configure ] ||
   [ Makefile.am -nt configure ]; then
    ./autogen.sh > /dev/null
fi

mkdir -p "$BUILD"
# Reconfigure when the tree changed or the build dir was for another UCX.
if [ ! -f "$BUILD/Makefile" ] || [ configure -nt "$BUILD/Makefile" ] ||
   ! grep -qF -- "--with-ucx-src=$UCX_DIR" "$BUILD/config.status" 2>/dev/null
then
    (cd "$BUILD" && "$OLDPWD/configure" --with-ucx-src="$UCX_DIR" \
         > configure.out) ||
        { cat "$BUILD/configure.out" "$BUILD/config.log" | tail -40; exit 1; }
fi

make -C "$BUILD" -j"$(nproc)" -s
# The test programs and stand-in libraries, without running the tests.
make -C "$BUILD" -j"$(nproc)" -s check TESTS= > "$BUILD/check-build.out" 2>&1 ||
    { tail -40 "$BUILD/check-build.out"; exit 1; }
echo "build: ready in $BUILD (UCX $(sed -n 's/^RC_GDR_UCX_VERSION=//p' "$BUILD/ucx.env"))"
