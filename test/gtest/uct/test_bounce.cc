/*
 * The host bounce lane end to end, byte for byte. GPU buffers come from the
 * CUDA driver through the project's shim; the tests run on the project's
 * stand-in driver only (test/mocks, . contrib/env.sh --emulated-gpu, run.sh's
 * with_emulated_gpu), so every result is about an EMULATED GPU: "GPU" memory
 * is host memory behind device pointers. Without the stand-in they skip.
 *
 * Each configuration leaves GPU memory without a NIC key (the set-up checks
 * the md counters before anything else is trusted):
 *   bounce.TEST/dmabuf_refused  UCX_RC_GDR_REG_METHODS=dmabuf, which rxe
 *                               (and the stand-in NIC, told `dmabuf:off`)
 *                               refuses: no registration mechanism at all
 *   bounce.TEST/policy_gdr_off  peermem allowed, but the policy forbids the
 *                               NIC both directions (NIC_READS_GPU=no,
 *                               NIC_WRITES_GPU=no)
 *
 *   bounce             put/get zcopy with keyless GPU memory on either side
 *                      and on both, sizes across chunk and message
 *                      boundaries; put_short, put/get_bcopy; back-pressure
 *                      (NO_RESOURCE, pending); ep flush waits for bounce
 *                      transfers; counters; forged tokens and addresses out
 *                      of range refused by the target
 *   bounce_peer_death  a forked peer is killed mid-transfer: every transfer
 *                      ends with an error and the staging buffers return
 *   bounce_ucp         two UCP workers in one process (UCX_TLS=rc_gdr,
 *                      ud_verbs:aux,self), put and get on GPU memory
 *
 * Unless set in the environment, the bounce lane is configured small
 * (UCX_RC_GDR_BOUNCE_CHUNK_SIZE=64k, _DEPTH=3, _POOL_SIZE=8) so that modest
 * sizes cross many chunks and the pool runs out.
 *
 * See file LICENSE for terms.
 */

#include "uct_rc_gdr_test.h"
#include "ucp_pair.h"

#include <uct/ib_gdr/rc_gdr_cuda.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>


#define BOUNCE_REGION    (4u * 1024 * 1024)
#define BOUNCE_TIMEOUT_S 120.0


/* The bounce knobs in effect (the suite's defaults, or the caller's) */
static size_t bounce_knob(const char *name)
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

static unsigned bounce_pool_size()
{
    return bounce_knob("UCX_RC_GDR_BOUNCE_POOL_SIZE");
}

/* Whether `count` staged transfers of `length` bytes, started at once,
 * need more staging buffers than the pool has */
static bool bounce_pool_runs_out(size_t length, int count)
{
    size_t chunk  = bounce_knob("UCX_RC_GDR_BOUNCE_CHUNK_SIZE");
    size_t chunks = (length + chunk - 1) / chunk;
    size_t depth  = bounce_knob("UCX_RC_GDR_BOUNCE_DEPTH");

    return count * ((chunks < depth) ? chunks : depth) > bounce_pool_size();
}

/*
 * The stand-in driver, initialized once per process, and GPU 0's primary
 * context made current. Returns why not, or an empty string.
 */
static std::string bounce_gpu_start()
{
    static bool started = false;
    static std::string why;
    uct_rc_gdr_cuda_driver_info_t info;
    uct_rc_gdr_cuda_ctx_h ctx;

    if (started) {
        return why;
    }

    started = true;
    if (uct_rc_gdr_cuda_init() != UCS_OK) {
        why = "no CUDA driver (these tests run on the stand-in: "
              ". contrib/env.sh --emulated-gpu, run.sh's with_emulated_gpu)";
    } else if ((uct_rc_gdr_cuda_driver_info(&info) != UCS_OK) ||
               !info.emulated) {
        why = uct_test_str("the CUDA driver (%s) is not the project's "
                           "stand-in: these tests run on an emulated GPU "
                           "(. contrib/env.sh --emulated-gpu)",
                           uct_rc_gdr_cuda_library_name());
    } else if (uct_rc_gdr_cuda_ctx_activate(0, &ctx) != UCS_OK) {
        why = "no primary context of GPU 0 on the stand-in driver";
    }
    return why;
}


/* ------------------------------------------------------------ memory -- */

/* A buffer on one side, and its remote key as the other side holds it */
typedef struct {
    char              *buf;
    size_t            size;
    bool              gpu;
    const char        *name;
    uct_test_node_t   *owner;       /* registered there; NULL: a peer's */
    uct_mem_h         memh;
    void              *packed;      /* packed rkey, for the peer */
    uct_test_node_t   *peer;        /* holds rkey; NULL: not unpacked */
    uct_rkey_bundle_t rkey;
} bounce_region_t;


static void *bounce_mem_alloc(bool gpu, size_t size)
{
    void *ptr;

    if (!gpu) {
        ptr = calloc(1, size);
        if (ptr == NULL) {
            uct_test_die("calloc", UCS_ERR_NO_MEMORY);
        }
        return ptr;
    }

    if (uct_rc_gdr_cuda_mem_alloc(size, &ptr) != UCS_OK) {
        uct_test_die("cuMemAlloc", UCS_ERR_NO_MEMORY);
    }
    return ptr;
}

static void bounce_mem_free(bool gpu, void *ptr)
{
    if (gpu) {
        uct_rc_gdr_cuda_mem_free(ptr);
    } else {
        free(ptr);
    }
}

static void bounce_mem_write(const bounce_region_t *r, size_t offset,
                             const void *src, size_t length)
{
    if (r->gpu) {
        uct_rc_gdr_cuda_memcpy_htod(r->buf + offset, src, length);
    } else {
        memcpy(r->buf + offset, src, length);
    }
}

static void bounce_mem_read(const bounce_region_t *r, size_t offset,
                            void *dst, size_t length)
{
    if (r->gpu) {
        uct_rc_gdr_cuda_memcpy_dtoh(dst, r->buf + offset, length);
    } else {
        memcpy(dst, r->buf + offset, length);
    }
}

static unsigned char bounce_data_byte(unsigned seed, size_t i)
{
    return (unsigned char)(seed * 13 + i * 7 + (i >> 9));
}

static unsigned char bounce_bg_byte(size_t i)
{
    return (unsigned char)(i * 3 + 0x5a);
}

static void bounce_progress(uct_test_node_t *a, uct_test_node_t *b)
{
    uct_worker_progress(a->worker);
    if (b != NULL) {
        uct_worker_progress(b->worker);
    }
}

/* Progresses a and b until both have every staging buffer back, at most
 * 10 s; their counters as last read */
static void bounce_bufs_wait_returned(uct_test_node_t *a, uct_test_node_t *b,
                                      uct_test_iface_stats_t *sa_p,
                                      uct_test_iface_stats_t *sb_p)
{
    double deadline = uct_test_now() + 10.0;

    do {
        bounce_progress(a, b);
        *sa_p = uct_test_iface_stats(a->iface);
        *sb_p = uct_test_iface_stats(b->iface);
    } while (((sa_p->bounce_bufs_in_use > 0) ||
              (sb_p->bounce_bufs_in_use > 0)) &&
             (uct_test_now() < deadline));
}


/* --------------------------------------------------------- operations -- */

typedef struct {
    uct_completion_t comp;
    ucs_status_t     status;
    int              done;
    int              *counter;   /* incremented at completion */
} bounce_comp_t;


static void bounce_comp_cb(uct_completion_t *self)
{
    bounce_comp_t *c = (bounce_comp_t*)self;

    c->status = self->status;
    c->done   = 1;
    if (c->counter != NULL) {
        ++*c->counter;
    }
}

static void bounce_comp_init(bounce_comp_t *c, int *counter)
{
    memset(c, 0, sizeof(*c));
    c->comp.func   = bounce_comp_cb;
    c->comp.count  = 1;
    c->comp.status = UCS_OK;
    c->counter     = counter;
}


/* One zcopy put/get of [loff, +length) of local with [roff, +length) of
 * remote */
typedef struct {
    int                   put;
    const bounce_region_t *local;
    size_t                loff;
    const bounce_region_t *remote;
    size_t                roff;
    size_t                length;
    uint64_t              remote_addr; /* overrides remote->buf + roff */
    uct_rkey_t            rkey;        /* overrides remote->rkey */
} bounce_xfer_t;


static ucs_status_t bounce_xfer_post_once(uct_test_node_t *a,
                                          const bounce_xfer_t *x,
                                          bounce_comp_t *c)
{
    uint64_t remote_addr = x->remote_addr ? x->remote_addr :
                           (uintptr_t)(x->remote->buf + x->roff);
    uct_rkey_t rkey      = x->rkey ? x->rkey : x->remote->rkey.rkey;
    uct_iov_t iov;

    uct_test_iov_init(&iov, x->local->buf + x->loff, x->length,
                      x->local->memh);
    return x->put ? uct_ep_put_zcopy(a->ep, &iov, 1, remote_addr, rkey,
                                     &c->comp) :
                    uct_ep_get_zcopy(a->ep, &iov, 1, remote_addr, rkey,
                                     &c->comp);
}

/* Posts, progressing both sides while the answer is NO_RESOURCE */
static ucs_status_t bounce_xfer_post(uct_test_node_t *a, uct_test_node_t *b,
                                     const bounce_xfer_t *x, bounce_comp_t *c,
                                     int *no_resource)
{
    double deadline = uct_test_now() + uct_test_timeout_s;
    ucs_status_t status;

    for (;;) {
        status = bounce_xfer_post_once(a, x, c);
        if ((status != UCS_ERR_NO_RESOURCE) || (uct_test_now() > deadline)) {
            break;
        }
        if (no_resource != NULL) {
            ++*no_resource;
        }
        bounce_progress(a, b);
    }

    if (status != UCS_INPROGRESS) {
        c->done   = 1;
        c->status = status;
    }
    return status;
}

static bool bounce_wait_all(uct_test_node_t *a, uct_test_node_t *b,
                            bounce_comp_t *c, int count)
{
    double deadline = uct_test_now() + uct_test_timeout_s;
    int i, pending;

    do {
        pending = 0;
        for (i = 0; i < count; ++i) {
            pending += !c[i].done;
        }
        if (pending == 0) {
            return true;
        }
        bounce_progress(a, b);
    } while (uct_test_now() < deadline);
    return false;
}

/* Source bytes for x, background everywhere in the destination */
static void bounce_xfer_prepare(const bounce_xfer_t *x, unsigned seed)
{
    const bounce_region_t *src = x->put ? x->local : x->remote;
    const bounce_region_t *dst = x->put ? x->remote : x->local;
    size_t soff                = x->put ? x->loff : x->roff;
    std::vector<unsigned char> tmp(std::max(x->length, dst->size));
    size_t i;

    for (i = 0; i < x->length; ++i) {
        tmp[i] = bounce_data_byte(seed, i);
    }
    bounce_mem_write(src, soff, tmp.data(), x->length);
    for (i = 0; i < dst->size; ++i) {
        tmp[i] = bounce_bg_byte(i);
    }
    bounce_mem_write(dst, 0, tmp.data(), dst->size);
}

/* The destination holds x's bytes (or, unless moved, none of them) and
 * nothing else changed around them; where it differs first, in *diff */
static bool bounce_xfer_verify(const bounce_xfer_t *x, unsigned seed,
                               bool moved, std::string *diff)
{
    const bounce_region_t *dst = x->put ? x->remote : x->local;
    size_t doff                = x->put ? x->roff : x->loff;
    std::vector<unsigned char> tmp(dst->size);
    size_t i;
    bool ok;

    bounce_mem_read(dst, 0, tmp.data(), dst->size);
    for (i = 0; i < dst->size; ++i) {
        if (moved && (i >= doff) && (i < doff + x->length)) {
            ok = (tmp[i] == bounce_data_byte(seed, i - doff));
        } else {
            ok = (tmp[i] == bounce_bg_byte(i));
        }
        if (!ok) {
            *diff = uct_test_str(", first difference at byte %zu of %s", i,
                                 dst->name);
            return false;
        }
    }
    return true;
}

static std::string bounce_xfer_str(const bounce_xfer_t *x)
{
    return uct_test_str("%s %s %s %s, %zu bytes (+%zu/+%zu)",
                        x->put ? "put" : "get", x->local->name,
                        x->put ? "->" : "<-", x->remote->name, x->length,
                        x->loff, x->roff);
}

/* Whether [roff or loff, +length) of the destination of x holds seed's
 * bytes (after transfers that prepared no background) */
static bool bounce_xfer_landed(const bounce_xfer_t *x, unsigned seed)
{
    const bounce_region_t *dst = x->put ? x->remote : x->local;
    size_t doff                = x->put ? x->roff : x->loff;
    std::vector<unsigned char> tmp(x->length);
    size_t k;

    bounce_mem_read(dst, doff, tmp.data(), x->length);
    for (k = 0; k < x->length; ++k) {
        if (tmp[k] != bounce_data_byte(seed, k)) {
            return false;
        }
    }
    return true;
}

/* The source bytes of x, without touching the destination */
static void bounce_xfer_fill(const bounce_xfer_t *x, unsigned seed)
{
    std::vector<unsigned char> tmp(x->length);
    size_t k;

    for (k = 0; k < x->length; ++k) {
        tmp[k] = bounce_data_byte(seed, k);
    }
    bounce_mem_write(x->put ? x->local : x->remote,
                     x->put ? x->loff : x->roff, tmp.data(), x->length);
}

/* One transfer, waited for and verified */
static void bounce_xfer_run(uct_test_node_t *a, uct_test_node_t *b,
                            const bounce_xfer_t *x, unsigned seed)
{
    std::string diff;
    bounce_comp_t c;
    bool ok;

    bounce_xfer_prepare(x, seed);
    bounce_comp_init(&c, NULL);
    bounce_xfer_post(a, b, x, &c, NULL);
    ok = bounce_wait_all(a, b, &c, 1);
    UCT_TEST_EXPECT(ok && (c.status == UCS_OK) &&
                    bounce_xfer_verify(x, seed, true, &diff),
                    "%s: %s%s", bounce_xfer_str(x).c_str(),
                    ok ? ucs_status_string(c.status) : "timed out",
                    diff.c_str());
}


/* ------------------------------------------------------------ fixture -- */

/*
 * Nodes with GPU buffers on the stand-in driver: skips without it. The
 * regions a test makes are freed at TearDown, before its nodes close.
 */
class bounce_test : public uct_rc_gdr_test {
protected:
    void SetUp() override;
    void TearDown() override;

    /* Sets name unless the environment has it */
    void env_default(const char *name, const char *value);

    /* size bytes of GPU or host memory, registered on owner */
    bounce_region_t *region_new(uct_test_node_t *owner, bool gpu,
                                size_t size, const char *name);

    /* A peer's region as this side knows it: address, size, packed key */
    bounce_region_t *region_remote(uint64_t addr, size_t size,
                                   const char *name);

    /* r's packed key unpacked on peer */
    void region_unpack(uct_test_node_t *peer, bounce_region_t *r,
                       const void *packed);

private:
    std::vector<bounce_region_t*> m_regions;
};


void bounce_test::SetUp()
{
    std::string why;

    uct_rc_gdr_test::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
        return;
    }

    why = bounce_gpu_start();
    if (!why.empty()) {
        GTEST_SKIP() << why;
    }
    emulated_gpu_note();

    uct_test_timeout_s = BOUNCE_TIMEOUT_S;  /* restored at TearDown */
    env_default("UCX_RC_GDR_BOUNCE_CHUNK_SIZE", "64k");
    env_default("UCX_RC_GDR_BOUNCE_DEPTH", "3");
    env_default("UCX_RC_GDR_BOUNCE_POOL_SIZE", "8");
}

void bounce_test::TearDown()
{
    bounce_region_t *r;

    while (!m_regions.empty()) {
        r = m_regions.back();
        m_regions.pop_back();
        if (r->peer != NULL) {
            uct_rkey_release(r->peer->component, &r->rkey);
        }
        if (r->owner != NULL) {
            uct_md_mem_dereg(r->owner->md, r->memh);
            bounce_mem_free(r->gpu, r->buf);
            free(r->packed);
        }
        delete r;
    }
    uct_rc_gdr_test::TearDown();
}

void bounce_test::env_default(const char *name, const char *value)
{
    if (getenv(name) == NULL) {
        env_set(name, value);
    }
}

bounce_region_t *bounce_test::region_new(uct_test_node_t *owner, bool gpu,
                                         size_t size, const char *name)
{
    bounce_region_t *r = new bounce_region_t();

    r->buf  = (char*)bounce_mem_alloc(gpu, size);
    r->size = size;
    r->gpu  = gpu;
    r->name = name;
    try {
        uct_test_mem_reg(owner, r->buf, size, &r->memh, &r->packed);
    } catch (...) {
        bounce_mem_free(gpu, r->buf);
        delete r;
        throw;
    }

    r->owner = owner;
    m_regions.push_back(r);
    return r;
}

bounce_region_t *bounce_test::region_remote(uint64_t addr, size_t size,
                                            const char *name)
{
    bounce_region_t *r = new bounce_region_t();

    r->buf  = (char*)(uintptr_t)addr;
    r->size = size;
    r->name = name;
    m_regions.push_back(r);
    return r;
}

void bounce_test::region_unpack(uct_test_node_t *peer, bounce_region_t *r,
                                const void *packed)
{
    ucs_status_t status = uct_rkey_unpack(peer->component, packed, &r->rkey);

    if (status != UCS_OK) {
        uct_test_die("uct_rkey_unpack", status);
    }
    r->peer = peer;
}


/* ------------------------------------------------------------ bounce -- */

/* A configuration in which the gate leaves GPU memory without a NIC key */
struct bounce_lane {
    const char *name;
    const char *reg_methods;      /* UCX_RC_GDR_REG_METHODS */
    const char *nic_reads_gpu;    /* UCX_RC_GDR_NIC_READS_GPU; NULL: default */
    const char *nic_writes_gpu;   /* UCX_RC_GDR_NIC_WRITES_GPU */
};

/* gtest prints a lane by its name */
static void PrintTo(const bounce_lane &lane, std::ostream *os)
{
    *os << lane.name;
}

static const bounce_lane bounce_lanes[] = {
    /* rxe refuses DMA-BUF, peermem is not allowed: no mechanism */
    {"dmabuf_refused", "dmabuf", nullptr, nullptr},
    /* peermem would work, the direction policy turns GDR off */
    {"policy_gdr_off", "dmabuf,peermem", "no", "no"}
};


/*
 * A connected pair with a GPU and a host region of 4 MiB on each side, the
 * keys unpacked by the other side; the set-up fails unless GPU memory has
 * no NIC key on either side.
 */
class bounce : public bounce_test,
               public testing::WithParamInterface<bounce_lane> {
protected:
    void SetUp() override;

    /* The md counters say that GPU memory has no NIC key on either side */
    bool lane_is_keyless(std::string *counters);

    /* put then get between local and remote over sizes across chunk and
     * message boundaries, each verified */
    void zcopy_sweep(const bounce_region_t *local,
                     const bounce_region_t *remote, unsigned seed);

    /* count transfers posted at once, retried on NO_RESOURCE */
    void pressure(const char *what, const bounce_region_t *local,
                  const bounce_region_t *remote, int put, size_t length,
                  int count, bool expect_no_resource, unsigned seed);

    /* Every staging buffer is back (within 10 s: the last ones return when
     * their sends' completions are polled, which the initiator's completion
     * does not wait for), and no NIC registration of GPU memory was made */
    void expect_lane_clean();

    ucs_status_t flush() { return uct_test_ep_flush(nodes, 2, a->ep); }

    bounce_region_t *a_gpu = nullptr, *a_host = nullptr;
    bounce_region_t *b_gpu = nullptr, *b_host = nullptr;
};


void bounce::SetUp()
{
    const bounce_lane &lane = GetParam();
    std::string counters;

    bounce_test::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
        return;
    }

    env_set("UCX_RC_GDR_REG_METHODS", lane.reg_methods);
    /* the stand-in NIC serves DMA-BUF: refuse it there, as rxe does */
    nic_spec_set("dmabuf:off");
    if (lane.nic_reads_gpu != nullptr) {
        env_set("UCX_RC_GDR_NIC_READS_GPU", lane.nic_reads_gpu);
    }
    if (lane.nic_writes_gpu != nullptr) {
        env_set("UCX_RC_GDR_NIC_WRITES_GPU", lane.nic_writes_gpu);
    }

    pair_open(0);
    a_gpu  = region_new(a, true, BOUNCE_REGION, "GPU(A)");
    a_host = region_new(a, false, BOUNCE_REGION, "host(A)");
    b_gpu  = region_new(b, true, BOUNCE_REGION, "GPU(B)");
    b_host = region_new(b, false, BOUNCE_REGION, "host(B)");
    region_unpack(b, a_gpu, a_gpu->packed);
    region_unpack(b, a_host, a_host->packed);
    region_unpack(a, b_gpu, b_gpu->packed);
    region_unpack(a, b_host, b_host->packed);

    /* nothing else is trusted on another lane */
    ASSERT_TRUE(lane_is_keyless(&counters))
        << "GPU memory has no NIC key on either side (md counters "
        << counters << "): the gate chose a mechanism";
}

bool bounce::lane_is_keyless(std::string *counters)
{
    uct_test_md_stats_t sa = uct_test_md_stats(a->md);
    uct_test_md_stats_t sb = uct_test_md_stats(b->md);

    *counters = uct_test_str("A: peermem %" PRIu64 " dmabuf %" PRIu64
                             " bounce %" PRIu64 ", B: peermem %" PRIu64
                             " dmabuf %" PRIu64 " bounce %" PRIu64,
                             sa.peermem_regs, sa.dmabuf_regs, sa.bounce_regs,
                             sb.peermem_regs, sb.dmabuf_regs, sb.bounce_regs);
    return (sa.peermem_regs == 0) && (sa.dmabuf_regs == 0) &&
           (sa.bounce_regs > 0) && (sb.peermem_regs == 0) &&
           (sb.dmabuf_regs == 0) && (sb.bounce_regs > 0);
}

void bounce::zcopy_sweep(const bounce_region_t *local,
                         const bounce_region_t *remote, unsigned seed)
{
    static const size_t sizes[] = {1, 4095, 8152, 8153, 65536,
                                   3 * 65536 + 17, 1048576 + 5};
    bounce_xfer_t x;
    int put;

    for (put = 1; put >= 0; --put) {
        for (size_t size : sizes) {
            memset(&x, 0, sizeof(x));
            x.put    = put;
            x.local  = local;
            x.remote = remote;
            x.loff   = 3;
            x.roff   = 5;
            x.length = size;
            bounce_xfer_run(a, b, &x, seed++);
        }
    }
    expect_lane_clean();
}

void bounce::expect_lane_clean()
{
    uct_test_iface_stats_t sa, sb;
    uct_test_md_stats_t ma, mb;

    bounce_bufs_wait_returned(a, b, &sa, &sb);
    UCT_TEST_EXPECT((sa.bounce_bufs_in_use == 0) &&
                    (sb.bounce_bufs_in_use == 0) &&
                    (sa.bounce_bufs_max <= bounce_pool_size()) &&
                    (sb.bounce_bufs_max <= bounce_pool_size()),
                    "every staging buffer back in the pool (in use A %" PRIu64
                    ", B %" PRIu64 "; high-water A %" PRIu64 ", B %" PRIu64
                    " of %u)", sa.bounce_bufs_in_use, sb.bounce_bufs_in_use,
                    sa.bounce_bufs_max, sb.bounce_bufs_max,
                    bounce_pool_size());

    ma = uct_test_md_stats(a->md);
    mb = uct_test_md_stats(b->md);
    UCT_TEST_EXPECT(ma.peermem_regs + ma.dmabuf_regs + mb.peermem_regs +
                    mb.dmabuf_regs == 0,
                    "no NIC registration of GPU memory was made on either "
                    "side");
}


TEST_P(bounce, gpu_memory_has_no_nic_key)
{
    std::string counters;

    UCT_TEST_EXPECT(lane_is_keyless(&counters),
                    "GPU memory has no NIC key on either side (md counters "
                    "%s)", counters.c_str());
}

/* Zero bytes touch no memory: they need no key and no staging, and
 * complete (at once, or through their completion) with success */
TEST_P(bounce, zero_bytes_need_no_key)
{
    bounce_xfer_t x;
    bounce_comp_t c;
    ucs_status_t status = UCS_OK;

    memset(&x, 0, sizeof(x));
    x.local  = a_gpu;
    x.remote = b_gpu;
    for (x.put = 1; (x.put >= 0) && (status == UCS_OK); --x.put) {
        bounce_comp_init(&c, NULL);
        status = bounce_xfer_post_once(a, &x, &c);
        if (status == UCS_INPROGRESS) {
            status = bounce_wait_all(a, b, &c, 1) ? c.status :
                                                    UCS_ERR_TIMED_OUT;
        }
    }
    UCT_TEST_EXPECT(status == UCS_OK,
                    "zero-byte put/get to GPU memory without a NIC key: %s",
                    ucs_status_string(status));
}

/* GPU memory at the initiator: staged through A's pool */
TEST_P(bounce, zcopy_gpu_initiator_staged)
{
    zcopy_sweep(a_gpu, b_host, 1);
}

/* GPU memory at the target: B copies the messages in and out */
TEST_P(bounce, zcopy_gpu_target_copies)
{
    zcopy_sweep(a_host, b_gpu, 15);
}

TEST_P(bounce, zcopy_gpu_both_sides)
{
    zcopy_sweep(a_gpu, b_gpu, 29);
}

/* put_short to memory without a NIC key: the same semantics (the buffer
 * is free at return, remote completion at flush) */
TEST_P(bounce, put_short_to_gpu)
{
    uint64_t remote = (uintptr_t)b_gpu->buf + 77;
    unsigned char src[100];
    ucs_status_t status;
    std::string diff;
    bounce_xfer_t x;
    bool ok;

    memset(&x, 0, sizeof(x));
    x.put    = 1;
    x.local  = a_host;
    x.remote = b_gpu;
    x.roff   = 77;
    x.length = sizeof(src);
    bounce_xfer_prepare(&x, 30);
    for (size_t k = 0; k < x.length; ++k) {
        src[k] = bounce_data_byte(30, k);
    }
    status = UCT_TEST_RETRY(nodes, 2,
                            uct_ep_put_short(a->ep, src, x.length, remote,
                                             b_gpu->rkey.rkey));
    memset(src, 0, x.length); /* the buffer is free at return */
    ok = (status == UCS_OK) && (flush() == UCS_OK);
    UCT_TEST_EXPECT(ok && bounce_xfer_verify(&x, 30, true, &diff),
                    "put_short %zu bytes host(A) -> GPU(B): %s, byte-exact "
                    "after flush%s", x.length, ucs_status_string(status),
                    diff.c_str());
    expect_lane_clean();
}


typedef struct {
    const unsigned char *src;
    size_t              length;
    unsigned char       *dst;
} bounce_copy_arg_t;

static size_t bounce_pack_cb(void *dest, void *arg)
{
    bounce_copy_arg_t *ca = (bounce_copy_arg_t*)arg;

    memcpy(dest, ca->src, ca->length);
    return ca->length;
}

static void bounce_unpack_cb(void *arg, const void *data, size_t length)
{
    bounce_copy_arg_t *ca = (bounce_copy_arg_t*)arg;

    memcpy(ca->dst, data, length);
    ca->length = length;
}

/* put_bcopy (local completion at return, remote at flush) and get_bcopy
 * (the unpack callback sees all the bytes at once) to memory without a
 * NIC key */
TEST_P(bounce, put_get_bcopy_to_gpu)
{
    static const size_t sizes[] = {1, 5000, 8152, 8192};
    uint64_t remote = (uintptr_t)b_gpu->buf + 77;
    uct_rkey_t rkey = b_gpu->rkey.rkey;
    std::vector<unsigned char> src(8192), dst(8192);
    bounce_copy_arg_t ca;
    ucs_status_t status;
    std::string diff;
    bounce_comp_t c;
    bounce_xfer_t x;
    ssize_t packed;
    unsigned seed;
    size_t i, k;
    bool ok;

    memset(&x, 0, sizeof(x));
    x.local  = a_host;
    x.remote = b_gpu;
    x.roff   = 77;
    for (i = 0; i < ucs_static_array_size(sizes); ++i) {
        /* put_bcopy */
        seed     = 31 + i;
        x.put    = 1;
        x.length = sizes[i];
        bounce_xfer_prepare(&x, seed);
        for (k = 0; k < x.length; ++k) {
            src[k] = bounce_data_byte(seed, k);
        }
        ca.src    = src.data();
        ca.length = x.length;
        packed    = UCT_TEST_RETRY(nodes, 2,
                                   uct_ep_put_bcopy(a->ep, bounce_pack_cb,
                                                    &ca, remote, rkey));
        memset(src.data(), 0, x.length);
        ok = (packed == (ssize_t)x.length) && (flush() == UCS_OK);
        diff.clear();
        UCT_TEST_EXPECT(ok && bounce_xfer_verify(&x, seed, true, &diff),
                        "put_bcopy %zu bytes host(A) -> GPU(B): %zd, "
                        "byte-exact after flush%s", x.length, packed,
                        diff.c_str());

        /* get_bcopy */
        seed  = 41 + i;
        x.put = 0;
        bounce_xfer_prepare(&x, seed);
        std::fill(dst.begin(), dst.end(), 0);
        ca.dst    = dst.data();
        ca.length = 0;
        bounce_comp_init(&c, NULL);
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_get_bcopy(a->ep, bounce_unpack_cb, &ca,
                                                 x.length, remote, rkey,
                                                 &c.comp));
        ok = (status == UCS_INPROGRESS) && bounce_wait_all(a, b, &c, 1) &&
             (c.status == UCS_OK) && (ca.length == x.length);
        for (k = 0; ok && (k < x.length); ++k) {
            ok = (dst[k] == bounce_data_byte(seed, k));
        }
        UCT_TEST_EXPECT(ok, "get_bcopy %zu bytes host(A) <- GPU(B): %s (%s), "
                        "unpacked once, byte-exact", x.length,
                        ucs_status_string(status),
                        ucs_status_string(c.status));
    }
    expect_lane_clean();
}


/* Many transfers at once: the pool (8 buffers, depth 3) and the ordered
 * message queue run out; the answer is NO_RESOURCE, then every transfer
 * completes byte-exact */
void bounce::pressure(const char *what, const bounce_region_t *local,
                      const bounce_region_t *remote, int put, size_t length,
                      int count, bool expect_no_resource, unsigned seed)
{
    bounce_comp_t c[8];
    bounce_xfer_t x[8];
    int no_resource = 0;
    bool ok, good   = true;
    int i;

    ASSERT_LE(count, 8);
    /* each transfer its own slice; all slices filled first */
    for (i = 0; i < count; ++i) {
        memset(&x[i], 0, sizeof(x[i]));
        x[i].put    = put;
        x[i].local  = local;
        x[i].remote = remote;
        x[i].loff   = i * (length + 64) + 1;
        x[i].roff   = i * (length + 64) + 7;
        x[i].length = length;
        bounce_xfer_fill(&x[i], seed + i);
    }

    for (i = 0; i < count; ++i) {
        bounce_comp_init(&c[i], NULL);
        bounce_xfer_post(a, b, &x[i], &c[i], &no_resource);
    }
    ok = bounce_wait_all(a, b, c, count);

    for (i = 0; i < count; ++i) {
        good = good && (c[i].status == UCS_OK) &&
               bounce_xfer_landed(&x[i], seed + i);
    }
    UCT_TEST_EXPECT(ok && good && (!expect_no_resource || (no_resource > 0)),
                    "back-pressure, %s: %d x %zu bytes posted at once, "
                    "NO_RESOURCE %d times, all complete byte-exact%s", what,
                    count, length, no_resource,
                    expect_no_resource ? "" : " (no refusal expected)");
}

/* A's pool: 8 buffers, 3 per transfer (unless the knobs say else) */
TEST_P(bounce, back_pressure_staging_pool)
{
    const size_t length = 512 * 1024;

    pressure("staged puts GPU(A) -> host(B)", a_gpu, b_host, 1, length, 6,
             bounce_pool_runs_out(length, 6), 20);
    pressure("staged gets GPU(A) <- host(B)", a_gpu, b_host, 0, length, 6,
             bounce_pool_runs_out(length, 6), 21);
    expect_lane_clean();
}

/* Credits and the ordered message queue; B's pool for the gets, which wait
 * there: A sees no refusal */
TEST_P(bounce, back_pressure_message_queue)
{
    const size_t length = 256 * 1024;

    pressure("message puts host(A) -> GPU(B)", a_host, b_gpu, 1, length, 8,
             true, 22);
    pressure("message puts GPU(A) -> GPU(B)", a_gpu, b_gpu, 1, length, 8,
             true, 23);
    pressure("message gets GPU(A) <- GPU(B)", a_gpu, b_gpu, 0, length, 8,
             false, 24);
    expect_lane_clean();
}


/* The same through the pending queue: pending_add must take the request
 * when the lane is out of staging buffers (not answer BUSY forever) */
typedef struct {
    uct_pending_req_t req;
    uct_test_node_t   *a;
    bounce_xfer_t     x;
    bounce_comp_t     c;
    int               posted;
} bounce_pending_op_t;

static ucs_status_t bounce_pending_cb(uct_pending_req_t *self)
{
    bounce_pending_op_t *op = ucs_container_of(self, bounce_pending_op_t, req);
    ucs_status_t status;

    status = bounce_xfer_post_once(op->a, &op->x, &op->c);
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

TEST_P(bounce, pending_add_when_pool_runs_out)
{
    const size_t length = 512 * 1024;
    bool runs_out       = bounce_pool_runs_out(length, 6);
    bounce_pending_op_t ops[6];
    int i, queued = 0, posted;
    bool ok = true, good = true;
    ucs_status_t status;
    double deadline;

    for (i = 0; i < 6; ++i) {
        memset(&ops[i], 0, sizeof(ops[i]));
        ops[i].a        = a;
        ops[i].req.func = bounce_pending_cb;
        ops[i].x.put    = 1;
        ops[i].x.local  = a_gpu;
        ops[i].x.remote = b_host;
        ops[i].x.loff   = i * (length + 64);
        ops[i].x.roff   = i * (length + 64) + 11;
        ops[i].x.length = length;
        bounce_comp_init(&ops[i].c, NULL);
        bounce_xfer_fill(&ops[i].x, 40 + i);
    }

    deadline = uct_test_now() + uct_test_timeout_s;
    for (i = 0; i < 6; ++i) {
        do {
            status = bounce_xfer_post_once(a, &ops[i].x, &ops[i].c);
            if (status != UCS_ERR_NO_RESOURCE) {
                ops[i].posted = 1;
                if (status != UCS_INPROGRESS) {
                    ops[i].c.done   = 1;
                    ops[i].c.status = status;
                }
                break;
            }
            status = uct_ep_pending_add(a->ep, &ops[i].req, 0);
            if (status == UCS_OK) {
                ++queued;
                break;
            }
            /* BUSY: resources came back meanwhile, try again */
        } while (uct_test_now() < deadline);
    }

    do {
        posted = 0;
        for (i = 0; i < 6; ++i) {
            posted += ops[i].posted;
        }
        bounce_progress(a, b);
    } while ((posted < 6) && (uct_test_now() < deadline));

    deadline = uct_test_now() + uct_test_timeout_s;
    for (i = 0; i < 6; ++i) {
        if (!ops[i].posted) {
            ops[i].c.done = 1; /* never posted: do not wait */
        }
        while (!ops[i].c.done && (uct_test_now() < deadline)) {
            bounce_progress(a, b);
        }
        ok = ok && ops[i].c.done;
    }
    if (posted < 6) {
        /* still queued: the endpoint must not call them after the test */
        uct_ep_pending_purge(a->ep, NULL, NULL);
    }

    for (i = 0; i < 6; ++i) {
        good = good && ops[i].posted && (ops[i].c.status == UCS_OK) &&
               bounce_xfer_landed(&ops[i].x, 40 + i);
    }
    UCT_TEST_EXPECT(ok && good && ((queued > 0) || !runs_out),
                    "pending queue: %d of 6 staged puts queued by "
                    "uct_ep_pending_add when the pool ran out, all dispatched "
                    "and complete byte-exact%s", queued,
                    runs_out ? "" : " (these knobs: the pool does not run out)");
    expect_lane_clean();
}


/* An ep flush completes after every bounce transfer posted before it, ACKs
 * and the target's copies included */
typedef struct {
    bounce_comp_t c;
    int           *done_count;
    int           seen;        /* done_count when the flush completed */
} bounce_flush_comp_t;

static void bounce_flush_cb(uct_completion_t *self)
{
    bounce_flush_comp_t *f = (bounce_flush_comp_t*)self;

    f->c.status = self->status;
    f->c.done   = 1;
    f->seen     = *f->done_count;
}

TEST_P(bounce, ep_flush_waits_for_transfers)
{
    const size_t length           = 256 * 1024 + 3;
    const bounce_region_t *l[4]   = {a_gpu, a_host, a_gpu, a_gpu};
    const bounce_region_t *r[4]   = {b_host, b_gpu, b_gpu, b_gpu};
    const int puts[4]             = {1, 1, 1, 0};
    int done_count = 0, i, polled = 0;
    bool ok, good = true;
    bounce_flush_comp_t f;
    bounce_comp_t c[4];
    bounce_xfer_t x[4];
    ucs_status_t status;
    double deadline;

    for (i = 0; i < 4; ++i) {
        memset(&x[i], 0, sizeof(x[i]));
        x[i].put    = puts[i];
        x[i].local  = l[i];
        x[i].remote = r[i];
        x[i].loff   = i * (length + 64) + 2;
        x[i].roff   = i * (length + 64) + 9;
        x[i].length = length;
        bounce_xfer_fill(&x[i], 60 + i);
    }

    for (i = 0; i < 4; ++i) {
        bounce_comp_init(&c[i], &done_count);
        bounce_xfer_post(a, b, &x[i], &c[i], NULL);
    }

    memset(&f, 0, sizeof(f));
    f.c.comp.func  = bounce_flush_cb;
    f.c.comp.count = 1;
    f.done_count   = &done_count;
    deadline       = uct_test_now() + uct_test_timeout_s;
    do {
        status = uct_ep_flush(a->ep, 0, &f.c.comp);
        if (status == UCS_ERR_NO_RESOURCE) {
            bounce_progress(a, b);
        }
    } while ((status == UCS_ERR_NO_RESOURCE) && (uct_test_now() < deadline));
    if (status == UCS_OK) {
        f.c.done = 1;
        f.seen   = done_count;
    }
    while (!f.c.done && (uct_test_now() < deadline)) {
        bounce_progress(a, b);
    }
    ok = bounce_wait_all(a, b, c, 4);

    for (i = 0; i < 4; ++i) {
        good = good && (c[i].status == UCS_OK) &&
               bounce_xfer_landed(&x[i], 60 + i);
    }
    UCT_TEST_EXPECT(f.c.done && (f.c.status == UCS_OK) && (f.seen == 4) &&
                    ok && good, "ep flush (completion) after 4 bounce "
                    "transfers: %s, completed after %d of 4, data byte-exact",
                    ucs_status_string(status), f.seen);

    /* flush without a completion: INPROGRESS until the transfers are done */
    done_count = 0;
    for (i = 0; i < 4; ++i) {
        bounce_comp_init(&c[i], &done_count);
        bounce_xfer_post(a, b, &x[i], &c[i], NULL);
    }
    deadline = uct_test_now() + uct_test_timeout_s;
    while (((status = uct_ep_flush(a->ep, 0, NULL)) != UCS_OK) &&
           (uct_test_now() < deadline)) {
        ++polled;
        bounce_progress(a, b);
    }
    UCT_TEST_EXPECT((status == UCS_OK) && (done_count == 4) && (polled > 0),
                    "ep flush (polled) returns OK only after all 4 completed "
                    "(%d of 4, %d polls)", done_count, polled);
    expect_lane_clean();
}


/* After traffic through every lane of the bounce path: the counters say
 * so, and every staging buffer is back */
TEST_P(bounce, counters_count_transfers)
{
    const bounce_region_t *l[3] = {a_gpu, a_host, a_gpu};
    const bounce_region_t *r[3] = {b_host, b_gpu, b_gpu};
    uct_test_iface_stats_t sa, sb;
    bounce_xfer_t x;
    int i, put;

    for (i = 0; i < 3; ++i) {
        for (put = 1; put >= 0; --put) {
            memset(&x, 0, sizeof(x));
            x.put    = put;
            x.local  = l[i];
            x.remote = r[i];
            x.loff   = 3;
            x.roff   = 5;
            x.length = 1048576 + 5;
            bounce_xfer_run(a, b, &x, 50 + 2 * i + put);
        }
    }

    bounce_bufs_wait_returned(a, b, &sa, &sb);
    printf("counters A: %" PRIu64 " bounce transfers (%" PRIu64 " failed), "
           "%" PRIu64 " bytes staged, %" PRIu64 " messages, buffers in use "
           "%" PRIu64 " (at most %" PRIu64 ")\n", sa.bounce_xfers,
           sa.bounce_failed, sa.bounce_staged_bytes, sa.bounce_msgs,
           sa.bounce_bufs_in_use, sa.bounce_bufs_max);
    printf("counters B: %" PRIu64 " bytes staged, %" PRIu64 " messages, "
           "buffers in use %" PRIu64 " (at most %" PRIu64 ")\n",
           sb.bounce_staged_bytes, sb.bounce_msgs, sb.bounce_bufs_in_use,
           sb.bounce_bufs_max);
    UCT_TEST_EXPECT((sa.bounce_xfers > 0) && (sa.bounce_failed == 0) &&
                    (sa.bounce_staged_bytes > 0) &&
                    (sb.bounce_staged_bytes > 0) && (sb.bounce_msgs > 0),
                    "counters: transfers, staged bytes on both sides, target "
                    "messages");
    UCT_TEST_EXPECT((sa.bounce_bufs_in_use == 0) &&
                    (sb.bounce_bufs_in_use == 0) && (sa.bounce_bufs_max > 0) &&
                    (sa.bounce_bufs_max <= bounce_pool_size()),
                    "every staging buffer back in the pool (high-water %" PRIu64
                    " of %u)", sa.bounce_bufs_max, bounce_pool_size());
    expect_lane_clean();
}


/* What a peer names is checked by the target: a token it never issued, or
 * an address outside the registration, is refused with an error ACK and
 * nothing is written */
TEST_P(bounce, target_refuses_forged_token_and_range)
{
    uct_test_iface_stats_t before = uct_test_iface_stats(b->iface), after;
    uct_rkey_t forged             = b_gpu->rkey.rkey ^ 0x5a5a0000u;
    uint64_t end                  = (uintptr_t)b_gpu->buf + b_gpu->size;
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
         (uintptr_t)b_gpu->buf - 8192, 4096},
        /* A's buffers are mapped there, in this process */
        {"put, far past the registration", 1, 0, end + 65536, 4096},
        {"get, far past the registration", 0, 0, end + 65536, 4096},
        {"put, wrapping the address space", 1, 0, UINT64_MAX - 100, 4096}
    };
    std::string diff;
    bounce_comp_t c;
    bounce_xfer_t x;
    size_t i;
    bool ok;

    for (i = 0; i < ucs_static_array_size(cases); ++i) {
        memset(&x, 0, sizeof(x));
        x.put         = cases[i].put;
        x.local       = a_host;
        x.remote      = b_gpu;
        x.roff        = 64;
        x.loff        = 0;
        x.length      = cases[i].length;
        x.rkey        = cases[i].rkey;
        x.remote_addr = cases[i].addr;
        bounce_xfer_prepare(&x, 90 + i);
        bounce_comp_init(&c, NULL);
        bounce_xfer_post(a, b, &x, &c, NULL);
        ok = bounce_wait_all(a, b, &c, 1);
        /* a put must not have written, a get must not have read */
        diff.clear();
        UCT_TEST_EXPECT(ok && (c.status == UCS_ERR_INVALID_ADDR) &&
                        bounce_xfer_verify(&x, 90 + i, false, &diff),
                        "refused by the target: %s -> %s%s", cases[i].what,
                        ok ? ucs_status_string(c.status) : "timed out",
                        diff.c_str());
    }

    after = uct_test_iface_stats(b->iface);
    UCT_TEST_EXPECT(after.bounce_refused - before.bounce_refused ==
                    ucs_static_array_size(cases),
                    "target counted %" PRIu64 " refusals of %zu",
                    after.bounce_refused - before.bounce_refused,
                    ucs_static_array_size(cases));

    memset(&x, 0, sizeof(x));
    x.put    = 1;
    x.local  = a_host;
    x.remote = b_gpu;
    x.length = 100000;
    x.roff   = 1;
    bounce_xfer_run(a, b, &x, 99);
    UCT_TEST_EXPECT(!a->ep_error && !b->ep_error,
                    "the endpoints survive refused requests");
    expect_lane_clean();
}

static std::string
bounce_lane_name(const testing::TestParamInfo<bounce_lane> &info)
{
    return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(, bounce, testing::ValuesIn(bounce_lanes),
                         bounce_lane_name);


/* ------------------------------------------------- bounce_peer_death -- */

/* What the forked target publishes */
typedef struct {
    uct_test_wire_t node;
    unsigned char   gpu_rkey[UCT_TEST_ADDR_MAX];
    unsigned char   host_rkey[UCT_TEST_ADDR_MAX];
    uint64_t        gpu, host;
} bounce_peer_wire_t;


/* Keyless GPU memory (REG_METHODS=dmabuf on rxe), a peer that is declared
 * dead after 2 s (UCX_RC_GDR_FAILURE_TIMEOUT) */
class bounce_peer_death : public bounce_test {
protected:
    void SetUp() override;
    void TearDown() override;

    /* The target, forked before this side opens anything: it opens
     * dev_b() with a GPU and a host region of length bytes, connects to
     * the peer it is told of and progresses until it is killed */
    void peer_fork(size_t length);

    /* Connects a to the target; the target's wire in *wire_p */
    void peer_connect(bounce_peer_wire_t *wire_p);

    pid_t m_child     = -1;
    int   m_to_child  = -1;    /* our ends of the pipes */
    int   m_to_parent = -1;
};


void bounce_peer_death::SetUp()
{
    bounce_test::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
        return;
    }

    env_set("UCX_RC_GDR_REG_METHODS", "dmabuf");
    nic_spec_set("dmabuf:off");     /* the stand-in NIC would serve it */
    env_set("UCX_RC_GDR_FAILURE_TIMEOUT", "2s");
}

void bounce_peer_death::TearDown()
{
    if (m_child > 0) {
        kill(m_child, SIGKILL);
        waitpid(m_child, NULL, 0);
        m_child = -1;
    }
    if (m_to_child >= 0) {
        close(m_to_child);
        close(m_to_parent);
        m_to_child = m_to_parent = -1;
    }
    bounce_test::TearDown();
}

/* The child never returns into gtest: it is killed, or it exits */
static void bounce_peer_run(const char *dev, size_t length, int to_child,
                            int to_parent)
{
    pid_t parent = getppid();
    bounce_peer_wire_t wire;
    uct_test_wire_t wa;
    uct_rc_gdr_cuda_ctx_h ctx;
    uct_test_node_t b;
    void *gpu, *host, *gpu_packed, *host_packed;
    uct_mem_h gpu_memh, host_memh;

    if (uct_rc_gdr_cuda_ctx_activate(0, &ctx) != UCS_OK) {
        _exit(UCT_TEST_EXIT_SETUP);
    }
    uct_test_node_open(&b, dev, 0);
    gpu  = bounce_mem_alloc(true, length);
    host = bounce_mem_alloc(false, length);
    uct_test_mem_reg(&b, gpu, length, &gpu_memh, &gpu_packed);
    uct_test_mem_reg(&b, host, length, &host_memh, &host_packed);

    memset(&wire, 0, sizeof(wire));
    uct_test_node_wire(&b, &wire.node);
    memcpy(wire.gpu_rkey, gpu_packed, b.md_attr.rkey_packed_size);
    memcpy(wire.host_rkey, host_packed, b.md_attr.rkey_packed_size);
    wire.gpu  = (uintptr_t)gpu;
    wire.host = (uintptr_t)host;
    uct_test_write_all(to_parent, &wire, sizeof(wire));
    uct_test_read_all(to_child, &wa, sizeof(wa));
    uct_test_node_connect(&b, &wa);
    uct_test_write_all(to_parent, "r", 1);
    while (getppid() == parent) {
        uct_worker_progress(b.worker);
    }
    _exit(0);
}

void bounce_peer_death::peer_fork(size_t length)
{
    int to_child[2], to_parent[2];

    if ((pipe(to_child) != 0) || (pipe(to_parent) != 0)) {
        uct_test_die("pipe", UCS_ERR_IO_ERROR);
    }

    fflush(stdout);
    m_child = fork();
    if (m_child < 0) {
        uct_test_die("fork", UCS_ERR_IO_ERROR);
    } else if (m_child == 0) {
        close(to_child[1]);
        close(to_parent[0]);
        bounce_peer_run(dev_b(), length, to_child[0], to_parent[1]);
        _exit(UCT_TEST_EXIT_SETUP);
    }

    close(to_child[0]);
    close(to_parent[1]);
    m_to_child  = to_child[1];
    m_to_parent = to_parent[0];
}

void bounce_peer_death::peer_connect(bounce_peer_wire_t *wire_p)
{
    uct_test_wire_t wa;
    char ready;

    uct_test_node_wire(a, &wa);
    uct_test_read_all(m_to_parent, wire_p, sizeof(*wire_p));
    uct_test_write_all(m_to_child, &wa, sizeof(wa));
    uct_test_node_connect(a, &wire_p->node);
    uct_test_read_all(m_to_parent, &ready, 1);
}

/* A peer killed mid-transfer: every transfer in flight ends with an error
 * within the failure timeout, the staging buffers return, the endpoint
 * refuses new work */
TEST_F(bounce_peer_death, transfers_fail_and_buffers_return)
{
    const size_t length = 3 * 1024 * 1024;
    const char *what[3] = {"put GPU -> GPU (messages)",
                           "put GPU -> host (staged RDMA)",
                           "get GPU <- GPU (messages)"};
    bounce_region_t *gpu, *peer_gpu, *peer_host;
    int i, in_flight = 0;
    bool ok, all_failed = true;
    bounce_peer_wire_t wb;
    uct_test_iface_stats_t s;
    bounce_comp_t c[3], probe;
    bounce_xfer_t x[3];
    double t_kill, deadline;
    uint64_t staged;

    peer_fork(length);
    a   = node_open(dev_a(), 0);
    gpu = region_new(a, true, length, "GPU(A)");
    peer_connect(&wb);

    /* the peer's regions, as far as this side knows them */
    peer_gpu  = region_remote(wb.gpu, length, "GPU(B)");
    peer_host = region_remote(wb.host, length, "host(B)");
    region_unpack(a, peer_gpu, wb.gpu_rkey);
    region_unpack(a, peer_host, wb.host_rkey);

    /* alive: a small transfer through each lane works */
    for (i = 0; i < 3; ++i) {
        memset(&x[i], 0, sizeof(x[i]));
        x[i].put    = (i != 2);
        x[i].local  = gpu;
        x[i].remote = (i == 1) ? peer_host : peer_gpu;
        x[i].length = 100000;
        bounce_comp_init(&probe, NULL);
        bounce_xfer_post(a, NULL, &x[i], &probe, NULL);
        ok = bounce_wait_all(a, NULL, &probe, 1);
        UCT_TEST_EXPECT(ok && (probe.status == UCS_OK), "live peer: %s: %s",
                        what[i],
                        ok ? ucs_status_string(probe.status) : "timed out");
    }

    /* large transfers in flight, then the peer dies */
    for (i = 0; i < 3; ++i) {
        x[i].length = length;
        bounce_comp_init(&c[i], NULL);
        bounce_xfer_post(a, NULL, &x[i], &c[i], NULL);
    }
    /* let some data flow first: the peer dies mid-transfer */
    staged   = uct_test_iface_stats(a->iface).bounce_staged_bytes;
    deadline = uct_test_now() + 10;
    do {
        uct_worker_progress(a->worker);
        s = uct_test_iface_stats(a->iface);
    } while ((s.bounce_staged_bytes < staged + 512 * 1024) &&
             (uct_test_now() < deadline));
    for (i = 0; i < 3; ++i) {
        in_flight += !c[i].done;
    }
    printf("killing the peer with %d of 3 transfers in flight, %" PRIu64
           " bytes staged, %" PRIu64 " staging buffers in use\n", in_flight,
           s.bounce_staged_bytes - staged, s.bounce_bufs_in_use);
    kill(m_child, SIGKILL);
    waitpid(m_child, NULL, 0);
    m_child = -1;
    t_kill  = uct_test_now();

    ok = bounce_wait_all(a, NULL, c, 3);
    for (i = 0; i < 3; ++i) {
        printf("     %s: %s\n", what[i], c[i].done ?
               ucs_status_string(c[i].status) : "not completed");
        all_failed = all_failed && c[i].done && (c[i].status != UCS_OK);
    }
    UCT_TEST_EXPECT(ok && (in_flight == 3) && all_failed,
                    "every transfer in flight (%d of 3) ended with an error, "
                    "%.1f s after the kill", in_flight,
                    uct_test_now() - t_kill);
    UCT_TEST_EXPECT(a->ep_error, "error handler called: %s",
                    ucs_status_string(a->ep_error_status));

    s = uct_test_iface_stats(a->iface);
    UCT_TEST_EXPECT(s.bounce_bufs_in_use == 0,
                    "staging buffers in use back to 0 (%" PRIu64
                    "; high-water %" PRIu64 ")", s.bounce_bufs_in_use,
                    s.bounce_bufs_max);

    /* new operations fail at once */
    bounce_comp_init(&probe, NULL);
    UCT_TEST_EXPECT(bounce_xfer_post_once(a, &x[0], &probe) != UCS_INPROGRESS,
                    "a new bounce put on the failed endpoint is refused at "
                    "once");

    uct_ep_destroy(a->ep);
    a->ep = NULL;
    s     = uct_test_iface_stats(a->iface);
    UCT_TEST_EXPECT(s.bounce_bufs_in_use == 0,
                    "after uct_ep_destroy: staging buffers in use %" PRIu64,
                    s.bounce_bufs_in_use);
}


/* -------------------------------------------------------- bounce_ucp -- */

/*
 * Two UCP workers in one process over rc_gdr (UCX_TLS=rc_gdr,ud_verbs:aux,
 * self), keyless GPU memory (REG_METHODS=dmabuf on rxe); a GPU and a host
 * region of 4 MiB on each side, mapped, B's keys unpacked on A's endpoint.
 */
class bounce_ucp : public bounce_test {
protected:
    void SetUp() override;
    void TearDown() override;

    /* put (or get) with GPU memory on either side and on both */
    void rma_sweep(bool put, unsigned seed);

    /* Every RMA lane of A's endpoint is an rc_gdr lane */
    bool rma_on_rc_gdr();

    uct_rc_gdr_ucp_pair m_ucp;
    ucp_rkey_h          m_rkey[2] = {nullptr, nullptr}; /* B's, for A */
    bounce_region_t     m_reg[2][2];                    /* [node][gpu?] */
};


void bounce_ucp::SetUp()
{
    static const char *names[2][2] = {{"host(A)", "GPU(A)"},
                                      {"host(B)", "GPU(B)"}};
    const char *what = "";
    ucs_status_t status;
    ucp_mem_h memh;
    int n, g;

    memset(m_reg, 0, sizeof(m_reg));
    bounce_test::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
        return;
    }

    env_set("UCX_TLS", "rc_gdr,ud_verbs:aux,self");
    env_set("UCX_RC_GDR_REG_METHODS", "dmabuf");
    nic_spec_set("dmabuf:off");     /* the stand-in NIC would serve it */
    status = m_ucp.open(UCP_FEATURE_RMA, &what);
    ASSERT_EQ(UCS_OK, status) << what << ": " << ucs_status_string(status);

    for (n = 0; n < 2; ++n) {
        for (g = 0; g < 2; ++g) {
            m_reg[n][g].buf  = (char*)bounce_mem_alloc(g, BOUNCE_REGION);
            m_reg[n][g].size = BOUNCE_REGION;
            m_reg[n][g].gpu  = g;
            m_reg[n][g].name = names[n][g];
            ASSERT_EQ(UCS_OK, m_ucp.mem_map(m_reg[n][g].buf, BOUNCE_REGION,
                                            &memh));
            if (n == 1) {
                status = m_ucp.rkey_unpack(memh, &m_rkey[g]);
                ASSERT_EQ(UCS_OK, status) << "ucp_ep_rkey_unpack: "
                                          << ucs_status_string(status);
            }
        }
    }
}

void bounce_ucp::TearDown()
{
    int n, g;

    m_ucp.close(); /* unmaps, before the buffers go */
    for (n = 0; n < 2; ++n) {
        for (g = 0; g < 2; ++g) {
            if (m_reg[n][g].buf != nullptr) {
                bounce_mem_free(g, m_reg[n][g].buf);
            }
        }
    }
    bounce_test::TearDown();
}

void bounce_ucp::rma_sweep(bool put, unsigned seed)
{
    /* below 64 KiB UCP uses put_short/bcopy and get_bcopy, with a host
     * buffer on this side only: UCP 1.13 packs those with memcpy */
    static const size_t sizes[] = {100, 5000, 20000, 65536 + 1,
                                   256 * 1024 + 13, 1024 * 1024 + 5};
    ucp_request_param_t rparam;
    ucs_status_t status, flushed;
    std::string diff;
    bounce_xfer_t x;
    void *local;
    uint64_t remote;
    int lg, rg;

    memset(&rparam, 0, sizeof(rparam));
    for (lg = 0; lg < 2; ++lg) {
        for (rg = 0; rg < 2; ++rg) {
            if (!lg && !rg) {
                continue;
            }
            for (size_t size : sizes) {
                if (lg && (size < 65536)) {
                    continue;
                }
                memset(&x, 0, sizeof(x));
                x.put    = put;
                x.local  = &m_reg[0][lg];
                x.remote = &m_reg[1][rg];
                x.loff   = 7;
                x.roff   = 3;
                x.length = size;
                bounce_xfer_prepare(&x, seed);
                local  = x.local->buf + x.loff;
                remote = (uintptr_t)(x.remote->buf + x.roff);
                status = m_ucp.wait(put ?
                                    ucp_put_nbx(m_ucp.eps[0], local, x.length,
                                                remote, m_rkey[rg], &rparam) :
                                    ucp_get_nbx(m_ucp.eps[0], local, x.length,
                                                remote, m_rkey[rg], &rparam));
                flushed = m_ucp.wait(ucp_ep_flush_nbx(m_ucp.eps[0], &rparam));
                diff.clear();
                UCT_TEST_EXPECT((status == UCS_OK) && (flushed == UCS_OK) &&
                                bounce_xfer_verify(&x, seed, true, &diff),
                                "UCP %s: %s, flush %s%s",
                                bounce_xfer_str(&x).c_str(),
                                ucs_status_string(status),
                                ucs_status_string(flushed), diff.c_str());
                ++seed;
            }
        }
    }
}

/* Every RMA lane of the endpoint ("put[N]:" in its info) is an rc_gdr
 * lane ("lane[N]: ... rc_gdr/..."): the data cannot have gone another way
 * (UCP's software RMA over the AM lane, say) */
bool bounce_ucp::rma_on_rc_gdr()
{
    char *text = NULL, *line, *p, *save = NULL;
    bool rc_gdr_lane[32] = {false};
    int rma_lanes = 0, lane;
    bool ok       = true;
    size_t size   = 0;
    FILE *f       = open_memstream(&text, &size);

    ucp_ep_print_info(m_ucp.eps[0], f);
    fclose(f);
    for (line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        if (((p = strstr(line, "lane[")) != NULL) &&
            (sscanf(p, "lane[%d]:", &lane) == 1) && (lane >= 0) &&
            (lane < 32)) {
            rc_gdr_lane[lane] = (strstr(line, ":rc_gdr/") != NULL);
            /* a lane for RMA bandwidth (every release prints this; the
             * protocol lines below differ between them) */
            if (strstr(line, " rma_bw#") != NULL) {
                ++rma_lanes;
                ok = ok && rc_gdr_lane[lane];
                printf("     UCP RMA lane %d: %s\n", lane,
                       rc_gdr_lane[lane] ? "rc_gdr" : "not rc_gdr");
            }
        }
        if (((p = strstr(line, " put[")) != NULL) &&
            (sscanf(p, " put[%d]:", &lane) == 1) && (lane >= 0) &&
            (lane < 32)) {
            ++rma_lanes;
            ok = ok && rc_gdr_lane[lane];
            printf("     UCP RMA lane %d: %s\n", lane,
                   rc_gdr_lane[lane] ? "rc_gdr" : "not rc_gdr");
        }
    }
    free(text);
    return ok && (rma_lanes > 0);
}


TEST_F(bounce_ucp, put_gpu_either_side)
{
    rma_sweep(true, 70);
}

TEST_F(bounce_ucp, get_gpu_either_side)
{
    rma_sweep(false, 80);
}

/* After traffic (wireup done), the endpoint's RMA lanes */
TEST_F(bounce_ucp, rma_lanes_are_rc_gdr)
{
    ucp_request_param_t rparam;
    ucs_status_t status;

    memset(&rparam, 0, sizeof(rparam));
    status = m_ucp.wait(ucp_put_nbx(m_ucp.eps[0], m_reg[0][1].buf, 65536 + 1,
                                    (uintptr_t)m_reg[1][1].buf, m_rkey[1],
                                    &rparam));
    ASSERT_EQ(UCS_OK, status) << "a put: " << ucs_status_string(status);
    ASSERT_EQ(UCS_OK, m_ucp.wait(ucp_ep_flush_nbx(m_ucp.eps[0], &rparam)));
    UCT_TEST_EXPECT(rma_on_rc_gdr(),
                    "UCP chose rc_gdr for the RMA lane (ucp_ep_print_info)");
}
