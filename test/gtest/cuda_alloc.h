/**
 * Test helpers over the CUDA driver shim: the allocations and copies only
 * tests make (pinned registration of host memory, managed and stream-ordered
 * memory, the VMM family, a copy in any direction). Test code, not the
 * module: they call the driver through the shim's table
 * (rc_gdr_cuda_int.h), as the shim's own wrappers do.
 */

#ifndef RC_GDR_TEST_CUDA_ALLOC_H_
#define RC_GDR_TEST_CUDA_ALLOC_H_

#include <uct/ib_gdr/rc_gdr_cuda.h>

BEGIN_C_DECLS

/* Page-lock existing host memory (CU_MEMHOSTREGISTER_PORTABLE) */
ucs_status_t uct_rc_gdr_cuda_host_register(void *ptr, size_t len);

ucs_status_t uct_rc_gdr_cuda_host_unregister(void *ptr);

/* Managed memory attached globally (CU_MEM_ATTACH_GLOBAL) */
ucs_status_t uct_rc_gdr_cuda_managed_alloc(size_t len, void **ptr_p);

/* Stream-ordered allocation from the device's default pool */
ucs_status_t uct_rc_gdr_cuda_mem_alloc_async(size_t len,
                                             uct_rc_gdr_cuda_stream_h stream,
                                             void **ptr_p);

ucs_status_t uct_rc_gdr_cuda_mem_free_async(void *ptr,
                                            uct_rc_gdr_cuda_stream_h stream);


/*
 * Virtual memory management (cuMemCreate family): a reservation mapped by one
 * or more physical allocations
 */

/** Minimum granularity of pinned device allocations on a device. */
ucs_status_t uct_rc_gdr_cuda_vmm_granularity(int ordinal, size_t *gran_p);

ucs_status_t uct_rc_gdr_cuda_vmm_reserve(size_t len, size_t alignment,
                                         void **addr_p);

ucs_status_t uct_rc_gdr_cuda_vmm_unreserve(void *addr, size_t len);

/**
 * Create a physical allocation on a device.
 * @param gdr_capable  request GPUDirect RDMA capability (allocFlags).
 */
ucs_status_t uct_rc_gdr_cuda_vmm_create(int ordinal, size_t len,
                                        int gdr_capable, uint64_t *handle_p);

ucs_status_t uct_rc_gdr_cuda_vmm_release(uint64_t handle);

ucs_status_t uct_rc_gdr_cuda_vmm_map(void *addr, size_t len, uint64_t handle);

ucs_status_t uct_rc_gdr_cuda_vmm_unmap(void *addr, size_t len);

/** Give a device read-write access to a mapped range. */
ucs_status_t uct_rc_gdr_cuda_vmm_set_access(void *addr, size_t len,
                                            int ordinal);

/* Any direction, by unified addressing; synchronous */
ucs_status_t uct_rc_gdr_cuda_memcpy(void *dst, const void *src, size_t len);

END_C_DECLS

#endif
