# Sourced by the scripts that run on a GPU machine (test/gpu/run_*.sh,
# contrib/bench-stage.sh): what the machine is, and the libraries a binary
# built elsewhere will load there. Every line printed starts with "== ".
#
# log TEXT...
#   One "== TEXT" line.
# gpu_host_describe [NVIDIA_SMI_FIELDS]
#   The host, kernel and OS (with the CPU count), then one line per GPU
#   from nvidia-smi (default fields: index, name, bus id, driver, memory).
# gpu_host_driver
#   The CUDA driver library the tests will open (RC_GDR_CUDA_LIBRARY or
#   libcuda.so.1) and where the loader finds libcuda.so.1.
# gpu_host_libs BINARY [LIBDIR]
#   Puts LIBDIR first in LD_LIBRARY_PATH (the UCX a binary was built against
#   may not be the machine's), lists the UCX and rdma-core libraries BINARY
#   loads, and returns 2 when one is missing.

log() { echo "== $*"; }

gpu_host_describe() {
    local fields=${1:-index,name,pci.bus_id,driver_version,memory.total}

    log "host $(hostname), $(uname -r), $(. /etc/os-release 2>/dev/null;
                                           echo "${PRETTY_NAME:-unknown OS}")," \
        "$(nproc) CPUs"
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu="$fields" --format=csv,noheader 2>&1 |
            sed 's/^/== gpu /'
    else
        log "nvidia-smi not found"
    fi
}

gpu_host_driver() {
    log "driver library: ${RC_GDR_CUDA_LIBRARY:-libcuda.so.1}" \
        "($(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}'))"
}

gpu_host_libs() {
    local bin=$1 dir=${2:-} missing

    if [ -n "$dir" ]; then
        dir=$(cd "$dir" && pwd) || return 2
        export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    ldd "$bin" 2>&1 | awk '/=>/{print "== lib", $1, "->", $3}' |
        grep -E 'libuc[stm]|libibverbs|not'
    missing=$(ldd "$bin" 2>&1 | awk '/not found/{print $1}')
    if [ -n "$missing" ]; then
        echo "missing libraries (pass -l LIBDIR):" $missing >&2
        return 2
    fi
}
