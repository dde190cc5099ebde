/**
 * Unit tests of the rc_gdr registration cache. The ops only record calls and
 * never touch memory, so the addresses are made up.
 *
 * See file LICENSE for terms.
 */

#include <uct/ib_gdr/rc_gdr_rcache.h>

#include <ucs/debug/log_def.h>
#include <ucs/memory/memory_type.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

const size_t   PAGE       = 4096;
const uint64_t PRIV_MAGIC = 0x7263616368650001ull;

typedef uct_rc_gdr_rcache_region_t region_t;

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

        params.page_size = PAGE;
        params.priv_size = 2 * sizeof(uint64_t);
        params.ops       = &ops;
        params.arg       = this;
        params.name      = "test";
        ASSERT_EQ(UCS_OK, uct_rc_gdr_rcache_create(&params, &m_rcache));
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

    region_t *get(uintptr_t address, size_t length, uint64_t buffer_id = 0,
                  int mem_type = UCS_MEMORY_TYPE_HOST)
    {
        region_t *region = NULL;
        ucs_status_t status;

        status = uct_rc_gdr_rcache_get(m_rcache, (void*)address, length,
                                       mem_type, buffer_id, &region);
        EXPECT_EQ(UCS_OK, status) << std::hex << address << " " << length;
        EXPECT_TRUE(region != NULL);
        return region;
    }

    void put(region_t *region)
    {
        EXPECT_EQ(UCS_OK, uct_rc_gdr_rcache_put(m_rcache, region));
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
    region_t *region = (region_t*)0x1;

    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_rcache_get(m_rcache, (void*)0x1000, 0,
                                    UCS_MEMORY_TYPE_HOST, 0, &region));
    EXPECT_EQ((region_t*)0x1, region); /* output set only on success */

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
    region_t *region;

    for (const auto &range : bad) {
        region = NULL;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_rc_gdr_rcache_get(m_rcache, (void*)range[0], range[1],
                                        UCS_MEMORY_TYPE_HOST, 0, &region))
                << std::hex << range[0] << " " << range[1];
        EXPECT_TRUE(region == NULL);

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
    region_t *region = (region_t*)0x1;

    m_reg_status = UCS_ERR_IO_ERROR;
    EXPECT_EQ(UCS_ERR_IO_ERROR,
              uct_rc_gdr_rcache_get(m_rcache, (void*)0x10000, 0x1000,
                                    UCS_MEMORY_TYPE_HOST, 0, &region));
    EXPECT_EQ((region_t*)0x1, region);
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
    region_t *r = get(0x10000, 0x2000);

    put(r);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_rc_gdr_rcache_put(m_rcache, r));

    std::vector<std::string> log = take_log();
    ASSERT_EQ(1u, log.size());
    EXPECT_TRUE(contains(log[0], "not live")) << log[0];
    EXPECT_EQ(1u, m_dereg_count);
    expect_stats(0, 0, 1, 1, 1, 0);
}

TEST_F(rcache, garbage_put) {
    /* Dereferencing any of these would crash or be reported by valgrind */
    uint64_t junk[16];
    region_t *bad[] = {NULL, (region_t*)0x8, (region_t*)0xdead0000,
                       (region_t*)junk};
    region_t *r     = get(0x10000, 0x1000);

    for (region_t *p : bad) {
        EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_rc_gdr_rcache_put(m_rcache, p));
    }

    EXPECT_EQ(4u, take_log().size());
    EXPECT_EQ(1u, r->refcount);
    expect_stats(1, 0, 1, 1, 0, 0);
    put(r);
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
    put(b);
    put(d);
    EXPECT_EQ(3u, m_dereg_count);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_rc_gdr_rcache_put(m_rcache, b));
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

    params.page_size = 3000;
    params.priv_size = 0;
    params.ops       = &ops;
    params.arg       = this;
    params.name      = NULL;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_rcache_create(&params, &other));

    params.page_size = PAGE;
    params.ops       = &no_dereg;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rc_gdr_rcache_create(&params, &other));
    EXPECT_EQ(2u, take_log().size());

    /* No private area and the default name */
    params.ops = &ops;
    ASSERT_EQ(UCS_OK, uct_rc_gdr_rcache_create(&params, &other));
    uct_rc_gdr_rcache_destroy(other);
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
    uint64_t junk[8];
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

            put(model[i].ptr);
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
            /* A stack object, or an odd address malloc never returns */
            region_t *bad = (rnd(2) == 0) ? (region_t*)junk :
                            (region_t*)(uintptr_t)(base + 2 * rnd(1 << 20) +
                                                   1);
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
            std::vector<region_t*> held;

            for (unsigned i = 0; i < iters; ++i) {
                /* Half private pages, half shared with the other threads */
                uintptr_t address = ((i % 2) ? 0x100000 : 0x200000 * (t + 2)) +
                                    (rng() % 32) * PAGE;
                region_t *r;

                if (uct_rc_gdr_rcache_get(m_rcache, (void*)address,
                                          1 + rng() % (4 * PAGE),
                                          UCS_MEMORY_TYPE_HOST, 0,
                                          &r) == UCS_OK) {
                    held.push_back(r);
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

            for (region_t *r : held) {
                EXPECT_EQ(UCS_OK, uct_rc_gdr_rcache_put(m_rcache, r));
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
