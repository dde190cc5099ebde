#!/bin/bash
#
# Run rc_gdr's real-GPU tests (gtest suite cuda_gpu.*) against the machine's
# CUDA driver and print what they measured.
#
# Usage: test/gpu/run_gpu_tests.sh [-b BUILDDIR] [-g GTEST_BINARY] [-l LIBDIR]
#                                  [-o OUTDIR] [-f FILTER] [--with-fake]
#   -b BUILDDIR   the configured build tree (default: <repo>/build)
#   -g BINARY     the gtest binary (default: BUILDDIR/test/gtest/gtest_rc_gdr)
#   -l LIBDIR     shared libraries to load first: the UCX (and rdma-core)
#                 the binary was built against, when this machine has none or
#                 another release
#   -o OUTDIR     also write the gtest XML report and the log there
#   -f FILTER     gtest filter (default: cuda_gpu.*)
#   --with-fake   also run the emulated-driver suites (cuda_fake, cuda_absent;
#                 needs BUILDDIR/test/mocks/libcuda.so.1)
#
# Environment: RC_GDR_CUDA_LIBRARY picks the driver (default libcuda.so.1).
#
# On a machine without a GPU or driver the tests skip and say why; the script
# then exits 0. It exits non-zero when a test fails or the binary cannot run.
#

set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
repo_dir=$(cd "$script_dir/../.." && pwd)
build_dir="$repo_dir/build"
gtest_bin=""
lib_dir=""
out_dir=""
filter="cuda_gpu.*"
with_fake=0

while [ $# -gt 0 ]; do
    case "$1" in
    -b) build_dir=$2; shift 2 ;;
    -g) gtest_bin=$2; shift 2 ;;
    -l) lib_dir=$2; shift 2 ;;
    -o) out_dir=$2; shift 2 ;;
    -f) filter=$2; shift 2 ;;
    --with-fake) with_fake=1; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

[ -n "$gtest_bin" ] || gtest_bin="$build_dir/test/gtest/gtest_rc_gdr"
if [ ! -x "$gtest_bin" ]; then
    echo "no gtest binary at $gtest_bin: build with 'make check' first" >&2
    exit 2
fi

. "$repo_dir/contrib/lib/gpu_host.sh"
gpu_host_describe
gpu_host_driver
gpu_host_libs "$gtest_bin" "$lib_dir" || exit 2

tmp_log=$(mktemp)
trap 'rm -f "$tmp_log"' EXIT

gtest_args=(--gtest_color=no)
if [ -n "$out_dir" ]; then
    mkdir -p "$out_dir"
    gtest_args+=("--gtest_output=xml:$out_dir/cuda_gpu.xml")
fi

log "RC_GDR_TEST_CUDA=real $gtest_bin --gtest_filter=$filter"
RC_GDR_TEST_CUDA=real "$gtest_bin" "${gtest_args[@]}" \
    --gtest_filter="$filter" 2>&1 | tee "$tmp_log"
rc=${PIPESTATUS[0]}

if [ $with_fake -eq 1 ]; then
    log "emulated driver: cuda_shim.*:cuda_fake.*:cuda_absent.*"
    # the binary's compiled-in path is the build machine's
    (unset RC_GDR_TEST_CUDA
     fake_lib="$(cd "$build_dir" && pwd)/test/mocks/libcuda.so.1"
     export RC_GDR_TEST_FAKE_CUDA="$fake_lib"
     "$gtest_bin" --gtest_color=no \
         --gtest_filter='cuda_shim.*:cuda_fake.*:cuda_absent.*') 2>&1 |
        tee -a "$tmp_log" | grep -E '^\[ *(OK|FAILED|SKIPPED|PASSED) *\]'
    fake_rc=${PIPESTATUS[0]}
    [ $rc -ne 0 ] || rc=$fake_rc
fi

[ -z "$out_dir" ] || cp "$tmp_log" "$out_dir/cuda_gpu.log"

echo
log "measured:"
grep '^\[ CUDA     \]' "$tmp_log" | sed 's/^\[ CUDA     \] /   /'
echo
log "results:"
grep -E '^\[ *(PASSED|FAILED|SKIPPED) *\] [0-9]+ tests?[,.]' "$tmp_log" |
    sed 's/, listed below:/./; s/^/   /'
grep -E '^\[  FAILED  \] [A-Za-z0-9_]+\.[A-Za-z0-9_]+$' "$tmp_log" |
    sort -u | sed 's/^/   /'
if grep -q '^\[  SKIPPED \] cuda_gpu' "$tmp_log" &&
   ! grep -q '^\[       OK \] cuda_gpu' "$tmp_log"; then
    log "no GPU test ran; the skip reason:"
    grep -m1 -A1 ': Skipped$' "$tmp_log" | tail -1 | sed 's/^/   /'
fi

exit $rc
