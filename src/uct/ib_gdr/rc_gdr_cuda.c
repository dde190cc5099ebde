/**
 * rc_gdr: the CUDA driver shim (see rc_gdr_cuda.h). Its entry-point table is
 * rc_gdr_cuda_int.h; allocations and copies only tests make are test code
 * (test/gtest/cuda_alloc.c), over that table.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "rc_gdr_cuda_int.h"
#include "rc_gdr_glue_math.h"

#include <ucs/debug/log_def.h>
#include <ucs/sys/string.h>

#include <cuda.h>

#include <ctype.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>


/*
 * The ABI the function types of the entry-point table (rc_gdr_cuda_int.h)
 * describe. Every entry point used here has had its current signature since
 * CUDA 12.0, the first driver that has cuGetProcAddress_v2, so asking for
 * 12.0 gives the same functions from every newer driver, whatever headers
 * this file was compiled with.
 */
#define UCT_RC_GDR_CUDA_API_VERSION 12000


#define UCT_RC_GDR_CUDA_FN_NAME_INIT(_member, _sym, _required) \
    ._member = #_sym,

#define UCT_RC_GDR_CUDA_FN_SYM(_member, _sym, _required) \
    { #_sym, offsetof(uct_rc_gdr_cuda_fn_t, _member), _required },


typedef struct {
    const char *sym;        /* versioned export */
    size_t     offset;      /* in uct_rc_gdr_cuda_fn_t */
    int        required;
} uct_rc_gdr_cuda_sym_t;

typedef struct {
    int                  available;
    int                  loaded;       /* the load attempt is over */
    void                 *handle;
    char                 library[PATH_MAX];
    int                  driver_version;
    int                  by_proc_address;
    unsigned             num_missing;
    int                  emulated;
    int                  placed;
    uct_rc_gdr_cuda_fn_t fn;
} uct_rc_gdr_cuda_driver_t;

/* A context made current for one driver call, and how to undo it */
typedef struct {
    int       pushed;
    int       retained;
    CUdevice  device;
} uct_rc_gdr_cuda_ctx_scope_t;


const uct_rc_gdr_cuda_fn_names_t uct_rc_gdr_cuda_fn_names = {
    UCT_RC_GDR_CUDA_FOREACH_FN(UCT_RC_GDR_CUDA_FN_NAME_INIT)
};

static const uct_rc_gdr_cuda_sym_t uct_rc_gdr_cuda_syms[] = {
    UCT_RC_GDR_CUDA_FOREACH_FN(UCT_RC_GDR_CUDA_FN_SYM)
};

#define UCT_RC_GDR_CUDA_NUM_SYMS ucs_static_array_size(uct_rc_gdr_cuda_syms)

static uct_rc_gdr_cuda_driver_t uct_rc_gdr_cuda_drv;
static pthread_once_t           uct_rc_gdr_cuda_once = PTHREAD_ONCE_INIT;


#define UCT_RC_GDR_CUDA_FN(_member) (uct_rc_gdr_cuda_drv.fn._member)

/*
 * Enter a wrapper: load the driver on first use; answer NO_DEVICE without a
 * driver and UNSUPPORTED when this driver lacks the entry point.
 */
#define UCT_RC_GDR_CUDA_ENTER(_member) \
    do { \
        if (!uct_rc_gdr_cuda_ready()) { \
            return UCS_ERR_NO_DEVICE; \
        } \
        if (UCT_RC_GDR_CUDA_FN(_member) == NULL) { \
            return uct_rc_gdr_cuda_missing(uct_rc_gdr_cuda_fn_names._member); \
        } \
    } while (0)

/* Call an entry point; a failure is logged at _level with the driver's text */
#define UCT_RC_GDR_CUDA_CALL(_level, _member, ...) \
    uct_rc_gdr_cuda_result(UCT_RC_GDR_CUDA_FN(_member)(__VA_ARGS__), \
                           _level, uct_rc_gdr_cuda_fn_names._member)


static ucs_status_t uct_rc_gdr_cuda_status(CUresult res)
{
    switch (res) {
    case CUDA_SUCCESS:
        return UCS_OK;
    case CUDA_ERROR_NOT_READY:
        return UCS_INPROGRESS;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_DEVICE:
        return UCS_ERR_INVALID_PARAM;
    case CUDA_ERROR_OUT_OF_MEMORY:
        return UCS_ERR_NO_MEMORY;
    case CUDA_ERROR_NOT_SUPPORTED:
        return UCS_ERR_UNSUPPORTED;
    case CUDA_ERROR_NOT_FOUND:
        return UCS_ERR_NO_ELEM;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
        return UCS_ERR_NO_DEVICE;
    default:
        return UCS_ERR_IO_ERROR;
    }
}

const char *uct_rc_gdr_cuda_strerror(int result)
{
    static __thread char buf[32];
    const char *str;

    if ((UCT_RC_GDR_CUDA_FN(get_error_string) != NULL) &&
        (UCT_RC_GDR_CUDA_FN(get_error_string)((CUresult)result, &str) ==
         CUDA_SUCCESS) && (str != NULL)) {
        return str;
    }

    snprintf(buf, sizeof(buf), "CUDA error %d", result);
    return buf;
}

ucs_status_t uct_rc_gdr_cuda_result(CUresult res, ucs_log_level_t level,
                                    const char *func)
{
    if (ucs_likely(res == CUDA_SUCCESS)) {
        return UCS_OK;
    }

    ucs_log(level, "%s() failed: %s (%d)", func, uct_rc_gdr_cuda_strerror(res),
            (int)res);
    return uct_rc_gdr_cuda_status(res);
}

ucs_status_t uct_rc_gdr_cuda_missing(const char *func)
{
    ucs_debug("the CUDA driver %s has no %s()", uct_rc_gdr_cuda_drv.library,
              func);
    return UCS_ERR_UNSUPPORTED;
}

const char *uct_rc_gdr_cuda_library_name(void)
{
    const char *env;

    if (uct_rc_gdr_cuda_drv.loaded) {
        return uct_rc_gdr_cuda_drv.library;
    }

    env = getenv(UCT_RC_GDR_CUDA_LIBRARY_ENV);
    return ((env != NULL) && (*env != '\0')) ? env :
           UCT_RC_GDR_CUDA_LIBRARY_DEFAULT;
}

/*
 * Find one entry point: through cuGetProcAddress_v2, which picks the version
 * matching UCT_RC_GDR_CUDA_API_VERSION, and else by its versioned export.
 */
static void *uct_rc_gdr_cuda_resolve(__typeof__(cuGetProcAddress_v2) *get_proc,
                                     const uct_rc_gdr_cuda_sym_t *sym,
                                     int *by_dlsym_p)
{
    CUdriverProcAddressQueryResult qres = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    void *func                          = NULL;
    char name[64];
    char *suffix;
    CUresult res;

    if (get_proc != NULL) {
        /* "cuMemAlloc_v2" is "cuMemAlloc" to cuGetProcAddress */
        ucs_strncpy_safe(name, sym->sym, sizeof(name));
        suffix = strrchr(name, '_');
        if ((suffix != NULL) && (suffix[1] == 'v') &&
            isdigit((unsigned char)suffix[2])) {
            *suffix = '\0';
        }

        res = get_proc(name, &func, UCT_RC_GDR_CUDA_API_VERSION,
                       CU_GET_PROC_ADDRESS_LEGACY_STREAM, &qres);
        if ((res == CUDA_SUCCESS) && (qres == CU_GET_PROC_ADDRESS_SUCCESS) &&
            (func != NULL)) {
            *by_dlsym_p = 0;
            return func;
        }
    }

    *by_dlsym_p = 1;
    return dlsym(uct_rc_gdr_cuda_drv.handle, sym->sym);
}

static void uct_rc_gdr_cuda_load(void)
{
    uct_rc_gdr_cuda_driver_t *drv = &uct_rc_gdr_cuda_drv;
    const char *env               = getenv(UCT_RC_GDR_CUDA_LIBRARY_ENV);
    int explicit_library          = (env != NULL) && (*env != '\0');
    __typeof__(cuGetProcAddress_v2) *get_proc;
    const uct_rc_gdr_cuda_sym_t *sym;
    int (*placed_fn)(void);
    int by_dlsym, num_dlsym;
    void *func;
    CUresult res;

    ucs_strncpy_safe(drv->library, uct_rc_gdr_cuda_library_name(),
                     sizeof(drv->library));

    /* RTLD_LOCAL: the driver's symbols must not satisfy anyone else's
     * references (an application may link its own libcuda) */
    drv->handle = dlopen(drv->library, RTLD_NOW | RTLD_LOCAL);
    if (drv->handle == NULL) {
        /* No driver is the normal case on a host-only machine; a library the
         * user named that does not load is a mistake worth showing */
        ucs_log(explicit_library ? UCS_LOG_LEVEL_WARN : UCS_LOG_LEVEL_DEBUG,
                "CUDA support is off: cannot load %s (%s)", drv->library,
                dlerror());
        goto out;
    }

    /* Absent before CUDA 12.0; then every entry point comes from dlsym */
    get_proc  = (__typeof__(cuGetProcAddress_v2)*)dlsym(drv->handle,
                                                         "cuGetProcAddress_v2");
    num_dlsym = 0;
    for (sym = uct_rc_gdr_cuda_syms;
         sym < uct_rc_gdr_cuda_syms + UCT_RC_GDR_CUDA_NUM_SYMS; ++sym) {
        func = uct_rc_gdr_cuda_resolve(get_proc, sym, &by_dlsym);
        if (func == NULL) {
            if (sym->required) {
                ucs_log(explicit_library ? UCS_LOG_LEVEL_WARN :
                                           UCS_LOG_LEVEL_DEBUG,
                        "CUDA support is off: %s has no %s()", drv->library,
                        sym->sym);
                goto err_close;
            }
            ucs_debug("%s has no %s(): its uses will be unsupported",
                      drv->library, sym->sym);
            ++drv->num_missing;
            continue;
        }

        num_dlsym += by_dlsym;
        *(void**)((char*)&drv->fn + sym->offset) = func;
    }

    drv->by_proc_address = (get_proc != NULL) && (num_dlsym == 0);
    /* The stand-in driver exports its test control; a real one never does */
    drv->emulated        = (dlsym(drv->handle, "rc_gdr_fake_cuda_control") !=
                            NULL);
    placed_fn            = (int (*)(void))dlsym(drv->handle,
                                                 "rc_gdr_fake_cuda_placed");
    drv->placed          = drv->emulated && (placed_fn != NULL) &&
                           placed_fn();

    res = drv->fn.init(0);
    if (res != CUDA_SUCCESS) {
        /* The library stays open: a driver that ran cuInit may have started
         * threads, and unloading it under them is not safe */
        ucs_log((res == CUDA_ERROR_NO_DEVICE) ? UCS_LOG_LEVEL_DEBUG :
                                                 UCS_LOG_LEVEL_DIAG,
                "CUDA support is off: cuInit() in %s failed: %s (%d)",
                drv->library, uct_rc_gdr_cuda_strerror(res), (int)res);
        memset(&drv->fn, 0, sizeof(drv->fn));
        goto out;
    }

    if (drv->fn.driver_get_version(&drv->driver_version) != CUDA_SUCCESS) {
        drv->driver_version = 0;
    }

    ucs_debug("CUDA driver %s version %d, %u optional entry points missing, "
              "resolved by %s", drv->library, drv->driver_version,
              drv->num_missing,
              drv->by_proc_address ? "cuGetProcAddress_v2" : "dlsym");
    drv->available = 1;
    goto out;

err_close:
    memset(&drv->fn, 0, sizeof(drv->fn));
    dlclose(drv->handle);
    drv->handle = NULL;
out:
    drv->loaded = 1;
}

static UCS_F_ALWAYS_INLINE int uct_rc_gdr_cuda_ready(void)
{
    pthread_once(&uct_rc_gdr_cuda_once, uct_rc_gdr_cuda_load);
    return uct_rc_gdr_cuda_drv.available;
}

ucs_status_t uct_rc_gdr_cuda_init(void)
{
    return uct_rc_gdr_cuda_ready() ? UCS_OK : UCS_ERR_NO_DEVICE;
}

int uct_rc_gdr_cuda_is_available(void)
{
    return uct_rc_gdr_cuda_ready();
}

const uct_rc_gdr_cuda_fn_t *uct_rc_gdr_cuda_fn_table(void)
{
    return uct_rc_gdr_cuda_ready() ? &uct_rc_gdr_cuda_drv.fn : NULL;
}

ucs_status_t uct_rc_gdr_cuda_driver_info(uct_rc_gdr_cuda_driver_info_t *info_p)
{
    if (!uct_rc_gdr_cuda_ready()) {
        return UCS_ERR_NO_DEVICE;
    }

    info_p->library         = uct_rc_gdr_cuda_drv.library;
    info_p->driver_version  = uct_rc_gdr_cuda_drv.driver_version;
    info_p->by_proc_address = uct_rc_gdr_cuda_drv.by_proc_address;
    info_p->num_missing     = uct_rc_gdr_cuda_drv.num_missing;
    info_p->emulated        = uct_rc_gdr_cuda_drv.emulated;
    info_p->placed          = uct_rc_gdr_cuda_drv.placed;
    return UCS_OK;
}


/*
 * Contexts
 */

/*
 * Some calls need a current context (cuMemGetAddressRange, the DMA-BUF
 * export); the caller may be a progress thread that never made one current.
 * Push the allocation's own context, or the device's primary context for
 * memory that has none (pool and VMM memory).
 */
static CUresult
uct_rc_gdr_cuda_ctx_scope_enter(CUcontext ctx, int ordinal,
                                uct_rc_gdr_cuda_ctx_scope_t *scope)
{
    CUresult res;

    scope->pushed   = 0;
    scope->retained = 0;

    if ((UCT_RC_GDR_CUDA_FN(ctx_push_current) == NULL) ||
        (UCT_RC_GDR_CUDA_FN(ctx_pop_current) == NULL)) {
        return CUDA_ERROR_NOT_SUPPORTED;
    }

    if (ctx == NULL) {
        if ((ordinal < 0) ||
            (UCT_RC_GDR_CUDA_FN(primary_ctx_retain) == NULL) ||
            (UCT_RC_GDR_CUDA_FN(primary_ctx_release) == NULL)) {
            return CUDA_ERROR_INVALID_CONTEXT;
        }

        res = UCT_RC_GDR_CUDA_FN(device_get)(&scope->device, ordinal);
        if (res != CUDA_SUCCESS) {
            return res;
        }

        res = UCT_RC_GDR_CUDA_FN(primary_ctx_retain)(&ctx, scope->device);
        if (res != CUDA_SUCCESS) {
            return res;
        }

        scope->retained = 1;
    }

    res = UCT_RC_GDR_CUDA_FN(ctx_push_current)(ctx);
    if (res != CUDA_SUCCESS) {
        if (scope->retained) {
            UCT_RC_GDR_CUDA_FN(primary_ctx_release)(scope->device);
        }
        return res;
    }

    scope->pushed = 1;
    return CUDA_SUCCESS;
}

static void uct_rc_gdr_cuda_ctx_scope_leave(uct_rc_gdr_cuda_ctx_scope_t *scope)
{
    CUcontext ctx;

    if (scope->pushed) {
        UCT_RC_GDR_CUDA_FN(ctx_pop_current)(&ctx);
    }
    if (scope->retained) {
        UCT_RC_GDR_CUDA_FN(primary_ctx_release)(scope->device);
    }
}

static ucs_status_t uct_rc_gdr_cuda_device_get(int ordinal, CUdevice *dev_p)
{
    CUresult res;

    res = UCT_RC_GDR_CUDA_FN(device_get)(dev_p, ordinal);
    if (res != CUDA_SUCCESS) {
        ucs_debug("no CUDA device with ordinal %d: %s", ordinal,
                  uct_rc_gdr_cuda_strerror(res));
        return UCS_ERR_INVALID_PARAM;
    }

    return UCS_OK;
}

ucs_status_t uct_rc_gdr_cuda_ctx_retain(int ordinal,
                                        uct_rc_gdr_cuda_ctx_h *ctx_p)
{
    CUcontext ctx;
    CUdevice dev;
    ucs_status_t status;

    UCT_RC_GDR_CUDA_ENTER(primary_ctx_retain);

    status = uct_rc_gdr_cuda_device_get(ordinal, &dev);
    if (status != UCS_OK) {
        return status;
    }

    status = UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, primary_ctx_retain,
                                  &ctx, dev);
    if (status != UCS_OK) {
        return status;
    }

    *ctx_p = (uct_rc_gdr_cuda_ctx_h)ctx;
    return UCS_OK;
}

ucs_status_t uct_rc_gdr_cuda_ctx_release(int ordinal)
{
    CUdevice dev;
    ucs_status_t status;

    UCT_RC_GDR_CUDA_ENTER(primary_ctx_release);

    status = uct_rc_gdr_cuda_device_get(ordinal, &dev);
    if (status != UCS_OK) {
        return status;
    }

    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, primary_ctx_release, dev);
}

ucs_status_t uct_rc_gdr_cuda_ctx_set_current(uct_rc_gdr_cuda_ctx_h ctx)
{
    UCT_RC_GDR_CUDA_ENTER(ctx_set_current);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, ctx_set_current,
                                (CUcontext)ctx);
}

ucs_status_t uct_rc_gdr_cuda_ctx_get_current(uct_rc_gdr_cuda_ctx_h *ctx_p)
{
    CUcontext ctx;
    ucs_status_t status;

    UCT_RC_GDR_CUDA_ENTER(ctx_get_current);

    status = UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, ctx_get_current, &ctx);
    if (status != UCS_OK) {
        return status;
    }

    *ctx_p = (uct_rc_gdr_cuda_ctx_h)ctx;
    return UCS_OK;
}

ucs_status_t uct_rc_gdr_cuda_ctx_activate(int ordinal,
                                          uct_rc_gdr_cuda_ctx_h *ctx_p)
{
    uct_rc_gdr_cuda_ctx_h ctx;
    ucs_status_t status;

    status = uct_rc_gdr_cuda_ctx_retain(ordinal, &ctx);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_rc_gdr_cuda_ctx_set_current(ctx);
    if (status != UCS_OK) {
        goto err_release;
    }

    *ctx_p = ctx;
    return UCS_OK;

err_release:
    uct_rc_gdr_cuda_ctx_release(ordinal);
    return status;
}


/*
 * Devices
 */

ucs_status_t uct_rc_gdr_cuda_device_count(int *count_p)
{
    int count;
    ucs_status_t status;

    UCT_RC_GDR_CUDA_ENTER(device_get_count);

    status = UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, device_get_count,
                                  &count);
    if (status != UCS_OK) {
        return status;
    }

    *count_p = count;
    return UCS_OK;
}

/* 1 when the driver reports the attribute; an old driver may not know it */
static int uct_rc_gdr_cuda_device_attr_get(CUdevice dev, int ordinal,
                                           CUdevice_attribute attr,
                                           const char *attr_name, int *value_p)
{
    CUresult res;
    int value;

    res = UCT_RC_GDR_CUDA_FN(device_get_attribute)(&value, attr, dev);
    if (res != CUDA_SUCCESS) {
        ucs_debug("CUDA device %d: cannot read %s: %s", ordinal, attr_name,
                  uct_rc_gdr_cuda_strerror(res));
        return 0;
    }

    *value_p = value;
    return 1;
}

/* Read CU_DEVICE_ATTRIBUTE_<_cu_attr> into _field; on success set the
 * UCT_RC_GDR_CUDA_DEV_ATTR_<_bit> flag */
#define UCT_RC_GDR_CUDA_DEV_ATTR_GET(_attr_p, _dev, _bit, _cu_attr, _field) \
    if (uct_rc_gdr_cuda_device_attr_get(_dev, (_attr_p)->ordinal, \
                                        CU_DEVICE_ATTRIBUTE_##_cu_attr, \
                                        #_cu_attr, &(_attr_p)->_field)) { \
        (_attr_p)->valid_mask |= UCT_RC_GDR_CUDA_DEV_ATTR_##_bit; \
    }

ucs_status_t
uct_rc_gdr_cuda_device_attr_query(int ordinal,
                                  uct_rc_gdr_cuda_dev_attr_t *attr_p)
{
    uct_rc_gdr_cuda_dev_attr_t attr = {0};
    CUdevice dev;
    ucs_status_t status;
    CUresult res;
    char *p;

    UCT_RC_GDR_CUDA_ENTER(device_get_attribute);

    status = uct_rc_gdr_cuda_device_get(ordinal, &dev);
    if (status != UCS_OK) {
        return status;
    }

    attr.ordinal = ordinal;

    if (UCT_RC_GDR_CUDA_FN(device_get_name) != NULL) {
        res = UCT_RC_GDR_CUDA_FN(device_get_name)(attr.name,
                                                  sizeof(attr.name), dev);
        if (res == CUDA_SUCCESS) {
            attr.name[sizeof(attr.name) - 1] = '\0';
            attr.valid_mask                 |= UCT_RC_GDR_CUDA_DEV_ATTR_NAME;
        }
    }

    if (UCT_RC_GDR_CUDA_FN(device_get_pci_bus_id) != NULL) {
        res = UCT_RC_GDR_CUDA_FN(device_get_pci_bus_id)(attr.pci_bus_id,
                                                        sizeof(attr.pci_bus_id),
                                                        dev);
        if (res == CUDA_SUCCESS) {
            /* The driver prints hex digits in upper case; sysfs, which the
             * topology code compares against, uses lower case */
            attr.pci_bus_id[sizeof(attr.pci_bus_id) - 1] = '\0';
            for (p = attr.pci_bus_id; *p != '\0'; ++p) {
                *p = tolower((unsigned char)*p);
            }
            attr.valid_mask |= UCT_RC_GDR_CUDA_DEV_ATTR_PCI_BUS_ID;
        } else {
            ucs_debug("CUDA device %d: cuDeviceGetPCIBusId() failed: %s",
                      ordinal, uct_rc_gdr_cuda_strerror(res));
        }
    }

    if (uct_rc_gdr_cuda_device_attr_get(
                dev, ordinal, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                "COMPUTE_CAPABILITY_MAJOR", &attr.cc_major) &&
        uct_rc_gdr_cuda_device_attr_get(
                dev, ordinal, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                "COMPUTE_CAPABILITY_MINOR", &attr.cc_minor)) {
        attr.valid_mask |= UCT_RC_GDR_CUDA_DEV_ATTR_CC;
    }

    UCT_RC_GDR_CUDA_DEV_ATTR_GET(&attr, dev, GDR,
                                 GPU_DIRECT_RDMA_SUPPORTED, gdr_supported);
    UCT_RC_GDR_CUDA_DEV_ATTR_GET(&attr, dev, DMABUF,
                                 DMA_BUF_SUPPORTED, dmabuf_supported);
    UCT_RC_GDR_CUDA_DEV_ATTR_GET(&attr, dev, WRITES_ORDERING,
                                 GPU_DIRECT_RDMA_WRITES_ORDERING,
                                 writes_ordering);
    UCT_RC_GDR_CUDA_DEV_ATTR_GET(&attr, dev, FLUSH_OPTIONS,
                                 GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
                                 flush_writes_options);
    UCT_RC_GDR_CUDA_DEV_ATTR_GET(&attr, dev, VMM,
                                 VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                 vmm_supported);
    UCT_RC_GDR_CUDA_DEV_ATTR_GET(&attr, dev, MEMPOOLS,
                                 MEMORY_POOLS_SUPPORTED, mempools_supported);

    /* The numbers, not the string: UCX's topology takes a bus id, as its
     * CUDA transports give it */
    if (uct_rc_gdr_cuda_device_attr_get(dev, ordinal,
                                        CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID,
                                        "PCI_DOMAIN_ID", &attr.pci_domain) &&
        uct_rc_gdr_cuda_device_attr_get(dev, ordinal,
                                        CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
                                        "PCI_BUS_ID", &attr.pci_bus) &&
        uct_rc_gdr_cuda_device_attr_get(dev, ordinal,
                                        CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID,
                                        "PCI_DEVICE_ID", &attr.pci_device)) {
        attr.valid_mask |= UCT_RC_GDR_CUDA_DEV_ATTR_PCI_LOCATION;
    }

    *attr_p = attr;
    return UCS_OK;
}

const char *uct_rc_gdr_cuda_writes_ordering_str(int writes_ordering)
{
    switch (writes_ordering) {
    case UCT_RC_GDR_CUDA_WRITES_ORDERING_NONE:
        return "none";
    case UCT_RC_GDR_CUDA_WRITES_ORDERING_OWNER:
        return "owner";
    case UCT_RC_GDR_CUDA_WRITES_ORDERING_ALL_DEVICES:
        return "all-devices";
    default:
        return "unknown";
    }
}


/*
 * Memory classification
 */

const char *uct_rc_gdr_cuda_mem_kind_str(uct_rc_gdr_cuda_mem_kind_t kind)
{
    switch (kind) {
    case UCT_RC_GDR_CUDA_MEM_HOST:
        return "host";
    case UCT_RC_GDR_CUDA_MEM_PINNED:
        return "cuda-pinned-host";
    case UCT_RC_GDR_CUDA_MEM_DEVICE:
        return "cuda-device";
    case UCT_RC_GDR_CUDA_MEM_MANAGED:
        return "cuda-managed";
    case UCT_RC_GDR_CUDA_MEM_POOL:
        return "cuda-pool";
    default:
        return "invalid";
    }
}

static void uct_rc_gdr_cuda_mem_info_set_host(const void *addr, size_t len,
                                              uct_rc_gdr_cuda_mem_info_t *info)
{
    memset(info, 0, sizeof(*info));
    info->kind           = UCT_RC_GDR_CUDA_MEM_HOST;
    info->mem_type       = UCS_MEMORY_TYPE_HOST;
    info->device_ordinal = -1;
    info->base_address   = (void*)addr;
    info->alloc_length   = len;
}

/* The allocation holding addr, as cuMemGetAddressRange sees it */
static CUresult uct_rc_gdr_cuda_addr_range(const void *addr, CUcontext ctx,
                                           int ordinal, CUdeviceptr *base_p,
                                           size_t *size_p)
{
    uct_rc_gdr_cuda_ctx_scope_t scope;
    CUresult res;

    res = UCT_RC_GDR_CUDA_FN(mem_get_address_range)(base_p, size_p,
                                                    (CUdeviceptr)addr);
    if (res != CUDA_ERROR_INVALID_CONTEXT) {
        return res;
    }

    res = uct_rc_gdr_cuda_ctx_scope_enter(ctx, ordinal, &scope);
    if (res != CUDA_SUCCESS) {
        return res;
    }

    res = UCT_RC_GDR_CUDA_FN(mem_get_address_range)(base_p, size_p,
                                                    (CUdeviceptr)addr);
    uct_rc_gdr_cuda_ctx_scope_leave(&scope);
    return res;
}

/* What one cuPointerGetAttributes call tells about a pointer */
typedef struct {
    unsigned int       mem_type;    /* CUmemorytype, 0 when unknown */
    unsigned int       is_managed;
    int                ordinal;
    unsigned long long buffer_id;
    CUcontext          ctx;
    CUmemoryPool       mempool;
} uct_rc_gdr_cuda_ptr_attrs_t;

static CUresult uct_rc_gdr_cuda_ptr_attrs_get(const void *addr,
                                              int with_mempool,
                                              uct_rc_gdr_cuda_ptr_attrs_t *pa)
{
    CUpointer_attribute attrs[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        CU_POINTER_ATTRIBUTE_IS_MANAGED,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_BUFFER_ID,
        CU_POINTER_ATTRIBUTE_CONTEXT,
        CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE /* last: CUDA >= 11.3 */
    };
    void *data[] = {&pa->mem_type, &pa->is_managed, &pa->ordinal,
                    &pa->buffer_id, &pa->ctx, &pa->mempool};

    memset(pa, 0, sizeof(*pa));
    pa->ordinal = -1;
    return UCT_RC_GDR_CUDA_FN(pointer_get_attributes)(
                    ucs_static_array_size(attrs) - (with_mempool ? 0 : 1),
                    attrs, data, (CUdeviceptr)addr);
}

ucs_status_t uct_rc_gdr_cuda_mem_query(const void *addr, size_t len,
                                       uct_rc_gdr_cuda_mem_info_t *info_p)
{
    uct_rc_gdr_cuda_ptr_attrs_t pa;
    uct_rc_gdr_cuda_mem_info_t info;
    CUdeviceptr base;
    unsigned flags;
    size_t size;
    CUresult res;

    UCT_RC_GDR_CUDA_ENTER(pointer_get_attributes);

    flags = UCT_RC_GDR_CUDA_MEM_INFO_MEMPOOL;
    res   = uct_rc_gdr_cuda_ptr_attrs_get(addr, 1, &pa);
    if (res == CUDA_ERROR_INVALID_VALUE) {
        /* a driver that does not know the mempool attribute refuses the
         * whole call: ask again without it */
        flags = 0;
        res   = uct_rc_gdr_cuda_ptr_attrs_get(addr, 0, &pa);
    }

    /* cuPointerGetAttributes reports a pointer it does not know as memory
     * type 0; some drivers answer INVALID_VALUE instead. Both are host. */
    if ((res == CUDA_ERROR_INVALID_VALUE) ||
        ((res == CUDA_SUCCESS) && (pa.mem_type == 0))) {
        uct_rc_gdr_cuda_mem_info_set_host(addr, len, info_p);
        return UCS_OK;
    } else if (res != CUDA_SUCCESS) {
        ucs_debug("cuPointerGetAttributes(%p) failed: %s", addr,
                  uct_rc_gdr_cuda_strerror(res));
        return uct_rc_gdr_cuda_status(res);
    }

    memset(&info, 0, sizeof(info));
    info.flags          = flags;
    info.device_ordinal = (pa.ordinal >= 0) ? pa.ordinal : -1;
    info.buffer_id      = pa.buffer_id;
    info.context        = (uct_rc_gdr_cuda_ctx_h)pa.ctx;
    info.mempool        = pa.mempool;

    /* Order matters: managed memory reports memory type DEVICE, and pool
     * memory is device memory whose range the pool may recycle */
    if (pa.is_managed) {
        info.kind     = UCT_RC_GDR_CUDA_MEM_MANAGED;
        info.mem_type = UCS_MEMORY_TYPE_CUDA_MANAGED;
    } else if (pa.mem_type == CU_MEMORYTYPE_HOST) {
        info.kind     = UCT_RC_GDR_CUDA_MEM_PINNED;
        info.mem_type = UCS_MEMORY_TYPE_HOST;
    } else if (pa.mempool != NULL) {
        info.kind     = UCT_RC_GDR_CUDA_MEM_POOL;
        info.mem_type = UCS_MEMORY_TYPE_CUDA;
    } else {
        info.kind     = UCT_RC_GDR_CUDA_MEM_DEVICE;
        info.mem_type = UCS_MEMORY_TYPE_CUDA;
    }

    res = uct_rc_gdr_cuda_addr_range(addr, pa.ctx, info.device_ordinal, &base,
                                     &size);
    if (res == CUDA_SUCCESS) {
        info.base_address = (void*)base;
        info.alloc_length = size;
        info.flags       |= UCT_RC_GDR_CUDA_MEM_INFO_RANGE;
    } else {
        ucs_debug("cuMemGetAddressRange(%p) failed: %s, using the caller's "
                  "range", addr, uct_rc_gdr_cuda_strerror(res));
        info.base_address = (void*)addr;
        info.alloc_length = len;
    }

    *info_p = info;
    return UCS_OK;
}

/* VMM memory: mapped by cuMemMap, no context of its own (unlike cuMemAlloc) */
static int uct_rc_gdr_cuda_mem_is_vmm(const uct_rc_gdr_cuda_mem_info_t *info)
{
    return (info->kind == UCT_RC_GDR_CUDA_MEM_DEVICE) &&
           (info->context == NULL);
}

/*
 * Every address the CUDA allocation routines return is aligned to at least
 * 256 bytes (CUDA C++ Programming Guide, "Device Memory Accesses"), so the
 * bytes from an allocation's end to the next such boundary belong to no
 * other allocation. They count as the allocation's: UCP rounds a
 * whole-allocation registration up to its own alignment (16 bytes).
 */
#define UCT_RC_GDR_CUDA_ALLOC_ALIGN 256

ucs_status_t
uct_rc_gdr_cuda_mem_range_check(const void *addr, size_t len,
                                const uct_rc_gdr_cuda_mem_info_t *info,
                                uintptr_t *end_p)
{
    uintptr_t start = (uintptr_t)addr;
    uct_rc_gdr_cuda_mem_info_t next;
    uintptr_t covered, end;
    ucs_status_t status;

    if (!(info->flags & UCT_RC_GDR_CUDA_MEM_INFO_RANGE)) {
        *end_p = start;
        return UCS_ERR_UNSUPPORTED;
    }

    covered = ucs_align_up_pow2((uintptr_t)info->base_address +
                                info->alloc_length,
                                UCT_RC_GDR_CUDA_ALLOC_ALIGN);
    if ((start < (uintptr_t)info->base_address) || (start > covered) ||
        (len > UINTPTR_MAX - start)) {
        *end_p = covered;
        return UCS_ERR_INVALID_ADDR;
    }

    /* Chunk by chunk: the mapping that starts where the last one ends */
    end = start + len;
    next = *info;
    while ((covered < end) && uct_rc_gdr_cuda_mem_is_vmm(&next)) {
        status = uct_rc_gdr_cuda_mem_query((void*)covered, 1, &next);
        if ((status != UCS_OK) || !uct_rc_gdr_cuda_mem_is_vmm(&next) ||
            !(next.flags & UCT_RC_GDR_CUDA_MEM_INFO_RANGE) ||
            ((uintptr_t)next.base_address != covered) ||
            (next.device_ordinal != info->device_ordinal) ||
            (next.alloc_length == 0)) {
            break;
        }
        covered += next.alloc_length;
    }

    *end_p = covered;
    return (covered >= end) ? UCS_OK : UCS_ERR_INVALID_ADDR;
}

ucs_status_t uct_rc_gdr_cuda_buffer_id(const void *addr, uint64_t *id_p)
{
    unsigned long long id = 0;
    CUresult res;

    UCT_RC_GDR_CUDA_ENTER(pointer_get_attribute);

    res = UCT_RC_GDR_CUDA_FN(pointer_get_attribute)(
                    &id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)addr);
    if (ucs_likely(res == CUDA_SUCCESS)) {
        *id_p = id;
        return UCS_OK;
    } else if (res == CUDA_ERROR_INVALID_VALUE) {
        /* not CUDA memory, or freed: the expected answer for a stale entry */
        return UCS_ERR_NO_ELEM;
    }

    ucs_debug("cuPointerGetAttribute(%p, BUFFER_ID) failed: %s", addr,
              uct_rc_gdr_cuda_strerror(res));
    return uct_rc_gdr_cuda_status(res);
}

ucs_status_t uct_rc_gdr_cuda_set_sync_memops(const void *addr)
{
    unsigned int value = 1;
    CUresult res;

    UCT_RC_GDR_CUDA_ENTER(pointer_set_attribute);

    res = UCT_RC_GDR_CUDA_FN(pointer_set_attribute)(
                    &value, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                    (CUdeviceptr)addr);
    if (res != CUDA_SUCCESS) {
        /* the caller decides what it means (pool memory may refuse) */
        ucs_debug("cuPointerSetAttribute(%p, SYNC_MEMOPS) failed: %s", addr,
                  uct_rc_gdr_cuda_strerror(res));
    }

    return uct_rc_gdr_cuda_status(res);
}


/*
 * DMA-BUF
 */

static CUresult uct_rc_gdr_cuda_dmabuf_get(void *base, size_t len, int *fd_p)
{
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_CONTEXT,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    uct_rc_gdr_cuda_ctx_scope_t scope;
    CUcontext ctx = NULL;
    int ordinal   = -1;
    void *data[]  = {&ctx, &ordinal};
    CUresult res;

    res = UCT_RC_GDR_CUDA_FN(mem_get_handle_for_address_range)(
                    fd_p, (CUdeviceptr)base, len,
                    CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (res != CUDA_ERROR_INVALID_CONTEXT) {
        return res;
    }

    res = UCT_RC_GDR_CUDA_FN(pointer_get_attributes)(
                    ucs_static_array_size(attrs), attrs, data,
                    (CUdeviceptr)base);
    if (res != CUDA_SUCCESS) {
        return res;
    }

    res = uct_rc_gdr_cuda_ctx_scope_enter(ctx, ordinal, &scope);
    if (res != CUDA_SUCCESS) {
        return res;
    }

    res = UCT_RC_GDR_CUDA_FN(mem_get_handle_for_address_range)(
                    fd_p, (CUdeviceptr)base, len,
                    CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    uct_rc_gdr_cuda_ctx_scope_leave(&scope);
    return res;
}

ucs_status_t uct_rc_gdr_cuda_dmabuf_export(const void *addr, size_t len,
                                           size_t page_size, int *fd_p,
                                           size_t *offset_p,
                                           void **aligned_base_p,
                                           size_t *aligned_len_p)
{
    void *aligned_base;
    size_t aligned_len, offset;
    off_t dmabuf_size;
    CUresult res;
    int fd;

    UCT_RC_GDR_CUDA_ENTER(mem_get_handle_for_address_range);

    if (page_size == 0) {
        page_size = sysconf(_SC_PAGESIZE);
    }

    if (!ucs_is_pow2(page_size) || (len == 0) ||
        ((uintptr_t)addr + len < (uintptr_t)addr)) {
        ucs_error("invalid DMA-BUF export request: address %p length %zu "
                  "page size %zu", addr, len, page_size);
        return UCS_ERR_INVALID_PARAM;
    }

    uct_rc_gdr_cuda_dmabuf_range(addr, len, page_size, &aligned_base,
                                 &aligned_len, &offset);

    fd  = -1;
    res = uct_rc_gdr_cuda_dmabuf_get(aligned_base, aligned_len, &fd);
    if (res != CUDA_SUCCESS) {
        /* the caller falls back to another registration method */
        ucs_debug("cuMemGetHandleForAddressRange(%p, %zu, DMA_BUF_FD) for "
                  "%p+%zu failed: %s", aligned_base, aligned_len, addr, len,
                  uct_rc_gdr_cuda_strerror(res));
        return uct_rc_gdr_cuda_status(res);
    }

    /* A dma-buf tells its size through lseek(SEEK_END). Registering a buffer
     * shorter than the user's range would leave its tail without NIC access,
     * so such an export is an error, not a shorter registration. */
    dmabuf_size = lseek(fd, 0, SEEK_END);
    if (dmabuf_size >= 0) {
        if ((size_t)dmabuf_size < aligned_len) {
            ucs_error("DMA-BUF export of %p+%zu has %lld bytes, less than the "
                      "%zu requested", aligned_base, aligned_len,
                      (long long)dmabuf_size, aligned_len);
            close(fd);
            return UCS_ERR_IO_ERROR;
        }
        lseek(fd, 0, SEEK_SET);
    }

    *fd_p           = fd;
    *offset_p       = offset;
    *aligned_base_p = aligned_base;
    *aligned_len_p  = aligned_len;
    return UCS_OK;
}


/*
 * Allocation
 */

ucs_status_t uct_rc_gdr_cuda_mem_alloc(size_t len, void **ptr_p)
{
    CUdeviceptr dptr;
    ucs_status_t status;

    UCT_RC_GDR_CUDA_ENTER(mem_alloc);

    status = UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, mem_alloc, &dptr, len);
    if (status != UCS_OK) {
        return status;
    }

    *ptr_p = (void*)dptr;
    return UCS_OK;
}

ucs_status_t uct_rc_gdr_cuda_mem_free(void *ptr)
{
    UCT_RC_GDR_CUDA_ENTER(mem_free);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, mem_free,
                                (CUdeviceptr)ptr);
}

ucs_status_t uct_rc_gdr_cuda_host_alloc(size_t len, void **ptr_p)
{
    ucs_status_t status;
    void *ptr;

    UCT_RC_GDR_CUDA_ENTER(mem_host_alloc);

    status = UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, mem_host_alloc, &ptr,
                                  len, CU_MEMHOSTALLOC_PORTABLE);
    if (status != UCS_OK) {
        return status;
    }

    *ptr_p = ptr;
    return UCS_OK;
}

ucs_status_t uct_rc_gdr_cuda_host_free(void *ptr)
{
    UCT_RC_GDR_CUDA_ENTER(mem_free_host);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, mem_free_host, ptr);
}

/*
 * Streams and events
 */

ucs_status_t uct_rc_gdr_cuda_stream_create(uct_rc_gdr_cuda_stream_h *stream_p)
{
    ucs_status_t status;
    CUstream stream;

    UCT_RC_GDR_CUDA_ENTER(stream_create);

    status = UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, stream_create, &stream,
                                  CU_STREAM_NON_BLOCKING);
    if (status != UCS_OK) {
        return status;
    }

    *stream_p = (uct_rc_gdr_cuda_stream_h)stream;
    return UCS_OK;
}

ucs_status_t uct_rc_gdr_cuda_stream_destroy(uct_rc_gdr_cuda_stream_h stream)
{
    UCT_RC_GDR_CUDA_ENTER(stream_destroy);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, stream_destroy,
                                (CUstream)stream);
}

ucs_status_t
uct_rc_gdr_cuda_stream_synchronize(uct_rc_gdr_cuda_stream_h stream)
{
    UCT_RC_GDR_CUDA_ENTER(stream_synchronize);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, stream_synchronize,
                                (CUstream)stream);
}

ucs_status_t uct_rc_gdr_cuda_event_create(uct_rc_gdr_cuda_event_h *event_p)
{
    ucs_status_t status;
    CUevent event;

    UCT_RC_GDR_CUDA_ENTER(event_create);

    status = UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, event_create, &event,
                                  CU_EVENT_DISABLE_TIMING);
    if (status != UCS_OK) {
        return status;
    }

    *event_p = (uct_rc_gdr_cuda_event_h)event;
    return UCS_OK;
}

ucs_status_t uct_rc_gdr_cuda_event_record(uct_rc_gdr_cuda_event_h event,
                                          uct_rc_gdr_cuda_stream_h stream)
{
    UCT_RC_GDR_CUDA_ENTER(event_record);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, event_record,
                                (CUevent)event, (CUstream)stream);
}

ucs_status_t uct_rc_gdr_cuda_event_query(uct_rc_gdr_cuda_event_h event)
{
    CUresult res;

    UCT_RC_GDR_CUDA_ENTER(event_query);

    res = UCT_RC_GDR_CUDA_FN(event_query)((CUevent)event);
    if (res == CUDA_ERROR_NOT_READY) {
        return UCS_INPROGRESS;
    }

    return uct_rc_gdr_cuda_result(res, UCS_LOG_LEVEL_ERROR,
                                  uct_rc_gdr_cuda_fn_names.event_query);
}

ucs_status_t uct_rc_gdr_cuda_event_synchronize(uct_rc_gdr_cuda_event_h event)
{
    UCT_RC_GDR_CUDA_ENTER(event_synchronize);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, event_synchronize,
                                (CUevent)event);
}

ucs_status_t uct_rc_gdr_cuda_event_destroy(uct_rc_gdr_cuda_event_h event)
{
    UCT_RC_GDR_CUDA_ENTER(event_destroy);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, event_destroy,
                                (CUevent)event);
}


/*
 * Copies
 */

ucs_status_t uct_rc_gdr_cuda_memcpy_dtoh_async(void *dst, const void *src,
                                               size_t len,
                                               uct_rc_gdr_cuda_stream_h stream)
{
    UCT_RC_GDR_CUDA_ENTER(memcpy_dtoh_async);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, memcpy_dtoh_async, dst,
                                (CUdeviceptr)src, len, (CUstream)stream);
}

ucs_status_t uct_rc_gdr_cuda_memcpy_htod_async(void *dst, const void *src,
                                               size_t len,
                                               uct_rc_gdr_cuda_stream_h stream)
{
    UCT_RC_GDR_CUDA_ENTER(memcpy_htod_async);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, memcpy_htod_async,
                                (CUdeviceptr)dst, src, len, (CUstream)stream);
}

ucs_status_t uct_rc_gdr_cuda_memcpy_dtoh(void *dst, const void *src,
                                         size_t len)
{
    UCT_RC_GDR_CUDA_ENTER(memcpy_dtoh);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, memcpy_dtoh, dst,
                                (CUdeviceptr)src, len);
}

ucs_status_t uct_rc_gdr_cuda_memcpy_htod(void *dst, const void *src,
                                         size_t len)
{
    UCT_RC_GDR_CUDA_ENTER(memcpy_htod);
    return UCT_RC_GDR_CUDA_CALL(UCS_LOG_LEVEL_ERROR, memcpy_htod,
                                (CUdeviceptr)dst, src, len);
}
