/**
 * rc_gdr test emulation of the CUDA driver, built as libcuda.so.1.
 *
 * THIS IS NOT A CUDA DRIVER. It exists so that rc_gdr's CUDA paths (the
 * driver shim, memory classification, the registration cache's buffer-id
 * checks, DMA-BUF offsets, the staging engine) run in CI on machines without
 * a GPU. It is built for `make check` only and never installed. Tests load it
 * by setting RC_GDR_CUDA_LIBRARY to its path.
 *
 * What it emulates
 *   - the driver entry points the shim uses (src/uct/ib_gdr/rc_gdr_cuda.c),
 *     under their versioned names (cuMemAlloc_v2, ...) and through
 *     cuGetProcAddress_v2;
 *   - "device" memory that is host memory from mmap(): the CPU can read it,
 *     and an RDMA NIC (soft-RoCE) can register it with ibv_reg_mr exactly as
 *     it would register GPU memory through nvidia-peermem;
 *   - per-allocation buffer ids, monotonic from 1. A freed allocation is not
 *     unmapped: its address goes to a LIFO free list and the next allocation
 *     of the same page-rounded size gets it back, with a NEW buffer id, so a
 *     test can show that a reused address never hits a stale registration;
 *   - pointer queries as the real driver answers them: cuPointerGetAttribute
 *     on an unknown pointer is CUDA_ERROR_INVALID_VALUE, cuPointerGetAttributes
 *     on one succeeds with memory type 0;
 *   - VMM (cuMemAddressReserve/cuMemCreate/cuMemMap/cuMemSetAccess): a
 *     reservation is a PROT_NONE mapping, a physical allocation is a memfd,
 *     cuMemMap maps it in place and cuMemSetAccess makes it accessible, so
 *     several physical allocations can back one contiguous range.
 *
 * Limits (what tests must not conclude from it)
 *   - No GPU semantics at all: no kernels, modules, graphs, IPC, peer access,
 *     cuCtxCreate (only primary contexts), no write ordering or flush
 *     behaviour: GPUDirect visibility cannot be tested with it.
 *   - Every copy is a synchronous memcpy; streams and events are trivial
 *     handles, event queries never answer CUDA_ERROR_NOT_READY.
 *   - A DMA-BUF export is a new memfd of the requested size: its size (and
 *     lseek) are right, its pages are NOT the allocation's. As with a real
 *     H200 (driver 580), only cuMemAlloc and VMM memory can be exported;
 *     pool, managed and pinned host memory are refused with
 *     CUDA_ERROR_INVALID_VALUE, and a range may span several VMM mappings.
 *   - Pool memory (cuMemAllocAsync) is one mmap per allocation with a NULL
 *     context and the device's (fake) pool handle; the pool never recycles a
 *     range without a free call, unlike a real stream-ordered pool.
 *   - Freed memory stays mapped: use after free is not detected.
 *   - Stricter than needed on purpose: allocations, copies, stream and event
 *     creation, cuMemGetAddressRange and cuMemGetHandleForAddressRange need a
 *     current context, so callers' context handling is exercised.
 *   - cuGetProcAddress_v2 ignores cudaVersion and flags: one version of each
 *     entry point exists.
 *   - One global lock; allocation lookup is a linear scan.
 *
 * Configuration, read once at the first call into the library (cuInit or
 * cuGetProcAddress_v2). Per-device values are comma-separated lists; a device
 * past the end of a list takes its last value. -1 makes an attribute unknown
 * to this "driver" (cuDeviceGetAttribute fails with CUDA_ERROR_INVALID_VALUE,
 * as an older driver would).
 *   RC_GDR_FAKE_CUDA_DEVICES          device count (default 1; 0: cuInit fails
 *                                     with CUDA_ERROR_NO_DEVICE)
 *   RC_GDR_FAKE_CUDA_GDR              GPU_DIRECT_RDMA_SUPPORTED (default 1)
 *   RC_GDR_FAKE_CUDA_DMABUF           DMA_BUF_SUPPORTED (default 1); 0 also
 *                                     makes exports CUDA_ERROR_NOT_SUPPORTED
 *   RC_GDR_FAKE_CUDA_WRITES_ORDERING  GPU_DIRECT_RDMA_WRITES_ORDERING
 *                                     (default 0 = NONE; 100 OWNER, 200 ALL)
 *   RC_GDR_FAKE_CUDA_FLUSH_OPTIONS    GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS
 *                                     (default 1 = HOST)
 *   RC_GDR_FAKE_CUDA_CC               compute capability (default "8.0")
 *   RC_GDR_FAKE_CUDA_PCI_BUS_ID       "0000:17:00.0" style, printed in upper
 *                                     case like the real driver (default:
 *                                     bus 0x17 + 0x20 * ordinal)
 *   RC_GDR_FAKE_CUDA_PLACED           1: the PCI functions named above are
 *                                     where the GPUs stand (a guest's
 *                                     emulated PCI functions), and rc_gdr's
 *                                     gate judges their place as a real
 *                                     GPU's (rc_gdr_fake_cuda_placed);
 *                                     default 0: the memory is host memory
 *                                     and no PCIe path is judged
 *   RC_GDR_FAKE_CUDA_LOG              a file: every primary context
 *                                     retained and every allocation of
 *                                     device memory appends a line to it,
 *                                     what a real GPU pays for in memory
 *                                     (a test counts what a program asks)
 *   RC_GDR_FAKE_CUDA_DRIVER_VERSION   cuDriverGetVersion (default 13000)
 *   RC_GDR_FAKE_CUDA_PROC_ADDRESS     0: cuGetProcAddress_v2 finds nothing,
 *                                     so callers fall back to dlsym
 *
 * Test control: rc_gdr_fake_cuda_control(knob, value, &old) changes a knob of
 * the running emulation (see its definition below). Its presence is also how
 * a test tells this library from a real driver.
 */

#define _GNU_SOURCE
#include <cuda.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FAKE_MAX_DEVICES        16
#define FAKE_MAX_CTX_STACK      16
#define FAKE_VMM_GRANULARITY    (2ul << 20)
#define FAKE_CTX_MAGIC          0x43545831u
#define FAKE_STREAM_MAGIC       0x5354524du
#define FAKE_EVENT_MAGIC        0x45564e54u

#define FAKE_EXPORT __attribute__((visibility("default")))


typedef enum {
    FAKE_MEM_DEVICE,        /* cuMemAlloc */
    FAKE_MEM_PINNED,        /* cuMemHostAlloc */
    FAKE_MEM_REGISTERED,    /* cuMemHostRegister: the caller's memory */
    FAKE_MEM_MANAGED,       /* cuMemAllocManaged */
    FAKE_MEM_POOL,          /* cuMemAllocAsync */
    FAKE_MEM_VMM            /* one cuMemMap of a cuMemCreate handle */
} fake_mem_kind_t;

struct CUctx_st {
    unsigned magic;
    int      device;
    int      refcount;      /* primary context retains */
};

struct CUstream_st {
    unsigned magic;
};

struct CUevent_st {
    unsigned magic;
};

struct CUmemPoolHandle_st {
    int device;
};

typedef struct {
    int                       cc_major;
    int                       cc_minor;
    int                       gdr;
    int                       dmabuf;
    int                       writes_ordering;
    int                       flush_options;
    char                      pci_bus_id[32];
    struct CUctx_st           primary_ctx;
    struct CUmemPoolHandle_st pool;
} fake_device_t;

typedef struct {
    uintptr_t          base;
    size_t             size;        /* as requested */
    size_t             map_len;     /* page-rounded */
    fake_mem_kind_t    kind;
    int                device;
    unsigned long long buffer_id;
    struct CUctx_st    *ctx;
    unsigned           sync_memops;
    int                accessible;  /* VMM: after cuMemSetAccess */
    int                gdr_capable; /* VMM: from the handle */
    int                reservation; /* VMM: index in fake.resv */
} fake_alloc_t;

typedef struct {
    uintptr_t base;
    size_t    map_len;
} fake_free_t;

typedef struct {
    uintptr_t base;
    size_t    size;
    int       in_use;
} fake_resv_t;

typedef struct {
    unsigned long long id;
    int                memfd;
    size_t             size;
    int                device;
    int                gdr_capable;
    int                in_use;
} fake_handle_t;

static struct {
    pthread_once_t     config_once;
    pthread_mutex_t    lock;
    int                initialized;
    int                num_devices;
    int                driver_version;
    int                proc_address;
    long               dmabuf_span;     /* exports may span VMM mappings */
    long               mempool_attr;    /* MEMPOOL_HANDLE attribute known */
    int                placed;          /* RC_GDR_FAKE_CUDA_PLACED */
    const char         *log;            /* RC_GDR_FAKE_CUDA_LOG, or NULL */
    fake_device_t      dev[FAKE_MAX_DEVICES];
    unsigned long long next_buffer_id;
    unsigned long long next_handle_id;
    size_t             page_size;

    fake_alloc_t       *allocs;
    size_t             num_allocs, max_allocs;
    fake_free_t        *free_list;
    size_t             num_free, max_free;
    fake_resv_t        *resv;
    size_t             num_resv, max_resv;
    fake_handle_t      *handles;
    size_t             num_handles, max_handles;
} fake = {
    .config_once = PTHREAD_ONCE_INIT,
    .lock        = PTHREAD_MUTEX_INITIALIZER
};

static __thread struct CUctx_st *fake_current;
static __thread struct CUctx_st *fake_ctx_stack[FAKE_MAX_CTX_STACK];
static __thread int             fake_ctx_depth;


/*
 * Configuration
 */

/* Item idx of a comma-separated list; past the end, the last item */
static int fake_env_item(const char *name, int idx, char *buf, size_t max,
                         int repeat_last)
{
    const char *env = getenv(name);
    const char *p, *end;
    int i;

    if ((env == NULL) || (*env == '\0')) {
        return 0;
    }

    p = env;
    for (i = 0; i < idx; ++i) {
        end = strchr(p, ',');
        if (end == NULL) {
            if (!repeat_last) {
                return 0;
            }
            break;
        }
        p = end + 1;
    }

    end = strchr(p, ',');
    if (end == NULL) {
        end = p + strlen(p);
    }
    if ((size_t)(end - p) >= max) {
        return 0;
    }

    memcpy(buf, p, end - p);
    buf[end - p] = '\0';
    return 1;
}

static int fake_env_int(const char *name, int idx, int dflt)
{
    char buf[32];

    return fake_env_item(name, idx, buf, sizeof(buf), 1) ?
           (int)strtol(buf, NULL, 0) : dflt;
}

static void fake_config_read(void)
{
    fake_device_t *dev;
    char buf[32];
    int i;

    fake.page_size      = sysconf(_SC_PAGESIZE);
    fake.num_devices    = fake_env_int("RC_GDR_FAKE_CUDA_DEVICES", 0, 1);
    fake.driver_version = fake_env_int("RC_GDR_FAKE_CUDA_DRIVER_VERSION", 0,
                                       13000);
    fake.proc_address   = fake_env_int("RC_GDR_FAKE_CUDA_PROC_ADDRESS", 0, 1);
    fake.dmabuf_span    = 1;
    fake.mempool_attr   = 1;
    fake.placed         = fake_env_int("RC_GDR_FAKE_CUDA_PLACED", 0, 0);
    fake.log            = getenv("RC_GDR_FAKE_CUDA_LOG");
    fake.next_buffer_id = 1;
    fake.next_handle_id = 0x1000;

    if (fake.num_devices < 0) {
        fake.num_devices = 0;
    } else if (fake.num_devices > FAKE_MAX_DEVICES) {
        fake.num_devices = FAKE_MAX_DEVICES;
    }

    for (i = 0; i < fake.num_devices; ++i) {
        dev                  = &fake.dev[i];
        dev->gdr             = fake_env_int("RC_GDR_FAKE_CUDA_GDR", i, 1);
        dev->dmabuf          = fake_env_int("RC_GDR_FAKE_CUDA_DMABUF", i, 1);
        dev->writes_ordering = fake_env_int("RC_GDR_FAKE_CUDA_WRITES_ORDERING",
                                            i, 0);
        dev->flush_options   = fake_env_int("RC_GDR_FAKE_CUDA_FLUSH_OPTIONS",
                                            i, 1);
        dev->cc_major        = 8;
        dev->cc_minor        = 0;
        if (fake_env_item("RC_GDR_FAKE_CUDA_CC", i, buf, sizeof(buf), 1)) {
            sscanf(buf, "%d.%d", &dev->cc_major, &dev->cc_minor);
        }

        if (!fake_env_item("RC_GDR_FAKE_CUDA_PCI_BUS_ID", i, dev->pci_bus_id,
                           sizeof(dev->pci_bus_id), 0)) {
            snprintf(dev->pci_bus_id, sizeof(dev->pci_bus_id),
                     "0000:%02X:00.0", (0x17 + 0x20 * i) & 0xff);
        }

        dev->primary_ctx.magic  = FAKE_CTX_MAGIC;
        dev->primary_ctx.device = i;
        dev->pool.device        = i;
    }
}

static void fake_config(void)
{
    pthread_once(&fake.config_once, fake_config_read);
}

/*
 * Change a knob of the running emulation; per-device knobs change every
 * device. Returns 0, or -1 for an unknown knob.
 *   "dmabuf"          DMA_BUF_SUPPORTED and whether exports work
 *   "gdr"             GPU_DIRECT_RDMA_SUPPORTED
 *   "writes_ordering" GPU_DIRECT_RDMA_WRITES_ORDERING
 *   "flush_options"   GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS
 *   "dmabuf_span"     1 (default): an export may span several VMM mappings
 *                     of one reservation (as the CUDA documentation allows);
 *                     0: refused with CUDA_ERROR_INVALID_VALUE
 *   "mempool_attr"    1 (default): CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE is
 *                     known; 0: an old driver, any query naming it fails
 *                     with CUDA_ERROR_INVALID_VALUE
 */
FAKE_EXPORT int rc_gdr_fake_cuda_control(const char *knob, long value,
                                         long *old_p)
{
    long old = 0;
    int i, ret = 0;

    fake_config();
    pthread_mutex_lock(&fake.lock);

#define FAKE_DEV_KNOB(_name, _field) \
    if (!strcmp(knob, _name)) { \
        old = (fake.num_devices > 0) ? fake.dev[0]._field : 0; \
        for (i = 0; i < fake.num_devices; ++i) { \
            fake.dev[i]._field = (int)value; \
        } \
        goto out; \
    }

    FAKE_DEV_KNOB("dmabuf", dmabuf);
    FAKE_DEV_KNOB("gdr", gdr);
    FAKE_DEV_KNOB("writes_ordering", writes_ordering);
    FAKE_DEV_KNOB("flush_options", flush_options);
#undef FAKE_DEV_KNOB

    if (!strcmp(knob, "dmabuf_span")) {
        old              = fake.dmabuf_span;
        fake.dmabuf_span = value;
    } else if (!strcmp(knob, "mempool_attr")) {
        old               = fake.mempool_attr;
        fake.mempool_attr = value;
    } else {
        ret = -1;
    }

out:
    pthread_mutex_unlock(&fake.lock);
    if ((ret == 0) && (old_p != NULL)) {
        *old_p = old;
    }
    return ret;
}


/* 1 where the devices stand at the PCI functions they report (a guest's
 * emulated functions, RC_GDR_FAKE_CUDA_PLACED): their place in sysfs is then
 * judged as a real GPU's, though their memory is host memory */
FAKE_EXPORT int rc_gdr_fake_cuda_placed(void)
{
    fake_config();
    return fake.placed;
}


/*
 * Tables (called with fake.lock held)
 */

#define FAKE_GROW(_array, _num, _max) \
    ({ \
        int _ok = 1; \
        if ((_num) == (_max)) { \
            size_t _new_max = (_max) ? 2 * (_max) : 64; \
            void *_p = realloc(_array, _new_max * sizeof(*(_array))); \
            if (_p == NULL) { \
                _ok = 0; \
            } else { \
                (_array) = _p; \
                (_max)   = _new_max; \
            } \
        } \
        _ok; \
    })

static fake_alloc_t *fake_alloc_find(uintptr_t ptr)
{
    size_t i;

    for (i = 0; i < fake.num_allocs; ++i) {
        if ((ptr >= fake.allocs[i].base) &&
            (ptr < fake.allocs[i].base + fake.allocs[i].size)) {
            return &fake.allocs[i];
        }
    }

    return NULL;
}

static void fake_alloc_remove(fake_alloc_t *alloc)
{
    *alloc = fake.allocs[--fake.num_allocs];
}

static fake_alloc_t *fake_alloc_add(uintptr_t base, size_t size,
                                    size_t map_len, fake_mem_kind_t kind,
                                    int device, struct CUctx_st *ctx)
{
    fake_alloc_t *alloc;

    if (!FAKE_GROW(fake.allocs, fake.num_allocs, fake.max_allocs)) {
        return NULL;
    }

    alloc              = &fake.allocs[fake.num_allocs++];
    memset(alloc, 0, sizeof(*alloc));
    alloc->base        = base;
    alloc->size        = size;
    alloc->map_len     = map_len;
    alloc->kind        = kind;
    alloc->device      = device;
    alloc->ctx         = ctx;
    alloc->buffer_id   = fake.next_buffer_id++;
    alloc->accessible  = 1;
    alloc->reservation = -1;
    return alloc;
}

static size_t fake_page_align(size_t len)
{
    return (len + fake.page_size - 1) & ~(fake.page_size - 1);
}

/* Memory for a new allocation: the latest freed one of this size first */
static void *fake_mem_get(size_t map_len)
{
    size_t i;
    void *ptr;

    for (i = fake.num_free; i-- > 0; ) {
        if (fake.free_list[i].map_len == map_len) {
            ptr               = (void*)fake.free_list[i].base;
            memmove(&fake.free_list[i], &fake.free_list[i + 1],
                    (fake.num_free - i - 1) * sizeof(*fake.free_list));
            --fake.num_free;
            return ptr;
        }
    }

    ptr = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return (ptr == MAP_FAILED) ? NULL : ptr;
}

static void fake_mem_put(uintptr_t base, size_t map_len)
{
    if (!FAKE_GROW(fake.free_list, fake.num_free, fake.max_free)) {
        munmap((void*)base, map_len);
        return;
    }

    fake.free_list[fake.num_free].base    = base;
    fake.free_list[fake.num_free].map_len = map_len;
    ++fake.num_free;
}

static CUresult fake_check_init(void)
{
    return fake.initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

static CUresult fake_check_ctx(void)
{
    if (!fake.initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    return (fake_current != NULL) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* RC_GDR_FAKE_CUDA_LOG: one line per call a real GPU spends memory on */
static void fake_log(const char *what, int device, size_t size)
{
    FILE *file;

    if ((fake.log == NULL) || ((file = fopen(fake.log, "a")) == NULL)) {
        return;
    }
    fprintf(file, "%s device %d size %zu\n", what, device, size);
    fclose(file);
}

static CUresult fake_new_alloc(CUdeviceptr *dptr, size_t size,
                               fake_mem_kind_t kind, int device,
                               struct CUctx_st *ctx)
{
    size_t map_len;
    void *ptr;

    if ((dptr == NULL) || (size == 0)) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    map_len = fake_page_align(size);
    pthread_mutex_lock(&fake.lock);
    ptr = fake_mem_get(map_len);
    if ((ptr == NULL) ||
        (fake_alloc_add((uintptr_t)ptr, size, map_len, kind, device, ctx) ==
         NULL)) {
        if (ptr != NULL) {
            fake_mem_put((uintptr_t)ptr, map_len);
        }
        pthread_mutex_unlock(&fake.lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }

    pthread_mutex_unlock(&fake.lock);
    if (kind != FAKE_MEM_PINNED) {
        fake_log("alloc", device, size);
    }
    *dptr = (CUdeviceptr)ptr;
    return CUDA_SUCCESS;
}

/* Free an allocation that starts at ptr and is of one of the given kinds */
static CUresult fake_free_alloc(uintptr_t ptr, unsigned kinds_mask)
{
    fake_alloc_t *alloc;
    CUresult res = CUDA_ERROR_INVALID_VALUE;

    if (!fake.initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }

    pthread_mutex_lock(&fake.lock);
    alloc = fake_alloc_find(ptr);
    if ((alloc != NULL) && (alloc->base == ptr) &&
        (kinds_mask & (1u << alloc->kind))) {
        fake_mem_put(alloc->base, alloc->map_len);
        fake_alloc_remove(alloc);
        res = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&fake.lock);
    return res;
}

/* [ptr, ptr+len) lies inside accessible CUDA memory */
static CUresult fake_check_range(uintptr_t ptr, size_t len)
{
    fake_alloc_t *alloc;
    CUresult res = CUDA_ERROR_INVALID_VALUE;

    pthread_mutex_lock(&fake.lock);
    alloc = fake_alloc_find(ptr);
    if ((alloc != NULL) && alloc->accessible &&
        (ptr + len <= alloc->base + alloc->map_len)) {
        res = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&fake.lock);
    return res;
}

static int fake_stream_valid(CUstream stream)
{
    /* NULL and the legacy/per-thread default streams are always valid */
    return (stream == NULL) || (stream == CU_STREAM_LEGACY) ||
           (stream == CU_STREAM_PER_THREAD) ||
           (stream->magic == FAKE_STREAM_MAGIC);
}


/*
 * Errors
 */

static const struct {
    CUresult   res;
    const char *name;
    const char *str;
} fake_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE",
     "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY",
     "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED",
     "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE",
     "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE",
     "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT",
     "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE",
     "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED",
     "operation not supported"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
     "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
     "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED",
     "resource already mapped"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"}
};

static CUresult fake_error_lookup(CUresult error, const char **pStr,
                                  int want_name)
{
    size_t i;

    if (pStr == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    for (i = 0; i < sizeof(fake_errors) / sizeof(fake_errors[0]); ++i) {
        if (fake_errors[i].res == error) {
            *pStr = want_name ? fake_errors[i].name : fake_errors[i].str;
            return CUDA_SUCCESS;
        }
    }

    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    return fake_error_lookup(error, pStr, 0);
}

FAKE_EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    return fake_error_lookup(error, pStr, 1);
}


/*
 * Initialization and devices
 */

FAKE_EXPORT CUresult cuInit(unsigned int Flags)
{
    fake_config();
    if (Flags != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (fake.num_devices == 0) {
        return CUDA_ERROR_NO_DEVICE;
    }

    fake.initialized = 1;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
    fake_config();
    if (driverVersion == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    *driverVersion = fake.driver_version;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetCount(int *count)
{
    if (!fake.initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (count == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    *count = fake.num_devices;
    return CUDA_SUCCESS;
}

static CUresult fake_check_device(CUdevice dev)
{
    if (!fake.initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    return ((dev >= 0) && (dev < fake.num_devices)) ?
           CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

FAKE_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult res = fake_check_device(ordinal);

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if (device == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    *device = ordinal;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult res = fake_check_device(dev);

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if ((name == NULL) || (len <= 0)) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    snprintf(name, len, "rc_gdr fake CUDA device %d", dev);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    CUresult res = fake_check_device(dev);

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if ((pciBusId == NULL) ||
        (len <= (int)strlen(fake.dev[dev].pci_bus_id))) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    strcpy(pciBusId, fake.dev[dev].pci_bus_id);
    return CUDA_SUCCESS;
}

static CUresult fake_attr_value(int value, int *pi)
{
    if (value < 0) {
        return CUDA_ERROR_INVALID_VALUE; /* unknown to this "driver" */
    }

    *pi = value;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib,
                                          CUdevice dev)
{
    CUresult res = fake_check_device(dev);
    fake_device_t *d;
    unsigned bus = 0, device = 0, domain = 0, function = 0;

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if (pi == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    d = &fake.dev[dev];
    sscanf(d->pci_bus_id, "%x:%x:%x.%x", &domain, &bus, &device, &function);

    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        return fake_attr_value(d->cc_major, pi);
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        return fake_attr_value(d->cc_minor, pi);
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED:
        return fake_attr_value(d->gdr, pi);
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED:
        return fake_attr_value(d->dmabuf, pi);
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING:
        return fake_attr_value(d->writes_ordering, pi);
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS:
        return fake_attr_value(d->flush_options, pi);
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
        return fake_attr_value(d->gdr, pi);
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
        return fake_attr_value(domain, pi);
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        return fake_attr_value(bus, pi);
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
        return fake_attr_value(device, pi);
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
        return fake_attr_value(1, pi);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}


/*
 * Contexts: one primary context per device, a per-thread current context
 */

static int fake_ctx_valid(CUcontext ctx)
{
    return (ctx != NULL) && (ctx->magic == FAKE_CTX_MAGIC);
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult res = fake_check_device(dev);

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if (pctx == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    pthread_mutex_lock(&fake.lock);
    ++fake.dev[dev].primary_ctx.refcount;
    pthread_mutex_unlock(&fake.lock);
    fake_log("primary_ctx_retain", dev, 0);
    *pctx = &fake.dev[dev].primary_ctx;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult res = fake_check_device(dev);

    if (res != CUDA_SUCCESS) {
        return res;
    }

    pthread_mutex_lock(&fake.lock);
    if (fake.dev[dev].primary_ctx.refcount <= 0) {
        res = CUDA_ERROR_INVALID_CONTEXT;
    } else {
        --fake.dev[dev].primary_ctx.refcount;
    }
    pthread_mutex_unlock(&fake.lock);
    return res;
}

FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if ((ctx != NULL) && !fake_ctx_valid(ctx)) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }

    fake_current = ctx;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if (pctx == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    *pctx = fake_current;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if (!fake_ctx_valid(ctx)) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (fake_ctx_depth == FAKE_MAX_CTX_STACK) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }

    fake_ctx_stack[fake_ctx_depth++] = fake_current;
    fake_current                     = ctx;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if (fake_current == NULL) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }

    if (pctx != NULL) {
        *pctx = fake_current;
    }
    fake_current = (fake_ctx_depth > 0) ? fake_ctx_stack[--fake_ctx_depth] :
                   NULL;
    return CUDA_SUCCESS;
}


/*
 * Pointer attributes
 */

static int fake_attr_known(CUpointer_attribute attr)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        return 1;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        return fake.mempool_attr != 0;
    default:
        return 0;
    }
}

static int fake_alloc_is_host(const fake_alloc_t *alloc)
{
    return (alloc->kind == FAKE_MEM_PINNED) ||
           (alloc->kind == FAKE_MEM_REGISTERED);
}

/* One attribute of a known allocation (alloc != NULL) or of an unknown
 * pointer (alloc == NULL: default values, as cuPointerGetAttributes gives) */
static CUresult fake_attr_get(const fake_alloc_t *alloc, CUdeviceptr ptr,
                              CUpointer_attribute attr, void *data)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext*)data = (alloc != NULL) ? alloc->ctx : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned*)data = (alloc == NULL) ? 0 :
                           fake_alloc_is_host(alloc) ? CU_MEMORYTYPE_HOST :
                                                       CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr*)data = (alloc != NULL) ? ptr : 0;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if ((alloc != NULL) && !fake_alloc_is_host(alloc) &&
            (alloc->kind != FAKE_MEM_MANAGED)) {
            return CUDA_ERROR_INVALID_VALUE;
        }
        *(void**)data = (alloc != NULL) ? (void*)ptr : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *(unsigned*)data = (alloc != NULL) ? alloc->sync_memops : 0;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long*)data = (alloc != NULL) ? alloc->buffer_id : 0;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned*)data = (alloc != NULL) &&
                           (alloc->kind == FAKE_MEM_MANAGED);
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int*)data = (alloc != NULL) ? alloc->device : -2;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(CUdeviceptr*)data = (alloc != NULL) ? alloc->base : 0;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t*)data = (alloc != NULL) ? alloc->size : 0;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned*)data = (alloc != NULL);
        break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        if (alloc == NULL) {
            *(unsigned*)data = 0;
        } else if (alloc->kind == FAKE_MEM_VMM) {
            *(unsigned*)data = alloc->gdr_capable;
        } else {
            *(unsigned*)data = ((alloc->kind == FAKE_MEM_DEVICE) ||
                                (alloc->kind == FAKE_MEM_POOL)) &&
                               (fake.dev[alloc->device].gdr == 1);
        }
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool*)data = ((alloc != NULL) &&
                                (alloc->kind == FAKE_MEM_POOL)) ?
                               &fake.dev[alloc->device].pool : NULL;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }

    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuPointerGetAttribute(void *data,
                                           CUpointer_attribute attribute,
                                           CUdeviceptr ptr)
{
    fake_alloc_t *alloc;
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if ((data == NULL) || !fake_attr_known(attribute)) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    pthread_mutex_lock(&fake.lock);
    alloc = fake_alloc_find(ptr);
    res   = (alloc == NULL) ? CUDA_ERROR_INVALID_VALUE :
            fake_attr_get(alloc, ptr, attribute, data);
    pthread_mutex_unlock(&fake.lock);
    return res;
}

FAKE_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                            CUpointer_attribute *attributes,
                                            void **data, CUdeviceptr ptr)
{
    fake_alloc_t *alloc;
    unsigned i;
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if ((attributes == NULL) || (data == NULL)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (i = 0; i < numAttributes; ++i) {
        if (!fake_attr_known(attributes[i])) {
            return CUDA_ERROR_INVALID_VALUE;
        }
    }

    pthread_mutex_lock(&fake.lock);
    alloc = fake_alloc_find(ptr);
    for (i = 0; (i < numAttributes) && (res == CUDA_SUCCESS); ++i) {
        res = fake_attr_get(alloc, ptr, attributes[i], data[i]);
        if ((res != CUDA_SUCCESS) &&
            (attributes[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER)) {
            /* the list form reports what it cannot give as NULL */
            *(void**)data[i] = NULL;
            res              = CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&fake.lock);
    return res;
}

FAKE_EXPORT CUresult cuPointerSetAttribute(const void *value,
                                           CUpointer_attribute attribute,
                                           CUdeviceptr ptr)
{
    fake_alloc_t *alloc;
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if ((value == NULL) || (attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    pthread_mutex_lock(&fake.lock);
    alloc = fake_alloc_find(ptr);
    if (alloc == NULL) {
        res = CUDA_ERROR_INVALID_VALUE;
    } else {
        alloc->sync_memops = (*(const unsigned*)value != 0);
    }
    pthread_mutex_unlock(&fake.lock);
    return res;
}

FAKE_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize,
                                             CUdeviceptr dptr)
{
    fake_alloc_t *alloc;
    CUresult res = fake_check_ctx();

    if (res != CUDA_SUCCESS) {
        return res;
    }

    pthread_mutex_lock(&fake.lock);
    alloc = fake_alloc_find(dptr);
    if (alloc == NULL) {
        res = CUDA_ERROR_NOT_FOUND;
    } else {
        if (pbase != NULL) {
            *pbase = alloc->base;
        }
        if (psize != NULL) {
            *psize = alloc->size;
        }
    }
    pthread_mutex_unlock(&fake.lock);
    return res;
}


/*
 * Allocation
 */

FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CUresult res = fake_check_ctx();

    if (res != CUDA_SUCCESS) {
        return res;
    }

    return fake_new_alloc(dptr, bytesize, FAKE_MEM_DEVICE,
                          fake_current->device, fake_current);
}

FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    return fake_free_alloc(dptr, (1u << FAKE_MEM_DEVICE) |
                                 (1u << FAKE_MEM_MANAGED) |
                                 (1u << FAKE_MEM_POOL));
}

FAKE_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize,
                                    unsigned int Flags)
{
    CUdeviceptr dptr;
    CUresult res = fake_check_ctx();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if (pp == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    res = fake_new_alloc(&dptr, bytesize, FAKE_MEM_PINNED,
                         fake_current->device, fake_current);
    if (res == CUDA_SUCCESS) {
        *pp = (void*)dptr;
    }
    return res;
}

FAKE_EXPORT CUresult cuMemFreeHost(void *p)
{
    return fake_free_alloc((uintptr_t)p, 1u << FAKE_MEM_PINNED);
}

FAKE_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize,
                                          unsigned int Flags)
{
    CUresult res = fake_check_ctx();
    uintptr_t start = (uintptr_t)p;
    size_t i;

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if ((p == NULL) || (bytesize == 0)) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    pthread_mutex_lock(&fake.lock);
    for (i = 0; i < fake.num_allocs; ++i) {
        if ((start < fake.allocs[i].base + fake.allocs[i].size) &&
            (fake.allocs[i].base < start + bytesize)) {
            res = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
            goto out;
        }
    }

    if (fake_alloc_add(start, bytesize, bytesize, FAKE_MEM_REGISTERED,
                       fake_current->device, fake_current) == NULL) {
        res = CUDA_ERROR_OUT_OF_MEMORY;
    }
out:
    pthread_mutex_unlock(&fake.lock);
    return res;
}

FAKE_EXPORT CUresult cuMemHostUnregister(void *p)
{
    fake_alloc_t *alloc;
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }

    pthread_mutex_lock(&fake.lock);
    alloc = fake_alloc_find((uintptr_t)p);
    if ((alloc == NULL) || (alloc->base != (uintptr_t)p) ||
        (alloc->kind != FAKE_MEM_REGISTERED)) {
        res = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    } else {
        /* the caller's memory: forget it, never unmap it */
        fake_alloc_remove(alloc);
    }
    pthread_mutex_unlock(&fake.lock);
    return res;
}

FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize,
                                       unsigned int flags)
{
    CUresult res = fake_check_ctx();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if ((flags != CU_MEM_ATTACH_GLOBAL) && (flags != CU_MEM_ATTACH_HOST)) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    return fake_new_alloc(dptr, bytesize, FAKE_MEM_MANAGED,
                          fake_current->device, fake_current);
}

FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize,
                                     CUstream hStream)
{
    CUresult res = fake_check_ctx();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if (!fake_stream_valid(hStream)) {
        return CUDA_ERROR_INVALID_HANDLE;
    }

    /* pool memory has no context: it belongs to the device's pool */
    return fake_new_alloc(dptr, bytesize, FAKE_MEM_POOL,
                          fake_current->device, NULL);
}

FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    if (!fake_stream_valid(hStream)) {
        return CUDA_ERROR_INVALID_HANDLE;
    }

    return fake_free_alloc(dptr, 1u << FAKE_MEM_POOL);
}


/*
 * Copies: synchronous, whatever the stream
 */

static CUresult fake_copy(void *dst, const void *src, size_t len,
                          uintptr_t dev_ptr1, uintptr_t dev_ptr2,
                          CUstream stream)
{
    CUresult res = fake_check_ctx();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if (!fake_stream_valid(stream)) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (len == 0) {
        return CUDA_SUCCESS;
    }

    if ((dev_ptr1 != 0) &&
        ((res = fake_check_range(dev_ptr1, len)) != CUDA_SUCCESS)) {
        return res;
    }
    if ((dev_ptr2 != 0) &&
        ((res = fake_check_range(dev_ptr2, len)) != CUDA_SUCCESS)) {
        return res;
    }

    memmove(dst, src, len);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src,
                              size_t ByteCount)
{
    return fake_copy((void*)dst, (const void*)src, ByteCount, 0, 0, NULL);
}

FAKE_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice,
                                     const void *srcHost, size_t ByteCount)
{
    return fake_copy((void*)dstDevice, srcHost, ByteCount, dstDevice, 0,
                     NULL);
}

FAKE_EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice,
                                     size_t ByteCount)
{
    return fake_copy(dstHost, (const void*)srcDevice, ByteCount, srcDevice, 0,
                     NULL);
}

FAKE_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice,
                                          const void *srcHost,
                                          size_t ByteCount, CUstream hStream)
{
    return fake_copy((void*)dstDevice, srcHost, ByteCount, dstDevice, 0,
                     hStream);
}

FAKE_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice,
                                          size_t ByteCount, CUstream hStream)
{
    return fake_copy(dstHost, (const void*)srcDevice, ByteCount, srcDevice, 0,
                     hStream);
}


/*
 * Streams and events: nothing is ever pending
 */

FAKE_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    struct CUstream_st *stream;
    CUresult res = fake_check_ctx();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if (phStream == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    stream = calloc(1, sizeof(*stream));
    if (stream == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }

    stream->magic = FAKE_STREAM_MAGIC;
    *phStream     = stream;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if ((hStream == NULL) || (hStream->magic != FAKE_STREAM_MAGIC)) {
        return CUDA_ERROR_INVALID_HANDLE;
    }

    hStream->magic = 0;
    free(hStream);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    return fake_stream_valid(hStream) ? CUDA_SUCCESS :
                                        CUDA_ERROR_INVALID_HANDLE;
}

FAKE_EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    struct CUevent_st *event;
    CUresult res = fake_check_ctx();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if (phEvent == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    event = calloc(1, sizeof(*event));
    if (event == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }

    event->magic = FAKE_EVENT_MAGIC;
    *phEvent     = event;
    return CUDA_SUCCESS;
}

static CUresult fake_check_event(CUevent hEvent)
{
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    return ((hEvent != NULL) && (hEvent->magic == FAKE_EVENT_MAGIC)) ?
           CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

FAKE_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    CUresult res = fake_check_event(hEvent);

    if (res != CUDA_SUCCESS) {
        return res;
    }
    return fake_stream_valid(hStream) ? CUDA_SUCCESS :
                                        CUDA_ERROR_INVALID_HANDLE;
}

FAKE_EXPORT CUresult cuEventQuery(CUevent hEvent)
{
    return fake_check_event(hEvent);
}

FAKE_EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
    return fake_check_event(hEvent);
}

FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent)
{
    CUresult res = fake_check_event(hEvent);

    if (res != CUDA_SUCCESS) {
        return res;
    }

    hEvent->magic = 0;
    free(hEvent);
    return CUDA_SUCCESS;
}


/*
 * Virtual memory management
 */

FAKE_EXPORT CUresult
cuMemGetAllocationGranularity(size_t *granularity,
                              const CUmemAllocationProp *prop,
                              CUmemAllocationGranularity_flags option)
{
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if ((granularity == NULL) || (prop == NULL) ||
        (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) ||
        (fake_check_device(prop->location.id) != CUDA_SUCCESS)) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    *granularity = FAKE_VMM_GRANULARITY;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size,
                                         size_t alignment, CUdeviceptr addr,
                                         unsigned long long flags)
{
    uintptr_t base;
    size_t align, extra;
    void *p;
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if ((ptr == NULL) || (size == 0) || (size % FAKE_VMM_GRANULARITY)) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    align = (alignment > FAKE_VMM_GRANULARITY) ? alignment :
            FAKE_VMM_GRANULARITY;
    p     = mmap(NULL, size + align, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }

    /* keep the aligned part only */
    base  = ((uintptr_t)p + align - 1) & ~(align - 1);
    extra = base - (uintptr_t)p;
    if (extra > 0) {
        munmap(p, extra);
    }
    munmap((void*)(base + size), align - extra);

    pthread_mutex_lock(&fake.lock);
    if (!FAKE_GROW(fake.resv, fake.num_resv, fake.max_resv)) {
        pthread_mutex_unlock(&fake.lock);
        munmap((void*)base, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }

    fake.resv[fake.num_resv].base   = base;
    fake.resv[fake.num_resv].size   = size;
    fake.resv[fake.num_resv].in_use = 1;
    ++fake.num_resv;
    pthread_mutex_unlock(&fake.lock);

    *ptr = base;
    return CUDA_SUCCESS;
}

static int fake_resv_find(uintptr_t ptr, size_t size)
{
    size_t i;

    for (i = 0; i < fake.num_resv; ++i) {
        if (fake.resv[i].in_use && (ptr >= fake.resv[i].base) &&
            (ptr + size <= fake.resv[i].base + fake.resv[i].size)) {
            return (int)i;
        }
    }

    return -1;
}

FAKE_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    size_t i;
    int r;
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }

    pthread_mutex_lock(&fake.lock);
    r = fake_resv_find(ptr, size);
    if ((r < 0) || (fake.resv[r].base != ptr) || (fake.resv[r].size != size)) {
        res = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }

    for (i = 0; i < fake.num_allocs; ++i) {
        if (fake.allocs[i].reservation == r) {
            res = CUDA_ERROR_INVALID_VALUE; /* still mapped */
            goto out;
        }
    }

    munmap((void*)ptr, size);
    fake.resv[r].in_use = 0;
out:
    pthread_mutex_unlock(&fake.lock);
    return res;
}

static fake_handle_t *fake_handle_find(CUmemGenericAllocationHandle handle)
{
    size_t i;

    for (i = 0; i < fake.num_handles; ++i) {
        if (fake.handles[i].in_use && (fake.handles[i].id == handle)) {
            return &fake.handles[i];
        }
    }

    return NULL;
}

FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle,
                                 size_t size, const CUmemAllocationProp *prop,
                                 unsigned long long flags)
{
    fake_handle_t *h;
    int fd;
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if ((handle == NULL) || (prop == NULL) || (size == 0) ||
        (size % FAKE_VMM_GRANULARITY) ||
        (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) ||
        (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) ||
        (fake_check_device(prop->location.id) != CUDA_SUCCESS)) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    fd = memfd_create("rc_gdr_fake_vmm", MFD_CLOEXEC);
    if (fd < 0) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (ftruncate(fd, size) != 0) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }

    pthread_mutex_lock(&fake.lock);
    if (!FAKE_GROW(fake.handles, fake.num_handles, fake.max_handles)) {
        pthread_mutex_unlock(&fake.lock);
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }

    h              = &fake.handles[fake.num_handles++];
    h->id          = fake.next_handle_id++;
    h->memfd       = fd;
    h->size        = size;
    h->device      = prop->location.id;
    h->gdr_capable = prop->allocFlags.gpuDirectRDMACapable;
    h->in_use      = 1;
    *handle        = h->id;
    pthread_mutex_unlock(&fake.lock);
    fake_log("create", prop->location.id, size);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    fake_handle_t *h;
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }

    pthread_mutex_lock(&fake.lock);
    h = fake_handle_find(handle);
    if (h == NULL) {
        res = CUDA_ERROR_INVALID_VALUE;
    } else {
        /* existing mappings keep the memory, as with the real driver */
        close(h->memfd);
        h->in_use = 0;
    }
    pthread_mutex_unlock(&fake.lock);
    return res;
}

FAKE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle,
                              unsigned long long flags)
{
    fake_alloc_t *alloc;
    fake_handle_t *h;
    size_t i;
    void *p;
    int r;
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }

    pthread_mutex_lock(&fake.lock);
    h = fake_handle_find(handle);
    r = fake_resv_find(ptr, size);
    if ((h == NULL) || (r < 0) || (size == 0) || (offset + size > h->size) ||
        (ptr % FAKE_VMM_GRANULARITY) || (size % FAKE_VMM_GRANULARITY)) {
        res = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }

    for (i = 0; i < fake.num_allocs; ++i) {
        if ((ptr < fake.allocs[i].base + fake.allocs[i].size) &&
            (fake.allocs[i].base < ptr + size)) {
            res = CUDA_ERROR_ALREADY_MAPPED;
            goto out;
        }
    }

    /* inaccessible until cuMemSetAccess, like the real driver */
    p = mmap((void*)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->memfd,
             offset);
    if (p == MAP_FAILED) {
        res = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }

    alloc = fake_alloc_add(ptr, size, size, FAKE_MEM_VMM, h->device, NULL);
    if (alloc == NULL) {
        mmap((void*)ptr, size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
        res = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }

    alloc->accessible  = 0;
    alloc->gdr_capable = h->gdr_capable;
    alloc->reservation = r;
out:
    pthread_mutex_unlock(&fake.lock);
    return res;
}

FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    size_t i;
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }

    pthread_mutex_lock(&fake.lock);
    if (fake_resv_find(ptr, size) < 0) {
        res = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }

    for (i = 0; i < fake.num_allocs; ) {
        if ((fake.allocs[i].kind == FAKE_MEM_VMM) &&
            (fake.allocs[i].base >= ptr) &&
            (fake.allocs[i].base + fake.allocs[i].size <= ptr + size)) {
            fake_alloc_remove(&fake.allocs[i]);
        } else {
            ++i;
        }
    }

    /* back to reserved-only */
    mmap((void*)ptr, size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
out:
    pthread_mutex_unlock(&fake.lock);
    return res;
}

FAKE_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size,
                                    const CUmemAccessDesc *desc, size_t count)
{
    uintptr_t p;
    fake_alloc_t *alloc;
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if ((desc == NULL) || (count == 0) || (size == 0)) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    pthread_mutex_lock(&fake.lock);
    /* every byte of the range must be mapped */
    for (p = ptr; p < ptr + size; p = alloc->base + alloc->size) {
        alloc = fake_alloc_find(p);
        if ((alloc == NULL) || (alloc->kind != FAKE_MEM_VMM)) {
            res = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
    }

    if (mprotect((void*)ptr, size,
                 (desc->flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) ? PROT_NONE :
                 (desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READ) ? PROT_READ :
                 PROT_READ | PROT_WRITE) != 0) {
        res = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }

    for (p = ptr; p < ptr + size; p = alloc->base + alloc->size) {
        alloc             = fake_alloc_find(p);
        alloc->accessible = (desc->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE);
    }
out:
    pthread_mutex_unlock(&fake.lock);
    return res;
}


/*
 * DMA-BUF export
 */

/* [ptr, ptr+size) may be exported: one allocation, or VMM mappings of one
 * reservation that cover it without a hole */
static CUresult fake_dmabuf_check(uintptr_t ptr, size_t size)
{
    fake_alloc_t *alloc, *first;
    uintptr_t p;

    first = fake_alloc_find(ptr);
    if (first == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    switch (first->kind) {
    case FAKE_MEM_DEVICE:
        if (fake.dev[first->device].dmabuf != 1) {
            return CUDA_ERROR_NOT_SUPPORTED;
        }
        return (ptr + size <= first->base + first->map_len) ?
               CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case FAKE_MEM_VMM:
        if (fake.dev[first->device].dmabuf != 1) {
            return CUDA_ERROR_NOT_SUPPORTED;
        }
        for (p = ptr; p < ptr + size; p = alloc->base + alloc->size) {
            alloc = fake_alloc_find(p);
            if ((alloc == NULL) || (alloc->kind != FAKE_MEM_VMM) ||
                (alloc->reservation != first->reservation) ||
                (alloc->device != first->device) ||
                ((alloc != first) && !fake.dmabuf_span)) {
                return CUDA_ERROR_INVALID_VALUE;
            }
        }
        return CUDA_SUCCESS;
    default:
        /* pool, managed and pinned host memory: what an H200 with driver
         * 580 answers for them */
        return CUDA_ERROR_INVALID_VALUE;
    }
}

FAKE_EXPORT CUresult
cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr, size_t size,
                              CUmemRangeHandleType handleType,
                              unsigned long long flags)
{
    CUresult res = fake_check_ctx();
    int fd;

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if ((handle == NULL) ||
        (handleType != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD) ||
        (size == 0) || (dptr % fake.page_size) || (size % fake.page_size)) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    pthread_mutex_lock(&fake.lock);
    res = fake_dmabuf_check(dptr, size);
    pthread_mutex_unlock(&fake.lock);
    if (res != CUDA_SUCCESS) {
        return res;
    }

    /* the right size, not the allocation's pages (see the limits above) */
    fd = memfd_create("rc_gdr_fake_dmabuf", MFD_CLOEXEC);
    if (fd < 0) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (ftruncate(fd, size) != 0) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }

    *(int*)handle = fd;
    return CUDA_SUCCESS;
}


/*
 * What UCX's own CUDA modules (cuda_copy, cuda_ipc in a CUDA build of UCX)
 * call besides: enough for cuda_copy to copy the stand-in's memory; sharing
 * memory between processes is refused (NOT_SUPPORTED), as on a device
 * without IPC
 */

FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    CUresult res = fake_check_ctx();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if (device == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    *device = fake_current->device;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if (ctx == NULL) {
        ctx = fake_current;
    }
    if (!fake_ctx_valid(ctx) || (ctxId == NULL)) {
        return fake_ctx_valid(ctx) ? CUDA_ERROR_INVALID_VALUE :
                                     CUDA_ERROR_INVALID_CONTEXT;
    }

    *ctxId = (unsigned long long)ctx->device + 1; /* one context a device */
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    CUresult res = fake_check_device(dev);

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if (uuid == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    memset(uuid, 0, sizeof(*uuid));
    memcpy(uuid->bytes, "rc_gdr-fake-", 12);
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev,
                                                unsigned int *flags,
                                                int *active)
{
    CUresult res = fake_check_device(dev);

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if ((flags == NULL) || (active == NULL)) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    pthread_mutex_lock(&fake.lock);
    *active = (fake.dev[dev].primary_ctx.refcount > 0);
    pthread_mutex_unlock(&fake.lock);
    *flags = 0;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult res = fake_check_device(dev);

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if (bytes == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    *bytes = (size_t)16 << 30;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src,
                                   size_t ByteCount, CUstream hStream)
{
    return fake_copy((void*)dst, (const void*)src, ByteCount, 0, 0, hStream);
}

FAKE_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice,
                                          CUdeviceptr srcDevice,
                                          size_t ByteCount, CUstream hStream)
{
    return fake_copy((void*)dstDevice, (const void*)srcDevice, ByteCount,
                     dstDevice, srcDevice, hStream);
}

/* Copies are done when they return, so the stream is idle: the callback
 * runs now, as the driver would run it as soon as the stream drains */
FAKE_EXPORT CUresult cuStreamAddCallback(CUstream hStream,
                                         CUstreamCallback callback,
                                         void *userData, unsigned int flags)
{
    CUresult res = fake_check_init();

    if (res != CUDA_SUCCESS) {
        return res;
    }
    if ((callback == NULL) || (flags != 0)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!fake_stream_valid(hStream)) {
        return CUDA_ERROR_INVALID_HANDLE;
    }

    callback(hStream, CUDA_SUCCESS, userData);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemRangeGetAttribute(void *data, size_t dataSize,
                                            CUmem_range_attribute attribute,
                                            CUdeviceptr devPtr, size_t count)
{
    return CUDA_ERROR_NOT_SUPPORTED; /* managed-memory hints: none here */
}

FAKE_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle,
                                       CUdeviceptr dptr)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

FAKE_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr,
                                           CUipcMemHandle handle,
                                           unsigned int Flags)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

FAKE_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

FAKE_EXPORT CUresult
cuMemExportToShareableHandle(void *shareableHandle,
                             CUmemGenericAllocationHandle handle,
                             CUmemAllocationHandleType handleType,
                             unsigned long long flags)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

FAKE_EXPORT CUresult
cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                               void *osHandle,
                               CUmemAllocationHandleType shHandleType)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

FAKE_EXPORT CUresult
cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                       CUmemGenericAllocationHandle handle)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

FAKE_EXPORT CUresult
cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

FAKE_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

FAKE_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool,
                                        const CUmemAccessDesc *map,
                                        size_t count)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

FAKE_EXPORT CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out,
                                            CUdeviceptr ptr)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

FAKE_EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *ptr_out,
                                            CUmemoryPool pool,
                                            CUmemPoolPtrExportData *shareData)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

FAKE_EXPORT CUresult
cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                 CUmemAllocationHandleType handleType,
                                 unsigned long long flags)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

FAKE_EXPORT CUresult
cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
                                   CUmemAllocationHandleType handleType,
                                   unsigned long long flags)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

/*
 * cuGetProcAddress_v2: one version of each entry point, by its base name
 */

#define FAKE_PROC(_name, _func) {_name, (void*)(_func)}

static const struct {
    const char *name;
    void       *func;
} fake_procs[] = {
    FAKE_PROC("cuInit", cuInit),
    FAKE_PROC("cuDriverGetVersion", cuDriverGetVersion),
    FAKE_PROC("cuGetErrorString", cuGetErrorString),
    FAKE_PROC("cuGetErrorName", cuGetErrorName),
    FAKE_PROC("cuDeviceGetCount", cuDeviceGetCount),
    FAKE_PROC("cuDeviceGet", cuDeviceGet),
    FAKE_PROC("cuDeviceGetName", cuDeviceGetName),
    FAKE_PROC("cuDeviceGetAttribute", cuDeviceGetAttribute),
    FAKE_PROC("cuDeviceGetPCIBusId", cuDeviceGetPCIBusId),
    FAKE_PROC("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain),
    FAKE_PROC("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2),
    FAKE_PROC("cuCtxSetCurrent", cuCtxSetCurrent),
    FAKE_PROC("cuCtxGetCurrent", cuCtxGetCurrent),
    FAKE_PROC("cuCtxPushCurrent", cuCtxPushCurrent_v2),
    FAKE_PROC("cuCtxPopCurrent", cuCtxPopCurrent_v2),
    FAKE_PROC("cuPointerGetAttribute", cuPointerGetAttribute),
    FAKE_PROC("cuPointerGetAttributes", cuPointerGetAttributes),
    FAKE_PROC("cuPointerSetAttribute", cuPointerSetAttribute),
    FAKE_PROC("cuMemGetAddressRange", cuMemGetAddressRange_v2),
    FAKE_PROC("cuMemAlloc", cuMemAlloc_v2),
    FAKE_PROC("cuMemFree", cuMemFree_v2),
    FAKE_PROC("cuMemHostAlloc", cuMemHostAlloc),
    FAKE_PROC("cuMemFreeHost", cuMemFreeHost),
    FAKE_PROC("cuMemHostRegister", cuMemHostRegister_v2),
    FAKE_PROC("cuMemHostUnregister", cuMemHostUnregister),
    FAKE_PROC("cuMemAllocManaged", cuMemAllocManaged),
    FAKE_PROC("cuMemAllocAsync", cuMemAllocAsync),
    FAKE_PROC("cuMemFreeAsync", cuMemFreeAsync),
    FAKE_PROC("cuMemcpy", cuMemcpy),
    FAKE_PROC("cuMemcpyDtoH", cuMemcpyDtoH_v2),
    FAKE_PROC("cuMemcpyHtoD", cuMemcpyHtoD_v2),
    FAKE_PROC("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2),
    FAKE_PROC("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2),
    FAKE_PROC("cuStreamCreate", cuStreamCreate),
    FAKE_PROC("cuStreamDestroy", cuStreamDestroy_v2),
    FAKE_PROC("cuStreamSynchronize", cuStreamSynchronize),
    FAKE_PROC("cuEventCreate", cuEventCreate),
    FAKE_PROC("cuEventRecord", cuEventRecord),
    FAKE_PROC("cuEventQuery", cuEventQuery),
    FAKE_PROC("cuEventSynchronize", cuEventSynchronize),
    FAKE_PROC("cuEventDestroy", cuEventDestroy_v2),
    FAKE_PROC("cuMemGetHandleForAddressRange", cuMemGetHandleForAddressRange),
    FAKE_PROC("cuMemAddressReserve", cuMemAddressReserve),
    FAKE_PROC("cuMemAddressFree", cuMemAddressFree),
    FAKE_PROC("cuMemCreate", cuMemCreate),
    FAKE_PROC("cuMemRelease", cuMemRelease),
    FAKE_PROC("cuMemMap", cuMemMap),
    FAKE_PROC("cuMemUnmap", cuMemUnmap),
    FAKE_PROC("cuMemSetAccess", cuMemSetAccess),
    FAKE_PROC("cuMemGetAllocationGranularity", cuMemGetAllocationGranularity)
};

FAKE_EXPORT CUresult
cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                    cuuint64_t flags,
                    CUdriverProcAddressQueryResult *symbolStatus)
{
    size_t i;

    fake_config();
    if ((symbol == NULL) || (pfn == NULL)) {
        return CUDA_ERROR_INVALID_VALUE;
    }

    *pfn = NULL;
    if (fake.proc_address) {
        for (i = 0; i < sizeof(fake_procs) / sizeof(fake_procs[0]); ++i) {
            if (!strcmp(symbol, fake_procs[i].name)) {
                *pfn = fake_procs[i].func;
                break;
            }
        }
    }

    if (symbolStatus != NULL) {
        *symbolStatus = (*pfn != NULL) ? CU_GET_PROC_ADDRESS_SUCCESS :
                                         CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return (*pfn != NULL) ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
