#!/bin/bash
#
# Inside `contrib/rxe-vm.sh --pcie-pairs 2`: a guest whose PCIe tree has two
# host bridges on two NUMA nodes, each with a virtio-net NIC carrying rxe<i>
# and an emulated PCI function standing for GPU<i> (the stand-in CUDA
# driver reports its address). Shows what UCP is given: each rc_gdr device's
# system device (ucx_info -d, beside rc_verbs'), the GPU x NIC matrix with
# each GPU's nearest NIC, and what UCP does with it: a GPU's rendezvous
# favours its own NIC; pinned by `rc_gdr_info --nearest-nics`, each MPI
# rank's rendezvous runs on its own GPU's NIC alone. Prints PASS/FAIL lines;
# exits non-zero on a failure.
#
set -uo pipefail

cd "$(dirname "$0")/../.." || exit 2
. contrib/env.sh "${RC_GDR_BUILD:-build}" > /dev/null || exit 2
B=$RC_GDR_BUILD
PASSED=0
FAILED=0

check() {
    local name=$1; shift
    if "$@"; then
        echo "PASS $name"; PASSED=$((PASSED + 1))
    else
        echo "FAIL $name"; FAILED=$((FAILED + 1))
    fi
}

[ -f /etc/rxevm-pcie-pairs ] || {
    echo "SKIP: not a --pcie-pairs guest"; echo "0 passed, 0 failed, 1 skipped"
    exit 0
}
cat /etc/rxevm-pcie-pairs
. /etc/rxevm-gpus.env
# A NIC and a GPU on two root ports of one host bridge are PHB apart (this
# tree has no switch below the root ports); the gate's default (PXB) would
# bounce the near pair too. The far pair is SYS: it bounces.
export UCX_RC_GDR_MAX_DISTANCE=PHB

# The System device line of a transport's device in ucx_info -d
sys_dev_of() {
    ucx_info -d | grep -A3 "Transport: $1\$" | grep -A2 "Device: $2\$" |
        grep 'System device' | head -1
}

devices_known() {
    local i ours theirs prev=
    for i in 0 1; do
        ours=$(sys_dev_of rc_gdr "rxe$i:1")
        theirs=$(sys_dev_of rc_verbs "rxe$i:1")
        echo "rc_gdr   rxe$i:1 $ours"
        echo "rc_verbs rxe$i:1 $theirs"
        [[ $ours =~ \(([0-9]+)\) ]] || return 1
        [ "${BASH_REMATCH[1]}" != "$prev" ] || return 1
        prev=${BASH_REMATCH[1]}
    done
}

two_nodes() {
    [ "$(awk '{print $7}' /etc/rxevm-pcie-pairs | sort -u | wc -l)" = 2 ]
}

# GPU<i>'s nearest NIC is rxe<i> (PHB: one host bridge), the other one is
# across NUMA nodes (SYS)
matrix_nearest() {
    local out
    out=$( ( . contrib/env.sh --emulated-gpu "$B" > /dev/null &&
             rc_gdr_info 2> /dev/null ) | sed -n '/^GPU x NIC:/,/^$/p')
    echo "$out"
    echo "$out" | grep -E '^GPU0 +PHB\* peermem/peermem +SYS bounce/bounce$' > /dev/null &&
        echo "$out" | grep -E '^GPU1 +SYS bounce/bounce +PHB\* peermem/peermem$' > /dev/null
}

# --nearest-nics prints distances alone, which no registration changes: it
# retains no GPU context and allocates no GPU memory (a launcher calls it
# once per rank; on a real GPU a context costs hundreds of MiB), where the
# whole matrix proves each pair's registration with a buffer of the GPU.
# The stand-in driver logs what it is asked (RC_GDR_FAKE_CUDA_LOG).
nearest_nics_spends_no_gpu_memory() {
    local log=/tmp/pcie_pairs_cuda.log nics
    rm -f "$log"
    nics=$( ( . contrib/env.sh --emulated-gpu "$B" > /dev/null &&
              RC_GDR_FAKE_CUDA_LOG=$log rc_gdr_info --nearest-nics 0 ) )
    echo "--nearest-nics 0: '$nics'; the driver was asked $(cat "$log" 2> /dev/null | wc -l) times"
    [ -n "$nics" ] && [ ! -s "$log" ] || return 1
    ( . contrib/env.sh --emulated-gpu "$B" > /dev/null &&
      RC_GDR_FAKE_CUDA_LOG=$log rc_gdr_info > /dev/null 2>&1 )
    echo "the whole matrix: the driver was asked $(wc -l < "$log") times, e.g. $(head -1 "$log")"
    grep -q '^alloc ' "$log" && grep -q '^primary_ctx_retain ' "$log"
}

# UCP's own choice, per GPU: two ranks, rank r on GPU r, both NICs in each;
# UCP's rendezvous splits a GPU's data over the two lanes weighted by the
# distance-adjusted bandwidth of each (UCX_PROTO_INFO shows the shares):
# the GPU's own NIC takes the larger share. 1.13: protocols v2 on, and the
# memory type from the md's query (no UCM CUDA events to fill UCP's cache).
# The tables are read from each rank's own output file: in mpirun's merged
# output the two ranks' tables interleave, line by line (CI saw GPU0's rows
# lost among GPU1's).
lane_share() { # DIR GPU NIC: the percentage rendezvous into GPU puts on NIC
    cat "$1"/1/rank.*/stdout | grep -A4 "rendezvous data fetch() into cuda/$2 " |
        grep -oE "[0-9]+% on rc_gdr/$3:1" | head -1 | cut -d% -f1
}

ucp_lane_per_gpu() {
    local log=/tmp/pcie_pairs_mpi.out dir=/tmp/pcie_pairs_mpi.ranks
    local g0r0 g0r1 g1r0 g1r1
    rm -rf "$dir"
    ( . contrib/env.sh --emulated-gpu "$B" > /dev/null &&
      timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 \
        --output-filename "$dir" \
        --mca pml ucx --mca btl ^openib,ofi,uct --mca osc ucx \
        -x UCX_TLS=rc_gdr,ud_verbs:aux,self -x UCX_PROTO_ENABLE=y \
        -x UCX_PROTO_INFO=y -x UCX_MAX_RNDV_RAILS=2 -x UCX_RNDV_THRESH=0 \
        -x UCX_MEMTYPE_CACHE=n -x RC_GDR_CUDA_LIBRARY \
        -x RC_GDR_FAKE_CUDA_DEVICES -x RC_GDR_FAKE_CUDA_PCI_BUS_ID \
        -x MPI_VERIFY_GPU_PER_RANK=2 -x MPI_VERIFY_NIC_BYTES=rxe0:1,rxe1:1 \
        "$B/test/mpi/mpi_verify" --gpu 65536 1048576 ) > "$log" 2>&1 ||
        { tail -20 "$log"; return 1; }
    cat "$dir"/1/rank.*/stdout |
        grep -A4 'rendezvous data fetch() into cuda/GPU' | grep -v '^--' |
        sed 's/^\[[^]]*\] \[[^]]*\] *//'
    g0r0=$(lane_share "$dir" GPU0 rxe0); g0r1=$(lane_share "$dir" GPU0 rxe1)
    g1r0=$(lane_share "$dir" GPU1 rxe0); g1r1=$(lane_share "$dir" GPU1 rxe1)
    grep -E '^(ok|BAD|verification|rank [01] GPU)' "$log"
    echo "GPU0: rxe0 ${g0r0:-?}%, rxe1 ${g0r1:-?}%; GPU1: rxe0 ${g1r0:-?}%, rxe1 ${g1r1:-?}%"
    grep -q '^verification: PASSED' "$log" &&
        [ "${g0r0:-0}" -gt "${g0r1:-100}" ] && [ "${g1r1:-0}" -gt "${g1r0:-100}" ]
}

# Each rank on its own GPU's NICs: UCP 1.13 picks an endpoint's rendezvous
# rails when it connects, not per buffer (with one rail both ranks took
# rxe0), so a node like this pins each rank, as a launcher does on such
# nodes: UCX_NET_DEVICES from `rc_gdr_info --nearest-nics` of the rank's GPU
# (README, multi-GPU nodes). Counted by rc_gdr's interfaces in each rank
# (mpi_verify's MPI_VERIFY_NIC_BYTES): the rank's rendezvous (the receiver
# fetches into its GPU) all on its own NIC, none staged (the GDR lane).
nic_bytes() { # LOG RANK NIC: "ZCOPY STAGED" of RANK's rc_gdr on NIC
    sed -n "s/^rank $2 GPU$2 point-to-point:.* $3:1 \([0-9]*\) B (\([0-9]*\) staged).*/\1 \2/p" "$1"
}

mpi_ranks_each_own_nic() {
    local log=/tmp/pcie_pairs_mpi_pinned.out own far r
    ( . contrib/env.sh --emulated-gpu "$B" > /dev/null &&
      timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 \
        --mca pml ucx --mca btl ^openib,ofi,uct --mca osc ucx \
        --mca pml_ucx_tls any --mca pml_ucx_devices any \
        -x UCX_TLS=rc_gdr,ud_verbs:aux,self -x UCX_RNDV_THRESH=0 \
        -x UCX_MEMTYPE_CACHE=n -x UCX_RC_GDR_MAX_DISTANCE \
        -x RC_GDR_CUDA_LIBRARY -x RC_GDR_FAKE_CUDA_DEVICES \
        -x RC_GDR_FAKE_CUDA_PCI_BUS_ID -x RC_GDR_FAKE_CUDA_PLACED \
        -x MPI_VERIFY_GPU_PER_RANK=2 -x MPI_VERIFY_NIC_BYTES=rxe0:1,rxe1:1 \
        bash -c 'nics=$("$0"/src/tools/rc_gdr_info --nearest-nics \
                       "$OMPI_COMM_WORLD_LOCAL_RANK") || exit 3
                 echo "rank $OMPI_COMM_WORLD_RANK: UCX_NET_DEVICES=$nics"
                 UCX_NET_DEVICES=$nics exec "$0"/test/mpi/mpi_verify \
                     --gpu 65536 1048576' "$B" ) > "$log" 2>&1 ||
        { tail -20 "$log"; return 1; }
    grep -E '^(ok|BAD|verification|rank [01])' "$log"
    grep -q '^verification: PASSED' "$log" || return 1
    for r in 0 1; do
        own=$(nic_bytes "$log" $r "rxe$r"); far=$(nic_bytes "$log" $r "rxe$((1 - r))")
        [ "${own% *}" -gt 0 ] 2> /dev/null && [ "${own#* }" = 0 ] &&
            [ "$far" = "0 0" ] || return 1
    done
}

# One gate per pair, used per buffer, in one process: rc_gdr's UCT suite
# (gpu_emulated.placed_gpus_lane_per_nic_in_one_process) on rxe0 and rxe1
lane_per_nic_one_process() {
    ( . contrib/env.sh --emulated-gpu "$B" > /dev/null &&
      RC_GDR_DEV_A=rxe0:1 RC_GDR_DEV_B=rxe1:1 timeout 300 \
        "$B/test/gtest/uct/gtest_rc_gdr_uct" --gtest_color=no \
        --gtest_filter=gpu_emulated.placed_gpus_lane_per_nic_in_one_process ) \
        > /tmp/pcie_pairs_lanes.out 2>&1
    grep -E '^GPU[01]: |^\[ ' /tmp/pcie_pairs_lanes.out | grep -v '^\[ RUN' | head -12
    grep -q '^\[  PASSED  \] 1 test' /tmp/pcie_pairs_lanes.out
}

# The gate reads the guest kernel's own config space: ACS redirect set on
# the root port above GPU0 (as setpci would) is recorded as a warning on
# GPU0's pairs, the lane kept (doc/DESIGN.md, the chain's step 4); cleared,
# that port's warning goes. (With an IOMMU the kernel sets redirect on every
# port itself: the value found is restored at the end.)
pair_evidence() { # GPU NIC: that pair's chain in rc_gdr_info
    ( . contrib/env.sh --emulated-gpu "$B" > /dev/null && rc_gdr_info 2>&1 ) |
        sed -n "/^$1 (.*) <-> $2 port/,/^\$/p"
}

acs_redirect_warns() {
    local gpu port old set cleared
    gpu=$(awk '$2 == "0:" {print $NF}' /etc/rxevm-pcie-pairs)
    port=$(basename "$(dirname "$(readlink -f "/sys/bus/pci/devices/$gpu")")")
    old=$(test/rxe/pci_acs.py "$port") || return 1
    test/rxe/pci_acs.py "$port" 0x1d > /dev/null || return 1
    set=$(pair_evidence GPU0 rxe0)
    test/rxe/pci_acs.py "$port" 0 > /dev/null
    cleared=$(pair_evidence GPU0 rxe0)
    test/rxe/pci_acs.py "$port" "$old" > /dev/null
    echo "ACS control of $port (above GPU0 $gpu) was $old; set to 0x001d:"
    echo "$set" | grep -E 'topo.acs|uses the' | sed 's/^/    /'
    echo "cleared to 0x0000:"
    echo "$cleared" | grep -E 'topo.acs|uses the' | sed 's/^/    /'
    grep -qE "topo.acs +warn +$port ctrl=0x001d: P2P request and completion redirect" <<<"$set" &&
        grep -q 'NIC-writes-GPU uses the GDR lane.*with warnings' <<<"$set" &&
        ! grep -qE "topo.acs +warn +$port " <<<"$cleared" &&
        grep -q 'NIC-writes-GPU uses the GDR lane' <<<"$cleared"
}

# The IOMMU as the guest kernel has it (rxe-vm.sh --iommu: an emulated
# Intel IOMMU translating DMA): recorded as a warning on every pair, the
# lane kept; without it, "absent" and no warning
iommu_as_the_kernel_has_it() {
    local ev
    ev=$(pair_evidence GPU0 rxe0)
    echo "$ev" | grep -E 'topo.iommu|uses the' | sed 's/^/    /'
    if [ -n "$(ls /sys/class/iommu 2> /dev/null)" ]; then
        grep -qE 'topo.iommu +warn +GPU: DMA \(translated\)' <<<"$ev" &&
            grep -q 'NIC-writes-GPU uses the GDR lane.*with warnings' <<<"$ev"
    else
        grep -qE 'topo.iommu +info +GPU: absent, NIC: absent' <<<"$ev"
    fi
}

# UCP's bytes per NIC, from rc_gdr's counters of the interfaces UCP opened
# (gpu_emulated.placed_gpus_ucp_bytes_per_nic): tag, put and get per GPU.
# 1.13: protocols v2 for the per-buffer ranking, the md's memory query
# (UCX_MEMTYPE_CACHE=n), rendezvous only (no cuda_copy to unpack eager data)
ucp_bytes_per_nic() {
    ( . contrib/env.sh --emulated-gpu "$B" > /dev/null &&
      RC_GDR_DEV_A=rxe0:1 RC_GDR_DEV_B=rxe1:1 UCX_PROTO_ENABLE=y \
      RC_GDR_PCIE_NICS=$NICS UCX_MAX_RNDV_RAILS=$RNDV_RAILS \
      UCX_MEMTYPE_CACHE=n UCX_RNDV_THRESH=0 timeout 300 \
        "$B/test/gtest/uct/gtest_rc_gdr_uct" --gtest_color=no \
        --gtest_filter=gpu_emulated.placed_gpus_ucp_bytes_per_nic ) \
        > /tmp/pcie_pairs_ucp.out 2>&1
    grep -E '^GPU[01] |^\[  (PASSED|FAILED|SKIPPED)|Failure|bytes' \
        /tmp/pcie_pairs_ucp.out | head -20
    grep -q '^\[  PASSED  \] 1 test' /tmp/pcie_pairs_ucp.out
}

# --nics-per-pair 2: a second NIC beside each GPU (rxe<i>b), UCP's rails
# UCP 1.13 chooses an endpoint's rendezvous rails once, when it connects,
# and weighs each buffer's share among those only: with four NICs and its
# default of two rails, GPU1's rendezvous went over GPU0's two NICs. With as
# many rails as NICs every buffer's own NICs take the larger share.
NICS=rxe0:1,rxe1:1
RNDV_RAILS=2
RAILS=$(awk '{print $NF}' /etc/rxevm-pcie-rails 2> /dev/null)
if [ -n "$RAILS" ]; then
    cat /etc/rxevm-pcie-rails
    NICS=rxe0:1,rxe0b:1,rxe1:1,rxe1b:1
    RNDV_RAILS=4
fi

check pcie_pairs_on_two_numa_nodes two_nodes
check pcie_pairs_rc_gdr_system_devices devices_known
[ -n "$RAILS" ] || check pcie_pairs_matrix_nearest_nic matrix_nearest
check pcie_pairs_nearest_nics_spends_no_gpu_memory nearest_nics_spends_no_gpu_memory
check pcie_pairs_lane_per_nic_one_process lane_per_nic_one_process
check pcie_pairs_acs_redirect_warns acs_redirect_warns
if [ -n "$(ls /sys/class/iommu 2> /dev/null)" ]; then
    check pcie_pairs_iommu_translated_warns iommu_as_the_kernel_has_it
else
    check pcie_pairs_no_iommu_no_warning iommu_as_the_kernel_has_it
fi
if [ -z "$RAILS" ]; then
    check pcie_pairs_ucp_bytes_per_nic ucp_bytes_per_nic
else
    # UCX_MAX_RNDV_RAILS=4: both of a GPU's own NICs, the larger share
    check pcie_pairs_ucp_rails_on_each_gpus_nics ucp_bytes_per_nic
fi
if [ -z "$RAILS" ]; then
    check pcie_pairs_ucp_rendezvous_favours_each_gpus_nic ucp_lane_per_gpu
    check pcie_pairs_mpi_each_rank_on_own_nic mpi_ranks_each_own_nic
fi
echo "$PASSED passed, $FAILED failed, 0 skipped"
[ "$FAILED" = 0 ]
