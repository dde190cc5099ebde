/*
 * CUDA free events reach their subscribers before the memory goes
 * (src/ucm/rc_gdr_ucm_cuda.c, patching through src/ucm/rc_gdr_ucm_bistro.c).
 *
 * The hooks are process-global, so this is a binary of its own. Before any
 * test runs, its environment does what an application does: libcudart is
 * opened and initialized (when it can be, with a real driver) BEFORE the
 * hooks are installed, as in an application that starts CUDA before UCX;
 * UCM's CUDA module is subscribed to first, as UCP would before rc_gdr, so
 * that what UCM patched can be seen; then the hooks are installed (twice),
 * the driver is opened again for the tests' own calls, device 0's context
 * is made current and the recording handler subscribes (twice).
 *
 * ucm_install.*     what the set-up did: install, the mode, nothing patched
 *                   twice in a CUDA-built UCX whose CUDA module reports frees
 * ucm_free.*        one test per way into the driver: cuMemFree_v2 by
 *                   dlsym(), cuMemFree by cuGetProcAddress(), the rc_gdr
 *                   shim, cuMemFreeAsync (and the per-thread-stream variant,
 *                   cuMemFreeAsync_ptsz), cuMemFreeHost, cuMemUnmap of one
 *                   VMM mapping
 * ucm_cudart.*      cudaFree, cudaFreeAsync, cudaFreeHost (real driver and
 *                   libcudart only)
 * ucm_subscriber.*  a free from inside a handler, frees from several threads
 *                   while subscriptions change, unsubscription
 * ucm_forward.*     mode UCM forced: a UCM_EVENT_MEM_TYPE_FREE is forwarded
 *                   to the subscribers. Only in a run with
 *                   RC_GDR_UCM_CUDA_MODE=ucm (or --ucm-forward), which must
 *                   be set before install; the other suites skip there.
 *
 * For each free the handler must see the whole range, with the right kind,
 * exactly once, while the driver still knows the allocation (its buffer id
 * is queried in the handler), and the driver must not know it after the
 * call.
 *
 * Usage: gtest_rc_gdr_ucm [GTEST_FLAGS] [-v] [--ucm-forward]
 *   -v             first print the first bytes of the release calls (what
 *                  the patcher must relocate); also RC_GDR_UCM_TEST_VERBOSE=1
 *   --ucm-forward  sets RC_GDR_UCM_CUDA_MODE=ucm before install
 *
 * The driver is libcuda.so.1, or RC_GDR_CUDA_LIBRARY (the stand-in driver
 * test/mocks/libcuda.so.1). Without a driver every test skips and says so.
 * test/gpu/run_ucm_test.sh runs it.
 *
 * See file LICENSE for terms.
 */

#include <ucm/rc_gdr_ucm.h>
#include <uct/ib_gdr/rc_gdr_cuda.h>
#include "../test_str.h"
#include "../cuda_alloc.h"

#include <ucm/api/ucm.h>
#include <ucs/memory/memory_type.h>

#include <cuda.h>

#include <gtest/gtest.h>

#include <string>

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
#define TEST_MAX_HOOKS         32
#define TEST_MAX_ENTRIES       32
#define TEST_CODE_BYTES        16

/* Exported by libucm, declared only in UCX's internal headers */
extern "C" void ucm_event_dispatch(ucm_event_type_t event_type,
                                   ucm_event_t *event);

/* printf into a string, for the descriptions of checks */

#define UCM_TEST_EXPECT(_cond, ...) \
    EXPECT_TRUE(_cond) << uct_test_str(__VA_ARGS__)

#define UCM_TEST_FAIL(...) \
    ADD_FAILURE() << uct_test_str(__VA_ARGS__)


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

/* A release entry point as UCM left it, before rc_gdr installed */
typedef struct {
    char          name[64];
    const uint8_t *address;
    uint8_t       code[TEST_CODE_BYTES];
} test_entry_t;


/*
 * What the set-up found and did, once per process (ucm_free_env)
 */
static struct {
    int                   forced_ucm;     /* RC_GDR_UCM_CUDA_MODE=ucm */
    int                   no_driver;      /* install: UCS_ERR_NO_DEVICE */
    ucs_status_t          install_status;
    ucs_status_t          install_again_status;

    int                   driver_ok;      /* opened again, entry points */
    void                  *driver;
    test_get_attr_func_t  get_attr;
    test_get_range_func_t get_range;
    test_get_proc_func_t  get_proc;
    int                   driver_version;

    ucs_status_t          ctx_status;
    uct_rc_gdr_cuda_ctx_h ctx;

    int                   subscribed;     /* set_free_handler was called */
    ucs_status_t          set_status;
    ucs_status_t          set_again_status;

    /* UCM's CUDA module reports frees; the entry points it may have
     * patched, with their code before install */
    int                   ucm_cuda;
    test_entry_t          entries[TEST_MAX_ENTRIES];
    unsigned              num_entries;

    /* libcudart, opened and initialized before install when it can be */
    test_cudart_t         rt;
    int                   rt_ok;
    const char            *rt_why;
} test_setup;

static pthread_mutex_t test_lock = PTHREAD_MUTEX_INITIALIZER;
static test_event_t    test_events[TEST_MAX_EVENTS];
static unsigned        test_num_events;
static unsigned        test_num_lost;
static int             test_in_handler;  /* under test_lock */
static void            *test_nested_free; /* freed by the next event */
static int             test_threads_running;

static __thread test_thread_t *test_thread_self;


/*
 * What identifies the allocation at ptr while it exists: its buffer id, or
 * where a driver has none for this kind of memory, its start address. 0 when
 * the driver does not know ptr.
 */
static int test_buffer_id(CUdeviceptr ptr, uint64_t *id_p)
{
    unsigned long long id = 0;
    CUdeviceptr start     = 0;

    if (test_setup.get_attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, ptr) ==
        CUDA_SUCCESS) {
        *id_p = id;
        return 1;
    }

    if ((test_setup.get_attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                             ptr) == CUDA_SUCCESS) && (start != 0)) {
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
    test_event_t event;
    void *nested;

    memset(&event, 0, sizeof(event));
    event.address = address;
    event.length  = length;
    event.kind    = kind;
    event.valid   = test_buffer_id((CUdeviceptr)(uintptr_t)address,
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
 * The set-up, before any test: libcudart, UCM, install, subscription
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

#undef TEST_CUDART_SYM

    if ((rt->set_device == NULL) || (rt->malloc == NULL) ||
        (rt->free == NULL) || (rt->set_device(0) != 0) ||
        (rt->malloc(&ptr, TEST_ALLOC_SIZE) != 0) || (rt->free(ptr) != 0)) {
        *why_p = "libcudart is not usable with this driver";
        return 0;
    }

    return 1;
}

static int test_driver_open(void)
{
    uct_rc_gdr_cuda_driver_info_t info;

    if (uct_rc_gdr_cuda_driver_info(&info) != UCS_OK) {
        return 0;
    }

    test_setup.driver_version = info.driver_version;
    test_setup.driver         = dlopen(info.library, RTLD_NOW | RTLD_NOLOAD);
    if (test_setup.driver == NULL) {
        return 0;
    }

    test_setup.get_attr  = (test_get_attr_func_t)dlsym(
            test_setup.driver, "cuPointerGetAttribute");
    test_setup.get_range = (test_get_range_func_t)dlsym(
            test_setup.driver, "cuMemGetAddressRange_v2");
    test_setup.get_proc  = (test_get_proc_func_t)dlsym(
            test_setup.driver, "cuGetProcAddress_v2");
    printf("INFO driver %s version %d%s\n", info.library,
           info.driver_version, info.emulated ? " (stand-in, no GPU)" : "");
    return (test_setup.get_attr != NULL) && (test_setup.get_range != NULL);
}

static void test_print_hooks(void)
{
    rc_gdr_ucm_cuda_hook_info_t info[TEST_MAX_HOOKS];
    unsigned i, num;

    num = rc_gdr_ucm_cuda_hooks(info, TEST_MAX_HOOKS);
    for (i = 0; (i < num) && (i < TEST_MAX_HOOKS); ++i) {
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
        code = (const uint8_t*)dlsym(driver, symbols[i]);
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
 * of when something subscribes to its free events. The set-up subscribes
 * first, as UCP would before rc_gdr, so that what UCM patched can be seen
 * before rc_gdr installs.
 */

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

    for (i = 0; i < test_setup.num_entries; ++i) {
        if (test_setup.entries[i].address == address) {
            return;
        }
    }

    if ((address == NULL) || (test_setup.num_entries == TEST_MAX_ENTRIES)) {
        return;
    }

    entry          = &test_setup.entries[test_setup.num_entries++];
    entry->address = (const uint8_t*)address;
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

    test_setup.ucm_cuda = (ucm_set_event_handler(UCM_EVENT_MEM_TYPE_FREE,
                                                 1000, test_ucm_dummy_cb,
                                                 NULL) == UCS_OK) &&
                          dl_iterate_phdr(test_find_ucm_cuda_cb, NULL);
    ucm_unset_event_handler(UCM_EVENT_MEM_TYPE_FREE, test_ucm_dummy_cb, NULL);
    printf("INFO UCM's CUDA module %s\n",
           test_setup.ucm_cuda ? "is loaded and subscribed" :
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

static bool test_env_is(const char *name, const char *value)
{
    const char *env = getenv(name);

    return (env != NULL) && !strcmp(env, value);
}

/*
 * The order of an application that starts CUDA before UCX: libcudart first,
 * UCM's subscribers next, then rc_gdr's install and subscription.
 */
class ucm_free_env : public testing::Environment {
public:
    explicit ucm_free_env(bool verbose) : m_verbose(verbose)
    {
    }

    void SetUp() override
    {
        /* once per process, also where gtest recreates environments for
         * each --gtest_repeat */
        if (m_done) {
            return;
        }
        m_done = true;

        test_setup.forced_ucm           = test_env_is(RC_GDR_UCM_CUDA_MODE_ENV,
                                                      "ucm");
        test_setup.rt_why               = "not opened";
        test_setup.install_again_status = UCS_ERR_NO_PROGRESS;
        test_setup.ctx_status           = UCS_ERR_NO_PROGRESS;

        if (m_verbose) {
            test_print_prologues();
        }

        if (!test_setup.forced_ucm) {
            test_setup.rt_ok = test_cudart_open(&test_setup.rt,
                                                &test_setup.rt_why);
            test_ucm_load();
        }

        test_setup.install_status = rc_gdr_ucm_cuda_install();
        if (test_setup.install_status == UCS_ERR_NO_DEVICE) {
            test_setup.no_driver = 1;
            printf("INFO no CUDA driver (%s): every test skips\n",
                   uct_rc_gdr_cuda_library_name());
            return;
        }

        test_setup.install_again_status = rc_gdr_ucm_cuda_install();
        printf("INFO install: %s, mode %s\n",
               ucs_status_string(test_setup.install_status),
               rc_gdr_ucm_cuda_mode_str(rc_gdr_ucm_cuda_mode()));

        test_setup.driver_ok = test_driver_open();
        if (!test_setup.driver_ok) {
            return;
        }

        test_setup.ctx_status = uct_rc_gdr_cuda_ctx_activate(0,
                                                             &test_setup.ctx);
        if (test_setup.ctx_status != UCS_OK) {
            return;
        }

        test_setup.subscribed       = 1;
        test_setup.set_status       = rc_gdr_ucm_cuda_set_free_handler(
                test_free_cb, NULL);
        test_setup.set_again_status = rc_gdr_ucm_cuda_set_free_handler(
                test_free_cb, NULL);

        if (!test_setup.forced_ucm) {
            test_print_hooks();
        }
    }

    void TearDown() override
    {
        if (test_num_lost > 0) {
            printf("INFO %u events were not recorded\n", test_num_lost);
        }
        /* libcudart stays loaded: its atexit handlers free memory */
    }

private:
    bool m_verbose;
    bool m_done = false;
};


/*
 * Fixtures
 */

/* Skips without a CUDA driver */
class ucm_test : public testing::Test {
protected:
    void SetUp() override
    {
        if (test_setup.no_driver) {
            GTEST_SKIP() << "no CUDA driver ("
                         << uct_rc_gdr_cuda_library_name() << ")";
        }
    }

    /* The driver and a current context, or the test fails */
    void require_driver()
    {
        if (!test_setup.driver_ok) {
            FAIL() << "the set-up could not open "
                   << uct_rc_gdr_cuda_library_name()
                   << " again (see ucm_install.driver_and_context)";
        }
        if (test_setup.ctx_status != UCS_OK) {
            FAIL() << "the set-up could not activate device 0: "
                   << ucs_status_string(test_setup.ctx_status)
                   << " (see ucm_install.driver_and_context)";
        }
    }
};

class ucm_install : public ucm_test {
};

/* The frees: mode hooks or auto, the recording handler subscribed */
class ucm_hooked : public ucm_test {
protected:
    void SetUp() override
    {
        ucm_test::SetUp();
        if (IsSkipped()) {
            return;
        }

        if (test_setup.forced_ucm) {
            GTEST_SKIP() << RC_GDR_UCM_CUDA_MODE_ENV "=ucm: nothing is "
                            "hooked in this run, it is the one of suite "
                            "ucm_forward";
        }

        require_driver();
        test_events_reset();
    }

    static void *device_alloc(const char *name);
    static bool alloc_describe(const char *name, void *ptr,
                               test_alloc_t *alloc);
    static void alloc_check(const test_alloc_t *alloc, CUresult free_res,
                            rc_gdr_ucm_cuda_mem_kind_t kind, int check_gone);
    static void *proc(const char *symbol, cuuint64_t flags);
    static void *driver_sym(const char *symbol);
    void driver_free(const char *name, test_free_func_t free_fn);
    void async_free(const char *name, test_free_async_func_t free_fn,
                    CUstream stream);
};

void *ucm_hooked::device_alloc(const char *name)
{
    void *ptr;

    if (uct_rc_gdr_cuda_mem_alloc(TEST_ALLOC_SIZE, &ptr) != UCS_OK) {
        UCM_TEST_FAIL("%s: uct_rc_gdr_cuda_mem_alloc failed", name);
        return NULL;
    }

    return ptr;
}

/* Record what the driver says about ptr before it is freed */
bool ucm_hooked::alloc_describe(const char *name, void *ptr,
                                test_alloc_t *alloc)
{
    CUresult res;

    alloc->name = name;
    res         = test_setup.get_range(&alloc->base, &alloc->size,
                                       (CUdeviceptr)(uintptr_t)ptr);
    if (res != CUDA_SUCCESS) {
        UCM_TEST_FAIL("%s: cuMemGetAddressRange(%p) failed: %d", name, ptr,
                      (int)res);
        return false;
    }

    if (!test_buffer_id(alloc->base, &alloc->buffer_id)) {
        UCM_TEST_FAIL("%s: no buffer id for %p", name, ptr);
        return false;
    }

    test_events_reset();
    return true;
}

/*
 * After the free of alloc: exactly one event, for the whole range, of kind,
 * seen while the driver still knew the allocation; and, unless check_gone
 * is 0, the driver no longer knows it.
 */
void ucm_hooked::alloc_check(const test_alloc_t *alloc, CUresult free_res,
                             rc_gdr_ucm_cuda_mem_kind_t kind, int check_gone)
{
    test_event_t event;
    unsigned count;
    uint64_t id;
    int gone;

    UCM_TEST_EXPECT(free_res == CUDA_SUCCESS, "%s: the free succeeds (%d)",
                    alloc->name, (int)free_res);
    if (free_res != CUDA_SUCCESS) {
        return;
    }

    gone  = !test_buffer_id(alloc->base, &id) || (id != alloc->buffer_id);
    count = test_events_find(alloc->base, &event);
    UCM_TEST_EXPECT(count == 1, "%s: %u events for 0x%llx+%zu, one expected",
                    alloc->name, count, (unsigned long long)alloc->base,
                    alloc->size);
    if (count == 0) {
        return;
    }

    UCM_TEST_EXPECT(event.length == alloc->size,
                    "%s: length %zu, the allocation has %zu", alloc->name,
                    event.length, alloc->size);
    UCM_TEST_EXPECT(event.kind == (int)kind, "%s: kind %s, expected %s",
                    alloc->name,
                    rc_gdr_ucm_cuda_mem_kind_str(
                            (rc_gdr_ucm_cuda_mem_kind_t)event.kind),
                    rc_gdr_ucm_cuda_mem_kind_str(kind));
    UCM_TEST_EXPECT(event.valid && (event.buffer_id == alloc->buffer_id),
                    "%s: the memory was still there in the handler (valid "
                    "%d, buffer id %" PRIu64 ", before %" PRIu64 ")",
                    alloc->name, event.valid, event.buffer_id,
                    alloc->buffer_id);
    if (check_gone) {
        UCM_TEST_EXPECT(gone, "%s: the driver does not know 0x%llx after the "
                        "free", alloc->name, (unsigned long long)alloc->base);
    }

    if (!HasFailure()) {
        printf("INFO %s: 0x%llx+%zu %s, buffer id %" PRIu64 " valid in the "
               "handler%s\n", alloc->name, (unsigned long long)alloc->base,
               alloc->size, rc_gdr_ucm_cuda_mem_kind_str(kind),
               alloc->buffer_id, gone ? ", gone after" : "");
    }
}

void *ucm_hooked::proc(const char *symbol, cuuint64_t flags)
{
    CUdriverProcAddressQueryResult qres;
    void *func = NULL;

    if ((test_setup.get_proc == NULL) ||
        (test_setup.get_proc(symbol, &func, test_setup.driver_version, flags,
                             &qres) != CUDA_SUCCESS)) {
        return NULL;
    }

    return func;
}

void *ucm_hooked::driver_sym(const char *symbol)
{
    return dlsym(test_setup.driver, symbol);
}

void ucm_hooked::driver_free(const char *name, test_free_func_t free_fn)
{
    test_alloc_t alloc;
    void *ptr;

    if (free_fn == NULL) {
        GTEST_SKIP() << name << ": the driver has no such entry point";
    }

    ptr = device_alloc(name);
    if ((ptr == NULL) || !alloc_describe(name, ptr, &alloc)) {
        return;
    }

    alloc_check(&alloc, free_fn((CUdeviceptr)(uintptr_t)ptr),
                RC_GDR_UCM_CUDA_MEM_DEVICE, 1);
}

void ucm_hooked::async_free(const char *name, test_free_async_func_t free_fn,
                            CUstream stream)
{
    uct_rc_gdr_cuda_stream_h shim_stream = (uct_rc_gdr_cuda_stream_h)stream;
    test_alloc_t alloc;
    CUresult res;
    void *ptr;

    if (free_fn == NULL) {
        GTEST_SKIP() << name << ": the driver has no such entry point";
    }

    if (uct_rc_gdr_cuda_mem_alloc_async(TEST_ALLOC_SIZE, shim_stream, &ptr) !=
        UCS_OK) {
        GTEST_SKIP() << name << ": no stream-ordered allocation on this "
                                "device";
    }

    UCM_TEST_EXPECT(uct_rc_gdr_cuda_stream_synchronize(shim_stream) == UCS_OK,
                    "%s: the allocation's stream synchronizes", name);
    if (HasFailure() || !alloc_describe(name, ptr, &alloc)) {
        return;
    }

    res = free_fn((CUdeviceptr)(uintptr_t)ptr, stream);
    uct_rc_gdr_cuda_stream_synchronize(shim_stream);
    /* a pool may keep the range known after the free: not checked */
    alloc_check(&alloc, res, RC_GDR_UCM_CUDA_MEM_DEVICE, 0);
}


/*
 * ucm_install: what the set-up did
 */

TEST_F(ucm_install, installs_once)
{
    UCM_TEST_EXPECT(test_setup.install_status == UCS_OK,
                    "install: %s, mode %s",
                    ucs_status_string(test_setup.install_status),
                    rc_gdr_ucm_cuda_mode_str(rc_gdr_ucm_cuda_mode()));
    UCM_TEST_EXPECT(test_setup.install_again_status ==
                    test_setup.install_status,
                    "install again: the first outcome (%s, then %s)",
                    ucs_status_string(test_setup.install_status),
                    ucs_status_string(test_setup.install_again_status));
    UCM_TEST_EXPECT(rc_gdr_ucm_cuda_install() == test_setup.install_status,
                    "install once more, from a test: the first outcome");
}

TEST_F(ucm_install, driver_and_context)
{
    UCM_TEST_EXPECT(test_setup.driver_ok,
                    "driver: %s opened again, with cuPointerGetAttribute and "
                    "cuMemGetAddressRange_v2",
                    uct_rc_gdr_cuda_library_name());
    UCM_TEST_EXPECT(test_setup.ctx_status == UCS_OK,
                    "context: device 0 activated (%s)",
                    ucs_status_string(test_setup.ctx_status));
}

TEST_F(ucm_install, subscribes_once)
{
    ASSERT_NO_FATAL_FAILURE(require_driver());
    UCM_TEST_EXPECT(test_setup.subscribed &&
                    (test_setup.set_status == UCS_OK) &&
                    (test_setup.set_again_status == UCS_ERR_ALREADY_EXISTS),
                    "set_free_handler: %s, a second one is ALREADY_EXISTS "
                    "(%s)", ucs_status_string(test_setup.set_status),
                    ucs_status_string(test_setup.set_again_status));
}

TEST_F(ucm_install, mode_follows_ucm_cuda)
{
    rc_gdr_ucm_cuda_mode_t mode = rc_gdr_ucm_cuda_mode();

    if (test_setup.forced_ucm) {
        UCM_TEST_EXPECT(mode == RC_GDR_UCM_CUDA_MODE_UCM,
                        "mode ucm (forced by " RC_GDR_UCM_CUDA_MODE_ENV
                        "=ucm), it is %s", rc_gdr_ucm_cuda_mode_str(mode));
    } else if (test_setup.ucm_cuda) {
        UCM_TEST_EXPECT(mode == RC_GDR_UCM_CUDA_MODE_UCM,
                        "mode ucm (UCM's CUDA module reports frees), it is %s",
                        rc_gdr_ucm_cuda_mode_str(mode));
    } else {
        UCM_TEST_EXPECT(mode == RC_GDR_UCM_CUDA_MODE_HOOKS,
                        "mode hooks (no UCM CUDA module reports frees), it "
                        "is %s", rc_gdr_ucm_cuda_mode_str(mode));
    }
}

/*
 * Where UCM reports: every entry point UCM patched is left as it was, and
 * is none of rc_gdr's; the others are rc_gdr's.
 */
TEST_F(ucm_install, nothing_patched_twice)
{
    rc_gdr_ucm_cuda_hook_info_t info[TEST_MAX_HOOKS];
    unsigned i, j, num, ours, ucm = 0, bad = 0;
    const test_entry_t *entry;
    const char *object;

    if (test_setup.forced_ucm) {
        GTEST_SKIP() << RC_GDR_UCM_CUDA_MODE_ENV "=ucm: UCM's patches "
                        "were not looked at in this run";
    }
    if (!test_setup.ucm_cuda) {
        GTEST_SKIP() << "UCM's CUDA module does not report frees in this "
                        "process (a UCX built without CUDA)";
    }

    num = rc_gdr_ucm_cuda_hooks(info, TEST_MAX_HOOKS);
    for (i = 0; i < test_setup.num_entries; ++i) {
        entry  = &test_setup.entries[i];
        object = test_jump_object(entry->code, entry->address);
        if ((object == NULL) || (strstr(object, "libucm_cuda") == NULL)) {
            continue;
        }

        ++ucm;
        UCM_TEST_EXPECT(!memcmp(entry->address, entry->code,
                                TEST_CODE_BYTES),
                        "%s is not patched again after UCM", entry->name);
        for (j = 0; (j < num) && (j < TEST_MAX_HOOKS); ++j) {
            UCM_TEST_EXPECT(info[j].address != (const void*)entry->address,
                            "%s is UCM's, not hooked again as %s", entry->name,
                            info[j].name);
            bad += (info[j].address == (const void*)entry->address);
        }
    }

    ours = (num < TEST_MAX_HOOKS) ? num : TEST_MAX_HOOKS;
    UCM_TEST_EXPECT((ucm > 0) && (bad == 0),
                    "nothing patched twice: %u entry points patched by UCM "
                    "and left to it, %u hooked here (those UCM leaves out)",
                    ucm, ours);
}


/*
 * ucm_free: each way into the driver
 */

class ucm_free : public ucm_hooked {
};

TEST_F(ucm_free, cu_mem_free_v2_dlsym)
{
    driver_free("cuMemFree_v2 (dlsym)",
                (test_free_func_t)driver_sym("cuMemFree_v2"));
}

TEST_F(ucm_free, cu_mem_free_get_proc_address)
{
    driver_free("cuMemFree (cuGetProcAddress)",
                (test_free_func_t)proc("cuMemFree",
                                       CU_GET_PROC_ADDRESS_DEFAULT));
}

TEST_F(ucm_free, shim_mem_free)
{
    const char *name = "mem_free (rc_gdr shim)";
    test_alloc_t alloc;
    ucs_status_t status;
    void *ptr;

    ptr = device_alloc(name);
    if ((ptr == NULL) || !alloc_describe(name, ptr, &alloc)) {
        return;
    }

    status = uct_rc_gdr_cuda_mem_free(ptr);
    alloc_check(&alloc, (status == UCS_OK) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN,
                RC_GDR_UCM_CUDA_MEM_DEVICE, 1);
}

TEST_F(ucm_free, cu_mem_free_async_dlsym)
{
    async_free("cuMemFreeAsync (dlsym)",
               (test_free_async_func_t)driver_sym("cuMemFreeAsync"), NULL);
}

TEST_F(ucm_free, cu_mem_free_async_ptsz_get_proc_address)
{
    async_free("cuMemFreeAsync (cuGetProcAddress, per-thread stream)",
               (test_free_async_func_t)proc(
                       "cuMemFreeAsync",
                       CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
               CU_STREAM_PER_THREAD);
}

TEST_F(ucm_free, cu_mem_free_host_dlsym)
{
    const char *name = "cuMemFreeHost (dlsym)";
    test_free_host_func_t free_fn;
    test_alloc_t alloc;
    void *ptr;

    free_fn = (test_free_host_func_t)driver_sym("cuMemFreeHost");
    if (free_fn == NULL) {
        GTEST_SKIP() << name << ": the driver has no such entry point";
    }

    if (uct_rc_gdr_cuda_host_alloc(TEST_ALLOC_SIZE, &ptr) != UCS_OK) {
        UCM_TEST_FAIL("%s: uct_rc_gdr_cuda_host_alloc failed", name);
        return;
    }

    if (!alloc_describe(name, ptr, &alloc)) {
        return;
    }

    alloc_check(&alloc, free_fn(ptr), RC_GDR_UCM_CUDA_MEM_HOST_PINNED, 1);
}

/*
 * VMM: two physical allocations mapped back to back; unmapping the first
 * reports exactly its range, while it is still mapped. Releasing the handles
 * is no event. The second mapping goes through the shim.
 */
TEST_F(ucm_free, cu_mem_unmap_vmm)
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

    unmap_fn = (test_unmap_func_t)driver_sym("cuMemUnmap");
    if ((unmap_fn == NULL) ||
        (uct_rc_gdr_cuda_vmm_granularity(0, &gran) != UCS_OK)) {
        GTEST_SKIP() << "no virtual memory management in this driver";
    }

    if (uct_rc_gdr_cuda_vmm_reserve(2 * gran, gran, (void**)&base) !=
        UCS_OK) {
        UCM_TEST_FAIL("%s: cuMemAddressReserve failed", name);
        return;
    }

    for (i = 0; i < 2; ++i) {
        if ((uct_rc_gdr_cuda_vmm_create(0, gran, 1, &handles[i]) != UCS_OK) &&
            (uct_rc_gdr_cuda_vmm_create(0, gran, 0, &handles[i]) != UCS_OK)) {
            UCM_TEST_FAIL("%s: cuMemCreate failed", name);
            return;
        }

        if ((uct_rc_gdr_cuda_vmm_map(base + (i * gran), gran, handles[i]) !=
             UCS_OK) ||
            (uct_rc_gdr_cuda_vmm_set_access(base + (i * gran), gran, 0) !=
             UCS_OK)) {
            UCM_TEST_FAIL("%s: cuMemMap/cuMemSetAccess failed", name);
            return;
        }
    }

    if (!test_buffer_id((CUdeviceptr)(uintptr_t)base, &id_before)) {
        UCM_TEST_FAIL("%s: no buffer id for the mapping at %p", name, base);
        return;
    }

    test_events_reset();
    /* the handles go first: the mappings keep the memory */
    for (i = 0; i < 2; ++i) {
        uct_rc_gdr_cuda_vmm_release(handles[i]);
    }
    count = test_events_find((CUdeviceptr)(uintptr_t)base, &event);
    UCM_TEST_EXPECT(count == 0, "cuMemRelease (VMM, still mapped): %u events",
                    count);

    test_events_reset();
    res   = unmap_fn((CUdeviceptr)(uintptr_t)base, gran);
    count = test_events_find((CUdeviceptr)(uintptr_t)base, &event);
    gone  = !test_buffer_id((CUdeviceptr)(uintptr_t)base, &id) ||
            (id != id_before);
    UCM_TEST_EXPECT(res == CUDA_SUCCESS, "%s: cuMemUnmap succeeds (%d)", name,
                    (int)res);
    UCM_TEST_EXPECT(count == 1, "%s: %u events for %p, one expected", name,
                    count, base);
    if ((res == CUDA_SUCCESS) && (count > 0)) {
        UCM_TEST_EXPECT((event.length == gran) &&
                        (event.kind == RC_GDR_UCM_CUDA_MEM_VMM),
                        "%s: %p+%zu %s, expected +%zu vmm", name,
                        event.address, event.length,
                        rc_gdr_ucm_cuda_mem_kind_str(
                                (rc_gdr_ucm_cuda_mem_kind_t)event.kind),
                        gran);
        UCM_TEST_EXPECT(event.valid && (event.buffer_id == id_before),
                        "%s: the mapping was still there in the handler",
                        name);
        UCM_TEST_EXPECT(gone, "%s: the driver does not know %p after the "
                        "unmap", name, base);
    }

    /* the second mapping, through the shim */
    test_events_reset();
    uct_rc_gdr_cuda_vmm_unmap(base + gran, gran);
    count = test_events_find((CUdeviceptr)(uintptr_t)(base + gran), &event);
    UCM_TEST_EXPECT((count == 1) && (event.length == gran) && event.valid,
                    "vmm_unmap (rc_gdr shim): %u events, length %zu, "
                    "valid %d", count, (count > 0) ? event.length : 0,
                    (count > 0) ? event.valid : 0);

    uct_rc_gdr_cuda_vmm_unreserve(base, 2 * gran);
}


/*
 * ucm_cudart: the runtime API, whose driver pointers came from
 * cuGetProcAddress() before install patched the code
 */

class ucm_cudart : public ucm_hooked {
protected:
    void SetUp() override
    {
        ucm_hooked::SetUp();
        if (IsSkipped() || HasFailure()) {
            return;
        }

        if (!test_setup.rt_ok) {
            GTEST_SKIP() << "libcudart: " << test_setup.rt_why;
        }

        if (!m_version_printed) {
            int version = 0;

            if (test_setup.rt.runtime_get_version != NULL) {
                test_setup.rt.runtime_get_version(&version);
            }
            printf("INFO libcudart %d, initialized before install: its "
                   "driver pointers came from cuGetProcAddress before the "
                   "code was patched\n", version);
            m_version_printed = true;
        }
    }

    const test_cudart_t &rt = test_setup.rt;

private:
    static bool m_version_printed;
};

bool ucm_cudart::m_version_printed = false;

TEST_F(ucm_cudart, cuda_free)
{
    test_alloc_t alloc;
    void *ptr;
    int ret;

    if ((rt.malloc(&ptr, TEST_ALLOC_SIZE) != 0) ||
        !alloc_describe("cudaFree", ptr, &alloc)) {
        UCM_TEST_FAIL("cudaFree: cudaMalloc failed");
        return;
    }

    ret = rt.free(ptr);
    alloc_check(&alloc, (ret == 0) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN,
                RC_GDR_UCM_CUDA_MEM_DEVICE, 1);
}

TEST_F(ucm_cudart, cuda_free_async)
{
    test_alloc_t alloc;
    void *ptr;
    int ret;

    if ((rt.malloc_async == NULL) || (rt.free_async == NULL)) {
        GTEST_SKIP() << "cudaFreeAsync: not in this libcudart";
    }

    if ((rt.malloc_async(&ptr, TEST_ALLOC_SIZE, NULL) != 0) ||
        (rt.stream_synchronize(NULL) != 0) ||
        !alloc_describe("cudaFreeAsync", ptr, &alloc)) {
        UCM_TEST_FAIL("cudaFreeAsync: cudaMallocAsync failed");
        return;
    }

    ret = rt.free_async(ptr, NULL);
    rt.stream_synchronize(NULL);
    /* a pool may keep the range known after the free: not checked */
    alloc_check(&alloc, (ret == 0) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN,
                RC_GDR_UCM_CUDA_MEM_DEVICE, 0);
}

TEST_F(ucm_cudart, cuda_free_host)
{
    test_alloc_t alloc;
    void *ptr;
    int ret;

    if ((rt.malloc_host == NULL) || (rt.free_host == NULL)) {
        GTEST_SKIP() << "cudaFreeHost: not in this libcudart";
    }

    if ((rt.malloc_host(&ptr, TEST_ALLOC_SIZE) != 0) ||
        !alloc_describe("cudaFreeHost", ptr, &alloc)) {
        UCM_TEST_FAIL("cudaFreeHost: cudaMallocHost failed");
        return;
    }

    ret = rt.free_host(ptr);
    alloc_check(&alloc, (ret == 0) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN,
                RC_GDR_UCM_CUDA_MEM_HOST_PINNED, 1);
}


/*
 * ucm_subscriber: frees from inside a handler and from several threads,
 * subscriptions changing, unsubscription
 */

class ucm_subscriber : public ucm_hooked {
protected:
    void TearDown() override
    {
        pthread_mutex_lock(&test_lock);
        test_nested_free = NULL;
        pthread_mutex_unlock(&test_lock);
    }
};

/* A free made from inside a handler is reported too, and nothing hangs */
TEST_F(ucm_subscriber, free_inside_handler)
{
    const char *name = "free from inside a handler";
    test_free_func_t free_fn;
    test_alloc_t outer, inner;
    test_event_t event;
    void *ptr1, *ptr2;
    CUresult res;

    free_fn = (test_free_func_t)driver_sym("cuMemFree_v2");
    ASSERT_NE(nullptr, (void*)free_fn) << "the driver has cuMemFree_v2";
    ptr1    = device_alloc(name);
    ptr2    = device_alloc(name);
    if ((ptr1 == NULL) || (ptr2 == NULL) ||
        !alloc_describe(name, ptr2, &inner) ||
        !alloc_describe(name, ptr1, &outer)) {
        return;
    }

    pthread_mutex_lock(&test_lock);
    test_nested_free = ptr2;
    pthread_mutex_unlock(&test_lock);

    res = free_fn((CUdeviceptr)(uintptr_t)ptr1);
    UCM_TEST_EXPECT(res == CUDA_SUCCESS, "%s: cuMemFree_v2 succeeds (%d)", name,
                    (int)res);
    UCM_TEST_EXPECT(test_events_find(outer.base, &event) == 1,
                    "%s: a single event for the outer free", name);
    ASSERT_EQ(1u, test_events_find(inner.base, &event))
        << name << ": a single event for the free in the handler";
    UCM_TEST_EXPECT(event.nested && event.valid &&
                    (event.length == inner.size),
                    "%s: the inner one reported while the outer handler ran "
                    "(nested %d valid %d length %zu)", name, event.nested,
                    event.valid, event.length);
}

static void *test_thread_func(void *arg)
{
    test_thread_t *self = (test_thread_t*)arg;
    test_free_func_t free_fn;
    void *ptr;
    int i;

    test_thread_self = self;
    free_fn          = (test_free_func_t)dlsym(test_setup.driver,
                                               "cuMemFree_v2");
    if ((free_fn == NULL) ||
        (uct_rc_gdr_cuda_ctx_set_current(test_setup.ctx) != UCS_OK)) {
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
    unsigned *count = (unsigned*)arg;
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

TEST_F(ucm_subscriber, threads_while_subscriptions_change)
{
    test_thread_t threads[TEST_NUM_THREADS];
    pthread_t tids[TEST_NUM_THREADS], sub_tid;
    unsigned misses, invalid, errors, count;
    void *rounds;
    int i;

    memset(threads, 0, sizeof(threads));
    count = 0;
    __atomic_store_n(&test_threads_running, 1, __ATOMIC_RELEASE);
    ASSERT_EQ(0, pthread_create(&sub_tid, NULL, test_subscriber_func,
                                &count));
    for (i = 0; i < TEST_NUM_THREADS; ++i) {
        threads[i].index = i;
        if (pthread_create(&tids[i], NULL, test_thread_func, &threads[i]) !=
            0) {
            threads[i].error = 1;
            tids[i]          = 0;
        }
    }

    misses = invalid = errors = 0;
    for (i = 0; i < TEST_NUM_THREADS; ++i) {
        if (tids[i] != 0) {
            pthread_join(tids[i], NULL);
        }
        misses  += threads[i].misses;
        invalid += threads[i].invalid;
        errors  += threads[i].error;
    }
    __atomic_store_n(&test_threads_running, 0, __ATOMIC_RELEASE);
    pthread_join(sub_tid, &rounds);

    UCM_TEST_EXPECT((misses == 0) && (invalid == 0) && (errors == 0),
                    "frees from several threads, subscriptions changing "
                    "meanwhile: %d frees, %u without an event, %u after "
                    "release, %u thread errors; %u subscription rounds",
                    TEST_NUM_THREADS * TEST_THREAD_ITERS, misses, invalid,
                    errors, (unsigned)(uintptr_t)rounds);
    printf("INFO %d frees from %d threads, %u subscription rounds meanwhile\n",
           TEST_NUM_THREADS * TEST_THREAD_ITERS, TEST_NUM_THREADS,
           (unsigned)(uintptr_t)rounds);
}

/* The recording handler subscribes again at the end, for tests after it */
TEST_F(ucm_subscriber, unset_stops_events)
{
    const char *name = "unset_free_handler";
    test_free_func_t free_fn;
    test_event_t event;
    ucs_status_t status;
    test_alloc_t alloc;
    void *ptr;

    free_fn = (test_free_func_t)driver_sym("cuMemFree_v2");
    ASSERT_NE(nullptr, (void*)free_fn) << "the driver has cuMemFree_v2";
    ptr     = device_alloc(name);
    if ((ptr == NULL) || !alloc_describe(name, ptr, &alloc)) {
        return;
    }

    status = rc_gdr_ucm_cuda_unset_free_handler(test_free_cb, NULL);
    free_fn((CUdeviceptr)(uintptr_t)ptr);
    UCM_TEST_EXPECT(status == UCS_OK, "%s: %s", name,
                    ucs_status_string(status));
    UCM_TEST_EXPECT(test_events_find(alloc.base, &event) == 0,
                    "%s: no event after unsubscribing", name);
    UCM_TEST_EXPECT(rc_gdr_ucm_cuda_unset_free_handler(test_free_cb, NULL) ==
                    UCS_ERR_NO_ELEM, "%s: a second unset is NO_ELEM", name);

    status = rc_gdr_ucm_cuda_set_free_handler(test_free_cb, NULL);
    UCM_TEST_EXPECT(status == UCS_OK, "set_free_handler again: %s",
                    ucs_status_string(status));
}


/*
 * ucm_forward: mode UCM forced, a UCM_EVENT_MEM_TYPE_FREE reaches the
 * subscribers
 */

class ucm_forward : public ucm_test {
protected:
    void SetUp() override
    {
        ucm_test::SetUp();
        if (IsSkipped()) {
            return;
        }

        if (!test_setup.forced_ucm) {
            GTEST_SKIP() << "needs " RC_GDR_UCM_CUDA_MODE_ENV "=ucm (or "
                            "--ucm-forward) before install: a run of its "
                            "own (test/gpu/run_ucm_test.sh)";
        }

        require_driver();
        test_events_reset();
    }
};

TEST_F(ucm_forward, mode_ucm_patches_nothing)
{
    rc_gdr_ucm_cuda_hook_info_t info;
    unsigned num;

    num = rc_gdr_ucm_cuda_hooks(&info, 1);
    UCM_TEST_EXPECT(num == 0, "mode ucm patches nothing (%u hooks)", num);
}

TEST_F(ucm_forward, mem_type_free_forwarded)
{
    static const struct {
        ucs_memory_type_t          mem_type;
        rc_gdr_ucm_cuda_mem_kind_t kind;
    } cases[] = {
        {UCS_MEMORY_TYPE_CUDA,         RC_GDR_UCM_CUDA_MEM_DEVICE},
        {UCS_MEMORY_TYPE_CUDA_MANAGED, RC_GDR_UCM_CUDA_MEM_DEVICE},
        {UCS_MEMORY_TYPE_HOST,         RC_GDR_UCM_CUDA_MEM_HOST_PINNED}
    };
    test_event_t event;
    ucm_event_t ucm_event;
    unsigned i, count;

    for (i = 0; i < 3; ++i) {
        test_events_reset();
        memset(&ucm_event, 0, sizeof(ucm_event));
        ucm_event.mem_type.address  = (void*)(uintptr_t)(0x7f0000100000ul +
                                                         (i << 20));
        ucm_event.mem_type.size     = 65536 * (i + 1);
        ucm_event.mem_type.mem_type = cases[i].mem_type;
        ucm_event_dispatch(UCM_EVENT_MEM_TYPE_FREE, &ucm_event);

        count = test_events_find(
                (CUdeviceptr)(uintptr_t)ucm_event.mem_type.address, &event);
        UCM_TEST_EXPECT((count == 1) &&
                        (event.length == ucm_event.mem_type.size) &&
                        (event.kind == (int)cases[i].kind),
                        "UCM_EVENT_MEM_TYPE_FREE %s forwarded: %u events, "
                        "length %zu, kind %s",
                        ucs_memory_type_names[cases[i].mem_type], count,
                        (count > 0) ? event.length : 0,
                        (count > 0) ? rc_gdr_ucm_cuda_mem_kind_str(
                                (rc_gdr_ucm_cuda_mem_kind_t)event.kind) :
                                      "-");
    }
}


int main(int argc, char **argv)
{
    bool verbose = test_env_is("RC_GDR_UCM_TEST_VERBOSE", "1");
    int i;

    /* what was printed survives a crash in a hook */
    setvbuf(stdout, NULL, _IOLBF, 0);
    testing::InitGoogleTest(&argc, argv);

    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--ucm-forward")) {
            setenv(RC_GDR_UCM_CUDA_MODE_ENV, "ucm", 1);
        } else if (!strcmp(argv[i], "-v")) {
            verbose = true;
        } else {
            fprintf(stderr, "usage: %s [GTEST_FLAGS] [-v] [--ucm-forward]\n",
                    argv[0]);
            return 2;
        }
    }

    testing::AddGlobalTestEnvironment(new ucm_free_env(verbose));
    return RUN_ALL_TESTS();
}
