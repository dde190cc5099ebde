#!/bin/bash
#
# Tier 3 on the stand-in NIC: rc_gdr moves real GPU memory on a GPU machine
# that has no RDMA NIC. The NIC is the project's user-space stand-in
# (test/tnic, a replacement libibverbs.so.1); it reaches GPU memory only
# through the CUDA driver (peermem: ibv_reg_mr on the device pointer;
# DMA-BUF: the fd cuMemGetHandleForAddressRange exported), so every byte
# below crossed the CUDA driver, never a NIC's DMA engine: NIC DMA into GPU
# memory is what contrib/site/validate-site.sh checks at a site.
#
# Usage: test/gpu/run_tnic_gpu.sh -b BUILD [-c CUDA_BUILD -l CUDA_UCX_LIB]
#                                  [-s SECTIONS]
#   -b BUILD       rc_gdr built against the UCX this machine runs (here:
#                  build-1.16.0 for Ubuntu's stock 1.16.0), with `make check`
#   -c CUDA_BUILD  rc_gdr built against a CUDA build of UCX (build-1.22.0-cuda)
#   -l LIB         that UCX's libraries (ucx_perftest with -m cuda)
#   -s SECTIONS    only these, comma-separated: chain, tnic, uct, mpi,
#                  perftest (all; a machine's time may not hold them all)
# Prints PASS/FAIL/SKIP lines, each saying STAND-IN NIC and REAL GPU, and
# "N passed, N failed, N skipped"; exits non-zero when a check fails.
#
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
B=""; CB=""; CLIB=""; SECTIONS=chain,tnic,uct,mpi,perftest
while getopts b:c:l:s: opt; do
    case $opt in
    b) B=$OPTARG ;; c) CB=$OPTARG ;; l) CLIB=$OPTARG ;; s) SECTIONS=$OPTARG ;;
    *) sed -n '2,20p' "$0"; exit 2 ;;
    esac
done
[ -n "$B" ] || { sed -n '2,20p' "$0"; exit 2; }
B=$(cd "$B" && pwd)
# RC_GDR_GPU_LOG: keep every check's log there (else a temporary folder)
LOG=${RC_GDR_GPU_LOG:-$(mktemp -d /tmp/rc_gdr_tnic_gpu.XXXXXX)}
mkdir -p "$LOG"
PASSED=0; FAILED=0; SKIPPED=0
TAG="(STAND-IN NIC, REAL GPU)"
export RC_GDR_TNIC_FABRIC=gpu$$
trap 'rm -f /dev/shm/rc_gdr_tnic.gpu$$.*' EXIT

check() { # name cmd...
    local name=$1; shift
    if "$@" > "$LOG/$name.log" 2>&1; then
        echo "PASS $name $TAG"; PASSED=$((PASSED + 1))
    else
        echo "FAIL $name $TAG"; FAILED=$((FAILED + 1))
        sed 's/^/    | /' "$LOG/$name.log" | tail -30
    fi
}

skip() { echo "SKIP $1: $2"; SKIPPED=$((SKIPPED + 1)); }

# section NAME: whether -s asked for it (else one SKIP line says so)
section() {
    [[ ,$SECTIONS, == *,$1,* ]] && return 0
    skip "$1" "not asked for (-s $SECTIONS)"
    return 1
}

# gtest_suite NAME BINARY FILTER [VAR=VALUE...]: one result per gtest test
gtest_suite() {
    local name=$1 bin=$2 filter=$3 t; shift 3
    env "$@" timeout 600 "$bin" --gtest_color=no --gtest_filter="$filter" \
        > "$LOG/$name.log" 2>&1
    while read -r t; do
        echo "PASS $name:$t $TAG"; PASSED=$((PASSED + 1))
    done < <(sed -n 's/^\[       OK \] \([^ ]*\) (.*/\1/p' "$LOG/$name.log")
    while read -r t; do
        echo "SKIP $name:$t"; SKIPPED=$((SKIPPED + 1))
    done < <(sed -n 's/^\[  SKIPPED \] \([^ ]*\) (.*/\1/p' "$LOG/$name.log")
    while read -r t; do
        echo "FAIL $name:$t $TAG"; FAILED=$((FAILED + 1))
        sed -n "/^\[ RUN      \] $t\$/,/^\[  FAILED  \] $t (/p" \
            "$LOG/$name.log" | tail -25 | sed 's/^/    | /'
    done < <(sed -n 's/^\[  FAILED  \] \([^ ]*\) (.*/\1/p' "$LOG/$name.log")
    grep -q '^\[  PASSED  \]\|^\[  FAILED  \]' "$LOG/$name.log" || {
        echo "FAIL $name: the suite did not finish $TAG"; FAILED=$((FAILED + 1))
        tail -20 "$LOG/$name.log" | sed 's/^/    | /'
    }
}

echo "== machine"
grep PRETTY_NAME /etc/os-release
nvidia-smi -L || { skip all "no NVIDIA GPU here"; echo "0 passed, 0 failed, 1 skipped"; exit 0; }
mkdir -p /dev/infiniband   # UCX lists a verbs device only with this folder

# The stand-in NIC has no PCI function; give it one in sysfs: another PCI
# function under the GPU's own bridge (as a NIC under the GPU's switch),
# else the bridge itself, so that the gate's distance check has a path to
# judge. What that distance is, and the lane it gives, is printed below.
gpu_bdf=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 |
          sed 's/^0000//' | tr 'A-F' 'a-f')
gpu_dev=$(readlink -f "/sys/bus/pci/devices/$gpu_bdf")
bridge=$(dirname "$gpu_dev")
nic_dev=$bridge
for f in "$bridge"/[0-9a-f][0-9a-f][0-9a-f][0-9a-f]:*; do
    [ -e "$f/class" ] && [ "$f" != "$gpu_dev" ] || continue
    nic_dev=$f
    break
done
placed=no
if mount -t tmpfs rc_gdr_ib /sys/class/infiniband 2>/dev/null; then
    for d in tnic0 tnic1; do
        mkdir -p "/sys/class/infiniband/$d"
        ln -s "$nic_dev" "/sys/class/infiniband/$d/device"
    done
    placed=yes
fi
echo "GPU $gpu_bdf below $(basename "$bridge"); stand-in NICs placed at" \
     "$(basename "$nic_dev") in sysfs: $placed"
# The distance that placement gives (PHB on a GPU alone under its root
# port) is accepted here, so that the NIC lane runs at all; the gate's own
# default (PXB) is what the gate suite checks; the output says which ran.
export UCX_RC_GDR_MAX_DISTANCE=${UCX_RC_GDR_MAX_DISTANCE:-SYS}

export LD_LIBRARY_PATH=$B/test/tnic/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
MOD=$B/src/uct/ib_gdr/.libs/libuct_ib_gdr.so

if section chain; then
    echo "== the capability chain, the stand-in NIC on the real GPU"
    for cfg in "" "dmabuf:off" "dmabuf:off,peermem:off"; do
        echo "-- RC_GDR_TNIC_FAULT='$cfg'"
        RC_GDR_TNIC_FAULT=$cfg LD_PRELOAD=$MOD "$B/src/tools/rc_gdr_info" 2>&1 |
            grep -E 'GPU0|tnic0 port|registration.mechanism|topo.distance|uses the' |
            head -12
    done
fi

if section tnic; then
    echo "== the stand-in's own suite on real GPU memory"
    gtest_suite tnic "$B/test/gtest/tnic/gtest_tnic" '*'
fi

UCT=$B/test/gtest/uct/gtest_rc_gdr_uct
if section uct; then
    echo "== rc_gdr's UCT and UCP suites on real GPU memory, per lane"
    gtest_suite uct_host "$UCT" 'data.*:flush.*' \
        LD_PRELOAD="$MOD" RC_GDR_DEV_A=tnic0:1 RC_GDR_DEV_B=tnic1:1
    for lane in dmabuf: peermem:dmabuf:off bounce:dmabuf:off,peermem:off; do
        name=${lane%%:*}; spec=${lane#*:}
        # UCX_MEMTYPE_CACHE=n: this UCX has no CUDA module, so its memory-type
        # cache (read when libucs loads) calls CUDA memory host and UCX's ib md
        # would register it as host pages; without the cache UCP asks the mds
        gtest_suite "uct_gpu_$name" "$UCT" 'gpu.*:memtypes.*' \
            LD_PRELOAD="$MOD" RC_GDR_DEV_A=tnic0:1 RC_GDR_DEV_B=tnic1:1 \
            UCX_MEMTYPE_CACHE=n \
            RC_GDR_TNIC_FAULT="$spec" UCX_LOG_LEVEL=info
        grep -E 'GPU memory registered|registration' "$LOG/uct_gpu_$name.log" |
            sort | uniq -c | head -5
    done
fi

# A UCX without CUDA support (Ubuntu's) has no copy transport for GPU
# memory: its memory-type cache calls CUDA memory host (UCX_MEMTYPE_CACHE=n
# makes UCP ask rc_gdr's md), and an eager message received into GPU memory
# crashes UCP (ucp_mem_type_unpack), so every message takes the rendezvous
# (UCX_RNDV_THRESH=0), which rc_gdr's zero-copy RMA carries.
# mpi_gpu NAME GREP MPIRUN_ARGS...: two ranks of mpi_verify on device
# buffers over rc_gdr (tnic0); passes when it verifies and its log has GREP
mpi_gpu() {
    local name=$1 want=$2; shift 2
    check "$name" bash -c "timeout 90 mpirun \
        --allow-run-as-root --oversubscribe -np 2 \
        --mca pml ucx --mca osc ucx --mca btl ^openib,ofi,uct \
        --mca pml_ucx_tls any --mca pml_ucx_devices any \
        -x RC_GDR_TNIC_FABRIC -x UCX_RC_GDR_MAX_DISTANCE \
        -x UCX_NET_DEVICES=tnic0:1 -x UCX_LOG_LEVEL=info $* \
        '$B/test/mpi/mpi_verify' --gpu > $LOG/$name.log.mpi 2>&1; rc=\$?
        grep -m1 'Version 1' $LOG/$name.log.mpi; tail -5 $LOG/$name.log.mpi
        [ \$rc = 0 ] && grep -q '^verification: PASSED' $LOG/$name.log.mpi &&
            grep -q '$want' $LOG/$name.log.mpi"
}

if ! section mpi; then
    :
elif command -v mpirun > /dev/null && [ -x "$B/test/mpi/mpi_verify" ]; then
    echo "== Open MPI $(mpirun --version 2>/dev/null | head -1 | awk '{print $NF}'), 2 ranks, device buffers, the stock UCX"
    for lane in dmabuf: bounce:dmabuf:off,peermem:off; do
        name=${lane%%:*}; spec=${lane#*:}
        mpi_gpu "mpi_gpu_buffers_$name" "^verification" \
            -x LD_PRELOAD="$MOD" -x LD_LIBRARY_PATH \
            -x RC_GDR_TNIC_FAULT="$spec" -x UCX_TLS=rc_gdr,ud_verbs:aux,self \
            -x UCX_MEMTYPE_CACHE=n -x UCX_RNDV_THRESH=0
    done
    # The same Open MPI over the CUDA-built UCX (its libucp first in the
    # library path): cuda_copy beside rc_gdr, no work-around needed
    if [ -n "$CB" ] && [ -f "$CLIB/libucp.so.0" ]; then
        CBA=$(cd "$CB" && pwd); CLIBA=$(cd "$CLIB" && pwd)
        mpi_gpu mpi_gpu_buffers_ucx_cuda "Version 1.22" \
            -x LD_LIBRARY_PATH=$CBA/test/tnic/lib:$CLIBA \
            -x UCX_PLUGIN_PATH=$CBA/src/uct/ib_gdr/.libs \
            -x UCX_TLS=rc_gdr,ud_verbs:aux,cuda_copy,self
    fi
else
    skip mpi_gpu_buffers "no mpirun or mpi_verify"
fi

if ! section perftest; then
    :
elif [ -n "$CB" ] && [ -x "$CLIB/../bin/ucx_perftest" ]; then
    echo "== ucx_perftest -m cuda, UCX built with CUDA"
    CB=$(cd "$CB" && pwd)
    PT=$CLIB/../bin/ucx_perftest
    # perf NAME ARGS...: server on tnic0, client on tnic1, data on rc_gdr
    perf() {
        local name=$1 port=$((14000 + RANDOM % 1000)); shift
        check "$name" bash -c "
            export LD_LIBRARY_PATH=$CB/test/tnic/lib:$CLIB
            export UCX_PLUGIN_PATH=$CB/src/uct/ib_gdr/.libs
            export UCX_TLS=rc_gdr,ud_verbs:aux,cuda_copy,self UCX_LOG_LEVEL=info
            UCX_NET_DEVICES=tnic0:1 timeout 150 $PT -p $port $* \
                > $LOG/$name.srv 2>&1 & s=\$!
            sleep 3
            UCX_NET_DEVICES=tnic1:1 timeout 120 $PT -p $port localhost $* \
                > $LOG/$name.cli 2>&1; rc=\$?
            wait \$s
            grep -E '^Final:|rc_gdr: tnic.* closed' $LOG/$name.cli
            [ \$rc = 0 ] && grep -q '^Final:' $LOG/$name.cli &&
                grep -Eq 'rc_gdr: tnic[01]:1 closed: [1-9][0-9]* work requests' \
                    $LOG/$name.cli"
    }
    perf perftest_uct_put_bw_cuda -x rc_gdr -d tnic0:1 -m cuda -t put_bw -D zcopy -s 1048576 -n 200
    perf perftest_uct_get_cuda -x rc_gdr -d tnic0:1 -m cuda -t get -D zcopy -s 1048576 -n 200
    perf perftest_ucp_tag_bw_cuda -t tag_bw -m cuda -s 4194304 -n 50
    perf perftest_ucp_put_bw_cuda -t ucp_put_bw -m cuda -s 4194304 -n 50
    perf perftest_ucp_get_cuda -t ucp_get -m cuda -s 4194304 -n 50
else
    skip perftest_cuda "no CUDA build of UCX given (-c, -l)"
fi

echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" = 0 ]
