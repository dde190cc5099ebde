/*
 * uct_flush: flush-by-RDMA-read through the public UCT API, on real verbs
 * devices (the soft-RoCE guest). The read count comes from the module's own
 * counters (uct_rc_gdr_iface_stats_query, found with dlsym: the module is
 * preloaded).
 *
 *   uct_flush counts DEV_A DEV_B        UCX_RC_GDR_FLUSH=always|never|auto:
 *                                       how many reads a flush posts, data
 *                                       byte-exact, a flush without send
 *                                       queue room, iface flush, bad value
 *   uct_flush peer-death DEV_A DEV_B SEC  the peer is killed (forked, like
 *                                       uct_verify) and the flush READ that
 *                                       follows is never answered: the flush
 *                                       must end with an error within SEC
 *                                       (UCX_RC_GDR_FAILURE_TIMEOUT=2s unless
 *                                       set)
 *   uct_flush bench DEV_A DEV_B [ITERS] put + flush with the read (always)
 *                                       vs put + plain flush (never), in the
 *                                       same run, medians: a figure, not a
 *                                       pass/fail test
 *
 * Prints one "PASS name" / "FAIL name" line per check and "N passed,
 * N failed"; exits non-zero if any check failed.
 */

#include "uct_test_util.h"

#include <uct/ib_gdr/rc_gdr_addr.h> /* rkey flags: constants only */
#include <uct/ib_gdr/rc_gdr_glue.h> /* which flush flags this UCX has */

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>


#define BUF_SIZE      (1024u * 1024)
#define OP_TIMEOUT_S  30.0
#define NUM_PUTS      10
#define PUT_SIZE      4096

/* Two connected nodes in this process: a writes into b. */
typedef struct {
    uct_test_node_t     a, b;
    uct_test_node_t     *nodes[2];
    uct_test_wire_t     wa, wb;
    uct_rkey_bundle_t   rkey;      /* b's buffer, unpacked at a */
} pair_t;



/* UCX_RC_GDR_FLUSH as the user sets it; NULL: unset (the default). */
static void set_flush_knob(const char *value)
{
    if (value == NULL) {
        unsetenv("UCX_RC_GDR_FLUSH");
    } else {
        setenv("UCX_RC_GDR_FLUSH", value, 1);
    }
}


/* Opens and connects a -> b with UCX_RC_GDR_FLUSH=knob (NULL: unset). */
static void pair_open(pair_t *pair, const char *dev_a, const char *dev_b,
                      const char *knob)
{
    set_flush_knob(knob);
    uct_test_node_open(&pair->a, dev_a, BUF_SIZE);
    uct_test_node_open(&pair->b, dev_b, BUF_SIZE);
    set_flush_knob(NULL);

    pair->nodes[0] = &pair->a;
    pair->nodes[1] = &pair->b;
    uct_test_node_connect_pair(&pair->a, &pair->b, &pair->wa, &pair->wb);
    if (uct_rkey_unpack(pair->a.component, pair->wb.rkey, &pair->rkey) !=
        UCS_OK) {
        uct_test_die("uct_rkey_unpack", UCS_ERR_INVALID_PARAM);
    }
}


static void pair_close(pair_t *pair)
{
    uct_rkey_release(pair->a.component, &pair->rkey);
    uct_test_node_close(&pair->a);
    uct_test_node_close(&pair->b);
}


/* One ep flush with a completion, retried while out of resources. */
static ucs_status_t ep_flush_wait(pair_t *pair)
{
    return uct_test_ep_flush(pair->nodes, 2, pair->a.ep);
}


/* NUM_PUTS put_zcopy of PUT_SIZE bytes to distinct places, not waited
 * for one by one; returns the first error. */
static ucs_status_t put_batch(pair_t *pair, uct_rkey_t rkey, unsigned seed,
                              uct_test_comp_t *wcs)
{
    unsigned char *src = pair->a.buf;
    ucs_status_t status;
    uct_iov_t iov;
    int i;

    for (i = 0; i < NUM_PUTS; ++i) {
        uct_test_fill(src + i * PUT_SIZE, PUT_SIZE, seed + i);
        uct_test_iov_init(&iov, src + i * PUT_SIZE, PUT_SIZE, pair->a.memh);
        uct_test_comp_init(&wcs[i]);
        status = UCT_TEST_RETRY(pair->nodes, 2,
                                uct_ep_put_zcopy(pair->a.ep, &iov, 1,
                                                 pair->wb.buf + i * PUT_SIZE,
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


static int batch_arrived(pair_t *pair)
{
    return !memcmp(pair->a.buf, pair->b.buf, NUM_PUTS * PUT_SIZE);
}


/*
 * NUM_PUTS puts, then one flush: the reads it posted (expected_reads), the
 * work requests (puts + reads), the data; then a second flush without new
 * writes posts nothing.
 */
static void check_batch(pair_t *pair, const char *what, uct_rkey_t rkey,
                        unsigned seed, uint64_t expected_reads)
{
    uct_test_comp_t wcs[NUM_PUTS];
    uct_test_iface_stats_t before, after, again;
    ucs_status_t status;

    memset(pair->b.buf, 0, BUF_SIZE);
    before = uct_test_iface_stats(pair->a.iface);
    status = put_batch(pair, rkey, seed, wcs);
    if (status == UCS_OK) {
        status = ep_flush_wait(pair);
    }
    after = uct_test_iface_stats(pair->a.iface);
    uct_test_check(status == UCS_OK, "%s: %d puts and a flush complete (%s)",
                   what, NUM_PUTS, ucs_status_string(status));
    uct_test_check(after.flush_reads - before.flush_reads == expected_reads,
                   "%s: %d puts then one flush -> %" PRIu64 " flush read(s) "
                   "(expected %" PRIu64 ")", what, NUM_PUTS,
                   after.flush_reads - before.flush_reads, expected_reads);
    uct_test_check(after.tx_wrs - before.tx_wrs == NUM_PUTS + expected_reads,
                   "%s: %" PRIu64 " work requests posted (expected %" PRIu64
                   ")", what, after.tx_wrs - before.tx_wrs,
                   NUM_PUTS + expected_reads);
    uct_test_check(batch_arrived(pair), "%s: data byte-exact at the target",
                   what);

    status = uct_ep_flush(pair->a.ep, 0, NULL);
    again  = uct_test_iface_stats(pair->a.iface);
    uct_test_check((status == UCS_OK) &&
                   (again.flush_reads == after.flush_reads) &&
                   (again.tx_wrs == after.tx_wrs),
                   "%s: a second flush with no new writes is done at once, "
                   "no read (%s, %" PRIu64 " more)", what,
                   ucs_status_string(status),
                   again.flush_reads - after.flush_reads);
}


/* Every kind of write dirties the endpoint: put_short, put_bcopy, atomic. */
static size_t pack_cb(void *dest, void *arg)
{
    memcpy(dest, arg, 64);
    return 64;
}


static void check_write_kinds(pair_t *pair)
{
    unsigned char *src = pair->a.buf, *dst = pair->b.buf;
    uint64_t *word     = (uint64_t*)(dst + 8192);
    uct_test_iface_stats_t before, after;
    ucs_status_t status;
    ssize_t packed;

    memset(dst, 0, BUF_SIZE);
    uct_test_fill(src, 256, 77);

    before = uct_test_iface_stats(pair->a.iface);
    status = UCT_TEST_RETRY(pair->nodes, 2,
                            uct_ep_put_short(pair->a.ep, src, 32, pair->wb.buf,
                                             pair->rkey.rkey));
    if (status == UCS_OK) {
        status = ep_flush_wait(pair);
    }
    after = uct_test_iface_stats(pair->a.iface);
    uct_test_check((status == UCS_OK) &&
                   (after.flush_reads - before.flush_reads == 1) &&
                   !memcmp(src, dst, 32),
                   "always: put_short then flush -> 1 read");

    before = after;
    packed = UCT_TEST_RETRY(pair->nodes, 2,
                            uct_ep_put_bcopy(pair->a.ep, pack_cb, src + 64,
                                             pair->wb.buf + 64,
                                             pair->rkey.rkey));
    status = (packed == 64) ? ep_flush_wait(pair) : (ucs_status_t)packed;
    after  = uct_test_iface_stats(pair->a.iface);
    uct_test_check((status == UCS_OK) &&
                   (after.flush_reads - before.flush_reads == 1) &&
                   !memcmp(src + 64, dst + 64, 64),
                   "always: put_bcopy then flush -> 1 read");

    if (pair->a.iface_attr.cap.atomic64.op_flags & UCS_BIT(UCT_ATOMIC_OP_ADD)) {
        before = after;
        *word  = 5;
        status = UCT_TEST_RETRY(pair->nodes, 2,
                                uct_ep_atomic64_post(pair->a.ep,
                                                     UCT_ATOMIC_OP_ADD, 3,
                                                     pair->wb.buf + 8192,
                                                     pair->rkey.rkey));
        if (status == UCS_OK) {
            status = ep_flush_wait(pair);
        }
        after = uct_test_iface_stats(pair->a.iface);
        uct_test_check((status == UCS_OK) &&
                       (after.flush_reads - before.flush_reads == 1) &&
                       (*word == 8), "always: atomic add then flush -> 1 read");
    } else {
        printf("SKIP always: atomic add then flush: the device has no "
               "64-bit atomics\n");
    }

    /* A get writes nothing remote: its flush reads nothing more */
    before = after;
    {
        uct_test_comp_t wc;
        uct_iov_t iov = {src + 4096, 64, pair->a.memh, 0, 1};

        uct_test_comp_init(&wc);
        status = UCT_TEST_RETRY(pair->nodes, 2,
                                uct_ep_get_zcopy(pair->a.ep, &iov, 1,
                                                 pair->wb.buf, pair->rkey.rkey,
                                                 &wc.comp));
        status = uct_test_comp_wait(pair->nodes, 2, status, &wc);
        if (status == UCS_OK) {
            status = ep_flush_wait(pair);
        }
    }
    after = uct_test_iface_stats(pair->a.iface);
    uct_test_check((status == UCS_OK) &&
                   (after.flush_reads == before.flush_reads),
                   "always: get_zcopy then flush -> no read");
}


/* uct_iface_flush (no completion) posts the read of a dirty endpoint. */
static void check_iface_flush(pair_t *pair)
{
    uct_test_comp_t wcs[NUM_PUTS];
    uct_test_iface_stats_t before, after;
    ucs_status_t status;
    double deadline;

    memset(pair->b.buf, 0, BUF_SIZE);
    before = uct_test_iface_stats(pair->a.iface);
    status = put_batch(pair, pair->rkey.rkey, 40, wcs);
    deadline = uct_test_now() + OP_TIMEOUT_S;
    while ((status == UCS_OK) || (status == UCS_INPROGRESS)) {
        status = uct_iface_flush(pair->a.iface, 0, NULL);
        if ((status == UCS_OK) || (uct_test_now() > deadline)) {
            break;
        }
        uct_test_progress(pair->nodes, 2);
    }
    after = uct_test_iface_stats(pair->a.iface);
    uct_test_check((status == UCS_OK) &&
                   (after.flush_reads - before.flush_reads == 1) &&
                   batch_arrived(pair),
                   "always: %d puts then uct_iface_flush -> 1 read (%s, %"
                   PRIu64 ")", NUM_PUTS, ucs_status_string(status),
                   after.flush_reads - before.flush_reads);
}


/* With the send queue full, the flush cannot post its read: NO_RESOURCE,
 * nothing changed; after progress it posts it. */
static void check_no_resource(const char *dev_a, const char *dev_b)
{
    uct_test_comp_t wcs[NUM_PUTS], wc;
    unsigned char *src;
    uct_test_iface_stats_t before, after;
    ucs_status_t status, first;
    pair_t pair;
    uct_iov_t iov;
    int i, posted = 0;

    setenv("UCX_RC_GDR_TX_QUEUE_LEN", "4", 1);
    pair_open(&pair, dev_a, dev_b, "always");
    unsetenv("UCX_RC_GDR_TX_QUEUE_LEN");
    src = pair.a.buf;

    before = uct_test_iface_stats(pair.a.iface);
    for (i = 0; i < NUM_PUTS; ++i) {
        uct_test_fill(src + i * 64, 64, 90 + i);
        uct_test_iov_init(&iov, src + i * 64, 64, pair.a.memh);
        uct_test_comp_init(&wcs[i]);
        /* no progress: the send queue fills */
        status = uct_ep_put_zcopy(pair.a.ep, &iov, 1, pair.wb.buf + i * 64,
                                  pair.rkey.rkey, &wcs[i].comp);
        if (status != UCS_INPROGRESS) {
            break;
        }
        ++posted;
    }

    uct_test_comp_init(&wc);
    first  = uct_ep_flush(pair.a.ep, 0, &wc.comp);
    after  = uct_test_iface_stats(pair.a.iface);
    uct_test_check((posted == 4) && (first == UCS_ERR_NO_RESOURCE) &&
                   (after.flush_reads == before.flush_reads),
                   "always: flush with the send queue full (%d posted) -> "
                   "NO_RESOURCE, no read yet (%s)", posted,
                   ucs_status_string(first));

    status = UCT_TEST_RETRY(pair.nodes, 2,
                            uct_ep_flush(pair.a.ep, 0, &wc.comp));
    status = uct_test_comp_wait(pair.nodes, 2, status, &wc);
    after  = uct_test_iface_stats(pair.a.iface);
    uct_test_check((status == UCS_OK) &&
                   (after.flush_reads - before.flush_reads == 1) &&
                   !memcmp(src, pair.b.buf, posted * 64),
                   "always: the retried flush posts the read and completes "
                   "(%s)", ucs_status_string(status));

    pair_close(&pair);
}


/* A bad value is refused by the configuration parser, with its name. */
static void check_bad_value(const char *dev)
{
    uct_iface_config_t *iface_config;
    uct_test_node_t node;
    ucs_status_t status;

    memset(&node, 0, sizeof(node));
    uct_test_md_open(&node, dev);

    set_flush_knob("sometimes");
    printf("(an 'Invalid value' error line is expected next)\n");
    fflush(stdout);
    status = uct_md_iface_config_read(node.md, UCT_TEST_TL_NAME, NULL, NULL,
                                      &iface_config);
    set_flush_knob(NULL);
    if (status == UCS_OK) {
        uct_config_release(iface_config);
    }
    uct_test_check(status == UCS_ERR_INVALID_PARAM,
                   "UCX_RC_GDR_FLUSH=sometimes is refused (%s)",
                   ucs_status_string(status));
    uct_md_close(node.md);
}


#if UCT_RC_GDR_HAVE_FLUSH_REMOTE
/*
 * UCT_FLUSH_FLAG_REMOTE (UCX >= 1.14): writes into host memory need no read
 * for visibility under "auto", yet a remote flush reads once after them; a
 * second remote flush with no new writes posts nothing; a local flush after
 * writes still posts no read.
 */
static void check_flush_remote(pair_t *pair)
{
    uct_test_comp_t wcs[NUM_PUTS], comp;
    uct_test_iface_stats_t before, after, again;
    ucs_status_t status;

    memset(pair->b.buf, 0, BUF_SIZE);
    before = uct_test_iface_stats(pair->a.iface);
    status = put_batch(pair, pair->rkey.rkey, 6, wcs);
    if (status == UCS_OK) {
        uct_test_comp_init(&comp);
        status = UCT_TEST_RETRY(pair->nodes, 2,
                                uct_ep_flush(pair->a.ep,
                                             UCT_FLUSH_FLAG_REMOTE,
                                             &comp.comp));
        status = uct_test_comp_wait(pair->nodes, 2, status, &comp);
    }
    after = uct_test_iface_stats(pair->a.iface);
    uct_test_check(status == UCS_OK, "flush(REMOTE) after %d puts completes "
                   "(%s)", NUM_PUTS, ucs_status_string(status));
    uct_test_check(after.flush_reads - before.flush_reads == 1,
                   "flush(REMOTE) on host memory under auto: one read "
                   "(%" PRIu64 ")", after.flush_reads - before.flush_reads);
    uct_test_check(batch_arrived(pair), "flush(REMOTE): data byte-exact");

    status = uct_ep_flush(pair->a.ep, UCT_FLUSH_FLAG_REMOTE, NULL);
    again  = uct_test_iface_stats(pair->a.iface);
    uct_test_check((status == UCS_OK) &&
                   (again.flush_reads == after.flush_reads),
                   "a second flush(REMOTE) with no new writes: done, no read "
                   "(%s)", ucs_status_string(status));

    check_batch(pair, "auto, host target, local flush after remote",
                pair->rkey.rkey, 7, 0);
}
#endif


static int run_counts(const char *dev_a, const char *dev_b)
{
    uct_rkey_t flagged;
    pair_t pair;

    /* (a) always: every target, host memory included */
    pair_open(&pair, dev_a, dev_b, "always");
    check_batch(&pair, "always, host target", pair.rkey.rkey, 1, 1);
    check_write_kinds(&pair);
    check_iface_flush(&pair);
    pair_close(&pair);
    check_no_resource(dev_a, dev_b);

    /* (b) never */
    pair_open(&pair, dev_a, dev_b, "never");
    check_batch(&pair, "never, host target", pair.rkey.rkey, 2, 0);
    /* never ignores the target's flag too */
    flagged = pair.rkey.rkey |
              ((uint64_t)UCT_RC_GDR_RKEY_FLAG_FLUSH_READ << 32);
    check_batch(&pair, "never, target flagged FLUSH_READ", flagged, 3, 0);
    pair_close(&pair);

    /* (c) auto (the default: the knob unset): host memory needs no read;
     * a target whose rkey carries FLUSH_READ (what the md sets for GPU
     * memory whose writes ordering is NONE; set here by hand in the
     * unpacked key, rc_gdr_addr.h: flags above bit 32) gets one */
    pair_open(&pair, dev_a, dev_b, NULL);
    check_batch(&pair, "auto, host target", pair.rkey.rkey, 4, 0);
    flagged = pair.rkey.rkey |
              ((uint64_t)UCT_RC_GDR_RKEY_FLAG_FLUSH_READ << 32);
    check_batch(&pair, "auto, target flagged FLUSH_READ", flagged, 5, 1);
#if UCT_RC_GDR_HAVE_FLUSH_REMOTE
    check_flush_remote(&pair);
#else
    printf("SKIP UCT_FLUSH_FLAG_REMOTE: not in this UCX release\n");
#endif
    pair_close(&pair);

    check_bad_value(dev_a);
    return 0;
}


/*
 * The target is a forked process. A put and a flush (with its read) succeed
 * while it lives; another put completes, leaving the endpoint owing a read;
 * then the target is killed and the flush posts that READ, the only work
 * request outstanding, which no one will answer: the flush must complete
 * with an error within the bound, through the endpoint's ordinary failure
 * path.
 */
static int run_peer_death(const char *dev_a, const char *dev_b, double bound)
{
    uct_test_node_t a, *nodes[1] = {&a};
    uct_test_iface_stats_t before, after;
    uct_rkey_bundle_t rkey;
    ucs_status_t status;
    uct_test_comp_t wc, put_wc;
    uct_test_wire_t wb;
    uct_iov_t iov;
    double t_flush, elapsed;
    pid_t child;

    if (getenv("UCX_RC_GDR_FAILURE_TIMEOUT") == NULL) {
        setenv("UCX_RC_GDR_FAILURE_TIMEOUT", "2s", 1);
    }
    set_flush_knob("always");

    child = uct_test_peer_fork(&a, dev_a, dev_b, BUF_SIZE, &wb, &rkey);
    uct_test_iov_init(&iov, a.buf, 65536, a.memh);

    /* alive: put + flush with its read */
    before = uct_test_iface_stats(a.iface);
    uct_test_comp_init(&put_wc);
    status = UCT_TEST_RETRY(nodes, 1,
                            uct_ep_put_zcopy(a.ep, &iov, 1, wb.buf, rkey.rkey,
                                             &put_wc.comp));
    status = uct_test_comp_wait(nodes, 1, status, &put_wc);
    if (status == UCS_OK) {
        status = uct_test_ep_flush(nodes, 1, a.ep);
    }
    after = uct_test_iface_stats(a.iface);
    uct_test_check((status == UCS_OK) &&
                   (after.flush_reads - before.flush_reads == 1),
                   "live peer: put + flush with a read succeed (%s)",
                   ucs_status_string(status));

    /* a write completes: the endpoint owes a read */
    uct_test_comp_init(&put_wc);
    status = UCT_TEST_RETRY(nodes, 1,
                            uct_ep_put_zcopy(a.ep, &iov, 1, wb.buf, rkey.rkey,
                                             &put_wc.comp));
    status = uct_test_comp_wait(nodes, 1, status, &put_wc);
    uct_test_check(status == UCS_OK, "live peer: a second put completes (%s)",
                   ucs_status_string(status));

    kill(child, SIGKILL);
    waitpid(child, NULL, 0);

    /* dead: the flush READ is never answered */
    before  = uct_test_iface_stats(a.iface);
    t_flush = uct_test_now();
    uct_test_comp_init(&wc);
    status  = UCT_TEST_RETRY(nodes, 1, uct_ep_flush(a.ep, 0, &wc.comp));
    after   = uct_test_iface_stats(a.iface);
    uct_test_check((status == UCS_INPROGRESS) &&
                   (after.flush_reads - before.flush_reads == 1) &&
                   (after.tx_wrs - before.tx_wrs == 1),
                   "dead peer: the flush posted its read, the only work "
                   "request (%s, %" PRIu64 " read)", ucs_status_string(status),
                   after.flush_reads - before.flush_reads);

    while ((status == UCS_INPROGRESS) && (wc.comp.count > 0) &&
           (uct_test_now() < t_flush + 3 * bound + 10)) {
        uct_test_progress(nodes, 1);
    }
    elapsed = uct_test_now() - t_flush;
    if (status == UCS_INPROGRESS) {
        status = (wc.comp.count > 0) ? UCS_ERR_TIMED_OUT : wc.status;
    }

    printf("peer killed: the flush ended with %s after %.2f s "
           "(bound %.1f s, UCX_RC_GDR_FAILURE_TIMEOUT=%s)\n",
           ucs_status_string(status), elapsed, bound,
           getenv("UCX_RC_GDR_FAILURE_TIMEOUT"));
    uct_test_check(UCS_STATUS_IS_ERR(status) && (status != UCS_ERR_TIMED_OUT) &&
                   (elapsed <= bound),
                   "dead peer: the flush completes with an error within %.1f s "
                   "(%s, %.2f s)", bound, ucs_status_string(status), elapsed);
    uct_test_check(a.ep_error, "dead peer: error handler called (%s)",
                   ucs_status_string(a.ep_error_status));

    uct_rkey_release(a.component, &rkey);
    uct_test_node_close(&a);
    set_flush_knob(NULL);
    return 0;
}


static int cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x > y) - (x < y);
}


static double median(double *v, int n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return (n % 2) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}


/* One put_zcopy of size bytes and one flush, waited for: seconds. */
static double time_put_flush(pair_t *pair, size_t size)
{
    uct_test_comp_t put_wc;
    ucs_status_t status;
    uct_iov_t iov;
    double t0;

    uct_test_iov_init(&iov, pair->a.buf, size, pair->a.memh);
    t0 = uct_test_now();
    uct_test_comp_init(&put_wc);
    status = UCT_TEST_RETRY(pair->nodes, 2,
                            uct_ep_put_zcopy(pair->a.ep, &iov, 1, pair->wb.buf,
                                             pair->rkey.rkey, &put_wc.comp));
    if (UCS_STATUS_IS_ERR(status)) {
        uct_test_die("put_zcopy", status);
    }
    status = ep_flush_wait(pair);
    if (status != UCS_OK) {
        uct_test_die("flush", status);
    }
    /* the put's own completion came before the flush's */
    return uct_test_now() - t0;
}


static int run_bench(const char *dev_a, const char *dev_b, int iters)
{
    static const size_t sizes[] = {8, 65536};
    pair_t with_read, plain;
    uct_test_iface_stats_t r0, r1, p0, p1;
    double *t_read, *t_plain, m_read, m_plain;
    size_t si;
    int i;

    t_read  = calloc(iters, sizeof(double));
    t_plain = calloc(iters, sizeof(double));
    pair_open(&with_read, dev_a, dev_b, "always");
    pair_open(&plain, dev_a, dev_b, "never");

    printf("\nput + flush, UCT level, %s -> %s, median of %d (alternating "
           "the two pairs; after 5 warm-up rounds)\n", dev_a, dev_b, iters);
    printf("%-8s %24s %28s %14s\n", "size", "put+flush (never) us",
           "put+flush+READ (always) us", "read adds us");

    for (si = 0; si < sizeof(sizes) / sizeof(sizes[0]); ++si) {
        for (i = 0; i < 5; ++i) {
            time_put_flush(&with_read, sizes[si]);
            time_put_flush(&plain, sizes[si]);
        }
        r0 = uct_test_iface_stats(with_read.a.iface);
        p0 = uct_test_iface_stats(plain.a.iface);
        for (i = 0; i < iters; ++i) {
            t_read[i]  = time_put_flush(&with_read, sizes[si]);
            t_plain[i] = time_put_flush(&plain, sizes[si]);
        }
        r1      = uct_test_iface_stats(with_read.a.iface);
        p1      = uct_test_iface_stats(plain.a.iface);
        m_read  = median(t_read, iters) * 1e6;
        m_plain = median(t_plain, iters) * 1e6;
        printf("%-8s %24.1f %28.1f %14.1f\n",
               (sizes[si] == 8) ? "8 B" : "64 KiB", m_plain, m_read,
               m_read - m_plain);
        uct_test_check((r1.flush_reads - r0.flush_reads == (uint64_t)iters) &&
                       (p1.flush_reads == p0.flush_reads),
                       "bench %zu B: always read once per flush (%" PRIu64 "), "
                       "never not at all (%" PRIu64 ")", sizes[si],
                       r1.flush_reads - r0.flush_reads,
                       p1.flush_reads - p0.flush_reads);
    }

    pair_close(&with_read);
    pair_close(&plain);
    free(t_read);
    free(t_plain);
    return 0;
}


int main(int argc, char **argv)
{
    uct_test_init("uct_flush", OP_TIMEOUT_S);
    /* before a peer is forked that no one would kill */
    uct_test_iface_stats_check();

    if ((argc == 4) && !strcmp(argv[1], "counts")) {
        run_counts(argv[2], argv[3]);
    } else if ((argc == 5) && !strcmp(argv[1], "peer-death")) {
        run_peer_death(argv[2], argv[3], atof(argv[4]));
    } else if (((argc == 4) || (argc == 5)) && !strcmp(argv[1], "bench")) {
        run_bench(argv[2], argv[3], (argc == 5) ? atoi(argv[4]) : 21);
    } else {
        fprintf(stderr,
                "usage: %s counts DEV_A DEV_B | peer-death DEV_A DEV_B SEC | "
                "bench DEV_A DEV_B [ITERS]\n", argv[0]);
        return 2;
    }

    return uct_test_summary();
}
