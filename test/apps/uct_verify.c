/*
 * uct_verify: byte-exact checks of rc_gdr through the public UCT API, run
 * on real verbs devices (the soft-RoCE guest).
 *
 *   uct_verify data DEV_A DEV_B          every put/get/am/atomic flavour,
 *                                        many sizes and offsets, A -> B
 *   uct_verify peer-death DEV_A DEV_B SEC a forked peer is killed with
 *                                        SIGKILL mid-transfer; the survivor
 *                                        must see an error within SEC
 *   uct_verify bad-address DEV           corrupt endpoint/device addresses
 *                                        and remote keys are refused
 *
 * Prints one "PASS name" / "FAIL name" line per check and exits non-zero if
 * any check failed. ucx_perftest moves data but never looks at it: this
 * program does.
 */

#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


#define TL_NAME       "rc_gdr"
#define AM_ID         7
#define BUF_SIZE      (2u * 1024 * 1024)
#define OP_TIMEOUT_S  30.0

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

typedef struct {
    uct_completion_t    comp;
    ucs_status_t        status;
} wait_comp_t;

static int g_failed, g_passed;
static volatile int g_ep_error;
static ucs_status_t g_ep_error_status;

/* AM receive log */
static unsigned char g_am_data[BUF_SIZE];
static size_t g_am_length;
static int g_am_count;


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
    fprintf(stderr, "uct_verify: %s: %s\n", what, ucs_status_string(status));
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


static ucs_status_t err_handler(void *arg, uct_ep_h ep, ucs_status_t status)
{
    g_ep_error        = 1;
    g_ep_error_status = status;
    return UCS_OK;
}


static ucs_status_t am_handler(void *arg, void *data, size_t length,
                               unsigned flags)
{
    if (length <= sizeof(g_am_data)) {
        memcpy(g_am_data, data, length);
    }
    g_am_length = length;
    ++g_am_count;
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
        fprintf(stderr, "uct_verify: component '%s' is not registered "
                "(is the module preloaded? . contrib/env.sh)\n", TL_NAME);
        exit(2);
    }
    return found;
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
    uct_iface_set_am_handler(node->iface, AM_ID, am_handler, node, 0);
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


/* Address blobs of a node, as a peer receives them. */
typedef struct {
    unsigned char dev[64];
    unsigned char ep[64];
    unsigned char rkey[64];
    uint64_t      buf;
} wire_t;


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


/* Completes an operation (INPROGRESS + comp) and flushes, bounded. */
static ucs_status_t wait_op(node_t **nodes, int count, node_t *initiator,
                            ucs_status_t status, wait_comp_t *wc)
{
    wait_comp_t flush_wc;
    double deadline = now() + OP_TIMEOUT_S;

    if (UCS_STATUS_IS_ERR(status)) {
        return status;
    }

    while ((status == UCS_INPROGRESS) && (wc->comp.count > 0)) {
        progress(nodes, count);
        if (now() > deadline) {
            return UCS_ERR_TIMED_OUT;
        }
    }
    if ((status == UCS_INPROGRESS) && (wc->status != UCS_OK)) {
        return wc->status;
    }

    flush_wc.comp.func   = comp_cb;
    flush_wc.comp.count  = 1;
    flush_wc.comp.status = UCS_OK;
    flush_wc.status      = UCS_OK;
    do {
        status = uct_ep_flush(initiator->ep, 0, &flush_wc.comp);
        progress(nodes, count);
        if (now() > deadline) {
            return UCS_ERR_TIMED_OUT;
        }
    } while (status == UCS_ERR_NO_RESOURCE);

    while ((status == UCS_INPROGRESS) && (flush_wc.comp.count > 0)) {
        progress(nodes, count);
        if (now() > deadline) {
            return UCS_ERR_TIMED_OUT;
        }
    }
    return (status == UCS_INPROGRESS) ? flush_wc.status : status;
}


static void init_wc(wait_comp_t *wc)
{
    wc->comp.func   = comp_cb;
    wc->comp.count  = 1;
    wc->comp.status = UCS_OK;
    wc->status      = UCS_OK;
}


typedef struct {
    const void *src;
    size_t     length;
} pack_arg_t;


static size_t pack_cb(void *dest, void *arg)
{
    pack_arg_t *pa = arg;

    memcpy(dest, pa->src, pa->length);
    return pa->length;
}


static void unpack_cb(void *arg, const void *data, size_t length)
{
    memcpy(arg, data, length);
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


static int run_data(const char *dev_a, const char *dev_b)
{
    static const size_t sizes[]   = {1, 7, 8, 63, 64, 100, 127, 128, 129,
                                     4095, 4096, 8000, 8192, 65536,
                                     1048576 + 13};
    static const size_t offsets[] = {0, 1, 3, 4095};
    node_t a, b, *nodes[2] = {&a, &b};
    unsigned char *src, *dst, *got;
    wire_t wa, wb;
    uct_rkey_bundle_t rkey;
    ucs_status_t status;
    wait_comp_t wc;
    uct_iov_t iov;
    pack_arg_t pa;
    size_t si, oi, length, offset;
    uint64_t remote, result, *word;
    unsigned seed = 1;
    ssize_t packed;
    int ok;

    node_open(&a, dev_a, BUF_SIZE);
    node_open(&b, dev_b, BUF_SIZE);
    node_wire(&a, &wa);
    node_wire(&b, &wb);
    node_connect(&a, &wb);
    node_connect(&b, &wa);

    status = uct_rkey_unpack(a.component, wb.rkey, &rkey);
    check(status == UCS_OK, "rkey unpack");
    if (status != UCS_OK) {
        return 1;
    }

    src = a.buf;
    dst = b.buf;
    got = malloc(BUF_SIZE);

    for (si = 0; si < sizeof(sizes) / sizeof(sizes[0]); ++si) {
        for (oi = 0; oi < sizeof(offsets) / sizeof(offsets[0]); ++oi) {
            length = sizes[si];
            offset = offsets[oi];
            if (offset + length > BUF_SIZE) {
                continue;
            }
            remote = wb.buf + offset;

            /* put_short */
            if (length <= a.attr.cap.put.max_short) {
                fill(src + offset, length, ++seed);
                memset(dst, 0, BUF_SIZE);
                status = wait_op(nodes, 2, &a,
                                 RETRY(nodes, 2, uct_ep_put_short(a.ep,
                                       src + offset, length, remote,
                                       rkey.rkey)), &wc);
                check((status == UCS_OK) &&
                      !memcmp(dst + offset, src + offset, length),
                      "put_short size %zu offset %zu", length, offset);
            }

            /* put_bcopy */
            if (length <= a.attr.cap.put.max_bcopy) {
                fill(src + offset, length, ++seed);
                memset(dst, 0, BUF_SIZE);
                pa.src    = src + offset;
                pa.length = length;
                packed    = RETRY(nodes, 2, uct_ep_put_bcopy(a.ep, pack_cb,
                                  &pa, remote, rkey.rkey));
                status    = wait_op(nodes, 2, &a,
                                    (packed < 0) ? (ucs_status_t)packed :
                                    UCS_OK, &wc);
                check((status == UCS_OK) && (packed == (ssize_t)length) &&
                      !memcmp(dst + offset, src + offset, length),
                      "put_bcopy size %zu offset %zu (%s, packed %zd)",
                      length, offset, ucs_status_string(status), packed);
            }

            /* put_zcopy */
            fill(src + offset, length, ++seed);
            memset(dst, 0, BUF_SIZE);
            iov.buffer = src + offset;
            iov.length = length;
            iov.memh   = a.memh;
            iov.stride = 0;
            iov.count  = 1;
            init_wc(&wc);
            status = wait_op(nodes, 2, &a,
                             RETRY(nodes, 2, uct_ep_put_zcopy(a.ep, &iov, 1,
                                   remote, rkey.rkey, &wc.comp)), &wc);
            check((status == UCS_OK) &&
                  !memcmp(dst + offset, src + offset, length) &&
                  (dst[offset + length] == 0),
                  "put_zcopy size %zu offset %zu", length, offset);

            /* get_bcopy */
            if (length <= a.attr.cap.get.max_bcopy) {
                fill(dst + offset, length, ++seed);
                memset(got, 0, length);
                init_wc(&wc);
                status = wait_op(nodes, 2, &a,
                                 RETRY(nodes, 2, uct_ep_get_bcopy(a.ep,
                                       unpack_cb, got, length, remote,
                                       rkey.rkey, &wc.comp)), &wc);
                check((status == UCS_OK) &&
                      !memcmp(got, dst + offset, length),
                      "get_bcopy size %zu offset %zu", length, offset);
            }

            /* get_zcopy */
            fill(dst + offset, length, ++seed);
            memset(src, 0, BUF_SIZE);
            iov.buffer = src + offset;
            init_wc(&wc);
            status = wait_op(nodes, 2, &a,
                             RETRY(nodes, 2, uct_ep_get_zcopy(a.ep, &iov, 1,
                                   remote, rkey.rkey, &wc.comp)), &wc);
            check((status == UCS_OK) &&
                  !memcmp(src + offset, dst + offset, length),
                  "get_zcopy size %zu offset %zu", length, offset);

            /* am_short / am_bcopy / am_zcopy, delivered to B's handler */
            if (length + 8 <= a.attr.cap.am.max_short + 8) {
                uint64_t hdr = 0x1122334455667788ull ^ seed;
                fill(src + offset, length, ++seed);
                g_am_count = 0;
                status = RETRY(nodes, 2, uct_ep_am_short(a.ep, AM_ID, hdr,
                               src + offset, length));
                status = wait_op(nodes, 2, &a, status, &wc);
                while ((status == UCS_OK) && (g_am_count == 0)) {
                    progress(nodes, 2);
                }
                ok = (status == UCS_OK) && (g_am_length == length + 8) &&
                     !memcmp(g_am_data, &hdr, 8) &&
                     !memcmp(g_am_data + 8, src + offset, length);
                check(ok, "am_short size %zu offset %zu", length, offset);
            }

            if (length <= a.attr.cap.am.max_bcopy) {
                fill(src + offset, length, ++seed);
                g_am_count = 0;
                pa.src     = src + offset;
                pa.length  = length;
                packed     = RETRY(nodes, 2, uct_ep_am_bcopy(a.ep, AM_ID,
                                   pack_cb, &pa, 0));
                status     = wait_op(nodes, 2, &a,
                                     (packed < 0) ? (ucs_status_t)packed :
                                     UCS_OK, &wc);
                while ((status == UCS_OK) && (g_am_count == 0)) {
                    progress(nodes, 2);
                }
                check((status == UCS_OK) && (g_am_length == length) &&
                      !memcmp(g_am_data, src + offset, length),
                      "am_bcopy size %zu offset %zu", length, offset);
            }

            if (length + 16 <= a.attr.cap.am.max_zcopy) {
                char hdr16[16] = "rc_gdr-am-zcopy";
                fill(src + offset, length, ++seed);
                g_am_count = 0;
                iov.buffer = src + offset;
                init_wc(&wc);
                status = RETRY(nodes, 2, uct_ep_am_zcopy(a.ep, AM_ID, hdr16,
                               sizeof(hdr16), &iov, 1, 0, &wc.comp));
                status = wait_op(nodes, 2, &a, status, &wc);
                while ((status == UCS_OK) && (g_am_count == 0)) {
                    progress(nodes, 2);
                }
                check((status == UCS_OK) &&
                      (g_am_length == length + sizeof(hdr16)) &&
                      !memcmp(g_am_data, hdr16, sizeof(hdr16)) &&
                      !memcmp(g_am_data + sizeof(hdr16), src + offset,
                              length),
                      "am_zcopy size %zu offset %zu", length, offset);
            }
        }
    }

    /* Many active messages in a row: more than the credit window, so the
     * peer must return credits for the sender to go on. */
    g_am_count = 0;
    for (si = 0; si < 1000; ++si) {
        status = RETRY(nodes, 2, uct_ep_am_short(a.ep, AM_ID, si, NULL, 0));
        if (status != UCS_OK) {
            break;
        }
    }
    status = wait_op(nodes, 2, &a, status, &wc);
    {
        double deadline = now() + OP_TIMEOUT_S;
        while ((g_am_count < 1000) && (now() < deadline)) {
            progress(nodes, 2);
        }
    }
    check((status == UCS_OK) && (g_am_count == 1000),
          "1000 active messages through credit flow control (%d arrived)",
          g_am_count);

    /* 64-bit atomics, if the device has them */
    if (a.attr.cap.flags & UCT_IFACE_FLAG_ATOMIC_DEVICE) {
        word  = (uint64_t*)(dst + 64);
        *word = 40;
        init_wc(&wc);
        status = wait_op(nodes, 2, &a,
                         RETRY(nodes, 2, uct_ep_atomic64_fetch(a.ep,
                               UCT_ATOMIC_OP_ADD, 2, &result, wb.buf + 64,
                               rkey.rkey, &wc.comp)), &wc);
        check((status == UCS_OK) && (result == 40) && (*word == 42),
              "atomic fetch-add (got %" PRIu64 ", now %" PRIu64 ")", result,
              *word);

        init_wc(&wc);
        status = wait_op(nodes, 2, &a,
                         RETRY(nodes, 2, uct_ep_atomic_cswap64(a.ep, 42, 7,
                               wb.buf + 64, rkey.rkey, &result, &wc.comp)),
                         &wc);
        check((status == UCS_OK) && (result == 42) && (*word == 7),
              "atomic compare-swap");

        status = wait_op(nodes, 2, &a,
                         RETRY(nodes, 2, uct_ep_atomic64_post(a.ep,
                               UCT_ATOMIC_OP_ADD, 5, wb.buf + 64,
                               rkey.rkey)), &wc);
        check((status == UCS_OK) && (*word == 12), "atomic post add");

        status = uct_ep_atomic64_post(a.ep, UCT_ATOMIC_OP_ADD, 1,
                                      wb.buf + 65, rkey.rkey);
        check(status == UCS_ERR_INVALID_PARAM,
              "atomic on an unaligned address is refused (%s)",
              ucs_status_string(status));
    }

    check(!g_ep_error, "no endpoint error during the data checks");
    uct_rkey_release(a.component, &rkey);
    free(got);
    node_close(&a);
    node_close(&b);
    return 0;
}


static int run_bad_address(const char *dev)
{
    node_t a, *nodes[1] = {&a};
    unsigned char blob[64];
    wire_t wa;
    uct_rkey_bundle_t rkey;
    ucs_status_t status;
    size_t i;
    int refused = 0, cases = 0;

    node_open(&a, dev, 4096);
    node_wire(&a, &wa);

    /* Random bytes as device/ep addresses and rkeys. */
    srand(7);
    for (cases = 0; cases < 500; ++cases) {
        for (i = 0; i < sizeof(blob); ++i) {
            blob[i] = rand();
        }
        if (uct_rkey_unpack(a.component, blob, &rkey) != UCS_OK) {
            ++refused;
        } else {
            uct_rkey_release(a.component, &rkey);
        }
    }
    check(refused == cases, "random remote keys refused (%d of %d)",
          refused, cases);

    memcpy(blob, wa.rkey, sizeof(blob));
    blob[0] ^= 0x01; /* another format version */
    check(uct_rkey_unpack(a.component, blob, &rkey) != UCS_OK,
          "remote key of another version refused");

    memcpy(blob, wa.ep, sizeof(blob));
    blob[2] ^= 0x40; /* a flipped QP number bit */
    status = uct_ep_connect_to_ep(a.ep, (uct_device_addr_t*)wa.dev,
                                  (uct_ep_addr_t*)blob);
    check(status != UCS_OK, "corrupt endpoint address refused (%s)",
          ucs_status_string(status));

    memcpy(blob, wa.dev, sizeof(blob));
    blob[5] ^= 0xff;
    status = uct_ep_connect_to_ep(a.ep, (uct_device_addr_t*)blob,
                                  (uct_ep_addr_t*)wa.ep);
    check(status != UCS_OK, "corrupt device address refused (%s)",
          ucs_status_string(status));
    check(!uct_iface_is_reachable(a.iface, (uct_device_addr_t*)blob, NULL),
          "corrupt device address is not reachable");

    /* The endpoint is still usable: connect it to itself and move data. */
    node_connect(&a, &wa);
    status = uct_rkey_unpack(a.component, wa.rkey, &rkey);
    if (status == UCS_OK) {
        uint64_t value = 0x5a5a5a5a, *dst = a.buf;
        wait_comp_t wc;
        status = wait_op(nodes, 1, &a,
                         RETRY(nodes, 1, uct_ep_put_short(a.ep, &value,
                               sizeof(value), wa.buf, rkey.rkey)), &wc);
        check((status == UCS_OK) && (*dst == value),
              "endpoint works after refused addresses");
        uct_rkey_release(a.component, &rkey);
    }

    node_close(&a);
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


static int run_peer_death(const char *dev_a, const char *dev_b, double bound)
{
    int to_child[2], to_parent[2];
    node_t a, b, *nodes[1] = {&a};
    uct_rkey_bundle_t rkey;
    ucs_status_t status = UCS_OK;
    wire_t wa, wb;
    wait_comp_t wc;
    uct_iov_t iov;
    double t_kill, elapsed, deadline;
    pid_t child;
    char ready;
    int i;

    if ((pipe(to_child) != 0) || (pipe(to_parent) != 0)) {
        perror("pipe");
        return 2;
    }

    child = fork();
    if (child == 0) {
        /* The target: publishes its buffer and progresses until killed. */
        node_t *bnodes[1] = {&b};
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

    for (i = 0; i < 20; ++i) {
        init_wc(&wc);
        status = wait_op(nodes, 1, &a,
                         RETRY(nodes, 1, uct_ep_put_zcopy(a.ep, &iov, 1,
                               wb.buf, rkey.rkey, &wc.comp)), &wc);
        if (status != UCS_OK) {
            break;
        }
    }
    check(status == UCS_OK, "transfers to a live peer succeed");

    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    t_kill   = now();
    deadline = t_kill + 3 * bound + 10;

    /* Keep transferring: every operation must end, with an error. */
    status = UCS_OK;
    while ((status == UCS_OK) && !g_ep_error && (now() < deadline)) {
        init_wc(&wc);
        status = RETRY(nodes, 1, uct_ep_put_zcopy(a.ep, &iov, 1, wb.buf,
                       rkey.rkey, &wc.comp));
        while ((status == UCS_INPROGRESS) && (wc.comp.count > 0) &&
               (now() < deadline)) {
            progress(nodes, 1);
        }
        if (status == UCS_INPROGRESS) {
            status = (wc.comp.count > 0) ? UCS_ERR_TIMED_OUT : wc.status;
        }
    }
    elapsed = now() - t_kill;

    printf("peer killed: survivor saw %s%s after %.2f s (bound %.1f s)\n",
           ucs_status_string(g_ep_error ? g_ep_error_status : status),
           g_ep_error ? " through the error handler" : "", elapsed, bound);
    check((status != UCS_OK) && (status != UCS_ERR_TIMED_OUT) &&
          (elapsed <= bound),
          "peer death reported within %.1f s (%.2f s)", bound, elapsed);
    check(g_ep_error, "error handler called with %s",
          ucs_status_string(g_ep_error_status));

    uct_rkey_release(a.component, &rkey);
    node_close(&a);
    return 0;
}


int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);

    if ((argc == 4) && !strcmp(argv[1], "data")) {
        run_data(argv[2], argv[3]);
    } else if ((argc == 5) && !strcmp(argv[1], "peer-death")) {
        run_peer_death(argv[2], argv[3], atof(argv[4]));
    } else if ((argc == 3) && !strcmp(argv[1], "bad-address")) {
        run_bad_address(argv[2]);
    } else {
        fprintf(stderr,
                "usage: %s data DEV_A DEV_B | peer-death DEV_A DEV_B SEC | "
                "bad-address DEV\n", argv[0]);
        return 2;
    }

    printf("%d passed, %d failed\n", g_passed, g_failed);
    return (g_failed == 0) ? 0 : 1;
}
