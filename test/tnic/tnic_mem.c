/*
 * The memory accessor of a registration on host memory. The engine reaches
 * registered memory only through an MR's tnic_mem_ops_t: an accessor for
 * device memory (through the CUDA driver, as a NIC reaches it over PCIe)
 * can be added beside this one without touching the engine.
 */

#include "tnic.h"

#include <string.h>

static int tnic_mem_host_read(void *mr_priv, uint64_t addr, void *dst,
                              size_t len)
{
    (void)mr_priv;
    memcpy(dst, (const void*)(uintptr_t)addr, len);
    return 0;
}

static int tnic_mem_host_write(void *mr_priv, uint64_t addr, const void *src,
                               size_t len)
{
    (void)mr_priv;
    memcpy((void*)(uintptr_t)addr, src, len);
    return 0;
}

static int tnic_mem_host_atomic(void *mr_priv, uint64_t addr, int is_cswap,
                                uint64_t compare_add, uint64_t swap,
                                uint64_t *orig_p)
{
    uint64_t *ptr = (uint64_t*)(uintptr_t)addr;
    uint64_t expected;

    (void)mr_priv;
    if (is_cswap) {
        expected = compare_add;
        __atomic_compare_exchange_n(ptr, &expected, swap, 0,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        *orig_p = expected;
    } else {
        *orig_p = __atomic_fetch_add(ptr, compare_add, __ATOMIC_SEQ_CST);
    }
    return 0;
}

const tnic_mem_ops_t tnic_mem_host_ops = {
    .read   = tnic_mem_host_read,
    .write  = tnic_mem_host_write,
    .atomic = tnic_mem_host_atomic
};
