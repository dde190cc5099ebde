/**
 * Unit tests of the rc_gdr registration cache. The ops only record calls and
 * never touch memory, so the addresses are made up.
 *
 * See file LICENSE for terms.
 */

#include "rcache_check.h"

#include <uct/ib_gdr/rc_gdr_rcache.h>

#include <ucs/debug/log_def.h>
#include <ucs/memory/memory_type.h>

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

const size_t   PAGE       = 4096;
const uint64_t PRIV_MAGIC = 0x7263616368650001ull;

typedef uct_rc_gdr_rcache_region_t region_t;
typedef uct_rc_gdr_rcache_handle_t handle_t;

/* What a get asks beside its bytes. Out-of-range values that fit the key's
   fields (an access above 8 bits, a memory type up to UINT16_MAX) reach the
   cache as they are. */
uct_rc_gdr_rcache_key_t rcache_key(unsigned mem_type, uint64_t buffer_id,
                                   unsigned access, unsigned flags)
{
    uct_rc_gdr_rcache_key_t key;

    key.buffer_id = buffer_id;
    key.access    = access;
    key.mem_type  = mem_type;
    key.flags     = flags;
    return key;
}

/* Most tests': shared host memory, no access bits */
uct_rc_gdr_rcache_key_t host_key()
{
    return rcache_key(UCS_MEMORY_TYPE_HOST, 0, 0,
                      UCT_RC_GDR_RCACHE_GET_FLAG_SHARE);
}

/*
 * ucs_error and ucs_warn messages go here instead of stderr, so a test can
 * check that an error was reported with a clear message, and every other test
 * can check that none was.
 */
class log_capture {
public:
    static void push()
    {
        ucs_log_push_handler(handler);
    }

    static void pop()
    {
        ucs_log_pop_handler();
    }

    static std::vector<std::string> take()
    {
        std::lock_guard<std::mutex> guard(m_lock);
        std::vector<std::string> messages;

        messages.swap(m_messages);
        return messages;
    }

private:
    static ucs_log_func_rc_t
    handler(const char *file, unsigned line, const char *function,
            ucs_log_level_t level,
            const ucs_log_component_config_t *comp_conf,
            const char *message, va_list ap)
    {
        char buf[1024];
        va_list aq;

        if (level > UCS_LOG_LEVEL_WARN) {
            return UCS_LOG_FUNC_RC_CONTINUE;
        }

        va_copy(aq, ap);
        vsnprintf(buf, sizeof(buf), message, aq);
        va_end(aq);

        std::lock_guard<std::mutex> guard(m_lock);
        m_messages.push_back(std::string(ucs_log_level_names[level]) + ": " +
                             buf);
        return UCS_LOG_FUNC_RC_STOP;
    }

    static std::mutex               m_lock;
    static std::vector<std::string> m_messages;
};

std::mutex               log_capture::m_lock;
std::vector<std::string> log_capture::m_messages;

} // namespace


class rcache : public ::testing::Test {
protected:
    virtual void SetUp()
    {
        log_capture::push();
        create();
    }

    virtual void TearDown()
    {
        if (m_rcache != NULL) {
            EXPECT_EQ(UCS_OK, uct_rc_gdr_rcache_check(m_rcache));
            uct_rc_gdr_rcache_destroy(m_rcache);
            m_rcache = NULL;
        }

        log_capture::pop();
        for (const std::string &message : log_capture::take()) {
            ADD_FAILURE() << "unexpected log message: " << message;
        }

        /* Every registration made was released exactly once */
        EXPECT_TRUE(m_registered.empty());
        EXPECT_EQ(m_reg_count, m_dereg_count);
    }

    void create()
    {
        uct_rc_gdr_rcache_params_t params;

        params.page_size   = PAGE;
        params.priv_size   = 2 * sizeof(uint64_t);
        params.ops         = &ops;
        params.arg         = this;
        params.name        = "test";
        params.max_regions = m_max_regions;
        params.max_size    = m_max_size;
        ASSERT_EQ(UCS_OK, uct_rc_gdr_rcache_create(&params, &m_rcache));
    }

    /* A cache of these limits instead of the fixture's unlimited one */
    void recreate(unsigned long max_regions, size_t max_size)
    {
        check();
        uct_rc_gdr_rcache_destroy(m_rcache);
        m_rcache      = NULL;
        m_max_regions = max_regions;
        m_max_size    = max_size;
        create();
    }

    /* Whether a live handle of @a region asked for exactly these bytes */
    bool exposes(region_t *region, uintptr_t address, size_t length)
    {
        int ret;

        uct_rc_gdr_rcache_lock(m_rcache);
        ret = uct_rc_gdr_rcache_region_exposes(region, address, length);
        uct_rc_gdr_rcache_unlock(m_rcache);
        return ret != 0;
    }

    /* The messages logged since the last call, which the test expected */
    std::vector<std::string> take_log()
    {
        return log_capture::take();
    }

    static bool contains(const std::string &text, const std::string &what)
    {
        return text.find(what) != std::string::npos;
    }

    /*
     * Tests name regions; the cache gives out handles. get() keeps each
     * handle under its region, put() gives one of them back.
     */
    region_t *get(uintptr_t address, size_t length, uint64_t buffer_id = 0,
                  int mem_type = UCS_MEMORY_TYPE_HOST, unsigned access = 0,
                  unsigned flags = UCT_RC_GDR_RCACHE_GET_FLAG_SHARE)
    {
        handle_t handle = 0;
        region_t *region;
        ucs_status_t status;

        status = uct_rc_gdr_rcache_get(m_rcache, (void*)address, length,
                                       rcache_key(mem_type, buffer_id, access,
                                                  flags),
                                       &handle);
        EXPECT_EQ(UCS_OK, status) << std::hex << address << " " << length;
        if (status != UCS_OK) {
            return NULL;
        }

        EXPECT_NE(0u, handle);
        region = uct_rc_gdr_rcache_handle_ref(handle)->region;
        EXPECT_TRUE(region != NULL);
        m_handles[region].push_back(handle);
        m_last = handle;
        return region;
    }

    /* A get whose region the cache keeps when its last handle goes */
    region_t *get_kept(uintptr_t address, size_t length,
                       uint64_t buffer_id = 0,
                       int mem_type = UCS_MEMORY_TYPE_HOST,
                       unsigned access = 0)
    {
        return get(address, length, buffer_id, mem_type, access,
                   UCT_RC_GDR_RCACHE_GET_FLAG_SHARE |
                   UCT_RC_GDR_RCACHE_GET_FLAG_RETAIN);
    }

    /* Give back the last handle got for @a region */
    handle_t put(region_t *region)
    {
        std::vector<handle_t> &handles = m_handles[region];
        handle_t handle;

        EXPECT_FALSE(handles.empty()) << region;
        if (handles.empty()) {
            return 0;
        }

        handle = handles.back();
        handles.pop_back();
        if (handles.empty()) {
            m_handles.erase(region);
        }
        EXPECT_EQ(UCS_OK, uct_rc_gdr_rcache_put(m_rcache, handle));
        return handle;
    }

    void invalidate(uintptr_t address, size_t length)
    {
        uct_rc_gdr_rcache_invalidate(m_rcache, (void*)address, length);
    }

    uct_rc_gdr_rcache_stats_t stats()
    {
        uct_rc_gdr_rcache_stats_t stats;

        uct_rc_gdr_rcache_stats(m_rcache, &stats);
        return stats;
    }

    void expect_stats(uint64_t entries, uint64_t hits, uint64_t misses,
                      uint64_t nic_regs, uint64_t nic_deregs,
                      uint64_t invalidations)
    {
        uct_rc_gdr_rcache_stats_t s = stats();

        EXPECT_EQ(entries, s.entries);
        EXPECT_EQ(hits, s.hits);
        EXPECT_EQ(misses, s.misses);
        EXPECT_EQ(nic_regs, s.nic_regs);
        EXPECT_EQ(nic_deregs, s.nic_deregs);
        EXPECT_EQ(invalidations, s.invalidations);
    }

    bool registered(region_t *region)
    {
        return m_registered.count(region) != 0;
    }

    void check()
    {
        ASSERT_EQ(UCS_OK, uct_rc_gdr_rcache_check(m_rcache));
    }

    /*
     * Locks @a device and starts a thread whose get of 0x10000 waits for it
     * inside mem_reg, holding the cache, as a registration waits for a
     * provider's lock; returns once it waits. Unlock @a device, join the
     * thread, then clear m_on_reg.
     */
    std::thread registration_waiting_for(std::mutex &device,
                                         handle_t *handle_p)
    {
        /* shared: the hook may still be in set_value() when we return */
        auto in_reg = std::make_shared<std::promise<void> >();
        std::future<void> waiting = in_reg->get_future();

        device.lock();
        m_on_reg = [in_reg, &device](region_t *region) {
            in_reg->set_value();
            std::lock_guard<std::mutex> wait_for_device(device);
        };
        std::thread registrar([this, handle_p]() {
            EXPECT_EQ(UCS_OK, uct_rc_gdr_rcache_get(m_rcache, (void*)0x10000,
                                                    0x1000, host_key(),
                                                    handle_p));
        });
        waiting.wait();
        return registrar;
    }

    static ucs_status_t mem_reg_cb(void *arg, region_t *region)
    {
        return static_cast<rcache*>(arg)->mem_reg(region);
    }

    static void mem_dereg_cb(void *arg, region_t *region)
    {
        static_cast<rcache*>(arg)->mem_dereg(region);
    }

    ucs_status_t mem_reg(region_t *region)
    {
        uint64_t *priv = (uint64_t*)uct_rc_gdr_rcache_region_priv(region);

        ++m_reg_calls;
        EXPECT_EQ(0u, region->start % PAGE);
        EXPECT_EQ(0u, region->end % PAGE);
        EXPECT_LT(region->start, region->end);
        if (m_track) {
            uct_rc_gdr_rcache_region_track(region);
        }
        if (m_on_reg) {
            m_on_reg(region);
        }

        if (m_reg_status != UCS_OK) {
            return m_reg_status;
        }

        EXPECT_EQ(0u, m_registered.count(region));
        m_registered[region] = std::make_pair(region->start, region->end);
        priv[0] = PRIV_MAGIC;
        priv[1] = region->start;
        ++m_reg_count;
        return UCS_OK;
    }

    void mem_dereg(region_t *region)
    {
        uint64_t *priv = (uint64_t*)uct_rc_gdr_rcache_region_priv(region);

        /* A second dereg of the same registration fails here */
        EXPECT_EQ(1u, m_registered.count(region)) << region;
        m_registered.erase(region);
        EXPECT_EQ(PRIV_MAGIC, priv[0]);
        EXPECT_EQ(region->start, priv[1]);
        priv[0] = 0;
        ++m_dereg_count;
        if (m_on_dereg) {
            m_on_dereg(region);
        }
    }

    static const uct_rc_gdr_rcache_ops_t ops;

    uct_rc_gdr_rcache_t                                      *m_rcache = NULL;
    std::map<region_t*, std::pair<uintptr_t, uintptr_t> > m_registered;
    std::map<region_t*, std::vector<handle_t> >          m_handles;
    handle_t                                            m_last = 0;
    bool                                                m_track = false;
    unsigned long                                       m_max_regions = 0;
    size_t                                              m_max_size    = 0;
    ucs_status_t                                        m_reg_status = UCS_OK;
    unsigned                                            m_reg_calls  = 0;
    unsigned                                            m_reg_count  = 0;
    unsigned                                            m_dereg_count = 0;
    std::function<void(region_t*)>                      m_on_reg;
    std::function<void(region_t*)>                      m_on_dereg;
};

const uct_rc_gdr_rcache_ops_t rcache::ops = {
    rcache::mem_reg_cb,
    rcache::mem_dereg_cb
};


TEST_F(rcache, zero_length) {
    handle_t handle = 1;

    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_rcache_get(m_rcache, (void*)0x1000, 0,
                                    host_key(),
                                    &handle));
    EXPECT_EQ(1u, handle); /* output set only on success */

    std::vector<std::string> log = take_log();
    ASSERT_EQ(1u, log.size());
    EXPECT_TRUE(contains(log[0], "empty range")) << log[0];
    expect_stats(0, 0, 0, 0, 0, 0);
    EXPECT_EQ(0u, m_reg_calls);
}

TEST_F(rcache, range_overflow) {
    const uintptr_t bad[][2] = {
        {UINTPTR_MAX - 10, 100},            /* address + length wraps */
        {UINTPTR_MAX - PAGE + 1, PAGE},     /* ends exactly at 2^64 */
        {UINTPTR_MAX - PAGE + 1, 1},        /* rounded end is 2^64 */
        {0x1000, SIZE_MAX}
    };
    handle_t handle;
    region_t *region;

    for (const auto &range : bad) {
        handle = 0;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_rc_gdr_rcache_get(m_rcache, (void*)range[0], range[1],
                                        host_key(),
                                        &handle))
                << std::hex << range[0] << " " << range[1];
        EXPECT_EQ(0u, handle);

        std::vector<std::string> log = take_log();
        ASSERT_EQ(1u, log.size());
        EXPECT_TRUE(contains(log[0], "overflows")) << log[0];
    }

    /* The highest page that can be rounded to is fine */
    region = get(UINTPTR_MAX - 2 * PAGE + 1, PAGE);
    EXPECT_EQ(UINTPTR_MAX - 2 * PAGE + 1, region->start);
    EXPECT_EQ(UINTPTR_MAX - PAGE + 1, region->end);
    put(region);

    expect_stats(0, 0, 1, 1, 1, 0);
}

TEST_F(rcache, rounding) {
    const struct {
        uintptr_t address;
        size_t    length;
        uintptr_t start;
        uintptr_t end;
    } cases[] = {
        {0x1003, 1,    0x1000, 0x2000}, /* 1 page */
        {0x1003, 4096, 0x1000, 0x3000}, /* crosses into a 2nd page */
        {0x2000, 8192, 0x2000, 0x4000}, /* aligned: exactly 2 pages */
        {0x2fff, 2,    0x2000, 0x4000}  /* 2 bytes straddling 2 pages */
    };
    unsigned i = 0;

    for (const auto &c : cases) {
        region_t *region = get(c.address, c.length);

        EXPECT_EQ(c.start, region->start) << i;
        EXPECT_EQ(c.end, region->end) << i;
        /* What the NIC was asked to register is the rounded range */
        ASSERT_TRUE(registered(region));
        EXPECT_EQ(c.start, m_registered[region].first) << i;
        EXPECT_EQ(c.end, m_registered[region].second) << i;
        put(region);
        ++i;
    }

    expect_stats(0, 0, 4, 4, 4, 0);
}

TEST_F(rcache, exact_hit) {
    region_t *r1 = get(0x10000, 0x4000);

    expect_stats(1, 0, 1, 1, 0, 0);

    region_t *r2 = get(0x10000, 0x4000);
    EXPECT_EQ(r1, r2);
    EXPECT_EQ(2u, r1->refcount);
    expect_stats(1, 1, 1, 1, 0, 0);

    /* Same pages, asked unaligned */
    region_t *r3 = get(0x10001, 0x3fff);
    EXPECT_EQ(r1, r3);
    EXPECT_EQ(3u, r1->refcount);
    expect_stats(1, 2, 1, 1, 0, 0);

    put(r1);
    put(r2);
    put(r3);
    expect_stats(0, 2, 1, 1, 1, 0);
}

TEST_F(rcache, contained_hit) {
    region_t *big = get(0x100000, 0x10000);

    region_t *r1 = get(0x104321, 0x100);      /* inside one page */
    region_t *r2 = get(0x100000, 0x1000);     /* first page */
    region_t *r3 = get(0x10f000, 0x1000);     /* last page */
    region_t *r4 = get(0x101fff, 0xe001);     /* up to the end */

    for (region_t *r : {r1, r2, r3, r4}) {
        EXPECT_EQ(big, r);
    }
    EXPECT_EQ(5u, big->refcount);
    EXPECT_EQ(1u, m_reg_calls);
    expect_stats(1, 4, 1, 1, 0, 0);

    for (region_t *r : {big, r1, r2, r3, r4}) {
        put(r);
    }
    expect_stats(0, 4, 1, 1, 1, 0);
}

TEST_F(rcache, partial_overlap_and_disjoint) {
    region_t *a = get(0x10000, 0x4000);       /* [0x10000, 0x14000) */
    region_t *b = get(0x12000, 0x4000);       /* overlaps a's tail */
    region_t *c = get(0x0e000, 0x4000);       /* overlaps a's head */
    region_t *d = get(0x0f000, 0x8000);       /* contains a: no reuse */
    region_t *e = get(0x17000, 0x1000);       /* adjacent to d */
    region_t *f = get(0x17fff, 2);            /* contains e, nothing
                                                 contains it */

    std::vector<region_t*> all = {a, b, c, d, e, f};
    for (size_t i = 0; i < all.size(); ++i) {
        for (size_t j = i + 1; j < all.size(); ++j) {
            EXPECT_NE(all[i], all[j]) << i << " " << j;
        }
        EXPECT_EQ(1u, all[i]->refcount);
        EXPECT_TRUE(registered(all[i]));
    }
    EXPECT_EQ(0x0f000u, d->start);
    EXPECT_EQ(0x17000u, d->end);
    EXPECT_EQ(0x17000u, f->start);
    EXPECT_EQ(0x19000u, f->end);
    expect_stats(6, 0, 6, 6, 0, 0);
    check();

    /* An exact request again hits a region containing it (a is inside d,
       so either may serve it) */
    std::vector<region_t*> again;
    for (region_t *r : all) {
        region_t *h = get(r->start, r->end - r->start);

        EXPECT_TRUE(std::find(all.begin(), all.end(), h) != all.end());
        EXPECT_LE(h->start, r->start);
        EXPECT_GE(h->end, r->end);
        again.push_back(h);
    }
    expect_stats(6, 6, 6, 6, 0, 0);
    check();

    for (size_t i = 0; i < all.size(); ++i) {
        put(all[i]);
        put(again[i]);
        check();
    }
    expect_stats(0, 6, 6, 6, 6, 0);
}

TEST_F(rcache, contained_in_one_of_many) {
    /* Overlapping regions; a request fits in only one of them */
    region_t *a = get(0x20000, 0x3000);       /* [0x20000, 0x23000) */
    region_t *b = get(0x22000, 0x3000);       /* [0x22000, 0x25000) */
    region_t *c = get(0x21000, 0x3000);       /* [0x21000, 0x24000) */

    EXPECT_EQ(b, get(0x23000, 0x2000));
    EXPECT_EQ(a, get(0x20800, 0x1000));
    region_t *h = get(0x22800, 0x100);        /* in a, b and c */
    EXPECT_TRUE((h == a) || (h == b) || (h == c));
    expect_stats(3, 3, 3, 3, 0, 0);

    put(b);
    put(a);
    put(h);
    put(a);
    put(b);
    put(c);
    expect_stats(0, 3, 3, 3, 3, 0);
}

TEST_F(rcache, identity_must_match) {
    /* Same pages, another buffer id or memory type: never reused, and
       since no requested byte was the old buffer's, nothing is invalidated
       (small CUDA allocations can share a page) */
    region_t *a = get(0x200000, 0x100, 1, UCS_MEMORY_TYPE_CUDA);
    region_t *b = get(0x200100, 0x100, 2, UCS_MEMORY_TYPE_CUDA);
    region_t *c = get(0x200200, 0x100, 1, UCS_MEMORY_TYPE_CUDA_MANAGED);

    EXPECT_NE(a, b);
    EXPECT_NE(a, c);
    EXPECT_NE(b, c);
    EXPECT_EQ(a->start, b->start);
    EXPECT_EQ(a->end, b->end);
    EXPECT_TRUE(registered(a));
    EXPECT_TRUE(registered(b));
    EXPECT_TRUE(registered(c));
    expect_stats(3, 0, 3, 3, 0, 0);
    check();

    /* Each buffer still hits its own region */
    EXPECT_EQ(a, get(0x200000, 0x80, 1, UCS_MEMORY_TYPE_CUDA));
    EXPECT_EQ(b, get(0x200180, 0x80, 2, UCS_MEMORY_TYPE_CUDA));
    expect_stats(3, 2, 3, 3, 0, 0);

    for (region_t *r : {a, a, b, b, c}) {
        put(r);
    }
    expect_stats(0, 2, 3, 3, 3, 0);
}

TEST_F(rcache, buffer_id_changed) {
    region_t *old = get(0x300000, 0x10000, 7, UCS_MEMORY_TYPE_CUDA);

    /* The allocation was freed without an event and its address reused: a
       contained request with a new buffer id must not hit the old region,
       and the old registration is released now */
    region_t *cur = get(0x302000, 0x2000, 8, UCS_MEMORY_TYPE_CUDA);

    EXPECT_NE(old, cur);
    EXPECT_FALSE(registered(old));
    EXPECT_TRUE(registered(cur));
    EXPECT_EQ(0x302000u, cur->start);
    EXPECT_EQ(0x304000u, cur->end);
    expect_stats(1, 0, 2, 2, 1, 1);
    EXPECT_EQ(2u, stats().live);
    check();

    /* The old region can no longer be hit, even with its own id */
    region_t *again = get(0x300000, 0x10000, 7, UCS_MEMORY_TYPE_CUDA);
    EXPECT_NE(old, again);
    expect_stats(2, 0, 3, 3, 1, 1);
    put(again);

    /* The holder's put frees it without a second dereg */
    put(old);
    EXPECT_EQ(2u, m_dereg_count);
    put(cur);
    expect_stats(0, 0, 3, 3, 3, 1);
    EXPECT_EQ(0u, stats().live);
}

TEST_F(rcache, mem_type_changed) {
    /* Host memory unmapped, the address reused by a CUDA allocation */
    region_t *host = get(0x400000, 0x4000);
    region_t *cuda = get(0x400000, 0x4000, 3, UCS_MEMORY_TYPE_CUDA);

    EXPECT_NE(host, cuda);
    EXPECT_FALSE(registered(host));
    expect_stats(1, 0, 2, 2, 1, 1);

    put(cuda);
    put(host);
    expect_stats(0, 0, 2, 2, 2, 1);
}

TEST_F(rcache, reg_failure) {
    handle_t handle = 1;
    region_t *region;

    m_reg_status = UCS_ERR_IO_ERROR;
    EXPECT_EQ(UCS_ERR_IO_ERROR,
              uct_rc_gdr_rcache_get(m_rcache, (void*)0x10000, 0x1000,
                                    host_key(),
                                    &handle));
    EXPECT_EQ(1u, handle);
    EXPECT_EQ(1u, m_reg_calls);
    expect_stats(0, 0, 1, 0, 0, 0);
    EXPECT_EQ(0u, stats().live);
    check();

    /* Nothing of the failed attempt is found, so the next one registers */
    m_reg_status = UCS_OK;
    region = get(0x10000, 0x1000);
    EXPECT_EQ(2u, m_reg_calls);
    expect_stats(1, 0, 2, 1, 0, 0);
    put(region);
    expect_stats(0, 0, 2, 1, 1, 0);
}

TEST_F(rcache, put_releases_at_zero) {
    region_t *r = get(0x10000, 0x2000);

    get(0x10000, 0x2000);
    EXPECT_EQ(2u, r->refcount);

    put(r);
    EXPECT_TRUE(registered(r));
    EXPECT_EQ(1u, r->refcount);
    expect_stats(1, 1, 1, 1, 0, 0);

    put(r);
    EXPECT_FALSE(registered(r));
    expect_stats(0, 1, 1, 1, 1, 0);

    /* Gone from the cache: the same range registers again */
    r = get(0x10000, 0x2000);
    expect_stats(1, 1, 2, 2, 1, 0);
    put(r);
}

TEST_F(rcache, double_put) {
    region_t *r     = get(0x10000, 0x2000);
    handle_t handle = put(r);

    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_rc_gdr_rcache_put(m_rcache, handle));

    std::vector<std::string> log = take_log();
    ASSERT_EQ(1u, log.size());
    EXPECT_TRUE(contains(log[0], "not live")) << log[0];
    EXPECT_EQ(1u, m_dereg_count);
    expect_stats(0, 0, 1, 1, 1, 0);
}

TEST_F(rcache, garbage_put) {
    /* Nothing that is not a live handle of this cache is taken */
    uct_rc_gdr_rcache_params_t params;
    uct_rc_gdr_rcache_t *other;
    handle_t foreign;

    region_t *r = get(0x10000, 0x1000);
    handle_t h  = m_last;

    params.page_size   = PAGE;
    params.priv_size   = 2 * sizeof(uint64_t);
    params.ops         = &ops;
    params.arg         = this;
    params.name        = "other";
    params.max_regions = 0;
    params.max_size    = 0;
    ASSERT_EQ(UCS_OK, uct_rc_gdr_rcache_create(&params, &other));
    ASSERT_EQ(UCS_OK, uct_rc_gdr_rcache_get(other, (void*)0x10000, 0x1000,
                                            host_key(),
                                            &foreign));

    const handle_t bad[] = {
        0, 1, 0xffffff, h & 0xffffff,           /* no generation */
        h + (1ull << 24), h - (1ull << 24),     /* another generation */
        (1ull << 24) | 0xfffffe,                /* a slot never allocated */
        0xdeadbeef12345678ull, ~0ull, foreign   /* another cache's */
    };
    for (handle_t b : bad) {
        EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_rc_gdr_rcache_put(m_rcache, b))
                << std::hex << b;
    }

    EXPECT_EQ(ucs_static_array_size(bad), take_log().size());
    EXPECT_EQ(1u, r->refcount);
    expect_stats(1, 0, 1, 1, 0, 0);
    put(r);

    EXPECT_EQ(UCS_OK, uct_rc_gdr_rcache_put(other, foreign));
    uct_rc_gdr_rcache_destroy(other);
}

TEST_F(rcache, invalidate_overlapping) {
    region_t *a = get(0x10000, 0x4000);       /* [0x10000, 0x14000) */
    region_t *b = get(0x13000, 0x5000);       /* [0x13000, 0x18000) */
    region_t *c = get(0x20000, 0x1000);       /* elsewhere */
    region_t *d = get(0x08000, 0x28000);      /* [0x8000, 0x30000) */
    region_t *e = get(0x34000, 0x1000);       /* elsewhere */

    region_t *x = get(0x10000, 0x1000);       /* a or d, both contain it */
    EXPECT_TRUE((x == a) || (x == d));
    expect_stats(5, 1, 5, 5, 0, 0);

    /* Empty and non-touching ranges change nothing */
    invalidate(0x13800, 0);
    invalidate(0x30000, 0x1000);
    invalidate(0x0, 0x8000);
    expect_stats(5, 1, 5, 5, 0, 0);

    /* Released now, while still referenced: a, b, d overlap the range */
    invalidate(0x13800, 0x10);
    EXPECT_FALSE(registered(a));
    EXPECT_FALSE(registered(b));
    EXPECT_FALSE(registered(d));
    EXPECT_TRUE(registered(c));
    EXPECT_TRUE(registered(e));
    expect_stats(2, 1, 5, 5, 3, 3);
    EXPECT_EQ(5u, stats().live);
    check();

    /* The same address registers anew */
    region_t *a2 = get(0x10000, 0x4000);
    EXPECT_NE(a, a2);
    expect_stats(3, 1, 6, 6, 3, 3);

    /* Holders' puts free without a second dereg */
    put(a);
    put(x);
    handle_t b_handle = put(b);
    put(d);
    EXPECT_EQ(3u, m_dereg_count);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_rcache_put(m_rcache, b_handle));
    EXPECT_EQ(1u, take_log().size());
    check();

    /* A range reaching past the end of the address space is clamped */
    invalidate(0x20000, SIZE_MAX);            /* c and e */
    expect_stats(1, 1, 6, 6, 5, 5);
    put(c);
    put(e);
    put(a2);
    expect_stats(0, 1, 6, 6, 6, 5);
}

TEST_F(rcache, reentrant_invalidate_from_dereg) {
    /* A free hook inside ibv_dereg_mr invalidates more memory while the
       outer invalidate is between its tree walk and its releases */
    region_t *a1 = get(0x10000, 0x4000);
    region_t *a2 = get(0x11000, 0x4000);
    region_t *a3 = get(0x12000, 0x4000);
    region_t *b1 = get(0x40000, 0x2000);
    region_t *b2 = get(0x41000, 0x2000);
    region_t *z  = get(0x80000, 0x1000);
    int depth    = 0;

    m_on_dereg = [&](region_t *region) {
        if (depth++ == 0) {
            invalidate(0x40000, 0x4000);  /* b1, b2 */
            invalidate(0x12000, 0x1000);  /* a*: already out of the tree */
            EXPECT_EQ(UCS_OK, uct_rc_gdr_rcache_check(m_rcache));
        }
        --depth;
    };

    invalidate(0x12000, 0x10);
    m_on_dereg = nullptr;

    for (region_t *r : {a1, a2, a3, b1, b2}) {
        EXPECT_FALSE(registered(r));
    }
    EXPECT_TRUE(registered(z));
    expect_stats(1, 0, 6, 6, 5, 5);
    check();

    for (region_t *r : {a1, a2, a3, b1, b2, z}) {
        put(r);
    }
    expect_stats(0, 0, 6, 6, 6, 5);
}

TEST_F(rcache, reentrant_invalidate_from_put) {
    /* The last put deregisters, and the free hook inside it invalidates */
    region_t *a = get(0x10000, 0x1000);
    region_t *b = get(0x20000, 0x1000);
    region_t *c = get(0x20000, 0x2000);

    m_on_dereg = [&](region_t *region) {
        if (region == a) {
            invalidate(0x20000, 0x1000);
            invalidate(0x10000, 0x1000);  /* a itself: already gone */
        }
    };

    put(a);
    m_on_dereg = nullptr;
    EXPECT_FALSE(registered(b));
    EXPECT_FALSE(registered(c));
    expect_stats(0, 0, 3, 3, 3, 2);
    check();

    put(b);
    put(c);
    EXPECT_EQ(3u, m_dereg_count);
}

TEST_F(rcache, reentrant_put_from_dereg) {
    /* While invalidate releases a list, a hook drops the last holder's
       reference of a region still waiting on that list */
    region_t *a = get(0x10000, 0x2000);
    region_t *b = get(0x11000, 0x2000);
    region_t *first = NULL;

    m_on_dereg = [&](region_t *region) {
        if (first == NULL) {
            first = region;
            put((region == a) ? b : a);
            EXPECT_EQ(UCS_OK, uct_rc_gdr_rcache_check(m_rcache));
        }
    };

    invalidate(0x11000, 0x1000);
    m_on_dereg = nullptr;

    EXPECT_FALSE(registered(a));
    EXPECT_FALSE(registered(b));
    EXPECT_EQ(2u, m_dereg_count);
    expect_stats(0, 0, 2, 2, 2, 2);
    EXPECT_EQ(1u, stats().live);   /* only `first' is still held */
    put(first);
    EXPECT_EQ(0u, stats().live);
}

TEST_F(rcache, reentrant_invalidate_from_reg) {
    /* Registering may free memory too (the allocator inside ibv_reg_mr) */
    region_t *old = get(0x50000, 0x1000);
    bool hooked   = false;

    m_on_reg = [&](region_t *region) {
        if (!hooked) {
            hooked = true;
            invalidate(0x50000, 0x1000);
        }
    };

    region_t *r = get(0x10000, 0x1000);
    m_on_reg = nullptr;

    EXPECT_FALSE(registered(old));
    EXPECT_TRUE(registered(r));
    expect_stats(1, 0, 2, 2, 1, 1);
    check();
    put(r);
    put(old);
}

/*
 * A handle is good for one put. Even when a later get is given the same
 * slot (the allocator of handles reuses it, as malloc reuses an address),
 * the old handle is refused and the new registration is untouched.
 */
TEST_F(rcache, stale_handle_of_reused_slot) {
    const uint64_t index_mask = (1ull << 24) - 1;

    for (bool kept : {false, true}) {
        region_t *a     = kept ? get_kept(0x10000, 0x1000) :
                                 get(0x10000, 0x1000);
        handle_t stale  = put(a);
        region_t *b     = NULL;
        unsigned rounds = 0;

        /* Register B at the same address until B's handle is in A's slot */
        do {
            if (b != NULL) {
                put(b);
            }
            b = kept ? get_kept(0x10000, 0x1000) : get(0x10000, 0x1000);
            ASSERT_LT(++rounds, 100000u);
        } while ((m_last & index_mask) != (stale & index_mask));

        EXPECT_NE(stale, m_last);
        uct_rc_gdr_rcache_stats_t before = stats();
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_rc_gdr_rcache_put(m_rcache, stale)) << kept;
        std::vector<std::string> log = take_log();
        ASSERT_EQ(1u, log.size());
        EXPECT_TRUE(contains(log[0], "not live")) << log[0];

        /* B intact: its registration, its reference, every counter */
        EXPECT_TRUE(registered(b));
        EXPECT_EQ(1u, b->refcount);
        uct_rc_gdr_rcache_stats_t after = stats();
        EXPECT_EQ(0, memcmp(&before, &after, sizeof(before)));
        check();

        put(b);
        if (kept) {
            invalidate(0x10000, 0x1000);
        }
        EXPECT_FALSE(registered(b));
    }
}

/*
 * A slot's generation wraps after 2^40 reuses: past the last one it goes to
 * 1, never 0, and keeps the slot's index; the old handle is refused.
 */
TEST_F(rcache, handle_generation_wraps_past_zero) {
    const int index_bits      = UCT_RC_GDR_RCACHE_HANDLE_INDEX_BITS;
    const uint64_t index_mask = UCS_MASK(index_bits);
    handle_t h = 0, next = 0;

    ASSERT_EQ(UCS_OK, uct_rc_gdr_rcache_get(m_rcache, (void*)0x10000, 0x1000,
                                            host_key(),
                                            &h));

    /* Age the slot to its last generation, as 2^40 - 1 reuses would */
    handle_t last = (~0ull << index_bits) | (h & index_mask);
    uct_rc_gdr_rcache_handle_ref(h)->handle = last;
    ASSERT_EQ(UCS_OK, uct_rc_gdr_rcache_put(m_rcache, last));

    /* The slot freed last is given out first */
    ASSERT_EQ(UCS_OK, uct_rc_gdr_rcache_get(m_rcache, (void*)0x10000, 0x1000,
                                            host_key(),
                                            &next));
    EXPECT_EQ(h & index_mask, next & index_mask);
    EXPECT_EQ(1u, next >> index_bits) << std::hex << next;

    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_rc_gdr_rcache_put(m_rcache, last));
    EXPECT_EQ(1u, take_log().size());
    EXPECT_EQ(UCS_OK, uct_rc_gdr_rcache_put(m_rcache, next));
    check();
}

/* The point of the cache: a buffer registered again and again, by users
   that each deregister it, is registered with the NIC once */
TEST_F(rcache, kept_registers_once) {
    for (unsigned i = 0; i < 100; ++i) {
        region_t *r = get_kept(0x40000 + (i % 3), 0x2000 - (i % 3));

        EXPECT_EQ(1u, r->refcount);
        put(r);
        EXPECT_TRUE(registered(r));
    }

    uct_rc_gdr_rcache_stats_t s = stats();
    EXPECT_EQ(1u, s.nic_regs);
    EXPECT_EQ(0u, s.nic_deregs);
    EXPECT_EQ(99u, s.hits);
    EXPECT_EQ(1u, s.entries);
    EXPECT_EQ(1u, s.cached);
    EXPECT_EQ(0u, s.handles);
    check();

    /* Unmapped: the kept registration goes at once */
    invalidate(0x41000, 1);
    expect_stats(0, 99, 1, 1, 1, 1);
    EXPECT_EQ(0u, stats().cached);
    EXPECT_EQ(0u, stats().live);
}

/* Without RETAIN the last put releases, as before; a kept region taken
   again leaves the kept list */
TEST_F(rcache, kept_and_released) {
    region_t *kept = get_kept(0x10000, 0x1000);
    region_t *once = get(0x20000, 0x1000);

    put(kept);
    put(once);
    EXPECT_TRUE(registered(kept));
    EXPECT_FALSE(registered(once));
    EXPECT_EQ(1u, stats().cached);

    /* Any get may take a kept region, with or without RETAIN */
    EXPECT_EQ(kept, get(0x10000, 0x10));
    EXPECT_EQ(0u, stats().cached);
    check();
    put(kept);
    EXPECT_EQ(1u, stats().cached);
    invalidate(0x10000, 0x1000);
    check();
}

/* Every get without SHARE registers for itself, and nothing is cached */
TEST_F(rcache, private_regions) {
    region_t *a = get(0x10000, 0x1000, 0, UCS_MEMORY_TYPE_HOST, 0, 0);
    region_t *b = get(0x10000, 0x1000, 0, UCS_MEMORY_TYPE_HOST, 0, 0);
    region_t *c = get(0x10000, 0x1000, 0, UCS_MEMORY_TYPE_HOST, 0,
                      UCT_RC_GDR_RCACHE_GET_FLAG_RETAIN);

    EXPECT_NE(a, b);
    EXPECT_NE(b, c);
    expect_stats(0, 0, 3, 3, 0, 0);
    EXPECT_EQ(3u, stats().live);
    check();

    /* Invalidation finds nothing to release: private regions go at put */
    invalidate(0x10000, 0x1000);
    expect_stats(0, 0, 3, 3, 0, 0);
    put(a);
    put(b);
    put(c);
    expect_stats(0, 0, 3, 3, 3, 0);
    EXPECT_EQ(0u, stats().live);
}

/* A region registered with less access than asked is no hit */
TEST_F(rcache, access_must_cover) {
    region_t *r1 = get_kept(0x10000, 0x4000, 0, UCS_MEMORY_TYPE_HOST, 0x1);
    region_t *r2 = get_kept(0x10000, 0x1000, 0, UCS_MEMORY_TYPE_HOST, 0x3);

    EXPECT_NE(r1, r2);
    EXPECT_EQ(0x3u, r2->access);
    EXPECT_EQ(r2, get(0x10000, 0x100, 0, UCS_MEMORY_TYPE_HOST, 0x2));
    region_t *h = get(0x10000, 0x100, 0, UCS_MEMORY_TYPE_HOST, 0x1);
    EXPECT_TRUE((h == r1) || (h == r2));
    EXPECT_EQ(r1, get(0x12000, 0x100, 0, UCS_MEMORY_TYPE_HOST, 0x1));
    expect_stats(2, 3, 2, 2, 0, 0);

    /* Less access than asked is not stale either: nothing released */
    put(r1);
    put(r2);
    put(r2);
    put(h);
    put(r1);
    expect_stats(2, 3, 2, 2, 0, 0);
    EXPECT_EQ(2u, stats().cached);
    invalidate(0x10000, 0x4000);
}

/* Kept regions beyond the count limit go, least recently used first */
TEST_F(rcache, lru_count_limit) {
    recreate(3, 0);

    region_t *r[5];
    for (unsigned i = 0; i < 4; ++i) {
        r[i] = get_kept(0x100000 * (i + 1), 0x1000);
        put(r[i]);
    }

    /* Four kept, limit three: the first went */
    EXPECT_FALSE(registered(r[0]));
    for (unsigned i = 1; i < 4; ++i) {
        EXPECT_TRUE(registered(r[i])) << i;
    }
    EXPECT_EQ(3u, stats().entries);
    EXPECT_EQ(1u, stats().evictions);

    /* Used again, r[1] is the most recent: r[2] is the oldest now */
    put(get_kept(0x200000, 0x10));
    r[4] = get_kept(0x500000, 0x1000);
    EXPECT_FALSE(registered(r[2]));
    EXPECT_TRUE(registered(r[1]));
    EXPECT_TRUE(registered(r[3]));
    EXPECT_EQ(2u, stats().evictions);
    check();
    put(r[4]);
    EXPECT_EQ(3u, stats().cached);
    invalidate(0, SIZE_MAX);
}

/* The size limit counts the bytes of every entry, held or not */
TEST_F(rcache, lru_size_limit) {
    recreate(0, 8 * PAGE);

    region_t *a = get_kept(0x100000, 4 * PAGE);
    region_t *b = get_kept(0x200000, 4 * PAGE);
    put(a);
    EXPECT_TRUE(registered(a));

    /* 12 pages with c: a, the only one nobody holds, goes */
    region_t *c = get_kept(0x300000, 4 * PAGE);
    EXPECT_FALSE(registered(a));
    EXPECT_EQ(8 * PAGE, stats().size);
    check();

    put(b);
    put(c);
    EXPECT_TRUE(registered(b));
    EXPECT_TRUE(registered(c));
    EXPECT_EQ(2u, stats().cached);

    /* One bigger than the limit alone: kept while held, gone at put */
    region_t *d = get_kept(0x400000, 16 * PAGE);
    EXPECT_FALSE(registered(b));
    EXPECT_FALSE(registered(c));
    EXPECT_TRUE(registered(d));
    put(d);
    EXPECT_FALSE(registered(d));
    expect_stats(0, 0, 4, 4, 4, 0);
    EXPECT_EQ(4u, stats().evictions);
}

/* Regions someone holds are never evicted, whatever the limits */
TEST_F(rcache, held_never_evicted) {
    recreate(1, 0);

    region_t *r[3];
    for (unsigned i = 0; i < 3; ++i) {
        r[i] = get_kept(0x100000 * (i + 1), 0x1000);
    }
    EXPECT_EQ(3u, stats().entries);
    for (unsigned i = 0; i < 3; ++i) {
        EXPECT_TRUE(registered(r[i]));
    }

    put(r[0]);
    put(r[1]);
    put(r[2]);
    EXPECT_FALSE(registered(r[0]));
    EXPECT_FALSE(registered(r[1]));
    EXPECT_TRUE(registered(r[2]));
    EXPECT_EQ(1u, stats().entries);
    check();
    invalidate(0x300000, 1);
}

/* fork() releases what is only kept (its pages would be MADV_DONTFORK in
   the child) and leaves what is held */
TEST_F(rcache, fork_releases_kept) {
    region_t *kept = get_kept(0x10000, 0x1000);
    region_t *held = get_kept(0x20000, 0x1000);
    int status;

    put(kept);
    EXPECT_EQ(1u, stats().cached);

    pid_t pid = fork();
    if (pid == 0) {
        _exit(0);
    }
    ASSERT_GT(pid, 0);
    ASSERT_EQ(pid, waitpid(pid, &status, 0));

    EXPECT_FALSE(registered(kept));
    EXPECT_TRUE(registered(held));
    EXPECT_EQ(0u, stats().cached);
    EXPECT_EQ(1u, stats().entries);
    check();
    put(held);
    EXPECT_EQ(1u, stats().cached);
    invalidate(0x20000, 0x1000);
}

/*
 * The direct cache answers repeated gets without a walk, but never for a
 * region another allocation overlaps: there the walk finds what is stale.
 */
TEST_F(rcache, direct_cache_keeps_stale_check) {
    const uintptr_t x = 0x700000;

    region_t *a = get(x, 0x100, 1, UCS_MEMORY_TYPE_CUDA);
    put(get(x, 0x100, 1, UCS_MEMORY_TYPE_CUDA));
    EXPECT_EQ(1u, stats().fast_hits);

    /* Another allocation in the same page, other bytes: both kept */
    region_t *b = get(x + 0x200, 0x100, 2, UCS_MEMORY_TYPE_CUDA);
    EXPECT_TRUE(registered(a));
    EXPECT_TRUE(registered(b));

    /* A again at its page: the slot of that page names A */
    put(get(x, 0x100, 1, UCS_MEMORY_TYPE_CUDA));
    EXPECT_TRUE(registered(b));

    /* B's bytes asked for with A's identity: B's allocation was freed,
       B is stale and released, A serves the request */
    EXPECT_EQ(a, get(x + 0x200, 0x80, 1, UCS_MEMORY_TYPE_CUDA));
    EXPECT_FALSE(registered(b));
    EXPECT_EQ(1u, stats().invalidations);
    check();

    put(a);
    put(a);
    put(b);
}

/*
 * A direct hit that asks for bytes the region's hull lacks grows the hull:
 * asked for with another identity, those bytes make the region stale.
 */
TEST_F(rcache, direct_hit_grows_hull) {
    const uintptr_t x = 0x900000;

    region_t *a = get(x, 0x100, 1, UCS_MEMORY_TYPE_CUDA);
    put(get(x + 0x800, 0x100, 1, UCS_MEMORY_TYPE_CUDA));
    EXPECT_EQ(1u, stats().fast_hits);
    check();

    /* Only the direct hit asked for these bytes with A's identity */
    region_t *b = get(x + 0x840, 0x80, 2, UCS_MEMORY_TYPE_CUDA);
    EXPECT_NE(a, b);
    EXPECT_FALSE(registered(a));
    EXPECT_TRUE(registered(b));
    EXPECT_EQ(1u, stats().invalidations);
    check();

    put(a);
    put(b);
}

/* A hull grown to the whole region by hits: any byte makes it stale */
TEST_F(rcache, whole_hull_stale_for_other_identity) {
    const uintptr_t x = 0xa00000;

    region_t *a = get(x, 0x80, 1, UCS_MEMORY_TYPE_CUDA);
    put(get(x, PAGE, 1, UCS_MEMORY_TYPE_CUDA));
    put(get(x + 0x40, 0x10, 1, UCS_MEMORY_TYPE_CUDA));
    EXPECT_EQ(2u, stats().fast_hits);
    check();

    region_t *b = get(x + PAGE - 0x10, 0x10, 2, UCS_MEMORY_TYPE_CUDA);
    EXPECT_FALSE(registered(a));
    EXPECT_EQ(1u, stats().invalidations);

    put(a);
    put(b);
}

/* 10,000 kept one-page regions: a repeated get is a direct hit */
TEST_F(rcache, direct_cache_many) {
    const unsigned n     = 10000;
    const uintptr_t base = 0x100000000ull;

    for (unsigned i = 0; i < n; ++i) {
        put(get_kept(base + i * PAGE, PAGE));
    }
    uct_rc_gdr_rcache_stats_t before = stats();
    for (unsigned i = 0; i < n; ++i) {
        put(get_kept(base + ((i * 7919) % n) * PAGE + 8, 64));
    }
    uct_rc_gdr_rcache_stats_t after = stats();

    EXPECT_EQ(n, after.entries);
    EXPECT_EQ(n, after.hits - before.hits);
    EXPECT_EQ(n, after.nic_regs);
    /* Nearly all from the direct cache: a slot holds one region */
    EXPECT_GT(after.fast_hits - before.fast_hits, n * 8 / 10);
    check();
    invalidate(base, n * PAGE);
    EXPECT_EQ(0u, stats().live);
}

/* The bytes each live handle asked for: what a peer may be given */
TEST_F(rcache, exposed_bytes) {
    const uintptr_t x = 0x100200;

    m_track     = true;
    region_t *r = get(x, 256);

    EXPECT_TRUE(exposes(r, x, 256));
    EXPECT_TRUE(exposes(r, x + 255, 1));
    EXPECT_TRUE(exposes(r, x + 256, 0));
    EXPECT_FALSE(exposes(r, x - 1, 1));
    EXPECT_FALSE(exposes(r, x + 256, 1));
    EXPECT_FALSE(exposes(r, x, 257));
    EXPECT_FALSE(exposes(r, r->start, 1));
    EXPECT_FALSE(exposes(r, x + 1, UINT64_MAX));

    /* A second registration in the region adds its own bytes, until put */
    region_t *s = get(x + 0x400, 16);
    EXPECT_EQ(r, s);
    EXPECT_TRUE(exposes(r, x + 0x400, 16));
    EXPECT_FALSE(exposes(r, x + 0x300, 0x110));
    put(s);
    EXPECT_FALSE(exposes(r, x + 0x400, 16));
    EXPECT_TRUE(exposes(r, x, 256));
    put(r);
}

TEST_F(rcache, stats_scenario) {
    region_t *r[4];

    expect_stats(0, 0, 0, 0, 0, 0);
    r[0] = get(0x1000, 0x3000);               /* miss */
    expect_stats(1, 0, 1, 1, 0, 0);
    r[1] = get(0x2000, 0x10);                 /* contained: hit */
    expect_stats(1, 1, 1, 1, 0, 0);
    r[2] = get(0x3000, 0x2000);               /* partial: miss */
    expect_stats(2, 1, 2, 2, 0, 0);
    r[3] = get(0x3000, 0x2000);               /* exact: hit */
    expect_stats(2, 2, 2, 2, 0, 0);
    put(r[1]);                                /* 1 reference left */
    expect_stats(2, 2, 2, 2, 0, 0);
    put(r[0]);                                /* last one */
    expect_stats(1, 2, 2, 2, 1, 0);
    invalidate(0x4000, 1);                    /* r[2], still held twice */
    expect_stats(0, 2, 2, 2, 2, 1);
    EXPECT_EQ(1u, stats().live);
    put(r[2]);
    put(r[3]);
    expect_stats(0, 2, 2, 2, 2, 1);
    EXPECT_EQ(0u, stats().live);
}

TEST_F(rcache, destroy_with_references) {
    region_t *a = get(0x10000, 0x1000);
    region_t *b = get(0x20000, 0x1000);
    region_t *c = get(0x30000, 0x1000);

    get(0x10000, 0x1000);
    invalidate(0x30000, 0x1000);              /* c: held, released */
    EXPECT_FALSE(registered(c));
    EXPECT_TRUE(registered(a));
    EXPECT_TRUE(registered(b));

    uct_rc_gdr_rcache_destroy(m_rcache);
    m_rcache = NULL;

    /* Every registration released, each leaked region named */
    EXPECT_TRUE(m_registered.empty());
    EXPECT_EQ(3u, m_dereg_count);
    std::vector<std::string> log = take_log();
    ASSERT_EQ(3u, log.size());
    for (const std::string &message : log) {
        EXPECT_TRUE(contains(message, "still referenced")) << message;
    }
}

TEST_F(rcache, bad_params) {
    uct_rc_gdr_rcache_ops_t no_dereg = {rcache::mem_reg_cb, NULL};
    uct_rc_gdr_rcache_params_t params;
    uct_rc_gdr_rcache_t *other;

    params.page_size   = 3000;
    params.priv_size   = 0;
    params.ops         = &ops;
    params.arg         = this;
    params.name        = NULL;
    params.max_regions = 0;
    params.max_size    = 0;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_rcache_create(&params, &other));

    /* A hull's ends must fit in 16 bits */
    params.page_size = 1ul << 17;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_rcache_create(&params, &other));

    params.page_size = PAGE;
    params.ops       = &no_dereg;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_rcache_create(&params, &other));
    EXPECT_EQ(3u, take_log().size());

    /* A private area a block cannot hold a few of */
    params.ops       = &ops;
    params.priv_size = 1ul << 20;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_rcache_create(&params, &other));
    EXPECT_EQ(1u, take_log().size());

    /* No private area and the default name */
    params.priv_size = 0;
    ASSERT_EQ(UCS_OK, uct_rc_gdr_rcache_create(&params, &other));
    uct_rc_gdr_rcache_destroy(other);
}

/* Access bits and memory types a region cannot hold are refused */
TEST_F(rcache, get_out_of_range) {
    const unsigned share = UCT_RC_GDR_RCACHE_GET_FLAG_SHARE;
    handle_t handle      = 0;

    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_rcache_get(m_rcache, (void*)0x100000, 64,
                                    rcache_key(UCS_MEMORY_TYPE_HOST, 0,
                                               UCT_RC_GDR_RCACHE_ACCESS_MAX + 1,
                                               share),
                                    &handle));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_rcache_get(m_rcache, (void*)0x100000, 64,
                                    rcache_key(256, 0, 0, share), &handle));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_rcache_get(m_rcache, (void*)0x100000, 64,
                                    rcache_key(UINT16_MAX, 0, 0, 0),
                                    &handle));
    EXPECT_EQ(0u, handle);
    EXPECT_EQ(3u, take_log().size());
    EXPECT_EQ(0u, stats().live);
}

/*
 * Thousands of random operations against a simple model of the semantics,
 * with the tree validated after each one.
 */
TEST_F(rcache, random_vs_model) {
    struct model_region {
        region_t  *ptr;
        uintptr_t start, end, used_start, used_end;
        uint64_t  buffer_id;
        int       mem_type;
        unsigned  refs;
        bool      cached;
    };
    struct identity {
        uint64_t buffer_id;
        int      mem_type;
    };

    const identity identities[] = {
        {0, UCS_MEMORY_TYPE_HOST}, {0, UCS_MEMORY_TYPE_HOST},
        {1, UCS_MEMORY_TYPE_CUDA}, {2, UCS_MEMORY_TYPE_CUDA},
        {3, UCS_MEMORY_TYPE_CUDA_MANAGED}
    };
    const uintptr_t base  = 0x10000000;
    const unsigned  pages = 64;
    const unsigned  steps = 6000;
    std::vector<model_region> model;
    std::mt19937 rng(12345);
    uint64_t hits = 0, misses = 0, deregs = 0, invalidations = 0;
    uint64_t junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};

    m_track = true; /* the handle lists are checked after every step */
    std::vector<handle_t> put_handles;
    unsigned gets = 0, puts = 0, invals = 0;

    auto rnd = [&](uint64_t n) {
        return (uint64_t)std::uniform_int_distribution<uint64_t>(0, n - 1)(
                rng);
    };

    for (unsigned step = 0; step < steps; ++step) {
        unsigned op = rnd(100);

        if ((op < 50) || model.empty()) {
            /* get: often inside a region that is already cached */
            identity id = identities[rnd(5)];
            uintptr_t address;
            size_t length;

            if (!model.empty() && (rnd(2) == 0)) {
                const model_region &m = model[rnd(model.size())];
                address = m.start + rnd(m.end - m.start);
                length  = 1 + rnd(m.end - address);
                if (rnd(2) == 0) {
                    id = {m.buffer_id, m.mem_type};
                }
            } else {
                address = base + rnd(pages * PAGE);
                length  = 1 + rnd((1 + rnd(8)) * PAGE);
            }

            uintptr_t start = address & ~(PAGE - 1);
            uintptr_t end   = (address + length + PAGE - 1) & ~(PAGE - 1);
            std::vector<region_t*> candidates;

            for (model_region &m : model) {
                if (!m.cached || (m.start > start) || (m.end < end)) {
                    continue;
                }
                if ((m.buffer_id == id.buffer_id) &&
                    (m.mem_type == id.mem_type)) {
                    candidates.push_back(m.ptr);
                } else if ((m.used_start < address + length) &&
                           (m.used_end > address)) {
                    m.cached = false;
                    ++deregs;
                    ++invalidations;
                }
            }

            region_t *r = get(address, length, id.buffer_id, id.mem_type);
            ASSERT_TRUE(r != NULL);
            if (!candidates.empty()) {
                ASSERT_TRUE(std::find(candidates.begin(), candidates.end(),
                                      r) != candidates.end()) << step;
                for (model_region &m : model) {
                    if (m.ptr == r) {
                        ++m.refs;
                        m.used_start = std::min(m.used_start, address);
                        m.used_end   = std::max(m.used_end, address + length);
                    }
                }
                ++hits;
            } else {
                for (const model_region &m : model) {
                    ASSERT_NE(m.ptr, r) << step;
                }
                EXPECT_EQ(start, r->start);
                EXPECT_EQ(end, r->end);
                model.push_back({r, start, end, address, address + length,
                                 id.buffer_id, id.mem_type, 1, true});
                ++misses;
            }
            ++gets;
        } else if (op < 88) {
            size_t i = rnd(model.size());

            put_handles.push_back(put(model[i].ptr));
            if (--model[i].refs == 0) {
                if (model[i].cached) {
                    ++deregs;
                }
                model.erase(model.begin() + i);
            }
            ++puts;
        } else if (op < 98) {
            uintptr_t address = base + rnd(pages * PAGE);
            size_t length     = rnd(4 * PAGE);

            for (model_region &m : model) {
                if (m.cached && (length > 0) && (m.start < address + length) &&
                    (m.end > address)) {
                    m.cached = false;
                    ++deregs;
                    ++invalidations;
                }
            }
            invalidate(address, length);
            ++invals;
        } else {
            /* A handle already put, or junk */
            handle_t bad = (!put_handles.empty() && (rnd(2) == 0)) ?
                           put_handles[rnd(put_handles.size())] :
                           (handle_t)junk[rnd(8)] * 0x9e3779b97f4a7c15ull;
            EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                      uct_rc_gdr_rcache_put(m_rcache, bad));
            EXPECT_EQ(1u, take_log().size());
        }

        ASSERT_EQ(UCS_OK, uct_rc_gdr_rcache_check(m_rcache)) << step;

        uct_rc_gdr_rcache_stats_t s = stats();
        uint64_t cached = std::count_if(model.begin(), model.end(),
                                        [](const model_region &m) {
                                            return m.cached;
                                        });
        ASSERT_EQ(cached, s.entries) << step;
        ASSERT_EQ(model.size(), s.live) << step;
        ASSERT_EQ(hits, s.hits) << step;
        ASSERT_EQ(misses, s.misses) << step;
        ASSERT_EQ(misses, s.nic_regs) << step;
        ASSERT_EQ(deregs, s.nic_deregs) << step;
        ASSERT_EQ(invalidations, s.invalidations) << step;
        ASSERT_EQ(cached, m_registered.size()) << step;
        for (const model_region &m : model) {
            ASSERT_EQ(m.cached, registered(m.ptr)) << step;
            ASSERT_EQ(m.refs, m.ptr->refcount) << step;
            ASSERT_EQ(m.start, m.ptr->start) << step;
            ASSERT_EQ(m.end, m.ptr->end) << step;
        }
    }

    /* The mix really exercised every path */
    EXPECT_GT(hits, 500u);
    EXPECT_GT(misses, 500u);
    EXPECT_GT(invalidations, 100u);
    EXPECT_GT(puts, 1000u);
    EXPECT_GT(invals, 200u);

    while (!model.empty()) {
        put(model.back().ptr);
        if (--model.back().refs == 0) {
            model.pop_back();
        }
    }
    check();
    EXPECT_EQ(0u, stats().entries);
}

/*
 * 10k disjoint regions inserted in address order (a plain BST would become a
 * list) and 10k more that overlap their neighbours: every lookup examines
 * O(log n) tree nodes, and the whole scenario takes milliseconds.
 */
TEST_F(rcache, many_regions) {
    const unsigned n        = 10000;
    const uintptr_t base    = 0x100000000ull;
    const uintptr_t overlap = 0x800000000ull;
    auto t0                 = std::chrono::steady_clock::now();
    std::vector<region_t*> regions;
    uint64_t steps, max_steps = 0;

    /* An AVL tree of 2n nodes is at most 1.44 log2(2n) high; a lookup walks
       a few root-to-leaf paths */
    const uint64_t bound = 4 * (uint64_t)std::ceil(std::log2(2.0 * n)) + 8;

    auto timed_get = [&](uintptr_t address, size_t length) {
        uint64_t before = stats().lookup_steps;
        region_t *r     = get(address, length);

        steps     = stats().lookup_steps - before;
        max_steps = std::max(max_steps, steps);
        return r;
    };

    for (unsigned i = 0; i < n; ++i) {
        regions.push_back(timed_get(base + 2 * i * PAGE, PAGE));
    }
    /* Each one overlaps the next 15: every page is under 16 regions */
    for (unsigned i = 0; i < n; ++i) {
        regions.push_back(timed_get(overlap + i * PAGE, 16 * PAGE));
    }
    EXPECT_EQ(2u * n, stats().entries);
    check();

    for (unsigned i = 0; i < n; ++i) {
        EXPECT_EQ(regions[i], timed_get(base + 2 * i * PAGE + 1, 10));
        EXPECT_EQ(regions[n + i], timed_get(overlap + i * PAGE, 16 * PAGE));
    }
    expect_stats(2 * n, 2 * n, 2 * n, 2 * n, 0, 0);
    EXPECT_LE(max_steps, bound);

    /* Removal in random order keeps the tree valid */
    std::mt19937 rng(4242);
    std::shuffle(regions.begin(), regions.end(), rng);
    for (unsigned i = 0; i < regions.size(); ++i) {
        put(regions[i]);
        put(regions[i]);
        if ((i % 1000) == 0) {
            check();
        }
    }
    expect_stats(0, 2 * n, 2 * n, 2 * n, 2 * n, 0);

    double seconds = std::chrono::duration<double>(
            std::chrono::steady_clock::now() - t0).count();
    std::printf("[ info     ] %u regions, max %lu nodes per lookup (bound"
                " %lu), %.3f s\n", 2 * n, max_steps, bound, seconds);
    /* Generous enough for valgrind; quadratic behaviour takes far longer */
    EXPECT_LT(seconds, 30.0);
}

/* One lock serializes everything: concurrent users and a freeing thread */
TEST_F(rcache, threads) {
    const unsigned nthreads = 4;
    const unsigned iters    = 2000;
    std::vector<std::thread> threads;

    for (unsigned t = 0; t < nthreads; ++t) {
        threads.emplace_back([this, t]() {
            std::mt19937 rng(t);
            std::vector<handle_t> held;

            for (unsigned i = 0; i < iters; ++i) {
                /* Half private pages, half shared with the other threads */
                uintptr_t address = ((i % 2) ? 0x100000 : 0x200000 * (t + 2)) +
                                    (rng() % 32) * PAGE;
                unsigned flags = ((i % 4) == 0) ?
                                 0 : UCT_RC_GDR_RCACHE_GET_FLAG_SHARE;
                handle_t h;

                if (uct_rc_gdr_rcache_get(m_rcache, (void*)address,
                                          1 + rng() % (4 * PAGE),
                                          rcache_key(UCS_MEMORY_TYPE_HOST, 0,
                                                     0, flags),
                                          &h) == UCS_OK) {
                    held.push_back(h);
                }
                if ((held.size() > 8) || (rng() % 3 == 0)) {
                    size_t k = rng() % held.size();
                    EXPECT_EQ(UCS_OK, uct_rc_gdr_rcache_put(m_rcache,
                                                            held[k]));
                    held.erase(held.begin() + k);
                }
                if ((t == 0) && (i % 16 == 0)) {
                    uct_rc_gdr_rcache_invalidate(m_rcache, (void*)0x100000,
                                                 32 * PAGE);
                }
            }

            for (handle_t h : held) {
                EXPECT_EQ(UCS_OK, uct_rc_gdr_rcache_put(m_rcache, h));
            }
        });
    }

    for (std::thread &thread : threads) {
        thread.join();
    }

    check();
    uct_rc_gdr_rcache_stats_t s = stats();
    EXPECT_EQ(0u, s.entries);
    EXPECT_EQ(0u, s.live);
    EXPECT_EQ(nthreads * iters, s.hits + s.misses);
    EXPECT_EQ(s.nic_regs, s.nic_deregs);
    EXPECT_GT(s.invalidations, 0u);
    EXPECT_GT(s.hits, 0u);
}


/*
 * A free hook never waits for the cache's lock. The thread inside mem_reg
 * (ibv_reg_mr) may be waiting for a lock the freeing thread holds: the
 * provider's device lock, a malloc arena. Here the registering thread waits
 * for "device", which is let go only after the free returned or 10 s
 * passed, so a free that waits fails the test instead of hanging it. The
 * queued free is applied as the registering thread lets go of the cache.
 */
TEST_F(rcache, free_hook_queues_while_a_registration_waits) {
    region_t *old = get_kept(0x50000, 0x1000);
    std::mutex device;
    handle_t handle = 0;
    bool returned;

    put(old);                                  /* kept, unreferenced */
    std::thread registrar = registration_waiting_for(device, &handle);

    std::future<void> freed = std::async(std::launch::async, [this]() {
        invalidate(0x50000, 0x1000);
    });
    returned = (freed.wait_for(std::chrono::seconds(10)) ==
                std::future_status::ready);
    device.unlock();
    registrar.join();
    freed.wait();
    m_on_reg = nullptr;

    EXPECT_TRUE(returned) << "the free waited for the registering thread";
    EXPECT_FALSE(registered(old));             /* applied at its release */
    uct_rc_gdr_rcache_stats_t s = stats();
    EXPECT_EQ(1u, s.invalidations_queued);
    EXPECT_EQ(1u, s.invalidations);
    EXPECT_EQ(1u, s.entries);
    check();

    /* The freed range is registered anew, not served by the old region */
    region_t *again = get(0x50000, 0x1000);
    EXPECT_EQ(s.nic_regs + 1, stats().nic_regs);
    EXPECT_TRUE(registered(again));
    put(again);
    EXPECT_EQ(UCS_OK, uct_rc_gdr_rcache_put(m_rcache, handle));
}

/* More frees than the queue holds, while a registration waits: the hook
   that finds it full waits for room, and none is lost */
TEST_F(rcache, free_hook_queue_full_loses_nothing) {
    const unsigned n = 2 * UCT_RC_GDR_RCACHE_INV_MAX + 1;
    std::vector<region_t*> kept;
    std::mutex device;
    handle_t handle = 0;

    for (unsigned i = 0; i < n; ++i) {
        kept.push_back(get_kept(0x1000000 + i * 0x10000, 0x1000));
        put(kept.back());
    }

    std::thread registrar = registration_waiting_for(device, &handle);

    std::thread freeing([this, n]() {
        for (unsigned i = 0; i < n; ++i) {
            invalidate(0x1000000 + i * 0x10000, 0x1000);
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    device.unlock();
    registrar.join();
    freeing.join();
    m_on_reg = nullptr;

    uct_rc_gdr_rcache_stats_t s = stats();
    for (unsigned i = 0; i < n; ++i) {
        EXPECT_FALSE(registered(kept[i])) << i;
    }
    EXPECT_EQ(n, s.invalidations);
    EXPECT_GE(s.invalidations_queued, 1u);
    EXPECT_EQ(1u, s.entries);
    check();
    EXPECT_EQ(UCS_OK, uct_rc_gdr_rcache_put(m_rcache, handle));
}


/* At a resource limit the owner releases every kept region at once, held
   ones stay; the tree and the counters stay consistent */
TEST_F(rcache, evict_kept) {
    region_t *held = get_kept(0x100000, 0x1000);
    region_t *kept[3];

    for (unsigned i = 0; i < 3; ++i) {
        kept[i] = get_kept(0x10000 * (i + 1), 0x2000);
        put(kept[i]);
    }
    EXPECT_EQ(3u, stats().cached);

    EXPECT_EQ(3u, uct_rc_gdr_rcache_evict_kept(m_rcache));
    for (unsigned i = 0; i < 3; ++i) {
        EXPECT_FALSE(registered(kept[i])) << i;
    }
    EXPECT_TRUE(registered(held));
    uct_rc_gdr_rcache_stats_t s = stats();
    EXPECT_EQ(0u, s.cached);
    EXPECT_EQ(1u, s.entries);
    EXPECT_EQ(3u, s.evictions);
    check();

    /* Nothing kept: nothing to release */
    EXPECT_EQ(0u, uct_rc_gdr_rcache_evict_kept(m_rcache));

    /* A get of an evicted range registers anew */
    region_t *again = get_kept(0x10000, 0x2000);
    EXPECT_EQ(5u, stats().nic_regs);
    put(again);
    put(held);
}
