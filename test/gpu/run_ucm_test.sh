#!/bin/bash
#
# Run rc_gdr's CUDA free-event test (test/apps/ucm_free_test) against the
# machine's CUDA driver: every way of releasing CUDA memory must reach the
# subscribers, with its whole range, before the memory is gone.
#
# Usage: test/gpu/run_ucm_test.sh [-b BUILDDIR] [-l LIBDIR] [-o OUTDIR]
#                                 [--with-fake]
#   -b BUILDDIR   the configured build tree (default: <repo>/build)
#   -l LIBDIR     shared libraries to load first: the UCX (and rdma-core) the
#                 test was built against when this machine has none or
#                 another release, and libcudart.so.* for the runtime-API
#                 cases (cudaFree, cudaFreeAsync, cudaFreeHost), which are
#                 skipped when no libcudart can be opened
#   -o OUTDIR     also write the output there
#   --with-fake   also run against the stand-in driver
#                 (BUILDDIR/test/mocks/libcuda.so.1)
#
# Runs ucm_free_test -v (mode hooks: the driver's entry points are patched;
# -v prints the code they begin with), then ucm_free_test --ucm-forward
# (mode ucm: a UCM_EVENT_MEM_TYPE_FREE is forwarded).
#
# Environment: RC_GDR_CUDA_LIBRARY picks the driver (default libcuda.so.1).
#
# Without a GPU or driver the test says SKIP and the script exits 0. It exits
# non-zero when a check fails or the test cannot run.
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
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

build_dir=$(cd "$build_dir" && pwd)
test_bin="$build_dir/test/apps/ucm_free_test"
if [ ! -x "$test_bin" ]; then
    echo "no test program at $test_bin: build it with" \
         "'make test/apps/ucm_free_test' first" >&2
    exit 2
fi

log() { echo "== $*"; }

log "host $(hostname), $(uname -r), $(. /etc/os-release 2>/dev/null;
                                       echo "${PRETTY_NAME:-unknown OS}")"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version \
               --format=csv,noheader 2>&1 | sed 's/^/== gpu /'
else
    log "nvidia-smi not found"
fi
log "driver library: ${RC_GDR_CUDA_LIBRARY:-libcuda.so.1}" \
    "($(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}'))"

if [ -n "$lib_dir" ]; then
    lib_dir=$(cd "$lib_dir" && pwd)
    export LD_LIBRARY_PATH="$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
ldd "$test_bin" 2>&1 | awk '/=>/{print "== lib", $1, "->", $3}' |
    grep -E 'libuc[stm]|libibverbs|not'
missing=$(ldd "$test_bin" 2>&1 | awk '/not found/{print $1}')
if [ -n "$missing" ]; then
    echo "missing libraries (pass -l LIBDIR):" $missing >&2
    exit 2
fi

tmp_log=$(mktemp)
trap 'rm -f "$tmp_log"' EXIT
rc=0

# run TITLE ARGS...: one invocation, its output kept for the summary
run() {
    local title=$1 ret
    shift
    log "$title: $*"
    timeout 300 "$@" 2>&1 | sed "s|^|[$title] |" | tee -a "$tmp_log"
    ret=${PIPESTATUS[0]}
    if [ $ret -ne 0 ]; then
        log "$title: exit status $ret"
        rc=1
    fi
}

run hooks "$test_bin" -v
run ucm-forward "$test_bin" --ucm-forward

if [ $with_fake -eq 1 ]; then
    fake_lib="$build_dir/test/mocks/libcuda.so.1"
    if [ -f "$fake_lib" ]; then
        RC_GDR_CUDA_LIBRARY="$fake_lib" run fake-hooks "$test_bin"
        RC_GDR_CUDA_LIBRARY="$fake_lib" run fake-ucm-forward "$test_bin" \
            --ucm-forward
    else
        log "no stand-in driver at $fake_lib: 'make check' builds it"
        rc=1
    fi
fi

if [ -n "$out_dir" ]; then
    mkdir -p "$out_dir" && cp "$tmp_log" "$out_dir/ucm.log"
fi

echo
log "results:"
grep -E '^\[[a-z-]+\] ([0-9]+ passed, [0-9]+ failed|SKIP ucm_free_test)' \
    "$tmp_log" | sed 's/^/   /'
grep -E '^\[[a-z-]+\] FAIL ' "$tmp_log" | sed 's/^/   /'

exit $rc
