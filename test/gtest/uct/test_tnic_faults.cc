/*
 * Faults of the stand-in NIC (test/tnic, its README's "Fault specs") under
 * rc_gdr: each ends in the error or the fallback rc_gdr documents, in a
 * bounded time, and leaves nothing behind: once the nodes are closed the
 * stand-in counts as many QPs, CQs, SRQs, MRs, registered bytes and
 * outstanding work requests as before the test. Without the stand-in NIC
 * (a real libibverbs) every test skips and says why.
 *
 * See file LICENSE for terms.
 */

#include "uct_rc_gdr_test.h"
#include "../../tnic/tnic_test.h"

#include <infiniband/verbs.h>

#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <vector>


/* The md counters up to limit_retries (uct_rc_gdr_md_stats_t, rc_gdr_md.h;
 * fallbacks[] has one entry per uct_rc_gdr_md_reg_cause_t) */
typedef struct {
    uint64_t size, host_regs, dmabuf_regs, peermem_regs, bounce_regs,
             cache_hits, cache_entries, invalidations, num_gpus, emulated_gpu,
             cache_misses, cache_kept, cache_evictions, deregs, host_cache,
             gpu_cache, fallbacks[3], limit_retries;
} tnic_fault_md_stats_t;


class tnic_fault : public uct_rc_gdr_test {
protected:
    static const size_t BUF_SIZE = 256 * 1024;

    void SetUp() override;
    void TearDown() override;

    /* Sets a fault spec of the stand-in now (what RC_GDR_TNIC_FAULT says) */
    void fault(const char *spec);

    /* Closes the nodes and checks the stand-in counts what it counted
     * before the test */
    void expect_nothing_left();

    /* A put from a's buffer at offset into b's at the same offset, waited
     * for up to the operation timeout */
    ucs_status_t put(size_t offset, size_t length);

    /* Puts until one fails (at most max); their count in *ok_p */
    ucs_status_t put_until_error(int max, int *ok_p);

    /* Progresses until a's error handler ran, up to bound_s seconds */
    bool wait_ep_error(double bound_s);

    /* wc_error:after=N:status=STATUS: the put it hits, and the endpoint's
     * error handler, end with expected */
    void check_wc_error(const char *status, ucs_status_t expected);

    /* uct_md_mem_reg of length bytes of a fresh buffer on a's md */
    ucs_status_t mem_reg(size_t length, uct_mem_h *memh_p);

    tnic_fault_md_stats_t md_stats();

    void rkey_unpack();

    /* Whether the NIC registration behind b's buffer asked for PCIe
     * relaxed ordering (the stand-in's record of the MR's flags) */
    bool peer_mr_relaxed_order();

    int  (*m_fault_set)(const char*)             = nullptr;
    int  (*m_mr_access)(uint32_t, int*)          = nullptr;
    void (*m_fault_clear)(void)                  = nullptr;
    void (*m_counters)(tnic_test_counters_t*)    = nullptr;
    tnic_test_counters_t m_before;
    uct_rkey_bundle_t    m_rkey;
    bool                 m_rkey_unpacked = false;
    std::vector<std::vector<char>> m_bufs;      /* mem_reg's buffers */
};


void tnic_fault::SetUp()
{
    stand_in_api_t api;

    uct_rc_gdr_test::SetUp();
    if (IsSkipped()) {
        return;
    }

    if (!stand_in_api(&api)) {
        GTEST_SKIP() << "the stand-in NIC is not loaded: its faults need it"
                        " (LD_LIBRARY_PATH=<build>/test/tnic/lib,"
                        " RC_GDR_DEV_A=tnic0:1 RC_GDR_DEV_B=tnic1:1;"
                        " test/tnic/run.sh)";
    }

    m_fault_set   = api.fault_set;
    m_fault_clear = api.fault_clear;
    m_counters    = api.counters;
    m_mr_access   = api.mr_access;
    m_fault_clear();
    m_counters(&m_before);
}

void tnic_fault::TearDown()
{
    if (m_rkey_unpacked) {
        uct_rkey_release(a->component, &m_rkey);
        m_rkey_unpacked = false;
    }
    if (m_fault_clear != NULL) {
        m_fault_clear();
    }
    uct_rc_gdr_test::TearDown();
}

void tnic_fault::fault(const char *spec)
{
    ASSERT_EQ(0, m_fault_set(spec)) << "fault spec '" << spec << "'";
}

void tnic_fault::expect_nothing_left()
{
    tnic_test_counters_t after;

    if (m_rkey_unpacked) {
        uct_rkey_release(a->component, &m_rkey);
        m_rkey_unpacked = false;
    }
    m_fault_clear();
    if (b != nullptr) {
        node_close(b);
    }
    if (a != nullptr) {
        node_close(a);
    }
    m_counters(&after);
    printf("stand-in counters after close: %ld QPs, %ld CQs, %ld SRQs, "
           "%ld MRs (%" PRIu64 " bytes), %ld PDs, %ld outstanding WRs\n",
           after.qps, after.cqs, after.srqs, after.mrs, after.reg_bytes,
           after.pds, after.wrs);
    UCT_TEST_EXPECT(after.qps == m_before.qps, "QPs %ld -> %ld",
                    m_before.qps, after.qps);
    UCT_TEST_EXPECT(after.cqs == m_before.cqs, "CQs %ld -> %ld",
                    m_before.cqs, after.cqs);
    UCT_TEST_EXPECT(after.srqs == m_before.srqs, "SRQs %ld -> %ld",
                    m_before.srqs, after.srqs);
    UCT_TEST_EXPECT(after.mrs == m_before.mrs, "MRs %ld -> %ld",
                    m_before.mrs, after.mrs);
    UCT_TEST_EXPECT(after.reg_bytes == m_before.reg_bytes,
                    "registered bytes %" PRIu64 " -> %" PRIu64,
                    m_before.reg_bytes, after.reg_bytes);
    UCT_TEST_EXPECT(after.pds == m_before.pds, "PDs %ld -> %ld",
                    m_before.pds, after.pds);
    UCT_TEST_EXPECT(after.wrs == m_before.wrs, "outstanding WRs %ld -> %ld",
                    m_before.wrs, after.wrs);
}

void tnic_fault::rkey_unpack()
{
    ucs_status_t status = uct_rkey_unpack(a->component, wb.rkey, &m_rkey);

    ASSERT_EQ(UCS_OK, status) << ucs_status_string(status);
    m_rkey_unpacked = true;
}

bool tnic_fault::peer_mr_relaxed_order()
{
    int access = 0;

    /* the low 32 bits of rc_gdr's rkey are the NIC's */
    EXPECT_EQ(0, m_mr_access((uint32_t)m_rkey.rkey, &access))
        << "no MR of key 0x" << std::hex << (uint32_t)m_rkey.rkey;
    return (access & IBV_ACCESS_RELAXED_ORDERING) != 0;
}

ucs_status_t tnic_fault::put(size_t offset, size_t length)
{
    uct_test_comp_t comp;
    ucs_status_t status;
    uct_iov_t iov;

    uct_test_iov_init(&iov, (char*)a->buf + offset, length, a->memh);
    uct_test_comp_init(&comp);
    status = UCT_TEST_RETRY(nodes, 2,
                            uct_ep_put_zcopy(a->ep, &iov, 1, wb.buf + offset,
                                             m_rkey.rkey, &comp.comp));
    return uct_test_comp_wait(nodes, 2, status, &comp);
}

ucs_status_t tnic_fault::put_until_error(int max, int *ok_p)
{
    ucs_status_t status = UCS_OK;
    int i;

    *ok_p = 0;
    for (i = 0; (i < max) && (status == UCS_OK); ++i) {
        status = put(0, 4096);
        if (status == UCS_OK) {
            ++*ok_p;
        }
    }
    return status;
}

bool tnic_fault::wait_ep_error(double bound_s)
{
    double deadline = uct_test_now() + bound_s;

    while (!a->ep_error && (uct_test_now() < deadline)) {
        uct_test_progress(nodes, 2);
    }
    return a->ep_error;
}

void tnic_fault::check_wc_error(const char *wc_status, ucs_status_t expected)
{
    char spec[64];
    ucs_status_t status;
    int ok;

    pair_open(BUF_SIZE);
    rkey_unpack();
    snprintf(spec, sizeof(spec), "wc_error:after=4:status=%s", wc_status);
    fault(spec);

    status = put_until_error(64, &ok);
    printf("%s: %d puts completed, then %s; error handler: %s\n", spec, ok,
           ucs_status_string(status),
           wait_ep_error(5.0) ? ucs_status_string(a->ep_error_status) :
                                "not called");
    /* the spec counts every send of the process, credits included */
    UCT_TEST_EXPECT((ok >= 1) && (ok <= 4), "%d puts before the error", ok);
    UCT_TEST_EXPECT(status == expected, "the put failed with %s, not %s",
                    ucs_status_string(status), ucs_status_string(expected));
    UCT_TEST_EXPECT(a->ep_error && (a->ep_error_status == expected),
                    "error handler called with %s",
                    ucs_status_string(a->ep_error_status));
    /* a later operation ends at once, with an error, and does not hang */
    status = put(0, 8);
    UCT_TEST_EXPECT((status != UCS_OK) && (status != UCS_ERR_TIMED_OUT),
                    "a put after the error: %s", ucs_status_string(status));
    expect_nothing_left();
}

ucs_status_t tnic_fault::mem_reg(size_t length, uct_mem_h *memh_p)
{
    m_bufs.emplace_back(length, 1);
    return uct_md_mem_reg(a->md, m_bufs.back().data(), length,
                          UCT_MD_MEM_ACCESS_ALL, memh_p);
}

tnic_fault_md_stats_t tnic_fault::md_stats()
{
    typedef ucs_status_t (*query_t)(uct_md_h, tnic_fault_md_stats_t*);
    query_t query = (query_t)uct_test_module_sym("uct_rc_gdr_md_stats_query");
    tnic_fault_md_stats_t stats;

    memset(&stats, 0, sizeof(stats));
    stats.size = sizeof(stats);
    EXPECT_TRUE((query != NULL) && (query(a->md, &stats) == UCS_OK) &&
                (stats.size == sizeof(stats)))
        << "uct_rc_gdr_md_stats_query with limit_retries";
    return stats;
}


/* ----------------------------------------------- error completions -- */

/* The NIC's transport retries ran out: the endpoint timed out */
TEST_F(tnic_fault, wc_retry_exceeded_endpoint_timeout)
{
    check_wc_error("retry_exceeded", UCS_ERR_ENDPOINT_TIMEOUT);
}

/* The peer never posted a receive in its RNR retries: a timeout too */
TEST_F(tnic_fault, wc_rnr_retry_endpoint_timeout)
{
    check_wc_error("rnr_retry", UCS_ERR_ENDPOINT_TIMEOUT);
}

/* The target refused the key or the range: an invalid address */
TEST_F(tnic_fault, wc_rem_access_invalid_addr)
{
    check_wc_error("rem_access", UCS_ERR_INVALID_ADDR);
}

/* Short puts go without a descriptor while they need not report (one in
 * TX_CQ_MODERATION does): an error completion of one of those, which names
 * no descriptor, fails the endpoint with its status, retires what came
 * before it, and a flush after it ends at once; nothing is left */
TEST_F(tnic_fault, bare_short_put_error_reported_and_retired)
{
    uint64_t value = 0x5eed;
    uct_test_comp_t comp;
    ucs_status_t status;
    int i, posted = 0;

    pair_open(BUF_SIZE);
    rkey_unpack();
    fault("wc_error:after=3:status=rem_access");
    for (i = 0; i < 8; ++i) {
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_put_short(a->ep, &value, sizeof(value),
                                                 wb.buf, m_rkey.rkey));
        posted += (status == UCS_OK);
    }
    printf("wc_error:after=3 under %d short puts: error handler %s\n",
           posted, wait_ep_error(5.0) ?
           ucs_status_string(a->ep_error_status) : "not called");
    UCT_TEST_EXPECT(posted >= 3, "%d short puts posted", posted);
    UCT_TEST_EXPECT(a->ep_error && (a->ep_error_status == UCS_ERR_INVALID_ADDR),
                    "error handler called with %s",
                    ucs_status_string(a->ep_error_status));

    /* every request was retired: a flush ends (no request left behind
     * that never reports), and a new put fails at once */
    uct_test_comp_init(&comp);
    status = UCT_TEST_RETRY(nodes, 2, uct_ep_flush(a->ep, 0, &comp.comp));
    status = uct_test_comp_wait(nodes, 2, status, &comp);
    UCT_TEST_EXPECT(status != UCS_ERR_TIMED_OUT, "a flush after the error "
                    "ends: %s", ucs_status_string(status));
    status = uct_ep_put_short(a->ep, &value, sizeof(value), wb.buf,
                              m_rkey.rkey);
    UCT_TEST_EXPECT((status != UCS_OK) && (status != UCS_ERR_NO_RESOURCE),
                    "a short put after the error: %s",
                    ucs_status_string(status));
    expect_nothing_left();
}

/* ------------------------------------------------ relaxed ordering -- */

/* UCX_RC_GDR_PCI_RELAXED_ORDERING=auto (the default): registrations ask for
 * relaxed ordering where the device takes it, and data moves */
TEST_F(tnic_fault, relaxed_ordering_auto_on_where_taken)
{
    pair_open(BUF_SIZE);
    rkey_unpack();
    EXPECT_TRUE(peer_mr_relaxed_order());
    EXPECT_EQ(UCS_OK, put(0, 4096));
    expect_nothing_left();
}

/* ... and not where the device refuses the flag (EINVAL, as a library or
 * kernel without it): the md opens, registers without it, data moves */
TEST_F(tnic_fault, relaxed_ordering_auto_off_where_refused)
{
    fault("relaxed_order:off");
    pair_open(BUF_SIZE);
    rkey_unpack();
    EXPECT_FALSE(peer_mr_relaxed_order());
    EXPECT_EQ(UCS_OK, put(0, 4096));
    expect_nothing_left();
}

/* =yes where the device refuses it: the md does not open, and says why */
TEST_F(tnic_fault, relaxed_ordering_yes_refused_is_an_error)
{
    uct_component_h component = uct_test_component_find();
    uct_md_config_t *md_config;
    std::string md_name(dev_a());
    ucs_status_t status;
    uct_md_h md;

    fault("relaxed_order:off");
    env_set("UCX_RC_GDR_PCI_RELAXED_ORDERING", "yes");
    md_name = md_name.substr(0, md_name.find(':'));
    ASSERT_EQ(UCS_OK, uct_md_config_read(component, NULL, NULL, &md_config));
    status = uct_md_open(component, md_name.c_str(), md_config, &md);
    uct_config_release(md_config);
    if (status == UCS_OK) {
        uct_md_close(md);
    }
    EXPECT_NE(UCS_OK, status) << "md " << md_name << " opened";
    expect_nothing_left();
}

/* The QP goes to error between puts (IBV_EVENT_QP_FATAL, then every WR
 * flushed): the put in flight ends with an error, the endpoint's handler
 * runs, nothing hangs */
TEST_F(tnic_fault, qp_error_mid_stream_reported)
{
    ucs_status_t status;
    int ok;

    pair_open(BUF_SIZE);
    rkey_unpack();
    fault("qp_error:after=4");
    status = put_until_error(64, &ok);
    printf("qp_error:after=4: %d puts completed, then %s; error handler: "
           "%s\n", ok, ucs_status_string(status),
           wait_ep_error(5.0) ? ucs_status_string(a->ep_error_status) :
                                "not called");
    UCT_TEST_EXPECT((ok >= 1) && (ok <= 4), "%d puts before the error", ok);
    UCT_TEST_EXPECT((status != UCS_OK) && (status != UCS_ERR_TIMED_OUT),
                    "the put in flight failed: %s",
                    ucs_status_string(status));
    UCT_TEST_EXPECT(a->ep_error && (a->ep_error_status != UCS_OK),
                    "error handler called with %s",
                    ucs_status_string(a->ep_error_status));
    expect_nothing_left();
}

/* The send CQ holds fewer entries than rc_gdr asked for: completions are
 * lost (IBV_EVENT_CQ_ERR). rc_gdr counts its CQ room by what it asked,
 * so it must notice through its stall check (TX_STALL_TIMEOUT) and fail
 * the endpoint: every operation ends, none waits for ever */
TEST_F(tnic_fault, cq_overrun_reported_not_hung)
{
    const int count = 64;
    std::vector<uct_test_comp_t> comps(count);
    int i, posted = 0, failed = 0, done = 0;
    double t0, deadline;
    ucs_status_t status;
    uct_iov_t iov;

    env_set("UCX_RC_GDR_TX_STALL_TIMEOUT", "1s");
    fault("cq:max=4");
    pair_open(BUF_SIZE);
    rkey_unpack();

    /* many completions at once, none polled while they are produced */
    uct_test_iov_init(&iov, a->buf, 1024, a->memh);
    for (i = 0; i < count; ++i) {
        uct_test_comp_init(&comps[i]);
        status = uct_ep_put_zcopy(a->ep, &iov, 1, wb.buf, m_rkey.rkey,
                                  &comps[i].comp);
        if (status == UCS_ERR_NO_RESOURCE) {
            break;
        }
        if (status == UCS_OK) {
            comps[i].comp.count = 0;
        } else if (status != UCS_INPROGRESS) {
            comps[i].comp.count = 0;
            comps[i].status     = status;
        }
        ++posted;
    }
    usleep(100000); /* the device thread produces them all */

    t0       = uct_test_now();
    deadline = t0 + 10.0;
    while (uct_test_now() < deadline) {
        uct_test_progress(nodes, 2);
        for (done = 0, i = 0; i < posted; ++i) {
            done += (comps[i].comp.count == 0);
        }
        if ((done == posted) && a->ep_error) {
            break;
        }
    }
    for (i = 0; i < posted; ++i) {
        failed += (comps[i].comp.count == 0) && (comps[i].status != UCS_OK);
    }
    printf("cq:max=4: %d puts posted, %d ended (%d with an error) in %.2f s;"
           " error handler: %s\n", posted, done, failed, uct_test_now() - t0,
           a->ep_error ? ucs_status_string(a->ep_error_status) :
                         "not called");
    UCT_TEST_EXPECT(posted > 4, "%d puts posted", posted);
    UCT_TEST_EXPECT(done == posted, "%d of %d puts ended", done, posted);
    UCT_TEST_EXPECT(a->ep_error && (a->ep_error_status != UCS_OK),
                    "the lost completions reported through the error "
                    "handler (%s)", ucs_status_string(a->ep_error_status));
    expect_nothing_left();
}


/* ----------------------------------------------------- registration -- */

/* Registrations stand for pinned memory / BAR1: at the limit (ENOMEM) the
 * cache's kept registrations are released and the registration tried once
 * more (limit_retries); one that alone passes the limit fails with
 * UCS_ERR_NO_MEMORY, and leaves no MR */
TEST_F(tnic_fault, reg_budget_releases_kept_then_no_memory)
{
    const size_t mib = 1024 * 1024;
    tnic_test_counters_t c0, c1;
    tnic_fault_md_stats_t s0, s1;
    uct_mem_h memh1, memh2, memh3;
    ucs_status_t status;
    char spec[64];

    a        = node_open(dev_a(), 0);
    nodes[0] = a;
    /* 6 MiB more than the interface's own registrations */
    m_counters(&c0);
    snprintf(spec, sizeof(spec), "reg_fail:budget=%" PRIu64,
             c0.reg_bytes + 6 * mib);
    fault(spec);

    ASSERT_EQ(UCS_OK, mem_reg(4 * mib, &memh1));
    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(a->md, memh1));
    s0 = md_stats();
    m_counters(&c0);

    /* 4 MiB kept by the cache + 4 MiB new > 6 MiB */
    status = mem_reg(4 * mib, &memh2);
    s1     = md_stats();
    printf("4 MiB kept (%" PRIu64 " kept regions), 4 MiB more: %s, "
           "limit retries %" PRIu64 " -> %" PRIu64 ", evictions %" PRIu64
           " -> %" PRIu64 "\n", s0.cache_kept, ucs_status_string(status),
           s0.limit_retries, s1.limit_retries, s0.cache_evictions,
           s1.cache_evictions);
    UCT_TEST_EXPECT(s0.cache_kept >= 1, "the first registration is kept "
                    "(%" PRIu64 ")", s0.cache_kept);
    UCT_TEST_EXPECT(status == UCS_OK, "registration at the limit after "
                    "releasing the kept ones: %s", ucs_status_string(status));
    UCT_TEST_EXPECT(s1.limit_retries == s0.limit_retries + 1,
                    "tried again once after releasing (%" PRIu64 ")",
                    s1.limit_retries - s0.limit_retries);
    if (status == UCS_OK) {
        EXPECT_EQ(UCS_OK, uct_md_mem_dereg(a->md, memh2));
    }

    /* alone past the limit: no memory, and no MR left behind */
    m_counters(&c0);
    status = mem_reg(8 * mib, &memh3);
    m_counters(&c1);
    UCT_TEST_EXPECT(status == UCS_ERR_NO_MEMORY, "8 MiB over a 6 MiB "
                    "budget: %s", ucs_status_string(status));
    UCT_TEST_EXPECT((c1.mrs <= c0.mrs) && (c1.reg_bytes <= c0.reg_bytes),
                    "MRs %ld -> %ld, bytes %" PRIu64 " -> %" PRIu64, c0.mrs,
                    c1.mrs, c0.reg_bytes, c1.reg_bytes);
    if (status == UCS_OK) {
        uct_md_mem_dereg(a->md, memh3);
    }

    /* the limit gone, the same range registers */
    m_fault_clear();
    status = mem_reg(8 * mib, &memh3);
    EXPECT_EQ(UCS_OK, status) << ucs_status_string(status);
    if (status == UCS_OK) {
        EXPECT_EQ(UCS_OK, uct_md_mem_dereg(a->md, memh3));
    }
    expect_nothing_left();
}

/* A NIC that refuses a registration (not a limit): UCS_ERR_IO_ERROR at
 * once, no retry, no MR */
class tnic_fault_reg : public tnic_fault {
public:
    void check_refused(const char *err)
    {
        tnic_test_counters_t c0, c1;
        tnic_fault_md_stats_t s0, s1;
        char spec[64];
        ucs_status_t status;
        uct_mem_h memh;

        a        = node_open(dev_a(), 0);
        nodes[0] = a;
        snprintf(spec, sizeof(spec), "reg_fail:errno=%s", err);
        fault(spec);
        s0 = md_stats();
        m_counters(&c0);
        status = mem_reg(1024 * 1024, &memh);
        m_counters(&c1);
        s1 = md_stats();
        printf("%s: %s, MRs %ld -> %ld\n", spec, ucs_status_string(status),
               c0.mrs, c1.mrs);
        UCT_TEST_EXPECT(status == UCS_ERR_IO_ERROR, "%s: %s", spec,
                        ucs_status_string(status));
        UCT_TEST_EXPECT(c1.mrs == c0.mrs, "MRs %ld -> %ld", c0.mrs, c1.mrs);
        UCT_TEST_EXPECT(s1.limit_retries == s0.limit_retries,
                        "a refusal is not retried as a limit");
        if (status == UCS_OK) {
            uct_md_mem_dereg(a->md, memh);
        }
        expect_nothing_left();
    }
};

TEST_F(tnic_fault_reg, efault_io_error)
{
    check_refused("EFAULT");
}

TEST_F(tnic_fault_reg, eopnotsupp_io_error)
{
    check_refused("EOPNOTSUPP");
}


/* ------------------------------------------------- slow completions -- */

/* Completions seen 20 ms late: a flush waits for them (answers
 * UCS_INPROGRESS and completes after the delay), and puts and gets of
 * many sizes and offsets land byte-exact */
TEST_F(tnic_fault, delayed_completions_flush_waits_data_exact)
{
    static const size_t sizes[] = {1, 7, 64, 4095, 4096, 65536, 100001};
    const double delay_s        = 0.02;
    uct_test_comp_t comp, fcomp;
    ucs_status_t status, fstatus;
    size_t i, off, len;
    double t0, waited;
    uct_iov_t iov;

    pair_open(BUF_SIZE);
    rkey_unpack();
    fault("delay:us=20000");

    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
        len = sizes[i];
        off = (i * 4099) % (BUF_SIZE - len);
        uct_test_fill((char*)a->buf + off, len, (unsigned)i + 1);
        memset((char*)b->buf + off, 0, len);

        uct_test_iov_init(&iov, (char*)a->buf + off, len, a->memh);
        uct_test_comp_init(&comp);
        uct_test_comp_init(&fcomp);
        t0     = uct_test_now();
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_put_zcopy(a->ep, &iov, 1, wb.buf + off,
                                                 m_rkey.rkey, &comp.comp));
        fstatus = UCT_TEST_RETRY(nodes, 2,
                                 uct_ep_flush(a->ep, 0, &fcomp.comp));
        UCT_TEST_EXPECT(fstatus == UCS_INPROGRESS, "flush of a put whose "
                        "completion is late: %s", ucs_status_string(fstatus));
        fstatus = uct_test_comp_wait(nodes, 2, fstatus, &fcomp);
        waited  = uct_test_now() - t0;
        UCT_TEST_EXPECT(fstatus == UCS_OK, "flush: %s",
                        ucs_status_string(fstatus));
        UCT_TEST_EXPECT((status == UCS_INPROGRESS) && (comp.comp.count == 0),
                        "the put completed by the flush's end (%s)",
                        ucs_status_string(status));
        UCT_TEST_EXPECT(waited >= delay_s * 0.9, "flush waited %.1f ms for "
                        "a completion 20 ms late", waited * 1e3);
        UCT_TEST_EXPECT(!memcmp((char*)a->buf + off, (char*)b->buf + off,
                                len), "put of %zu bytes at %zu byte-exact",
                        len, off);

        /* and back with a get */
        memset((char*)a->buf + off, 0, len);
        uct_test_iov_init(&iov, (char*)a->buf + off, len, a->memh);
        uct_test_comp_init(&comp);
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_get_zcopy(a->ep, &iov, 1, wb.buf + off,
                                                 m_rkey.rkey, &comp.comp));
        status = uct_test_comp_wait(nodes, 2, status, &comp);
        UCT_TEST_EXPECT(status == UCS_OK, "get: %s",
                        ucs_status_string(status));
        UCT_TEST_EXPECT(!memcmp((char*)a->buf + off, (char*)b->buf + off,
                                len), "get of %zu bytes at %zu byte-exact",
                        len, off);
    }
    expect_nothing_left();
}


/* --------------------------------------------------- vanished peer -- */

/* All traffic lost (the peer alive but cut off): the put fails with
 * UCS_ERR_ENDPOINT_TIMEOUT through the error handler within the
 * transport timeout that FAILURE_TIMEOUT=1s sets */
TEST_F(tnic_fault, drop_endpoint_timeout_within_failure_timeout)
{
    const double failure_s = 1.0, bound_s = 2 * failure_s + 0.5;
    ucs_status_t status;
    double t0, elapsed;
    int ok;

    env_set("UCX_RC_GDR_FAILURE_TIMEOUT", "1s");
    pair_open(BUF_SIZE);
    rkey_unpack();
    ASSERT_EQ(UCS_OK, put(0, 4096));

    fault("drop");
    t0      = uct_test_now();
    status  = put_until_error(16, &ok);
    elapsed = uct_test_now() - t0;
    printf("drop: %s after %.2f s (FAILURE_TIMEOUT %.1f s); error handler: "
           "%s\n", ucs_status_string(status), elapsed, failure_s,
           wait_ep_error(1.0) ? ucs_status_string(a->ep_error_status) :
                                "not called");
    UCT_TEST_EXPECT((ok == 0) && (status == UCS_ERR_ENDPOINT_TIMEOUT),
                    "%d puts, then %s", ok, ucs_status_string(status));
    UCT_TEST_EXPECT(elapsed <= bound_s, "reported after %.2f s, bound "
                    "%.1f s", elapsed, bound_s);
    UCT_TEST_EXPECT(a->ep_error &&
                    (a->ep_error_status == UCS_ERR_ENDPOINT_TIMEOUT),
                    "error handler called with %s",
                    ucs_status_string(a->ep_error_status));
    expect_nothing_left();
}


/* ------------------------------------------ ep_invalidate, no room -- */

/* uct_ep_invalidate with the send queue full (completions held back by
 * the delay fault, TX_QUEUE_LEN small): no work request can be posted, so
 * rc_gdr moves the QP to error and the requests in flight carry the error:
 * UCS_OK now, then the error handler with UCS_ERR_ENDPOINT_TIMEOUT, every
 * put ended (rc_gdr_ep.c, uct_rc_gdr_ep_invalidate) */
TEST_F(tnic_fault, ep_invalidate_without_room)
{
    std::vector<uct_test_comp_t> comps(256);
    int i, posted = 0, done;
    ucs_status_t status;
    double t0, deadline;
    uct_iov_t iov;

    env_set("UCX_RC_GDR_TX_QUEUE_LEN", "16");
    pair_open(BUF_SIZE);
    rkey_unpack();
    fault("delay:us=500000");

    uct_test_iov_init(&iov, a->buf, 64, a->memh);
    for (i = 0; i < (int)comps.size(); ++i) {
        uct_test_comp_init(&comps[i]);
        status = uct_ep_put_zcopy(a->ep, &iov, 1, wb.buf, m_rkey.rkey,
                                  &comps[i].comp);
        if (status == UCS_ERR_NO_RESOURCE) {
            break;
        }
        ASSERT_EQ(UCS_INPROGRESS, status) << ucs_status_string(status);
        ++posted;
    }
    ASSERT_LT(posted, (int)comps.size()) << "the send queue never filled";

    status = uct_test_ep_invalidate(a->ep);
    printf("send queue full after %d puts; uct_ep_invalidate: %s\n", posted,
           ucs_status_string(status));
    UCT_TEST_EXPECT(status == UCS_OK, "invalidate without room: %s",
                    ucs_status_string(status));

    t0       = uct_test_now();
    deadline = t0 + 5.0;
    do {
        uct_test_progress(nodes, 2);
        for (done = 0, i = 0; i < posted; ++i) {
            done += (comps[i].comp.count == 0);
        }
    } while (((done < posted) || !a->ep_error) &&
             (uct_test_now() < deadline));
    printf("after %.2f s: %d of %d puts ended, error handler: %s\n",
           uct_test_now() - t0, done, posted,
           a->ep_error ? ucs_status_string(a->ep_error_status) :
                         "not called");
    UCT_TEST_EXPECT(done == posted, "%d of %d puts ended", done, posted);
    UCT_TEST_EXPECT(a->ep_error &&
                    (a->ep_error_status == UCS_ERR_ENDPOINT_TIMEOUT),
                    "error handler called with %s",
                    ucs_status_string(a->ep_error_status));
    expect_nothing_left();
}


/* ------------------------------------- unsignaled sends, RNR forever -- */

/* A SEND in RNR retries forever (rnr_retry 7, a receiver that posts no
 * receives) is unsignaled, as UCP's eager sends are: it reports nothing,
 * and the stall check used to look only at signaled requests. Now a
 * signaled message goes behind it at the first quiet sweep, and the
 * endpoint fails with UCS_ERR_ENDPOINT_TIMEOUT within
 * TX_STALL_TIMEOUT (and a sweep or two), error handler called */
TEST_F(tnic_fault, unsignaled_send_in_rnr_forever_reported)
{
    const double stall_s = 1.0, bound_s = 2.5 * stall_s + 1.0;
    ucs_status_t status;
    uint64_t hdr = 0x5a;
    double t0, elapsed;

    env_set("UCX_RC_GDR_TX_STALL_TIMEOUT", "1s");
    pair_open(BUF_SIZE);

    fault("rnr");
    t0     = uct_test_now();
    status = UCT_TEST_RETRY(nodes, 2,
                            uct_ep_am_short(a->ep, 1, hdr, &hdr,
                                            sizeof(hdr)));
    ASSERT_EQ(UCS_OK, status) << ucs_status_string(status);
    wait_ep_error(bound_s + 2.0);
    elapsed = uct_test_now() - t0;
    printf("am_short into RNR forever: error handler %s after %.2f s "
           "(TX_STALL_TIMEOUT %.1f s)\n",
           a->ep_error ? ucs_status_string(a->ep_error_status) :
                         "not called", elapsed, stall_s);
    UCT_TEST_EXPECT(a->ep_error &&
                    (a->ep_error_status == UCS_ERR_ENDPOINT_TIMEOUT),
                    "error handler called with %s",
                    ucs_status_string(a->ep_error_status));
    UCT_TEST_EXPECT(elapsed <= bound_s, "reported after %.2f s, bound "
                    "%.1f s", elapsed, bound_s);
    expect_nothing_left();
}
