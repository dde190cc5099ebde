#!/bin/bash
#
# bench-stage.sh: bandwidth of rc_gdr's bounce-lane staging engine against
# plain pinned CUDA copies, on a GPU machine (no NIC needed), with
# contrib/bench/stage_bench. The engine's wire is a LOOPBACK STAND-IN (no-op, a
# host thread doing memcpy, or one completing chunks at a line rate): the
# numbers measure the copy pipeline and its overlap with a wire, not an RDMA
# NIC. The target: engine/pinned >= 0.95 at >= 4 MiB with the no-op wire.
#
# Usage: contrib/bench-stage.sh [-b BUILDDIR] [-l LIBDIR] [-o OUTDIR]
#                               [--emulated] [-- STAGE_BENCH_ARGS...]
#   -b BUILDDIR   the configured build tree (default: <repo>/build); the
#                 benchmark is built there with 'make contrib/bench/stage_bench'
#                 when missing
#   -l LIBDIR     shared libraries to load first: the UCX (libucs, libucm)
#                 the binary was built against, when this machine has none or
#                 another release
#   -o OUTDIR     also keep the whole output there (stage_bench.log)
#   --emulated    run against the test emulation of the driver
#                 (BUILDDIR/test/mocks/libcuda.so.1): output labelled
#                 EMULATED, memcpy speeds, for checking the harness only
#   after --       passed to stage_bench (see its -h: -c BUFFER -d DEPTH -N
#                 no sweep, -q quick, -w/-m GBPS paced wire rates, -P raw
#                 copy probe without the engine, ...)
#
# Environment: RC_GDR_CUDA_LIBRARY picks the driver (default libcuda.so.1).
#
# Exit status: that of stage_bench: 0 measured, or no GPU here (it says so);
# 1 a transfer failed or data differed; 2 usage or setup error.
#

set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
repo_dir=$(cd "$script_dir/.." && pwd)
build_dir="$repo_dir/build"
lib_dir=""
out_dir=""
emulated=0
bench_args=()

while [ $# -gt 0 ]; do
    case "$1" in
    -b) build_dir=$2; shift 2 ;;
    -l) lib_dir=$2; shift 2 ;;
    -o) out_dir=$2; shift 2 ;;
    --emulated) emulated=1; shift ;;
    --) shift; bench_args=("$@"); break ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "bench-stage: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

bench="$build_dir/contrib/bench/stage_bench"
if [ ! -x "$bench" ]; then
    if [ -f "$build_dir/Makefile" ]; then
        make -C "$build_dir" contrib/bench/stage_bench >/dev/null || exit 2
    fi
fi
if [ ! -x "$bench" ]; then
    echo "bench-stage: no benchmark at $bench: build it with" \
         "'make -C BUILDDIR contrib/bench/stage_bench'" >&2
    exit 2
fi

. "$repo_dir/contrib/lib/gpu_host.sh"
gpu_host_describe \
    index,name,pci.bus_id,driver_version,pcie.link.gen.current,pcie.link.width.current
gpu_host_libs "$bench" "$lib_dir" || exit 2

if [ $emulated -eq 1 ]; then
    fake="$(cd "$build_dir" && pwd)/test/mocks/libcuda.so.1"
    [ -f "$fake" ] || make -C "$build_dir" test/mocks/libcuda.so.1 \
                          >/dev/null || exit 2
    bench_args=("--emulated=$fake" "${bench_args[@]}")
    log "EMULATED driver $fake: numbers are memcpy speeds, not a GPU's"
else
    gpu_host_driver
fi

tmp_log=$(mktemp)
trap 'rm -f "$tmp_log"' EXIT

log "$bench ${bench_args[*]}"
"$bench" "${bench_args[@]}" 2>&1 | tee "$tmp_log"
rc=${PIPESTATUS[0]}

if [ -n "$out_dir" ]; then
    mkdir -p "$out_dir" && cp "$tmp_log" "$out_dir/stage_bench.log"
fi

echo
log "summary (wire = loopback stand-in, no NIC):"
grep -E 'PICKED|CHOSEN|VERIFY|STREAMS|no usable CUDA' "$tmp_log" |
    sed 's/^# */   /'
below=$(grep -c '< 0.95 target' "$tmp_log")
if grep -q '^# .*D2H  GPU' "$tmp_log"; then
    log "engine/pinned below 0.95 at >= 4 MiB (no-op wire): $below row(s)"
fi
log "exit status $rc"
exit $rc
