/**
 * rc_gdr: CUDA free events (see rc_gdr_ucm.h).
 *
 * How the release calls are caught (mode HOOKS)
 *
 * The entry points of the driver are patched in place ("bistro": the first
 * bytes of the function become a jump to a hook, and a trampoline holding
 * the displaced instructions calls the original). Patching the code, not a
 * table of pointers to it, is what makes every caller go through the hook:
 *
 *   - the CUDA runtime (libcudart, and cudart_static linked into an
 *     application) does not import the driver: it dlopen()s libcuda.so.1 and
 *     fills its own table of function pointers with cuGetProcAddress(). No
 *     GOT/PLT slot of any object refers to cuMemFree_v2, so rewriting
 *     relocations (UCM's "reloc" mode, ucm_reloc_modify) would never see
 *     cudaFree. The pointers cudart holds still lead to the patched code, so
 *     cudaFree / cudaFreeAsync / cudaFreeHost are reported through the driver
 *     hooks, also when cudart was loaded (and its table filled) before
 *     install, and without hooks of their own (which would report each free
 *     twice);
 *   - the same holds for our own shim (rc_gdr_cuda.c) and any library that
 *     resolves the driver with dlsym() or cuGetProcAddress().
 *
 * cuGetProcAddress() may hand out an address other than the export's (an
 * internal implementation, a per-thread-default-stream variant), so those
 * addresses are patched as well. When one patched function reaches another
 * (an export that jumps to a patched implementation), the outer hook reports
 * and the inner one only passes the call on.
 *
 * The patch itself is libucm's, and where libucm cannot relocate a prologue,
 * rc_gdr_ucm_bistro.c's own (rc_gdr_ucm_bistro_patch).
 *
 * Nothing is ever unpatched: libcuda is made resident (RTLD_NODELETE) before
 * it is patched, and so is the object that holds the hooks.
 */

#ifndef _GNU_SOURCE
#  define _GNU_SOURCE /* dladdr, dl_iterate_phdr, RTLD_NODELETE */
#endif

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "rc_gdr_ucm.h"
#include "rc_gdr_ucm_bistro.h"

#include <uct/ib_gdr/rc_gdr_cuda.h>

#include <ucm/api/ucm.h>
#include <ucs/debug/log_def.h>
#include <uct/ib_gdr/rc_gdr_glue_math.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>

#include <cuda.h>

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>


/* Priority of the UCM_EVENT_MEM_TYPE_FREE subscription (mode UCM): the same
 * as UCT's registration caches */
#define RC_GDR_UCM_CUDA_UCM_PRIORITY   1000

/* The module that makes UCM deliver CUDA memory events */
#define RC_GDR_UCM_CUDA_UCM_MODULE     "libucm_cuda.so"

/* cuGetProcAddress() versions asked for, besides the driver's own: what
 * rc_gdr's shim asks (the first with cuGetProcAddress_v2) */
#define RC_GDR_UCM_CUDA_PROC_VERSION   12000

#define RC_GDR_UCM_CUDA_NAME_MAX       48


/* The release calls, by signature */
typedef enum {
    RC_GDR_UCM_CUDA_FN_FREE,        /* CUresult (CUdeviceptr) */
    RC_GDR_UCM_CUDA_FN_FREE_V1,     /* CUresult (unsigned int): legacy */
    RC_GDR_UCM_CUDA_FN_FREE_HOST,   /* CUresult (void*) */
    RC_GDR_UCM_CUDA_FN_FREE_ASYNC,  /* CUresult (CUdeviceptr, CUstream) */
    RC_GDR_UCM_CUDA_FN_UNMAP,       /* CUresult (CUdeviceptr, size_t) */
    RC_GDR_UCM_CUDA_FN_LAST
} rc_gdr_ucm_cuda_fn_t;

typedef CUresult (*rc_gdr_ucm_cuda_free_func_t)(CUdeviceptr dptr);
typedef CUresult (*rc_gdr_ucm_cuda_free_v1_func_t)(unsigned int dptr);
typedef CUresult (*rc_gdr_ucm_cuda_free_host_func_t)(void *ptr);
typedef CUresult (*rc_gdr_ucm_cuda_free_async_func_t)(CUdeviceptr dptr,
                                                      CUstream stream);
typedef CUresult (*rc_gdr_ucm_cuda_unmap_func_t)(CUdeviceptr ptr, size_t size);

typedef CUresult (*rc_gdr_ucm_cuda_get_range_func_t)(CUdeviceptr *base,
                                                     size_t *size,
                                                     CUdeviceptr dptr);
typedef CUresult (*rc_gdr_ucm_cuda_get_attr_func_t)(void *data,
                                                    CUpointer_attribute attr,
                                                    CUdeviceptr ptr);
typedef CUresult (*rc_gdr_ucm_cuda_retain_handle_func_t)(
        CUmemGenericAllocationHandle *handle, void *addr);
typedef CUresult (*rc_gdr_ucm_cuda_release_handle_func_t)(
        CUmemGenericAllocationHandle handle);
typedef CUresult (*rc_gdr_ucm_cuda_get_proc_v2_func_t)(
        const char *symbol, void **pfn, int version, cuuint64_t flags,
        CUdriverProcAddressQueryResult *status);
typedef CUresult (*rc_gdr_ucm_cuda_get_proc_v1_func_t)(const char *symbol,
                                                       void **pfn,
                                                       int version,
                                                       cuuint64_t flags);


/*
 * Hook slots: one hook function per patched address. A release call has
 * one export, and cuGetProcAddress() may add other addresses for it.
 */
#define RC_GDR_UCM_CUDA_FOREACH_SLOT(_S) \
    _S(FREE_0,       FREE) \
    _S(FREE_1,       FREE) \
    _S(FREE_2,       FREE) \
    _S(FREE_3,       FREE) \
    _S(FREE_V1_0,    FREE_V1) \
    _S(FREE_HOST_0,  FREE_HOST) \
    _S(FREE_HOST_1,  FREE_HOST) \
    _S(FREE_HOST_2,  FREE_HOST) \
    _S(FREE_ASYNC_0, FREE_ASYNC) \
    _S(FREE_ASYNC_1, FREE_ASYNC) \
    _S(FREE_ASYNC_2, FREE_ASYNC) \
    _S(FREE_ASYNC_3, FREE_ASYNC) \
    _S(FREE_ASYNC_4, FREE_ASYNC) \
    _S(UNMAP_0,      UNMAP) \
    _S(UNMAP_1,      UNMAP) \
    _S(UNMAP_2,      UNMAP)

#define RC_GDR_UCM_CUDA_SLOT_ENUM(_slot, _fn) RC_GDR_UCM_CUDA_SLOT_##_slot,

enum {
    RC_GDR_UCM_CUDA_FOREACH_SLOT(RC_GDR_UCM_CUDA_SLOT_ENUM)
    RC_GDR_UCM_CUDA_SLOT_LAST
};

typedef struct {
    rc_gdr_ucm_cuda_fn_t fn;
    void                 *hook;
} rc_gdr_ucm_cuda_slot_t;

/* A patched entry point */
typedef struct {
    void       *address;
    const char *method;
    char       name[RC_GDR_UCM_CUDA_NAME_MAX];
} rc_gdr_ucm_cuda_site_t;

/* What to patch: the export, or what cuGetProcAddress() gives for it */
typedef struct {
    rc_gdr_ucm_cuda_fn_t fn;
    const char           *symbol;
    int                  by_proc_address;
} rc_gdr_ucm_cuda_target_t;

typedef struct {
    rc_gdr_ucm_cuda_free_cb_t cb;
    void                      *arg;
} rc_gdr_ucm_cuda_handler_t;


/*
 * 64-bit variants come first: if the legacy export is an alias of the
 * current function, the alias must get the hook that passes 64-bit pointers.
 */
static const rc_gdr_ucm_cuda_target_t rc_gdr_ucm_cuda_targets[] = {
    {RC_GDR_UCM_CUDA_FN_FREE,       "cuMemFree_v2",        0},
    {RC_GDR_UCM_CUDA_FN_FREE,       "cuMemFree",           1},
    {RC_GDR_UCM_CUDA_FN_FREE_HOST,  "cuMemFreeHost",       0},
    {RC_GDR_UCM_CUDA_FN_FREE_HOST,  "cuMemFreeHost_v2",    0},
    {RC_GDR_UCM_CUDA_FN_FREE_HOST,  "cuMemFreeHost",       1},
    {RC_GDR_UCM_CUDA_FN_FREE_ASYNC, "cuMemFreeAsync",      0},
    {RC_GDR_UCM_CUDA_FN_FREE_ASYNC, "cuMemFreeAsync_ptsz", 0},
    {RC_GDR_UCM_CUDA_FN_FREE_ASYNC, "cuMemFreeAsync",      1},
    {RC_GDR_UCM_CUDA_FN_UNMAP,      "cuMemUnmap",          0},
    {RC_GDR_UCM_CUDA_FN_UNMAP,      "cuMemUnmap",          1},
    {RC_GDR_UCM_CUDA_FN_FREE_V1,    "cuMemFree",           0}
};

static const cuuint64_t rc_gdr_ucm_cuda_proc_flags[] = {
    CU_GET_PROC_ADDRESS_DEFAULT,
    CU_GET_PROC_ADDRESS_LEGACY_STREAM,
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
};

static const char *rc_gdr_ucm_cuda_mode_names[] = {
    [RC_GDR_UCM_CUDA_MODE_NONE]  = "none",
    [RC_GDR_UCM_CUDA_MODE_HOOKS] = "hooks",
    [RC_GDR_UCM_CUDA_MODE_UCM]   = "ucm",
    [RC_GDR_UCM_CUDA_MODE_LAST]  = NULL
};

static const char *rc_gdr_ucm_cuda_mem_kind_names[] = {
    [RC_GDR_UCM_CUDA_MEM_DEVICE]      = "device",
    [RC_GDR_UCM_CUDA_MEM_VMM]         = "vmm",
    [RC_GDR_UCM_CUDA_MEM_HOST_PINNED] = "host-pinned",
    [RC_GDR_UCM_CUDA_MEM_LAST]        = NULL
};


/* Installation, under install_lock */
static pthread_mutex_t        rc_gdr_ucm_cuda_install_lock =
                                      PTHREAD_MUTEX_INITIALIZER;
static int                    rc_gdr_ucm_cuda_installed;
static ucs_status_t           rc_gdr_ucm_cuda_install_status;
static rc_gdr_ucm_cuda_mode_t rc_gdr_ucm_cuda_mode_value;
static rc_gdr_ucm_cuda_site_t rc_gdr_ucm_cuda_sites[RC_GDR_UCM_CUDA_SLOT_LAST];
static unsigned               rc_gdr_ucm_cuda_num_sites;

/* Written before the slot's patch is applied, read by its hook */
static void *rc_gdr_ucm_cuda_orig[RC_GDR_UCM_CUDA_SLOT_LAST];

/* Driver queries for the range of a free that gave only an address */
static rc_gdr_ucm_cuda_get_range_func_t rc_gdr_ucm_cuda_get_range;
static rc_gdr_ucm_cuda_get_attr_func_t  rc_gdr_ucm_cuda_get_attr;

/* Mode UCM: tells a VMM mapping from an allocation */
static rc_gdr_ucm_cuda_retain_handle_func_t  rc_gdr_ucm_cuda_retain_handle;
static rc_gdr_ucm_cuda_release_handle_func_t rc_gdr_ucm_cuda_release_handle;

/* Subscribers: the list changes under the write lock, dispatch holds the
 * read lock (which a thread may take again when a callback frees memory) */
static pthread_rwlock_t          rc_gdr_ucm_cuda_handlers_lock =
                                         PTHREAD_RWLOCK_INITIALIZER;
static rc_gdr_ucm_cuda_handler_t rc_gdr_ucm_cuda_handlers
                                         [RC_GDR_UCM_CUDA_MAX_HANDLERS];
static unsigned                  rc_gdr_ucm_cuda_num_handlers;

/* Hooked driver calls in progress in this thread: only the outermost one
 * reports, the driver's own nested release calls pass through */
static __thread unsigned rc_gdr_ucm_cuda_in_driver;

/* Free callbacks in progress in this thread */
static __thread unsigned rc_gdr_ucm_cuda_in_dispatch;


const char *rc_gdr_ucm_cuda_mode_str(rc_gdr_ucm_cuda_mode_t mode)
{
    return (mode < RC_GDR_UCM_CUDA_MODE_LAST) ?
           rc_gdr_ucm_cuda_mode_names[mode] : "invalid";
}

const char *rc_gdr_ucm_cuda_mem_kind_str(rc_gdr_ucm_cuda_mem_kind_t kind)
{
    return (kind < RC_GDR_UCM_CUDA_MEM_LAST) ?
           rc_gdr_ucm_cuda_mem_kind_names[kind] : "invalid";
}


/*
 * Dispatch
 */

/*
 * The allocation that holds address: cuMemGetAddressRange needs a current
 * context, the range attributes do not (a pool free may come from a thread
 * without one). 0 when the driver does not know the address: then the free
 * releases nothing.
 */
static int rc_gdr_ucm_cuda_range(void **address_p, size_t *length_p)
{
    CUdeviceptr dptr = (CUdeviceptr)(uintptr_t)*address_p;
    CUdeviceptr base;
    size_t size;

    if (dptr == 0) {
        return 0;
    }

    if ((rc_gdr_ucm_cuda_get_range != NULL) &&
        (rc_gdr_ucm_cuda_get_range(&base, &size, dptr) == CUDA_SUCCESS) &&
        (size != 0)) {
        goto found;
    }

    if ((rc_gdr_ucm_cuda_get_attr != NULL) &&
        (rc_gdr_ucm_cuda_get_attr(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  dptr) == CUDA_SUCCESS) &&
        (rc_gdr_ucm_cuda_get_attr(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                  dptr) == CUDA_SUCCESS) &&
        (size != 0)) {
        goto found;
    }

    return 0;

found:
    *address_p = (void*)(uintptr_t)base;
    *length_p  = size;
    return 1;
}

/* length 0: the call gave only the address, ask the driver for the range */
static void rc_gdr_ucm_cuda_dispatch(void *address, size_t length,
                                     rc_gdr_ucm_cuda_mem_kind_t kind)
{
    unsigned i;

    if (__atomic_load_n(&rc_gdr_ucm_cuda_num_handlers, __ATOMIC_RELAXED) ==
        0) {
        return;
    }

    if ((length == 0) && !rc_gdr_ucm_cuda_range(&address, &length)) {
        return;
    }

    ++rc_gdr_ucm_cuda_in_dispatch;
    pthread_rwlock_rdlock(&rc_gdr_ucm_cuda_handlers_lock);
    for (i = 0; i < rc_gdr_ucm_cuda_num_handlers; ++i) {
        rc_gdr_ucm_cuda_handlers[i].cb(address, length, kind,
                                       rc_gdr_ucm_cuda_handlers[i].arg);
    }
    pthread_rwlock_unlock(&rc_gdr_ucm_cuda_handlers_lock);
    --rc_gdr_ucm_cuda_in_dispatch;
}

static UCS_F_ALWAYS_INLINE void
rc_gdr_ucm_cuda_hook_enter(void *address, size_t length,
                           rc_gdr_ucm_cuda_mem_kind_t kind)
{
    if (rc_gdr_ucm_cuda_in_driver == 0) {
        rc_gdr_ucm_cuda_dispatch(address, length, kind);
    }
    ++rc_gdr_ucm_cuda_in_driver;
}

static UCS_F_ALWAYS_INLINE void rc_gdr_ucm_cuda_hook_leave(void)
{
    --rc_gdr_ucm_cuda_in_driver;
}

#define RC_GDR_UCM_CUDA_ORIG(_slot, _type) \
    ((_type)__atomic_load_n(&rc_gdr_ucm_cuda_orig[_slot], __ATOMIC_ACQUIRE))


/*
 * Hooks: report the range, then call the original. One function per slot,
 * by signature.
 */
#define RC_GDR_UCM_CUDA_HOOK_FREE(_slot) \
    static CUresult rc_gdr_ucm_cuda_hook_##_slot(CUdeviceptr dptr) \
    { \
        CUresult ret; \
        \
        rc_gdr_ucm_cuda_hook_enter((void*)(uintptr_t)dptr, 0, \
                                   RC_GDR_UCM_CUDA_MEM_DEVICE); \
        ret = RC_GDR_UCM_CUDA_ORIG(RC_GDR_UCM_CUDA_SLOT_##_slot, \
                                   rc_gdr_ucm_cuda_free_func_t)(dptr); \
        rc_gdr_ucm_cuda_hook_leave(); \
        return ret; \
    }

#define RC_GDR_UCM_CUDA_HOOK_FREE_V1(_slot) \
    static CUresult rc_gdr_ucm_cuda_hook_##_slot(unsigned int dptr) \
    { \
        CUresult ret; \
        \
        rc_gdr_ucm_cuda_hook_enter((void*)(uintptr_t)dptr, 0, \
                                   RC_GDR_UCM_CUDA_MEM_DEVICE); \
        ret = RC_GDR_UCM_CUDA_ORIG(RC_GDR_UCM_CUDA_SLOT_##_slot, \
                                   rc_gdr_ucm_cuda_free_v1_func_t)(dptr); \
        rc_gdr_ucm_cuda_hook_leave(); \
        return ret; \
    }

#define RC_GDR_UCM_CUDA_HOOK_FREE_HOST(_slot) \
    static CUresult rc_gdr_ucm_cuda_hook_##_slot(void *ptr) \
    { \
        CUresult ret; \
        \
        rc_gdr_ucm_cuda_hook_enter(ptr, 0, RC_GDR_UCM_CUDA_MEM_HOST_PINNED); \
        ret = RC_GDR_UCM_CUDA_ORIG(RC_GDR_UCM_CUDA_SLOT_##_slot, \
                                   rc_gdr_ucm_cuda_free_host_func_t)(ptr); \
        rc_gdr_ucm_cuda_hook_leave(); \
        return ret; \
    }

#define RC_GDR_UCM_CUDA_HOOK_FREE_ASYNC(_slot) \
    static CUresult rc_gdr_ucm_cuda_hook_##_slot(CUdeviceptr dptr, \
                                                 CUstream stream) \
    { \
        CUresult ret; \
        \
        rc_gdr_ucm_cuda_hook_enter((void*)(uintptr_t)dptr, 0, \
                                   RC_GDR_UCM_CUDA_MEM_DEVICE); \
        ret = RC_GDR_UCM_CUDA_ORIG(RC_GDR_UCM_CUDA_SLOT_##_slot, \
                                   rc_gdr_ucm_cuda_free_async_func_t)(dptr, \
                                                                     stream); \
        rc_gdr_ucm_cuda_hook_leave(); \
        return ret; \
    }

#define RC_GDR_UCM_CUDA_HOOK_UNMAP(_slot) \
    static CUresult rc_gdr_ucm_cuda_hook_##_slot(CUdeviceptr ptr, size_t size) \
    { \
        CUresult ret; \
        \
        rc_gdr_ucm_cuda_hook_enter((void*)(uintptr_t)ptr, size, \
                                   RC_GDR_UCM_CUDA_MEM_VMM); \
        ret = RC_GDR_UCM_CUDA_ORIG(RC_GDR_UCM_CUDA_SLOT_##_slot, \
                                   rc_gdr_ucm_cuda_unmap_func_t)(ptr, size); \
        rc_gdr_ucm_cuda_hook_leave(); \
        return ret; \
    }

#define RC_GDR_UCM_CUDA_HOOK_DEFINE(_slot, _fn) \
    RC_GDR_UCM_CUDA_HOOK_##_fn(_slot)

RC_GDR_UCM_CUDA_FOREACH_SLOT(RC_GDR_UCM_CUDA_HOOK_DEFINE)

#define RC_GDR_UCM_CUDA_SLOT_INIT(_slot, _fn) \
    [RC_GDR_UCM_CUDA_SLOT_##_slot] = { \
        .fn   = RC_GDR_UCM_CUDA_FN_##_fn, \
        .hook = (void*)rc_gdr_ucm_cuda_hook_##_slot \
    },

static const rc_gdr_ucm_cuda_slot_t rc_gdr_ucm_cuda_slots[] = {
    RC_GDR_UCM_CUDA_FOREACH_SLOT(RC_GDR_UCM_CUDA_SLOT_INIT)
};


/*
 * Mode UCM: UCX's CUDA module reports, this forwards
 */

static void rc_gdr_ucm_cuda_ucm_event(ucm_event_type_t event_type,
                                      ucm_event_t *event, void *arg)
{
    CUmemGenericAllocationHandle handle;
    rc_gdr_ucm_cuda_mem_kind_t kind;

    if (rc_gdr_ucm_cuda_in_driver > 0) {
        /* a release call hooked here is the outer one: it has reported */
        return;
    }

    /* cuMemFreeHost and cudaFreeHost are reported as host memory. UCM
     * reports cuMemUnmap as device memory: a mapping still in place has an
     * allocation handle, a cuMemAlloc allocation has none. */
    if (event->mem_type.mem_type == UCS_MEMORY_TYPE_HOST) {
        kind = RC_GDR_UCM_CUDA_MEM_HOST_PINNED;
    } else if ((rc_gdr_ucm_cuda_retain_handle != NULL) &&
               (rc_gdr_ucm_cuda_retain_handle(&handle,
                                              event->mem_type.address) ==
                CUDA_SUCCESS)) {
        rc_gdr_ucm_cuda_release_handle(handle);
        kind = RC_GDR_UCM_CUDA_MEM_VMM;
    } else {
        kind = RC_GDR_UCM_CUDA_MEM_DEVICE;
    }

    rc_gdr_ucm_cuda_dispatch(event->mem_type.address, event->mem_type.size,
                             kind);
}

static int rc_gdr_ucm_cuda_find_module_cb(struct dl_phdr_info *info,
                                          size_t size, void *arg)
{
    const char *base;

    if ((info->dlpi_name == NULL) || (info->dlpi_name[0] == '\0')) {
        return 0;
    }

    base = strrchr(info->dlpi_name, '/');
    base = (base != NULL) ? (base + 1) : info->dlpi_name;
    return !strncmp(base, RC_GDR_UCM_CUDA_UCM_MODULE,
                    strlen(RC_GDR_UCM_CUDA_UCM_MODULE));
}

/*
 * Subscribe to UCM_EVENT_MEM_TYPE_FREE. The subscription loads UCM's modules;
 * only libucm_cuda makes the event fire, so without it (auto mode) the
 * subscription is dropped again.
 */
static ucs_status_t rc_gdr_ucm_cuda_ucm_subscribe(int forced)
{
    ucs_status_t status;

    status = ucm_set_event_handler(UCM_EVENT_MEM_TYPE_FREE,
                                   RC_GDR_UCM_CUDA_UCM_PRIORITY,
                                   rc_gdr_ucm_cuda_ucm_event, NULL);
    if (status != UCS_OK) {
        ucs_log(forced ? UCS_LOG_LEVEL_DIAG : UCS_LOG_LEVEL_DEBUG,
                "cannot subscribe to UCM CUDA free events: %s",
                ucs_status_string(status));
        return status;
    }

    if (!forced && !dl_iterate_phdr(rc_gdr_ucm_cuda_find_module_cb, NULL)) {
        ucs_debug("%s is not loaded: UCM delivers no CUDA free events",
                  RC_GDR_UCM_CUDA_UCM_MODULE);
        ucm_unset_event_handler(UCM_EVENT_MEM_TYPE_FREE,
                                rc_gdr_ucm_cuda_ucm_event, NULL);
        return UCS_ERR_UNSUPPORTED;
    }

    return UCS_OK;
}


/*
 * Mode HOOKS
 */

static int rc_gdr_ucm_cuda_is_patched(void *func)
{
    unsigned i;

    for (i = 0; i < rc_gdr_ucm_cuda_num_sites; ++i) {
        if (rc_gdr_ucm_cuda_sites[i].address == func) {
            return 1;
        }
    }

    return 0;
}

/* A free slot for one more address of the release call fn */
static int rc_gdr_ucm_cuda_slot_get(rc_gdr_ucm_cuda_fn_t fn)
{
    unsigned slot;

    for (slot = 0; slot < RC_GDR_UCM_CUDA_SLOT_LAST; ++slot) {
        if ((rc_gdr_ucm_cuda_slots[slot].fn == fn) &&
            (rc_gdr_ucm_cuda_orig[slot] == NULL)) {
            return slot;
        }
    }

    return -1;
}

/*
 * Patch func for fn, once per address; 0 when it could not be patched. With
 * only_unpatched, an entry point UCM's CUDA module already patched is left
 * to it: nothing is patched twice.
 */
static int rc_gdr_ucm_cuda_hook_address(rc_gdr_ucm_cuda_fn_t fn, void *func,
                                        const char *name, int only_unpatched)
{
    rc_gdr_ucm_cuda_site_t *site;
    const char *method;
    ucs_status_t status;
    int slot;

    if ((func == NULL) || rc_gdr_ucm_cuda_is_patched(func)) {
        return 1;
    }

    if (only_unpatched && rc_gdr_ucm_bistro_is_patched(func)) {
        ucs_debug("%s at %p is reported by UCM", name, func);
        return 1;
    }

    slot = rc_gdr_ucm_cuda_slot_get(fn);
    if (slot < 0) {
        ucs_diag("cannot hook %s at %p: no hook left for its kind", name,
                 func);
        return 0;
    }

    status = rc_gdr_ucm_bistro_patch(func, rc_gdr_ucm_cuda_slots[slot].hook,
                                     name, &rc_gdr_ucm_cuda_orig[slot],
                                     &method);
    if (status != UCS_OK) {
        rc_gdr_ucm_cuda_orig[slot] = NULL;
        ucs_diag("cannot hook %s at %p: %s; memory it releases is found "
                 "stale only by the buffer-id check (HINT: a UCX with "
                 "libucm_cuda delivers the events instead)", name, func,
                 ucs_status_string(status));
        return 0;
    }

    site          = &rc_gdr_ucm_cuda_sites[rc_gdr_ucm_cuda_num_sites++];
    site->address = func;
    site->method  = method;
    ucs_strncpy_safe(site->name, name, sizeof(site->name));
    ucs_debug("hooked %s at %p (%s)", name, func, method);
    return 1;
}

/*
 * Keep an object resident: code that was patched, or that patched code
 * jumps to, must never be unmapped.
 */
static void rc_gdr_ucm_cuda_pin(const void *addr)
{
    Dl_info info;
    void *handle;

    if ((dladdr(addr, &info) == 0) || (info.dli_fname == NULL)) {
        return;
    }

    /* the main program has no name to open, and never goes away */
    handle = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    if (handle == NULL) {
        (void)dlerror();
    }
}

/*
 * Patch the release calls' entry points. With only_unpatched (mode UCM),
 * those UCM's CUDA module left out: it patches the exports it knows of, not
 * the addresses cuGetProcAddress() adds (cuMemFreeAsync for per-thread
 * streams is cuMemFreeAsync_ptsz, which UCM does not list).
 */
static ucs_status_t rc_gdr_ucm_cuda_hooks_install(void *driver,
                                                  int only_unpatched)
{
    rc_gdr_ucm_cuda_get_proc_v2_func_t get_proc_v2;
    rc_gdr_ucm_cuda_get_proc_v1_func_t get_proc_v1;
    const rc_gdr_ucm_cuda_target_t *target;
    uct_rc_gdr_cuda_driver_info_t drv_info;
    CUdriverProcAddressQueryResult qres;
    char name[RC_GDR_UCM_CUDA_NAME_MAX];
    int versions[2];
    unsigned num_failed, v, f;
    CUresult res;
    void *func;

    get_proc_v2 = (rc_gdr_ucm_cuda_get_proc_v2_func_t)dlsym(driver,
                                                    "cuGetProcAddress_v2");
    get_proc_v1 = (get_proc_v2 != NULL) ? NULL :
                  (rc_gdr_ucm_cuda_get_proc_v1_func_t)dlsym(driver,
                                                    "cuGetProcAddress");

    versions[0] = RC_GDR_UCM_CUDA_PROC_VERSION;
    versions[1] = RC_GDR_UCM_CUDA_PROC_VERSION;
    if ((uct_rc_gdr_cuda_driver_info(&drv_info) == UCS_OK) &&
        (drv_info.driver_version > 0)) {
        versions[1] = drv_info.driver_version;
    }

    rc_gdr_ucm_cuda_pin((void*)rc_gdr_ucm_cuda_dispatch);

    num_failed = 0;
    for (target = rc_gdr_ucm_cuda_targets;
         target < (rc_gdr_ucm_cuda_targets +
                   ucs_static_array_size(rc_gdr_ucm_cuda_targets));
         ++target) {
        if (!target->by_proc_address) {
            func        = dlsym(driver, target->symbol);
            num_failed += !rc_gdr_ucm_cuda_hook_address(target->fn, func,
                                                        target->symbol,
                                                        only_unpatched);
            continue;
        }

        for (v = 0; v < ucs_static_array_size(versions); ++v) {
            for (f = 0; f < ucs_static_array_size(rc_gdr_ucm_cuda_proc_flags);
                 ++f) {
                func = NULL;
                if (get_proc_v2 != NULL) {
                    res = get_proc_v2(target->symbol, &func, versions[v],
                                      rc_gdr_ucm_cuda_proc_flags[f], &qres);
                } else if (get_proc_v1 != NULL) {
                    res = get_proc_v1(target->symbol, &func, versions[v],
                                      rc_gdr_ucm_cuda_proc_flags[f]);
                } else {
                    break;
                }

                if (res != CUDA_SUCCESS) {
                    continue;
                }

                ucs_snprintf_safe(name, sizeof(name), "%s@proc(%d,0x%x)",
                                  target->symbol, versions[v],
                                  (unsigned)rc_gdr_ucm_cuda_proc_flags[f]);
                num_failed += !rc_gdr_ucm_cuda_hook_address(target->fn, func,
                                                            name,
                                                            only_unpatched);
            }
        }
    }

    ucs_debug("CUDA free events: %u entry points hooked, %u could not be%s",
              rc_gdr_ucm_cuda_num_sites, num_failed,
              only_unpatched ? ", the others are UCM's" : "");
    if (only_unpatched) {
        /* UCM's events stay in force for what could not be hooked */
        return UCS_OK;
    }

    if (rc_gdr_ucm_cuda_num_sites == 0) {
        ucs_diag("the CUDA driver has no release call that could be hooked");
        return UCS_ERR_UNSUPPORTED;
    }

    rc_gdr_ucm_cuda_mode_value = RC_GDR_UCM_CUDA_MODE_HOOKS;
    return (num_failed == 0) ? UCS_OK : UCS_ERR_UNSUPPORTED;
}


/*
 * Installation
 */

static ucs_status_t rc_gdr_ucm_cuda_do_install(void)
{
    const char *env = getenv(RC_GDR_UCM_CUDA_MODE_ENV);
    int want_hooks  = 1;
    int want_ucm    = 1;
    ucs_status_t status;
    void *driver;

    if ((env != NULL) && (*env != '\0') && strcmp(env, "auto")) {
        if (!strcmp(env, "none")) {
            ucs_debug("CUDA free events are off (%s=none)",
                      RC_GDR_UCM_CUDA_MODE_ENV);
            return UCS_ERR_UNSUPPORTED;
        } else if (!strcmp(env, "hooks")) {
            want_ucm = 0;
        } else if (!strcmp(env, "ucm")) {
            want_hooks = 0;
        } else {
            ucs_warn("%s=%s is not one of auto, hooks, ucm, none: using auto",
                     RC_GDR_UCM_CUDA_MODE_ENV, env);
        }
    }

    if (uct_rc_gdr_cuda_init() != UCS_OK) {
        ucs_debug("CUDA free events are off: no usable CUDA driver");
        return UCS_ERR_NO_DEVICE;
    }

    /* The shim's library; from now on never unloaded, as it is patched */
    driver = dlopen(uct_rc_gdr_cuda_library_name(),
                    RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    if (driver == NULL) {
        ucs_debug("CUDA free events are off: %s is not loaded (%s)",
                  uct_rc_gdr_cuda_library_name(), dlerror());
        return UCS_ERR_NO_DEVICE;
    }

    rc_gdr_ucm_cuda_get_range = (rc_gdr_ucm_cuda_get_range_func_t)
                                dlsym(driver, "cuMemGetAddressRange_v2");
    rc_gdr_ucm_cuda_get_attr  = (rc_gdr_ucm_cuda_get_attr_func_t)
                                dlsym(driver, "cuPointerGetAttribute");
    rc_gdr_ucm_cuda_retain_handle  = (rc_gdr_ucm_cuda_retain_handle_func_t)
                                     dlsym(driver,
                                           "cuMemRetainAllocationHandle");
    rc_gdr_ucm_cuda_release_handle = (rc_gdr_ucm_cuda_release_handle_func_t)
                                     dlsym(driver, "cuMemRelease");
    if (rc_gdr_ucm_cuda_release_handle == NULL) {
        rc_gdr_ucm_cuda_retain_handle = NULL;
    }

    if (want_ucm) {
        status = rc_gdr_ucm_cuda_ucm_subscribe(!want_hooks);
        if (status == UCS_OK) {
            rc_gdr_ucm_cuda_mode_value = RC_GDR_UCM_CUDA_MODE_UCM;
            ucs_debug("CUDA free events come from UCM");
            /* auto: the entry points UCM leaves out are hooked here */
            return want_hooks ? rc_gdr_ucm_cuda_hooks_install(driver, 1) :
                                UCS_OK;
        } else if (!want_hooks) {
            return status;
        }
    }

    return rc_gdr_ucm_cuda_hooks_install(driver, 0);
}

ucs_status_t rc_gdr_ucm_cuda_install(void)
{
    ucs_status_t status;

    pthread_mutex_lock(&rc_gdr_ucm_cuda_install_lock);
    if (!rc_gdr_ucm_cuda_installed) {
        rc_gdr_ucm_cuda_install_status = rc_gdr_ucm_cuda_do_install();
        rc_gdr_ucm_cuda_installed      = 1;
    }
    status = rc_gdr_ucm_cuda_install_status;
    pthread_mutex_unlock(&rc_gdr_ucm_cuda_install_lock);

    return status;
}

rc_gdr_ucm_cuda_mode_t rc_gdr_ucm_cuda_mode(void)
{
    rc_gdr_ucm_cuda_mode_t mode;

    pthread_mutex_lock(&rc_gdr_ucm_cuda_install_lock);
    mode = rc_gdr_ucm_cuda_mode_value;
    pthread_mutex_unlock(&rc_gdr_ucm_cuda_install_lock);
    return mode;
}

unsigned rc_gdr_ucm_cuda_hooks(rc_gdr_ucm_cuda_hook_info_t *info,
                               unsigned max)
{
    unsigned i, num;

    pthread_mutex_lock(&rc_gdr_ucm_cuda_install_lock);
    num = rc_gdr_ucm_cuda_num_sites;
    for (i = 0; (i < num) && (i < max); ++i) {
        info[i].name    = rc_gdr_ucm_cuda_sites[i].name;
        info[i].address = rc_gdr_ucm_cuda_sites[i].address;
        info[i].method  = rc_gdr_ucm_cuda_sites[i].method;
    }
    pthread_mutex_unlock(&rc_gdr_ucm_cuda_install_lock);

    return num;
}


/*
 * Subscribers
 */

static int rc_gdr_ucm_cuda_handler_find(rc_gdr_ucm_cuda_free_cb_t cb,
                                        void *arg)
{
    unsigned i;

    for (i = 0; i < rc_gdr_ucm_cuda_num_handlers; ++i) {
        if ((rc_gdr_ucm_cuda_handlers[i].cb == cb) &&
            (rc_gdr_ucm_cuda_handlers[i].arg == arg)) {
            return i;
        }
    }

    return -1;
}

ucs_status_t rc_gdr_ucm_cuda_set_free_handler(rc_gdr_ucm_cuda_free_cb_t cb,
                                              void *arg)
{
    ucs_status_t status;
    unsigned num;

    if (rc_gdr_ucm_cuda_in_dispatch > 0) {
        /* the read lock is held: the write lock would never come */
        ucs_error("cannot subscribe to CUDA free events from a free callback");
        return UCS_ERR_INVALID_PARAM;
    }

    pthread_rwlock_wrlock(&rc_gdr_ucm_cuda_handlers_lock);
    num = rc_gdr_ucm_cuda_num_handlers;
    if (rc_gdr_ucm_cuda_handler_find(cb, arg) >= 0) {
        status = UCS_ERR_ALREADY_EXISTS;
    } else if (num == RC_GDR_UCM_CUDA_MAX_HANDLERS) {
        ucs_error("too many CUDA free event subscribers (%u)", num);
        status = UCS_ERR_EXCEEDS_LIMIT;
    } else {
        rc_gdr_ucm_cuda_handlers[num].cb  = cb;
        rc_gdr_ucm_cuda_handlers[num].arg = arg;
        __atomic_store_n(&rc_gdr_ucm_cuda_num_handlers, num + 1,
                         __ATOMIC_RELEASE);
        status = UCS_OK;
    }
    pthread_rwlock_unlock(&rc_gdr_ucm_cuda_handlers_lock);

    return status;
}

ucs_status_t rc_gdr_ucm_cuda_unset_free_handler(rc_gdr_ucm_cuda_free_cb_t cb,
                                                void *arg)
{
    ucs_status_t status;
    unsigned num;
    int i;

    if (rc_gdr_ucm_cuda_in_dispatch > 0) {
        ucs_error("cannot unsubscribe from CUDA free events from a free "
                  "callback");
        return UCS_ERR_INVALID_PARAM;
    }

    pthread_rwlock_wrlock(&rc_gdr_ucm_cuda_handlers_lock);
    i = rc_gdr_ucm_cuda_handler_find(cb, arg);
    if (i < 0) {
        status = UCS_ERR_NO_ELEM;
    } else {
        num = rc_gdr_ucm_cuda_num_handlers - 1;
        rc_gdr_ucm_cuda_handlers[i] = rc_gdr_ucm_cuda_handlers[num];
        __atomic_store_n(&rc_gdr_ucm_cuda_num_handlers, num,
                         __ATOMIC_RELEASE);
        status = UCS_OK;
    }
    pthread_rwlock_unlock(&rc_gdr_ucm_cuda_handlers_lock);

    return status;
}
