/*
 * uct_bounce: the host bounce lane end to end, byte for byte. GPU buffers
 * come from the CUDA driver through the project's shim; in the soft-RoCE
 * guest that driver is the stand-in (test/mocks), so every result is
 * about an EMULATED GPU, and the program says so.
 *
 * Run where the gate leaves GPU memory without a NIC key, e.g. on rxe with
 * UCX_RC_GDR_REG_METHODS=dmabuf (rxe refuses DMA-BUF): the program checks
 * that it is so (md counters) before it trusts anything else.
 *
 *   uct_bounce uct DEV_A DEV_B         put/get zcopy with keyless GPU memory
 *                                      on either side and on both, sizes
 *                                      across chunk and message boundaries;
 *                                      back-pressure (NO_RESOURCE, pending);
 *                                      ep flush waits for bounce transfers;
 *                                      counters; forged tokens and addresses
 *                                      out of range refused by the target
 *   uct_bounce peer-death DEV_A DEV_B  a forked peer is killed mid-transfer:
 *                                      every transfer ends with an error and
 *                                      the staging buffers return
 *   uct_bounce ucp                     two UCP workers in one process, put
 *                                      and get on GPU memory (UCX_TLS from
 *                                      the environment, e.g.
 *                                      rc_gdr,ud_verbs:aux,self)
 *
 * Unless set in the environment, the bounce lane is configured small
 * (UCX_RC_GDR_BOUNCE_CHUNK_SIZE=64k, _DEPTH=3, _POOL_SIZE=8) so that modest
 * sizes cross many chunks and the pool runs out.
 *
 * Prints "PASS"/"FAIL" lines and "N passed, N failed"; exits non-zero on
 * any failure.
 */

#define _GNU_SOURCE

#include <uct/ib_gdr/rc_gdr_cuda.h>
#include "uct_test_util.h"

#include <ucp/api/ucp.h>

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>


#define ARRAY_SIZE(_a) (sizeof(_a) / sizeof((_a)[0]))
#define REGION     (4u * 1024 * 1024)
#define TIMEOUT_S  120.0

/* The bounce knobs in effect (this program's defaults, or the caller's) */
static size_t knob(const char *name)
{
    const char *value = getenv(name);
    char *end;
    size_t n;

    n = strtoul(value, &end, 10);
    switch (*end) {
    case 'k': case 'K': return n << 10;
    case 'm': case 'M': return n << 20;
    case 'g': case 'G': return n << 30;
    default:            return n;
    }
}


/* Whether `count` staged transfers of `length` bytes, started at once,
 * need more staging buffers than the pool has */
static int pool_runs_out(size_t length, int count)
{
    size_t chunk  = knob("UCX_RC_GDR_BOUNCE_CHUNK_SIZE");
    size_t chunks = (length + chunk - 1) / chunk;
    size_t depth  = knob("UCX_RC_GDR_BOUNCE_DEPTH");

    return count * ((chunks < depth) ? chunks : depth) >
           knob("UCX_RC_GDR_BOUNCE_POOL_SIZE");
}


static void cuda_start(void)
{
    uct_rc_gdr_cuda_driver_info_t info;
    uct_rc_gdr_cuda_ctx_h ctx;

    if (uct_rc_gdr_cuda_init() != UCS_OK) {
        printf("SKIP uct_bounce: no CUDA driver (set RC_GDR_CUDA_LIBRARY, or "
               ". contrib/env.sh --emulated-gpu)\n0 passed, 0 failed\n");
        exit(0);
    }
    if ((uct_rc_gdr_cuda_driver_info(&info) == UCS_OK) && info.emulated) {
        printf("NOTE: EMULATED GPU: the CUDA driver is the project's "
               "stand-in (%s); \"GPU\" memory is host memory\n", info.library);
    }
    if (uct_rc_gdr_cuda_ctx_activate(0, &ctx) != UCS_OK) {
        uct_test_die("primary context of GPU 0", UCS_ERR_NO_DEVICE);
    }
}


/* ------------------------------------------------------------ memory -- */

typedef struct {
    char              *buf;
    size_t            size;
    int               gpu;
    const char        *name;
    uct_mem_h         memh;
    void              *packed;      /* packed rkey, for the peer */
    size_t            packed_size;
    uct_rkey_bundle_t rkey;         /* unpacked by the peer */
} region_t;


static void *mem_alloc(int gpu, size_t size)
{
    void *ptr;

    if (!gpu) {
        return calloc(1, size);
    }
    if (uct_rc_gdr_cuda_mem_alloc(size, &ptr) != UCS_OK) {
        uct_test_die("cuMemAlloc", UCS_ERR_NO_MEMORY);
    }
    return ptr;
}


static void mem_write(const region_t *r, size_t offset, const void *src,
                      size_t length)
{
    if (r->gpu) {
        uct_rc_gdr_cuda_memcpy_htod(r->buf + offset, src, length);
    } else {
        memcpy(r->buf + offset, src, length);
    }
}


static void mem_read(const region_t *r, size_t offset, void *dst,
                     size_t length)
{
    if (r->gpu) {
        uct_rc_gdr_cuda_memcpy_dtoh(dst, r->buf + offset, length);
    } else {
        memcpy(dst, r->buf + offset, length);
    }
}


static unsigned char data_byte(unsigned seed, size_t i)
{
    return (unsigned char)(seed * 13 + i * 7 + (i >> 9));
}


static unsigned char bg_byte(size_t i)
{
    return (unsigned char)(i * 3 + 0x5a);
}


/* ------------------------------------------------------------- nodes -- */

/* Registers on `owner`; the packed rkey is kept for a peer */
static void region_init(uct_test_node_t *owner, region_t *r, int gpu,
                        size_t size, const char *name)
{
    memset(r, 0, sizeof(*r));
    r->buf         = mem_alloc(gpu, size);
    r->size        = size;
    r->gpu         = gpu;
    r->name        = name;
    r->packed_size = owner->md_attr.rkey_packed_size;
    uct_test_mem_reg(owner, r->buf, size, &r->memh, &r->packed);
}


static void region_unpack(uct_test_node_t *peer, region_t *r)
{
    ucs_status_t status = uct_rkey_unpack(peer->component, r->packed,
                                          &r->rkey);

    if (status != UCS_OK) {
        uct_test_die("uct_rkey_unpack", status);
    }
}


static void region_fini(uct_test_node_t *owner, uct_test_node_t *peer,
                        region_t *r)
{
    if (peer != NULL) {
        uct_rkey_release(peer->component, &r->rkey);
    }
    uct_md_mem_dereg(owner->md, r->memh);
    if (r->gpu) {
        uct_rc_gdr_cuda_mem_free(r->buf);
    } else {
        free(r->buf);
    }
    free(r->packed);
}


static void progress2(uct_test_node_t *a, uct_test_node_t *b)
{
    uct_worker_progress(a->worker);
    if (b != NULL) {
        uct_worker_progress(b->worker);
    }
}


/* --------------------------------------------------------- operations -- */

typedef struct {
    uct_completion_t comp;
    ucs_status_t     status;
    int              done;
    int              *counter;   /* incremented at completion */
} op_comp_t;


static void op_cb(uct_completion_t *self)
{
    op_comp_t *c = (op_comp_t*)self;

    c->status = self->status;
    c->done   = 1;
    if (c->counter != NULL) {
        ++*c->counter;
    }
}


static void op_comp_init(op_comp_t *c, int *counter)
{
    memset(c, 0, sizeof(*c));
    c->comp.func   = op_cb;
    c->comp.count  = 1;
    c->comp.status = UCS_OK;
    c->counter     = counter;
}


/* One zcopy put/get of [loff, +length) of L with [roff, +length) of R */
typedef struct {
    int            put;
    const region_t *local;
    size_t         loff;
    const region_t *remote;
    size_t         roff;
    size_t         length;
    uint64_t       remote_addr; /* overrides remote->buf + roff when set */
    uct_rkey_t     rkey;        /* overrides remote->rkey when set */
} xfer_t;


static ucs_status_t xfer_post_once(uct_test_node_t *a, const xfer_t *x,
                                   op_comp_t *c)
{
    uct_iov_t iov;
    uint64_t remote_addr = x->remote_addr ? x->remote_addr :
                           (uintptr_t)(x->remote->buf + x->roff);
    uct_rkey_t rkey      = x->rkey ? x->rkey : x->remote->rkey.rkey;

    uct_test_iov_init(&iov, x->local->buf + x->loff, x->length,
                      x->local->memh);
    return x->put ? uct_ep_put_zcopy(a->ep, &iov, 1, remote_addr, rkey,
                                     &c->comp) :
                    uct_ep_get_zcopy(a->ep, &iov, 1, remote_addr, rkey,
                                     &c->comp);
}


/* Posts, progressing both sides while the answer is NO_RESOURCE */
static ucs_status_t xfer_post(uct_test_node_t *a, uct_test_node_t *b,
                              const xfer_t *x, op_comp_t *c, int *no_resource)
{
    double deadline = uct_test_now() + TIMEOUT_S;
    ucs_status_t status;

    for (;;) {
        status = xfer_post_once(a, x, c);
        if ((status != UCS_ERR_NO_RESOURCE) || (uct_test_now() > deadline)) {
            break;
        }
        if (no_resource != NULL) {
            ++*no_resource;
        }
        progress2(a, b);
    }

    if (status == UCS_OK) {
        c->done   = 1;
        c->status = UCS_OK;
    } else if (status != UCS_INPROGRESS) {
        c->done   = 1;
        c->status = status;
    }
    return status;
}


static int wait_all(uct_test_node_t *a, uct_test_node_t *b, op_comp_t *c,
                    int count)
{
    double deadline = uct_test_now() + TIMEOUT_S;
    int i, pending;

    do {
        pending = 0;
        for (i = 0; i < count; ++i) {
            pending += !c[i].done;
        }
        if (pending == 0) {
            return 1;
        }
        progress2(a, b);
    } while (uct_test_now() < deadline);
    return 0;
}


/* Source bytes for x, background everywhere in the destination */
static void xfer_prepare(const xfer_t *x, unsigned seed)
{
    const region_t *src = x->put ? x->local : x->remote;
    const region_t *dst = x->put ? x->remote : x->local;
    size_t soff         = x->put ? x->loff : x->roff;
    unsigned char *tmp  = malloc((x->length > dst->size) ? x->length :
                                                         dst->size);
    size_t i;

    for (i = 0; i < x->length; ++i) {
        tmp[i] = data_byte(seed, i);
    }
    mem_write(src, soff, tmp, x->length);
    for (i = 0; i < dst->size; ++i) {
        tmp[i] = bg_byte(i);
    }
    mem_write(dst, 0, tmp, dst->size);
    free(tmp);
}


/* The destination holds x's bytes and nothing else changed around them */
static int xfer_verify(const xfer_t *x, unsigned seed, int moved)
{
    const region_t *dst = x->put ? x->remote : x->local;
    size_t doff         = x->put ? x->roff : x->loff;
    unsigned char *tmp  = malloc(dst->size);
    size_t i;
    int ok = 1;

    mem_read(dst, 0, tmp, dst->size);
    for (i = 0; i < dst->size; ++i) {
        if ((i >= doff) && (i < doff + x->length)) {
            ok &= moved ? (tmp[i] == data_byte(seed, i - doff)) :
                          (tmp[i] == bg_byte(i));
        } else {
            ok &= (tmp[i] == bg_byte(i));
        }
        if (!ok) {
            printf("     first difference at byte %zu of %s\n", i, dst->name);
            break;
        }
    }
    free(tmp);
    return ok;
}


static const char *xfer_str(const xfer_t *x, char *buf, size_t max)
{
    snprintf(buf, max, "%s %s %s %s, %zu bytes (+%zu/+%zu)",
             x->put ? "put" : "get", x->local->name,
             x->put ? "->" : "<-", x->remote->name, x->length, x->loff,
             x->roff);
    return buf;
}


/* One transfer, waited for and verified */
static void xfer_run(uct_test_node_t *a, uct_test_node_t *b, const xfer_t *x,
                     unsigned seed)
{
    op_comp_t c;
    char str[128];
    int ok;

    xfer_prepare(x, seed);
    op_comp_init(&c, NULL);
    xfer_post(a, b, x, &c, NULL);
    ok = wait_all(a, b, &c, 1);
    uct_test_check(ok && (c.status == UCS_OK) && xfer_verify(x, seed, 1),
                   "%s: %s", xfer_str(x, str, sizeof(str)),
                   ok ? ucs_status_string(c.status) : "timed out");
}


/* -------------------------------------------------------------- uct -- */

typedef struct {
    uct_test_node_t   a, b;
    region_t a_gpu, a_host, b_gpu, b_host;
} pair_t;


static void pair_open(pair_t *p, const char *dev_a, const char *dev_b)
{
    uct_test_node_open(&p->a, dev_a, 0);
    uct_test_node_open(&p->b, dev_b, 0);
    uct_test_node_connect_pair(&p->a, &p->b, NULL, NULL);

    region_init(&p->a, &p->a_gpu, 1, REGION, "GPU(A)");
    region_init(&p->a, &p->a_host, 0, REGION, "host(A)");
    region_init(&p->b, &p->b_gpu, 1, REGION, "GPU(B)");
    region_init(&p->b, &p->b_host, 0, REGION, "host(B)");
    region_unpack(&p->b, &p->a_gpu);
    region_unpack(&p->b, &p->a_host);
    region_unpack(&p->a, &p->b_gpu);
    region_unpack(&p->a, &p->b_host);
}


static void pair_close(pair_t *p)
{
    region_fini(&p->a, &p->b, &p->a_gpu);
    region_fini(&p->a, &p->b, &p->a_host);
    region_fini(&p->b, &p->a, &p->b_gpu);
    region_fini(&p->b, &p->a, &p->b_host);
    uct_test_node_close(&p->a);
    uct_test_node_close(&p->b);
}


/* The gate must have left GPU memory without a NIC key on both sides */
static int check_lane(pair_t *p)
{
    uct_test_md_stats_t sa = uct_test_md_stats(p->a.md);
    uct_test_md_stats_t sb = uct_test_md_stats(p->b.md);
    int ok                 = (sa.peermem_regs == 0) && (sa.dmabuf_regs == 0) &&
                             (sa.bounce_regs > 0) && (sb.peermem_regs == 0) &&
                             (sb.dmabuf_regs == 0) && (sb.bounce_regs > 0);

    uct_test_check(ok, "GPU memory has no NIC key on either side (md counters "
                   "A: peermem %" PRIu64 " dmabuf %" PRIu64 " bounce %" PRIu64
                   ", B: peermem %" PRIu64 " dmabuf %" PRIu64 " bounce %"
                   PRIu64 ")%s", sa.peermem_regs, sa.dmabuf_regs,
                   sa.bounce_regs, sb.peermem_regs, sb.dmabuf_regs,
                   sb.bounce_regs,
                   ok ? "" : ": run with UCX_RC_GDR_REG_METHODS=dmabuf on rxe");
    return ok;
}


static void run_matrix(pair_t *p)
{
    static const size_t sizes[] = {1, 4095, 8152, 8153, 65536,
                                   3 * 65536 + 17, 1048576 + 5};
    const region_t *pairs[][2]  = {
        {&p->a_gpu,  &p->b_host}, /* staged through A's pool */
        {&p->a_host, &p->b_gpu},  /* B copies */
        {&p->a_gpu,  &p->b_gpu}   /* both */
    };
    unsigned seed = 1;
    xfer_t x;
    size_t i, j;
    int put;

    for (j = 0; j < ARRAY_SIZE(pairs); ++j) {
        for (put = 1; put >= 0; --put) {
            for (i = 0; i < ARRAY_SIZE(sizes); ++i) {
                memset(&x, 0, sizeof(x));
                x.put    = put;
                x.local  = pairs[j][0];
                x.remote = pairs[j][1];
                x.loff   = 3;
                x.roff   = 5;
                x.length = sizes[i];
                xfer_run(&p->a, &p->b, &x, seed++);
            }
        }
    }
}


/* put_short, put_bcopy and get_bcopy to memory without a NIC key: the
 * same semantics (local completion at return or at the callback, remote
 * completion at flush) */
typedef struct {
    const unsigned char *src;
    size_t              length;
    unsigned char       *dst;
} copy_arg_t;


static size_t pack_cb(void *dest, void *arg)
{
    copy_arg_t *ca = arg;

    memcpy(dest, ca->src, ca->length);
    return ca->length;
}


static void unpack_cb(void *arg, const void *data, size_t length)
{
    copy_arg_t *ca = arg;

    memcpy(ca->dst, data, length);
    ca->length = length;
}


static ucs_status_t flush_wait(uct_test_node_t *a, uct_test_node_t *b)
{
    uct_test_node_t *nodes[2] = {a, b};

    return uct_test_ep_flush(nodes, 2, a->ep);
}


static void run_copy_ops(pair_t *p)
{
    static const size_t bcopy_sizes[] = {1, 5000, 8152, 8192};
    unsigned char *src = malloc(8192), *dst = malloc(8192);
    uint64_t remote    = (uintptr_t)p->b_gpu.buf + 77;
    uct_rkey_t rkey    = p->b_gpu.rkey.rkey;
    double deadline;
    copy_arg_t ca;
    op_comp_t c;
    xfer_t x;
    ucs_status_t status;
    ssize_t packed;
    size_t i, k;
    int ok;

    /* put_short */
    memset(&x, 0, sizeof(x));
    x.put    = 1;
    x.local  = &p->a_host;
    x.remote = &p->b_gpu;
    x.roff   = 77;
    x.length = 100;
    xfer_prepare(&x, 30);
    for (k = 0; k < x.length; ++k) {
        src[k] = data_byte(30, k);
    }
    deadline = uct_test_now() + TIMEOUT_S;
    while (((status = uct_ep_put_short(p->a.ep, src, x.length, remote,
                                       rkey)) == UCS_ERR_NO_RESOURCE) &&
           (uct_test_now() < deadline)) {
        progress2(&p->a, &p->b);
    }
    memset(src, 0, x.length); /* the buffer is free at return */
    ok = (status == UCS_OK) && (flush_wait(&p->a, &p->b) == UCS_OK);
    uct_test_check(ok && xfer_verify(&x, 30, 1), "put_short %zu bytes "
                   "host(A) -> GPU(B): %s, byte-exact after flush", x.length,
                   ucs_status_string(status));

    for (i = 0; i < ARRAY_SIZE(bcopy_sizes); ++i) {
        /* put_bcopy */
        x.length = bcopy_sizes[i];
        xfer_prepare(&x, 31 + i);
        for (k = 0; k < x.length; ++k) {
            src[k] = data_byte(31 + i, k);
        }
        ca.src    = src;
        ca.length = x.length;
        deadline  = uct_test_now() + TIMEOUT_S;
        while (((packed = uct_ep_put_bcopy(p->a.ep, pack_cb, &ca, remote,
                                           rkey)) == UCS_ERR_NO_RESOURCE) &&
               (uct_test_now() < deadline)) {
            progress2(&p->a, &p->b);
        }
        memset(src, 0, x.length);
        ok = (packed == (ssize_t)x.length) &&
             (flush_wait(&p->a, &p->b) == UCS_OK);
        uct_test_check(ok && xfer_verify(&x, 31 + i, 1), "put_bcopy %zu bytes "
                       "host(A) -> GPU(B): %zd, byte-exact after flush",
                       x.length, packed);

        /* get_bcopy: the unpack callback sees all the bytes at once */
        x.put = 0;
        x.length = bcopy_sizes[i];
        xfer_prepare(&x, 41 + i);
        memset(dst, 0, 8192);
        ca.dst    = dst;
        ca.length = 0;
        op_comp_init(&c, NULL);
        deadline  = uct_test_now() + TIMEOUT_S;
        while (((status = uct_ep_get_bcopy(p->a.ep, unpack_cb, &ca, x.length,
                                           remote, rkey, &c.comp)) ==
                UCS_ERR_NO_RESOURCE) && (uct_test_now() < deadline)) {
            progress2(&p->a, &p->b);
        }
        ok = (status == UCS_INPROGRESS) && wait_all(&p->a, &p->b, &c, 1) &&
             (c.status == UCS_OK) && (ca.length == x.length);
        for (k = 0; ok && (k < x.length); ++k) {
            ok = (dst[k] == data_byte(41 + i, k));
        }
        uct_test_check(ok, "get_bcopy %zu bytes host(A) <- GPU(B): %s, "
                       "unpacked once, byte-exact", x.length,
                       ucs_status_string(c.status));
        x.put = 1;
    }

    free(src);
    free(dst);
}


/* Zero bytes touch no memory: they need no key and no staging, and
 * complete (at once, or through their completion) with success */
static ucs_status_t zero_post(pair_t *p, xfer_t *x)
{
    op_comp_t c;
    ucs_status_t status;

    op_comp_init(&c, NULL);
    status = xfer_post_once(&p->a, x, &c);
    if (status != UCS_INPROGRESS) {
        return status;
    }
    return wait_all(&p->a, &p->b, &c, 1) ? c.status : UCS_ERR_TIMED_OUT;
}


static void run_zero(pair_t *p)
{
    xfer_t x = {.put = 1, .local = &p->a_gpu, .remote = &p->b_gpu,
                .length = 0};
    ucs_status_t status;

    status = zero_post(p, &x);
    x.put  = 0;
    if (status == UCS_OK) {
        status = zero_post(p, &x);
    }
    uct_test_check(status == UCS_OK,
                   "zero-byte put/get to GPU memory without a NIC key: %s",
                   ucs_status_string(status));
}


/* Many transfers at once: the pool (8 buffers, depth 3) and the ordered
 * message queue run out; the answer is NO_RESOURCE, then every transfer
 * completes byte-exact */
static void run_pressure(pair_t *p, const char *what, const region_t *local,
                         const region_t *remote, int put, size_t length,
                         int count, int expect_no_resource, unsigned seed)
{
    op_comp_t c[8];
    xfer_t x[8];
    unsigned char *tmp = malloc(length);
    int no_resource    = 0;
    int i, ok, good    = 1;
    size_t k;

    /* each transfer its own slice; all slices filled first */
    for (i = 0; i < count; ++i) {
        memset(&x[i], 0, sizeof(x[i]));
        x[i].put    = put;
        x[i].local  = local;
        x[i].remote = remote;
        x[i].loff   = i * (length + 64) + 1;
        x[i].roff   = i * (length + 64) + 7;
        x[i].length = length;
        for (k = 0; k < length; ++k) {
            tmp[k] = data_byte(seed + i, k);
        }
        mem_write(put ? local : remote, put ? x[i].loff : x[i].roff, tmp,
                  length);
    }

    for (i = 0; i < count; ++i) {
        op_comp_init(&c[i], NULL);
        xfer_post(&p->a, &p->b, &x[i], &c[i], &no_resource);
    }
    ok = wait_all(&p->a, &p->b, c, count);

    for (i = 0; i < count; ++i) {
        good &= (c[i].status == UCS_OK);
        mem_read(put ? remote : local, put ? x[i].roff : x[i].loff, tmp,
                 length);
        for (k = 0; k < length; ++k) {
            good &= (tmp[k] == data_byte(seed + i, k));
        }
    }
    free(tmp);
    uct_test_check(ok && good && (!expect_no_resource || (no_resource > 0)),
                   "back-pressure, %s: %d x %zu bytes posted at once, "
                   "NO_RESOURCE %d times, all complete byte-exact%s", what,
                   count, length, no_resource,
                   expect_no_resource ? "" : " (no refusal expected)");
}


/* The same through the pending queue: pending_add must take the request
 * when the lane is out of staging buffers (not answer BUSY forever) */
typedef struct {
    uct_pending_req_t req;
    uct_test_node_t            *a;
    xfer_t            x;
    op_comp_t         c;
    int               posted;
} pending_op_t;


static ucs_status_t pending_cb(uct_pending_req_t *self)
{
    pending_op_t *op = ucs_container_of(self, pending_op_t, req);
    ucs_status_t status;

    status = xfer_post_once(op->a, &op->x, &op->c);
    if (status == UCS_ERR_NO_RESOURCE) {
        return status; /* stays first */
    }
    op->posted = 1;
    if (status != UCS_INPROGRESS) {
        op->c.done   = 1;
        op->c.status = status;
    }
    return UCS_OK;
}


static void run_pending(pair_t *p)
{
    const size_t length = 512 * 1024;
    pending_op_t ops[6];
    int i, queued = 0, ok, good = 1, posted;
    double deadline;
    ucs_status_t status;
    unsigned char *tmp = malloc(length);
    size_t k;

    for (i = 0; i < 6; ++i) {
        memset(&ops[i], 0, sizeof(ops[i]));
        ops[i].a        = &p->a;
        ops[i].req.func = pending_cb;
        ops[i].x.put    = 1;
        ops[i].x.local  = &p->a_gpu;
        ops[i].x.remote = &p->b_host;
        ops[i].x.loff   = i * (length + 64);
        ops[i].x.roff   = i * (length + 64) + 11;
        ops[i].x.length = length;
        op_comp_init(&ops[i].c, NULL);
        for (k = 0; k < length; ++k) {
            tmp[k] = data_byte(40 + i, k);
        }
        mem_write(&p->a_gpu, ops[i].x.loff, tmp, length);
    }

    for (i = 0; i < 6; ++i) {
        for (;;) {
            status = xfer_post_once(&p->a, &ops[i].x, &ops[i].c);
            if (status != UCS_ERR_NO_RESOURCE) {
                ops[i].posted = 1;
                break;
            }
            status = uct_ep_pending_add(p->a.ep, &ops[i].req, 0);
            if (status == UCS_OK) {
                ++queued;
                break;
            }
            /* BUSY: resources came back meanwhile, try again */
        }
    }

    deadline = uct_test_now() + TIMEOUT_S;
    do {
        posted = 0;
        for (i = 0; i < 6; ++i) {
            posted += ops[i].posted;
        }
        progress2(&p->a, &p->b);
    } while ((posted < 6) && (uct_test_now() < deadline));

    for (i = 0; i < 6; ++i) {
        if (!ops[i].posted) {
            ops[i].c.done = 1; /* never posted: do not wait */
        }
    }
    ok = 1;
    deadline = uct_test_now() + TIMEOUT_S;
    for (i = 0; i < 6; ++i) {
        while (!ops[i].c.done && (uct_test_now() < deadline)) {
            progress2(&p->a, &p->b);
        }
        ok &= ops[i].c.done;
    }

    for (i = 0; i < 6; ++i) {
        good &= ops[i].posted && (ops[i].c.status == UCS_OK);
        mem_read(&p->b_host, ops[i].x.roff, tmp, length);
        for (k = 0; k < length; ++k) {
            good &= (tmp[k] == data_byte(40 + i, k));
        }
    }
    free(tmp);
    uct_test_check(ok && good && ((queued > 0) || !pool_runs_out(length, 6)),
                   "pending queue: %d of 6 staged puts queued by "
                   "uct_ep_pending_add when the pool ran out, all dispatched "
                   "and complete byte-exact%s", queued,
                   pool_runs_out(length, 6) ? "" :
                   " (these knobs: the pool does not run out)");
}


/* An ep flush completes after every bounce transfer posted before it, ACKs
 * and the target's copies included */
typedef struct {
    op_comp_t c;
    int       *done_count;
    int       seen;        /* done_count when the flush completed */
} flush_comp_t;


static void flush_cb(uct_completion_t *self)
{
    flush_comp_t *f = (flush_comp_t*)self;

    f->c.status = self->status;
    f->c.done   = 1;
    f->seen     = *f->done_count;
}


static void run_flush(pair_t *p)
{
    const size_t length = 256 * 1024 + 3;
    const region_t *l[4] = {&p->a_gpu, &p->a_host, &p->a_gpu, &p->a_gpu};
    const region_t *r[4] = {&p->b_host, &p->b_gpu, &p->b_gpu, &p->b_gpu};
    int puts[4]          = {1, 1, 1, 0};
    int done_count = 0, i, ok, good = 1, polled = 0;
    double deadline;
    op_comp_t c[4];
    flush_comp_t f;
    xfer_t x[4];
    ucs_status_t status;
    unsigned char *tmp = malloc(length);
    size_t k;

    for (i = 0; i < 4; ++i) {
        memset(&x[i], 0, sizeof(x[i]));
        x[i].put    = puts[i];
        x[i].local  = l[i];
        x[i].remote = r[i];
        x[i].loff   = i * (length + 64) + 2;
        x[i].roff   = i * (length + 64) + 9;
        x[i].length = length;
        for (k = 0; k < length; ++k) {
            tmp[k] = data_byte(60 + i, k);
        }
        mem_write(puts[i] ? l[i] : r[i], puts[i] ? x[i].loff : x[i].roff,
                  tmp, length);
    }

    for (i = 0; i < 4; ++i) {
        op_comp_init(&c[i], &done_count);
        xfer_post(&p->a, &p->b, &x[i], &c[i], NULL);
    }

    memset(&f, 0, sizeof(f));
    f.c.comp.func  = flush_cb;
    f.c.comp.count = 1;
    f.done_count   = &done_count;
    deadline       = uct_test_now() + TIMEOUT_S;
    do {
        status = uct_ep_flush(p->a.ep, 0, &f.c.comp);
        if (status == UCS_ERR_NO_RESOURCE) {
            progress2(&p->a, &p->b);
        }
    } while ((status == UCS_ERR_NO_RESOURCE) && (uct_test_now() < deadline));
    if (status == UCS_OK) {
        f.c.done = 1;
        f.seen   = done_count;
    }
    while (!f.c.done && (uct_test_now() < deadline)) {
        progress2(&p->a, &p->b);
    }
    ok = wait_all(&p->a, &p->b, c, 4);

    for (i = 0; i < 4; ++i) {
        good &= (c[i].status == UCS_OK);
        mem_read(puts[i] ? r[i] : l[i], puts[i] ? x[i].roff : x[i].loff, tmp,
                 length);
        for (k = 0; k < length; ++k) {
            good &= (tmp[k] == data_byte(60 + i, k));
        }
    }
    uct_test_check(f.c.done && (f.c.status == UCS_OK) && (f.seen == 4) && ok &&
                   good, "ep flush (completion) after 4 bounce transfers: %s, "
                   "completed after %d of 4, data byte-exact",
                   ucs_status_string(status), f.seen);

    /* flush without a completion: INPROGRESS until the transfers are done */
    done_count = 0;
    for (i = 0; i < 4; ++i) {
        op_comp_init(&c[i], &done_count);
        xfer_post(&p->a, &p->b, &x[i], &c[i], NULL);
    }
    deadline = uct_test_now() + TIMEOUT_S;
    while (((status = uct_ep_flush(p->a.ep, 0, NULL)) != UCS_OK) &&
           (uct_test_now() < deadline)) {
        ++polled;
        progress2(&p->a, &p->b);
    }
    uct_test_check((status == UCS_OK) && (done_count == 4) && (polled > 0),
                   "ep flush (polled) returns OK only after all 4 completed "
                   "(%d of 4, %d polls)", done_count, polled);
    free(tmp);
}


/* What a peer names is checked by the target: a token it never issued, or
 * an address outside the registration, is refused with an error ACK and
 * nothing is written */
static void run_refused(pair_t *p)
{
    uct_test_iface_stats_t before = uct_test_iface_stats(p->b.iface), after;
    uct_rkey_t forged    = p->b_gpu.rkey.rkey ^ 0x5a5a0000u;
    uint64_t end         = (uintptr_t)p->b_gpu.buf + p->b_gpu.size;
    struct {
        const char *what;
        int        put;
        uct_rkey_t rkey;
        uint64_t   addr;
        size_t     length;
    } cases[] = {
        {"put, forged token",             1, forged, 0, 100000},
        {"get, forged token",             0, forged, 0, 100000},
        {"put, beyond the registration",  1, 0, end - 16, 4096},
        {"get, beyond the registration",  0, 0, end - 16, 4096},
        {"put, before the registration",  1, 0,
         (uintptr_t)p->b_gpu.buf - 8192, 4096},
        /* A's buffers are mapped there, in this process */
        {"put, far past the registration", 1, 0, end + 65536, 4096},
        {"get, far past the registration", 0, 0, end + 65536, 4096},
        {"put, wrapping the address space", 1, 0, UINT64_MAX - 100, 4096}
    };
    op_comp_t c;
    xfer_t x;
    size_t i;
    int ok;

    for (i = 0; i < ARRAY_SIZE(cases); ++i) {
        memset(&x, 0, sizeof(x));
        x.put         = cases[i].put;
        x.local       = &p->a_host;
        x.remote      = &p->b_gpu;
        x.roff        = 64;
        x.loff        = 0;
        x.length      = cases[i].length;
        x.rkey        = cases[i].rkey;
        x.remote_addr = cases[i].addr;
        xfer_prepare(&x, 90 + i);
        op_comp_init(&c, NULL);
        xfer_post(&p->a, &p->b, &x, &c, NULL);
        ok = wait_all(&p->a, &p->b, &c, 1);
        /* a put must not have written, a get must not have read */
        uct_test_check(ok && (c.status == UCS_ERR_INVALID_ADDR) &&
                       xfer_verify(&x, 90 + i, 0),
                       "refused by the target: %s -> %s", cases[i].what,
                       ok ? ucs_status_string(c.status) : "timed out");
    }

    after = uct_test_iface_stats(p->b.iface);
    uct_test_check(after.bounce_refused - before.bounce_refused ==
                   ARRAY_SIZE(cases),
                   "target counted %" PRIu64 " refusals",
                   after.bounce_refused - before.bounce_refused);

    memset(&x, 0, sizeof(x));
    x.put    = 1;
    x.local  = &p->a_host;
    x.remote = &p->b_gpu;
    x.length = 100000;
    x.roff   = 1;
    xfer_run(&p->a, &p->b, &x, 99);
    uct_test_check(!p->a.ep_error && !p->b.ep_error,
                   "the endpoints survive refused requests");
}


static unsigned pool_size(void)
{
    return knob("UCX_RC_GDR_BOUNCE_POOL_SIZE");
}


static void run_uct(const char *dev_a, const char *dev_b)
{
    uct_test_iface_stats_t sa, sb;
    uct_test_md_stats_t ma, mb;
    pair_t p;

    pair_open(&p, dev_a, dev_b);
    if (!check_lane(&p)) {
        pair_close(&p);
        return;
    }

    run_zero(&p);
    run_matrix(&p);
    run_copy_ops(&p);
    /* A's pool: 8 buffers, 3 per transfer (unless the knobs say else) */
    run_pressure(&p, "staged puts GPU(A) -> host(B)", &p.a_gpu, &p.b_host, 1,
                 512 * 1024, 6, pool_runs_out(512 * 1024, 6), 20);
    run_pressure(&p, "staged gets GPU(A) <- host(B)", &p.a_gpu, &p.b_host, 0,
                 512 * 1024, 6, pool_runs_out(512 * 1024, 6), 21);
    /* credits and the ordered message queue */
    run_pressure(&p, "message puts host(A) -> GPU(B)", &p.a_host, &p.b_gpu, 1,
                 256 * 1024, 8, 1, 22);
    run_pressure(&p, "message puts GPU(A) -> GPU(B)", &p.a_gpu, &p.b_gpu, 1,
                 256 * 1024, 8, 1, 23);
    /* B's pool: the gets wait there, A sees no refusal */
    run_pressure(&p, "message gets GPU(A) <- GPU(B)", &p.a_gpu, &p.b_gpu, 0,
                 256 * 1024, 8, 0, 24);
    run_pending(&p);
    run_flush(&p);

    /* The last staging buffers come back when their sends' completions are
     * polled, which the initiator's completion does not wait for. */
    {
        double deadline = uct_test_now() + 10.0;
        do {
            progress2(&p.a, &p.b);
            sa = uct_test_iface_stats(p.a.iface);
            sb = uct_test_iface_stats(p.b.iface);
        } while (((sa.bounce_bufs_in_use > 0) || (sb.bounce_bufs_in_use > 0)) &&
                 (uct_test_now() < deadline));
    }
    printf("counters A: %" PRIu64 " bounce transfers (%" PRIu64 " failed), "
           "%" PRIu64 " bytes staged, %" PRIu64 " messages, buffers in use "
           "%" PRIu64 " (at most %" PRIu64 ")\n", sa.bounce_xfers,
           sa.bounce_failed, sa.bounce_staged_bytes, sa.bounce_msgs,
           sa.bounce_bufs_in_use, sa.bounce_bufs_max);
    printf("counters B: %" PRIu64 " bytes staged, %" PRIu64 " messages, "
           "buffers in use %" PRIu64 " (at most %" PRIu64 ")\n",
           sb.bounce_staged_bytes, sb.bounce_msgs, sb.bounce_bufs_in_use,
           sb.bounce_bufs_max);
    uct_test_check((sa.bounce_xfers > 0) && (sa.bounce_failed == 0) &&
                   (sa.bounce_staged_bytes > 0) &&
                   (sb.bounce_staged_bytes > 0) && (sb.bounce_msgs > 0),
                   "counters: transfers, staged bytes on both sides, target "
                   "messages");
    uct_test_check((sa.bounce_bufs_in_use == 0) &&
                   (sb.bounce_bufs_in_use == 0) && (sa.bounce_bufs_max > 0) &&
                   (sa.bounce_bufs_max <= pool_size()),
                   "every staging buffer back in the pool (high-water %" PRIu64
                   " of %u)", sa.bounce_bufs_max, pool_size());

    run_refused(&p);
    ma = uct_test_md_stats(p.a.md);
    mb = uct_test_md_stats(p.b.md);
    uct_test_check(ma.peermem_regs + ma.dmabuf_regs + mb.peermem_regs +
                   mb.dmabuf_regs == 0,
                   "no NIC registration of GPU memory was made on either side");
    pair_close(&p);
}


/* ------------------------------------------------------- peer death -- */

typedef struct {
    uct_test_wire_t node;
    unsigned char   gpu_rkey[UCT_TEST_ADDR_MAX];
    unsigned char   host_rkey[UCT_TEST_ADDR_MAX];
    uint64_t        gpu, host;
} peer_wire_t;


static void run_peer_death(const char *dev_a, const char *dev_b)
{
    const size_t length = 3 * 1024 * 1024;
    int to_child[2], to_parent[2];
    peer_wire_t wa, wb;
    region_t gpu, host, peer_gpu, peer_host;
    uct_test_iface_stats_t s;
    op_comp_t c[3], probe;
    xfer_t x[3];
    const char *what[3] = {"put GPU -> GPU (messages)",
                           "put GPU -> host (staged RDMA)",
                           "get GPU <- GPU (messages)"};
    int i, in_flight = 0, ok, all_failed = 1;
    uint64_t staged;
    double t_kill, deadline;
    pid_t child;
    char ready;
    uct_test_node_t a;

    if ((pipe(to_child) != 0) || (pipe(to_parent) != 0)) {
        perror("pipe");
        exit(2);
    }

    child = fork();
    if (child == 0) {
        /* The target: publishes its buffers and progresses until killed */
        uct_test_node_t b;
        cuda_start();
        uct_test_node_open(&b, dev_b, 0);
        region_init(&b, &gpu, 1, length, "GPU(B)");
        region_init(&b, &host, 0, length, "host(B)");
        memset(&wb, 0, sizeof(wb));
        uct_test_node_wire(&b, &wb.node);
        memcpy(wb.gpu_rkey, gpu.packed, gpu.packed_size);
        memcpy(wb.host_rkey, host.packed, host.packed_size);
        wb.gpu  = (uintptr_t)gpu.buf;
        wb.host = (uintptr_t)host.buf;
        uct_test_write_all(to_parent[1], &wb, sizeof(wb));
        uct_test_read_all(to_child[0], &wa, sizeof(wa));
        uct_test_node_connect(&b, &wa.node);
        uct_test_write_all(to_parent[1], "r", 1);
        for (;;) {
            uct_worker_progress(b.worker);
        }
    }

    cuda_start();
    uct_test_node_open(&a, dev_a, 0);
    region_init(&a, &gpu, 1, length, "GPU(A)");
    memset(&wa, 0, sizeof(wa));
    uct_test_node_wire(&a, &wa.node);
    uct_test_read_all(to_parent[0], &wb, sizeof(wb));
    uct_test_write_all(to_child[1], &wa, sizeof(wa));
    uct_test_node_connect(&a, &wb.node);
    uct_test_read_all(to_parent[0], &ready, 1);

    /* the peer's regions, as far as this side knows them */
    memset(&peer_gpu, 0, sizeof(peer_gpu));
    memset(&peer_host, 0, sizeof(peer_host));
    peer_gpu.buf   = (char*)wb.gpu;
    peer_gpu.size  = length;
    peer_gpu.name  = "GPU(B)";
    peer_host.buf  = (char*)wb.host;
    peer_host.size = length;
    peer_host.name = "host(B)";
    peer_gpu.packed  = wb.gpu_rkey;
    peer_host.packed = wb.host_rkey;
    region_unpack(&a, &peer_gpu);
    region_unpack(&a, &peer_host);

    /* alive: a small transfer through each lane works */
    for (i = 0; i < 3; ++i) {
        memset(&x[i], 0, sizeof(x[i]));
        x[i].put    = (i != 2);
        x[i].local  = &gpu;
        x[i].remote = (i == 1) ? &peer_host : &peer_gpu;
        x[i].length = 100000;
        op_comp_init(&probe, NULL);
        xfer_post(&a, NULL, &x[i], &probe, NULL);
        ok = wait_all(&a, NULL, &probe, 1);
        uct_test_check(ok && (probe.status == UCS_OK), "live peer: %s: %s",
                       what[i],
                       ok ? ucs_status_string(probe.status) : "timed out");
    }

    /* large transfers in flight, then the peer dies */
    for (i = 0; i < 3; ++i) {
        x[i].length = length;
        op_comp_init(&c[i], NULL);
        xfer_post(&a, NULL, &x[i], &c[i], NULL);
    }
    /* let some data flow first: the peer dies mid-transfer */
    staged   = uct_test_iface_stats(a.iface).bounce_staged_bytes;
    deadline = uct_test_now() + 10;
    do {
        uct_worker_progress(a.worker);
        s = uct_test_iface_stats(a.iface);
    } while ((s.bounce_staged_bytes < staged + 512 * 1024) &&
             (uct_test_now() < deadline));
    for (i = 0; i < 3; ++i) {
        in_flight += !c[i].done;
    }
    printf("killing the peer with %d of 3 transfers in flight, %" PRIu64
           " bytes staged, %" PRIu64 " staging buffers in use\n", in_flight,
           s.bounce_staged_bytes - staged, s.bounce_bufs_in_use);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    t_kill = uct_test_now();

    ok = wait_all(&a, NULL, c, 3);
    for (i = 0; i < 3; ++i) {
        printf("     %s: %s\n", what[i], c[i].done ?
               ucs_status_string(c[i].status) : "not completed");
        all_failed &= c[i].done && (c[i].status != UCS_OK);
    }
    uct_test_check(ok && (in_flight == 3) && all_failed,
                   "every transfer in flight ended with an error, %.1f s "
                   "after the kill", uct_test_now() - t_kill);
    uct_test_check(a.ep_error, "error handler called: %s",
                   ucs_status_string(a.ep_error_status));

    s = uct_test_iface_stats(a.iface);
    uct_test_check(s.bounce_bufs_in_use == 0,
                   "staging buffers in use back to 0 (%" PRIu64 "; high-water %"
                   PRIu64 ")", s.bounce_bufs_in_use, s.bounce_bufs_max);

    /* new operations fail at once, a flush ends */
    op_comp_init(&probe, NULL);
    uct_test_check(xfer_post_once(&a, &x[0], &probe) != UCS_INPROGRESS,
                   "a new bounce put on the failed endpoint is refused at "
                   "once");

    uct_ep_destroy(a.ep);
    a.ep = NULL;
    s = uct_test_iface_stats(a.iface);
    uct_test_check(s.bounce_bufs_in_use == 0,
                   "after uct_ep_destroy: staging buffers in use %" PRIu64,
                   s.bounce_bufs_in_use);

    uct_rkey_release(a.component, &peer_gpu.rkey);
    uct_rkey_release(a.component, &peer_host.rkey);
    region_fini(&a, NULL, &gpu);
    uct_test_node_close(&a);
}


/* -------------------------------------------------------------- ucp -- */

static int ucp_wait(ucp_worker_h *workers, void *request)
{
    double deadline = uct_test_now() + TIMEOUT_S;
    ucs_status_t status;

    if (request == NULL) {
        return 1;
    }
    if (UCS_PTR_IS_ERR(request)) {
        printf("     ucp request failed: %s\n",
               ucs_status_string(UCS_PTR_STATUS(request)));
        return 0;
    }
    while (((status = ucp_request_check_status(request)) == UCS_INPROGRESS) &&
           (uct_test_now() < deadline)) {
        ucp_worker_progress(workers[0]);
        ucp_worker_progress(workers[1]);
    }
    ucp_request_free(request);
    if (status != UCS_OK) {
        printf("     ucp request: %s\n", ucs_status_string(status));
    }
    return status == UCS_OK;
}


/* Every RMA lane of the endpoint ("put[N]:" in its info) is an rc_gdr
 * lane ("lane[N]: ... rc_gdr/..."): the data cannot have gone another way
 * (UCP's software RMA over the AM lane, say) */
static int ucp_rma_on_rc_gdr(ucp_ep_h ep)
{
    char *text = NULL, *line, *p;
    int rc_gdr_lane[32] = {0};
    int rma_lanes = 0, ok = 1, lane;
    size_t size = 0;
    FILE *f     = open_memstream(&text, &size);

    ucp_ep_print_info(ep, f);
    fclose(f);
    for (line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (((p = strstr(line, "lane[")) != NULL) &&
            (sscanf(p, "lane[%d]:", &lane) == 1) && (lane >= 0) &&
            (lane < 32)) {
            rc_gdr_lane[lane] = (strstr(line, ":rc_gdr/") != NULL);
            /* a lane for RMA bandwidth (every release prints this; the
             * protocol lines below differ between them) */
            if (strstr(line, " rma_bw#") != NULL) {
                ++rma_lanes;
                ok &= rc_gdr_lane[lane];
                printf("     UCP RMA lane %d: %s\n", lane,
                       rc_gdr_lane[lane] ? "rc_gdr" : "not rc_gdr");
            }
        }
        if (((p = strstr(line, " put[")) != NULL) &&
            (sscanf(p, " put[%d]:", &lane) == 1) && (lane >= 0) &&
            (lane < 32)) {
            ++rma_lanes;
            ok &= rc_gdr_lane[lane];
            printf("     UCP RMA lane %d: %s\n", lane,
                   rc_gdr_lane[lane] ? "rc_gdr" : "not rc_gdr");
        }
    }
    free(text);
    return ok && (rma_lanes > 0);
}


static void run_ucp(void)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features   = UCP_FEATURE_RMA};
    ucp_worker_params_t wparams = {
        .field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_request_param_t rparam = {.op_attr_mask = 0};
    /* below 64 KiB UCP uses put_short/bcopy and get_bcopy, with a host
     * buffer on this side only: UCP 1.13 packs those with memcpy */
    static const size_t sizes[] = {100, 5000, 20000, 65536 + 1,
                                   256 * 1024 + 13, 1024 * 1024 + 5};
    ucp_worker_h workers[2];
    ucp_address_t *addr[2];
    size_t addr_len[2], i, rkey_size;
    ucp_ep_h eps[2];
    ucp_mem_h mem[2][2];
    ucp_rkey_h rkey[2];         /* B's GPU and host buffers, for A */
    region_t reg[2][2];         /* [node][gpu?] */
    ucp_context_h context;
    ucp_config_t *config;
    void *rkey_buf;
    unsigned seed = 70;
    int n, g, ok, put, lg, rg;

    ucp_config_read(NULL, NULL, &config);
    if (ucp_init(&params, config, &context) != UCS_OK) {
        uct_test_die("ucp_init", UCS_ERR_NO_DEVICE);
    }
    ucp_config_release(config);

    for (n = 0; n < 2; ++n) {
        ucp_worker_create(context, &wparams, &workers[n]);
        ucp_worker_get_address(workers[n], &addr[n], &addr_len[n]);
    }
    for (n = 0; n < 2; ++n) {
        ucp_ep_params_t ep_params = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
            .address    = addr[1 - n]};
        if (ucp_ep_create(workers[n], &ep_params, &eps[n]) != UCS_OK) {
            uct_test_die("ucp_ep_create", UCS_ERR_UNREACHABLE);
        }
    }

    for (n = 0; n < 2; ++n) {
        for (g = 0; g < 2; ++g) {
            ucp_mem_map_params_t mparams = {
                .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                              UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                .length     = REGION};
            memset(&reg[n][g], 0, sizeof(reg[n][g]));
            reg[n][g].buf  = mem_alloc(g, REGION);
            reg[n][g].size = REGION;
            reg[n][g].gpu  = g;
            reg[n][g].name = g ? (n ? "GPU(B)" : "GPU(A)") :
                                 (n ? "host(B)" : "host(A)");
            mparams.address = reg[n][g].buf;
            if (ucp_mem_map(context, &mparams, &mem[n][g]) != UCS_OK) {
                uct_test_die("ucp_mem_map", UCS_ERR_IO_ERROR);
            }
        }
    }
    for (g = 0; g < 2; ++g) {
        ucp_rkey_pack(context, mem[1][g], &rkey_buf, &rkey_size);
        if (ucp_ep_rkey_unpack(eps[0], rkey_buf, &rkey[g]) != UCS_OK) {
            uct_test_die("ucp_ep_rkey_unpack", UCS_ERR_INVALID_PARAM);
        }
        ucp_rkey_buffer_release(rkey_buf);
    }

    /* GPU on one side (either) and on both, put and get */
    for (put = 1; put >= 0; --put) {
        for (lg = 0; lg < 2; ++lg) {
            for (rg = 0; rg < 2; ++rg) {
                if (!lg && !rg) {
                    continue;
                }
                for (i = 0; i < ARRAY_SIZE(sizes); ++i, ++seed) {
                    xfer_t x = {.put = put, .local = &reg[0][lg],
                                .remote = &reg[1][rg], .loff = 7,
                                .roff = 3, .length = sizes[i]};
                    char str[128];
                    if (lg && (sizes[i] < 65536)) {
                        continue;
                    }
                    xfer_prepare(&x, seed);
                    ok = put ?
                         ucp_wait(workers, ucp_put_nbx(eps[0],
                                  x.local->buf + x.loff, x.length,
                                  (uintptr_t)(x.remote->buf + x.roff),
                                  rkey[rg], &rparam)) :
                         ucp_wait(workers, ucp_get_nbx(eps[0],
                                  x.local->buf + x.loff, x.length,
                                  (uintptr_t)(x.remote->buf + x.roff),
                                  rkey[rg], &rparam));
                    ok &= ucp_wait(workers, ucp_ep_flush_nbx(eps[0],
                                                             &rparam));
                    uct_test_check(ok && xfer_verify(&x, seed, 1), "UCP %s",
                                   xfer_str(&x, str, sizeof(str)));
                }
            }
        }
    }
    uct_test_check(ucp_rma_on_rc_gdr(eps[0]),
                   "UCP chose rc_gdr for the RMA lane (ucp_ep_print_info)");

    for (g = 0; g < 2; ++g) {
        ucp_rkey_destroy(rkey[g]);
    }
    for (n = 0; n < 2; ++n) {
        ucp_wait(workers, ucp_ep_close_nbx(eps[n], &rparam));
    }
    for (n = 0; n < 2; ++n) {
        for (g = 0; g < 2; ++g) {
            ucp_mem_unmap(context, mem[n][g]);
            if (g) {
                uct_rc_gdr_cuda_mem_free(reg[n][g].buf);
            } else {
                free(reg[n][g].buf);
            }
        }
        ucp_worker_release_address(workers[n], addr[n]);
        ucp_worker_destroy(workers[n]);
    }
    ucp_cleanup(context);
}


int main(int argc, char **argv)
{
    uct_test_init("uct_bounce", TIMEOUT_S);
    setenv("UCX_RC_GDR_BOUNCE_CHUNK_SIZE", "64k", 0);
    setenv("UCX_RC_GDR_BOUNCE_DEPTH", "3", 0);
    setenv("UCX_RC_GDR_BOUNCE_POOL_SIZE", "8", 0);

    if ((argc == 4) && !strcmp(argv[1], "uct")) {
        cuda_start();
        run_uct(argv[2], argv[3]);
    } else if ((argc == 4) && !strcmp(argv[1], "peer-death")) {
        run_peer_death(argv[2], argv[3]); /* CUDA starts after the fork */
    } else if ((argc == 2) && !strcmp(argv[1], "ucp")) {
        cuda_start();
        run_ucp();
    } else {
        fprintf(stderr, "usage: %s uct DEV_A DEV_B | peer-death DEV_A DEV_B "
                "| ucp\n", argv[0]);
        return 2;
    }

    return uct_test_summary();
}
