#!/bin/bash
#
# On a GPU machine whose UCX is the distribution's (Ubuntu 24.04: libucx0
# 1.16.0, no CUDA modules): rc_gdr built against upstream 1.16.0 loads into
# that stock UCX and registers; modules of other releases refuse in one line;
# the CUDA driver is found and GPU memory recognised by the code the md uses.
# What needs a NIC is said, not run.
#
# Usage: test/gpu/run_stock_ucx.sh DIR   (DIR holds b116/, b113/, b122/:
#        each libuct_ib_gdr.so, and b116/ the test programs)
# Prints PASS/FAIL/SKIP lines and "N passed, N failed".
#
set -uo pipefail
D=$(cd "${1:?usage: $0 DIR}" && pwd)
PASSED=0
FAILED=0

check() { # name cmd...
    local name=$1; shift
    if "$@" > /tmp/stock.$$.log 2>&1; then
        echo "PASS $name"; PASSED=$((PASSED + 1))
    else
        echo "FAIL $name"; FAILED=$((FAILED + 1))
    fi
    sed 's/^/    | /' /tmp/stock.$$.log | head -40
}

echo "== machine"
grep PRETTY_NAME /etc/os-release
dpkg-query -W -f='${Package} ${Version}\n' 'libucx*' 'ucx-utils' \
    'libibverbs1' 'ibverbs-providers' 'openmpi-bin' 2>/dev/null
ls /usr/lib/x86_64-linux-gnu/ucx/ 2>/dev/null | tr '\n' ' '; echo
nvidia-smi -L 2>/dev/null
echo "verbs devices: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')"

stock_release() {
    "$D/b116/uct_components" | head -1
}

check stock_ucx_is_1.16.0 bash -c "'$D/b116/uct_components' | grep '^UCX 1.16.0'"
check module_1.16.0_links_against_stock_ucx \
    bash -c "out=\$(ldd '$D/b116/libuct_ib_gdr.so'); grep -E 'libuc[pstm]|ibverbs|not found' <<<\"\$out\"; ! grep -q 'not found' <<<\"\$out\""
check module_1.16.0_registers_in_stock_ucx \
    env LD_PRELOAD="$D/b116/libuct_ib_gdr.so" LD_BIND_NOW=1 \
        "$D/b116/uct_components" rc_gdr
for other in b113 b122; do
    check "module_${other}_refused_in_one_line" bash -c "
        out=\$(LD_PRELOAD='$D/$other/libuct_ib_gdr.so' LD_BIND_NOW=1 \
               '$D/b116/uct_components' rc_gdr 2>&1); rc=\$?
        echo \"\$out\"; echo \"exit status \$rc\"
        [ \$rc = 1 ] && grep -q 'but this process runs UCX 1.16.0; the transport is not registered' <<<\"\$out\""
done

# The capability chain's GPU side with the real driver: rc_gdr_info loads
# libcuda.so.1 as the md does and judges every GPU (no NIC to pair with).
# It must name the GPU as nvidia-smi does (the card lent may be any model).
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sed -n 1p)
check driver_found_by_rc_gdr_info bash -c "'$D/b116/rc_gdr_info' 2>&1 | head -40; grep -qF '${GPU_NAME:-NVIDIA}' <<<\"\$('$D/b116/rc_gdr_info' --json 2>&1)\""
# BAR1, the space GPUDirect registrations map, as NVML reports it (the
# sysfs BAR size is only the fallback)
check bar1_reported_by_nvml bash -c "out=\$('$D/b116/rc_gdr_info' 2>&1); grep BAR1 <<<\"\$out\"; grep -q 'BAR1 .*free.*(NVML)' <<<\"\$out\""
# Memory kinds, buffer IDs, DMA-BUF export through the md's CUDA shim
check md_cuda_shim_with_real_driver \
    bash -c "RC_GDR_TEST_CUDA=real '$D/b116/gtest_rc_gdr' --gtest_filter='cuda_gpu.*' > /tmp/gt.\$\$ 2>&1; rc=\$?
             grep -E '^\[ +(OK|FAILED|SKIPPED|PASSED) +\]' /tmp/gt.\$\$
             [ \$rc = 0 ] && grep -q '^\[  PASSED  \] [1-9]' /tmp/gt.\$\$"
# The md itself over the real driver: memory types and a GPU registration,
# with the stand-in verbs device of test/mocks as its NIC (said so; no NIC
# here), the module being this release's build
check md_reports_cuda_memory_stand_in_nic \
    bash -c "RC_GDR_TEST_CUDA=real RC_GDR_TEST_MODULE='$D/b116/libuct_ib_gdr.so' \
             '$D/b116/gtest_rc_gdr' --gtest_filter='md.real_gpu_memory_reported' > /tmp/gt.\$\$ 2>&1; rc=\$?
             grep -E '^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|Failure|Expected|Which is|peermem' /tmp/gt.\$\$
             [ \$rc = 0 ] && grep -q '^\[  PASSED  \] 1 test' /tmp/gt.\$\$"
# Open MPI linked to the stock UCX, the module preloaded into both ranks:
# rc_gdr registers inside Open MPI's UCX (its md says why it has no device)
# and the ranks' traffic, over what UCX has here, arrives byte-exact
if command -v mpirun > /dev/null && [ -x "$D/b116/mpi_verify" ]; then
    check open_mpi_over_stock_ucx_with_module \
        bash -c "timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 \
                     --mca pml ucx --mca osc ucx --mca btl ^openib,ofi,uct \
                     --mca pml_ucx_tls any --mca pml_ucx_devices any \
                     -x LD_PRELOAD='$D/b116/libuct_ib_gdr.so' -x UCX_LOG_LEVEL=debug \
                     '$D/b116/mpi_verify' > /tmp/mpi.\$\$ 2>&1; rc=\$?
                 grep -E '^verification' /tmp/mpi.\$\$; grep -m1 'rc_gdr' /tmp/mpi.\$\$
                 [ \$rc = 0 ] && grep -q '^verification: PASSED' /tmp/mpi.\$\$ &&
                     grep -q 'rc_gdr: no verbs devices found' /tmp/mpi.\$\$"
else
    echo "SKIP open_mpi_over_stock_ucx_with_module: no mpirun or mpi_verify"
fi
if ls /sys/class/infiniband/* > /dev/null 2>&1; then
    check md_reports_cuda_memory env LD_PRELOAD="$D/b116/libuct_ib_gdr.so" \
        bash -c "'$D/b116/uct_components' rc_gdr | tee /dev/stderr | grep -A2 'md ' | grep 'registers:.* cuda'"
else
    echo "SKIP md_reports_cuda_memory: no verbs device on this machine, so" \
         "no rc_gdr memory domain can open (the md's CUDA answers are the" \
         "shim's, checked above)"
fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
