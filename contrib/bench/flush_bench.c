/*
 * flush_bench: what the flush-by-RDMA-READ costs, through the public UCT
 * API on real verbs devices (contrib/bench-flush.sh runs it in the
 * soft-RoCE guest). Put + flush with the read (UCX_RC_GDR_FLUSH=always)
 * against put + plain flush (never), on two endpoint pairs alternated in
 * the same run, at 8 B and 64 KiB: medians, a figure, not a pass/fail
 * test. The module's counters (found with dlsym: the module is preloaded)
 * confirm that "always" read once per flush and "never" not at all.
 *
 *   flush_bench DEV_A DEV_B [ITERS (21)]
 *
 * Exit status: 0 with the table; 1 when the read counts disagree; 2 for
 * bad usage or set-up.
 */

#include "uct_test_util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define BUF_SIZE      (1024u * 1024)
#define OP_TIMEOUT_S  30.0
#define WARMUP_ROUNDS 5

/* Two connected nodes in this process: a writes into b. */
typedef struct {
    uct_test_node_t     a, b;
    uct_test_node_t     *nodes[2];
    uct_test_wire_t     wa, wb;
    uct_rkey_bundle_t   rkey;      /* b's buffer, unpacked at a */
} pair_t;


/* Opens and connects a -> b with UCX_RC_GDR_FLUSH=knob */
static void pair_open(pair_t *pair, const char *dev_a, const char *dev_b,
                      const char *knob)
{
    setenv("UCX_RC_GDR_FLUSH", knob, 1);
    uct_test_node_open(&pair->a, dev_a, BUF_SIZE);
    uct_test_node_open(&pair->b, dev_b, BUF_SIZE);
    unsetenv("UCX_RC_GDR_FLUSH");

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
    status = uct_test_ep_flush(pair->nodes, 2, pair->a.ep);
    if (status != UCS_OK) {
        uct_test_die("flush", status);
    }
    /* the put's own completion came before the flush's */
    return uct_test_now() - t0;
}


int main(int argc, char **argv)
{
    static const size_t sizes[] = {8, 65536};
    pair_t with_read, plain;
    uct_test_iface_stats_t r0, r1, p0, p1;
    double *t_read, *t_plain, m_read, m_plain;
    const char *dev_a, *dev_b;
    int i, iters, ret = 0;
    size_t si;

    if ((argc != 3) && (argc != 4)) {
        fprintf(stderr, "usage: %s DEV_A DEV_B [ITERS]\n", argv[0]);
        return UCT_TEST_EXIT_SETUP;
    }
    dev_a = argv[1];
    dev_b = argv[2];
    iters = (argc == 4) ? atoi(argv[3]) : 21;
    if (iters < 1) {
        fprintf(stderr, "%s: ITERS must be at least 1\n", argv[0]);
        return UCT_TEST_EXIT_SETUP;
    }

    uct_test_init("flush_bench", OP_TIMEOUT_S);
    uct_test_iface_stats_check();

    t_read  = calloc(iters, sizeof(double));
    t_plain = calloc(iters, sizeof(double));
    if ((t_read == NULL) || (t_plain == NULL)) {
        uct_test_die("calloc", UCS_ERR_NO_MEMORY);
    }
    pair_open(&with_read, dev_a, dev_b, "always");
    pair_open(&plain, dev_a, dev_b, "never");

    printf("\nput + flush, UCT level, %s -> %s, median of %d (alternating "
           "the two pairs; after %d warm-up rounds)\n", dev_a, dev_b, iters,
           WARMUP_ROUNDS);
    printf("%-8s %24s %28s %14s\n", "size", "put+flush (never) us",
           "put+flush+READ (always) us", "read adds us");

    for (si = 0; si < sizeof(sizes) / sizeof(sizes[0]); ++si) {
        for (i = 0; i < WARMUP_ROUNDS; ++i) {
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
        /* The figures mean what they say only if the modes did so */
        if ((r1.flush_reads - r0.flush_reads != (uint64_t)iters) ||
            (p1.flush_reads != p0.flush_reads)) {
            fprintf(stderr, "flush_bench: %zu B: 'always' read %" PRIu64
                    " times in %d flushes, 'never' %" PRIu64 " times: the "
                    "figures above are not of the modes they name\n",
                    sizes[si], r1.flush_reads - r0.flush_reads, iters,
                    p1.flush_reads - p0.flush_reads);
            ret = 1;
        }
    }

    pair_close(&with_read);
    pair_close(&plain);
    free(t_read);
    free(t_plain);
    return ret;
}
