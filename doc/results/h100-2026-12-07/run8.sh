#!/bin/bash
# Device run 8: bench-rc on the stand-in NIC with the 2-core host's long
# settings (41 rounds, -n 100000/6000/500000), pinned, one bench-rc per case,
# within one call's time: BUDGET seconds in all, each case capped at T_<case>
# (default: whatever is left). UCX's CUDA modules are not loaded
# (UCX_MODULES=^cu*): the benchmark moves host memory at the UCT level, and
# it spares each ucx_perftest process their start-up.
cd "$(dirname "$0")/.."
mkdir -p /dev/infiniband
U=$PWD/gpu-run/ucx-1.22.0-cuda
printf '%s\n' RC_GDR_UCX_VERSION=1.22.0 RC_GDR_UCX_LIBDIR=$U/lib \
    RC_GDR_UCX_BINDIR=$U/bin RC_GDR_UCX_GLUE=v122 RC_GDR_UCX_LOADER=plugin-path \
    > gpu-run/build-1.22.0-cuda/ucx.env
export UCX_MODULES='^cu*'
nproc; lscpu | grep -E 'Model name|^CPU\(s\)|NUMA|Thread|Core'; uptime
t0=$(date +%s)
for c in ${CASES:-amlat get1m}; do
    s=$(date +%s); left=$(( ${BUDGET:-585} - (s - t0) )); t=T_$c; lim=${!t:-$left}
    [ "$lim" -le "$left" ] || lim=$left
    [ "$lim" -ge 30 ] || { echo "== $c not run: ${left} s left"; continue; }
    RC_GDR_BUILD=gpu-run/build-1.22.0-cuda timeout $lim contrib/bench-rc.sh --tnic \
        --runs ${RUNS:-41} --cases $c --iters put64k=100000 --iters put1m=6000 \
        --iters get64k=100000 --iters get1m=6000 --iters amlat=500000 \
        --iters putlat=500000 --iters getbw64k=100000 --iters getbw1m=6000 > $OUT/bench-$c.txt 2>&1
    echo "== $c rc=$? $(( $(date +%s) - s )) s (limit $lim s), rounds: $(grep -c "round .* rc_gdr:" $OUT/bench-$c.txt)"
    tail -4 $OUT/bench-$c.txt
done
