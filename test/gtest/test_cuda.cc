/**
 * Tests of the CUDA driver shim (src/uct/ib_gdr/rc_gdr_cuda.h).
 *
 * cuda_shim.*    what does not need a driver (range arithmetic, names)
 * cuda_fake.*    against the emulated driver test/mocks/libcuda.so.1
 * cuda_absent.*  a process each (death-test style): no driver, a library
 *                that is not a driver, a driver without devices, a driver
 *                without cuGetProcAddress_v2
 * cuda_gpu.*     against a real driver with at least one GPU; they skip, and
 *                say why, anywhere else. test/gpu/run_gpu_tests.sh runs them.
 *
 * The shim opens its driver once per process, so the choice is made for the
 * whole binary, before any test runs: the emulated driver (the default, for
 * every suite of gtest_rc_gdr; $RC_GDR_TEST_FAKE_CUDA overrides its path), or
 * the real one (RC_GDR_CUDA_LIBRARY, default libcuda.so.1) when
 * RC_GDR_TEST_CUDA=real.
 * The emulation is configured with two devices:
 *   device 0: CC 8.0, GDR 1, DMA-BUF 1, writes ordering NONE, flush options 1,
 *             PCI 0000:1A:00.0 (reported lower case)
 *   device 1: CC 9.0, GDR 1, DMA-BUF 0, writes ordering OWNER, flush options
 *             unreadable, PCI 0000:9B:00.0
 */

#include "cuda_alloc.h"

#include <uct/ib_gdr/rc_gdr_cuda.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <ctype.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

namespace {

#define CUDA_ASSERT_OK(_expr) \
    do { \
        ucs_status_t _status = (_expr); \
        ASSERT_EQ(UCS_OK, _status) << #_expr << ": " \
                                   << ucs_status_string(_status); \
    } while (0)

#define CUDA_EXPECT_STATUS(_expected, _expr) \
    do { \
        ucs_status_t _status = (_expr); \
        EXPECT_EQ(_expected, _status) << #_expr << ": " \
                                      << ucs_status_string(_status); \
    } while (0)

/* The emulated driver: the build's, or $RC_GDR_TEST_FAKE_CUDA when the
 * binary runs away from its build tree */
const char *fake_cuda_library_path()
{
    const char *env = getenv("RC_GDR_TEST_FAKE_CUDA");

    return ((env != NULL) && (*env != '\0')) ? env :
           RC_GDR_TEST_BUILDDIR "/mocks/libcuda.so.1";
}

const char *const fake_cuda_library = fake_cuda_library_path();

typedef int (*fake_control_func_t)(const char *knob, long value, long *old_p);

bool test_wants_real_cuda()
{
    const char *env = getenv("RC_GDR_TEST_CUDA");
    return (env != NULL) && !strcmp(env, "real");
}

/*
 * Runs before main(), so before anything can open the driver: gtest's global
 * environments run later, and a death-test child runs static initializers
 * again, then only its own test.
 */
int cuda_test_env_setup()
{
    if (test_wants_real_cuda()) {
        return 0;
    }

    setenv(UCT_RC_GDR_CUDA_LIBRARY_ENV, fake_cuda_library, 1);
    setenv("RC_GDR_FAKE_CUDA_DEVICES", "2", 1);
    setenv("RC_GDR_FAKE_CUDA_CC", "8.0,9.0", 1);
    setenv("RC_GDR_FAKE_CUDA_GDR", "1", 1);
    setenv("RC_GDR_FAKE_CUDA_DMABUF", "1,0", 1);
    setenv("RC_GDR_FAKE_CUDA_WRITES_ORDERING", "0,100", 1);
    setenv("RC_GDR_FAKE_CUDA_FLUSH_OPTIONS", "1,-1", 1);
    setenv("RC_GDR_FAKE_CUDA_PCI_BUS_ID", "0000:1A:00.0,0000:9B:00.0", 1);
    unsetenv("RC_GDR_FAKE_CUDA_PROC_ADDRESS");
    unsetenv("RC_GDR_FAKE_CUDA_DRIVER_VERSION");
    return 0;
}

const int cuda_test_env_ready = cuda_test_env_setup();

/* The emulated driver's control entry, NULL when a real driver is loaded */
fake_control_func_t fake_control_func()
{
    uct_rc_gdr_cuda_driver_info_t info;
    fake_control_func_t func;
    void *handle;

    if (uct_rc_gdr_cuda_driver_info(&info) != UCS_OK) {
        return NULL;
    }

    handle = dlopen(info.library, RTLD_LAZY | RTLD_NOLOAD);
    if (handle == NULL) {
        return NULL;
    }

    func = (fake_control_func_t)dlsym(handle, "rc_gdr_fake_cuda_control");
    dlclose(handle);
    return func;
}

/* A line of measured facts, easy to pick out of the output */
void report(const char *fmt, ...)
{
    va_list ap;

    printf("[ CUDA     ] ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

off_t fd_size(int fd)
{
    off_t size = lseek(fd, 0, SEEK_END);

    lseek(fd, 0, SEEK_SET);
    return size;
}

std::string attr_string(const uct_rc_gdr_cuda_dev_attr_t &a)
{
    char buf[512];

#define ATTR_VAL(_bit, _val) \
    ((a.valid_mask & (_bit)) ? std::to_string(_val) : \
                               std::string("n/a")).c_str()

    snprintf(buf, sizeof(buf),
             "device %d '%s' pci %s cc %s.%s gdr %s dmabuf %s "
             "writes_ordering %s (%s) flush_options %s vmm %s mempools %s",
             a.ordinal,
             (a.valid_mask & UCT_RC_GDR_CUDA_DEV_ATTR_NAME) ? a.name : "n/a",
             (a.valid_mask & UCT_RC_GDR_CUDA_DEV_ATTR_PCI_BUS_ID) ?
                     a.pci_bus_id : "n/a",
             ATTR_VAL(UCT_RC_GDR_CUDA_DEV_ATTR_CC, a.cc_major),
             ATTR_VAL(UCT_RC_GDR_CUDA_DEV_ATTR_CC, a.cc_minor),
             ATTR_VAL(UCT_RC_GDR_CUDA_DEV_ATTR_GDR, a.gdr_supported),
             ATTR_VAL(UCT_RC_GDR_CUDA_DEV_ATTR_DMABUF, a.dmabuf_supported),
             ATTR_VAL(UCT_RC_GDR_CUDA_DEV_ATTR_WRITES_ORDERING,
                      a.writes_ordering),
             (a.valid_mask & UCT_RC_GDR_CUDA_DEV_ATTR_WRITES_ORDERING) ?
                     uct_rc_gdr_cuda_writes_ordering_str(a.writes_ordering) :
                     "n/a",
             ATTR_VAL(UCT_RC_GDR_CUDA_DEV_ATTR_FLUSH_OPTIONS,
                      a.flush_writes_options),
             ATTR_VAL(UCT_RC_GDR_CUDA_DEV_ATTR_VMM, a.vmm_supported),
             ATTR_VAL(UCT_RC_GDR_CUDA_DEV_ATTR_MEMPOOLS,
                      a.mempools_supported));
#undef ATTR_VAL
    return buf;
}

/* Not ucs_memory_type_names: the test may run with another release's libucs,
 * whose table has another size */
const char *mem_type_name(ucs_memory_type_t mem_type)
{
    switch (mem_type) {
    case UCS_MEMORY_TYPE_HOST:
        return "host";
    case UCS_MEMORY_TYPE_CUDA:
        return "cuda";
    case UCS_MEMORY_TYPE_CUDA_MANAGED:
        return "cuda-managed";
    default:
        return "other";
    }
}

std::string info_string(const uct_rc_gdr_cuda_mem_info_t &info)
{
    char buf[320];

    snprintf(buf, sizeof(buf),
             "kind %s mem_type %s device %d buffer_id %llu base %p "
             "length %zu%s context %s mempool %s",
             uct_rc_gdr_cuda_mem_kind_str(info.kind),
             mem_type_name(info.mem_type), info.device_ordinal,
             (unsigned long long)info.buffer_id, info.base_address,
             info.alloc_length,
             (info.flags & UCT_RC_GDR_CUDA_MEM_INFO_RANGE) ? "" :
                                                             " (caller's)",
             (info.context != NULL) ? "set" : "NULL",
             (info.mempool != NULL) ? "set" : "NULL");
    return buf;
}

template <typename F> double ns_per_call(unsigned count, F func)
{
    auto start = std::chrono::steady_clock::now();

    for (unsigned i = 0; i < count; ++i) {
        func();
    }

    std::chrono::duration<double, std::nano> elapsed =
            std::chrono::steady_clock::now() - start;
    return elapsed.count() / count;
}

/* A VMM range: one reservation mapped by two physical allocations */
struct vmm_range {
    void     *base = NULL;
    size_t   gran  = 0;
    uint64_t handle[2];
    int      num_mapped = 0;

    ucs_status_t create(int ordinal, int gdr_capable)
    {
        ucs_status_t status;
        int i;

        status = uct_rc_gdr_cuda_vmm_granularity(ordinal, &gran);
        if (status != UCS_OK) {
            return status;
        }

        status = uct_rc_gdr_cuda_vmm_reserve(2 * gran, gran, &base);
        if (status != UCS_OK) {
            return status;
        }

        for (i = 0; i < 2; ++i) {
            status = uct_rc_gdr_cuda_vmm_create(ordinal, gran, gdr_capable,
                                                &handle[i]);
            if (status != UCS_OK) {
                return status;
            }

            status = uct_rc_gdr_cuda_vmm_map((char*)base + i * gran, gran,
                                             handle[i]);
            /* the mapping keeps the memory */
            uct_rc_gdr_cuda_vmm_release(handle[i]);
            if (status != UCS_OK) {
                return status;
            }
            ++num_mapped;
        }

        return uct_rc_gdr_cuda_vmm_set_access(base, 2 * gran, ordinal);
    }

    ~vmm_range()
    {
        if (num_mapped > 0) {
            uct_rc_gdr_cuda_vmm_unmap(base, num_mapped * gran);
        }
        if (base != NULL) {
            uct_rc_gdr_cuda_vmm_unreserve(base, 2 * gran);
        }
    }
};

struct dmabuf_case {
    size_t offset;          /* of the address in the allocation */
    size_t length;
    size_t exp_base_offset; /* of the aligned base in the allocation */
    size_t exp_offset;      /* of the address in the dma-buf */
    size_t exp_length;
};

/* Interior addresses in a page-aligned allocation, 4 KiB pages */
const dmabuf_case dmabuf_cases[] = {
    {0x1234, 100,     0x1000, 0x234, 0x1000},
    {0,      100,     0,      0,     0x1000},
    {0x234,  100,     0,      0x234, 0x1000},
    {0xff0,  0x20,    0,      0xff0, 0x2000},
    {0x3011, 10000,   0x3000, 0x11,  0x3000},
    {0x1000, 0x1000,  0x1000, 0,     0x1000},
    {0,      0x10000, 0,      0,     0x10000}
};

/* Export each case from an allocation at base; check what the shim says
 * and the size of the dma-buf it returns */
void check_dmabuf_cases(void *base, bool print)
{
    for (const dmabuf_case &c : dmabuf_cases) {
        void *addr    = (char*)base + c.offset;
        void *aligned = NULL;
        size_t offset = 0, length = 0;
        int fd        = -1;

        CUDA_ASSERT_OK(uct_rc_gdr_cuda_dmabuf_export(addr, c.length, 4096,
                                                     &fd, &offset, &aligned,
                                                     &length));
        EXPECT_EQ((char*)base + c.exp_base_offset, aligned)
                << "offset 0x" << std::hex << c.offset;
        EXPECT_EQ(c.exp_offset, offset) << "offset 0x" << std::hex << c.offset;
        EXPECT_EQ(c.exp_length, length) << "offset 0x" << std::hex << c.offset;
        EXPECT_EQ((uintptr_t)addr, (uintptr_t)aligned + offset);
        EXPECT_LE((uintptr_t)addr + c.length, (uintptr_t)aligned + length);
        ASSERT_GE(fd, 0);
        EXPECT_GE(fd_size(fd), (off_t)length);
        if (print) {
            report("dmabuf export addr=base+0x%zx len=%zu -> aligned "
                   "base+0x%zx offset 0x%zx length %zu, dma-buf size %lld",
                   c.offset, c.length, (size_t)((char*)aligned - (char*)base),
                   offset, length, (long long)fd_size(fd));
        }
        close(fd);
    }
}


/*
 * cuda_shim: no driver needed
 */

TEST(cuda_shim, dmabuf_range)
{
    char *base = (char*)0x7f0000200000ul;
    void *aligned;
    size_t length, offset;

    for (const dmabuf_case &c : dmabuf_cases) {
        uct_rc_gdr_cuda_dmabuf_range(base + c.offset, c.length, 4096,
                                     &aligned, &length, &offset);
        EXPECT_EQ(base + c.exp_base_offset, aligned);
        EXPECT_EQ(c.exp_offset, offset);
        EXPECT_EQ(c.exp_length, length);
    }

    /* 64 KiB pages (GPU pages) */
    uct_rc_gdr_cuda_dmabuf_range(base + 0x11234, 100, 0x10000, &aligned,
                                 &length, &offset);
    EXPECT_EQ(base + 0x10000, aligned);
    EXPECT_EQ(0x1234u, offset);
    EXPECT_EQ(0x10000u, length);
}

TEST(cuda_shim, names)
{
    EXPECT_STREQ("none", uct_rc_gdr_cuda_writes_ordering_str(0));
    EXPECT_STREQ("owner", uct_rc_gdr_cuda_writes_ordering_str(100));
    EXPECT_STREQ("all-devices", uct_rc_gdr_cuda_writes_ordering_str(200));
    EXPECT_STREQ("unknown", uct_rc_gdr_cuda_writes_ordering_str(7));
    EXPECT_STREQ("cuda-device",
                 uct_rc_gdr_cuda_mem_kind_str(UCT_RC_GDR_CUDA_MEM_DEVICE));
    EXPECT_STREQ("cuda-pool",
                 uct_rc_gdr_cuda_mem_kind_str(UCT_RC_GDR_CUDA_MEM_POOL));
}

TEST(cuda_shim, library_name)
{
    const char *env = getenv(UCT_RC_GDR_CUDA_LIBRARY_ENV);

    if ((env != NULL) && (*env != '\0')) {
        EXPECT_STREQ(env, uct_rc_gdr_cuda_library_name());
    } else {
        EXPECT_STREQ(UCT_RC_GDR_CUDA_LIBRARY_DEFAULT,
                     uct_rc_gdr_cuda_library_name());
    }
}


/*
 * cuda_absent: each test forks a fresh copy of this binary (death-test
 * "threadsafe" style re-executes it), sets the environment there, and only
 * then lets the shim open its driver.
 */

class cuda_absent : public ::testing::Test {
protected:
    void SetUp() override
    {
        GTEST_FLAG_SET(death_test_style, "threadsafe");
    }

    static int m_failures;

    static void check(bool ok, const char *what)
    {
        if (!ok) {
            fprintf(stderr, "FAILED: %s\n", what);
            ++m_failures;
        }
    }

    static void done()
    {
        fprintf(stderr, m_failures ? "child-failed\n" : "child-ok\n");
        fflush(stderr);
        _exit(m_failures ? 1 : 0);
    }

#define CHILD_CHECK(_cond) check((_cond), #_cond)

    /* Every entry point answers NO_DEVICE, none crashes */
    static void expect_no_device()
    {
        uct_rc_gdr_cuda_driver_info_t info;
        uct_rc_gdr_cuda_dev_attr_t attr;
        uct_rc_gdr_cuda_mem_info_t mem_info;
        uct_rc_gdr_cuda_stream_h stream;
        uct_rc_gdr_cuda_event_h event;
        uct_rc_gdr_cuda_ctx_h ctx;
        char buf[64];
        void *ptr, *aligned;
        size_t offset, length;
        uint64_t id;
        int count, fd;

        CHILD_CHECK(uct_rc_gdr_cuda_init() == UCS_ERR_NO_DEVICE);
        CHILD_CHECK(uct_rc_gdr_cuda_init() == UCS_ERR_NO_DEVICE);
        CHILD_CHECK(!uct_rc_gdr_cuda_is_available());
        CHILD_CHECK(uct_rc_gdr_cuda_driver_info(&info) == UCS_ERR_NO_DEVICE);
        CHILD_CHECK(uct_rc_gdr_cuda_device_count(&count) ==
                    UCS_ERR_NO_DEVICE);
        CHILD_CHECK(uct_rc_gdr_cuda_device_attr_query(0, &attr) ==
                    UCS_ERR_NO_DEVICE);
        CHILD_CHECK(uct_rc_gdr_cuda_mem_query(buf, sizeof(buf), &mem_info) ==
                    UCS_ERR_NO_DEVICE);
        CHILD_CHECK(uct_rc_gdr_cuda_buffer_id(buf, &id) == UCS_ERR_NO_DEVICE);
        CHILD_CHECK(uct_rc_gdr_cuda_set_sync_memops(buf) == UCS_ERR_NO_DEVICE);
        CHILD_CHECK(uct_rc_gdr_cuda_dmabuf_export(buf, sizeof(buf), 0, &fd,
                                                  &offset, &aligned,
                                                  &length) ==
                    UCS_ERR_NO_DEVICE);
        CHILD_CHECK(uct_rc_gdr_cuda_ctx_activate(0, &ctx) ==
                    UCS_ERR_NO_DEVICE);
        CHILD_CHECK(uct_rc_gdr_cuda_mem_alloc(4096, &ptr) ==
                    UCS_ERR_NO_DEVICE);
        CHILD_CHECK(uct_rc_gdr_cuda_host_alloc(4096, &ptr) ==
                    UCS_ERR_NO_DEVICE);
        CHILD_CHECK(uct_rc_gdr_cuda_managed_alloc(4096, &ptr) ==
                    UCS_ERR_NO_DEVICE);
        CHILD_CHECK(uct_rc_gdr_cuda_stream_create(&stream) ==
                    UCS_ERR_NO_DEVICE);
        CHILD_CHECK(uct_rc_gdr_cuda_event_create(&event) ==
                    UCS_ERR_NO_DEVICE);
        CHILD_CHECK(uct_rc_gdr_cuda_memcpy(buf, buf + 32, 16) ==
                    UCS_ERR_NO_DEVICE);
        CHILD_CHECK(uct_rc_gdr_cuda_memcpy_dtoh(buf, buf + 32, 16) ==
                    UCS_ERR_NO_DEVICE);
    }
};

int cuda_absent::m_failures = 0;

TEST_F(cuda_absent, missing_library)
{
    EXPECT_EXIT({
        setenv(UCT_RC_GDR_CUDA_LIBRARY_ENV,
               "/nonexistent/rc_gdr/libcuda.so.1", 1);
        expect_no_device();
        done();
    }, ::testing::ExitedWithCode(0), "child-ok");
}

TEST_F(cuda_absent, not_a_driver)
{
    EXPECT_EXIT({
        setenv(UCT_RC_GDR_CUDA_LIBRARY_ENV, "libm.so.6", 1);
        expect_no_device();
        done();
    }, ::testing::ExitedWithCode(0), "child-ok");
}

TEST_F(cuda_absent, no_devices)
{
    EXPECT_EXIT({
        setenv(UCT_RC_GDR_CUDA_LIBRARY_ENV, fake_cuda_library, 1);
        setenv("RC_GDR_FAKE_CUDA_DEVICES", "0", 1);
        expect_no_device();
        done();
    }, ::testing::ExitedWithCode(0), "child-ok");
}

TEST_F(cuda_absent, default_library_name)
{
    EXPECT_EXIT({
        unsetenv(UCT_RC_GDR_CUDA_LIBRARY_ENV);
        CHILD_CHECK(!strcmp(uct_rc_gdr_cuda_library_name(), "libcuda.so.1"));
        setenv(UCT_RC_GDR_CUDA_LIBRARY_ENV, "", 1);
        CHILD_CHECK(!strcmp(uct_rc_gdr_cuda_library_name(), "libcuda.so.1"));
        setenv(UCT_RC_GDR_CUDA_LIBRARY_ENV, "/opt/x/libcuda.so.1", 1);
        CHILD_CHECK(!strcmp(uct_rc_gdr_cuda_library_name(),
                            "/opt/x/libcuda.so.1"));
        done();
    }, ::testing::ExitedWithCode(0), "child-ok");
}

/* A driver without cuGetProcAddress_v2 (before CUDA 12): versioned dlsym */
TEST_F(cuda_absent, dlsym_fallback)
{
    EXPECT_EXIT({
        uct_rc_gdr_cuda_driver_info_t info;
        uct_rc_gdr_cuda_mem_info_t mem_info;
        uct_rc_gdr_cuda_ctx_h ctx;
        void *ptr = NULL;

        setenv(UCT_RC_GDR_CUDA_LIBRARY_ENV, fake_cuda_library, 1);
        setenv("RC_GDR_FAKE_CUDA_PROC_ADDRESS", "0", 1);
        CHILD_CHECK(uct_rc_gdr_cuda_init() == UCS_OK);
        CHILD_CHECK(uct_rc_gdr_cuda_driver_info(&info) == UCS_OK);
        CHILD_CHECK(info.by_proc_address == 0);
        CHILD_CHECK(info.num_missing == 0);
        CHILD_CHECK(uct_rc_gdr_cuda_ctx_activate(0, &ctx) == UCS_OK);
        CHILD_CHECK(uct_rc_gdr_cuda_mem_alloc(1 << 16, &ptr) == UCS_OK);
        CHILD_CHECK(uct_rc_gdr_cuda_mem_query(ptr, 1, &mem_info) == UCS_OK);
        CHILD_CHECK(mem_info.kind == UCT_RC_GDR_CUDA_MEM_DEVICE);
        CHILD_CHECK(uct_rc_gdr_cuda_mem_free(ptr) == UCS_OK);
        done();
    }, ::testing::ExitedWithCode(0), "child-ok");
}


/*
 * cuda_fake: the emulated driver
 */

class cuda_fake : public ::testing::Test {
protected:
    void SetUp() override
    {
        if (test_wants_real_cuda()) {
            GTEST_SKIP() << "RC_GDR_TEST_CUDA=real: the emulated driver is "
                            "not loaded in this run";
        }

        CUDA_ASSERT_OK(uct_rc_gdr_cuda_init());
        m_control = fake_control_func();
        ASSERT_TRUE(m_control != NULL)
                << uct_rc_gdr_cuda_library_name()
                << " is not the emulated driver";
        CUDA_ASSERT_OK(uct_rc_gdr_cuda_ctx_activate(0, &m_ctx));
    }

    void TearDown() override
    {
        for (auto &knob : m_knobs) {
            m_control(knob.first.c_str(), knob.second, NULL);
        }
        if (m_ctx != NULL) {
            uct_rc_gdr_cuda_ctx_set_current(NULL);
            uct_rc_gdr_cuda_ctx_release(0);
        }
    }

    /* Change a knob of the emulation until the end of the test */
    void control(const char *knob, long value)
    {
        long old;

        ASSERT_EQ(0, m_control(knob, value, &old)) << knob;
        m_knobs.insert(m_knobs.begin(), std::make_pair(std::string(knob), old));
    }

    void *alloc_device(size_t len)
    {
        void *ptr = NULL;

        EXPECT_EQ(UCS_OK, uct_rc_gdr_cuda_mem_alloc(len, &ptr));
        return ptr;
    }

    uct_rc_gdr_cuda_ctx_h                     m_ctx     = NULL;
    fake_control_func_t                       m_control = NULL;
    std::vector<std::pair<std::string, long>> m_knobs;
};

TEST_F(cuda_fake, driver_info)
{
    uct_rc_gdr_cuda_driver_info_t info;

    EXPECT_TRUE(uct_rc_gdr_cuda_is_available());
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_driver_info(&info));
    EXPECT_STREQ(fake_cuda_library, info.library);
    EXPECT_STREQ(fake_cuda_library, uct_rc_gdr_cuda_library_name());
    EXPECT_EQ(13000, info.driver_version);
    EXPECT_EQ(1, info.by_proc_address);
    EXPECT_EQ(0u, info.num_missing);
}

TEST_F(cuda_fake, device_attributes)
{
    const uint64_t all = UCT_RC_GDR_CUDA_DEV_ATTR_NAME |
                         UCT_RC_GDR_CUDA_DEV_ATTR_PCI_BUS_ID |
                         UCT_RC_GDR_CUDA_DEV_ATTR_CC |
                         UCT_RC_GDR_CUDA_DEV_ATTR_GDR |
                         UCT_RC_GDR_CUDA_DEV_ATTR_DMABUF |
                         UCT_RC_GDR_CUDA_DEV_ATTR_WRITES_ORDERING |
                         UCT_RC_GDR_CUDA_DEV_ATTR_FLUSH_OPTIONS |
                         UCT_RC_GDR_CUDA_DEV_ATTR_VMM |
                         UCT_RC_GDR_CUDA_DEV_ATTR_MEMPOOLS |
                         UCT_RC_GDR_CUDA_DEV_ATTR_PCI_LOCATION;
    uct_rc_gdr_cuda_dev_attr_t a;
    int count;

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_device_count(&count));
    ASSERT_EQ(2, count);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_device_attr_query(0, &a));
    report("%s", attr_string(a).c_str());
    EXPECT_EQ(0, a.ordinal);
    EXPECT_EQ(all, a.valid_mask);
    EXPECT_STREQ("0000:1a:00.0", a.pci_bus_id); /* lower-cased */
    /* what UCX's topology is given: the same place, as numbers */
    EXPECT_EQ(0, a.pci_domain);
    EXPECT_EQ(0x1a, a.pci_bus);
    EXPECT_EQ(0, a.pci_device);
    EXPECT_EQ(8, a.cc_major);
    EXPECT_EQ(0, a.cc_minor);
    EXPECT_EQ(1, a.gdr_supported);
    EXPECT_EQ(1, a.dmabuf_supported);
    EXPECT_EQ(UCT_RC_GDR_CUDA_WRITES_ORDERING_NONE, a.writes_ordering);
    EXPECT_EQ(UCT_RC_GDR_CUDA_FLUSH_WRITES_OPTION_HOST, a.flush_writes_options);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_device_attr_query(1, &a));
    report("%s", attr_string(a).c_str());
    EXPECT_EQ(1, a.ordinal);
    /* the driver cannot tell: not valid, rather than a zero */
    EXPECT_EQ(all & ~UCT_RC_GDR_CUDA_DEV_ATTR_FLUSH_OPTIONS, a.valid_mask);
    EXPECT_STREQ("0000:9b:00.0", a.pci_bus_id);
    EXPECT_EQ(0x9b, a.pci_bus);
    EXPECT_EQ(9, a.cc_major);
    EXPECT_EQ(0, a.dmabuf_supported);
    EXPECT_EQ(UCT_RC_GDR_CUDA_WRITES_ORDERING_OWNER, a.writes_ordering);

    /* attributes are read on every query */
    control("writes_ordering", 200);
    control("gdr", 0);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_device_attr_query(0, &a));
    EXPECT_EQ(UCT_RC_GDR_CUDA_WRITES_ORDERING_ALL_DEVICES, a.writes_ordering);
    EXPECT_EQ(0, a.gdr_supported);
    control("gdr", -1);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_device_attr_query(0, &a));
    EXPECT_FALSE(a.valid_mask & UCT_RC_GDR_CUDA_DEV_ATTR_GDR);
}

TEST_F(cuda_fake, device_bad_ordinal)
{
    uct_rc_gdr_cuda_dev_attr_t a;
    uct_rc_gdr_cuda_ctx_h ctx;

    CUDA_EXPECT_STATUS(UCS_ERR_INVALID_PARAM,
                       uct_rc_gdr_cuda_device_attr_query(2, &a));
    CUDA_EXPECT_STATUS(UCS_ERR_INVALID_PARAM,
                       uct_rc_gdr_cuda_device_attr_query(-1, &a));
    CUDA_EXPECT_STATUS(UCS_ERR_INVALID_PARAM,
                       uct_rc_gdr_cuda_ctx_activate(5, &ctx));
}

TEST_F(cuda_fake, context)
{
    uct_rc_gdr_cuda_ctx_h ctx, ctx1;

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_ctx_get_current(&ctx));
    EXPECT_EQ(m_ctx, ctx);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_ctx_activate(1, &ctx1));
    EXPECT_NE(m_ctx, ctx1);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_ctx_get_current(&ctx));
    EXPECT_EQ(ctx1, ctx);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_ctx_release(1));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_ctx_set_current(m_ctx));
}

TEST_F(cuda_fake, mem_classify)
{
    uct_rc_gdr_cuda_stream_h stream;
    uct_rc_gdr_cuda_mem_info_t info;
    uct_rc_gdr_cuda_ctx_h ctx1;
    const size_t len = 1 << 20;
    void *dev, *pinned, *managed, *pool, *dev1;
    std::vector<char> host(len);
    int on_stack = 0;

    /* device memory, queried at an interior address */
    dev = alloc_device(len);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query((char*)dev + 100, 10, &info));
    report("cuMemAlloc: %s", info_string(info).c_str());
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_DEVICE, info.kind);
    EXPECT_EQ(UCS_MEMORY_TYPE_CUDA, info.mem_type);
    EXPECT_EQ(0, info.device_ordinal);
    EXPECT_EQ(dev, info.base_address);
    EXPECT_EQ(len, info.alloc_length);
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_INFO_RANGE |
              UCT_RC_GDR_CUDA_MEM_INFO_MEMPOOL, info.flags);
    EXPECT_NE(0u, info.buffer_id);
    EXPECT_EQ(m_ctx, info.context);
    EXPECT_EQ(nullptr, info.mempool);

    /* pinned host memory is host memory to UCP */
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_host_alloc(len, &pinned));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query(pinned, len, &info));
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_PINNED, info.kind);
    EXPECT_EQ(UCS_MEMORY_TYPE_HOST, info.mem_type);
    EXPECT_EQ(pinned, info.base_address);

    /* registered host memory, then unregistered */
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_host_register(host.data(), len));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query(&host[10], 1, &info));
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_PINNED, info.kind);
    EXPECT_EQ(UCS_MEMORY_TYPE_HOST, info.mem_type);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_host_unregister(host.data()));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query(&host[10], 1, &info));
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_HOST, info.kind);

    /* managed memory is not plain device memory */
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_managed_alloc(len, &managed));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query(managed, len, &info));
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_MANAGED, info.kind);
    EXPECT_EQ(UCS_MEMORY_TYPE_CUDA_MANAGED, info.mem_type);

    /* neither is pool memory */
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_create(&stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_alloc_async(len, stream, &pool));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query((char*)pool + 5, 1, &info));
    report("cuMemAllocAsync: %s", info_string(info).c_str());
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_POOL, info.kind);
    EXPECT_EQ(UCS_MEMORY_TYPE_CUDA, info.mem_type);
    EXPECT_NE((void*)NULL, info.mempool);
    EXPECT_EQ(pool, info.base_address);

    /* host memory CUDA does not know */
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query(host.data(), len, &info));
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_HOST, info.kind);
    EXPECT_EQ(UCS_MEMORY_TYPE_HOST, info.mem_type);
    EXPECT_EQ(-1, info.device_ordinal);
    EXPECT_EQ(0u, info.buffer_id);
    EXPECT_EQ((void*)host.data(), info.base_address);
    EXPECT_EQ(len, info.alloc_length);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query(&on_stack, sizeof(on_stack),
                                             &info));
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_HOST, info.kind);

    /* device memory of the second device */
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_ctx_activate(1, &ctx1));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_alloc(4096, &dev1));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_ctx_set_current(m_ctx));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query(dev1, 4096, &info));
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_DEVICE, info.kind);
    EXPECT_EQ(1, info.device_ordinal);
    EXPECT_EQ(ctx1, info.context);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(dev1));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_ctx_release(1));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free_async(pool, stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_destroy(stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(managed));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_host_free(pinned));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(dev));
}

TEST_F(cuda_fake, mem_classify_vmm)
{
    uct_rc_gdr_cuda_mem_info_t info;
    vmm_range vmm;

    CUDA_ASSERT_OK(vmm.create(0, 1));
    memset(vmm.base, 0x5a, 2 * vmm.gran); /* accessible after set_access */

    /* the range is the one mapping that holds the address */
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query((char*)vmm.base + vmm.gran + 5,
                                             1, &info));
    report("VMM: %s", info_string(info).c_str());
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_DEVICE, info.kind);
    EXPECT_EQ(UCS_MEMORY_TYPE_CUDA, info.mem_type);
    EXPECT_EQ((char*)vmm.base + vmm.gran, info.base_address);
    EXPECT_EQ(vmm.gran, info.alloc_length);
    EXPECT_EQ(nullptr, info.context);
}

/* A progress thread may have no current context */
TEST_F(cuda_fake, mem_query_without_context)
{
    uct_rc_gdr_cuda_stream_h stream;
    void *dev, *pool;

    dev = alloc_device(1 << 16);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_create(&stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_alloc_async(1 << 16, stream, &pool));

    std::thread([&]() {
        uct_rc_gdr_cuda_mem_info_t info;
        uct_rc_gdr_cuda_ctx_h ctx;
        size_t offset, length;
        void *aligned;
        int fd;

        CUDA_ASSERT_OK(uct_rc_gdr_cuda_ctx_get_current(&ctx));
        ASSERT_EQ(nullptr, ctx);

        /* the allocation's context is pushed for the range query */
        CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query((char*)dev + 8, 8, &info));
        EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_DEVICE, info.kind);
        EXPECT_TRUE(info.flags & UCT_RC_GDR_CUDA_MEM_INFO_RANGE);
        EXPECT_EQ(dev, info.base_address);

        /* pool memory has no context: the device's primary one is used */
        CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query((char*)pool + 8, 8, &info));
        EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_POOL, info.kind);
        EXPECT_TRUE(info.flags & UCT_RC_GDR_CUDA_MEM_INFO_RANGE);
        EXPECT_EQ(pool, info.base_address);

        CUDA_ASSERT_OK(uct_rc_gdr_cuda_dmabuf_export((char*)dev + 0x1234,
                                                     100, 4096, &fd, &offset,
                                                     &aligned, &length));
        EXPECT_EQ(0x234u, offset);
        close(fd);

        /* and nothing stays current */
        CUDA_ASSERT_OK(uct_rc_gdr_cuda_ctx_get_current(&ctx));
        EXPECT_EQ(nullptr, ctx);
    }).join();

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free_async(pool, stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_destroy(stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(dev));
}

/* A driver older than 11.3 refuses a query naming the mempool attribute */
TEST_F(cuda_fake, mem_query_old_driver)
{
    uct_rc_gdr_cuda_stream_h stream;
    uct_rc_gdr_cuda_mem_info_t info;
    void *dev, *pool;

    dev = alloc_device(4096);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_create(&stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_alloc_async(4096, stream, &pool));
    control("mempool_attr", 0);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query(dev, 4096, &info));
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_DEVICE, info.kind);
    EXPECT_FALSE(info.flags & UCT_RC_GDR_CUDA_MEM_INFO_MEMPOOL);
    EXPECT_NE(0u, info.buffer_id);

    /* pool memory cannot be told apart, and the flag says so */
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query(pool, 4096, &info));
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_DEVICE, info.kind);
    EXPECT_FALSE(info.flags & UCT_RC_GDR_CUDA_MEM_INFO_MEMPOOL);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query(&info, sizeof(info), &info));
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_HOST, info.kind);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free_async(pool, stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_destroy(stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(dev));
}

/* The registration cache's guard: a reused address has a new buffer id */
TEST_F(cuda_fake, buffer_id_reuse)
{
    uct_rc_gdr_cuda_mem_info_t info;
    uint64_t id1, id2, id_other;
    void *p1, *p2, *other;

    p1 = alloc_device(1 << 16);
    other = alloc_device(1 << 16);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_buffer_id(p1, &id1));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_buffer_id(other, &id_other));
    EXPECT_NE(id1, id_other);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_buffer_id((char*)p1 + 100, &id2));
    EXPECT_EQ(id1, id2); /* one id for the whole allocation */

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(p1));
    CUDA_EXPECT_STATUS(UCS_ERR_NO_ELEM, uct_rc_gdr_cuda_buffer_id(p1, &id2));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query(p1, 1, &info));
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_HOST, info.kind);

    p2 = alloc_device(1 << 16);
    ASSERT_EQ(p1, p2) << "the emulation reuses the latest freed address";
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_buffer_id(p2, &id2));
    EXPECT_NE(id1, id2);
    EXPECT_GT(id2, id_other);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(p2));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(other));
}

TEST_F(cuda_fake, buffer_id_host)
{
    std::vector<char> host(64);
    uint64_t id = 77;

    CUDA_EXPECT_STATUS(UCS_ERR_NO_ELEM,
                       uct_rc_gdr_cuda_buffer_id(host.data(), &id));
    EXPECT_EQ(77u, id); /* outputs are set only on success */
}

TEST_F(cuda_fake, buffer_id_timing)
{
    void *dev = alloc_device(1 << 16);
    uint64_t id;
    double ns;

    ns = ns_per_call(200000, [&]() { uct_rc_gdr_cuda_buffer_id(dev, &id); });
    report("buffer id query (emulated driver): %.1f ns/call", ns);
    RecordProperty("buffer_id_ns", (int)ns);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(dev));
}

TEST_F(cuda_fake, sync_memops)
{
    uct_rc_gdr_cuda_driver_info_t info;
    std::vector<char> host(64);
    unsigned value = 0;
    void *dev, *handle;
    int (*get_attr)(void*, int, unsigned long long);

    dev = alloc_device(4096);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_set_sync_memops((char*)dev + 10));

    /* read back, from the emulation itself */
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_driver_info(&info));
    handle = dlopen(info.library, RTLD_LAZY | RTLD_NOLOAD);
    ASSERT_TRUE(handle != NULL);
    get_attr = (int (*)(void*, int, unsigned long long))
               dlsym(handle, "cuPointerGetAttribute");
    ASSERT_TRUE(get_attr != NULL);
    EXPECT_EQ(0, get_attr(&value, 6 /* CU_POINTER_ATTRIBUTE_SYNC_MEMOPS */,
                          (uintptr_t)dev));
    EXPECT_EQ(1u, value);
    dlclose(handle);

    CUDA_EXPECT_STATUS(UCS_ERR_INVALID_PARAM,
                       uct_rc_gdr_cuda_set_sync_memops(host.data()));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(dev));
}

TEST_F(cuda_fake, dmabuf_export_interior)
{
    void *dev = alloc_device(1 << 16);
    void *aligned;
    size_t offset, length;
    int fd;

    check_dmabuf_cases(dev, false);

    /* page size 0: the host page size */
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_dmabuf_export((char*)dev + 0x1234, 100, 0,
                                                 &fd, &offset, &aligned,
                                                 &length));
    EXPECT_EQ((uintptr_t)dev + 0x1234, (uintptr_t)aligned + offset);
    EXPECT_EQ(0u, (uintptr_t)aligned % sysconf(_SC_PAGESIZE));
    EXPECT_NE(0u, offset) << "an interior address needs its offset";
    close(fd);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(dev));
}

TEST_F(cuda_fake, dmabuf_export_errors)
{
    uct_rc_gdr_cuda_stream_h stream;
    uct_rc_gdr_cuda_ctx_h ctx1;
    std::vector<char> host(8192);
    void *dev, *dev1, *pinned, *managed, *pool, *aligned = NULL;
    size_t offset = 1, length = 1;
    int fd = -7;

    dev = alloc_device(1 << 16);
    CUDA_EXPECT_STATUS(UCS_ERR_INVALID_PARAM,
                       uct_rc_gdr_cuda_dmabuf_export(dev, 0, 4096, &fd,
                                                     &offset, &aligned,
                                                     &length));
    CUDA_EXPECT_STATUS(UCS_ERR_INVALID_PARAM,
                       uct_rc_gdr_cuda_dmabuf_export(dev, 100, 3000, &fd,
                                                     &offset, &aligned,
                                                     &length));
    /* not CUDA memory */
    CUDA_EXPECT_STATUS(UCS_ERR_INVALID_PARAM,
                       uct_rc_gdr_cuda_dmabuf_export(host.data(), 100, 4096,
                                                     &fd, &offset, &aligned,
                                                     &length));
    /* pinned host, managed and pool memory: refused (as on an H200) */
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_host_alloc(4096, &pinned));
    CUDA_EXPECT_STATUS(UCS_ERR_INVALID_PARAM,
                       uct_rc_gdr_cuda_dmabuf_export(pinned, 100, 4096, &fd,
                                                     &offset, &aligned,
                                                     &length));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_host_free(pinned));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_managed_alloc(4096, &managed));
    CUDA_EXPECT_STATUS(UCS_ERR_INVALID_PARAM,
                       uct_rc_gdr_cuda_dmabuf_export(managed, 100, 4096, &fd,
                                                     &offset, &aligned,
                                                     &length));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(managed));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_create(&stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_alloc_async(4096, stream, &pool));
    CUDA_EXPECT_STATUS(UCS_ERR_INVALID_PARAM,
                       uct_rc_gdr_cuda_dmabuf_export(pool, 100, 4096, &fd,
                                                     &offset, &aligned,
                                                     &length));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free_async(pool, stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_destroy(stream));

    /* device 1 has no DMA-BUF */
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_ctx_activate(1, &ctx1));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_alloc(4096, &dev1));
    CUDA_EXPECT_STATUS(UCS_ERR_UNSUPPORTED,
                       uct_rc_gdr_cuda_dmabuf_export(dev1, 100, 4096, &fd,
                                                     &offset, &aligned,
                                                     &length));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(dev1));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_ctx_set_current(m_ctx));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_ctx_release(1));

    /* and device 0 once switched off */
    control("dmabuf", 0);
    CUDA_EXPECT_STATUS(UCS_ERR_UNSUPPORTED,
                       uct_rc_gdr_cuda_dmabuf_export(dev, 100, 4096, &fd,
                                                     &offset, &aligned,
                                                     &length));

    /* outputs are untouched by every failure */
    EXPECT_EQ(-7, fd);
    EXPECT_EQ(1u, offset);
    EXPECT_EQ(1u, length);
    EXPECT_EQ(nullptr, aligned);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(dev));
}

/* A range over two VMM mappings is exported whole, or not at all */
TEST_F(cuda_fake, dmabuf_export_vmm_span)
{
    char *span_addr;
    void *aligned;
    size_t offset, length;
    vmm_range vmm;
    int fd;

    CUDA_ASSERT_OK(vmm.create(0, 1));
    span_addr = (char*)vmm.base + vmm.gran - 0x800;

    /* within the first mapping */
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_dmabuf_export((char*)vmm.base + 0x1234,
                                                 100, 4096, &fd, &offset,
                                                 &aligned, &length));
    EXPECT_EQ(0x234u, offset);
    EXPECT_EQ(4096u, length);
    close(fd);

    /* across both: the driver accepts it, nothing is cut at the boundary */
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_dmabuf_export(span_addr, 0x1000, 4096, &fd,
                                                 &offset, &aligned, &length));
    EXPECT_EQ((char*)vmm.base + vmm.gran - 0x1000, aligned);
    EXPECT_EQ(0x800u, offset);
    EXPECT_EQ(0x2000u, length);
    EXPECT_EQ(0x2000, fd_size(fd));
    close(fd);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_dmabuf_export(vmm.base, 2 * vmm.gran, 4096,
                                                 &fd, &offset, &aligned,
                                                 &length));
    EXPECT_EQ(2 * vmm.gran, length);
    EXPECT_EQ((off_t)(2 * vmm.gran), fd_size(fd));
    close(fd);

    /* a driver that refuses it: an error, never the first mapping only */
    control("dmabuf_span", 0);
    fd     = -1;
    length = 0;
    CUDA_EXPECT_STATUS(UCS_ERR_INVALID_PARAM,
                       uct_rc_gdr_cuda_dmabuf_export(span_addr, 0x1000, 4096,
                                                     &fd, &offset, &aligned,
                                                     &length));
    EXPECT_EQ(-1, fd);
    EXPECT_EQ(0u, length);
}

TEST_F(cuda_fake, copies_streams_events)
{
    const size_t len = 1 << 16;
    uct_rc_gdr_cuda_stream_h stream;
    uct_rc_gdr_cuda_event_h event;
    std::vector<char> src(len), dst(len);
    void *dev, *dev2, *pinned;
    size_t i;

    for (i = 0; i < len; ++i) {
        src[i] = (char)(i * 7 + 3);
    }

    dev  = alloc_device(len);
    dev2 = alloc_device(len);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_host_alloc(len, &pinned));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_create(&stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_event_create(&event));

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_memcpy_htod(dev, src.data(), len));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_memcpy(dev2, dev, len));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_memcpy_dtoh_async(pinned, dev2, len,
                                                     stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_event_record(event, stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_event_query(event));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_event_synchronize(event));
    EXPECT_EQ(0, memcmp(src.data(), pinned, len));

    memset(dev, 0, len);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_memcpy_htod_async(dev, pinned, len,
                                                     stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_synchronize(stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_memcpy_dtoh(dst.data(), dev, len));
    EXPECT_EQ(src, dst);

    /* a host pointer is not device memory */
    CUDA_EXPECT_STATUS(UCS_ERR_INVALID_PARAM,
                       uct_rc_gdr_cuda_memcpy_dtoh(dst.data(), src.data(),
                                                   len));

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_event_destroy(event));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_destroy(stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_host_free(pinned));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(dev2));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(dev));
}

TEST_F(cuda_fake, free_invalid)
{
    std::vector<char> host(64);
    void *dev = alloc_device(4096);

    CUDA_EXPECT_STATUS(UCS_ERR_INVALID_PARAM,
                       uct_rc_gdr_cuda_mem_free(host.data()));
    CUDA_EXPECT_STATUS(UCS_ERR_INVALID_PARAM,
                       uct_rc_gdr_cuda_mem_free((char*)dev + 8));
    CUDA_EXPECT_STATUS(UCS_ERR_INVALID_PARAM, uct_rc_gdr_cuda_host_free(dev));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(dev));
    CUDA_EXPECT_STATUS(UCS_ERR_INVALID_PARAM, uct_rc_gdr_cuda_mem_free(dev));
}


/*
 * cuda_gpu: a real driver and GPU. Measured facts are printed on lines that
 * begin with "[ CUDA     ]".
 */

class cuda_gpu : public ::testing::Test {
protected:
    void SetUp() override
    {
        uct_rc_gdr_cuda_driver_info_t info;
        int count;

        if (uct_rc_gdr_cuda_init() != UCS_OK) {
            GTEST_SKIP() << "no usable CUDA driver ("
                         << uct_rc_gdr_cuda_library_name()
                         << " did not load or cuInit failed)";
        }
        if (fake_control_func() != NULL) {
            GTEST_SKIP() << "the loaded CUDA driver is the test emulation "
                         << uct_rc_gdr_cuda_library_name()
                         << "; on a GPU machine run test/gpu/run_gpu_tests.sh"
                            " (RC_GDR_TEST_CUDA=real)";
        }
        if ((uct_rc_gdr_cuda_device_count(&count) != UCS_OK) || (count < 1)) {
            GTEST_SKIP() << "the CUDA driver reports no device";
        }

        CUDA_ASSERT_OK(uct_rc_gdr_cuda_driver_info(&info));
        report("driver %s version %d, entry points by %s, %u missing",
               info.library, info.driver_version,
               info.by_proc_address ? "cuGetProcAddress_v2" : "dlsym",
               info.num_missing);
        CUDA_ASSERT_OK(uct_rc_gdr_cuda_device_attr_query(0, &m_attr));

        /* retained once for the process: releasing the last reference
         * would tear the context down between tests */
        if (m_ctx == NULL) {
            CUDA_ASSERT_OK(uct_rc_gdr_cuda_ctx_retain(0, &m_ctx));
        }
        CUDA_ASSERT_OK(uct_rc_gdr_cuda_ctx_set_current(m_ctx));
    }

    bool dmabuf_supported() const
    {
        return (m_attr.valid_mask & UCT_RC_GDR_CUDA_DEV_ATTR_DMABUF) &&
               m_attr.dmabuf_supported;
    }

    void report_query(const char *what, void *addr, size_t len)
    {
        uct_rc_gdr_cuda_mem_info_t info;

        CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query(addr, len, &info));
        report("%s: %s", what, info_string(info).c_str());
    }

    /* Try one export, print what the driver did */
    void report_export(const char *what, void *addr, size_t len)
    {
        ucs_status_t status;
        size_t offset = 0, length = 0;
        void *aligned = NULL;
        int fd        = -1;

        status = uct_rc_gdr_cuda_dmabuf_export(addr, len, 4096, &fd, &offset,
                                               &aligned, &length);
        if (status != UCS_OK) {
            report("dmabuf export of %s: %s", what,
                   ucs_status_string(status));
            return;
        }

        report("dmabuf export of %s: ok, offset 0x%zx length %zu, dma-buf "
               "size %lld", what, offset, length, (long long)fd_size(fd));
        EXPECT_GE(fd_size(fd), (off_t)length);
        close(fd);
    }

    uct_rc_gdr_cuda_dev_attr_t   m_attr;
    static uct_rc_gdr_cuda_ctx_h m_ctx;
};

uct_rc_gdr_cuda_ctx_h cuda_gpu::m_ctx = NULL;

TEST_F(cuda_gpu, attributes)
{
    uct_rc_gdr_cuda_dev_attr_t a;
    unsigned domain, bus, dev, func;
    char tail;
    int count, i;
    const char *p;

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_device_count(&count));
    report("%d device(s)", count);
    for (i = 0; i < count; ++i) {
        CUDA_ASSERT_OK(uct_rc_gdr_cuda_device_attr_query(i, &a));
        report("%s", attr_string(a).c_str());

        EXPECT_TRUE(a.valid_mask & UCT_RC_GDR_CUDA_DEV_ATTR_CC);
        EXPECT_GE(a.cc_major, 3);
        ASSERT_TRUE(a.valid_mask & UCT_RC_GDR_CUDA_DEV_ATTR_PCI_BUS_ID);
        EXPECT_EQ(4, sscanf(a.pci_bus_id, "%x:%x:%x.%x%c", &domain, &bus,
                            &dev, &func, &tail))
                << a.pci_bus_id;
        for (p = a.pci_bus_id; *p != '\0'; ++p) {
            EXPECT_FALSE(isupper((unsigned char)*p)) << a.pci_bus_id;
        }
        /* the numbers UCX's topology takes name the same function */
        ASSERT_TRUE(a.valid_mask & UCT_RC_GDR_CUDA_DEV_ATTR_PCI_LOCATION);
        EXPECT_EQ(domain, (unsigned)a.pci_domain);
        EXPECT_EQ(bus, (unsigned)a.pci_bus);
        EXPECT_EQ(dev, (unsigned)a.pci_device);
        if (a.valid_mask & UCT_RC_GDR_CUDA_DEV_ATTR_WRITES_ORDERING) {
            EXPECT_TRUE((a.writes_ordering == 0) ||
                        (a.writes_ordering == 100) ||
                        (a.writes_ordering == 200))
                    << a.writes_ordering;
        }
    }
}

TEST_F(cuda_gpu, mem_detect)
{
    const size_t len = 4 << 20;
    uct_rc_gdr_cuda_stream_h stream;
    uct_rc_gdr_cuda_mem_info_t info;
    std::vector<char> host(len);
    void *dev, *pinned, *managed, *pool;

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_alloc(len, &dev));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query((char*)dev + 4097, 10, &info));
    report("cuMemAlloc (interior): %s", info_string(info).c_str());
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_DEVICE, info.kind);
    EXPECT_EQ(UCS_MEMORY_TYPE_CUDA, info.mem_type);
    EXPECT_EQ(0, info.device_ordinal);
    EXPECT_NE(0u, info.buffer_id);
    EXPECT_TRUE(info.flags & UCT_RC_GDR_CUDA_MEM_INFO_RANGE);
    EXPECT_EQ(dev, info.base_address);
    EXPECT_EQ(len, info.alloc_length);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_host_alloc(len, &pinned));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query(pinned, len, &info));
    report("cuMemHostAlloc: %s", info_string(info).c_str());
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_PINNED, info.kind);
    EXPECT_EQ(UCS_MEMORY_TYPE_HOST, info.mem_type);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_host_register(host.data(), len));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query(host.data(), len, &info));
    report("cuMemHostRegister: %s", info_string(info).c_str());
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_PINNED, info.kind);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_host_unregister(host.data()));

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_managed_alloc(len, &managed));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query(managed, len, &info));
    report("cuMemAllocManaged: %s", info_string(info).c_str());
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_MANAGED, info.kind);
    EXPECT_EQ(UCS_MEMORY_TYPE_CUDA_MANAGED, info.mem_type);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_create(&stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_alloc_async(len, stream, &pool));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_synchronize(stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query((char*)pool + 64, 8, &info));
    report("cuMemAllocAsync: %s", info_string(info).c_str());
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_POOL, info.kind);
    EXPECT_EQ(UCS_MEMORY_TYPE_CUDA, info.mem_type);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query(host.data(), len, &info));
    report("malloc: %s", info_string(info).c_str());
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_HOST, info.kind);
    EXPECT_EQ(UCS_MEMORY_TYPE_HOST, info.mem_type);

    /* SYNC_MEMOPS, as the md sets it on registered GPU memory */
    CUDA_EXPECT_STATUS(UCS_OK, uct_rc_gdr_cuda_set_sync_memops(dev));
    report("SYNC_MEMOPS on pool memory: %s",
           ucs_status_string(uct_rc_gdr_cuda_set_sync_memops(pool)));

    /* from a thread without a current context */
    std::thread([&]() {
        uct_rc_gdr_cuda_mem_info_t tinfo;
        uct_rc_gdr_cuda_ctx_h ctx = NULL;

        uct_rc_gdr_cuda_ctx_get_current(&ctx);
        report("thread without context (current %p):", (void*)ctx);
        CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query((char*)dev + 8, 8, &tinfo));
        report("  cuMemAlloc: %s", info_string(tinfo).c_str());
        EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_DEVICE, tinfo.kind);
        EXPECT_EQ(dev, tinfo.base_address);
        CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query((char*)pool + 8, 8, &tinfo));
        report("  cuMemAllocAsync: %s", info_string(tinfo).c_str());
        EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_POOL, tinfo.kind);
        if (dmabuf_supported()) {
            report_export("cuMemAlloc from the thread", (char*)dev + 0x1234,
                          100);
        }
    }).join();

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free_async(pool, stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_synchronize(stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_destroy(stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(managed));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_host_free(pinned));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(dev));
}

TEST_F(cuda_gpu, mem_detect_vmm)
{
    uct_rc_gdr_cuda_mem_info_t info;
    vmm_range vmm;

    if (!(m_attr.valid_mask & UCT_RC_GDR_CUDA_DEV_ATTR_VMM) ||
        !m_attr.vmm_supported) {
        GTEST_SKIP() << "device 0 has no virtual memory management";
    }

    CUDA_ASSERT_OK(vmm.create(0, 1));
    report("VMM granularity %zu", vmm.gran);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_query((char*)vmm.base + vmm.gran + 8,
                                             8, &info));
    report("VMM (second mapping): %s", info_string(info).c_str());
    EXPECT_EQ(UCT_RC_GDR_CUDA_MEM_DEVICE, info.kind);
    EXPECT_EQ(UCS_MEMORY_TYPE_CUDA, info.mem_type);
}

TEST_F(cuda_gpu, dmabuf_export)
{
    const size_t len = 4 << 20;
    uct_rc_gdr_cuda_stream_h stream;
    void *dev, *aligned, *pool, *managed, *pinned;
    size_t offset, length;
    double ns;
    int fd;

    if (!dmabuf_supported()) {
        GTEST_SKIP() << "device 0 does not report DMA_BUF_SUPPORTED";
    }

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_alloc(len, &dev));
    ASSERT_EQ(0u, (uintptr_t)dev % 4096);
    check_dmabuf_cases(dev, true);
    report_export("cuMemAlloc, last byte", (char*)dev + len - 1, 1);
    report_export("cuMemAlloc, whole allocation", dev, len);

    ns = ns_per_call(100, [&]() {
        uct_rc_gdr_cuda_dmabuf_export((char*)dev + 0x1234, 100, 4096, &fd,
                                      &offset, &aligned, &length);
        close(fd);
    });
    report("dmabuf export + close: %.1f us/call", ns / 1000);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_create(&stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_alloc_async(len, stream, &pool));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_synchronize(stream));
    report_export("cuMemAllocAsync memory", (char*)pool + 0x1234, 100);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_managed_alloc(len, &managed));
    report_export("cuMemAllocManaged memory", (char*)managed + 0x1234, 100);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_host_alloc(len, &pinned));
    report_export("cuMemHostAlloc memory", (char*)pinned + 0x1234, 100);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_host_free(pinned));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(managed));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free_async(pool, stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_synchronize(stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_destroy(stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(dev));
}

TEST_F(cuda_gpu, dmabuf_export_vmm_span)
{
    ucs_status_t status;
    size_t offset, length;
    void *aligned;
    vmm_range vmm;
    int fd;

    if (!dmabuf_supported() ||
        !(m_attr.valid_mask & UCT_RC_GDR_CUDA_DEV_ATTR_VMM) ||
        !m_attr.vmm_supported) {
        GTEST_SKIP() << "device 0 lacks DMA-BUF or VMM support";
    }

    CUDA_ASSERT_OK(vmm.create(0, 1));
    report_export("VMM, inside the first mapping", (char*)vmm.base + 0x1234,
                  100);

    /* across the boundary of the two physical allocations: either the whole
     * range or an error, never a range cut at the boundary */
    status = uct_rc_gdr_cuda_dmabuf_export((char*)vmm.base + vmm.gran - 0x800,
                                           0x1000, 4096, &fd, &offset,
                                           &aligned, &length);
    report("dmabuf export across two VMM mappings: %s",
           ucs_status_string(status));
    if (status == UCS_OK) {
        EXPECT_EQ(0x800u, offset);
        EXPECT_EQ(0x2000u, length);
        report("  offset 0x%zx length %zu, dma-buf size %lld", offset, length,
               (long long)fd_size(fd));
        EXPECT_GE(fd_size(fd), (off_t)length);
        close(fd);
    }

    report_export("VMM, both mappings whole", vmm.base, 2 * vmm.gran);
}

TEST_F(cuda_gpu, buffer_id_reuse)
{
    const size_t len = 2 << 20;
    uct_rc_gdr_cuda_stream_h stream;
    uint64_t id1, id2;
    std::vector<void*> held;
    void *p1, *p2 = NULL;
    int tries;

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_alloc(len, &p1));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_buffer_id(p1, &id1));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(p1));
    CUDA_EXPECT_STATUS(UCS_ERR_NO_ELEM, uct_rc_gdr_cuda_buffer_id(p1, &id2));

    /* the driver usually hands the address out again at once */
    for (tries = 0; tries < 16; ++tries) {
        CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_alloc(len, &p2));
        if (p2 == p1) {
            break;
        }
        held.push_back(p2);
    }

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_buffer_id(p2, &id2));
    report("cuMemAlloc buffer id %llu, freed, %s after %d allocation(s): "
           "buffer id %llu", (unsigned long long)id1,
           (p2 == p1) ? "same address again" : "address NOT reused",
           tries + 1, (unsigned long long)id2);
    EXPECT_NE(id1, id2);
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(p2));
    for (void *p : held) {
        CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(p));
    }

    /* stream-ordered pool: a free and an allocation that reuse the range */
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_create(&stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_alloc_async(len, stream, &p1));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_synchronize(stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_buffer_id(p1, &id1));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free_async(p1, stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_alloc_async(len, stream, &p2));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_synchronize(stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_buffer_id(p2, &id2));
    report("cuMemAllocAsync buffer id %llu, freed, %s: buffer id %llu",
           (unsigned long long)id1,
           (p2 == p1) ? "same address again" : "another address",
           (unsigned long long)id2);
    if (p2 == p1) {
        EXPECT_NE(id1, id2) << "pool reuse keeps the buffer id: the cache "
                               "cannot rely on it for pool memory";
    }
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free_async(p2, stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_synchronize(stream));
    CUDA_ASSERT_OK(uct_rc_gdr_cuda_stream_destroy(stream));
}

TEST_F(cuda_gpu, query_timing)
{
    std::vector<char> host(4096);
    uct_rc_gdr_cuda_mem_info_t info;
    uint64_t id;
    double ns;
    void *dev;

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_alloc(1 << 20, &dev));
    ns_per_call(10000, [&]() { uct_rc_gdr_cuda_buffer_id(dev, &id); });

    ns = ns_per_call(1000000, [&]() { uct_rc_gdr_cuda_buffer_id(dev, &id); });
    report("buffer id query, device memory (cache hit check): %.1f ns/call",
           ns);
    RecordProperty("buffer_id_ns", (int)ns);

    ns = ns_per_call(1000000, [&]() {
        uct_rc_gdr_cuda_buffer_id(host.data(), &id);
    });
    report("buffer id query, host memory (not CUDA): %.1f ns/call", ns);

    ns = ns_per_call(100000, [&]() {
        uct_rc_gdr_cuda_mem_query((char*)dev + 64, 64, &info);
    });
    report("mem_query, device memory: %.1f ns/call", ns);

    ns = ns_per_call(100000, [&]() {
        uct_rc_gdr_cuda_mem_query(host.data(), 64, &info);
    });
    report("mem_query, host memory: %.1f ns/call", ns);

    CUDA_ASSERT_OK(uct_rc_gdr_cuda_mem_free(dev));
}

} // namespace
