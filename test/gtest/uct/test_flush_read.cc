/*
 * Flush by RDMA read through the public UCT API (UCX_RC_GDR_FLUSH=always,
 * never or auto, the default): how many reads a flush posts, counted by the
 * module's own counters (uct_rc_gdr_iface_stats_query, found with dlsym),
 * with the data byte-exact at the target; every kind of write dirties an
 * endpoint, a get does not; uct_iface_flush; a flush without send queue
 * room; UCT_FLUSH_FLAG_REMOTE where the release has it; a bad value; and a
 * peer killed while the read is outstanding.
 *
 * See file LICENSE for terms.
 */

#include "uct_rc_gdr_test.h"

#include <uct/ib_gdr/rc_gdr_addr.h> /* rkey flags: constants only */
#include <uct/ib_gdr/rc_gdr_glue.h> /* which flush flags this UCX has */

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>


/*
 * a writes into b. The pair opens in the test, after the knob is set:
 * UCX reads UCX_RC_GDR_FLUSH when the interface opens.
 */
class flush : public uct_rc_gdr_test {
protected:
    static const size_t   BUF_SIZE = 1024 * 1024;
    static const int      NUM_PUTS = 10;
    static const size_t   PUT_SIZE = 4096;

    void TearDown() override;

    /* Opens and connects a -> b with UCX_RC_GDR_FLUSH=knob (NULL: unset,
     * the default), and unpacks b's key at a */
    void flush_pair_open(const char *knob);

    /* Unsets name until the test ends */
    void env_unset(const char *name);

    /* One ep flush with a completion, retried while out of resources */
    ucs_status_t ep_flush_wait();

    /* NUM_PUTS put_zcopy of PUT_SIZE bytes to distinct places, not waited
     * for one by one; returns the first error */
    ucs_status_t put_batch(uct_rkey_t rkey, unsigned seed,
                           uct_test_comp_t *wcs);

    bool batch_arrived() const;

    /* NUM_PUTS puts, then one flush: the reads it posted (expected_reads),
     * the work requests (puts + reads), the data; then a second flush
     * without new writes posts nothing */
    void check_batch(const char *what, uct_rkey_t rkey, unsigned seed,
                     uint64_t expected_reads);

    /* b's key as a with the FLUSH_READ flag (what the md sets for GPU
     * memory whose writes ordering is NONE; set here by hand in the
     * unpacked key, rc_gdr_addr.h: flags above bit 32) */
    uct_rkey_t rkey_flagged() const;

    uct_rkey_bundle_t m_rkey = {};          /* b's buffer, unpacked at a */
    bool m_rkey_unpacked     = false;

    /* the peer-death test's own node and forked target */
    uct_test_node_t *m_survivor = nullptr;
    uct_rkey_bundle_t m_peer_rkey = {};
    pid_t m_child = -1;
};


void flush::TearDown()
{
    if (m_child > 0) {
        kill(m_child, SIGKILL);
        waitpid(m_child, NULL, 0);
        m_child = -1;
    }
    if (m_survivor != nullptr) {
        uct_rkey_release(m_survivor->component, &m_peer_rkey);
        uct_test_node_close(m_survivor);
        delete m_survivor;
        m_survivor = nullptr;
    }
    if (m_rkey_unpacked) {
        uct_rkey_release(a->component, &m_rkey);
        m_rkey_unpacked = false;
    }
    uct_rc_gdr_test::TearDown();
}

void flush::env_unset(const char *name)
{
    env_set(name, "");   /* what was there comes back at TearDown */
    unsetenv(name);
}

void flush::flush_pair_open(const char *knob)
{
    ucs_status_t status;

    if (knob == NULL) {
        env_unset("UCX_RC_GDR_FLUSH");
    } else {
        env_set("UCX_RC_GDR_FLUSH", knob);
    }
    pair_open(BUF_SIZE);

    status = uct_rkey_unpack(a->component, wb.rkey, &m_rkey);
    if (status != UCS_OK) {
        uct_test_die("uct_rkey_unpack", status);
    }
    m_rkey_unpacked = true;
}

ucs_status_t flush::ep_flush_wait()
{
    return uct_test_ep_flush(nodes, 2, a->ep);
}

ucs_status_t flush::put_batch(uct_rkey_t rkey, unsigned seed,
                              uct_test_comp_t *wcs)
{
    unsigned char *src = (unsigned char*)a->buf;
    ucs_status_t status;
    uct_iov_t iov;
    int i;

    for (i = 0; i < NUM_PUTS; ++i) {
        uct_test_fill(src + i * PUT_SIZE, PUT_SIZE, seed + i);
        uct_test_iov_init(&iov, src + i * PUT_SIZE, PUT_SIZE, a->memh);
        uct_test_comp_init(&wcs[i]);
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_put_zcopy(a->ep, &iov, 1,
                                                 wb.buf + i * PUT_SIZE,
                                                 rkey, &wcs[i].comp));
        if (UCS_STATUS_IS_ERR(status)) {
            return status;
        }
        if (status == UCS_OK) {
            wcs[i].comp.count = 0;
        }
    }
    return UCS_OK;
}

bool flush::batch_arrived() const
{
    return !memcmp(a->buf, b->buf, NUM_PUTS * PUT_SIZE);
}

void flush::check_batch(const char *what, uct_rkey_t rkey, unsigned seed,
                        uint64_t expected_reads)
{
    uct_test_comp_t wcs[NUM_PUTS];
    uct_test_iface_stats_t before, after, again;
    ucs_status_t status;

    memset(b->buf, 0, BUF_SIZE);
    before = uct_test_iface_stats(a->iface);
    status = put_batch(rkey, seed, wcs);
    if (status == UCS_OK) {
        status = ep_flush_wait();
    }
    after = uct_test_iface_stats(a->iface);
    UCT_TEST_EXPECT(status == UCS_OK, "%s: %d puts and a flush complete (%s)",
                    what, NUM_PUTS, ucs_status_string(status));
    UCT_TEST_EXPECT(after.flush_reads - before.flush_reads == expected_reads,
                    "%s: %d puts then one flush -> %" PRIu64 " flush read(s) "
                    "(expected %" PRIu64 ")", what, NUM_PUTS,
                    after.flush_reads - before.flush_reads, expected_reads);
    UCT_TEST_EXPECT(after.tx_wrs - before.tx_wrs == NUM_PUTS + expected_reads,
                    "%s: %" PRIu64 " work requests posted (expected %" PRIu64
                    ")", what, after.tx_wrs - before.tx_wrs,
                    NUM_PUTS + expected_reads);
    UCT_TEST_EXPECT(batch_arrived(), "%s: data byte-exact at the target",
                    what);

    status = uct_ep_flush(a->ep, 0, NULL);
    again  = uct_test_iface_stats(a->iface);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    (again.flush_reads == after.flush_reads) &&
                    (again.tx_wrs == after.tx_wrs),
                    "%s: a second flush with no new writes is done at once, "
                    "no read (%s, %" PRIu64 " more)", what,
                    ucs_status_string(status),
                    again.flush_reads - after.flush_reads);
}

uct_rkey_t flush::rkey_flagged() const
{
    return m_rkey.rkey | ((uint64_t)UCT_RC_GDR_RKEY_FLAG_FLUSH_READ << 32);
}


/* --------------------------------------------------------- always -- */

TEST_F(flush, always_reads_once_per_flush_host_target)
{
    flush_pair_open("always");
    check_batch("always, host target", m_rkey.rkey, 1, 1);
}

/* Every kind of write dirties the endpoint: put_short, put_bcopy, atomic */
static size_t flush_pack_64(void *dest, void *arg)
{
    memcpy(dest, arg, 64);
    return 64;
}

TEST_F(flush, always_put_short_then_flush_reads_once)
{
    uct_test_iface_stats_t before, after;
    unsigned char *src, *dst;
    ucs_status_t status;

    flush_pair_open("always");
    src = (unsigned char*)a->buf;
    dst = (unsigned char*)b->buf;
    memset(dst, 0, BUF_SIZE);
    uct_test_fill(src, 256, 77);

    before = uct_test_iface_stats(a->iface);
    status = UCT_TEST_RETRY(nodes, 2,
                            uct_ep_put_short(a->ep, src, 32, wb.buf,
                                             m_rkey.rkey));
    if (status == UCS_OK) {
        status = ep_flush_wait();
    }
    after = uct_test_iface_stats(a->iface);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    (after.flush_reads - before.flush_reads == 1) &&
                    !memcmp(src, dst, 32),
                    "always: put_short then flush -> 1 read (%s, %" PRIu64
                    ")", ucs_status_string(status),
                    after.flush_reads - before.flush_reads);
}

TEST_F(flush, always_put_bcopy_then_flush_reads_once)
{
    uct_test_iface_stats_t before, after;
    unsigned char *src, *dst;
    ucs_status_t status;
    ssize_t packed;

    flush_pair_open("always");
    src = (unsigned char*)a->buf;
    dst = (unsigned char*)b->buf;
    memset(dst, 0, BUF_SIZE);
    uct_test_fill(src, 256, 77);

    before = uct_test_iface_stats(a->iface);
    packed = UCT_TEST_RETRY(nodes, 2,
                            uct_ep_put_bcopy(a->ep, flush_pack_64, src + 64,
                                             wb.buf + 64, m_rkey.rkey));
    status = (packed == 64) ? ep_flush_wait() : (ucs_status_t)packed;
    after  = uct_test_iface_stats(a->iface);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    (after.flush_reads - before.flush_reads == 1) &&
                    !memcmp(src + 64, dst + 64, 64),
                    "always: put_bcopy then flush -> 1 read (%s, %" PRIu64
                    ")", ucs_status_string(status),
                    after.flush_reads - before.flush_reads);
}

TEST_F(flush, always_atomic_add_then_flush_reads_once)
{
    uct_test_iface_stats_t before, after;
    volatile uint64_t *word;
    ucs_status_t status;

    flush_pair_open("always");
    if (!(a->iface_attr.cap.atomic64.op_flags & UCS_BIT(UCT_ATOMIC_OP_ADD))) {
        GTEST_SKIP() << "the device has no 64-bit atomics";
    }

    word   = (volatile uint64_t*)((char*)b->buf + 8192);
    *word  = 5;
    before = uct_test_iface_stats(a->iface);
    status = UCT_TEST_RETRY(nodes, 2,
                            uct_ep_atomic64_post(a->ep, UCT_ATOMIC_OP_ADD, 3,
                                                 wb.buf + 8192, m_rkey.rkey));
    if (status == UCS_OK) {
        status = ep_flush_wait();
    }
    after = uct_test_iface_stats(a->iface);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    (after.flush_reads - before.flush_reads == 1) &&
                    (*word == 8),
                    "always: atomic add then flush -> 1 read (%s, %" PRIu64
                    " read, word %" PRIu64 ")", ucs_status_string(status),
                    after.flush_reads - before.flush_reads, (uint64_t)*word);
}

/* A get writes nothing remote: after a write was flushed, a get's flush
 * reads nothing more */
TEST_F(flush, always_get_zcopy_then_flush_reads_nothing)
{
    uct_test_iface_stats_t before, after;
    unsigned char *src;
    uct_test_comp_t wc;
    ucs_status_t status;
    uct_iov_t iov;

    flush_pair_open("always");
    src    = (unsigned char*)a->buf;
    status = UCT_TEST_RETRY(nodes, 2,
                            uct_ep_put_short(a->ep, src, 32, wb.buf,
                                             m_rkey.rkey));
    if (status == UCS_OK) {
        status = ep_flush_wait();
    }
    ASSERT_EQ(UCS_OK, status) << "a put and its flush first: "
                              << ucs_status_string(status);

    before = uct_test_iface_stats(a->iface);
    uct_test_iov_init(&iov, src + 4096, 64, a->memh);
    uct_test_comp_init(&wc);
    status = UCT_TEST_RETRY(nodes, 2,
                            uct_ep_get_zcopy(a->ep, &iov, 1, wb.buf,
                                             m_rkey.rkey, &wc.comp));
    status = uct_test_comp_wait(nodes, 2, status, &wc);
    if (status == UCS_OK) {
        status = ep_flush_wait();
    }
    after = uct_test_iface_stats(a->iface);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    (after.flush_reads == before.flush_reads),
                    "always: get_zcopy then flush -> no read (%s, %" PRIu64
                    ")", ucs_status_string(status),
                    after.flush_reads - before.flush_reads);
}

/* uct_iface_flush (no completion) posts the read of a dirty endpoint */
TEST_F(flush, always_iface_flush_reads_once)
{
    uct_test_comp_t wcs[NUM_PUTS];
    uct_test_iface_stats_t before, after;
    ucs_status_t status;
    double deadline;

    flush_pair_open("always");
    memset(b->buf, 0, BUF_SIZE);
    before   = uct_test_iface_stats(a->iface);
    status   = put_batch(m_rkey.rkey, 40, wcs);
    deadline = uct_test_now() + uct_test_timeout_s;
    while ((status == UCS_OK) || (status == UCS_INPROGRESS)) {
        status = uct_iface_flush(a->iface, 0, NULL);
        if ((status == UCS_OK) || (uct_test_now() > deadline)) {
            break;
        }
        uct_test_progress(nodes, 2);
    }
    after = uct_test_iface_stats(a->iface);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    (after.flush_reads - before.flush_reads == 1) &&
                    batch_arrived(),
                    "always: %d puts then uct_iface_flush -> 1 read (%s, %"
                    PRIu64 ")", NUM_PUTS, ucs_status_string(status),
                    after.flush_reads - before.flush_reads);
}

/* With the send queue full, the flush cannot post its read: NO_RESOURCE,
 * nothing changed; after progress it posts it */
TEST_F(flush, always_send_queue_full_no_resource_then_read)
{
    uct_test_comp_t wcs[NUM_PUTS], wc;
    uct_test_iface_stats_t before, after;
    ucs_status_t status, first;
    unsigned char *src;
    int i, posted = 0;
    uct_iov_t iov;

    env_set("UCX_RC_GDR_TX_QUEUE_LEN", "4");
    flush_pair_open("always");
    src = (unsigned char*)a->buf;

    before = uct_test_iface_stats(a->iface);
    for (i = 0; i < NUM_PUTS; ++i) {
        uct_test_fill(src + i * 64, 64, 90 + i);
        uct_test_iov_init(&iov, src + i * 64, 64, a->memh);
        uct_test_comp_init(&wcs[i]);
        /* no progress: the send queue fills */
        status = uct_ep_put_zcopy(a->ep, &iov, 1, wb.buf + i * 64,
                                  m_rkey.rkey, &wcs[i].comp);
        if (status != UCS_INPROGRESS) {
            break;
        }
        ++posted;
    }

    uct_test_comp_init(&wc);
    first = uct_ep_flush(a->ep, 0, &wc.comp);
    after = uct_test_iface_stats(a->iface);
    UCT_TEST_EXPECT((posted == 4) && (first == UCS_ERR_NO_RESOURCE) &&
                    (after.flush_reads == before.flush_reads),
                    "always: flush with the send queue full (%d posted) -> "
                    "NO_RESOURCE, no read yet (%s)", posted,
                    ucs_status_string(first));

    status = UCT_TEST_RETRY(nodes, 2, uct_ep_flush(a->ep, 0, &wc.comp));
    status = uct_test_comp_wait(nodes, 2, status, &wc);
    after  = uct_test_iface_stats(a->iface);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    (after.flush_reads - before.flush_reads == 1) &&
                    !memcmp(src, b->buf, posted * 64),
                    "always: the retried flush posts the read and completes "
                    "(%s)", ucs_status_string(status));
}


/* ---------------------------------------------------------- never -- */

TEST_F(flush, never_reads_nothing_host_target)
{
    flush_pair_open("never");
    check_batch("never, host target", m_rkey.rkey, 2, 0);
}

TEST_F(flush, never_ignores_target_flush_read_flag)
{
    flush_pair_open("never");
    check_batch("never, target flagged FLUSH_READ", rkey_flagged(), 3, 0);
}


/* ----------------------------------------------------------- auto -- */

/* auto, the default (the knob unset): host memory needs no read */
TEST_F(flush, auto_reads_nothing_host_target)
{
    flush_pair_open(NULL);
    check_batch("auto, host target", m_rkey.rkey, 4, 0);
}

/* a target whose rkey carries FLUSH_READ gets one */
TEST_F(flush, auto_reads_once_target_flagged_flush_read)
{
    flush_pair_open(NULL);
    check_batch("auto, target flagged FLUSH_READ", rkey_flagged(), 5, 1);
}


#if UCT_RC_GDR_HAVE_FLUSH_REMOTE
/*
 * UCT_FLUSH_FLAG_REMOTE (UCX >= 1.14): writes into host memory need no read
 * for visibility under "auto", yet a remote flush reads once after them; a
 * second remote flush with no new writes posts nothing; a local flush after
 * writes still posts no read.
 */
TEST_F(flush, remote_flag_reads_once_host_target_under_auto)
{
    uct_test_comp_t wcs[NUM_PUTS], comp;
    uct_test_iface_stats_t before, after, again;
    ucs_status_t status;

    flush_pair_open(NULL);
    memset(b->buf, 0, BUF_SIZE);
    before = uct_test_iface_stats(a->iface);
    status = put_batch(m_rkey.rkey, 6, wcs);
    if (status == UCS_OK) {
        uct_test_comp_init(&comp);
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_flush(a->ep, UCT_FLUSH_FLAG_REMOTE,
                                             &comp.comp));
        status = uct_test_comp_wait(nodes, 2, status, &comp);
    }
    after = uct_test_iface_stats(a->iface);
    UCT_TEST_EXPECT(status == UCS_OK, "flush(REMOTE) after %d puts completes "
                    "(%s)", NUM_PUTS, ucs_status_string(status));
    UCT_TEST_EXPECT(after.flush_reads - before.flush_reads == 1,
                    "flush(REMOTE) on host memory under auto: one read "
                    "(%" PRIu64 ")", after.flush_reads - before.flush_reads);
    UCT_TEST_EXPECT(batch_arrived(), "flush(REMOTE): data byte-exact");

    status = uct_ep_flush(a->ep, UCT_FLUSH_FLAG_REMOTE, NULL);
    again  = uct_test_iface_stats(a->iface);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    (again.flush_reads == after.flush_reads),
                    "a second flush(REMOTE) with no new writes: done, no read "
                    "(%s)", ucs_status_string(status));

    check_batch("auto, host target, local flush after remote", m_rkey.rkey,
                7, 0);
}
#else
TEST_F(flush, remote_flag_reads_once_host_target_under_auto)
{
    GTEST_SKIP() << "UCT_FLUSH_FLAG_REMOTE: not in this UCX release";
}
#endif


/* ----------------------------------------------------- bad value -- */

/* A bad value is refused by the configuration parser */
TEST_F(flush, bad_value_refused)
{
    uct_iface_config_t *iface_config;
    uct_test_node_t node = {};
    ucs_status_t status;

    uct_test_md_open(&node, dev_a());
    env_set("UCX_RC_GDR_FLUSH", "sometimes");
    printf("(an 'Invalid value' error line is expected next)\n");
    fflush(stdout);
    status = uct_md_iface_config_read(node.md, UCT_TEST_TL_NAME, NULL, NULL,
                                      &iface_config);
    if (status == UCS_OK) {
        uct_config_release(iface_config);
    }
    uct_md_close(node.md);
    UCT_TEST_EXPECT(status == UCS_ERR_INVALID_PARAM,
                    "UCX_RC_GDR_FLUSH=sometimes is refused (%s)",
                    ucs_status_string(status));
}


/* ---------------------------------------------------- peer death -- */

/*
 * The target is a forked process. A put and a flush (with its read)
 * succeed while it lives; another put completes, leaving the endpoint
 * owing a read; then the target is killed and the flush posts that READ,
 * the only work request outstanding, which no one will answer: the flush
 * must complete with an error within the bound, through the endpoint's
 * ordinary failure path (UCX_RC_GDR_FAILURE_TIMEOUT=2s unless set).
 */
TEST_F(flush, peer_killed_read_ends_in_error_within_bound)
{
    const double bound = 3.0;
    uct_test_iface_stats_t before, after;
    uct_test_comp_t wc, put_wc;
    uct_test_node_t *nodes1[1];
    double t_flush, elapsed;
    ucs_status_t status;
    uct_test_wire_t wp;
    uct_iov_t iov;

    if (getenv("UCX_RC_GDR_FAILURE_TIMEOUT") == NULL) {
        env_set("UCX_RC_GDR_FAILURE_TIMEOUT", "2s");
    }
    env_set("UCX_RC_GDR_FLUSH", "always");
    /* before a peer is forked that no one would kill */
    uct_test_iface_stats_check();

    m_survivor = new uct_test_node_t();
    try {
        m_child = uct_test_peer_fork(m_survivor, dev_a(), dev_b(), BUF_SIZE,
                                     &wp, &m_peer_rkey);
    } catch (...) {
        delete m_survivor;   /* what opened before the failure is not closed */
        m_survivor = nullptr;
        throw;
    }
    nodes1[0] = m_survivor;
    uct_test_iov_init(&iov, m_survivor->buf, 65536, m_survivor->memh);

    /* alive: put + flush with its read */
    before = uct_test_iface_stats(m_survivor->iface);
    uct_test_comp_init(&put_wc);
    status = UCT_TEST_RETRY(nodes1, 1,
                            uct_ep_put_zcopy(m_survivor->ep, &iov, 1, wp.buf,
                                             m_peer_rkey.rkey, &put_wc.comp));
    status = uct_test_comp_wait(nodes1, 1, status, &put_wc);
    if (status == UCS_OK) {
        status = uct_test_ep_flush(nodes1, 1, m_survivor->ep);
    }
    after = uct_test_iface_stats(m_survivor->iface);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    (after.flush_reads - before.flush_reads == 1),
                    "live peer: put + flush with a read succeed (%s)",
                    ucs_status_string(status));

    /* a write completes: the endpoint owes a read */
    uct_test_comp_init(&put_wc);
    status = UCT_TEST_RETRY(nodes1, 1,
                            uct_ep_put_zcopy(m_survivor->ep, &iov, 1, wp.buf,
                                             m_peer_rkey.rkey, &put_wc.comp));
    status = uct_test_comp_wait(nodes1, 1, status, &put_wc);
    UCT_TEST_EXPECT(status == UCS_OK, "live peer: a second put completes (%s)",
                    ucs_status_string(status));

    kill(m_child, SIGKILL);
    waitpid(m_child, NULL, 0);
    m_child = -1;

    /* dead: the flush READ is never answered */
    before  = uct_test_iface_stats(m_survivor->iface);
    t_flush = uct_test_now();
    uct_test_comp_init(&wc);
    status  = UCT_TEST_RETRY(nodes1, 1,
                             uct_ep_flush(m_survivor->ep, 0, &wc.comp));
    after   = uct_test_iface_stats(m_survivor->iface);
    UCT_TEST_EXPECT((status == UCS_INPROGRESS) &&
                    (after.flush_reads - before.flush_reads == 1) &&
                    (after.tx_wrs - before.tx_wrs == 1),
                    "dead peer: the flush posted its read, the only work "
                    "request (%s, %" PRIu64 " read)",
                    ucs_status_string(status),
                    after.flush_reads - before.flush_reads);

    while ((status == UCS_INPROGRESS) && (wc.comp.count > 0) &&
           (uct_test_now() < t_flush + 3 * bound + 10)) {
        uct_test_progress(nodes1, 1);
    }
    elapsed = uct_test_now() - t_flush;
    if (status == UCS_INPROGRESS) {
        status = (wc.comp.count > 0) ? UCS_ERR_TIMED_OUT : wc.status;
    }

    printf("peer killed: the flush ended with %s after %.2f s "
           "(bound %.1f s, UCX_RC_GDR_FAILURE_TIMEOUT=%s)\n",
           ucs_status_string(status), elapsed, bound,
           getenv("UCX_RC_GDR_FAILURE_TIMEOUT"));
    UCT_TEST_EXPECT(UCS_STATUS_IS_ERR(status) &&
                    (status != UCS_ERR_TIMED_OUT) && (elapsed <= bound),
                    "dead peer: the flush completes with an error within "
                    "%.1f s (%s, %.2f s)", bound, ucs_status_string(status),
                    elapsed);
    UCT_TEST_EXPECT(m_survivor->ep_error, "dead peer: error handler called "
                    "(%s)", ucs_status_string(m_survivor->ep_error_status));
}
