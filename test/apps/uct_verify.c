/*
 * uct_verify: byte-exact checks of rc_gdr through the public UCT API, run
 * on real verbs devices (the soft-RoCE guest).
 *
 *   uct_verify data DEV_A DEV_B          every put/get/am/atomic flavour,
 *                                        many sizes and offsets, A -> B
 *   uct_verify peer-death DEV_A DEV_B SEC a forked peer is killed with
 *                                        SIGKILL mid-transfer; the survivor
 *                                        must see an error within SEC
 *   uct_verify peer-death-am DEV_A DEV_B SEC  the same with active
 *                                        messages (SENDs) and flushes
 *   uct_verify bad-address DEV           corrupt endpoint/device addresses
 *                                        and remote keys are refused
 *   uct_verify pending-connect DEV_A DEV_B  a request queued before the
 *                                        connection goes out after it
 *   uct_verify fork DEV_A DEV_B          children unmap registered memory
 *                                        and exit, exec, or write it; the
 *                                        parent's registrations and
 *                                        transfers are intact afterwards
 *
 * Prints one "PASS name" / "FAIL name" line per check and exits non-zero if
 * any check failed. ucx_perftest moves data but never looks at it: this
 * program does.
 */

#include "uct_test_util.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>


#define AM_ID         7
#define BUF_SIZE      (2u * 1024 * 1024)
#define OP_TIMEOUT_S  30.0

/* AM receive log */
static unsigned char g_am_data[BUF_SIZE];
static size_t g_am_length;
static int g_am_count;


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


/* A node whose active messages land in g_am_data */
static void node_open(uct_test_node_t *node, const char *dev, size_t buf_size)
{
    ucs_status_t status;

    uct_test_node_open(node, dev, buf_size);
    status = uct_iface_set_am_handler(node->iface, AM_ID, am_handler, node,
                                      0);
    if (status != UCS_OK) {
        uct_test_die("uct_iface_set_am_handler", status);
    }
}


/* Completes an operation (INPROGRESS + comp) and flushes, bounded. */
static ucs_status_t wait_op(uct_test_node_t **nodes, int count,
                            uct_test_node_t *initiator, ucs_status_t status,
                            uct_test_comp_t *wc)
{
    status = uct_test_comp_wait(nodes, count, status, wc);
    if (status != UCS_OK) {
        return status;
    }
    return uct_test_ep_flush(nodes, count, initiator->ep);
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


static int run_data(const char *dev_a, const char *dev_b)
{
    static const size_t sizes[]   = {1, 7, 8, 63, 64, 100, 127, 128, 129,
                                     4095, 4096, 8000, 8192, 65536,
                                     1048576 + 13};
    static const size_t offsets[] = {0, 1, 3, 4095};
    uct_test_node_t a, b, *nodes[2] = {&a, &b};
    unsigned char *src, *dst, *got;
    uct_test_wire_t wb;
    uct_rkey_bundle_t rkey;
    ucs_status_t status;
    uct_test_comp_t wc;
    uct_iov_t iov;
    pack_arg_t pa;
    size_t si, oi, length, offset;
    uint64_t remote, result, *word;
    unsigned seed = 1;
    ssize_t packed;
    int ok;

    node_open(&a, dev_a, BUF_SIZE);
    node_open(&b, dev_b, BUF_SIZE);
    uct_test_node_connect_pair(&a, &b, NULL, &wb);

    status = uct_rkey_unpack(a.component, wb.rkey, &rkey);
    uct_test_check(status == UCS_OK, "rkey unpack");
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
            if (length <= a.iface_attr.cap.put.max_short) {
                uct_test_fill(src + offset, length, ++seed);
                memset(dst, 0, BUF_SIZE);
                status = UCT_TEST_RETRY(nodes, 2,
                                        uct_ep_put_short(a.ep, src + offset,
                                                         length, remote,
                                                         rkey.rkey));
                status = wait_op(nodes, 2, &a, status, &wc);
                uct_test_check((status == UCS_OK) &&
                               !memcmp(dst + offset, src + offset, length),
                               "put_short size %zu offset %zu", length,
                               offset);
            }

            /* put_bcopy */
            if (length <= a.iface_attr.cap.put.max_bcopy) {
                uct_test_fill(src + offset, length, ++seed);
                memset(dst, 0, BUF_SIZE);
                pa.src    = src + offset;
                pa.length = length;
                packed    = UCT_TEST_RETRY(nodes, 2,
                                           uct_ep_put_bcopy(a.ep, pack_cb, &pa,
                                                            remote,
                                                            rkey.rkey));
                status    = wait_op(nodes, 2, &a,
                                    (packed < 0) ? (ucs_status_t)packed :
                                    UCS_OK, &wc);
                uct_test_check((status == UCS_OK) &&
                               (packed == (ssize_t)length) &&
                               !memcmp(dst + offset, src + offset, length),
                               "put_bcopy size %zu offset %zu (%s, packed %zd)",
                               length, offset, ucs_status_string(status),
                               packed);
            }

            /* put_zcopy */
            uct_test_fill(src + offset, length, ++seed);
            memset(dst, 0, BUF_SIZE);
            uct_test_iov_init(&iov, src + offset, length, a.memh);
            uct_test_comp_init(&wc);
            status = UCT_TEST_RETRY(nodes, 2,
                                    uct_ep_put_zcopy(a.ep, &iov, 1, remote,
                                                     rkey.rkey, &wc.comp));
            status = wait_op(nodes, 2, &a, status, &wc);
            uct_test_check((status == UCS_OK) &&
                           !memcmp(dst + offset, src + offset, length) &&
                           (dst[offset + length] == 0),
                           "put_zcopy size %zu offset %zu", length, offset);

            /* get_bcopy */
            if (length <= a.iface_attr.cap.get.max_bcopy) {
                uct_test_fill(dst + offset, length, ++seed);
                memset(got, 0, length);
                uct_test_comp_init(&wc);
                status = UCT_TEST_RETRY(nodes, 2,
                                        uct_ep_get_bcopy(a.ep, unpack_cb, got,
                                                         length, remote,
                                                         rkey.rkey,
                                                         &wc.comp));
                status = wait_op(nodes, 2, &a, status, &wc);
                uct_test_check((status == UCS_OK) &&
                               !memcmp(got, dst + offset, length),
                               "get_bcopy size %zu offset %zu", length,
                               offset);
            }

            /* get_zcopy */
            uct_test_fill(dst + offset, length, ++seed);
            memset(src, 0, BUF_SIZE);
            iov.buffer = src + offset;
            uct_test_comp_init(&wc);
            status = UCT_TEST_RETRY(nodes, 2,
                                    uct_ep_get_zcopy(a.ep, &iov, 1, remote,
                                                     rkey.rkey, &wc.comp));
            status = wait_op(nodes, 2, &a, status, &wc);
            uct_test_check((status == UCS_OK) &&
                           !memcmp(src + offset, dst + offset, length),
                           "get_zcopy size %zu offset %zu", length, offset);

            /* am_short / am_bcopy / am_zcopy, delivered to B's handler;
             * an active message's max_short counts its 8-byte header */
            if (length + sizeof(uint64_t) <= a.iface_attr.cap.am.max_short) {
                uint64_t hdr = 0x1122334455667788ull ^ seed;
                uct_test_fill(src + offset, length, ++seed);
                g_am_count = 0;
                status = UCT_TEST_RETRY(nodes, 2,
                                        uct_ep_am_short(a.ep, AM_ID, hdr,
                                                        src + offset,
                                                        length));
                status = wait_op(nodes, 2, &a, status, &wc);
                while ((status == UCS_OK) && (g_am_count == 0)) {
                    uct_test_progress(nodes, 2);
                }
                ok = (status == UCS_OK) && (g_am_length == length + 8) &&
                     !memcmp(g_am_data, &hdr, 8) &&
                     !memcmp(g_am_data + 8, src + offset, length);
                uct_test_check(ok, "am_short size %zu offset %zu", length,
                               offset);
            }

            if (length <= a.iface_attr.cap.am.max_bcopy) {
                uct_test_fill(src + offset, length, ++seed);
                g_am_count = 0;
                pa.src     = src + offset;
                pa.length  = length;
                packed     = UCT_TEST_RETRY(nodes, 2,
                                            uct_ep_am_bcopy(a.ep, AM_ID,
                                                            pack_cb, &pa, 0));
                status     = wait_op(nodes, 2, &a,
                                     (packed < 0) ? (ucs_status_t)packed :
                                     UCS_OK, &wc);
                while ((status == UCS_OK) && (g_am_count == 0)) {
                    uct_test_progress(nodes, 2);
                }
                uct_test_check((status == UCS_OK) && (g_am_length == length) &&
                               !memcmp(g_am_data, src + offset, length),
                               "am_bcopy size %zu offset %zu", length, offset);
            }

            if (length + 16 <= a.iface_attr.cap.am.max_zcopy) {
                char hdr16[16] = "rc_gdr-am-zcopy";
                uct_test_fill(src + offset, length, ++seed);
                g_am_count = 0;
                iov.buffer = src + offset;
                uct_test_comp_init(&wc);
                status = UCT_TEST_RETRY(nodes, 2,
                                        uct_ep_am_zcopy(a.ep, AM_ID, hdr16,
                                                        sizeof(hdr16), &iov,
                                                        1, 0, &wc.comp));
                status = wait_op(nodes, 2, &a, status, &wc);
                while ((status == UCS_OK) && (g_am_count == 0)) {
                    uct_test_progress(nodes, 2);
                }
                uct_test_check((status == UCS_OK) &&
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
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_am_short(a.ep, AM_ID, si, NULL, 0));
        if (status != UCS_OK) {
            break;
        }
    }
    status = wait_op(nodes, 2, &a, status, &wc);
    {
        double deadline = uct_test_now() + OP_TIMEOUT_S;
        while ((g_am_count < 1000) && (uct_test_now() < deadline)) {
            uct_test_progress(nodes, 2);
        }
    }
    uct_test_check((status == UCS_OK) && (g_am_count == 1000),
                   "1000 active messages through credit flow control "
                   "(%d arrived)", g_am_count);

    /* 64-bit atomics, if the device has them */
    if (a.iface_attr.cap.flags & UCT_IFACE_FLAG_ATOMIC_DEVICE) {
        word  = (uint64_t*)(dst + 64);
        *word = 40;
        uct_test_comp_init(&wc);
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_atomic64_fetch(a.ep, UCT_ATOMIC_OP_ADD,
                                                      2, &result, wb.buf + 64,
                                                      rkey.rkey, &wc.comp));
        status = wait_op(nodes, 2, &a, status, &wc);
        uct_test_check((status == UCS_OK) && (result == 40) && (*word == 42),
                       "atomic fetch-add (got %" PRIu64 ", now %" PRIu64 ")",
                       result, *word);

        uct_test_comp_init(&wc);
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_atomic_cswap64(a.ep, 42, 7, wb.buf + 64,
                                                      rkey.rkey, &result,
                                                      &wc.comp));
        status = wait_op(nodes, 2, &a, status, &wc);
        uct_test_check((status == UCS_OK) && (result == 42) && (*word == 7),
                       "atomic compare-swap");

        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_atomic64_post(a.ep, UCT_ATOMIC_OP_ADD,
                                                     5, wb.buf + 64,
                                                     rkey.rkey));
        status = wait_op(nodes, 2, &a, status, &wc);
        uct_test_check((status == UCS_OK) && (*word == 12), "atomic post add");

        status = uct_ep_atomic64_post(a.ep, UCT_ATOMIC_OP_ADD, 1,
                                      wb.buf + 65, rkey.rkey);
        uct_test_check(status == UCS_ERR_INVALID_PARAM,
                       "atomic on an unaligned address is refused (%s)",
                       ucs_status_string(status));
    }

    uct_test_check(!a.ep_error && !b.ep_error,
                   "no endpoint error during the data checks");
    uct_rkey_release(a.component, &rkey);
    free(got);
    uct_test_node_close(&a);
    uct_test_node_close(&b);
    return 0;
}


static int run_bad_address(const char *dev)
{
    uct_test_node_t a, *nodes[1] = {&a};
    unsigned char blob[64];
    uct_test_wire_t wa;
    uct_rkey_bundle_t rkey;
    ucs_status_t status;
    size_t i;
    int refused = 0, cases = 0;

    uct_test_node_open(&a, dev, 4096);
    uct_test_node_wire(&a, &wa);

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
    uct_test_check(refused == cases, "random remote keys refused (%d of %d)",
                   refused, cases);

    memcpy(blob, wa.rkey, sizeof(blob));
    blob[0] ^= 0x01; /* another format version */
    uct_test_check(uct_rkey_unpack(a.component, blob, &rkey) != UCS_OK,
                   "remote key of another version refused");

    memcpy(blob, wa.ep, sizeof(blob));
    blob[2] ^= 0x40; /* a flipped QP number bit */
    status = uct_ep_connect_to_ep(a.ep, (uct_device_addr_t*)wa.dev,
                                  (uct_ep_addr_t*)blob);
    uct_test_check(status != UCS_OK, "corrupt endpoint address refused (%s)",
                   ucs_status_string(status));

    memcpy(blob, wa.dev, sizeof(blob));
    blob[5] ^= 0xff;
    status = uct_ep_connect_to_ep(a.ep, (uct_device_addr_t*)blob,
                                  (uct_ep_addr_t*)wa.ep);
    uct_test_check(status != UCS_OK, "corrupt device address refused (%s)",
                   ucs_status_string(status));
    uct_test_check(!uct_iface_is_reachable(a.iface, (uct_device_addr_t*)blob,
                                           NULL),
                   "corrupt device address is not reachable");

    /* The endpoint is still usable: connect it to itself and move data. */
    uct_test_node_connect(&a, &wa);
    status = uct_rkey_unpack(a.component, wa.rkey, &rkey);
    if (status == UCS_OK) {
        uint64_t value = 0x5a5a5a5a, *dst = a.buf;
        uct_test_comp_t wc;
        status = UCT_TEST_RETRY(nodes, 1,
                                uct_ep_put_short(a.ep, &value, sizeof(value),
                                                 wa.buf, rkey.rkey));
        status = wait_op(nodes, 1, &a, status, &wc);
        uct_test_check((status == UCS_OK) && (*dst == value),
                       "endpoint works after refused addresses");
        uct_rkey_release(a.component, &rkey);
    }

    uct_test_node_close(&a);
    return 0;
}


/* After the peer died: one transfer, and whether it ended. A put, or an
 * active message and a flush that waits for it (SENDs, which a dead peer
 * never acknowledges either). */
static ucs_status_t peer_death_transfer(uct_test_node_t **nodes,
                                        uct_test_node_t *a, int am,
                                        uct_iov_t *iov, uint64_t remote_addr,
                                        uct_rkey_t rkey, uct_test_comp_t *wc,
                                        double deadline)
{
    ucs_status_t status;

    uct_test_comp_init(wc);
    if (am) {
        status = UCT_TEST_RETRY(nodes, 1,
                                uct_ep_am_short(a->ep, AM_ID, 0, NULL, 0));
        if (status == UCS_OK) {
            status = UCT_TEST_RETRY(nodes, 1,
                                    uct_ep_flush(a->ep, 0, &wc->comp));
        }
    } else {
        status = UCT_TEST_RETRY(nodes, 1,
                                uct_ep_put_zcopy(a->ep, iov, 1, remote_addr,
                                                 rkey, &wc->comp));
    }

    while ((status == UCS_INPROGRESS) && (wc->comp.count > 0) &&
           (uct_test_now() < deadline)) {
        uct_test_progress(nodes, 1);
    }
    if (status == UCS_INPROGRESS) {
        status = (wc->comp.count > 0) ? UCS_ERR_TIMED_OUT : wc->status;
    }
    return status;
}


static int run_peer_death(const char *dev_a, const char *dev_b, double bound,
                          int am)
{
    uct_test_node_t a, *nodes[1] = {&a};
    uct_rkey_bundle_t rkey;
    ucs_status_t status = UCS_OK;
    uct_test_wire_t wb;
    uct_test_comp_t wc;
    uct_iov_t iov;
    double t_kill, elapsed, deadline;
    pid_t child;
    int i;

    child = uct_test_peer_fork(&a, dev_a, dev_b, BUF_SIZE, &wb, &rkey);
    uct_test_iov_init(&iov, a.buf, 65536, a.memh);

    for (i = 0; i < 20; ++i) {
        uct_test_comp_init(&wc);
        status = UCT_TEST_RETRY(nodes, 1,
                                uct_ep_put_zcopy(a.ep, &iov, 1, wb.buf,
                                                 rkey.rkey, &wc.comp));
        status = wait_op(nodes, 1, &a, status, &wc);
        if (status != UCS_OK) {
            break;
        }
    }
    uct_test_check(status == UCS_OK, "transfers to a live peer succeed");

    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    t_kill   = uct_test_now();
    deadline = t_kill + 3 * bound + 10;

    /* Keep transferring: every operation must end, with an error. */
    status = UCS_OK;
    while ((status == UCS_OK) && !a.ep_error && (uct_test_now() < deadline)) {
        status = peer_death_transfer(nodes, &a, am, &iov, wb.buf, rkey.rkey,
                                     &wc, deadline);
    }
    elapsed = uct_test_now() - t_kill;

    printf("peer killed: survivor's %s saw %s%s after %.2f s (bound %.1f s)"
           "\n", am ? "active messages" : "puts",
           ucs_status_string(a.ep_error ? a.ep_error_status : status),
           a.ep_error ? " through the error handler" : "", elapsed, bound);
    uct_test_check((status != UCS_OK) && (status != UCS_ERR_TIMED_OUT) &&
                   (elapsed <= bound),
                   "peer death reported within %.1f s (%.2f s)", bound,
                   elapsed);
    uct_test_check(a.ep_error, "error handler called with %s",
                   ucs_status_string(a.ep_error_status));

    uct_rkey_release(a.component, &rkey);
    uct_test_node_close(&a);
    return 0;
}


typedef struct {
    uct_pending_req_t req;
    uct_ep_h          ep;
    int               done;
} pending_am_t;


static ucs_status_t pending_am_send(uct_pending_req_t *self)
{
    pending_am_t *p     = ucs_container_of(self, pending_am_t, req);
    ucs_status_t status = uct_ep_am_short(p->ep, AM_ID, 0x5eed, NULL, 0);

    p->done = (status == UCS_OK);
    return status;
}


/*
 * A request queued before the endpoint is connected (UCP does this during
 * wire-up) must go out once it is, although no completion follows to wake
 * the endpoint up.
 */
static void run_pending_connect(const char *dev_a, const char *dev_b)
{
    uct_test_node_t a, b, *nodes[2] = {&a, &b};
    pending_am_t pending = {.done = 0};
    uct_test_wire_t wa, wb;
    ucs_status_t status;
    double deadline;

    node_open(&a, dev_a, 4096);
    node_open(&b, dev_b, 4096);
    pending.ep       = a.ep;
    pending.req.func = pending_am_send;

    status = uct_ep_am_short(a.ep, AM_ID, 0, NULL, 0);
    uct_test_check(status == UCS_ERR_NO_RESOURCE,
                   "an endpoint not yet connected has no resources (%s)",
                   ucs_status_string(status));
    status = uct_ep_pending_add(a.ep, &pending.req, 0);
    uct_test_check(status == UCS_OK, "the request is queued (%s)",
                   ucs_status_string(status));

    uct_test_node_wire(&a, &wa);
    uct_test_node_wire(&b, &wb);
    uct_test_node_connect(&a, &wb);
    uct_test_node_connect(&b, &wa);

    g_am_count = 0;
    deadline   = uct_test_now() + 10.0;
    while ((!pending.done || (g_am_count == 0)) &&
           (uct_test_now() < deadline)) {
        uct_test_progress(nodes, 2);
    }
    uct_test_check(pending.done && (g_am_count == 1),
                   "after connecting, progress sends it (sent %d, arrived %d)",
                   pending.done, g_am_count);

    uct_test_node_close(&a);
    uct_test_node_close(&b);
}


/* A put of length bytes from src (registered as memh) into the peer's
 * buffer, and a get back into src; both checked byte by byte */
static int fork_put_get(uct_test_node_t **nodes, unsigned char *src,
                        uct_mem_h memh, size_t length, uint64_t remote,
                        uct_rkey_t rkey, unsigned seed, const char *what)
{
    unsigned char *dst = nodes[1]->buf;
    uct_test_comp_t wc;
    ucs_status_t status;
    uct_iov_t iov;
    int ok;

    uct_test_fill(src, length, seed);
    memset(dst, 0, length);
    uct_test_iov_init(&iov, src, length, memh);
    uct_test_comp_init(&wc);
    status = UCT_TEST_RETRY(nodes, 2, uct_ep_put_zcopy(nodes[0]->ep, &iov, 1,
                                                       remote, rkey,
                                                       &wc.comp));
    status = wait_op(nodes, 2, nodes[0], status, &wc);
    ok     = (status == UCS_OK) && !memcmp(dst, src, length);

    uct_test_fill(dst, length, seed + 1);
    memset(src, 0, length);
    uct_test_comp_init(&wc);
    status = UCT_TEST_RETRY(nodes, 2, uct_ep_get_zcopy(nodes[0]->ep, &iov, 1,
                                                       remote, rkey,
                                                       &wc.comp));
    status = wait_op(nodes, 2, nodes[0], status, &wc);
    ok    &= (status == UCS_OK) && !memcmp(dst, src, length);
    uct_test_check(ok, "%s: put and get of %zu bytes (%s)", what, length,
                   ucs_status_string(status));
    return ok;
}


/*
 * Children of a process with registrations: one unmaps a registered buffer
 * (its free hook must leave the parent's MR alone: the child shares the
 * verbs context) and exits, one execs, one writes the registered buffers
 * and exits. The parent then writes its buffers (copy-on-write must not
 * move them away from the NIC) and moves them, byte-exact.
 */
static void run_fork(const char *dev_a, const char *dev_b)
{
    const size_t length = 256 * 1024;
    uct_test_node_t a, b, *nodes[2] = {&a, &b};
    unsigned char *extra;
    uct_test_wire_t wb;
    uct_rkey_bundle_t rkey;
    ucs_status_t status;
    uct_mem_h extra_memh;
    void *extra_rkey;
    int child, wstatus;
    pid_t pid;

    node_open(&a, dev_a, BUF_SIZE);
    node_open(&b, dev_b, BUF_SIZE);
    uct_test_node_connect_pair(&a, &b, NULL, &wb);
    status = uct_rkey_unpack(a.component, wb.rkey, &rkey);
    if (status != UCS_OK) {
        uct_test_die("uct_rkey_unpack", status);
    }

    extra = mmap(NULL, length, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (extra == MAP_FAILED) {
        uct_test_die("mmap", UCS_ERR_NO_MEMORY);
    }
    uct_test_mem_reg(&a, extra, length, &extra_memh, &extra_rkey);
    fork_put_get(nodes, extra, extra_memh, length, wb.buf, rkey.rkey, 11,
                 "before fork");

    for (child = 0; child < 3; ++child) {
        fflush(stdout);
        pid = fork();
        if (pid == -1) {
            uct_test_die("fork", UCS_ERR_IO_ERROR);
        }
        if (pid == 0) {
            alarm(30);
            if (child == 0) {
                munmap(extra, length);
            } else if (child == 1) {
                execl("/bin/true", "true", (char*)NULL);
                _exit(4);
            } else {
                /* Fork-safe registrations are not shared with a child:
                 * where ibv_fork_init() keeps them out of it, touching them
                 * faults, so only the pages around are written */
                memset(g_am_data, 0xa5, sizeof(g_am_data));
            }
            _exit(0);
        }

        if (waitpid(pid, &wstatus, 0) != pid) {
            uct_test_die("waitpid", UCS_ERR_IO_ERROR);
        }
        uct_test_check(WIFEXITED(wstatus) && (WEXITSTATUS(wstatus) == 0),
                       "child %d (%s) exited normally (status 0x%x)", child,
                       (child == 0) ? "unmaps a registered buffer" :
                       (child == 1) ? "execs" : "writes memory", wstatus);
    }

    /* The parent writes its registered buffers after the forks, then the
     * NIC reads and writes them */
    fork_put_get(nodes, extra, extra_memh, length, wb.buf, rkey.rkey, 21,
                 "after fork, the buffer a child unmapped");
    fork_put_get(nodes, a.buf, a.memh, length, wb.buf, rkey.rkey, 31,
                 "after fork, the node's buffer");

    uct_md_mem_dereg(a.md, extra_memh);
    free(extra_rkey);
    munmap(extra, length);
    uct_rkey_release(a.component, &rkey);
    uct_test_node_close(&a);
    uct_test_node_close(&b);
}


int main(int argc, char **argv)
{
    uct_test_init("uct_verify", OP_TIMEOUT_S);

    if ((argc == 4) && !strcmp(argv[1], "data")) {
        run_data(argv[2], argv[3]);
    } else if ((argc == 5) && !strcmp(argv[1], "peer-death")) {
        run_peer_death(argv[2], argv[3], atof(argv[4]), 0);
    } else if ((argc == 5) && !strcmp(argv[1], "peer-death-am")) {
        run_peer_death(argv[2], argv[3], atof(argv[4]), 1);
    } else if ((argc == 3) && !strcmp(argv[1], "bad-address")) {
        run_bad_address(argv[2]);
    } else if ((argc == 4) && !strcmp(argv[1], "pending-connect")) {
        run_pending_connect(argv[2], argv[3]);
    } else if ((argc == 4) && !strcmp(argv[1], "fork")) {
        run_fork(argv[2], argv[3]);
    } else {
        fprintf(stderr,
                "usage: %s data DEV_A DEV_B | peer-death[-am] DEV_A DEV_B "
                "SEC | bad-address DEV | pending-connect DEV_A DEV_B | "
                "fork DEV_A DEV_B\n", argv[0]);
        return 2;
    }

    return uct_test_summary();
}
