#!/bin/bash
#
# What test/gpu/run_tnic_gpu.sh needs on a GPU machine without this build
# host, in one folder (binaries built here run there): rc_gdr's test
# programs and module built against 1.16.0 (Ubuntu's stock UCX) and against
# the CUDA build of 1.22.0, each with its stand-in NIC (test/tnic), and that
# CUDA-built UCX with its ucx_perftest. Debug sections are stripped.
#
# Usage: contrib/tnic-gpu-bundle.sh DIR   (after contrib/build.sh --ucx 1.16.0
#        and --ucx 1.22.0 --cuda, and `make check TESTS=` in both)
# Then, there: test/gpu/run_tnic_gpu.sh -b DIR/build-1.16.0 \
#                  -c DIR/build-1.22.0-cuda -l DIR/ucx-1.22.0-cuda/lib
#
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:?usage: $0 DIR}
case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac
FILES="test/gtest/uct/gtest_rc_gdr_uct test/gtest/tnic/gtest_tnic
       test/tnic/lib/libibverbs.so.1 test/tnic/lib/libmlx5.so.1
       src/tools/rc_gdr_info test/mpi/mpi_verify
       src/uct/ib_gdr/.libs/libuct_ib_gdr.so src/uct/ib_gdr/.libs/libuct_rcgdr.so.0"
rm -rf "$DIR"
for b in build-1.16.0 build-1.22.0-cuda; do
    for f in $FILES; do
        [ -e "$b/$f" ] || continue
        mkdir -p "$DIR/$b/$(dirname "$f")"
        cp -L "$b/$f" "$DIR/$b/$f"
        strip --strip-debug "$DIR/$b/$f"
    done
done
ucx=$(contrib/ucx-upstream.sh --cuda --print-dir 1.22.0)/install
mkdir -p "$DIR/ucx-1.22.0-cuda"
cp -a "$ucx/lib" "$ucx/bin" "$DIR/ucx-1.22.0-cuda/"
rm -rf "$DIR/ucx-1.22.0-cuda/lib"/{cmake,pkgconfig} \
       "$DIR/ucx-1.22.0-cuda/lib"/*.la "$DIR/ucx-1.22.0-cuda/lib/ucx"/*.la
cudart=$(ldd "$ucx/lib/ucx/libucm_cuda.so.0" | awk '/libcudart/ {print $3}')
[ -z "$cudart" ] || cp -L "$cudart" "$DIR/ucx-1.22.0-cuda/lib/"
du -sh "$DIR"
