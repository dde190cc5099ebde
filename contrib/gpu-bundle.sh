#!/bin/bash
#
# What a GPU machine without this project's build host needs, in one folder
# (binaries built here run there): the test programs of the 1.16.0 build
# (the GPU machine's stock UCX is 1.16.0), the modules of 1.13.1 and 1.22.0
# for the cross-release refusals, and the CUDA-built UCX 1.22.0 with
# rc_gdr's build against it. Object files are left out and binaries
# stripped of debug sections, so the folder fits what a run may carry.
#
# Usage: contrib/gpu-bundle.sh [DIR]  (absolute, or from the current directory;
#                                     default: build-gpu in the repository,
#                                     ignored by git)
# Then, on the GPU machine, from the repository root:
#   ln -sfn DIR/build-1.16.0 build-1.16.0
#   ln -sfn DIR/build-1.22.0-cuda build-1.22.0-cuda
#   test/gpu/run_stock_ucx.sh DIR/stock
#   test/gpu/run_ucm_test.sh -b build-1.22.0-cuda -l DIR/ucx-1.22.0-cuda/lib
#   test/gpu/run_gpu_tests.sh -b build-1.22.0-cuda -l DIR/ucx-1.22.0-cuda/lib
# (the builds' own paths are compiled into their tests: the links keep them)
#
set -euo pipefail
# DIR as the caller means it: absolute, or relative to the caller's
# directory; the default is in the repository
case "${1:-}" in
"") DIR=$(cd "$(dirname "$0")/.." && pwd)/build-gpu ;;
/*) DIR=$1 ;;
*)  DIR=$PWD/$1 ;;
esac
cd "$(dirname "$0")/.."

for b in build build-1.16.0 build-1.22.0 build-1.22.0-cuda; do
    [ -f "$b/src/uct/ib_gdr/.libs/libuct_ib_gdr.so" ] || {
        echo "gpu-bundle: $b is not built (contrib/build.sh, README.md)" >&2
        exit 1
    }
    make -C "$b" -s check TESTS= > /dev/null
done
for b in build-1.16.0 build-1.22.0-cuda; do
    make -C "$b" -s contrib/tools/uct_components src/tools/rc_gdr_info \
        test/gtest/ucm/gtest_rc_gdr_ucm contrib/bench/rcache_bench \
        contrib/bench/stage_bench > /dev/null
done

rm -rf "$DIR"
mkdir -p "$DIR/stock"/{b113,b116,b122}
for b in build-1.16.0 build-1.22.0-cuda; do
    (cd "$b" && find . -type f ! -name '*.o' ! -name '*.lo' ! -name '*.a' \
         ! -name '*.la' ! -name '*.log' ! -name '*.trs' ! -path '*/.deps/*' |
     cpio -pdm --quiet "$DIR/$b")
done
find "$DIR" -type f -perm -u+x -exec sh -c \
    'case $(file -b "$1") in ELF*) strip --strip-debug "$1";; esac' _ {} \;

mod=src/uct/ib_gdr/.libs/libuct_ib_gdr.so
cp "build/$mod" "$DIR/stock/b113/"
cp "build-1.22.0/$mod" "$DIR/stock/b122/"
cp "$DIR/build-1.16.0/$mod" "$DIR/build-1.16.0/contrib/tools/uct_components" \
   "$DIR/build-1.16.0/src/tools/rc_gdr_info" \
   "$DIR/build-1.16.0/test/gtest/gtest_rc_gdr" \
   "$DIR/build-1.16.0/test/mpi/mpi_verify" "$DIR/stock/b116/"

# The CUDA-built UCX, with the CUDA runtime its modules link to
ucx=$(contrib/ucx-upstream.sh --cuda --print-dir 1.22.0)/install/lib
mkdir -p "$DIR/ucx-1.22.0-cuda"
cp -a "$ucx" "$DIR/ucx-1.22.0-cuda/lib"
rm -rf "$DIR/ucx-1.22.0-cuda/lib"/{cmake,pkgconfig} "$DIR/ucx-1.22.0-cuda/lib"/*.la \
       "$DIR/ucx-1.22.0-cuda/lib/ucx"/*.la
cudart=$(ldd "$ucx/ucx/libucm_cuda.so.0" | awk '/libcudart/ {print $3}')
[ -z "$cudart" ] || cp -L "$cudart" "$DIR/ucx-1.22.0-cuda/lib/"

du -sh "$DIR"
