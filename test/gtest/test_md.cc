/**
 * Unit tests of the rc_gdr memory domain: the built module, loaded with
 * dlopen, over the stand-in verbs device of test/mocks (no RDMA here) and,
 * for GPU memory, the stand-in CUDA driver that test_cuda.cc sets up.
 *
 * See file LICENSE for terms.
 */

#include "test_log.h"
#include "test_sysfs.h"
#include "cuda_alloc.h"

#include <uct/ib_gdr/rc_gdr_addr.h>
#include <uct/ib_gdr/rc_gdr_cuda.h>
#include <uct/ib_gdr/rc_gdr_glue.h>
#include <ucm/api/ucm.h>
#include <uct/api/uct.h>
#include <ucs/async/async.h>
#include <ucs/sys/topo/base/topo.h>
#include <infiniband/verbs.h>
#include "../mocks/mock_verbs.h"
#include "../mocks/mock_random.h"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace {

/* The md's counters (rc_gdr_md.h), as far as these tests read them */
typedef struct {
    uint64_t size, host_regs, dmabuf_regs, peermem_regs, bounce_regs,
             cache_hits, cache_entries, invalidations, num_gpus, emulated_gpu,
             cache_misses, cache_kept, cache_evictions, deregs, host_cache,
             gpu_cache;
    uint64_t fallbacks[3]; /* uct_rc_gdr_md_reg_cause_t */
    uint64_t limit_retries;
} md_stats_t;

/* uct_rc_gdr_md_reg_cause_t */
const int CAUSE_LIMIT   = 0;
const int CAUSE_REFUSED = 1;

/* What every registration adds by default (UCX_RC_GDR_PCI_RELAXED_ORDERING
 * auto) on the stand-in device, which takes it */
const int RO = IBV_ACCESS_RELAXED_ORDERING;

const unsigned CACHE_SHARE  = 1; /* UCT_RC_GDR_RCACHE_GET_FLAG_SHARE */
const unsigned CACHE_RETAIN = 2; /* UCT_RC_GDR_RCACHE_GET_FLAG_RETAIN */

typedef ucs_status_t (*stats_query_func_t)(uct_md_h md, md_stats_t *stats);
typedef ucs_status_t (*bounce_target_func_t)(uct_md_h md, uint64_t token,
                                             uint64_t address, size_t length,
                                             uint64_t expect_stamp, int *gpu_p,
                                             uint64_t *stamp_p);
typedef ucs_status_t (*bounce_hold_func_t)(uct_md_h md, uint64_t token,
                                           uint64_t address, size_t length,
                                           uint64_t expect_stamp, int *gpu_p,
                                           uint64_t *stamp_p);
typedef void (*bounce_release_func_t)(uct_md_h md);
typedef ucs_status_t (*reg_internal_func_t)(uct_md_h md, void *address,
                                            size_t length, struct ibv_mr **mr_p);

/* The module under test: the build's, or $RC_GDR_TEST_MODULE */
const char *module_path()
{
    const char *env = getenv("RC_GDR_TEST_MODULE");

    return ((env != NULL) && (*env != '\0')) ? env :
           RC_GDR_TEST_BUILDDIR "/../src/uct/ib_gdr/.libs/libuct_ib_gdr.so";
}

struct module {
    void                 *handle        = NULL;
    uct_component_h      component      = NULL;
    stats_query_func_t   stats_query    = NULL;
    bounce_target_func_t bounce_target  = NULL;
    reg_internal_func_t  reg_internal   = NULL;
    bounce_hold_func_t   bounce_hold    = NULL;
    bounce_release_func_t bounce_release = NULL;
    std::string          error;

    module()
    {
        handle = dlopen(module_path(), RTLD_NOW | RTLD_LOCAL);
        if (handle == NULL) {
            error = dlerror();
            return;
        }

        component     = (uct_component_h)dlsym(handle,
                                               "uct_rc_gdr_component");
        stats_query   = (stats_query_func_t)dlsym(handle,
                                                  "uct_rc_gdr_md_stats_query");
        bounce_target = (bounce_target_func_t)dlsym(
                handle, "uct_rc_gdr_md_bounce_target");
        reg_internal  = (reg_internal_func_t)dlsym(
                handle, "uct_rc_gdr_md_reg_internal");
        /* Checked by the tests that use them */
        bounce_hold    = (bounce_hold_func_t)dlsym(
                handle, "uct_rc_gdr_md_bounce_target_hold");
        bounce_release = (bounce_release_func_t)dlsym(
                handle, "uct_rc_gdr_md_bounce_target_release");
        if ((component == NULL) || (stats_query == NULL) ||
            (bounce_target == NULL) || (reg_internal == NULL)) {
            error = "symbols missing in " + std::string(module_path());
        }
    }
};

module &the_module()
{
    static module m;
    return m;
}

} // namespace


class md : public ::testing::Test {
protected:
    virtual void SetUp()
    {
        ASSERT_TRUE(the_module().error.empty()) << the_module().error;
        m_events = ucm_global_opts.enable_events;
    }

    virtual void TearDown()
    {
        close();
        ucm_global_opts.enable_events = m_events;
        for (const std::string &name : m_env) {
            unsetenv(name.c_str());
        }
        for (int ordinal : m_ctx_held) {
            uct_rc_gdr_cuda_ctx_release(ordinal);
        }

        /* Nothing the md registered outlives it */
        EXPECT_EQ(0u, mock_verbs_live_count());
    }

    void set(const char *knob, const char *value)
    {
        std::string name = std::string("UCX_RC_GDR_") + knob;

        setenv(name.c_str(), value, 1);
        m_env.push_back(name);
    }

    ucs_status_t open()
    {
        mock_verbs_reset();
        return open_keep_mock();
    }

    /* open() without resetting the stand-in's knobs first */
    ucs_status_t open_keep_mock()
    {
        uct_md_config_t *config;
        ucs_status_t status;

        status = uct_md_config_read(the_module().component, NULL, NULL,
                                    &config);
        if (status != UCS_OK) {
            return status;
        }

        status = uct_md_open(the_module().component, MOCK_VERBS_DEVICE_NAME,
                             config, &m_md);
        uct_config_release(config);
        if (status != UCS_OK) {
            m_md = NULL;
            return status;
        }

        /* The probe's test registrations are not the tests' */
        m_regs0 = mock_verbs_reg_count();
        return UCS_OK;
    }

    void close()
    {
        if (m_md != NULL) {
            uct_md_close(m_md);
            m_md = NULL;
        }
    }

    md_stats_t stats()
    {
        md_stats_t s;

        memset(&s, 0, sizeof(s));
        s.size = sizeof(s);
        EXPECT_EQ(UCS_OK, the_module().stats_query(m_md, &s));
        return s;
    }

    unsigned nic_regs()
    {
        return mock_verbs_reg_count() - m_regs0;
    }

    uct_mem_h reg(void *address, size_t length,
                  unsigned flags = UCT_MD_MEM_ACCESS_ALL)
    {
        uct_mem_h memh = UCT_MEM_HANDLE_NULL;

        EXPECT_EQ(UCS_OK, uct_md_mem_reg(m_md, address, length, flags,
                                         &memh));
        EXPECT_TRUE(memh != UCT_MEM_HANDLE_NULL);
        return memh;
    }

    void dereg(uct_mem_h memh)
    {
        EXPECT_EQ(UCS_OK, uct_md_mem_dereg(m_md, memh));
    }

    /* What the rkey of a registration carries: NIC key or bounce token */
    uct_rc_gdr_rkey_t rkey(uct_mem_h memh)
    {
        std::vector<char> buffer(uct_rc_gdr_rkey_packed_size());
        uct_rc_gdr_rkey_t rkey;

        memset(&rkey, 0, sizeof(rkey));
        EXPECT_EQ(UCS_OK, uct_md_mkey_pack(m_md, memh, buffer.data()));
        EXPECT_EQ(UCS_OK, uct_rc_gdr_rkey_unpack_buffer(buffer.data(),
                                                        buffer.size(),
                                                        &rkey));
        return rkey;
    }

    /* The bounce token a peer names for a registration */
    uint64_t token_of(uct_mem_h memh)
    {
        uct_rc_gdr_rkey_t key = rkey(memh);

        return uct_rc_gdr_rkey_token(&key);
    }

    ucs_status_t bounce_target(uint64_t token, const void *address,
                               size_t length, uint64_t expect_stamp = 0,
                               uint64_t *stamp_p = NULL)
    {
        uint64_t stamp = 0;
        int gpu        = -2;

        return the_module().bounce_target(m_md, token, (uintptr_t)address,
                                          length, expect_stamp, &gpu,
                                          (stamp_p == NULL) ? &stamp :
                                                              stamp_p);
    }

    /* Page-aligned host memory of its own mapping */
    void *map(size_t length)
    {
        void *p = mmap(NULL, length, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

        EXPECT_NE(MAP_FAILED, p);
        return p;
    }

    /* A bounce registration of GPU 1's memory, held as a copy holds it */
    struct bounce_target_t {
        char      *gpu;
        uct_mem_h memh;
        uint64_t  token;
    };

    /* Opens an md whose GPU registrations take the bounce lane, registers
     * @a length bytes of GPU 1 and holds them for a copy (the test releases
     * them). False when the test is skipped or failed. */
    bool open_bounce_target(size_t length, bounce_target_t *target)
    {
        uint64_t stamp = 0;
        int ordinal    = -1;

        if (!emulated_gpu()) {
            [] { GTEST_SKIP() << "needs the stand-in CUDA driver"; }();
            return false;
        }
        if ((the_module().bounce_hold == NULL) ||
            (the_module().bounce_release == NULL)) {
            ADD_FAILURE() << "the module cannot hold a bounce target across "
                             "a copy";
            return false;
        }

        set("REG_METHODS", "dmabuf"); /* refused by the stand-in: bounce */
        if (open() != UCS_OK) {
            ADD_FAILURE() << "md open";
            return false;
        }
        if (!ucm_global_opts.enable_events) {
            [] { GTEST_SKIP() << "memory events are off in this process"; }();
            return false;
        }

        uct_rc_gdr_rkey_t key;
        target->gpu   = (char*)gpu_alloc(1, length);
        target->memh  = reg(target->gpu, length);
        key           = rkey(target->memh);
        target->token = uct_rc_gdr_rkey_token(&key);
        if ((the_module().bounce_hold(m_md, target->token,
                                      (uintptr_t)target->gpu, length, 0,
                                      &ordinal, &stamp) != UCS_OK) ||
            (ordinal != 1)) {
            ADD_FAILURE() << "no hold on the bounce target (GPU " << ordinal
                          << ")";
            return false;
        }
        return true;
    }

    /* A free on a thread of its own: UCM's unmap event for the range,
     * whose hooks run there; done() once they have returned */
    class unmap_on_thread {
    public:
        unmap_on_thread(void *address, size_t length) :
            m_address(address), m_length(length), m_done(0)
        {
            EXPECT_EQ(0, pthread_create(&m_thread, NULL, run, this));
        }

        bool done() const
        {
            return __atomic_load_n(&m_done, __ATOMIC_ACQUIRE) != 0;
        }

        void join()
        {
            pthread_join(m_thread, NULL);
            EXPECT_TRUE(done());
        }

    private:
        static void *run(void *arg)
        {
            unmap_on_thread *self = (unmap_on_thread*)arg;

            ucm_vm_munmap(self->m_address, self->m_length);
            __atomic_store_n(&self->m_done, 1, __ATOMIC_RELEASE);
            return NULL;
        }

        void      *m_address;
        size_t    m_length;
        int       m_done;
        pthread_t m_thread;
    };

    /* Whether the stand-in CUDA driver serves this process */
    static bool emulated_gpu()
    {
        uct_rc_gdr_cuda_driver_info_t info;

        return (uct_rc_gdr_cuda_init() == UCS_OK) &&
               (uct_rc_gdr_cuda_driver_info(&info) == UCS_OK) &&
               info.emulated;
    }

    /* "GPU" memory of one stand-in device */
    void *gpu_alloc(int ordinal, size_t length)
    {
        uct_rc_gdr_cuda_ctx_h ctx, prev = NULL;
        void *p = NULL;

        EXPECT_EQ(UCS_OK, uct_rc_gdr_cuda_ctx_get_current(&prev));
        EXPECT_EQ(UCS_OK, uct_rc_gdr_cuda_ctx_retain(ordinal, &ctx));
        EXPECT_EQ(UCS_OK, uct_rc_gdr_cuda_ctx_set_current(ctx));
        EXPECT_EQ(UCS_OK, uct_rc_gdr_cuda_mem_alloc(length, &p));
        uct_rc_gdr_cuda_ctx_set_current(prev);
        /* Held until TearDown: a real driver frees every allocation of a
         * primary context when its last reference goes */
        m_ctx_held.push_back(ordinal);
        return p;
    }

    uct_md_h                 m_md    = NULL;
    unsigned                 m_regs0 = 0;
    int                      m_events;
    std::vector<std::string> m_env;
    std::vector<int>         m_ctx_held; /* primary contexts gpu_alloc holds */
};


/* The point of the cache: UCP registers a rendezvous buffer per message;
   the NIC registers it once */
TEST_F(md, host_registers_once) {
    ASSERT_EQ(UCS_OK, open());
    if (!ucm_global_opts.enable_events) {
        GTEST_SKIP() << "memory events are off in this process";
    }

    const size_t length = 1 << 20;
    char *buf           = (char*)map(length);

    /* The same buffer, or bytes of it, each time */
    for (unsigned i = 0; i < 100; ++i) {
        size_t offset  = (i % 7) * 64;
        uct_mem_h memh = reg(buf + offset, length - offset);
        dereg(memh);
    }

    md_stats_t s = stats();
    EXPECT_EQ(1u, nic_regs());
    EXPECT_EQ(1u, s.host_regs);
    EXPECT_EQ(99u, s.cache_hits);
    EXPECT_EQ(1u, s.cache_kept);
    EXPECT_EQ(CACHE_SHARE | CACHE_RETAIN, s.host_cache);
    EXPECT_EQ(1u, mock_verbs_live_count());

    /* Unmapped: the UCM event releases the kept registration at once */
    munmap(buf, length);
    s = stats();
    EXPECT_EQ(0u, mock_verbs_live_count());
    EXPECT_EQ(1u, s.invalidations);
    EXPECT_EQ(0u, s.cache_kept);
    EXPECT_EQ(0u, s.cache_entries);
}

/* Kept registrations beyond UCX_RC_GDR_RCACHE_MAX_REGIONS go, oldest
   first; those still registered stay */
TEST_F(md, kept_regions_limit) {
    set("RCACHE_MAX_REGIONS", "2");
    ASSERT_EQ(UCS_OK, open());
    if (!ucm_global_opts.enable_events) {
        GTEST_SKIP() << "memory events are off in this process";
    }

    const size_t length = 64 * 1024;
    char *buf           = (char*)map(4 * length);
    mock_verbs_mr_t mr;

    uct_mem_h held = reg(buf + 3 * length, length);
    for (unsigned i = 0; i < 3; ++i) {
        dereg(reg(buf + i * length, length));
    }

    /* Three entries at most two: the oldest kept one went */
    EXPECT_FALSE(mock_verbs_find((uintptr_t)buf, &mr));
    EXPECT_FALSE(mock_verbs_find((uintptr_t)buf + length, &mr));
    EXPECT_TRUE(mock_verbs_find((uintptr_t)buf + 2 * length, &mr));
    EXPECT_TRUE(mock_verbs_find((uintptr_t)buf + 3 * length, &mr));
    EXPECT_EQ(2u, stats().cache_evictions);

    dereg(held);
    close();
    munmap(buf, 4 * length);
}

/*
 * A deregistration is good once. Deregistering A, registering B at the same
 * address (which reuses A's cached region and, likely, its handle's slot)
 * and deregistering A again is refused, and B keeps its registration.
 */
TEST_F(md, stale_dereg_refused) {
    ASSERT_EQ(UCS_OK, open());

    const size_t length = 8192;
    char *buf           = (char*)map(length);
    mock_verbs_mr_t mr;

    uct_mem_h a = reg(buf, length);
    dereg(a);
    uct_mem_h b = reg(buf, length);
    uct_rc_gdr_rkey_t b_key = rkey(b);

    {
        log_capture capture;

        EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_md_mem_dereg(m_md, a));
        EXPECT_TRUE(captured_log_has("not live")) << captured_log.size();
    }

    /* B intact: its NIC registration, its key, its own deregistration */
    EXPECT_TRUE(mock_verbs_find((uintptr_t)buf, &mr));
    EXPECT_EQ(b_key.rkey, rkey(b).rkey);
    EXPECT_EQ(b_key.rkey, mr.rkey);
    dereg(b);

    {
        log_capture capture;

        EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_md_mem_dereg(m_md, b));
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_md_mem_dereg(m_md, (uct_mem_h)0x12345));
    }

    close();
    munmap(buf, length);
}

/* Advice: WILLNEED inside a live registration holds (its pages are
   pinned); outside it, or on a stale handle, it is refused */
TEST_F(md, mem_advise) {
    ASSERT_EQ(UCS_OK, open());

    const size_t length = 3 * 4096;
    char *buf           = (char*)map(length);
    uct_md_attr_t attr;

    ASSERT_EQ(UCS_OK, uct_md_query(m_md, &attr));
    EXPECT_TRUE(attr.cap.flags & UCT_MD_FLAG_ADVISE);

    uct_mem_h memh = reg(buf + 100, 8000);
    EXPECT_EQ(UCS_OK, uct_md_mem_advise(m_md, memh, buf + 107, 4096,
                                        UCT_MADV_WILLNEED));
    EXPECT_EQ(UCS_OK, uct_md_mem_advise(m_md, memh, buf + 100, 8000,
                                        UCT_MADV_WILLNEED));
    {
        log_capture capture;

        /* the page around it is not what was registered */
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_md_mem_advise(m_md, memh, buf, 200, UCT_MADV_WILLNEED));
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_md_mem_advise(m_md, memh, buf + 100, 8001,
                                    UCT_MADV_WILLNEED));
    }

    dereg(memh);
    {
        log_capture capture;

        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_md_mem_advise(m_md, memh, buf + 107, 64,
                                    UCT_MADV_WILLNEED));
        EXPECT_TRUE(captured_log_has("not registered"));
    }

    close();
    munmap(buf, length);
}

/*
 * A peer names a bounce registration by its token: only the bytes that
 * registration asked for are served, not the pages around them, and not the
 * larger region a cache hit found.
 */
TEST_F(md, bounce_target_exact_bytes) {
    if (!emulated_gpu()) {
        GTEST_SKIP() << "needs the stand-in CUDA driver";
    }

    /* No mechanism on this NIC (the stand-in refuses DMA-BUF): bounce */
    set("REG_METHODS", "dmabuf");
    ASSERT_EQ(UCS_OK, open());

    const size_t alloc = 64 * 1024;
    char *gpu          = (char*)gpu_alloc(1, alloc);
    char *x            = gpu + 0x200;
    ASSERT_TRUE(gpu != NULL);

    uct_mem_h small = reg(x, 256);
    uct_rc_gdr_rkey_t key = rkey(small);
    EXPECT_FALSE(key.flags & UCT_RC_GDR_RKEY_FLAG_NIC);
    EXPECT_EQ(1u, stats().bounce_regs);

    {
        log_capture capture;

        EXPECT_EQ(UCS_OK, bounce_target(uct_rc_gdr_rkey_token(&key), x, 256));
        EXPECT_EQ(UCS_OK, bounce_target(uct_rc_gdr_rkey_token(&key), x + 255, 1));
        EXPECT_EQ(UCS_OK, bounce_target(uct_rc_gdr_rkey_token(&key), x + 256, 0));
        EXPECT_EQ(UCS_ERR_INVALID_ADDR, bounce_target(uct_rc_gdr_rkey_token(&key), x - 1, 1));
        EXPECT_EQ(UCS_ERR_INVALID_ADDR, bounce_target(uct_rc_gdr_rkey_token(&key), x + 256, 1));
        EXPECT_EQ(UCS_ERR_INVALID_ADDR, bounce_target(uct_rc_gdr_rkey_token(&key), x, 257));
        EXPECT_EQ(UCS_ERR_INVALID_ADDR, bounce_target(uct_rc_gdr_rkey_token(&key), gpu, 1));
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  bounce_target(uct_rc_gdr_rkey_token(&key), x + 1, SIZE_MAX));
        EXPECT_TRUE(captured_log_has("outside the registration"));
    }

    /* The whole allocation, then a part of it: the part hits the whole
       one's region, but its token still covers the part alone */
    uct_mem_h whole = reg(gpu, alloc);
    uct_mem_h part  = reg(gpu + 0x8000, 100);
    EXPECT_EQ(2u, stats().bounce_regs);
    uct_rc_gdr_rkey_t whole_key = rkey(whole);
    uct_rc_gdr_rkey_t part_key  = rkey(part);
    EXPECT_NE(uct_rc_gdr_rkey_token(&whole_key),
              uct_rc_gdr_rkey_token(&part_key));
    EXPECT_NE(uct_rc_gdr_rkey_token(&key), uct_rc_gdr_rkey_token(&part_key));
    {
        log_capture capture;

        EXPECT_EQ(UCS_OK, bounce_target(uct_rc_gdr_rkey_token(&whole_key), gpu, alloc));
        EXPECT_EQ(UCS_OK, bounce_target(uct_rc_gdr_rkey_token(&part_key), gpu + 0x8000, 100));
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  bounce_target(uct_rc_gdr_rkey_token(&part_key), gpu, 1));
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  bounce_target(uct_rc_gdr_rkey_token(&part_key), gpu + 0x8000 + 100, 1));
    }

    /* A deregistered registration's token names nothing */
    dereg(part);
    {
        log_capture capture;

        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  bounce_target(uct_rc_gdr_rkey_token(&part_key), gpu + 0x8000, 1));
        EXPECT_TRUE(captured_log_has("an unknown"));
    }

    dereg(whole);
    dereg(small);
    close();
    uct_rc_gdr_cuda_mem_free(gpu);
}

/*
 * A peer may repeat a refused request at will: the first refusal of each
 * kind is said at error level, the others only at debug level, so that a
 * flood of guessed tokens or ranges cannot flood the log.
 */
TEST_F(md, bounce_refusals_logged_once_each) {
    if (!emulated_gpu()) {
        GTEST_SKIP() << "needs the stand-in CUDA driver";
    }

    set("REG_METHODS", "dmabuf");
    ASSERT_EQ(UCS_OK, open());

    const size_t alloc = 64 * 1024;
    const unsigned n   = 100;
    char *gpu          = (char*)gpu_alloc(1, alloc);
    ASSERT_TRUE(gpu != NULL);

    uct_mem_h memh = reg(gpu + 0x200, 256);
    uint64_t token = token_of(memh);

    {
        log_capture capture;

        for (unsigned i = 0; i < n; ++i) {
            EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                      bounce_target(token ^ (i + 1), gpu + 0x200, 1));
            EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                      bounce_target(token, gpu + 0x200 + 256 + i, 1));
        }
        EXPECT_EQ(2u, captured_log_count("refused"))
            << n << " unknown tokens and " << n << " ranges outside";
        EXPECT_EQ(1u, captured_log_count("an unknown"));
        EXPECT_EQ(1u, captured_log_count("outside the registration"));
        EXPECT_EQ(2u, captured_log_count("logged at debug level"));
    }

    {
        /* the others are still there for who asks for them */
        log_capture capture(UCS_LOG_LEVEL_DEBUG);

        for (unsigned i = 0; i < 10; ++i) {
            EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                      bounce_target(token ^ (i + 1), gpu + 0x200, 1));
        }
        EXPECT_EQ(10u, captured_log_count("an unknown"));
    }

    dereg(memh);
    close();
    uct_rc_gdr_cuda_mem_free(gpu);
}

/*
 * Tokens are drawn at random, not counted: a peer holding some cannot name
 * the next registration's; and a transfer served over time re-checks each
 * part against the registration its first check found (its stamp): after
 * deregistration, or for a token issued again, it is refused.
 */
TEST_F(md, bounce_tokens_random_and_bound_to_registration) {
    if (!emulated_gpu()) {
        GTEST_SKIP() << "needs the stand-in CUDA driver";
    }

    set("REG_METHODS", "dmabuf");
    ASSERT_EQ(UCS_OK, open());

    const int count    = 16;
    const size_t alloc = 64 * 1024;
    char *gpu          = (char*)gpu_alloc(1, alloc);
    ASSERT_TRUE(gpu != NULL);

    std::vector<uct_mem_h> memhs;
    std::vector<uint64_t> tokens;
    uint32_t high_bits = 0;
    for (int i = 0; i < count; ++i) {
        memhs.push_back(reg(gpu + i * 256, 256));
        uct_rc_gdr_rkey_t key = rkey(memhs.back());
        tokens.push_back(uct_rc_gdr_rkey_token(&key));
        high_bits |= key.token_hi;
        /* the token survives the uct_rkey_t a peer's UCT carries */
        uct_rc_gdr_rkey_t back = {};
        ASSERT_EQ(UCS_OK, uct_rc_gdr_rkey_from_uct(uct_rc_gdr_rkey_to_uct(&key),
                                                   &back));
        EXPECT_EQ(tokens.back(), uct_rc_gdr_rkey_token(&back));
    }

    /* 16 draws of 55 bits: no two neighbours a small step apart (a counter
     * gives 15 steps of 1; chance of one such step at random ~ 2^-40), and
     * the bits above the key used */
    int small_steps = 0;
    for (int i = 1; i < count; ++i) {
        uint64_t step = (tokens[i] > tokens[i - 1]) ?
                        tokens[i] - tokens[i - 1] : tokens[i - 1] - tokens[i];
        small_steps += (step < (1ull << 20));
    }
    EXPECT_EQ(0, small_steps);
    EXPECT_NE(0u, high_bits);

    uint64_t stamp = 0, stamp2 = 0;
    EXPECT_EQ(UCS_OK, bounce_target(tokens[0], gpu, 256, 0, &stamp));
    EXPECT_NE(0u, stamp);
    EXPECT_EQ(UCS_OK, bounce_target(tokens[0], gpu + 128, 128, stamp));
    EXPECT_EQ(UCS_OK, bounce_target(tokens[1], gpu + 256, 1, 0, &stamp2));
    EXPECT_NE(stamp, stamp2);
    {
        log_capture capture;

        /* another registration's stamp: not the one this part belongs to */
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  bounce_target(tokens[0], gpu, 1, stamp2));
        EXPECT_TRUE(captured_log_has("reissued"));
    }

    dereg(memhs[0]);
    {
        log_capture capture;

        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  bounce_target(tokens[0], gpu + 128, 128, stamp));
    }

    for (int i = 1; i < count; ++i) {
        dereg(memhs[i]);
    }
    close();
    uct_rc_gdr_cuda_mem_free(gpu);
}

/*
 * Without memory events (UCX_MEM_EVENTS=no, valgrind) the md still opens,
 * host memory uncached, GPU memory cached on its buffer IDs, and says so in
 * one line; UCX_RC_GDR_RCACHE=yes refuses to open instead, =no caches
 * nothing.
 */
TEST_F(md, opens_without_memory_events) {
    const size_t length = 16384;
    char *buf           = (char*)map(length);

    ucm_global_opts.enable_events = 0;
    {
        log_capture capture(UCS_LOG_LEVEL_DIAG);

        ASSERT_EQ(UCS_OK, open());
        EXPECT_TRUE(captured_log_has("registration cache: host memory "
                                           "uncached: no memory unmap events"))
                << (captured_log.empty() ? "" : captured_log[0]);
    }

    /* Each host registration its own, released at its deregistration */
    uct_mem_h a = reg(buf, length);
    uct_mem_h b = reg(buf, length);
    EXPECT_EQ(2u, nic_regs());
    dereg(a);
    dereg(b);
    EXPECT_EQ(0u, mock_verbs_live_count());
    EXPECT_EQ(0u, stats().host_cache);

    if (emulated_gpu()) {
        char *gpu = (char*)gpu_alloc(1, length);

        EXPECT_EQ(CACHE_SHARE | CACHE_RETAIN, stats().gpu_cache);
        dereg(reg(gpu, length));
        dereg(reg(gpu, length));
        EXPECT_EQ(1u, stats().cache_hits);
        close();
        uct_rc_gdr_cuda_mem_free(gpu);
    }
    close();

    set("RCACHE", "yes");
    {
        log_capture capture;

        EXPECT_NE(UCS_OK, open());
        EXPECT_TRUE(captured_log_has("UCX_RC_GDR_RCACHE=yes"));
    }

    set("RCACHE", "no");
    ASSERT_EQ(UCS_OK, open());
    ucm_global_opts.enable_events = m_events;
    dereg(reg(buf, length));
    dereg(reg(buf, length));
    EXPECT_EQ(2u, nic_regs());
    EXPECT_EQ(0u, stats().host_cache);
    EXPECT_EQ(0u, stats().gpu_cache);
    close();
    munmap(buf, length);
}

/*
 * What the md tells a cache above it (UCP's) it may keep: CUDA memory only
 * where free events release rc_gdr's registration of freed memory; without
 * them a registration UCP keeps would leave freed GPU memory reachable by
 * peers. Host memory where memory events exist.
 */
TEST_F(md, cache_offered_only_where_invalidated) {
    if (!emulated_gpu()) {
        GTEST_SKIP() << "needs the stand-in CUDA driver";
    }

    const uint64_t cuda = UCS_BIT(UCS_MEMORY_TYPE_CUDA) |
                          UCS_BIT(UCS_MEMORY_TYPE_CUDA_MANAGED);
    typedef void (*caps_func_t)(uct_md_h, uct_rc_gdr_md_caps_t*);
    caps_func_t caps_query = (caps_func_t)dlsym(the_module().handle,
                                                "uct_rc_gdr_md_caps");
    uct_rc_gdr_md_caps_t caps;
    bool hooks;

    ASSERT_TRUE(caps_query != NULL);

    /* No CUDA free events: UCX_MEM_EVENTS=no, or the cache off */
    ucm_global_opts.enable_events = 0;
    ASSERT_EQ(UCS_OK, open());
    caps_query(m_md, &caps);
    EXPECT_TRUE(caps.reg_mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
    EXPECT_EQ(0u, caps.cache_mem_types & cuda);
    EXPECT_EQ(0u, caps.cache_mem_types & UCS_BIT(UCS_MEMORY_TYPE_HOST));
    close();
    ucm_global_opts.enable_events = m_events;

    set("RCACHE", "no");
    ASSERT_EQ(UCS_OK, open());
    caps_query(m_md, &caps);
    EXPECT_EQ(0u, caps.cache_mem_types & cuda);
    close();
    unsetenv("UCX_RC_GDR_RCACHE");

    /* With them, CUDA memory may be cached */
    {
        log_capture capture(UCS_LOG_LEVEL_DEBUG);

        ASSERT_EQ(UCS_OK, open());
        hooks = captured_log_has("cached by buffer ID and free hooks");
    }
    caps_query(m_md, &caps);
    EXPECT_EQ(hooks ? cuda : 0, caps.cache_mem_types & cuda);
    close();
}

/*
 * A bounce token is all that keeps a peer out of other memory: when the
 * kernel's generator fails, the registration that needs one fails, saying
 * why, instead of drawing a guessable token.
 */
TEST_F(md, token_needs_kernel_random) {
    if (!emulated_gpu()) {
        GTEST_SKIP() << "needs the stand-in CUDA driver";
    }

    set("REG_METHODS", "dmabuf"); /* the stand-in NIC refuses: bounce */
    ASSERT_EQ(UCS_OK, open());

    const size_t length = 64 * 1024;
    char *gpu           = (char*)gpu_alloc(1, length);
    uct_mem_h memh      = UCT_MEM_HANDLE_NULL;
    unsigned calls      = mock_random_calls();

    mock_random_fail(ENOSYS);
    {
        log_capture capture;

        EXPECT_NE(UCS_OK, uct_md_mem_reg(m_md, gpu, length,
                                         UCT_MD_MEM_ACCESS_ALL, &memh));
        EXPECT_TRUE(captured_log_has("getrandom() failed")) <<
                captured_log.size();
    }
    mock_random_fail(0);
    EXPECT_GT(mock_random_calls(), calls); /* the stand-in was asked */

    memh = reg(gpu, length);
    EXPECT_NE(0u, token_of(memh));
    dereg(memh);
    close();
    uct_rc_gdr_cuda_mem_free(gpu);
}

/*
 * Host memory gets all access whatever its registration asks for, as UCX's
 * IB md gives: UCP 1.13-1.16 reuses a registration made for a local read
 * for a peer's remote read without asking the md again.
 */
TEST_F(md, host_access_all_whatever_asked) {
    ASSERT_EQ(UCS_OK, open());

    const unsigned asked[] = {
        UCT_MD_MEM_ACCESS_LOCAL_READ, UCT_MD_MEM_ACCESS_LOCAL_WRITE,
        UCT_MD_MEM_ACCESS_REMOTE_PUT, UCT_MD_MEM_ACCESS_REMOTE_GET,
        UCT_MD_MEM_ACCESS_RMA, UCT_MD_MEM_ACCESS_ALL
    };
    const int all       = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    const size_t length = 4096;
    mock_verbs_mr_t mr;

    for (unsigned flags : asked) {
        char *buf      = (char*)map(length);
        uct_mem_h memh = reg(buf, length, flags);

        ASSERT_TRUE(mock_verbs_find((uintptr_t)buf, &mr)) << flags;
        EXPECT_EQ(all | RO, mr.access) << std::hex << flags;
        EXPECT_EQ(UCT_RC_GDR_RKEY_FLAG_NIC, rkey(memh).flags)
                << std::hex << flags;
        dereg(memh);
        munmap(buf, length);
    }

    /* One registration serves a local read and a later remote get, where
     * the md caches (memory events on) */
    if (!ucm_global_opts.enable_events) {
        return;
    }
    char *buf   = (char*)map(length);
    uct_mem_h r = reg(buf, length, UCT_MD_MEM_ACCESS_LOCAL_READ);
    uct_mem_h g = reg(buf, length, UCT_MD_MEM_ACCESS_REMOTE_GET);
    EXPECT_EQ(rkey(r).rkey, rkey(g).rkey);
    dereg(r);
    dereg(g);
    munmap(buf, length);
}


/* Staging buffers are only ever touched by the local NIC */
TEST_F(md, internal_buffers_local_write) {
    ASSERT_EQ(UCS_OK, open());

    const size_t length = 65536;
    char *buf           = (char*)map(length);
    struct ibv_mr *ibmr = NULL;
    mock_verbs_mr_t mr;

    ASSERT_EQ(UCS_OK, the_module().reg_internal(m_md, buf, length, &ibmr));
    ASSERT_TRUE(mock_verbs_find((uintptr_t)buf, &mr));
    EXPECT_EQ(IBV_ACCESS_LOCAL_WRITE | RO, mr.access);
    EXPECT_EQ(0, ibv_dereg_mr(ibmr));
    munmap(buf, length);
}

/*
 * The direction policy is the NIC's too: with UCX_RC_GDR_NIC_READS_GPU=no a
 * GPU registration has neither remote read nor remote atomic. Writes into a
 * GPU that needs a read-flush then take the bounce lane as well.
 */
TEST_F(md, gpu_access_follows_policy) {
    typedef int (*control_func_t)(const char *knob, long value, long *old_p);

    if (!emulated_gpu()) {
        GTEST_SKIP() << "needs the stand-in CUDA driver";
    }

    uct_rc_gdr_cuda_driver_info_t info;
    ASSERT_EQ(UCS_OK, uct_rc_gdr_cuda_driver_info(&info));
    void *driver = dlopen(info.library, RTLD_LAZY | RTLD_NOLOAD);
    ASSERT_TRUE(driver != NULL);
    control_func_t control = (control_func_t)dlsym(driver,
                                                   "rc_gdr_fake_cuda_control");
    dlclose(driver);
    ASSERT_TRUE(control != NULL);

    const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    const size_t length = 65536;
    char *gpu           = (char*)gpu_alloc(1, length);
    uct_mem_h memh;
    mock_verbs_mr_t mr;
    long ordering;

    /* A GPU that orders incoming writes (OWNER): no read-flush */
    ASSERT_EQ(0, control("writes_ordering", 100, &ordering));

    ASSERT_EQ(UCS_OK, open());
    memh = reg(gpu, length);
    ASSERT_TRUE(mock_verbs_find((uintptr_t)gpu, &mr));
    EXPECT_EQ(all | RO, mr.access);
    dereg(memh);
    close();

    set("NIC_READS_GPU", "no");
    ASSERT_EQ(UCS_OK, open());
    memh = reg(gpu, length);
    ASSERT_TRUE(mock_verbs_find((uintptr_t)gpu, &mr));
    EXPECT_EQ(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | RO,
              mr.access);
    EXPECT_TRUE(rkey(memh).flags & UCT_RC_GDR_RKEY_FLAG_NO_READ);
    dereg(memh);
    close();

    /* One that does not (NONE): its writes need a read, which the NIC may
       not make, so they bounce too */
    control("writes_ordering", 0, NULL);
    {
        log_capture capture(UCS_LOG_LEVEL_DIAG);

        ASSERT_EQ(UCS_OK, open());
        EXPECT_TRUE(captured_log_has("GPU1 <-> " MOCK_VERBS_DEVICE_NAME
                                           " NIC-writes-GPU uses the bounce "
                                           "lane: writes into GPU1 need a "
                                           "read-flush"));
    }
    memh = reg(gpu, length);
    EXPECT_FALSE(mock_verbs_find((uintptr_t)gpu, &mr));
    EXPECT_FALSE(rkey(memh).flags & UCT_RC_GDR_RKEY_FLAG_NIC);
    EXPECT_EQ(1u, stats().bounce_regs);
    dereg(memh);
    close();

    /* REQUIRE=gdr does not accept writes it cannot flush */
    set("REQUIRE", "gdr");
    {
        log_capture capture;

        EXPECT_NE(UCS_OK, open());
        EXPECT_TRUE(captured_log_has("NIC-writes-GPU refused"));
    }

    control("writes_ordering", ordering, NULL);
    uct_rc_gdr_cuda_mem_free(gpu);
}


/*
 * At the NIC's MR count limit a registration first releases the ones kept
 * for reuse, then tries once more; with nothing to release it fails, naming
 * the limits it may have hit.
 */
TEST_F(md, reg_limit_evicts_kept) {
    ASSERT_EQ(UCS_OK, open());
    if (!ucm_global_opts.enable_events) {
        GTEST_SKIP() << "memory events are off in this process";
    }

    const size_t length = 64 * 1024;
    char *buf           = (char*)map(4 * length);
    uct_mem_h memh      = UCT_MEM_HANDLE_NULL;

    mock_verbs_set_max_mrs(mock_verbs_live_count() + 3);
    for (unsigned i = 0; i < 3; ++i) {
        dereg(reg(buf + i * length, length));
    }
    EXPECT_EQ(3u, stats().cache_kept);

    /* The fourth is over the limit: the kept ones go, then it succeeds */
    EXPECT_EQ(UCS_OK, uct_md_mem_reg(m_md, buf + 3 * length, length,
                                     UCT_MD_MEM_ACCESS_ALL, &memh));
    md_stats_t s = stats();
    EXPECT_EQ(1u, s.limit_retries);
    EXPECT_EQ(3u, s.cache_evictions);
    EXPECT_EQ(0u, s.cache_kept);
    EXPECT_EQ(1u, mock_verbs_live_count());

    /* Nothing left to release: the registration fails and says why */
    mock_verbs_set_max_mrs(mock_verbs_live_count());
    {
        log_capture capture;
        uct_mem_h other;

        EXPECT_EQ(UCS_ERR_NO_MEMORY,
                  uct_md_mem_reg(m_md, buf, length, UCT_MD_MEM_ACCESS_ALL,
                                 &other));
        EXPECT_TRUE(captured_log_has("at a resource limit"));
        EXPECT_TRUE(captured_log_has("max_mr"));
        EXPECT_TRUE(captured_log_has("RLIMIT_MEMLOCK"));
    }
    EXPECT_EQ(1u, stats().limit_retries);

    mock_verbs_set_max_mrs(0);
    if (memh != UCT_MEM_HANDLE_NULL) {
        dereg(memh);
    }
    close();
    munmap(buf, 4 * length);
}

/* The same for GPU memory: at the limit, kept GPU registrations go and the
 * memory still gets a NIC registration, not the bounce lane */
TEST_F(md, gpu_reg_limit_evicts_kept) {
    if (!emulated_gpu()) {
        GTEST_SKIP() << "needs the stand-in CUDA driver";
    }

    ASSERT_EQ(UCS_OK, open());

    const size_t length = 64 * 1024;
    char *a             = (char*)gpu_alloc(1, length);
    char *b             = (char*)gpu_alloc(1, length);

    dereg(reg(a, length));
    ASSERT_EQ(1u, stats().peermem_regs) << "GPU1 does not take peermem";
    EXPECT_EQ(1u, stats().cache_kept);

    mock_verbs_fail_reg(1, EAGAIN);
    uct_mem_h memh = reg(b, length);
    md_stats_t s   = stats();
    EXPECT_EQ(1u, s.limit_retries);
    EXPECT_EQ(2u, s.peermem_regs);
    EXPECT_EQ(0u, s.bounce_regs);
    EXPECT_TRUE(rkey(memh).flags & UCT_RC_GDR_RKEY_FLAG_NIC);
    dereg(memh);
    close();
    uct_rc_gdr_cuda_mem_free(a);
    uct_rc_gdr_cuda_mem_free(b);
}

/*
 * A GPU registration the NIC refuses at run time, for one allocation, falls
 * back to a bounce registration: one line per cause, every one counted; the
 * next allocation gets its NIC registration again.
 */
TEST_F(md, gpu_reg_falls_back_to_bounce) {
    if (!emulated_gpu()) {
        GTEST_SKIP() << "needs the stand-in CUDA driver";
    }

    set("RCACHE", "no"); /* nothing kept to release at the limit */
    ASSERT_EQ(UCS_OK, open());

    const size_t length = 64 * 1024;
    std::vector<char*> gpu;
    std::vector<uct_mem_h> memh;

    for (unsigned i = 0; i < 4; ++i) {
        gpu.push_back((char*)gpu_alloc(1, length));
    }

    {
        log_capture capture;

        /* An allocation the mechanism refuses, twice, then the limit */
        mock_verbs_fail_reg(2, EFAULT);
        memh.push_back(reg(gpu[0], length));
        memh.push_back(reg(gpu[1], length));
        mock_verbs_fail_reg(1, ENOMEM);
        memh.push_back(reg(gpu[2], length));
        EXPECT_EQ(1u, captured_log_count("refused by the mechanism"))
                << captured_log.size();
        EXPECT_EQ(1u, captured_log_count("at a resource limit"));
        EXPECT_EQ(2u, captured_log_count("the bounce lane carries it"));
        EXPECT_TRUE(captured_log_has("max_mr"));
        EXPECT_TRUE(captured_log_has("BAR1"));
    }

    memh.push_back(reg(gpu[3], length));
    md_stats_t s = stats();
    EXPECT_EQ(3u, s.bounce_regs);
    EXPECT_EQ(2u, s.fallbacks[CAUSE_REFUSED]);
    EXPECT_EQ(1u, s.fallbacks[CAUSE_LIMIT]);
    EXPECT_EQ(1u, s.peermem_regs);

    /* The fallbacks carry bounce tokens for their bytes; the last one a NIC
       key */
    for (unsigned i = 0; i < 3; ++i) {
        uct_rc_gdr_rkey_t key = rkey(memh[i]);
        EXPECT_FALSE(key.flags & UCT_RC_GDR_RKEY_FLAG_NIC) << i;
        EXPECT_EQ(UCS_OK, bounce_target(uct_rc_gdr_rkey_token(&key), gpu[i],
                                        length)) << i;
    }
    EXPECT_TRUE(rkey(memh[3]).flags & UCT_RC_GDR_RKEY_FLAG_NIC);

    for (unsigned i = 0; i < 4; ++i) {
        dereg(memh[i]);
    }
    {
        log_capture capture(UCS_LOG_LEVEL_DIAG);

        close();
        EXPECT_TRUE(captured_log_has("1 at a resource limit, 2 refused "
                                           "by the mechanism, 0 DMA-BUF "
                                           "export refused"))
                << (captured_log.empty() ? "" : captured_log[0]);
    }
    for (char *p : gpu) {
        uct_rc_gdr_cuda_mem_free(p);
    }
}

/*
 * A fallback is not kept for reuse: once its last handle is gone, the next
 * registration of the same memory asks the NIC again (the limit that refused
 * it may have passed), instead of hitting the bounce registration. Only a
 * cache that keeps registrations (memory events on) could hand it out.
 */
TEST_F(md, gpu_fallback_not_kept) {
    if (!emulated_gpu()) {
        GTEST_SKIP() << "needs the stand-in CUDA driver";
    }

    ASSERT_EQ(UCS_OK, open());
    if (!ucm_global_opts.enable_events) {
        GTEST_SKIP() << "the cache keeps nothing without memory events";
    }

    const size_t length = 64 * 1024;
    char *gpu           = (char*)gpu_alloc(1, length);
    mock_verbs_mr_t mr;
    uct_mem_h memh;

    {
        log_capture capture;

        mock_verbs_fail_reg(1, ENOMEM);
        memh = reg(gpu, length);
    }
    EXPECT_FALSE(rkey(memh).flags & UCT_RC_GDR_RKEY_FLAG_NIC);
    EXPECT_EQ(1u, stats().bounce_regs);
    dereg(memh);

    /* The limit has passed: a NIC key now */
    memh = reg(gpu, length);
    EXPECT_TRUE(rkey(memh).flags & UCT_RC_GDR_RKEY_FLAG_NIC);
    EXPECT_TRUE(mock_verbs_find((uintptr_t)gpu, &mr));
    EXPECT_EQ(1u, stats().peermem_regs);
    dereg(memh);

    /* and that one is kept: the next is a hit on it */
    memh = reg(gpu, length);
    EXPECT_TRUE(rkey(memh).flags & UCT_RC_GDR_RKEY_FLAG_NIC);
    EXPECT_EQ(1u, stats().peermem_regs);
    dereg(memh);

    close();
    uct_rc_gdr_cuda_mem_free(gpu);
}

/* Where the bounce lane is not allowed, the refused registration fails and
 * names the cause */
TEST_F(md, gpu_reg_fails_without_bounce) {
    if (!emulated_gpu()) {
        GTEST_SKIP() << "needs the stand-in CUDA driver";
    }

    set("BOUNCE", "no");
    ASSERT_EQ(UCS_OK, open());

    const size_t length = 64 * 1024;
    char *gpu           = (char*)gpu_alloc(1, length);
    uct_mem_h memh      = UCT_MEM_HANDLE_NULL;

    mock_verbs_fail_reg(1, EFAULT);
    {
        log_capture capture;

        EXPECT_EQ(UCS_ERR_IO_ERROR, uct_md_mem_reg(m_md, gpu, length,
                                                   UCT_MD_MEM_ACCESS_ALL,
                                                   &memh));
        EXPECT_TRUE(captured_log_has("refused by the mechanism"));
        EXPECT_TRUE(captured_log_has("Bad address"));
        EXPECT_TRUE(captured_log_has("bounce lane is not allowed"));
    }
    EXPECT_EQ(0u, stats().bounce_regs);

    /* The next one is registered as usual */
    dereg(reg(gpu, length));
    EXPECT_EQ(1u, stats().peermem_regs);
    close();
    uct_rc_gdr_cuda_mem_free(gpu);
}


/*
 * A GPU registration covers its allocation or less. Past its end (by a
 * byte, or by 1 TiB, beyond what the NIC registers, which used to fall back
 * to a bounce registration whose token reached the neighbouring
 * allocation) it is refused, naming the allocation.
 */
TEST_F(md, gpu_reg_inside_allocation) {
    if (!emulated_gpu()) {
        GTEST_SKIP() << "needs the stand-in CUDA driver";
    }

    ASSERT_EQ(UCS_OK, open());
    mock_verbs_set_max_mr_size(1ull << 36); /* the NIC refuses 1 TiB */

    const size_t length = 64 * 1024;
    char *gpu           = (char*)gpu_alloc(1, length);
    char *next          = (char*)gpu_alloc(1, length);
    /* to the end of the next allocation, wherever the driver put it */
    const size_t to_next = (next > gpu) ? (size_t)(next + length - gpu) :
                                          2 * length;
    const size_t past[]  = {length + 1, to_next, 1ull << 40};

    for (size_t len : past) {
        log_capture capture;
        uct_mem_h memh = UCT_MEM_HANDLE_NULL;

        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  uct_md_mem_reg(m_md, gpu, len, UCT_MD_MEM_ACCESS_ALL,
                                 &memh)) << len;
        EXPECT_TRUE(captured_log_has("leaves the GPU1 cuda-device "
                                     "allocation")) << len;
    }
    {
        log_capture capture;
        uct_mem_h memh = UCT_MEM_HANDLE_NULL;

        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  uct_md_mem_reg(m_md, gpu + 4096, length,
                                 UCT_MD_MEM_ACCESS_ALL, &memh));
    }

    md_stats_t s = stats();
    EXPECT_EQ(0u, s.bounce_regs);
    EXPECT_EQ(0u, s.peermem_regs);

    /* The allocation itself, and bytes of it, as before */
    dereg(reg(gpu, length));
    dereg(reg(gpu + 4096, length - 4096));
    close();
    uct_rc_gdr_cuda_mem_free(gpu);
    uct_rc_gdr_cuda_mem_free(next);
}

/*
 * UCP rounds a whole-allocation registration up to its alignment (16 bytes
 * in 1.22): past an odd-sized allocation's end, into bytes that no other
 * allocation can hold (CUDA aligns every allocation to 256 bytes). That is
 * registered, whole; one byte past the 256-byte boundary is refused.
 */
TEST_F(md, gpu_reg_rounded_past_odd_end_to_cuda_alignment) {
    if (!emulated_gpu()) {
        GTEST_SKIP() << "needs the stand-in CUDA driver";
    }

    ASSERT_EQ(UCS_OK, open());

    const size_t length = 4 * 1024 * 1024 + 8; /* ucx_perftest's 4 MiB */
    char *gpu           = (char*)gpu_alloc(1, length);
    uct_mem_h memh      = reg(gpu, ucs_align_up_pow2(length, 16));
    mock_verbs_mr_t mr;

    ASSERT_TRUE(mock_verbs_find((uintptr_t)gpu, &mr));
    EXPECT_GE(mr.length, ucs_align_up_pow2(length, 16));
    dereg(memh);
    dereg(reg(gpu, ucs_align_up_pow2(length, 256)));

    {
        log_capture capture;
        uct_mem_h bad = UCT_MEM_HANDLE_NULL;

        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  uct_md_mem_reg(m_md, gpu, ucs_align_up_pow2(length, 256) + 1,
                                 UCT_MD_MEM_ACCESS_ALL, &bad));
        EXPECT_TRUE(captured_log_has("leaves the GPU1 cuda-device "
                                     "allocation"));
    }

    close();
    uct_rc_gdr_cuda_mem_free(gpu);
}

/*
 * A VMM range of several mappings is registered whole when they follow one
 * another without a gap, with one NIC registration; a range that runs into
 * reserved but unmapped addresses is refused, never shortened.
 */
TEST_F(md, gpu_reg_vmm_chunks_whole_or_refused) {
    if (!emulated_gpu()) {
        GTEST_SKIP() << "needs the stand-in CUDA driver";
    }

    ASSERT_EQ(UCS_OK, open());

    const int ordinal = 1;
    uct_rc_gdr_cuda_ctx_h ctx, prev = NULL;
    size_t gran       = 0;
    void *base        = NULL;
    uint64_t handle;
    mock_verbs_mr_t mr;

    ASSERT_EQ(UCS_OK, uct_rc_gdr_cuda_ctx_get_current(&prev));
    ASSERT_EQ(UCS_OK, uct_rc_gdr_cuda_ctx_retain(ordinal, &ctx));
    m_ctx_held.push_back(ordinal);
    ASSERT_EQ(UCS_OK, uct_rc_gdr_cuda_ctx_set_current(ctx));
    ASSERT_EQ(UCS_OK, uct_rc_gdr_cuda_vmm_granularity(ordinal, &gran));
    /* three chunks reserved, the first two mapped */
    ASSERT_EQ(UCS_OK, uct_rc_gdr_cuda_vmm_reserve(3 * gran, gran, &base));
    for (int i = 0; i < 2; ++i) {
        ASSERT_EQ(UCS_OK, uct_rc_gdr_cuda_vmm_create(ordinal, gran, 1,
                                                     &handle));
        ASSERT_EQ(UCS_OK, uct_rc_gdr_cuda_vmm_map((char*)base + i * gran,
                                                  gran, handle));
        uct_rc_gdr_cuda_vmm_release(handle);
    }
    ASSERT_EQ(UCS_OK, uct_rc_gdr_cuda_vmm_set_access(base, 2 * gran,
                                                     ordinal));
    uct_rc_gdr_cuda_ctx_set_current(prev);

    uct_mem_h memh = reg((char*)base + 100, 2 * gran - 200);
    ASSERT_TRUE(mock_verbs_find((uintptr_t)base, &mr));
    EXPECT_EQ(2 * gran, mr.length);
    EXPECT_TRUE(rkey(memh).flags & UCT_RC_GDR_RKEY_FLAG_NIC);
    dereg(memh);

    {
        log_capture capture;
        uct_mem_h bad = UCT_MEM_HANDLE_NULL;

        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  uct_md_mem_reg(m_md, base, 3 * gran, UCT_MD_MEM_ACCESS_ALL,
                                 &bad));
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  uct_md_mem_reg(m_md, (char*)base + gran, gran + 1,
                                 UCT_MD_MEM_ACCESS_ALL, &bad));
        EXPECT_TRUE(captured_log_has("leaves the GPU1"));
    }

    close();
    uct_rc_gdr_cuda_ctx_set_current(ctx);
    uct_rc_gdr_cuda_vmm_unmap(base, 2 * gran);
    uct_rc_gdr_cuda_vmm_unreserve(base, 3 * gran);
    uct_rc_gdr_cuda_ctx_set_current(prev);
}

/* A registration longer than the device's max_mr_size (the md's max_reg)
 * is refused in one line that names the limit, host memory as GPU memory */
TEST_F(md, max_reg_enforced) {
    mock_verbs_reset();
    mock_verbs_set_max_mr_size(1 << 20);
    ASSERT_EQ(UCS_OK, open_keep_mock());

    uct_md_attr_t attr;
    ASSERT_EQ(UCS_OK, uct_md_query(m_md, &attr));
    EXPECT_EQ(1u << 20, attr.cap.max_reg);

    const size_t length = 2 << 20;
    char *buf           = (char*)map(length);
    uct_mem_h memh      = UCT_MEM_HANDLE_NULL;

    {
        log_capture capture;

        EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT,
                  uct_md_mem_reg(m_md, buf, (1 << 20) + 1,
                                 UCT_MD_MEM_ACCESS_ALL, &memh));
        EXPECT_TRUE(captured_log_has("exceeds max_reg")) << captured_log.size();
    }
    dereg(reg(buf, 1 << 20));

    if (emulated_gpu()) {
        char *gpu = (char*)gpu_alloc(1, length);
        log_capture capture;

        EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT,
                  uct_md_mem_reg(m_md, gpu, length, UCT_MD_MEM_ACCESS_ALL,
                                 &memh));
        EXPECT_EQ(0u, stats().bounce_regs);
        close();
        uct_rc_gdr_cuda_mem_free(gpu);
    }

    close();
    munmap(buf, length);
    mock_verbs_set_max_mr_size(UINT64_MAX);
}


/*
 * The iface says which thread modes it serves: a MULTI worker is refused in
 * one line (the data path takes no lock; UCP serializes and opens its UCT
 * worker SERIALIZED).
 */
TEST_F(md, iface_refuses_multi_thread_worker) {
    ASSERT_EQ(UCS_OK, open());

    ucs_async_context_t *async;
    uct_iface_config_t *config;
    uct_worker_h worker;
    uct_iface_params_t params;
    uct_iface_h iface;

    ASSERT_EQ(UCS_OK, ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                               &async));
    ASSERT_EQ(UCS_OK, uct_worker_create(async, UCS_THREAD_MODE_MULTI,
                                        &worker));
    ASSERT_EQ(UCS_OK, uct_md_iface_config_read(m_md, "rc_gdr", NULL, NULL,
                                               &config));

    memset(&params, 0, sizeof(params));
    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                  UCT_IFACE_PARAM_FIELD_DEVICE;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = "rc_gdr";
    params.mode.device.dev_name = MOCK_VERBS_DEVICE_NAME ":1";
    {
        log_capture capture;

        EXPECT_EQ(UCS_ERR_UNSUPPORTED,
                  uct_iface_open(m_md, worker, &params, config, &iface));
        EXPECT_TRUE(captured_log_has("thread mode multi is not "
                                           "supported"))
                << (captured_log.empty() ? "" : captured_log[0]);
    }

    uct_config_release(config);
    uct_worker_destroy(worker);
    ucs_async_context_destroy(async);
}


/*
 * Relaxed ordering (UCX_RC_GDR_PCI_RELAXED_ORDERING): auto asks for it in
 * every registration, host and GPU, where the device takes it, and turns it
 * off where the device refuses it; yes there is an error at open, no never
 * asks.
 */
TEST_F(md, relaxed_ordering_auto) {
    const size_t length = 65536;
    char *buf           = (char*)map(length);
    struct ibv_mr *ibmr = NULL;
    mock_verbs_mr_t mr;
    uct_mem_h memh;

    /* A device that takes it: host, GPU and staging registrations */
    ASSERT_EQ(UCS_OK, open());
    memh = reg(buf, length);
    ASSERT_TRUE(mock_verbs_find((uintptr_t)buf, &mr));
    EXPECT_EQ(RO, mr.access & RO);
    dereg(memh);
    ASSERT_EQ(UCS_OK, the_module().reg_internal(m_md, buf + 4096, 4096,
                                                &ibmr));
    ASSERT_TRUE(mock_verbs_find((uintptr_t)buf + 4096, &mr));
    EXPECT_EQ(RO, mr.access & RO);
    EXPECT_EQ(0, ibv_dereg_mr(ibmr));
    if (emulated_gpu()) {
        char *gpu = (char*)gpu_alloc(1, length);

        memh = reg(gpu, length);
        ASSERT_TRUE(mock_verbs_find((uintptr_t)gpu, &mr));
        EXPECT_EQ(RO, mr.access & RO) << "GPU memory";
        dereg(memh);
        close();
        EXPECT_EQ(UCS_OK, uct_rc_gdr_cuda_mem_free(gpu));
    }
    close();

    /* A device that refuses it: off, and registrations still succeed */
    mock_verbs_reset();
    mock_verbs_refuse_access(RO);
    ASSERT_EQ(UCS_OK, open_keep_mock());
    memh = reg(buf, length);
    ASSERT_TRUE(mock_verbs_find((uintptr_t)buf, &mr));
    EXPECT_EQ(0, mr.access & RO);
    dereg(memh);
    close();
    munmap(buf, length);
}

TEST_F(md, relaxed_ordering_yes_refused_at_open) {
    set("PCI_RELAXED_ORDERING", "yes");
    mock_verbs_reset();
    mock_verbs_refuse_access(RO);
    {
        log_capture capture;

        EXPECT_EQ(UCS_ERR_UNSUPPORTED, open_keep_mock());
        EXPECT_TRUE(captured_log_has("UCX_RC_GDR_PCI_RELAXED_ORDERING=yes, "
                                     "but the device refuses"))
                << (captured_log.empty() ? "" : captured_log[0]);
    }

    /* Where it is taken, yes is what auto does */
    ASSERT_EQ(UCS_OK, open());
    const size_t length = 4096;
    char *buf           = (char*)map(length);
    mock_verbs_mr_t mr;
    uct_mem_h memh      = reg(buf, length);

    ASSERT_TRUE(mock_verbs_find((uintptr_t)buf, &mr));
    EXPECT_EQ(RO, mr.access & RO);
    dereg(memh);
    munmap(buf, length);
}

TEST_F(md, relaxed_ordering_no) {
    set("PCI_RELAXED_ORDERING", "no");
    ASSERT_EQ(UCS_OK, open());

    const size_t length = 4096;
    char *buf           = (char*)map(length);
    mock_verbs_mr_t mr;
    uct_mem_h memh      = reg(buf, length);

    ASSERT_TRUE(mock_verbs_find((uintptr_t)buf, &mr));
    EXPECT_EQ(0, mr.access & RO);
    dereg(memh);
    munmap(buf, length);
}


/*
 * UCP ranks lanes by the distance between a buffer's system device and each
 * lane's: the NIC's device is the PCI function behind its verbs device, found
 * as UCX's IB transports find theirs (ibdev_path/device in sysfs).
 */
TEST_F(md, nic_system_device) {
    rc_gdr_sysfs sysfs;
    uct_tl_resource_desc_t *resources;
    unsigned num_resources;
    ucs_sys_bus_id_t bus_id;

    sysfs.add_pci("pci0000:40/0000:40:01.0/0000:43:00.1", 0);
    sysfs.add_ib(MOCK_VERBS_DEVICE_NAME, "pci0000:40/0000:40:01.0/"
                                         "0000:43:00.1");
    mock_verbs_reset();
    mock_verbs_set_ibdev_path((std::string(sysfs.root()) +
                               "/class/infiniband/" MOCK_VERBS_DEVICE_NAME)
                                      .c_str());
    ASSERT_EQ(UCS_OK, open_keep_mock());

    ASSERT_EQ(UCS_OK, uct_md_query_tl_resources(m_md, &resources,
                                                &num_resources));
    ASSERT_EQ(1u, num_resources);
    EXPECT_STREQ(MOCK_VERBS_DEVICE_NAME ":1", resources[0].dev_name);
    ASSERT_NE(UCS_SYS_DEVICE_ID_UNKNOWN, resources[0].sys_device);
    ASSERT_EQ(UCS_OK, ucs_topo_get_device_bus_id(resources[0].sys_device,
                                                 &bus_id));
    EXPECT_EQ(0, bus_id.domain);
    EXPECT_EQ(0x43, bus_id.bus);
    EXPECT_EQ(0, bus_id.slot);
    EXPECT_EQ(1, bus_id.function);
    /* ucx_info -d prints it by the NIC's name, as for rc_verbs */
    EXPECT_STREQ(MOCK_VERBS_DEVICE_NAME,
                 ucs_topo_sys_device_get_name(resources[0].sys_device));
    uct_release_tl_resource_list(resources);
    close();

    /* rxe, siw: no PCI function, the device stays unknown */
    mock_verbs_reset();
    sysfs.add_virtual_ib("rxe0");
    mock_verbs_set_ibdev_path((std::string(sysfs.root()) +
                               "/class/infiniband/rxe0").c_str());
    ASSERT_EQ(UCS_OK, open_keep_mock());
    ASSERT_EQ(UCS_OK, uct_md_query_tl_resources(m_md, &resources,
                                                &num_resources));
    ASSERT_EQ(1u, num_resources);
    EXPECT_EQ(UCS_SYS_DEVICE_ID_UNKNOWN, resources[0].sys_device);
    uct_release_tl_resource_list(resources);
}


/* The md's memory query places CUDA memory on its GPU: the PCI location the
 * driver gives (RC_GDR_FAKE_CUDA_PCI_BUS_ID of test_cuda.cc) */
TEST_F(md, gpu_memory_system_device) {
    if (!emulated_gpu()) {
        GTEST_SKIP() << "needs the stand-in CUDA driver";
    }

    const size_t length = 1 << 20;
    const uint8_t buses[] = {0x1a, 0x9b};
    ucs_sys_device_t sys_devs[2];
    uct_md_mem_attr_t attr;
    ucs_sys_bus_id_t bus_id;
    int ordinal;

    ASSERT_EQ(UCS_OK, open());
    for (ordinal = 0; ordinal < 2; ++ordinal) {
        char *gpu = (char*)gpu_alloc(ordinal, length);

        memset(&attr, 0, sizeof(attr));
        attr.field_mask = UCT_MD_MEM_ATTR_FIELD_MEM_TYPE |
                          UCT_MD_MEM_ATTR_FIELD_SYS_DEV;
        ASSERT_EQ(UCS_OK, uct_md_mem_query(m_md, gpu + 4096, 64, &attr));
        EXPECT_EQ(UCS_MEMORY_TYPE_CUDA, attr.mem_type);
        ASSERT_NE(UCS_SYS_DEVICE_ID_UNKNOWN, attr.sys_dev) << "GPU" << ordinal;
        ASSERT_EQ(UCS_OK, ucs_topo_get_device_bus_id(attr.sys_dev, &bus_id));
        EXPECT_EQ(0, bus_id.domain);
        EXPECT_EQ(buses[ordinal], bus_id.bus);
        EXPECT_EQ(0, bus_id.slot);
        EXPECT_EQ(0, bus_id.function);
        sys_devs[ordinal] = attr.sys_dev;
        EXPECT_EQ(UCS_OK, uct_rc_gdr_cuda_mem_free(gpu));
    }

    EXPECT_NE(sys_devs[0], sys_devs[1]);
}


/*
 * A bounce target is held from its check to the end of the copy: a free
 * hook on another thread waits meanwhile, and after it the memory is no
 * longer served.
 */
TEST_F(md, bounce_target_held_across_copy) {
    const size_t length = 64 * 1024;
    bounce_target_t target;

    if (!open_bounce_target(length, &target)) {
        return;
    }

    /* The memory goes away on another thread, while this one "copies" */
    unmap_on_thread unmap(target.gpu, length);
    usleep(200000);
    EXPECT_FALSE(unmap.done())
            << "the free hook released the memory during the copy";
    the_module().bounce_release(m_md);
    unmap.join();

    {
        log_capture capture;

        EXPECT_EQ(UCS_ERR_INVALID_ADDR, bounce_target(target.token,
                                                      target.gpu, 1));
        EXPECT_TRUE(captured_log_has("freed memory"));
    }

    dereg(target.memh);
    close();
    uct_rc_gdr_cuda_mem_free(target.gpu);
}


/* A bounce copy holds its own bytes only: a free of other memory on another
 * thread is queued and goes on at once (the copy may wait for a lock that
 * thread holds: a malloc arena, the CUDA driver's), and is applied when the
 * copy lets go */
TEST_F(md, bounce_copy_lets_other_frees_through) {
    const size_t length = 64 * 1024;
    bounce_target_t target;

    if (!open_bounce_target(length, &target)) {
        return;
    }

    char *host          = (char*)map(length);
    uct_mem_h host_memh = reg(host, length);
    ASSERT_EQ(1u, mock_verbs_live_count()); /* the host buffer's */

    unmap_on_thread unmap(host, length);
    for (int i = 0; (i < 1000) && !unmap.done(); ++i) {
        usleep(10000);
    }
    EXPECT_TRUE(unmap.done()) << "a free of other memory waited 10 s for "
                                 "the copy";
    EXPECT_EQ(1u, mock_verbs_live_count()) << "applied during the copy";

    the_module().bounce_release(m_md);
    unmap.join();
    EXPECT_EQ(0u, mock_verbs_live_count()) << "not applied at the release";
    EXPECT_EQ(1u, stats().invalidations);

    dereg(host_memh); /* its holder's put frees the invalidated region */
    dereg(target.memh);
    close();
    munmap(host, length);
    uct_rc_gdr_cuda_mem_free(target.gpu);
}

/* Fork safety as UCX's IB md: ibv_fork_init() at open unless turned off;
 * its failure is fatal only with UCX_RC_GDR_FORK_INIT=yes */
TEST_F(md, fork_init) {
    ASSERT_EQ(UCS_OK, open());
    EXPECT_EQ(1u, mock_verbs_fork_init_count());
    close();

    set("FORK_INIT", "no");
    ASSERT_EQ(UCS_OK, open());
    EXPECT_EQ(0u, mock_verbs_fork_init_count());
    close();

    set("FORK_INIT", "try");
    mock_verbs_reset();
    mock_verbs_fail_fork_init(EINVAL);
    EXPECT_EQ(UCS_OK, open_keep_mock());
    close();

    set("FORK_INIT", "yes");
    mock_verbs_fail_fork_init(EINVAL);
    {
        log_capture capture;

        EXPECT_NE(UCS_OK, open_keep_mock());
        EXPECT_TRUE(captured_log_has("ibv_fork_init() failed"));
    }
    mock_verbs_fail_fork_init(0);
}

/*
 * A child of fork() unmaps memory the parent registered: its free hook
 * must neither deregister the parent's MRs (a child shares the verbs
 * context) nor wait for the cache lock a parent thread held at the fork
 * (that thread does not exist in the child). The parent's registrations are
 * intact afterwards.
 */
TEST_F(md, fork_child_leaves_registrations) {
    if (!emulated_gpu()) {
        GTEST_SKIP() << "needs the stand-in CUDA driver";
    }
    ASSERT_TRUE(the_module().bounce_hold != NULL);

    set("REG_METHODS", "dmabuf"); /* GPU memory: bounce, for the hold */
    ASSERT_EQ(UCS_OK, open());
    if (!ucm_global_opts.enable_events) {
        GTEST_SKIP() << "memory events are off in this process";
    }

    const size_t length = 64 * 1024;
    char *buf           = (char*)map(length);
    char *gpu           = (char*)gpu_alloc(1, length);
    uct_mem_h memh      = reg(buf, length);
    uct_mem_h gpu_memh  = reg(gpu, length);
    uint32_t rkey0      = rkey(memh).rkey;
    unsigned deregs0    = mock_verbs_dereg_count();
    mock_verbs_mr_t mr;
    int ordinal, status;

    /* 1: no lock held at the fork. 2: a thread holds the cache lock */
    for (int held = 0; held < 2; ++held) {
        pthread_t holder;
        int release = 0, holding = 0;
        struct holder_arg {
            uct_md_h md;
            uint64_t token;
            void     *address;
            int      *holding, *release;
        } arg = {m_md, token_of(gpu_memh), gpu, &holding, &release};

        if (held) {
            ASSERT_EQ(0, pthread_create(&holder, NULL, [](void *p) -> void* {
                holder_arg *a = (holder_arg*)p;
                uint64_t stamp;
                int gpu_ordinal;

                if (the_module().bounce_hold(a->md, a->token,
                                             (uintptr_t)a->address, 1, 0,
                                             &gpu_ordinal, &stamp) != UCS_OK) {
                    return NULL;
                }
                __atomic_store_n(a->holding, 1, __ATOMIC_RELEASE);
                while (!__atomic_load_n(a->release, __ATOMIC_ACQUIRE)) {
                    usleep(1000);
                }
                the_module().bounce_release(a->md);
                return NULL;
            }, &arg));
            while (!__atomic_load_n(&holding, __ATOMIC_ACQUIRE)) {
                usleep(1000);
            }
        }

        pid_t pid = fork();
        ASSERT_NE(-1, pid);
        if (pid == 0) {
            /* The child: its unmap must return, deregistering nothing */
            alarm(10);
            munmap(buf, length);
            _exit((mock_verbs_dereg_count() == deregs0) ? 0 : 3);
        }

        ASSERT_EQ(pid, waitpid(pid, &status, 0));
        EXPECT_TRUE(WIFEXITED(status) && (WEXITSTATUS(status) == 0))
                << (held ? "lock held at the fork: " : "no lock held: ")
                << (WIFSIGNALED(status) ?
                    "the child hung in its unmap (killed by its alarm)" :
                    "the child deregistered the parent's MR");

        if (held) {
            __atomic_store_n(&release, 1, __ATOMIC_RELEASE);
            pthread_join(holder, NULL);
        }
    }

    /* The parent's registration as before: same MR, same key, a hit */
    ASSERT_TRUE(mock_verbs_find((uintptr_t)buf, &mr));
    EXPECT_EQ(rkey0, mr.rkey);
    EXPECT_EQ(deregs0, mock_verbs_dereg_count());
    uct_mem_h again = reg(buf, length);
    EXPECT_EQ(rkey0, rkey(again).rkey);
    uint64_t stamp = 0;
    EXPECT_EQ(UCS_OK, the_module().bounce_hold(m_md, token_of(gpu_memh),
                                               (uintptr_t)gpu, length, 0,
                                               &ordinal, &stamp));
    the_module().bounce_release(m_md);

    dereg(again);
    dereg(memh);
    dereg(gpu_memh);
    close();
    munmap(buf, length);
    uct_rc_gdr_cuda_mem_free(gpu);
}


/*
 * An md a child of fork() opens itself is the child's: its cache learns of
 * the child's unmaps like any other, so memory mapped again at the same
 * address is registered anew, not served by a registration pinned on the
 * pages unmapped before.
 */
TEST_F(md, fork_child_md_gets_own_events) {
    /* The parent has had an md: its fork handler is in place */
    ASSERT_EQ(UCS_OK, open());
    if (!ucm_global_opts.enable_events) {
        GTEST_SKIP() << "memory events are off in this process";
    }
    close();

    const size_t length = 64 * 1024;
    int status;

    pid_t pid = fork();
    ASSERT_NE(-1, pid);
    if (pid == 0) {
        alarm(20);
        if (open() != UCS_OK) {
            _exit(2);
        }

        char *buf = (char*)map(length);
        uct_mem_h memh;
        if (uct_md_mem_reg(m_md, buf, length, UCT_MD_MEM_ACCESS_ALL,
                           &memh) != UCS_OK) {
            _exit(3);
        }
        uct_md_mem_dereg(m_md, memh); /* kept for reuse */
        unsigned regs = mock_verbs_reg_count();

        munmap(buf, length);
        if (mmap(buf, length, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != buf) {
            _exit(4);
        }
        if (uct_md_mem_reg(m_md, buf, length, UCT_MD_MEM_ACCESS_ALL,
                           &memh) != UCS_OK) {
            _exit(3);
        }
        /* registered anew: the unmap released the kept registration */
        _exit((mock_verbs_reg_count() == regs + 1) ? 0 : 5);
    }

    ASSERT_EQ(pid, waitpid(pid, &status, 0));
    ASSERT_TRUE(WIFEXITED(status)) << "the child was killed";
    EXPECT_EQ(0, WEXITSTATUS(status))
            << ((WEXITSTATUS(status) == 5) ?
                "the child's md served a registration of unmapped pages" :
                "the child failed to set up");
}


/*
 * The md over the real CUDA driver (RC_GDR_TEST_CUDA=real on a GPU machine;
 * test/gpu/run_stock_ucx.sh): it tells GPU memory from host memory, and
 * registers GPU memory on the lane its gate chose. The NIC is the stand-in
 * one (GPU machines here have none), so the lane says nothing about a real
 * NIC; the memory types and the registration's bookkeeping are the md's.
 */
TEST_F(md, real_gpu_memory_reported) {
    int count = 0;

    if ((uct_rc_gdr_cuda_init() != UCS_OK) || emulated_gpu() ||
        (uct_rc_gdr_cuda_device_count(&count) != UCS_OK) || (count == 0)) {
        GTEST_SKIP() << "needs a GPU and its CUDA driver "
                        "(RC_GDR_TEST_CUDA=real)";
    }

    const size_t length = 1 << 20;
    void *gpu           = gpu_alloc(0, length);
    void *host          = map(length);
    ucs_memory_type_t mem_type;
    ucs_status_t status;
    mock_verbs_mr_t mr;
    uct_mem_h memh;

    ASSERT_TRUE(gpu != NULL);
    ASSERT_EQ(UCS_OK, open());
    ASSERT_EQ(UCS_OK, uct_md_detect_memory_type(m_md, gpu, length,
                                                &mem_type));
    EXPECT_EQ(UCS_MEMORY_TYPE_CUDA, mem_type);
    ASSERT_EQ(UCS_OK, uct_md_detect_memory_type(m_md, (char*)gpu + 4096, 64,
                                                &mem_type));
    EXPECT_EQ(UCS_MEMORY_TYPE_CUDA, mem_type) << "an interior range";
    /* Not its memory: refused (as UCX's cuda_copy does), or host */
    mem_type = UCS_MEMORY_TYPE_LAST;
    status   = uct_md_detect_memory_type(m_md, host, length, &mem_type);
    EXPECT_TRUE((status != UCS_OK) || (mem_type == UCS_MEMORY_TYPE_HOST))
            << ucs_status_string(status) << ", type " << mem_type;

    memh = reg(gpu, length);
    md_stats_t s = stats();
    EXPECT_EQ(1u, s.peermem_regs + s.dmabuf_regs + s.bounce_regs)
            << "peermem " << s.peermem_regs << ", dmabuf " << s.dmabuf_regs
            << ", bounce " << s.bounce_regs;
    EXPECT_EQ(0u, s.host_regs);
    /* A NIC key exactly when the lane is GDR */
    EXPECT_EQ(s.bounce_regs == 0, mock_verbs_find((uintptr_t)gpu, &mr));
    EXPECT_EQ(s.bounce_regs == 0,
              !!(rkey(memh).flags & UCT_RC_GDR_RKEY_FLAG_NIC));
    dereg(memh);
    close();

    EXPECT_EQ(UCS_OK, uct_rc_gdr_cuda_mem_free(gpu));
    munmap(host, length);
}

/*
 * In a CUDA-built UCX, UCP asks cuda_copy's md and rc_gdr's for the type of
 * a buffer: both must give the same answer (a disagreement picks the wrong
 * copy engine or the wrong lane).
 */
TEST_F(md, memory_type_agrees_with_cuda_copy) {
    uct_component_h *components;
    uct_md_config_t *config;
    uct_component_h cuda_copy = NULL;
    unsigned i, num;
    int count = 0;

    if ((uct_rc_gdr_cuda_init() != UCS_OK) ||
        (uct_rc_gdr_cuda_device_count(&count) != UCS_OK) || (count == 0)) {
        GTEST_SKIP() << "needs a CUDA driver with a device (or the stand-in)";
    }

    ASSERT_EQ(UCS_OK, uct_query_components(&components, &num));
    for (i = 0; i < num; ++i) {
        uct_component_attr_t attr;

        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        if ((uct_component_query(components[i], &attr) == UCS_OK) &&
            !strcmp(attr.name, "cuda_cpy")) {
            cuda_copy = components[i];
        }
    }

    if (cuda_copy == NULL) {
        uct_release_component_list(components);
        GTEST_SKIP() << "this UCX has no cuda_copy (not built with CUDA)";
    }

    uct_md_h copy_md;
    ASSERT_EQ(UCS_OK, uct_md_config_read(cuda_copy, NULL, NULL, &config));
    ASSERT_EQ(UCS_OK, uct_md_open(cuda_copy, "cuda_cpy", config, &copy_md));
    uct_config_release(config);
    ASSERT_EQ(UCS_OK, open());

    const size_t length = 1 << 20;
    void *gpu           = gpu_alloc(0, length);
    void *host          = map(length);
    ASSERT_TRUE(gpu != NULL);

    struct {
        const char *what;
        void       *address;
        size_t     length;
    } cases[] = {
        {"device memory", gpu, length},
        {"an interior range of it", (char*)gpu + 4096, 64},
        {"host memory", host, length}
    };

    for (const auto &c : cases) {
        ucs_memory_type_t ours   = UCS_MEMORY_TYPE_LAST;
        ucs_memory_type_t theirs = UCS_MEMORY_TYPE_LAST;
        ucs_status_t st_ours, st_theirs;

        st_ours   = uct_md_detect_memory_type(m_md, c.address, c.length,
                                              &ours);
        st_theirs = uct_md_detect_memory_type(copy_md, c.address, c.length,
                                              &theirs);
        /* a refusal counts as host: UCP then asks no further */
        if (st_ours != UCS_OK) {
            ours = UCS_MEMORY_TYPE_HOST;
        }
        if (st_theirs != UCS_OK) {
            theirs = UCS_MEMORY_TYPE_HOST;
        }
        EXPECT_EQ(theirs, ours) << c.what << ": rc_gdr "
                                << ucs_memory_type_names[ours]
                                << ", cuda_copy "
                                << ucs_memory_type_names[theirs];
    }

    close();
    uct_md_close(copy_md);
    uct_release_component_list(components);
    EXPECT_EQ(UCS_OK, uct_rc_gdr_cuda_mem_free(gpu));
    munmap(host, length);
}
