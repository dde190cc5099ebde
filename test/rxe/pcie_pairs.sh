#!/bin/bash
#
# Inside `contrib/rxe-vm.sh --pcie-pairs 2`: a guest whose PCIe tree has two
# host bridges on two NUMA nodes, each with a virtio-net NIC carrying rxe<i>
# and an emulated PCI function standing for GPU<i> (the stand-in CUDA
# driver reports its address). Shows what UCP is given: each rc_gdr device's
# system device (ucx_info -d, beside rc_verbs'), and the GPU x NIC matrix
# with each GPU's nearest NIC. Prints PASS/FAIL lines; exits non-zero on a
# failure.
#
set -uo pipefail

cd "$(dirname "$0")/../.."
. contrib/env.sh "${RC_GDR_BUILD:-build}" > /dev/null || exit 2
B=$RC_GDR_BUILD
FAILED=0

check() {
    local name=$1; shift
    if "$@"; then echo "PASS $name"; else echo "FAIL $name"; FAILED=1; fi
}

[ -f /etc/rxevm-pcie-pairs ] || { echo "SKIP: not a --pcie-pairs guest"; exit 0; }
cat /etc/rxevm-pcie-pairs
. /etc/rxevm-gpus.env

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
    awk '{print $7}' /etc/rxevm-pcie-pairs | sort -u | wc -l | grep -qx 2
}

# GPU<i>'s nearest NIC is rxe<i> (PHB: one host bridge), the other one is
# across NUMA nodes (SYS)
matrix_nearest() {
    local out
    out=$( ( . contrib/env.sh --emulated-gpu "$B" > /dev/null &&
             rc_gdr_info 2> /dev/null ) | sed -n '/^GPU x NIC:/,/^$/p')
    echo "$out"
    echo "$out" | grep -E '^GPU0 +PHB\* [a-z]+/[a-z]+ +SYS [a-z]+/[a-z]+$' > /dev/null &&
        echo "$out" | grep -E '^GPU1 +SYS [a-z]+/[a-z]+ +PHB\* [a-z]+/[a-z]+$' > /dev/null
}

check pcie_pairs_on_two_numa_nodes two_nodes
check pcie_pairs_rc_gdr_system_devices devices_known
check pcie_pairs_matrix_nearest_nic matrix_nearest
exit $FAILED
