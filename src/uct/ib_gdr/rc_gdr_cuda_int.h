/**
 * rc_gdr: the CUDA driver shim's entry-point table. The shim (rc_gdr_cuda.c)
 * and the tests' CUDA helpers (test/gtest/cuda_alloc.c) call the driver
 * through it; the rest of the product uses rc_gdr_cuda.h, which does not
 * include cuda.h.
 */

#ifndef UCT_RC_GDR_CUDA_INT_H_
#define UCT_RC_GDR_CUDA_INT_H_

#include "rc_gdr_cuda.h"

#include <ucs/debug/log_def.h>

#include <cuda.h>

BEGIN_C_DECLS


/*
 * Entry points: member, versioned export (the dlsym name, and the function
 * type), required. cuGetProcAddress_v2 takes the name without its "_vN"
 * suffix. Without a required entry point the driver is treated as absent; a
 * missing optional one makes its wrapper return UCS_ERR_UNSUPPORTED.
 */
#define UCT_RC_GDR_CUDA_FOREACH_FN(_F) \
    _F(init,                   cuInit,                         1) \
    _F(driver_get_version,     cuDriverGetVersion,             1) \
    _F(get_error_string,       cuGetErrorString,               0) \
    _F(device_get_count,       cuDeviceGetCount,               1) \
    _F(device_get,             cuDeviceGet,                    1) \
    _F(device_get_name,        cuDeviceGetName,                0) \
    _F(device_get_attribute,   cuDeviceGetAttribute,           1) \
    _F(device_get_pci_bus_id,  cuDeviceGetPCIBusId,            0) \
    _F(primary_ctx_retain,     cuDevicePrimaryCtxRetain,       0) \
    _F(primary_ctx_release,    cuDevicePrimaryCtxRelease_v2,   0) \
    _F(ctx_set_current,        cuCtxSetCurrent,                0) \
    _F(ctx_get_current,        cuCtxGetCurrent,                0) \
    _F(ctx_push_current,       cuCtxPushCurrent_v2,            0) \
    _F(ctx_pop_current,        cuCtxPopCurrent_v2,             0) \
    _F(pointer_get_attribute,  cuPointerGetAttribute,          1) \
    _F(pointer_get_attributes, cuPointerGetAttributes,         1) \
    _F(pointer_set_attribute,  cuPointerSetAttribute,          0) \
    _F(mem_get_address_range,  cuMemGetAddressRange_v2,        1) \
    _F(mem_alloc,              cuMemAlloc_v2,                  0) \
    _F(mem_free,               cuMemFree_v2,                   0) \
    _F(mem_host_alloc,         cuMemHostAlloc,                 0) \
    _F(mem_free_host,          cuMemFreeHost,                  0) \
    _F(mem_host_register,      cuMemHostRegister_v2,           0) \
    _F(mem_host_unregister,    cuMemHostUnregister,            0) \
    _F(mem_alloc_managed,      cuMemAllocManaged,              0) \
    _F(mem_alloc_async,        cuMemAllocAsync,                0) \
    _F(mem_free_async,         cuMemFreeAsync,                 0) \
    _F(memcpy_uva,             cuMemcpy,                       0) \
    _F(memcpy_dtoh,            cuMemcpyDtoH_v2,                0) \
    _F(memcpy_htod,            cuMemcpyHtoD_v2,                0) \
    _F(memcpy_dtoh_async,      cuMemcpyDtoHAsync_v2,           0) \
    _F(memcpy_htod_async,      cuMemcpyHtoDAsync_v2,           0) \
    _F(stream_create,          cuStreamCreate,                 0) \
    _F(stream_destroy,         cuStreamDestroy_v2,             0) \
    _F(stream_synchronize,     cuStreamSynchronize,            0) \
    _F(event_create,           cuEventCreate,                  0) \
    _F(event_record,           cuEventRecord,                  0) \
    _F(event_query,            cuEventQuery,                   0) \
    _F(event_synchronize,      cuEventSynchronize,             0) \
    _F(event_destroy,          cuEventDestroy_v2,              0) \
    _F(mem_get_handle_for_address_range, cuMemGetHandleForAddressRange, 0) \
    _F(mem_address_reserve,    cuMemAddressReserve,            0) \
    _F(mem_address_free,       cuMemAddressFree,               0) \
    _F(mem_create,             cuMemCreate,                    0) \
    _F(mem_release,            cuMemRelease,                   0) \
    _F(mem_map,                cuMemMap,                       0) \
    _F(mem_unmap,              cuMemUnmap,                     0) \
    _F(mem_set_access,         cuMemSetAccess,                 0) \
    _F(mem_get_allocation_granularity, cuMemGetAllocationGranularity, 0)

#define UCT_RC_GDR_CUDA_FN_MEMBER(_member, _sym, _required) \
    __typeof__(_sym) *_member;

#define UCT_RC_GDR_CUDA_FN_NAME_MEMBER(_member, _sym, _required) \
    const char *_member;


typedef struct {
    UCT_RC_GDR_CUDA_FOREACH_FN(UCT_RC_GDR_CUDA_FN_MEMBER)
} uct_rc_gdr_cuda_fn_t;

/* The same members, holding the exports' names, for log messages */
typedef struct {
    UCT_RC_GDR_CUDA_FOREACH_FN(UCT_RC_GDR_CUDA_FN_NAME_MEMBER)
} uct_rc_gdr_cuda_fn_names_t;

/* The exports' names, for log messages */
extern const uct_rc_gdr_cuda_fn_names_t uct_rc_gdr_cuda_fn_names;

/* The loaded driver's entry points (loaded on first use), NULL without one */
const uct_rc_gdr_cuda_fn_t *uct_rc_gdr_cuda_fn_table(void);

/* A driver call's result as a status; a failure is logged at @a level */
ucs_status_t uct_rc_gdr_cuda_result(CUresult res, ucs_log_level_t level,
                                    const char *func);

/* The answer for an entry point this driver lacks: UCS_ERR_UNSUPPORTED */
ucs_status_t uct_rc_gdr_cuda_missing(const char *func);

END_C_DECLS

#endif
