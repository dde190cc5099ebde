#!/bin/bash
#
# Open MPI across the two soft-RoCE hosts of contrib/rxe-vm.sh --hosts 2
# (EMULATED: two qemu guests): test/mpi/mpi_verify, one rank per host, pml
# ucx over rc_gdr, mpirun's remote agent is rxevm-rsh. Prints mpi_verify's
# lines (every byte checked on the receiving side) and the rxe packet
# counters of rxevm1 (traffic went over the link). Run from the repository
# root:  contrib/rxe-vm.sh --hosts 2 -- test/wire/mpi.sh
. contrib/env.sh "${RC_GDR_BUILD:-build}" || exit 2
timeout 300 mpirun --allow-run-as-root -np 2 --host rxevm1,rxevm2 \
    --mca plm_rsh_agent rxevm-rsh --mca pml ucx --mca btl ^openib,ofi,uct \
    --mca osc ucx --mca oob_tcp_if_include eth0 \
    -x UCX_TLS=rc_gdr,ud_verbs:aux,self -x UCX_NET_DEVICES=rxe0:1 \
    -x UCX_IB_GID_INDEX=0 -x LD_PRELOAD -x PATH -x LD_LIBRARY_PATH \
    "$RC_GDR_BUILD/test/mpi/mpi_verify"
rc=$?
c=/sys/class/infiniband/rxe0/ports/1/hw_counters
echo "rxevm1 rxe0: sent_pkts $(cat $c/sent_pkts) rcvd_pkts $(cat $c/rcvd_pkts)"
exit $rc
