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

#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>
#include <uct/ib_gdr/rc_gdr_addr.h> /* rkey flags: constants only */

#include <dlfcn.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


#define TL_NAME       "rc_gdr"
#define BUF_SIZE      (1024u * 1024)
#define OP_TIMEOUT_S  30.0
#define NUM_PUTS      10
#define PUT_SIZE      4096

typedef struct {
    ucs_async_context_t *async;
    uct_worker_h        worker;
    uct_component_h     component;
    uct_md_h            md;
    uct_iface_h         iface;
    uct_iface_attr_t    attr;
    uct_ep_h            ep;
    void                *buf;
    uct_mem_h           memh;
    void                *rkey_buf;
    size_t              rkey_size;
    uct_md_attr_t       md_attr;
} node_t;

/* Address blobs of a node, as a peer receives them. */
typedef struct {
    unsigned char dev[64];
    unsigned char ep[64];
    unsigned char rkey[64];
    uint64_t      buf;
} wire_t;

/* Two connected nodes in this process: a writes into b. */
typedef struct {
    node_t              a, b;
    node_t              *nodes[2];
    wire_t              wa, wb;
    uct_rkey_bundle_t   rkey;      /* b's buffer, unpacked at a */
} pair_t;

typedef struct {
    uct_completion_t    comp;
    ucs_status_t        status;
} wait_comp_t;

/* The module's counters: same layout as uct_rc_gdr_iface_stats_t
 * (rc_gdr_iface.h), whose first field is the size, for versioning. */
typedef struct {
    uint64_t size;
    uint64_t tx_wrs;
    uint64_t rx_msgs;
    uint64_t credit_grants;
    uint64_t flush_reads;
} test_stats_t;

typedef ucs_status_t (*stats_query_func_t)(uct_iface_h iface,
                                           test_stats_t *stats);

static int g_failed, g_passed;
static volatile int g_ep_error;
static ucs_status_t g_ep_error_status;
static stats_query_func_t g_stats_query;


static void check(int ok, const char *fmt, ...)
{
    va_list ap;

    printf(ok ? "PASS " : "FAIL ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (ok) {
        ++g_passed;
    } else {
        ++g_failed;
    }
}


static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}


static void die(const char *what, ucs_status_t status)
{
    fprintf(stderr, "uct_flush: %s: %s\n", what, ucs_status_string(status));
    exit(2);
}


static void fill(void *buf, size_t length, unsigned seed)
{
    unsigned char *p = buf;
    size_t i;

    for (i = 0; i < length; ++i) {
        p[i] = (unsigned char)(seed + i * 31 + (i >> 8));
    }
}


static void comp_cb(uct_completion_t *self)
{
    wait_comp_t *wc = (wait_comp_t*)self;

    wc->status = self->status;
}


static void init_wc(wait_comp_t *wc)
{
    wc->comp.func   = comp_cb;
    wc->comp.count  = 1;
    wc->comp.status = UCS_OK;
    wc->status      = UCS_OK;
}


static ucs_status_t err_handler(void *arg, uct_ep_h ep, ucs_status_t status)
{
    g_ep_error        = 1;
    g_ep_error_status = status;
    return UCS_OK;
}


static void progress(node_t **nodes, int count)
{
    int i;

    for (i = 0; i < count; ++i) {
        if (nodes[i] != NULL) {
            uct_worker_progress(nodes[i]->worker);
        }
    }
}


/* Retries an operation while the transport has no resources. */
#define RETRY(_nodes, _count, _call) \
    ({ \
        __typeof__(_call) _st; \
        double _deadline = now() + OP_TIMEOUT_S; \
        while (((_st = (_call)) == (__typeof__(_call))UCS_ERR_NO_RESOURCE) && \
               (now() < _deadline)) { \
            progress(_nodes, _count); \
        } \
        _st; \
    })


static test_stats_t get_stats(node_t *node)
{
    test_stats_t stats;
    ucs_status_t status;

    memset(&stats, 0, sizeof(stats));
    stats.size = sizeof(stats);
    status     = g_stats_query(node->iface, &stats);
    if (status != UCS_OK) {
        die("uct_rc_gdr_iface_stats_query", status);
    }
    if (stats.size != sizeof(stats)) {
        fprintf(stderr, "uct_flush: the module's stats are %" PRIu64 " bytes, "
                "this program expects %zu: update test_stats_t\n",
                stats.size, sizeof(stats));
        exit(2);
    }
    return stats;
}


static uct_component_h find_component(void)
{
    uct_component_h *components, found = NULL;
    uct_component_attr_t attr;
    unsigned i, count;
    ucs_status_t status;

    status = uct_query_components(&components, &count);
    if (status != UCS_OK) {
        die("uct_query_components", status);
    }

    for (i = 0; i < count; ++i) {
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        uct_component_query(components[i], &attr);
        if (!strcmp(attr.name, TL_NAME)) {
            found = components[i];
        }
    }
    uct_release_component_list(components);
    if (found == NULL) {
        fprintf(stderr, "uct_flush: component '%s' is not registered "
                "(is the module preloaded? . contrib/env.sh)\n", TL_NAME);
        exit(2);
    }
    return found;
}


/* UCX_RC_GDR_FLUSH as the user sets it; NULL: unset (the default). */
static void set_flush_knob(const char *value)
{
    if (value == NULL) {
        unsetenv("UCX_RC_GDR_FLUSH");
    } else {
        setenv("UCX_RC_GDR_FLUSH", value, 1);
    }
}


static void node_open(node_t *node, const char *dev_name, size_t buf_size)
{
    uct_iface_params_t params;
    uct_iface_config_t *iface_config;
    uct_md_config_t *md_config;
    uct_ep_params_t ep_params;
    char md_name[64], *colon;
    ucs_status_t status;

    memset(node, 0, sizeof(*node));
    snprintf(md_name, sizeof(md_name), "%s", dev_name);
    colon = strchr(md_name, ':');
    if (colon != NULL) {
        *colon = '\0';
    }

    status = ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                      &node->async);
    if (status != UCS_OK) {
        die("ucs_async_context_create", status);
    }

    status = uct_worker_create(node->async, UCS_THREAD_MODE_SINGLE,
                               &node->worker);
    if (status != UCS_OK) {
        die("uct_worker_create", status);
    }

    node->component = find_component();
    status = uct_md_config_read(node->component, NULL, NULL, &md_config);
    if (status != UCS_OK) {
        die("uct_md_config_read", status);
    }
    status = uct_md_open(node->component, md_name, md_config, &node->md);
    uct_config_release(md_config);
    if (status != UCS_OK) {
        die("uct_md_open", status);
    }
    uct_md_query(node->md, &node->md_attr);

    status = uct_md_iface_config_read(node->md, TL_NAME, NULL, NULL,
                                      &iface_config);
    if (status != UCS_OK) {
        die("uct_md_iface_config_read", status);
    }

    memset(&params, 0, sizeof(params));
    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                  UCT_IFACE_PARAM_FIELD_DEVICE |
                                  UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                                  UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                                  UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = TL_NAME;
    params.mode.device.dev_name = dev_name;
    params.err_handler          = err_handler;
    params.err_handler_arg      = node;
    params.err_handler_flags    = UCT_CB_FLAG_ASYNC;
    status = uct_iface_open(node->md, node->worker, &params, iface_config,
                            &node->iface);
    uct_config_release(iface_config);
    if (status != UCS_OK) {
        die("uct_iface_open", status);
    }

    uct_iface_query(node->iface, &node->attr);
    uct_iface_progress_enable(node->iface,
                              UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);

    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    ep_params.iface      = node->iface;
    status = uct_ep_create(&ep_params, &node->ep);
    if (status != UCS_OK) {
        die("uct_ep_create", status);
    }

    if (posix_memalign(&node->buf, 4096, buf_size) != 0) {
        die("posix_memalign", UCS_ERR_NO_MEMORY);
    }
    memset(node->buf, 0, buf_size);
    status = uct_md_mem_reg(node->md, node->buf, buf_size,
                            UCT_MD_MEM_ACCESS_ALL, &node->memh);
    if (status != UCS_OK) {
        die("uct_md_mem_reg", status);
    }

    node->rkey_size = node->md_attr.rkey_packed_size;
    node->rkey_buf  = calloc(1, node->rkey_size);
    status = uct_md_mkey_pack(node->md, node->memh, node->rkey_buf);
    if (status != UCS_OK) {
        die("uct_md_mkey_pack", status);
    }
}


static void node_close(node_t *node)
{
    uct_ep_destroy(node->ep);
    uct_md_mem_dereg(node->md, node->memh);
    uct_iface_close(node->iface);
    uct_md_close(node->md);
    uct_worker_destroy(node->worker);
    ucs_async_context_destroy(node->async);
    free(node->rkey_buf);
    free(node->buf);
}


static void node_wire(node_t *node, wire_t *wire)
{
    memset(wire, 0, sizeof(*wire));
    uct_iface_get_device_address(node->iface, (uct_device_addr_t*)wire->dev);
    uct_ep_get_address(node->ep, (uct_ep_addr_t*)wire->ep);
    memcpy(wire->rkey, node->rkey_buf, node->rkey_size);
    wire->buf = (uintptr_t)node->buf;
}


static void node_connect(node_t *node, const wire_t *peer)
{
    ucs_status_t status;

    status = uct_ep_connect_to_ep(node->ep,
                                  (const uct_device_addr_t*)peer->dev,
                                  (const uct_ep_addr_t*)peer->ep);
    if (status != UCS_OK) {
        die("uct_ep_connect_to_ep", status);
    }
}


/* Opens and connects a -> b with UCX_RC_GDR_FLUSH=knob (NULL: unset). */
static void pair_open(pair_t *pair, const char *dev_a, const char *dev_b,
                      const char *knob)
{
    set_flush_knob(knob);
    node_open(&pair->a, dev_a, BUF_SIZE);
    node_open(&pair->b, dev_b, BUF_SIZE);
    set_flush_knob(NULL);

    pair->nodes[0] = &pair->a;
    pair->nodes[1] = &pair->b;
    node_wire(&pair->a, &pair->wa);
    node_wire(&pair->b, &pair->wb);
    node_connect(&pair->a, &pair->wb);
    node_connect(&pair->b, &pair->wa);
    if (uct_rkey_unpack(pair->a.component, pair->wb.rkey, &pair->rkey) !=
        UCS_OK) {
        die("uct_rkey_unpack", UCS_ERR_INVALID_PARAM);
    }
}


static void pair_close(pair_t *pair)
{
    uct_rkey_release(pair->a.component, &pair->rkey);
    node_close(&pair->a);
    node_close(&pair->b);
}


/* Waits for a completion, bounded. */
static ucs_status_t wait_comp(node_t **nodes, int count, ucs_status_t status,
                              wait_comp_t *wc)
{
    double deadline = now() + OP_TIMEOUT_S;

    while ((status == UCS_INPROGRESS) && (wc->comp.count > 0)) {
        progress(nodes, count);
        if (now() > deadline) {
            return UCS_ERR_TIMED_OUT;
        }
    }
    return (status == UCS_INPROGRESS) ? wc->status : status;
}


/* One ep flush with a completion, retried while out of resources. */
static ucs_status_t ep_flush_wait(pair_t *pair)
{
    wait_comp_t wc;
    ucs_status_t status;

    init_wc(&wc);
    status = RETRY(pair->nodes, 2, uct_ep_flush(pair->a.ep, 0, &wc.comp));
    return wait_comp(pair->nodes, 2, status, &wc);
}


/* NUM_PUTS put_zcopy of PUT_SIZE bytes to distinct places, not waited
 * for one by one; returns the first error. */
static ucs_status_t put_batch(pair_t *pair, uct_rkey_t rkey, unsigned seed,
                              wait_comp_t *wcs)
{
    unsigned char *src = pair->a.buf;
    ucs_status_t status;
    uct_iov_t iov;
    int i;

    for (i = 0; i < NUM_PUTS; ++i) {
        fill(src + i * PUT_SIZE, PUT_SIZE, seed + i);
        iov.buffer = src + i * PUT_SIZE;
        iov.length = PUT_SIZE;
        iov.memh   = pair->a.memh;
        iov.stride = 0;
        iov.count  = 1;
        init_wc(&wcs[i]);
        status = RETRY(pair->nodes, 2,
                       uct_ep_put_zcopy(pair->a.ep, &iov, 1,
                                        pair->wb.buf + i * PUT_SIZE, rkey,
                                        &wcs[i].comp));
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
    wait_comp_t wcs[NUM_PUTS];
    test_stats_t before, after, again;
    ucs_status_t status;

    memset(pair->b.buf, 0, BUF_SIZE);
    before = get_stats(&pair->a);
    status = put_batch(pair, rkey, seed, wcs);
    if (status == UCS_OK) {
        status = ep_flush_wait(pair);
    }
    after = get_stats(&pair->a);
    check(status == UCS_OK, "%s: %d puts and a flush complete (%s)", what,
          NUM_PUTS, ucs_status_string(status));
    check(after.flush_reads - before.flush_reads == expected_reads,
          "%s: %d puts then one flush -> %" PRIu64 " flush read(s) "
          "(expected %" PRIu64 ")", what, NUM_PUTS,
          after.flush_reads - before.flush_reads, expected_reads);
    check(after.tx_wrs - before.tx_wrs == NUM_PUTS + expected_reads,
          "%s: %" PRIu64 " work requests posted (expected %" PRIu64 ")",
          what, after.tx_wrs - before.tx_wrs, NUM_PUTS + expected_reads);
    check(batch_arrived(pair), "%s: data byte-exact at the target", what);

    status = uct_ep_flush(pair->a.ep, 0, NULL);
    again  = get_stats(&pair->a);
    check((status == UCS_OK) && (again.flush_reads == after.flush_reads) &&
          (again.tx_wrs == after.tx_wrs),
          "%s: a second flush with no new writes is done at once, no read "
          "(%s, %" PRIu64 " more)", what, ucs_status_string(status),
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
    test_stats_t before, after;
    ucs_status_t status;
    ssize_t packed;

    memset(dst, 0, BUF_SIZE);
    fill(src, 256, 77);

    before = get_stats(&pair->a);
    status = RETRY(pair->nodes, 2,
                   uct_ep_put_short(pair->a.ep, src, 32, pair->wb.buf,
                                    pair->rkey.rkey));
    if (status == UCS_OK) {
        status = ep_flush_wait(pair);
    }
    after = get_stats(&pair->a);
    check((status == UCS_OK) && (after.flush_reads - before.flush_reads == 1)
          && !memcmp(src, dst, 32), "always: put_short then flush -> 1 read");

    before = after;
    packed = RETRY(pair->nodes, 2,
                   uct_ep_put_bcopy(pair->a.ep, pack_cb, src + 64,
                                    pair->wb.buf + 64, pair->rkey.rkey));
    status = (packed == 64) ? ep_flush_wait(pair) : (ucs_status_t)packed;
    after  = get_stats(&pair->a);
    check((status == UCS_OK) && (after.flush_reads - before.flush_reads == 1)
          && !memcmp(src + 64, dst + 64, 64),
          "always: put_bcopy then flush -> 1 read");

    if (pair->a.attr.cap.atomic64.op_flags & UCS_BIT(UCT_ATOMIC_OP_ADD)) {
        before = after;
        *word  = 5;
        status = RETRY(pair->nodes, 2,
                       uct_ep_atomic64_post(pair->a.ep, UCT_ATOMIC_OP_ADD, 3,
                                            pair->wb.buf + 8192,
                                            pair->rkey.rkey));
        if (status == UCS_OK) {
            status = ep_flush_wait(pair);
        }
        after = get_stats(&pair->a);
        check((status == UCS_OK) &&
              (after.flush_reads - before.flush_reads == 1) && (*word == 8),
              "always: atomic add then flush -> 1 read");
    } else {
        printf("SKIP always: atomic add then flush: the device has no "
               "64-bit atomics\n");
    }

    /* A get writes nothing remote: its flush reads nothing more */
    before = after;
    {
        wait_comp_t wc;
        uct_iov_t iov = {src + 4096, 64, pair->a.memh, 0, 1};

        init_wc(&wc);
        status = RETRY(pair->nodes, 2,
                       uct_ep_get_zcopy(pair->a.ep, &iov, 1, pair->wb.buf,
                                        pair->rkey.rkey, &wc.comp));
        status = wait_comp(pair->nodes, 2, status, &wc);
        if (status == UCS_OK) {
            status = ep_flush_wait(pair);
        }
    }
    after = get_stats(&pair->a);
    check((status == UCS_OK) && (after.flush_reads == before.flush_reads),
          "always: get_zcopy then flush -> no read");
}


/* uct_iface_flush (no completion) posts the read of a dirty endpoint. */
static void check_iface_flush(pair_t *pair)
{
    wait_comp_t wcs[NUM_PUTS];
    test_stats_t before, after;
    ucs_status_t status;
    double deadline;

    memset(pair->b.buf, 0, BUF_SIZE);
    before = get_stats(&pair->a);
    status = put_batch(pair, pair->rkey.rkey, 40, wcs);
    deadline = now() + OP_TIMEOUT_S;
    while ((status == UCS_OK) || (status == UCS_INPROGRESS)) {
        status = uct_iface_flush(pair->a.iface, 0, NULL);
        if ((status == UCS_OK) || (now() > deadline)) {
            break;
        }
        progress(pair->nodes, 2);
    }
    after = get_stats(&pair->a);
    check((status == UCS_OK) && (after.flush_reads - before.flush_reads == 1)
          && batch_arrived(pair),
          "always: %d puts then uct_iface_flush -> 1 read (%s, %" PRIu64
          ")", NUM_PUTS, ucs_status_string(status),
          after.flush_reads - before.flush_reads);
}


/* With the send queue full, the flush cannot post its read: NO_RESOURCE,
 * nothing changed; after progress it posts it. */
static void check_no_resource(const char *dev_a, const char *dev_b)
{
    wait_comp_t wcs[NUM_PUTS], wc;
    unsigned char *src;
    test_stats_t before, after;
    ucs_status_t status, first;
    pair_t pair;
    uct_iov_t iov;
    int i, posted = 0;

    setenv("UCX_RC_GDR_TX_QUEUE_LEN", "4", 1);
    pair_open(&pair, dev_a, dev_b, "always");
    unsetenv("UCX_RC_GDR_TX_QUEUE_LEN");
    src = pair.a.buf;

    before = get_stats(&pair.a);
    for (i = 0; i < NUM_PUTS; ++i) {
        fill(src + i * 64, 64, 90 + i);
        iov.buffer = src + i * 64;
        iov.length = 64;
        iov.memh   = pair.a.memh;
        iov.stride = 0;
        iov.count  = 1;
        init_wc(&wcs[i]);
        /* no progress: the send queue fills */
        status = uct_ep_put_zcopy(pair.a.ep, &iov, 1, pair.wb.buf + i * 64,
                                  pair.rkey.rkey, &wcs[i].comp);
        if (status != UCS_INPROGRESS) {
            break;
        }
        ++posted;
    }

    init_wc(&wc);
    first  = uct_ep_flush(pair.a.ep, 0, &wc.comp);
    after  = get_stats(&pair.a);
    check((posted == 4) && (first == UCS_ERR_NO_RESOURCE) &&
          (after.flush_reads == before.flush_reads),
          "always: flush with the send queue full (%d posted) -> "
          "NO_RESOURCE, no read yet (%s)", posted,
          ucs_status_string(first));

    status = RETRY(pair.nodes, 2, uct_ep_flush(pair.a.ep, 0, &wc.comp));
    status = wait_comp(pair.nodes, 2, status, &wc);
    after  = get_stats(&pair.a);
    check((status == UCS_OK) && (after.flush_reads - before.flush_reads == 1)
          && !memcmp(src, pair.b.buf, posted * 64),
          "always: the retried flush posts the read and completes (%s)",
          ucs_status_string(status));

    pair_close(&pair);
}


/* A bad value is refused by the configuration parser, with its name. */
static void check_bad_value(const char *dev)
{
    uct_iface_config_t *iface_config;
    uct_md_config_t *md_config;
    uct_component_h component;
    char md_name[64], *colon;
    ucs_status_t status;
    uct_md_h md;

    snprintf(md_name, sizeof(md_name), "%s", dev);
    colon = strchr(md_name, ':');
    if (colon != NULL) {
        *colon = '\0';
    }

    component = find_component();
    if ((uct_md_config_read(component, NULL, NULL, &md_config) != UCS_OK) ||
        (uct_md_open(component, md_name, md_config, &md) != UCS_OK)) {
        die("uct_md_open", UCS_ERR_NO_DEVICE);
    }
    uct_config_release(md_config);

    set_flush_knob("sometimes");
    printf("(an 'Invalid value' error line is expected next)\n");
    fflush(stdout);
    status = uct_md_iface_config_read(md, TL_NAME, NULL, NULL,
                                      &iface_config);
    set_flush_knob(NULL);
    if (status == UCS_OK) {
        uct_config_release(iface_config);
    }
    check(status == UCS_ERR_INVALID_PARAM,
          "UCX_RC_GDR_FLUSH=sometimes is refused (%s)",
          ucs_status_string(status));
    uct_md_close(md);
}


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
    pair_close(&pair);

    check_bad_value(dev_a);
    return 0;
}


static void write_all(int fd, const void *buf, size_t len)
{
    if (write(fd, buf, len) != (ssize_t)len) {
        perror("write");
        exit(2);
    }
}


static void read_all(int fd, void *buf, size_t len)
{
    size_t done = 0;
    ssize_t ret;

    while (done < len) {
        ret = read(fd, (char*)buf + done, len - done);
        if (ret <= 0) {
            perror("read");
            exit(2);
        }
        done += ret;
    }
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
    int to_child[2], to_parent[2];
    node_t a, b, *nodes[1] = {&a};
    test_stats_t before, after;
    uct_rkey_bundle_t rkey;
    ucs_status_t status;
    wait_comp_t wc, put_wc;
    uct_iov_t iov;
    double t_flush, elapsed;
    pid_t child;
    char ready;

    if (getenv("UCX_RC_GDR_FAILURE_TIMEOUT") == NULL) {
        setenv("UCX_RC_GDR_FAILURE_TIMEOUT", "2s", 1);
    }
    set_flush_knob("always");

    if ((pipe(to_child) != 0) || (pipe(to_parent) != 0)) {
        perror("pipe");
        return 2;
    }

    child = fork();
    if (child == 0) {
        node_t *bnodes[1] = {&b};
        wire_t wa, wb;

        node_open(&b, dev_b, BUF_SIZE);
        node_wire(&b, &wb);
        write_all(to_parent[1], &wb, sizeof(wb));
        read_all(to_child[0], &wa, sizeof(wa));
        node_connect(&b, &wa);
        write_all(to_parent[1], "r", 1);
        for (;;) {
            progress(bnodes, 1);
        }
    }

    {
        wire_t wa, wb;

        node_open(&a, dev_a, BUF_SIZE);
        node_wire(&a, &wa);
        read_all(to_parent[0], &wb, sizeof(wb));
        write_all(to_child[1], &wa, sizeof(wa));
        node_connect(&a, &wb);
        read_all(to_parent[0], &ready, 1);
        if (uct_rkey_unpack(a.component, wb.rkey, &rkey) != UCS_OK) {
            die("uct_rkey_unpack", UCS_ERR_INVALID_PARAM);
        }

        iov.buffer = a.buf;
        iov.length = 65536;
        iov.memh   = a.memh;
        iov.stride = 0;
        iov.count  = 1;

        /* alive: put + flush with its read */
        before = get_stats(&a);
        init_wc(&put_wc);
        status = RETRY(nodes, 1, uct_ep_put_zcopy(a.ep, &iov, 1, wb.buf,
                                                  rkey.rkey, &put_wc.comp));
        status = wait_comp(nodes, 1, status, &put_wc);
        if (status == UCS_OK) {
            init_wc(&wc);
            status = RETRY(nodes, 1, uct_ep_flush(a.ep, 0, &wc.comp));
            status = wait_comp(nodes, 1, status, &wc);
        }
        after = get_stats(&a);
        check((status == UCS_OK) && (after.flush_reads - before.flush_reads
                                     == 1),
              "live peer: put + flush with a read succeed (%s)",
              ucs_status_string(status));

        /* a write completes: the endpoint owes a read */
        init_wc(&put_wc);
        status = RETRY(nodes, 1, uct_ep_put_zcopy(a.ep, &iov, 1, wb.buf,
                                                  rkey.rkey, &put_wc.comp));
        status = wait_comp(nodes, 1, status, &put_wc);
        check(status == UCS_OK, "live peer: a second put completes (%s)",
              ucs_status_string(status));

        kill(child, SIGKILL);
        waitpid(child, NULL, 0);

        /* dead: the flush READ is never answered */
        before  = get_stats(&a);
        t_flush = now();
        init_wc(&wc);
        status  = RETRY(nodes, 1, uct_ep_flush(a.ep, 0, &wc.comp));
        after   = get_stats(&a);
        check((status == UCS_INPROGRESS) &&
              (after.flush_reads - before.flush_reads == 1) &&
              (after.tx_wrs - before.tx_wrs == 1),
              "dead peer: the flush posted its read, the only work request "
              "(%s, %" PRIu64 " read)", ucs_status_string(status),
              after.flush_reads - before.flush_reads);

        while ((status == UCS_INPROGRESS) && (wc.comp.count > 0) &&
               (now() < t_flush + 3 * bound + 10)) {
            progress(nodes, 1);
        }
        elapsed = now() - t_flush;
        if (status == UCS_INPROGRESS) {
            status = (wc.comp.count > 0) ? UCS_ERR_TIMED_OUT : wc.status;
        }

        printf("peer killed: the flush ended with %s after %.2f s "
               "(bound %.1f s, UCX_RC_GDR_FAILURE_TIMEOUT=%s)\n",
               ucs_status_string(status), elapsed, bound,
               getenv("UCX_RC_GDR_FAILURE_TIMEOUT"));
        check(UCS_STATUS_IS_ERR(status) && (status != UCS_ERR_TIMED_OUT) &&
              (elapsed <= bound),
              "dead peer: the flush completes with an error within %.1f s "
              "(%s, %.2f s)", bound, ucs_status_string(status), elapsed);
        check(g_ep_error, "dead peer: error handler called (%s)",
              ucs_status_string(g_ep_error_status));

        uct_rkey_release(a.component, &rkey);
        node_close(&a);
    }
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
    wait_comp_t put_wc;
    ucs_status_t status;
    uct_iov_t iov;
    double t0;

    iov.buffer = pair->a.buf;
    iov.length = size;
    iov.memh   = pair->a.memh;
    iov.stride = 0;
    iov.count  = 1;

    t0 = now();
    init_wc(&put_wc);
    status = RETRY(pair->nodes, 2,
                   uct_ep_put_zcopy(pair->a.ep, &iov, 1, pair->wb.buf,
                                    pair->rkey.rkey, &put_wc.comp));
    if (UCS_STATUS_IS_ERR(status)) {
        die("put_zcopy", status);
    }
    status = ep_flush_wait(pair);
    if (status != UCS_OK) {
        die("flush", status);
    }
    /* the put's own completion came before the flush's */
    return now() - t0;
}


static int run_bench(const char *dev_a, const char *dev_b, int iters)
{
    static const size_t sizes[] = {8, 65536};
    pair_t with_read, plain;
    test_stats_t r0, r1, p0, p1;
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
        r0 = get_stats(&with_read.a);
        p0 = get_stats(&plain.a);
        for (i = 0; i < iters; ++i) {
            t_read[i]  = time_put_flush(&with_read, sizes[si]);
            t_plain[i] = time_put_flush(&plain, sizes[si]);
        }
        r1      = get_stats(&with_read.a);
        p1      = get_stats(&plain.a);
        m_read  = median(t_read, iters) * 1e6;
        m_plain = median(t_plain, iters) * 1e6;
        printf("%-8s %24.1f %28.1f %14.1f\n",
               (sizes[si] == 8) ? "8 B" : "64 KiB", m_plain, m_read,
               m_read - m_plain);
        check((r1.flush_reads - r0.flush_reads == (uint64_t)iters) &&
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
    setvbuf(stdout, NULL, _IOLBF, 0);

    g_stats_query = (stats_query_func_t)dlsym(RTLD_DEFAULT,
                                              "uct_rc_gdr_iface_stats_query");
    if (g_stats_query == NULL) {
        fprintf(stderr, "uct_flush: uct_rc_gdr_iface_stats_query not found "
                "(is the module preloaded? . contrib/env.sh)\n");
        return 2;
    }

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

    printf("%d passed, %d failed\n", g_passed, g_failed);
    return (g_failed == 0) ? 0 : 1;
}
