/**
 * Test helpers over the CUDA driver shim (see cuda_alloc.h).
 */

#include "cuda_alloc.h"

#include <uct/ib_gdr/rc_gdr_cuda_int.h>

#include <string.h>


/* As in the shim: no driver, NO_DEVICE; an entry point it lacks, UNSUPPORTED */
#define UCT_RC_GDR_CUDA_ENTER(_member) \
    do { \
        if (uct_rc_gdr_cuda_fn_table() == NULL) { \
            return UCS_ERR_NO_DEVICE; \
        } \
        if (uct_rc_gdr_cuda_fn_table()->_member == NULL) { \
            return uct_rc_gdr_cuda_missing( \
                    uct_rc_gdr_cuda_fn_names._member); \
        } \
    } while (0)

/* Call an entry point; a failure is logged at _level with the driver's text */
#define UCT_RC_GDR_CUDA_CALL(_level, _member, ...) \
    uct_rc_gdr_cuda_result( \
            uct_rc_gdr_cuda_fn_table()->_member(__VA_ARGS__), _level, \
            uct_rc_gdr_cuda_fn_names._member)


ucs_status_t uct_rc_gdr_cuda_host_register(void *ptr, size_t len)
{
    UCT_RC_GDR_CUDA_ENTER(mem_host_register);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, mem_host_register, ptr,
                                len, CU_MEMHOSTREGISTER_PORTABLE);
}

ucs_status_t uct_rc_gdr_cuda_host_unregister(void *ptr)
{
    UCT_RC_GDR_CUDA_ENTER(mem_host_unregister);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, mem_host_unregister, ptr);
}

ucs_status_t uct_rc_gdr_cuda_managed_alloc(size_t len, void **ptr_p)
{
    CUdeviceptr dptr;
    ucs_status_t status;

    UCT_RC_GDR_CUDA_ENTER(mem_alloc_managed);

    status = UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, mem_alloc_managed,
                                  &dptr, len, CU_MEM_ATTACH_GLOBAL);
    if (status != UCS_OK) {
        return status;
    }

    *ptr_p = (void*)dptr;
    return UCS_OK;
}

ucs_status_t uct_rc_gdr_cuda_mem_alloc_async(size_t len,
                                             uct_rc_gdr_cuda_stream_h stream,
                                             void **ptr_p)
{
    CUdeviceptr dptr;
    ucs_status_t status;

    UCT_RC_GDR_CUDA_ENTER(mem_alloc_async);

    status = UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, mem_alloc_async, &dptr,
                                  len, (CUstream)stream);
    if (status != UCS_OK) {
        return status;
    }

    *ptr_p = (void*)dptr;
    return UCS_OK;
}

ucs_status_t uct_rc_gdr_cuda_mem_free_async(void *ptr,
                                            uct_rc_gdr_cuda_stream_h stream)
{
    UCT_RC_GDR_CUDA_ENTER(mem_free_async);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, mem_free_async,
                                (CUdeviceptr)ptr, (CUstream)stream);
}


/*
 * Virtual memory management
 */

static void uct_rc_gdr_cuda_vmm_prop(int ordinal, int gdr_capable,
                                     CUmemAllocationProp *prop)
{
    memset(prop, 0, sizeof(*prop));
    prop->type                           = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type                  = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id                    = ordinal;
    prop->allocFlags.gpuDirectRDMACapable = gdr_capable ? 1 : 0;
}

ucs_status_t uct_rc_gdr_cuda_vmm_granularity(int ordinal, size_t *gran_p)
{
    CUmemAllocationProp prop;
    ucs_status_t status;
    size_t gran;

    UCT_RC_GDR_CUDA_ENTER(mem_get_allocation_granularity);

    uct_rc_gdr_cuda_vmm_prop(ordinal, 0, &prop);
    status = UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR,
                                  mem_get_allocation_granularity, &gran,
                                  &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (status != UCS_OK) {
        return status;
    }

    *gran_p = gran;
    return UCS_OK;
}

ucs_status_t uct_rc_gdr_cuda_vmm_reserve(size_t len, size_t alignment,
                                         void **addr_p)
{
    CUdeviceptr dptr;
    ucs_status_t status;

    UCT_RC_GDR_CUDA_ENTER(mem_address_reserve);

    status = UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, mem_address_reserve,
                                  &dptr, len, alignment, 0, 0);
    if (status != UCS_OK) {
        return status;
    }

    *addr_p = (void*)dptr;
    return UCS_OK;
}

ucs_status_t uct_rc_gdr_cuda_vmm_unreserve(void *addr, size_t len)
{
    UCT_RC_GDR_CUDA_ENTER(mem_address_free);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, mem_address_free,
                                (CUdeviceptr)addr, len);
}

ucs_status_t uct_rc_gdr_cuda_vmm_create(int ordinal, size_t len,
                                        int gdr_capable, uint64_t *handle_p)
{
    CUmemGenericAllocationHandle handle;
    CUmemAllocationProp prop;
    ucs_status_t status;

    UCT_RC_GDR_CUDA_ENTER(mem_create);

    uct_rc_gdr_cuda_vmm_prop(ordinal, gdr_capable, &prop);
    status = UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, mem_create, &handle,
                                  len, &prop, 0);
    if (status != UCS_OK) {
        return status;
    }

    *handle_p = handle;
    return UCS_OK;
}

ucs_status_t uct_rc_gdr_cuda_vmm_release(uint64_t handle)
{
    UCT_RC_GDR_CUDA_ENTER(mem_release);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, mem_release,
                                (CUmemGenericAllocationHandle)handle);
}

ucs_status_t uct_rc_gdr_cuda_vmm_map(void *addr, size_t len, uint64_t handle)
{
    UCT_RC_GDR_CUDA_ENTER(mem_map);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, mem_map,
                                (CUdeviceptr)addr, len, 0,
                                (CUmemGenericAllocationHandle)handle, 0);
}

ucs_status_t uct_rc_gdr_cuda_vmm_unmap(void *addr, size_t len)
{
    UCT_RC_GDR_CUDA_ENTER(mem_unmap);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, mem_unmap,
                                (CUdeviceptr)addr, len);
}

ucs_status_t uct_rc_gdr_cuda_vmm_set_access(void *addr, size_t len,
                                            int ordinal)
{
    CUmemAccessDesc desc;

    UCT_RC_GDR_CUDA_ENTER(mem_set_access);

    memset(&desc, 0, sizeof(desc));
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id   = ordinal;
    desc.flags         = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, mem_set_access,
                                (CUdeviceptr)addr, len, &desc, 1);
}


ucs_status_t uct_rc_gdr_cuda_memcpy(void *dst, const void *src, size_t len)
{
    UCT_RC_GDR_CUDA_ENTER(memcpy_uva);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, memcpy_uva,
                                (CUdeviceptr)dst, (CUdeviceptr)src, len);
}
