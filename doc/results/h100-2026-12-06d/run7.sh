#!/bin/bash
# Device run 7: bench-rc on the stand-in NIC with the 2-core host's long
# settings (41 rounds, -n 100000/6000/500000), pinned, one bench-rc per case
cd "$(dirname "$0")/.."
mkdir -p /dev/infiniband
U=$PWD/gpu-run/ucx-1.22.0-cuda
printf '%s\n' RC_GDR_UCX_VERSION=1.22.0 RC_GDR_UCX_LIBDIR=$U/lib \
    RC_GDR_UCX_BINDIR=$U/bin RC_GDR_UCX_GLUE=v122 RC_GDR_UCX_LOADER=plugin-path \
    > gpu-run/build-1.22.0-cuda/ucx.env
nproc; lscpu | grep -E 'Model name|^CPU\(s\)|NUMA|Thread|Core'; lscpu -e | head -20; uptime
for c in ${CASES:-put64k put1m get64k get1m}; do
    s=$(date +%s); t=T_$c
    RC_GDR_BUILD=gpu-run/build-1.22.0-cuda timeout ${!t:-${T:-200}} contrib/bench-rc.sh --tnic ${PIN:-} \
        --runs ${RUNS:-41} --cases $c --iters put64k=100000 --iters put1m=6000 \
        --iters get64k=100000 --iters get1m=6000 --iters amlat=500000 \
        --iters putlat=500000 --iters getbw64k=100000 --iters getbw1m=6000 > $OUT/bench-$c.txt 2>&1
    echo "== $c rc=$? $(( $(date +%s) - s )) s"
    tail -8 $OUT/bench-$c.txt
done
