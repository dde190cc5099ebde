/**
 * rc_gdr: CUDA free events reach their subscribers before the memory goes.
 *
 * Installs the free hooks (src/ucm), subscribes, then releases CUDA memory
 * in every way an application can: cuMemFree_v2 called through dlsym(),
 * cuMemFree through a pointer from cuGetProcAddress(), the rc_gdr shim,
 * cuMemFreeAsync (also the per-thread-default-stream variant), cuMemFreeHost,
 * cuMemUnmap of one VMM mapping, and cudaFree / cudaFreeAsync / cudaFreeHost
 * when libcudart can be opened with a real driver. libcudart is initialized
 * (and has filled its table of driver pointers) BEFORE the hooks are
 * installed, as in an application that starts CUDA before UCX. For each one the handler
 * must see the whole range, with the right kind, exactly once, while the
 * driver still knows the allocation (its buffer id is queried in the
 * handler), and the driver must not know it after the call. In a CUDA-built
 * UCX whose CUDA module reports frees, the mode is UCM, and every entry
 * point UCM patched is left to it (nothing is patched twice). Then: a free
 * made from inside a handler, frees from several threads while another
 * thread subscribes and unsubscribes, and unsubscription.
 *
 * Usage: ucm_free_test [-v] [--ucm-forward]
 *   -v             first print the first bytes of the release calls (what
 *                  the patcher must relocate)
 *   --ucm-forward  force mode UCM (RC_GDR_UCM_CUDA_MODE=ucm) and check that
 *                  a UCM_EVENT_MEM_TYPE_FREE is forwarded to subscribers
 *
 * The driver is libcuda.so.1, or RC_GDR_CUDA_LIBRARY (the stand-in driver
 * test/mocks/libcuda.so.1). Without a driver: "SKIP", exit 0. Prints a
 * PASS or FAIL line per check and "N passed, N failed"; exits 1 on failure.
 */

#define _GNU_SOURCE
#include <ucm/rc_gdr_ucm.h>
#include <uct/ib_gdr/rc_gdr_cuda.h>
#include "uct_test_util.h"

#include <ucm/api/ucm.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/sys/math.h>

#include <cuda.h>

#include <dlfcn.h>
#include <inttypes.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define TEST_ALLOC_SIZE        (3 * 65536 + 123) /* not a page multiple */
#define TEST_MAX_EVENTS        1024
#define TEST_NUM_THREADS       8
#define TEST_THREAD_ITERS      200
#define TEST_CUDART_VERSION    12000

/* Exported by libucm, declared only in UCX's internal headers */
void ucm_event_dispatch(ucm_event_type_t event_type, ucm_event_t *event);

typedef CUresult (*test_free_func_t)(CUdeviceptr dptr);
typedef CUresult (*test_free_host_func_t)(void *ptr);
typedef CUresult (*test_free_async_func_t)(CUdeviceptr dptr, CUstream s);
typedef CUresult (*test_unmap_func_t)(CUdeviceptr ptr, size_t size);
typedef CUresult (*test_get_attr_func_t)(void *data, CUpointer_attribute attr,
                                         CUdeviceptr ptr);
typedef CUresult (*test_get_range_func_t)(CUdeviceptr *base, size_t *size,
                                          CUdeviceptr dptr);
typedef CUresult (*test_get_proc_func_t)(const char *symbol, void **pfn,
                                         int version, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult *st);

/* The runtime API, by dlopen(): cudaError_t is an int, 0 is success */
typedef struct {
    void *handle;
    int  (*set_device)(int device);
    int  (*malloc)(void **ptr, size_t size);
    int  (*free)(void *ptr);
    int  (*malloc_async)(void **ptr, size_t size, void *stream);
    int  (*free_async)(void *ptr, void *stream);
    int  (*stream_synchronize)(void *stream);
    int  (*malloc_host)(void **ptr, size_t size);
    int  (*free_host)(void *ptr);
    int  (*runtime_get_version)(int *version);
} test_cudart_t;

/* What a handler saw */
typedef struct {
    void      *address;
    size_t    length;
    int       kind;
    int       valid;        /* the driver knew the address in the handler */
    uint64_t  buffer_id;
    int       nested;       /* reported from inside another handler */
} test_event_t;

typedef struct {
    const char *name;
    CUdeviceptr base;       /* what the driver reported before the free */
    size_t      size;
    uint64_t    buffer_id;
} test_alloc_t;

typedef struct {
    int         index;
    CUdeviceptr current;    /* the allocation being freed */
    unsigned    hits;       /* events for it */
    unsigned    misses;     /* allocations freed without an event */
    unsigned    invalid;    /* events after the memory was gone */
    int         error;
} test_thread_t;


static void                  *test_driver;
static test_get_attr_func_t  test_get_attr;
static test_get_range_func_t test_get_range;
static test_get_proc_func_t  test_get_proc;
static int                   test_driver_version;
static uct_rc_gdr_cuda_ctx_h test_ctx;

static pthread_mutex_t test_lock = PTHREAD_MUTEX_INITIALIZER;
static test_event_t    test_events[TEST_MAX_EVENTS];
static unsigned        test_num_events;
static unsigned        test_num_lost;
static int             test_in_handler;  /* under test_lock */
static void            *test_nested_free; /* freed by the next event */
static volatile int    test_threads_running;

static __thread test_thread_t *test_thread_self;

/* libcudart, opened and initialized before install when it can be */
static test_cudart_t test_rt;
static int           test_rt_ok;
static const char    *test_rt_why = "not opened";


static void test_result(int ok, const char *name, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    uct_test_vresult(ok, name, fmt, ap);
    va_end(ap);
}

static void test_skip(const char *name, const char *why)
{
    printf("SKIP %s: %s\n", name, why);
    fflush(stdout);
}

/*
 * What identifies the allocation at ptr while it exists: its buffer id, or
 * where a driver has none for this kind of memory, its start address. 0 when
 * the driver does not know ptr.
 */
static int test_buffer_id(CUdeviceptr ptr, uint64_t *id_p)
{
    unsigned long long id = 0;
    CUdeviceptr start     = 0;

    if (test_get_attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, ptr) ==
        CUDA_SUCCESS) {
        *id_p = id;
        return 1;
    }

    if ((test_get_attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr) ==
         CUDA_SUCCESS) && (start != 0)) {
        *id_p = start;
        return 1;
    }

    return 0;
}


/*
 * Handlers
 */

static void test_free_cb(void *address, size_t length,
                         rc_gdr_ucm_cuda_mem_kind_t kind, void *arg)
{
    test_thread_t *self = test_thread_self;
    test_event_t event  = {
        .address = address,
        .length  = length,
        .kind    = kind
    };
    void *nested;

    event.valid = test_buffer_id((CUdeviceptr)(uintptr_t)address,
                                 &event.buffer_id);

    if (self != NULL) {
        /* a worker thread: count, do not record */
        if ((CUdeviceptr)(uintptr_t)address == self->current) {
            ++self->hits;
            self->invalid += !event.valid;
        }
        return;
    }

    pthread_mutex_lock(&test_lock);
    event.nested = test_in_handler;
    if (test_num_events < TEST_MAX_EVENTS) {
        test_events[test_num_events++] = event;
    } else {
        ++test_num_lost;
    }
    nested           = test_nested_free;
    test_nested_free = NULL;
    ++test_in_handler;
    pthread_mutex_unlock(&test_lock);

    if (nested != NULL) {
        /* frees CUDA memory from inside a free event */
        uct_rc_gdr_cuda_mem_free(nested);
    }

    pthread_mutex_lock(&test_lock);
    --test_in_handler;
    pthread_mutex_unlock(&test_lock);
}

/* A second subscriber that counts, for subscription changes under load */
static void test_count_cb(void *address, size_t length,
                          rc_gdr_ucm_cuda_mem_kind_t kind, void *arg)
{
    __atomic_fetch_add((unsigned*)arg, 1, __ATOMIC_RELAXED);
}

static void test_events_reset(void)
{
    pthread_mutex_lock(&test_lock);
    test_num_events = 0;
    test_num_lost   = 0;
    pthread_mutex_unlock(&test_lock);
}

/* How many events for address; the first one in *event_p */
static unsigned test_events_find(CUdeviceptr address, test_event_t *event_p)
{
    unsigned i, count = 0;

    pthread_mutex_lock(&test_lock);
    for (i = 0; i < test_num_events; ++i) {
        if ((CUdeviceptr)(uintptr_t)test_events[i].address == address) {
            if (count++ == 0) {
                *event_p = test_events[i];
            }
        }
    }
    pthread_mutex_unlock(&test_lock);

    return count;
}


/*
 * Checks
 */

/* Record what the driver says about ptr before it is freed */
static int test_alloc_describe(const char *name, void *ptr,
                               test_alloc_t *alloc)
{
    CUresult res;

    alloc->name = name;
    res         = test_get_range(&alloc->base, &alloc->size,
                                 (CUdeviceptr)(uintptr_t)ptr);
    if (res != CUDA_SUCCESS) {
        test_result(0, name, "cuMemGetAddressRange(%p) failed: %d", ptr,
                    (int)res);
        return 0;
    }

    if (!test_buffer_id(alloc->base, &alloc->buffer_id)) {
        test_result(0, name, "no buffer id for %p", ptr);
        return 0;
    }

    test_events_reset();
    return 1;
}

/*
 * After the free of alloc: exactly one event, for the whole range, of kind,
 * seen while the driver still knew the allocation; and, unless check_gone
 * is 0, the driver no longer knows it.
 */
static void test_alloc_check(const test_alloc_t *alloc, CUresult free_res,
                             rc_gdr_ucm_cuda_mem_kind_t kind, int check_gone)
{
    test_event_t event;
    unsigned count;
    uint64_t id;
    int gone;

    if (free_res != CUDA_SUCCESS) {
        test_result(0, alloc->name, "the free failed: %d", (int)free_res);
        return;
    }

    gone  = !test_buffer_id(alloc->base, &id) || (id != alloc->buffer_id);
    count = test_events_find(alloc->base, &event);
    if (count == 0) {
        test_result(0, alloc->name, "no event for 0x%llx+%zu",
                    (unsigned long long)alloc->base, alloc->size);
    } else if (count > 1) {
        test_result(0, alloc->name, "%u events for 0x%llx", count,
                    (unsigned long long)alloc->base);
    } else if (event.length != alloc->size) {
        test_result(0, alloc->name, "length %zu, the allocation has %zu",
                    event.length, alloc->size);
    } else if (event.kind != (int)kind) {
        test_result(0, alloc->name, "kind %s, expected %s",
                    rc_gdr_ucm_cuda_mem_kind_str(event.kind),
                    rc_gdr_ucm_cuda_mem_kind_str(kind));
    } else if (!event.valid || (event.buffer_id != alloc->buffer_id)) {
        test_result(0, alloc->name, "the memory was gone in the handler "
                    "(valid %d, buffer id %" PRIu64 ", before %" PRIu64 ")",
                    event.valid, event.buffer_id, alloc->buffer_id);
    } else if (check_gone && !gone) {
        test_result(0, alloc->name, "the driver still knows 0x%llx after "
                    "the free", (unsigned long long)alloc->base);
    } else {
        test_result(1, alloc->name, "0x%llx+%zu %s, buffer id %" PRIu64
                    " valid in the handler%s",
                    (unsigned long long)alloc->base, alloc->size,
                    rc_gdr_ucm_cuda_mem_kind_str(kind), alloc->buffer_id,
                    gone ? ", gone after" : "");
    }
}

static void *test_device_alloc(const char *name)
{
    void *ptr;

    if (uct_rc_gdr_cuda_mem_alloc(TEST_ALLOC_SIZE, &ptr) != UCS_OK) {
        test_result(0, name, "uct_rc_gdr_cuda_mem_alloc failed");
        return NULL;
    }

    return ptr;
}

static void test_driver_free(const char *name, test_free_func_t free_fn)
{
    test_alloc_t alloc;
    void *ptr;

    if (free_fn == NULL) {
        test_skip(name, "the driver has no such entry point");
        return;
    }

    ptr = test_device_alloc(name);
    if ((ptr == NULL) || !test_alloc_describe(name, ptr, &alloc)) {
        return;
    }

    test_alloc_check(&alloc, free_fn((CUdeviceptr)(uintptr_t)ptr),
                     RC_GDR_UCM_CUDA_MEM_DEVICE, 1);
}

static void *test_proc(const char *symbol, cuuint64_t flags)
{
    CUdriverProcAddressQueryResult qres;
    void *func = NULL;

    if ((test_get_proc == NULL) ||
        (test_get_proc(symbol, &func, test_driver_version, flags, &qres) !=
         CUDA_SUCCESS)) {
        return NULL;
    }

    return func;
}

static void test_shim_free(void)
{
    const char *name = "mem_free (rc_gdr shim)";
    test_alloc_t alloc;
    ucs_status_t status;
    void *ptr;

    ptr = test_device_alloc(name);
    if ((ptr == NULL) || !test_alloc_describe(name, ptr, &alloc)) {
        return;
    }

    status = uct_rc_gdr_cuda_mem_free(ptr);
    test_alloc_check(&alloc, (status == UCS_OK) ? CUDA_SUCCESS :
                                                  CUDA_ERROR_UNKNOWN,
                     RC_GDR_UCM_CUDA_MEM_DEVICE, 1);
}

static void test_async_free(const char *name, test_free_async_func_t free_fn,
                            CUstream stream)
{
    uct_rc_gdr_cuda_stream_h shim_stream = (uct_rc_gdr_cuda_stream_h)stream;
    test_alloc_t alloc;
    CUresult res;
    void *ptr;

    if (free_fn == NULL) {
        test_skip(name, "the driver has no such entry point");
        return;
    }

    if (uct_rc_gdr_cuda_mem_alloc_async(TEST_ALLOC_SIZE, shim_stream, &ptr) !=
        UCS_OK) {
        test_skip(name, "no stream-ordered allocation on this device");
        return;
    }

    if ((uct_rc_gdr_cuda_stream_synchronize(shim_stream) != UCS_OK) ||
        !test_alloc_describe(name, ptr, &alloc)) {
        return;
    }

    res = free_fn((CUdeviceptr)(uintptr_t)ptr, stream);
    uct_rc_gdr_cuda_stream_synchronize(shim_stream);
    /* a pool may keep the range known after the free: not checked */
    test_alloc_check(&alloc, res, RC_GDR_UCM_CUDA_MEM_DEVICE, 0);
}

static void test_host_free(void)
{
    const char *name             = "cuMemFreeHost (dlsym)";
    test_free_host_func_t free_fn;
    test_alloc_t alloc;
    void *ptr;

    free_fn = (test_free_host_func_t)dlsym(test_driver, "cuMemFreeHost");
    if (free_fn == NULL) {
        test_skip(name, "the driver has no such entry point");
        return;
    }

    if (uct_rc_gdr_cuda_host_alloc(TEST_ALLOC_SIZE, &ptr) != UCS_OK) {
        test_result(0, name, "uct_rc_gdr_cuda_host_alloc failed");
        return;
    }

    if (!test_alloc_describe(name, ptr, &alloc)) {
        return;
    }

    test_alloc_check(&alloc, free_fn(ptr), RC_GDR_UCM_CUDA_MEM_HOST_PINNED, 1);
}

/*
 * VMM: two physical allocations mapped back to back; unmapping the first
 * reports exactly its range, while it is still mapped. Releasing the handles
 * is no event.
 */
static void test_vmm_unmap(void)
{
    const char *name = "cuMemUnmap (VMM)";
    test_unmap_func_t unmap_fn;
    uint64_t handles[2], id_before, id;
    test_event_t event;
    unsigned count, i;
    size_t gran;
    uint8_t *base;
    CUresult res;
    int gone;

    unmap_fn = (test_unmap_func_t)dlsym(test_driver, "cuMemUnmap");
    if ((unmap_fn == NULL) ||
        (uct_rc_gdr_cuda_vmm_granularity(0, &gran) != UCS_OK)) {
        test_skip(name, "no virtual memory management in this driver");
        return;
    }

    if (uct_rc_gdr_cuda_vmm_reserve(2 * gran, gran, (void**)&base) !=
        UCS_OK) {
        test_result(0, name, "cuMemAddressReserve failed");
        return;
    }

    for (i = 0; i < 2; ++i) {
        if ((uct_rc_gdr_cuda_vmm_create(0, gran, 1, &handles[i]) != UCS_OK) &&
            (uct_rc_gdr_cuda_vmm_create(0, gran, 0, &handles[i]) != UCS_OK)) {
            test_result(0, name, "cuMemCreate failed");
            return;
        }

        if ((uct_rc_gdr_cuda_vmm_map(base + (i * gran), gran, handles[i]) !=
             UCS_OK) ||
            (uct_rc_gdr_cuda_vmm_set_access(base + (i * gran), gran, 0) !=
             UCS_OK)) {
            test_result(0, name, "cuMemMap/cuMemSetAccess failed");
            return;
        }
    }

    if (!test_buffer_id((CUdeviceptr)(uintptr_t)base, &id_before)) {
        test_result(0, name, "no buffer id for the mapping at %p", base);
        return;
    }

    test_events_reset();
    /* the handles go first: the mappings keep the memory */
    for (i = 0; i < 2; ++i) {
        uct_rc_gdr_cuda_vmm_release(handles[i]);
    }
    count = test_events_find((CUdeviceptr)(uintptr_t)base, &event);
    test_result(count == 0, "cuMemRelease (VMM, still mapped)",
                "%u events", count);

    test_events_reset();
    res   = unmap_fn((CUdeviceptr)(uintptr_t)base, gran);
    count = test_events_find((CUdeviceptr)(uintptr_t)base, &event);
    gone  = !test_buffer_id((CUdeviceptr)(uintptr_t)base, &id) ||
            (id != id_before);
    if (res != CUDA_SUCCESS) {
        test_result(0, name, "cuMemUnmap failed: %d", (int)res);
    } else if (count != 1) {
        test_result(0, name, "%u events for %p", count, base);
    } else if ((event.length != gran) ||
               (event.kind != RC_GDR_UCM_CUDA_MEM_VMM)) {
        test_result(0, name, "%p+%zu %s, expected +%zu vmm", event.address,
                    event.length, rc_gdr_ucm_cuda_mem_kind_str(event.kind),
                    gran);
    } else if (!event.valid || (event.buffer_id != id_before)) {
        test_result(0, name, "the mapping was gone in the handler");
    } else if (!gone) {
        test_result(0, name, "the driver still knows %p after the unmap",
                    base);
    } else {
        test_result(1, name, "%p+%zu vmm, valid in the handler, gone after",
                    base, gran);
    }

    /* the second mapping, through the shim */
    test_events_reset();
    uct_rc_gdr_cuda_vmm_unmap(base + gran, gran);
    count = test_events_find((CUdeviceptr)(uintptr_t)(base + gran), &event);
    test_result((count == 1) && (event.length == gran) && event.valid,
                "vmm_unmap (rc_gdr shim)", "%u events, length %zu, valid %d",
                count, (count > 0) ? event.length : 0,
                (count > 0) ? event.valid : 0);

    uct_rc_gdr_cuda_vmm_unreserve(base, 2 * gran);
}

/* A free made from inside a handler is reported too, and nothing hangs */
static void test_nested_free_in_handler(void)
{
    const char *name = "free from inside a handler";
    test_free_func_t free_fn;
    test_alloc_t outer, inner;
    test_event_t event;
    void *ptr1, *ptr2;
    CUresult res;

    free_fn = (test_free_func_t)dlsym(test_driver, "cuMemFree_v2");
    ptr1    = test_device_alloc(name);
    ptr2    = test_device_alloc(name);
    if ((free_fn == NULL) || (ptr1 == NULL) || (ptr2 == NULL) ||
        !test_alloc_describe(name, ptr2, &inner) ||
        !test_alloc_describe(name, ptr1, &outer)) {
        return;
    }

    pthread_mutex_lock(&test_lock);
    test_nested_free = ptr2;
    pthread_mutex_unlock(&test_lock);

    res = free_fn((CUdeviceptr)(uintptr_t)ptr1);
    if (res != CUDA_SUCCESS) {
        test_result(0, name, "cuMemFree_v2 failed: %d", (int)res);
    } else if (test_events_find(outer.base, &event) != 1) {
        test_result(0, name, "no single event for the outer free");
    } else if (test_events_find(inner.base, &event) != 1) {
        test_result(0, name, "no single event for the free in the handler");
    } else if (!event.nested || !event.valid ||
               (event.length != inner.size)) {
        test_result(0, name, "inner event: nested %d valid %d length %zu",
                    event.nested, event.valid, event.length);
    } else {
        test_result(1, name, "both reported, the inner one while the outer "
                    "handler ran");
    }
}

static void *test_thread_func(void *arg)
{
    test_thread_t *self = arg;
    test_free_func_t free_fn;
    void *ptr;
    int i;

    test_thread_self = self;
    free_fn          = (test_free_func_t)dlsym(test_driver, "cuMemFree_v2");
    if (uct_rc_gdr_cuda_ctx_set_current(test_ctx) != UCS_OK) {
        self->error = 1;
        return NULL;
    }

    for (i = 0; i < TEST_THREAD_ITERS; ++i) {
        if (uct_rc_gdr_cuda_mem_alloc(TEST_ALLOC_SIZE + (self->index * 4096),
                                      &ptr) != UCS_OK) {
            self->error = 1;
            break;
        }

        self->current = (CUdeviceptr)(uintptr_t)ptr;
        /* alternate between two ways in */
        if (i & 1) {
            uct_rc_gdr_cuda_mem_free(ptr);
        } else {
            free_fn(self->current);
        }
        if (self->hits != (unsigned)(i + 1)) {
            ++self->misses;
            self->hits = i + 1;
        }
    }

    return NULL;
}

static void *test_subscriber_func(void *arg)
{
    unsigned *count = arg;
    unsigned rounds = 0;

    while (__atomic_load_n(&test_threads_running, __ATOMIC_ACQUIRE)) {
        if (rc_gdr_ucm_cuda_set_free_handler(test_count_cb, count) ==
            UCS_OK) {
            rc_gdr_ucm_cuda_unset_free_handler(test_count_cb, count);
        }
        ++rounds;
    }

    return (void*)(uintptr_t)rounds;
}

static void test_threads(void)
{
    const char *name = "frees from several threads, subscriptions "
                       "changing meanwhile";
    test_thread_t threads[TEST_NUM_THREADS] = {};
    pthread_t tids[TEST_NUM_THREADS], sub_tid;
    unsigned misses, invalid, errors, count;
    void *rounds;
    int i;

    count                = 0;
    test_threads_running = 1;
    pthread_create(&sub_tid, NULL, test_subscriber_func, &count);
    for (i = 0; i < TEST_NUM_THREADS; ++i) {
        threads[i].index = i;
        pthread_create(&tids[i], NULL, test_thread_func, &threads[i]);
    }

    misses = invalid = errors = 0;
    for (i = 0; i < TEST_NUM_THREADS; ++i) {
        pthread_join(tids[i], NULL);
        misses  += threads[i].misses;
        invalid += threads[i].invalid;
        errors  += threads[i].error;
    }
    __atomic_store_n(&test_threads_running, 0, __ATOMIC_RELEASE);
    pthread_join(sub_tid, &rounds);

    test_result((misses == 0) && (invalid == 0) && (errors == 0), name,
                "%d frees, %u without an event, %u after release, "
                "%u thread errors; %u subscription rounds",
                TEST_NUM_THREADS * TEST_THREAD_ITERS, misses, invalid, errors,
                (unsigned)(uintptr_t)rounds);
}

static void test_unsubscribe(void)
{
    const char *name = "unset_free_handler";
    test_free_func_t free_fn;
    test_event_t event;
    ucs_status_t status;
    test_alloc_t alloc;
    void *ptr;

    free_fn = (test_free_func_t)dlsym(test_driver, "cuMemFree_v2");
    ptr     = test_device_alloc(name);
    if ((ptr == NULL) || !test_alloc_describe(name, ptr, &alloc)) {
        return;
    }

    status = rc_gdr_ucm_cuda_unset_free_handler(test_free_cb, NULL);
    free_fn((CUdeviceptr)(uintptr_t)ptr);
    test_result((status == UCS_OK) &&
                (test_events_find(alloc.base, &event) == 0) &&
                (rc_gdr_ucm_cuda_unset_free_handler(test_free_cb, NULL) ==
                 UCS_ERR_NO_ELEM), name,
                "no event after unsubscribing, a second unset is NO_ELEM");
}


/*
 * The runtime API
 */

/* Before install: open libcudart and make it resolve the driver */
static int test_cudart_open(test_cudart_t *rt, const char **why_p)
{
    static const char *names[] = {"libcudart.so.13", "libcudart.so.12",
                                  "libcudart.so"};
    uct_rc_gdr_cuda_driver_info_t info;
    void *ptr;
    unsigned i;

    memset(rt, 0, sizeof(*rt));
    if (uct_rc_gdr_cuda_driver_info(&info) != UCS_OK) {
        *why_p = "no CUDA driver";
        return 0;
    }

    if (info.emulated) {
        *why_p = "the stand-in driver cannot serve libcudart";
        return 0;
    }

    for (i = 0; (i < 3) && (rt->handle == NULL); ++i) {
        rt->handle = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    }

    if (rt->handle == NULL) {
        *why_p = "libcudart.so cannot be opened";
        return 0;
    }

#define TEST_CUDART_SYM(_member, _sym) \
    *(void**)&rt->_member = dlsym(rt->handle, _sym);

    TEST_CUDART_SYM(set_device,          "cudaSetDevice")
    TEST_CUDART_SYM(malloc,              "cudaMalloc")
    TEST_CUDART_SYM(free,                "cudaFree")
    TEST_CUDART_SYM(malloc_async,        "cudaMallocAsync")
    TEST_CUDART_SYM(free_async,          "cudaFreeAsync")
    TEST_CUDART_SYM(stream_synchronize,  "cudaStreamSynchronize")
    TEST_CUDART_SYM(malloc_host,         "cudaMallocHost")
    TEST_CUDART_SYM(free_host,           "cudaFreeHost")
    TEST_CUDART_SYM(runtime_get_version, "cudaRuntimeGetVersion")

    if ((rt->set_device == NULL) || (rt->malloc == NULL) ||
        (rt->free == NULL) || (rt->set_device(0) != 0) ||
        (rt->malloc(&ptr, TEST_ALLOC_SIZE) != 0) || (rt->free(ptr) != 0)) {
        *why_p = "libcudart is not usable with this driver";
        return 0;
    }

    return 1;
}

static void test_cudart(void)
{
    test_cudart_t rt = test_rt;
    test_alloc_t alloc;
    int version = 0;
    void *ptr;
    int ret;

    if (!test_rt_ok) {
        test_skip("cudaFree, cudaFreeAsync, cudaFreeHost", test_rt_why);
        return;
    }

    if (rt.runtime_get_version != NULL) {
        rt.runtime_get_version(&version);
    }
    printf("INFO libcudart %d, initialized before install: its driver "
           "pointers came from cuGetProcAddress before the code was "
           "patched\n", version);

    if ((rt.malloc(&ptr, TEST_ALLOC_SIZE) == 0) &&
        test_alloc_describe("cudaFree", ptr, &alloc)) {
        ret = rt.free(ptr);
        test_alloc_check(&alloc, (ret == 0) ? CUDA_SUCCESS :
                                              CUDA_ERROR_UNKNOWN,
                         RC_GDR_UCM_CUDA_MEM_DEVICE, 1);
    } else {
        test_result(0, "cudaFree", "cudaMalloc failed");
    }

    if ((rt.malloc_async == NULL) || (rt.free_async == NULL)) {
        test_skip("cudaFreeAsync", "not in this libcudart");
    } else if ((rt.malloc_async(&ptr, TEST_ALLOC_SIZE, NULL) == 0) &&
               (rt.stream_synchronize(NULL) == 0) &&
               test_alloc_describe("cudaFreeAsync", ptr, &alloc)) {
        ret = rt.free_async(ptr, NULL);
        rt.stream_synchronize(NULL);
        test_alloc_check(&alloc, (ret == 0) ? CUDA_SUCCESS :
                                              CUDA_ERROR_UNKNOWN,
                         RC_GDR_UCM_CUDA_MEM_DEVICE, 0);
    } else {
        test_result(0, "cudaFreeAsync", "cudaMallocAsync failed");
    }

    if ((rt.malloc_host == NULL) || (rt.free_host == NULL)) {
        test_skip("cudaFreeHost", "not in this libcudart");
    } else if ((rt.malloc_host(&ptr, TEST_ALLOC_SIZE) == 0) &&
               test_alloc_describe("cudaFreeHost", ptr, &alloc)) {
        ret = rt.free_host(ptr);
        test_alloc_check(&alloc, (ret == 0) ? CUDA_SUCCESS :
                                              CUDA_ERROR_UNKNOWN,
                         RC_GDR_UCM_CUDA_MEM_HOST_PINNED, 1);
    } else {
        test_result(0, "cudaFreeHost", "cudaMallocHost failed");
    }

    /* libcudart stays loaded: its atexit handlers free memory */
}


/*
 * Mode UCM: a UCM_EVENT_MEM_TYPE_FREE reaches the subscribers
 */

static void test_ucm_forward(void)
{
    static const struct {
        ucs_memory_type_t          mem_type;
        rc_gdr_ucm_cuda_mem_kind_t kind;
    } cases[] = {
        {UCS_MEMORY_TYPE_CUDA,         RC_GDR_UCM_CUDA_MEM_DEVICE},
        {UCS_MEMORY_TYPE_CUDA_MANAGED, RC_GDR_UCM_CUDA_MEM_DEVICE},
        {UCS_MEMORY_TYPE_HOST,         RC_GDR_UCM_CUDA_MEM_HOST_PINNED}
    };
    rc_gdr_ucm_cuda_hook_info_t info;
    char name[64];
    test_event_t event;
    ucm_event_t ucm_event;
    unsigned i, count;

    test_result(rc_gdr_ucm_cuda_hooks(&info, 1) == 0,
                "mode ucm patches nothing", NULL);

    for (i = 0; i < 3; ++i) {
        snprintf(name, sizeof(name), "UCM_EVENT_MEM_TYPE_FREE %s forwarded",
                 ucs_memory_type_names[cases[i].mem_type]);
        test_events_reset();
        memset(&ucm_event, 0, sizeof(ucm_event));
        ucm_event.mem_type.address  = (void*)(uintptr_t)(0x7f0000100000ul +
                                                         (i << 20));
        ucm_event.mem_type.size     = 65536 * (i + 1);
        ucm_event.mem_type.mem_type = cases[i].mem_type;
        ucm_event_dispatch(UCM_EVENT_MEM_TYPE_FREE, &ucm_event);

        count = test_events_find(
                (CUdeviceptr)(uintptr_t)ucm_event.mem_type.address, &event);
        test_result((count == 1) &&
                    (event.length == ucm_event.mem_type.size) &&
                    (event.kind == (int)cases[i].kind), name,
                    "%u events, length %zu, kind %s", count,
                    (count > 0) ? event.length : 0,
                    (count > 0) ? rc_gdr_ucm_cuda_mem_kind_str(event.kind) :
                                  "-");
    }
}


static int test_driver_open(void)
{
    uct_rc_gdr_cuda_driver_info_t info;

    if (uct_rc_gdr_cuda_driver_info(&info) != UCS_OK) {
        return 0;
    }

    test_driver_version = info.driver_version;
    test_driver         = dlopen(info.library, RTLD_NOW | RTLD_NOLOAD);
    if (test_driver == NULL) {
        return 0;
    }

    test_get_attr  = (test_get_attr_func_t)dlsym(test_driver,
                                                 "cuPointerGetAttribute");
    test_get_range = (test_get_range_func_t)dlsym(test_driver,
                                                  "cuMemGetAddressRange_v2");
    test_get_proc  = (test_get_proc_func_t)dlsym(test_driver,
                                                 "cuGetProcAddress_v2");
    printf("INFO driver %s version %d%s\n", info.library,
           info.driver_version, info.emulated ? " (stand-in, no GPU)" : "");
    return (test_get_attr != NULL) && (test_get_range != NULL);
}

static void test_print_hooks(void)
{
    rc_gdr_ucm_cuda_hook_info_t info[32];
    unsigned i, num;

    num = rc_gdr_ucm_cuda_hooks(info, 32);
    for (i = 0; (i < num) && (i < 32); ++i) {
        printf("INFO hooked %-36s at %p by %s\n", info[i].name,
               info[i].address, info[i].method);
    }
}

/* The code the hooks will displace, before install patches it */
static void test_print_prologues(void)
{
    static const char *symbols[] = {"cuMemFree", "cuMemFree_v2",
                                    "cuMemFreeHost", "cuMemFreeAsync",
                                    "cuMemFreeAsync_ptsz", "cuMemUnmap"};
    const uint8_t *code;
    void *driver;
    unsigned i, j;

    if ((uct_rc_gdr_cuda_init() != UCS_OK) ||
        ((driver = dlopen(uct_rc_gdr_cuda_library_name(),
                          RTLD_NOW | RTLD_NOLOAD)) == NULL)) {
        return;
    }

    for (i = 0; i < sizeof(symbols) / sizeof(symbols[0]); ++i) {
        code = dlsym(driver, symbols[i]);
        if (code == NULL) {
            continue;
        }

        printf("INFO prologue %-20s", symbols[i]);
        for (j = 0; j < 24; ++j) {
            printf(" %02x", code[j]);
        }
        printf("\n");
    }

    dlclose(driver);
}

/*
 * A CUDA-built UCX: UCM's CUDA module patches the driver's exports it knows
 * of when something subscribes to its free events. The test subscribes
 * first, as UCP would before rc_gdr, so that what UCM patched can be seen
 * before rc_gdr installs.
 */

#define TEST_MAX_ENTRIES  32
#define TEST_CODE_BYTES   16

typedef struct {
    char          name[64];
    const uint8_t *address;
    uint8_t       code[TEST_CODE_BYTES]; /* after UCM, before rc_gdr */
} test_entry_t;

static test_entry_t test_entries[TEST_MAX_ENTRIES];
static unsigned     test_num_entries;
static int          test_ucm_cuda;   /* UCM's CUDA module reports frees */

static void test_ucm_dummy_cb(ucm_event_type_t event_type, ucm_event_t *event,
                              void *arg)
{
}

static int test_find_ucm_cuda_cb(struct dl_phdr_info *info, size_t size,
                                 void *arg)
{
    return (info->dlpi_name != NULL) &&
           (strstr(info->dlpi_name, "libucm_cuda.so") != NULL);
}

/*
 * The object the jump that code (a copy of the bytes at address) makes leads
 * into, or NULL. x86-64, the forms UCM's patcher writes: "jmp rel32",
 * "movabs $hook,%rax; jmp *%rax" and (older releases) the same with %r11.
 */
static const char *test_jump_object(const uint8_t *code, const uint8_t *address)
{
#if defined(__x86_64__)
    const void *target = NULL;
    Dl_info info;
    int32_t rel;
    uint64_t abs;

    if (code[0] == 0xe9) {
        memcpy(&rel, code + 1, sizeof(rel));
        target = address + 5 + rel;
    } else if ((code[0] == 0x48) && (code[1] == 0xb8) &&
               (code[10] == 0xff) && (code[11] == 0xe0)) {
        memcpy(&abs, code + 2, sizeof(abs));
        target = (const void*)(uintptr_t)abs;
    } else if ((code[0] == 0x49) && (code[1] == 0xbb) &&
               (code[10] == 0x41) && (code[11] == 0xff) &&
               (code[12] == 0xe3)) {
        memcpy(&abs, code + 2, sizeof(abs));
        target = (const void*)(uintptr_t)abs;
    }

    if ((target != NULL) && dladdr(target, &info) && (info.dli_fname != NULL)) {
        return info.dli_fname;
    }
#endif
    return NULL;
}

static void test_entry_add(const char *name, const void *address)
{
    test_entry_t *entry;
    unsigned i;

    for (i = 0; i < test_num_entries; ++i) {
        if (test_entries[i].address == address) {
            return;
        }
    }

    if ((address == NULL) || (test_num_entries == TEST_MAX_ENTRIES)) {
        return;
    }

    entry          = &test_entries[test_num_entries++];
    entry->address = address;
    snprintf(entry->name, sizeof(entry->name), "%s", name);
    memcpy(entry->code, address, TEST_CODE_BYTES);
}

/* Subscribe to UCM, then note every release entry point's first bytes */
static void test_ucm_load(void)
{
    static const char *exports[] = {"cuMemFree", "cuMemFree_v2",
                                    "cuMemFreeHost", "cuMemFreeHost_v2",
                                    "cuMemFreeAsync", "cuMemFreeAsync_ptsz",
                                    "cuMemUnmap"};
    static const char *procs[]   = {"cuMemFree", "cuMemFreeHost",
                                    "cuMemFreeAsync", "cuMemUnmap"};
    static const cuuint64_t flags[] = {
        CU_GET_PROC_ADDRESS_DEFAULT,
        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
    };
    CUdriverProcAddressQueryResult qres;
    test_get_proc_func_t get_proc;
    char name[64];
    void *driver, *func;
    unsigned i, f;

    test_ucm_cuda = (ucm_set_event_handler(UCM_EVENT_MEM_TYPE_FREE, 1000,
                                           test_ucm_dummy_cb, NULL) ==
                     UCS_OK) &&
                    dl_iterate_phdr(test_find_ucm_cuda_cb, NULL);
    ucm_unset_event_handler(UCM_EVENT_MEM_TYPE_FREE, test_ucm_dummy_cb, NULL);
    printf("INFO UCM's CUDA module %s\n",
           test_ucm_cuda ? "is loaded and subscribed" :
                           "does not report frees in this process");

    if ((uct_rc_gdr_cuda_init() != UCS_OK) ||
        ((driver = dlopen(uct_rc_gdr_cuda_library_name(),
                          RTLD_NOW | RTLD_NOLOAD)) == NULL)) {
        return;
    }

    for (i = 0; i < sizeof(exports) / sizeof(exports[0]); ++i) {
        test_entry_add(exports[i], dlsym(driver, exports[i]));
    }

    get_proc = (test_get_proc_func_t)dlsym(driver, "cuGetProcAddress_v2");
    for (i = 0; (get_proc != NULL) && (i < sizeof(procs) / sizeof(procs[0]));
         ++i) {
        for (f = 0; f < sizeof(flags) / sizeof(flags[0]); ++f) {
            if (get_proc(procs[i], &func, TEST_CUDART_VERSION, flags[f],
                         &qres) == CUDA_SUCCESS) {
                snprintf(name, sizeof(name), "%s@proc(0x%x)", procs[i],
                         (unsigned)flags[f]);
                test_entry_add(name, func);
            }
        }
    }

    dlclose(driver);
}

/*
 * Where UCM reports: every entry point UCM patched is left as it was, and
 * is none of rc_gdr's; the others are rc_gdr's.
 */
static void test_patched_once(void)
{
    rc_gdr_ucm_cuda_hook_info_t info[32];
    unsigned i, j, num, ours, ucm = 0, bad = 0;
    const char *object;

    num = rc_gdr_ucm_cuda_hooks(info, 32);
    for (i = 0; i < test_num_entries; ++i) {
        object = test_jump_object(test_entries[i].code,
                                  test_entries[i].address);
        if ((object == NULL) || (strstr(object, "libucm_cuda") == NULL)) {
            continue;
        }

        ++ucm;
        if (memcmp(test_entries[i].address, test_entries[i].code,
                   TEST_CODE_BYTES)) {
            printf("INFO %s was patched again after UCM\n",
                   test_entries[i].name);
            ++bad;
        }
        for (j = 0; (j < num) && (j < 32); ++j) {
            if (info[j].address == (const void*)test_entries[i].address) {
                printf("INFO %s is UCM's and also hooked as %s\n",
                       test_entries[i].name, info[j].name);
                ++bad;
            }
        }
    }

    ours = ucs_min(num, 32);
    test_result((ucm > 0) && (bad == 0), "nothing patched twice",
                "%u entry points patched by UCM and left to it, %u hooked "
                "here (those UCM leaves out)", ucm, ours);
}

int main(int argc, char **argv)
{
    int ucm_forward = 0;
    ucs_status_t status;
    int i;

    /* what was printed survives a crash in a hook */
    setvbuf(stdout, NULL, _IOLBF, 0);

    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--ucm-forward")) {
            ucm_forward = 1;
        } else if (!strcmp(argv[i], "-v")) {
            test_print_prologues();
        } else {
            fprintf(stderr, "usage: %s [-v] [--ucm-forward]\n", argv[0]);
            return 2;
        }
    }

    if (ucm_forward) {
        setenv(RC_GDR_UCM_CUDA_MODE_ENV, "ucm", 1);
    } else {
        test_rt_ok = test_cudart_open(&test_rt, &test_rt_why);
        test_ucm_load();
    }

    status = rc_gdr_ucm_cuda_install();
    if (status == UCS_ERR_NO_DEVICE) {
        printf("SKIP ucm_free_test: no CUDA driver (%s)\n",
               uct_rc_gdr_cuda_library_name());
        return 0;
    }

    test_result(status == UCS_OK, "install", "%s, mode %s",
                ucs_status_string(status),
                rc_gdr_ucm_cuda_mode_str(rc_gdr_ucm_cuda_mode()));
    test_result(rc_gdr_ucm_cuda_install() == status, "install again",
                "the first outcome");

    if (!test_driver_open()) {
        test_result(0, "driver", "cannot open %s again",
                    uct_rc_gdr_cuda_library_name());
        goto out;
    }

    if (uct_rc_gdr_cuda_ctx_activate(0, &test_ctx) != UCS_OK) {
        test_result(0, "context", "cannot activate device 0");
        goto out;
    }

    status = rc_gdr_ucm_cuda_set_free_handler(test_free_cb, NULL);
    test_result((status == UCS_OK) &&
                (rc_gdr_ucm_cuda_set_free_handler(test_free_cb, NULL) ==
                 UCS_ERR_ALREADY_EXISTS), "set_free_handler",
                "a second one is ALREADY_EXISTS");

    if (ucm_forward) {
        test_ucm_forward();
        goto out;
    }

    test_print_hooks();
    if (test_ucm_cuda) {
        test_result(rc_gdr_ucm_cuda_mode() == RC_GDR_UCM_CUDA_MODE_UCM,
                    "mode ucm (UCM's CUDA module reports frees)", NULL);
        test_patched_once();
    } else {
        test_result(rc_gdr_ucm_cuda_mode() == RC_GDR_UCM_CUDA_MODE_HOOKS,
                    "mode hooks (no UCM CUDA module reports frees)", NULL);
    }

    test_driver_free("cuMemFree_v2 (dlsym)",
                     (test_free_func_t)dlsym(test_driver, "cuMemFree_v2"));
    test_driver_free("cuMemFree (cuGetProcAddress)",
                     (test_free_func_t)test_proc("cuMemFree",
                                                 CU_GET_PROC_ADDRESS_DEFAULT));
    test_shim_free();
    test_async_free("cuMemFreeAsync (dlsym)",
                    (test_free_async_func_t)dlsym(test_driver,
                                                  "cuMemFreeAsync"),
                    NULL);
    test_async_free("cuMemFreeAsync (cuGetProcAddress, per-thread stream)",
                    (test_free_async_func_t)test_proc(
                            "cuMemFreeAsync",
                            CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
                    CU_STREAM_PER_THREAD);
    test_host_free();
    test_vmm_unmap();
    test_cudart();
    test_nested_free_in_handler();
    test_threads();
    test_unsubscribe();

out:
    if (test_num_lost > 0) {
        printf("INFO %u events were not recorded\n", test_num_lost);
    }
    return uct_test_summary();
}
