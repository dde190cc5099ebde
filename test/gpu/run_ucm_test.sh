#!/bin/bash
#
# Run rc_gdr's CUDA free-event suites (test/gtest/ucm/gtest_rc_gdr_ucm)
# against the machine's CUDA driver: every way of releasing CUDA memory must
# reach the subscribers, with its whole range, before the memory is gone.
#
# Usage: test/gpu/run_ucm_test.sh [-b BUILDDIR] [-l LIBDIR] [-o OUTDIR]
#                                 [--with-fake]
#   -b BUILDDIR   the configured build tree (default: <repo>/build)
#   -l LIBDIR     shared libraries to load first: the UCX (and rdma-core) the
#                 test was built against when this machine has none or
#                 another release, and libcudart.so.* for the runtime-API
#                 tests (ucm_cudart.*: cudaFree, cudaFreeAsync, cudaFreeHost),
#                 which skip when no libcudart can be opened
#   -o OUTDIR     also write the output (ucm.log) and each run's gtest XML
#                 report (ucm-RUN.xml) there
#   --with-fake   also run against the stand-in driver
#                 (BUILDDIR/test/mocks/libcuda.so.1)
#
# The binary runs twice per driver, because the mode is chosen once per
# process, at install: "hooks" runs every suite but ucm_forward, with -v
# (mode hooks, or ucm in a CUDA-built UCX: the driver's entry points are
# patched; -v prints the code they begin with); "ucm-forward" runs
# ucm_install.* and ucm_forward.* with --ucm-forward (RC_GDR_UCM_CUDA_MODE=ucm:
# a UCM_EVENT_MEM_TYPE_FREE is forwarded). The results end with gtest's
# summary of each run.
#
# Environment: RC_GDR_CUDA_LIBRARY picks the driver (default libcuda.so.1).
#
# Without a GPU or driver every test skips and says why; the script then
# exits 0. It exits non-zero when a test fails or the binary cannot run.
#

set -u

script_dir=$(cd "$(dirname "$0")" && pwd)
repo_dir=$(cd "$script_dir/../.." && pwd)
build_dir="$repo_dir/build"
lib_dir=""
out_dir=""
with_fake=0

while [ $# -gt 0 ]; do
    case "$1" in
    -b) build_dir=$2; shift 2 ;;
    -l) lib_dir=$2; shift 2 ;;
    -o) out_dir=$2; shift 2 ;;
    --with-fake) with_fake=1; shift ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

build_dir=$(cd "$build_dir" && pwd)
test_bin="$build_dir/test/gtest/ucm/gtest_rc_gdr_ucm"
if [ ! -x "$test_bin" ]; then
    echo "no gtest binary at $test_bin: build it with" \
         "'make test/gtest/ucm/gtest_rc_gdr_ucm' first" >&2
    exit 2
fi

. "$repo_dir/contrib/lib/gpu_host.sh"
gpu_host_describe index,name,pci.bus_id,driver_version
gpu_host_driver
gpu_host_libs "$test_bin" "$lib_dir" || exit 2

if [ -n "$out_dir" ]; then
    mkdir -p "$out_dir" && out_dir=$(cd "$out_dir" && pwd)
fi

tmp_log=$(mktemp)
trap 'rm -f "$tmp_log"' EXIT
rc=0
titles=()

hooks_filter='-ucm_forward.*'
forward_filter='ucm_install.*:ucm_forward.*'

# run TITLE ARGS...: one run of the binary, its output kept for the summary
run() {
    local title=$1 ret
    shift
    titles+=("$title")
    log "$title: $*"
    timeout 300 "$@" ${out_dir:+--gtest_output=xml:$out_dir/ucm-$title.xml} \
        2>&1 | sed "s|^|[$title] |" | tee -a "$tmp_log"
    ret=${PIPESTATUS[0]}
    if [ $ret -ne 0 ]; then
        log "$title: exit status $ret"
        rc=1
    fi
}

run hooks "$test_bin" -v --gtest_filter="$hooks_filter"
run ucm-forward "$test_bin" --ucm-forward --gtest_filter="$forward_filter"

if [ $with_fake -eq 1 ]; then
    fake_lib="$build_dir/test/mocks/libcuda.so.1"
    if [ -f "$fake_lib" ]; then
        RC_GDR_CUDA_LIBRARY="$fake_lib" run fake-hooks "$test_bin" \
            --gtest_filter="$hooks_filter"
        RC_GDR_CUDA_LIBRARY="$fake_lib" run fake-ucm-forward "$test_bin" \
            --ucm-forward --gtest_filter="$forward_filter"
    else
        log "no stand-in driver at $fake_lib: 'make check' builds it"
        rc=1
    fi
fi

if [ -n "$out_dir" ]; then
    cp "$tmp_log" "$out_dir/ucm.log"
fi

# gtest's summary of each run: from "[==========] N tests ... ran" to the end
echo
log "results:"
for title in "${titles[@]}"; do
    summary=$(grep -F "[$title] " "$tmp_log" |
              sed -n '/^\[[a-z-]*\] \[==========\] .* ran\./,$p')
    if [ -z "$summary" ]; then
        echo "   [$title] no gtest summary: the binary did not finish"
        rc=1
    else
        echo "$summary" | sed 's/^/   /'
    fi
done

exit $rc
