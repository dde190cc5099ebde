#!/bin/bash
#
# Build an upstream UCX release for rc_gdr to build against and run in.
#
# GPU sites run UCX releases that no package archive here serves (1.16 in
# Ubuntu 24.04, the 1.19 line, 1.22). Their pristine sources are in
# ../shared/deps (README there). This script unpacks one, runs autogen and
# configure for a lean verbs build (rc_verbs, ud_verbs, rdmacm, ucx_perftest;
# no documentation, no Java/Go, no GPU stack unless --cuda), builds and
# installs it into a prefix, and keeps the configured source tree and the
# build tree beside it: rc_gdr compiles against UCX's internal headers and the
# build's own config.h.
#
# Everything lives outside the clone, keyed by version and by a hash of the
# configure options and the source tarball:
#   ${RC_GDR_CACHE:-/var/cache/rc_gdr}/ucx-upstream-<version>[-cuda]-<hash>/
#       src/      the source tree (autogen'd)
#       build/    the configured build tree (config.h, ucx-version)
#       install/  the prefix (bin/ucx_info, lib/libuct.so, lib/ucx/...)
#       nvml/     (--cuda) NVML stand-in header and library, see below
#       build.log, timings, .complete
#
# Usage: contrib/ucx-upstream.sh [--cuda] [--print-dir] [--jobs N] VERSION...
#   --cuda       configure --with-cuda (the CUDA toolkit at $CUDA_HOME,
#                default /usr/local/cuda): cuda_copy and UCM's CUDA module
#   --print-dir  print the prepared directory of each VERSION, build nothing
#                (exit 1 when one is not built yet)
#   --jobs N     parallel make jobs (default: nproc)
#   --print-deps print the directory the release tarballs are taken from
#                (RC_GDR_DEPS, else shared/deps beside the repository)
#
set -euo pipefail

cd "$(dirname "$0")/.."
CACHE=${RC_GDR_CACHE:-/var/cache/rc_gdr}

# The release tarballs: RC_GDR_DEPS, else shared/deps beside this checkout,
# else beside the main checkout of this one's repository (a git worktree),
# else beside the repository it was cloned from (a CI clone elsewhere).
deps_dir() {
    local origin common
    [ -z "${RC_GDR_DEPS:-}" ] || { echo "$RC_GDR_DEPS"; return; }
    if [ -d ../shared/deps ]; then
        (cd ../shared/deps && pwd)
        return
    fi
    common=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
    if [ -n "$common" ] && [ -d "$common/../../shared/deps" ]; then
        (cd "$common/../../shared/deps" && pwd)
        return
    fi
    origin=$(git config --get remote.origin.url 2>/dev/null || true)
    origin=${origin#file://}
    if [ -d "$origin/../shared/deps" ]; then
        (cd "$origin/../shared/deps" && pwd)
        return
    fi
    echo "$(cd .. && pwd)/shared/deps" # named in the error that follows
}
DEPS=$(deps_dir)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CUDA=0
PRINT_DIR=0
JOBS=$(nproc)
VERSIONS=()
while [ $# -gt 0 ]; do
    case "$1" in
    --cuda)      CUDA=1 ;;
    --print-dir) PRINT_DIR=1 ;;
    --print-deps) echo "$DEPS"; exit 0 ;;
    --jobs)      JOBS=$2; shift ;;
    -h|--help)   sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
    -*)          echo "ucx-upstream: unknown option '$1'" >&2; exit 2 ;;
    *)           VERSIONS+=("$1") ;;
    esac
    shift
done
[ ${#VERSIONS[@]} -gt 0 ] || { echo "ucx-upstream: no VERSION given" >&2; exit 2; }

log() { echo "ucx-upstream: $*" >&2; }

# The options of every build. Unknown options are ignored by configure (the
# releases differ: --without-mlx5 is 1.17+, --without-mlx5-dv 1.16).
# --disable-static: libtool would compile every source twice.
# --enable-mt as in the distributions' builds, so that the layouts config.h
# controls match a packaged UCX of the same release.
# -O1 and line tables only: half the compile time of UCX's -O3 -g, which on
# two cores decides whether a new machine's first CI run fits its time; the
# releases are run for their API and behaviour, not timed. -Wno-error: the
# warnings of other optimization levels are UCX's, not this build's to fix.
OPTIONS="--enable-compiler-opt=1 CFLAGS=-g1\ -Wno-error
         --enable-devel-headers --enable-mt --with-verbs --with-rdmacm
         --without-java --without-go --disable-doxygen-doc --disable-examples
         --without-rocm --without-ze --without-gaudi --without-ugni
         --without-gdrcopy --without-knem --without-xpmem --without-fuse3
         --without-valgrind --without-mpi --without-mad --without-efa
         --without-mlx5 --without-mlx5-dv --disable-test-apps
         --disable-static"
if [ "$CUDA" = 1 ]; then
    # UCX 1.22's device-side kernels (perftest's CUDA kernels, GDAKI) need
    # DOCA GPUNetIO headers, a git submodule that a release archive lacks,
    # and rc_gdr uses none of them: without nvcc configure leaves them out.
    OPTIONS="$OPTIONS --with-cuda=$CUDA_HOME NVCC=/bin/false"
else
    OPTIONS="$OPTIONS --without-cuda"
fi
OPTIONS=$(echo $OPTIONS)
# Bump when the recipe changes in a way the options do not show.
RECIPE=1

dir_of() {
    local v=$1 tarball="$DEPS/ucx-$1.tar.gz" sum key
    [ -f "$tarball" ] || { log "no source tarball $tarball"; return 1; }
    sum=$(sha256sum "$tarball" | cut -c1-64)
    key=$( { printf '%s\n' "$v" "$sum" "$OPTIONS" "$RECIPE"
             [ "$CUDA" = 0 ] || cat contrib/ucx-upstream/nvml*; } |
          sha256sum | cut -c1-10)
    if [ "$CUDA" = 1 ]; then
        echo "$CACHE/ucx-upstream-$v-cuda-$key"
    else
        echo "$CACHE/ucx-upstream-$v-$key"
    fi
}

# UCX's configure insists on NVML with --with-cuda, and the toolkit here has
# no nvml.h. UCX uses NVML only for NVLink fabric queries that rc_gdr never
# needs; a header with those few declarations (written for this project) and a
# library whose every call reports "not supported" let it configure and link.
# At run time a machine with a driver loads its own libnvidia-ml.so.1.
nvml_stub() {
    local d=$1
    mkdir -p "$d/include" "$d/lib"
    cp contrib/ucx-upstream/nvml.h "$d/include/nvml.h"
    gcc -shared -fPIC -O2 -I"$d/include" -Wl,-soname,libnvidia-ml.so.1 \
        -o "$d/lib/libnvidia-ml.so.1" contrib/ucx-upstream/nvml_stub.c
    ln -sf libnvidia-ml.so.1 "$d/lib/libnvidia-ml.so"
}

build_one() {
    local v=$1 dir t0 t
    # (called as "build_one || rc=1": set -e does not stop it here, and an
    # empty dir would build in /)
    dir=$(dir_of "$v") && [ -n "$dir" ] || return 1
    if [ -f "$dir/.complete" ]; then
        log "ucx $v ready (cached): $dir"
        return 0
    fi
    exec 9> "$dir.lock"
    flock 9
    if [ -f "$dir/.complete" ]; then
        log "ucx $v ready (built meanwhile): $dir"
        return 0
    fi
    log "building ucx $v into $dir (log: $dir/build.log)"
    rm -rf "$dir"
    mkdir -p "$dir/build"
    tar -xzf "$DEPS/ucx-$v.tar.gz" -C "$dir"
    mv "$dir/ucx-$v" "$dir/src"
    local extra=()
    if [ "$CUDA" = 1 ]; then
        nvml_stub "$dir/nvml"
        extra=(CPPFLAGS="-I$dir/nvml/include" LDFLAGS="-L$dir/nvml/lib")
    fi
    : > "$dir/timings"
    step() {
        local name=$1; shift
        t0=$(date +%s)
        if ! "$@" >> "$dir/build.log" 2>&1; then
            log "ucx $v: $name failed; the end of $dir/build.log:"
            tail -30 "$dir/build.log" >&2
            return 1
        fi
        t=$(( $(date +%s) - t0 ))
        echo "$name ${t}s" >> "$dir/timings"
        log "ucx $v: $name ${t}s"
    }
    # shellcheck disable=SC2086
    step autogen   bash -c "cd '$dir/src' && nice ./autogen.sh" &&
    step configure bash -c "cd '$dir/build' && nice ../src/configure \
                      --prefix='$dir/install' $OPTIONS ${extra[*]:+${extra[*]}}" &&
    step make      nice make -C "$dir/build" -j"$JOBS" &&
    step install   nice make -C "$dir/build" install ||
        return 1
    # rc_gdr's configure reads the version from here, as for the
    # distribution's tree.
    echo "$v" > "$dir/build/ucx-version"
    echo "$OPTIONS" > "$dir/options"
    "$dir/install/bin/ucx_info" -v | sed -n '1p' >&2
    touch "$dir/.complete"
    log "ucx $v ready: $dir"
}

rc=0
for v in "${VERSIONS[@]}"; do
    if [ "$PRINT_DIR" = 1 ]; then
        d=$(dir_of "$v") || { rc=1; continue; }
        [ -f "$d/.complete" ] ||
            { log "ucx $v is not built: run $0 $([ "$CUDA" = 1 ] && echo "--cuda ")$v"; rc=1; }
        echo "$d"
    else
        build_one "$v" || rc=1
    fi
done
exit $rc
