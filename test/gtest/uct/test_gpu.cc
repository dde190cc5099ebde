/*
 * GPU memory through rc_gdr, at UCT and at UCP level, checked byte for
 * byte. Buffers come from the CUDA driver through the project's shim; in the
 * soft-RoCE guest that driver is the stand-in (test/mocks), so every result
 * there is about an EMULATED GPU, and the tests say so.
 *
 *   memtypes      what uct_md_query says the md registers and detects: cuda
 *                 memory with a CUDA driver, host memory only without one
 *   gpu           any CUDA driver (a site's GPUs, or the stand-in): put/get
 *                 zcopy GPU<->GPU and GPU<->host, a re-allocated address
 *                 registered anew, a free that invalidates, am_zcopy, UCP
 *   gpu_emulated  the stand-in on the guest's devices: the lane the gate
 *                 chooses there, one direction bounced, UCP beside cuda_copy
 *   gpu_lanes     the stand-in, the lane forced by rc_gdr's knobs: bounce
 *                 registrations, performance estimates, REQUIRE=gdr
 *   gpu_flush     the stand-in's write-ordering attribute
 *                 (RC_GDR_FAKE_CUDA_WRITES_ORDERING, read when the driver
 *                 loads) decides how many reads a flush posts
 *
 * See file LICENSE for terms.
 */

#include "uct_rc_gdr_test.h"
#include "ucp_pair.h"
#include "../test_log.h"

extern "C" {
#include <uct/ib_gdr/rc_gdr_cuda.h>
#include <uct/api/v2/uct_v2.h>
#include <ucp/api/ucp.h>
}

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <list>
#include <regex>
#include <vector>


/* A registered buffer of owner with its key unpacked for peer */
struct gpu_region {
    uct_test_node_t   *owner = nullptr, *peer = nullptr;
    void              *buf   = nullptr;
    uct_mem_h         memh   = nullptr;
    uct_rkey_bundle_t rkey;
    bool              has_rkey = false;
};


/*
 * GPU memory on rc_gdr nodes, from whichever CUDA driver the shim loads:
 * skips without one. GPU buffers and registrations still held at the end of
 * a test are released before the nodes close.
 */
class gpu : public uct_rc_gdr_test {
protected:
    static constexpr size_t SIZE = 256 * 1024;

    void SetUp() override;
    void TearDown() override;

    /* Opens a and b without buffers, connected */
    void gpu_pair_open();

    void *gpu_alloc(size_t size);
    /* Frees a buffer of gpu_alloc now (cuMemFree) */
    void gpu_free(void *ptr);

    ucs_status_t region_reg(uct_test_node_t *owner, uct_test_node_t *peer,
                            void *buf, size_t size, gpu_region **region_p);
    void region_dereg(gpu_region *region);

    /* put (or get) zcopy from a of size bytes at local, to remote */
    ucs_status_t zcopy(bool put, void *local, uct_mem_h memh, uint64_t remote,
                       uct_rkey_t rkey, size_t size);

    /* The md's registrations, by lane */
    static uint64_t regs_total(const uct_test_md_stats_t &s);

    /* The checks of the UCT data path, on a and b (gpu_pair_open) */
    void check_md_memory_types();
    void check_put_get();
    void check_reallocation();
    void check_free_invalidates();

    /* am_zcopy of GPU memory from a to b; expect_bounce: registered for the
     * bounce lane (no NIC key), 0 either way, -1 not checked */
    void check_am_zcopy(int expect_bounce);

    /* UCP put/get on GPU memory between two workers of one process */
    void check_ucp_put_get();

    static bool emulated();

    /* What the test needs of the GPU's write-ordering attribute: skips the
     * test without it (the caller returns when IsSkipped()) */
    void require_writes_ordering(int ordering);

private:
    std::vector<void*>     m_gpu_bufs;
    std::list<gpu_region>  m_regions;
};


static void gpu_fill(void *gpu_buf, size_t size, unsigned seed)
{
    std::vector<unsigned char> host(size);
    size_t i;

    for (i = 0; i < size; ++i) {
        host[i] = (unsigned char)(seed * 29 + i * 7 + (i >> 10));
    }
    uct_rc_gdr_cuda_memcpy_htod(gpu_buf, host.data(), size);
}

/* Compares GPU memory with a pattern, reading it through the driver. */
static bool gpu_equals(const void *gpu_buf, size_t size, unsigned seed)
{
    std::vector<unsigned char> host(size);
    bool ok = true;
    size_t i;

    uct_rc_gdr_cuda_memcpy_dtoh(host.data(), gpu_buf, size);
    for (i = 0; i < size; ++i) {
        ok = ok && (host[i] == (unsigned char)(seed * 29 + i * 7 + (i >> 10)));
    }
    return ok;
}

bool gpu::emulated()
{
    uct_rc_gdr_cuda_driver_info_t info;

    return (uct_rc_gdr_cuda_driver_info(&info) == UCS_OK) && info.emulated;
}

void gpu::SetUp()
{
    uct_rc_gdr_cuda_ctx_h ctx;

    uct_rc_gdr_test::SetUp();
    if (IsSkipped()) {
        return;
    }

    if (uct_rc_gdr_cuda_init() != UCS_OK) {
        GTEST_SKIP() << "no CUDA driver (set RC_GDR_CUDA_LIBRARY, or"
                        " . contrib/env.sh --emulated-gpu)";
    }

    emulated_gpu_note();

    if (uct_rc_gdr_cuda_ctx_activate(0, &ctx) != UCS_OK) {
        uct_test_die("primary context of GPU 0", UCS_ERR_NO_DEVICE);
    }
    uct_test_timeout_s = 60.0;
}

void gpu::TearDown()
{
    for (gpu_region &region : m_regions) {
        if (region.has_rkey) {
            uct_rkey_release(region.peer->component, &region.rkey);
        }
        if (region.memh != nullptr) {
            uct_md_mem_dereg(region.owner->md, region.memh);
        }
    }
    m_regions.clear();

    for (void *ptr : m_gpu_bufs) {
        uct_rc_gdr_cuda_mem_free(ptr);
    }
    m_gpu_bufs.clear();
    uct_rc_gdr_test::TearDown();
}

void gpu::gpu_pair_open()
{
    a        = node_open(dev_a(), 0);
    b        = node_open(dev_b(), 0);
    nodes[0] = a;
    nodes[1] = b;
    uct_test_node_connect_pair(a, b, &wa, &wb);
}

void *gpu::gpu_alloc(size_t size)
{
    void *ptr;

    if (uct_rc_gdr_cuda_mem_alloc(size, &ptr) != UCS_OK) {
        uct_test_die("cuMemAlloc", UCS_ERR_NO_MEMORY);
    }
    m_gpu_bufs.push_back(ptr);
    return ptr;
}

void gpu::gpu_free(void *ptr)
{
    for (auto it = m_gpu_bufs.begin(); it != m_gpu_bufs.end(); ++it) {
        if (*it == ptr) {
            m_gpu_bufs.erase(it);
            uct_rc_gdr_cuda_mem_free(ptr);
            return;
        }
    }
}

ucs_status_t gpu::region_reg(uct_test_node_t *owner, uct_test_node_t *peer,
                             void *buf, size_t size, gpu_region **region_p)
{
    gpu_region *region;
    ucs_status_t status;

    m_regions.emplace_back();
    region        = &m_regions.back();
    region->owner = owner;
    region->peer  = peer;
    region->buf   = buf;
    status        = uct_md_mem_reg(owner->md, buf, size,
                                   UCT_MD_MEM_ACCESS_ALL, &region->memh);
    if (status != UCS_OK) {
        region->memh = nullptr;
        return status;
    }

    std::vector<char> packed(owner->md_attr.rkey_packed_size);
    uct_md_mkey_pack(owner->md, region->memh, packed.data());
    status = uct_rkey_unpack(peer->component, packed.data(), &region->rkey);
    region->has_rkey = (status == UCS_OK);
    *region_p        = region;
    return status;
}

void gpu::region_dereg(gpu_region *region)
{
    if (region->has_rkey) {
        uct_rkey_release(region->peer->component, &region->rkey);
        region->has_rkey = false;
    }
    if (region->memh != nullptr) {
        uct_md_mem_dereg(region->owner->md, region->memh);
        region->memh = nullptr;
    }
}

ucs_status_t gpu::zcopy(bool put, void *local, uct_mem_h memh,
                        uint64_t remote, uct_rkey_t rkey, size_t size)
{
    uct_test_comp_t comp;
    ucs_status_t status;
    uct_iov_t iov;

    uct_test_iov_init(&iov, local, size, memh);
    uct_test_comp_init(&comp);
    status = UCT_TEST_RETRY(nodes, 2,
                            put ? uct_ep_put_zcopy(a->ep, &iov, 1, remote,
                                                   rkey, &comp.comp) :
                                  uct_ep_get_zcopy(a->ep, &iov, 1, remote,
                                                   rkey, &comp.comp));
    return uct_test_comp_wait(nodes, 2, status, &comp);
}

uint64_t gpu::regs_total(const uct_test_md_stats_t &s)
{
    return s.peermem_regs + s.dmabuf_regs + s.bounce_regs;
}

void gpu::require_writes_ordering(int ordering)
{
    uct_rc_gdr_cuda_dev_attr_t attr;

    if ((uct_rc_gdr_cuda_device_attr_query(0, &attr) != UCS_OK) ||
        !(attr.valid_mask & UCT_RC_GDR_CUDA_DEV_ATTR_WRITES_ORDERING)) {
        GTEST_SKIP() << "GPU 0 reports no write-ordering attribute";
    }
    if (attr.writes_ordering != ordering) {
        GTEST_SKIP() << "needs a GPU whose write ordering is "
                     << uct_rc_gdr_cuda_writes_ordering_str(ordering)
                     << " (the stand-in's RC_GDR_FAKE_CUDA_WRITES_ORDERING="
                     << ordering << " at process start); GPU 0's is "
                     << uct_rc_gdr_cuda_writes_ordering_str(
                                attr.writes_ordering);
    }
}


/* ------------------------------------------------------- UCT checks -- */

void gpu::check_md_memory_types()
{
    std::vector<char> host_buf(SIZE);
    ucs_memory_type_t mem_type;
    uct_md_attr_t attr;
    ucs_status_t status;
    void *gpu_a;

    uct_md_query(a->md, &attr);
    UCT_TEST_EXPECT((attr.cap.reg_mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) &&
                    (attr.cap.detect_mem_types &
                     UCS_BIT(UCS_MEMORY_TYPE_CUDA)),
                    "uct_md_query: rc_gdr registers and detects cuda memory "
                    "(reg 0x%lx detect 0x%lx)",
                    (unsigned long)attr.cap.reg_mem_types,
                    (unsigned long)attr.cap.detect_mem_types);

    gpu_a  = gpu_alloc(SIZE);
    status = uct_md_detect_memory_type(a->md, gpu_a, SIZE, &mem_type);
    UCT_TEST_EXPECT((status == UCS_OK) && (mem_type == UCS_MEMORY_TYPE_CUDA),
                    "cuda pointer detected as cuda memory (%s)",
                    ucs_status_string(status));
    status = uct_md_detect_memory_type(a->md, host_buf.data(), SIZE,
                                       &mem_type);
    UCT_TEST_EXPECT(status != UCS_OK,
                    "host pointer not claimed as cuda memory");
    gpu_free(gpu_a);
}

void gpu::check_put_get()
{
    gpu_region *src_gpu, *dst_gpu, *host;
    uct_test_md_stats_t before, after;
    std::vector<char> host_buf(SIZE, 0), tmp(SIZE / 2);
    void *gpu_a, *gpu_b;
    ucs_status_t status;

    gpu_a  = gpu_alloc(SIZE);
    gpu_b  = gpu_alloc(SIZE);
    before = uct_test_md_stats(a->md);
    ASSERT_EQ(UCS_OK, region_reg(a, b, gpu_a, SIZE, &src_gpu))
        << "registration of GPU memory on " << dev_a();
    ASSERT_EQ(UCS_OK, region_reg(b, a, gpu_b, SIZE, &dst_gpu))
        << "registration of GPU memory on " << dev_b();
    ASSERT_EQ(UCS_OK, region_reg(b, a, host_buf.data(), SIZE, &host))
        << "registration of host memory on " << dev_b();
    after = uct_test_md_stats(a->md);
    /* what a site's validation reads: the lane that really registered */
    printf("lane of GPU memory on %s: peermem %lu, dmabuf %lu, bounce %lu "
           "new registrations\n", dev_a(),
           (unsigned long)(after.peermem_regs - before.peermem_regs),
           (unsigned long)(after.dmabuf_regs - before.dmabuf_regs),
           (unsigned long)(after.bounce_regs - before.bounce_regs));

    gpu_fill(gpu_a, SIZE, 1);
    status = zcopy(true, gpu_a, src_gpu->memh, (uintptr_t)gpu_b,
                   dst_gpu->rkey.rkey, SIZE);
    UCT_TEST_EXPECT((status == UCS_OK) && gpu_equals(gpu_b, SIZE, 1),
                    "put_zcopy GPU -> GPU, %zu bytes (%s)", SIZE,
                    ucs_status_string(status));

    gpu_fill(gpu_b, SIZE, 2);
    status = zcopy(false, gpu_a, src_gpu->memh, (uintptr_t)gpu_b,
                   dst_gpu->rkey.rkey, SIZE);
    UCT_TEST_EXPECT((status == UCS_OK) && gpu_equals(gpu_a, SIZE, 2),
                    "get_zcopy GPU <- GPU (%s)", ucs_status_string(status));

    gpu_fill(gpu_a, SIZE, 3);
    status = zcopy(true, (char*)gpu_a + 4096 + 3, src_gpu->memh,
                   (uintptr_t)host_buf.data() + 5, host->rkey.rkey, SIZE / 2);
    uct_rc_gdr_cuda_memcpy_dtoh(tmp.data(), (char*)gpu_a + 4096 + 3,
                                SIZE / 2);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    !memcmp(tmp.data(), host_buf.data() + 5, SIZE / 2),
                    "put_zcopy GPU (interior, unaligned) -> host (%s)",
                    ucs_status_string(status));

    region_dereg(host);
    region_dereg(dst_gpu);
    region_dereg(src_gpu);
    gpu_free(gpu_b);
    gpu_free(gpu_a);
}

/* A freed allocation's address handed out again: a new buffer ID, so the
 * cache must register it anew instead of reusing the old MR. */
void gpu::check_reallocation()
{
    gpu_region *src_gpu, *dst_gpu;
    uct_test_md_stats_t before, after;
    void *gpu_a, *gpu_b, *again;
    ucs_status_t status;

    gpu_a = gpu_alloc(SIZE);
    gpu_b = gpu_alloc(SIZE);
    ASSERT_EQ(UCS_OK, region_reg(a, b, gpu_a, SIZE, &src_gpu));
    ASSERT_EQ(UCS_OK, region_reg(b, a, gpu_b, SIZE, &dst_gpu));

    region_dereg(src_gpu);
    gpu_free(gpu_a);
    again  = gpu_alloc(SIZE);
    before = uct_test_md_stats(a->md);
    status = region_reg(a, b, again, SIZE, &src_gpu);
    after  = uct_test_md_stats(a->md);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    (regs_total(after) == regs_total(before) + 1) &&
                    (after.cache_hits == before.cache_hits),
                    "re-allocation at %s address is registered anew (no "
                    "cache hit; %" PRIu64 " new registrations, %" PRIu64
                    " hits)", (again == gpu_a) ? "the same" : "another",
                    regs_total(after) - regs_total(before),
                    after.cache_hits - before.cache_hits);
    ASSERT_EQ(UCS_OK, status);

    gpu_fill(again, SIZE, 4);
    status = zcopy(true, again, src_gpu->memh, (uintptr_t)gpu_b,
                   dst_gpu->rkey.rkey, SIZE);
    UCT_TEST_EXPECT((status == UCS_OK) && gpu_equals(gpu_b, SIZE, 4),
                    "put_zcopy from the re-allocated buffer (%s)",
                    ucs_status_string(status));

    region_dereg(src_gpu);
    region_dereg(dst_gpu);
    gpu_free(again);
    gpu_free(gpu_b);
}

/* Freed while still registered: the free hook invalidates the entry before
 * the driver releases the memory; the late deregistration only drops the
 * reference. */
void gpu::check_free_invalidates()
{
    uct_test_md_stats_t before, after;
    gpu_region *region;
    uct_mem_h memh;
    void *gpu_a;

    gpu_a = gpu_alloc(SIZE);
    ASSERT_EQ(UCS_OK, region_reg(a, b, gpu_a, SIZE, &region));
    memh         = region->memh;
    region->memh = nullptr;   /* deregistered by hand below */

    before = uct_test_md_stats(a->md);
    gpu_free(gpu_a);
    after  = uct_test_md_stats(a->md);
    UCT_TEST_EXPECT(after.invalidations == before.invalidations + 1,
                    "cuMemFree of registered GPU memory invalidates its "
                    "entry at once (%lu -> %lu)",
                    (unsigned long)before.invalidations,
                    (unsigned long)after.invalidations);
    EXPECT_EQ(UCS_OK, uct_md_mem_dereg(a->md, memh))
        << "deregistration after the free succeeds";
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, uct_md_mem_dereg(a->md, memh))
        << "a second deregistration is refused (UCS_ERR_INVALID_PARAM)";
    region_dereg(region);
}


/* am_zcopy from GPU memory: whatever its lane, the bytes arrive (memory
 * registered for the bounce lane has no NIC key: the send stages it) */
#define GPU_AM_ID          5
#define GPU_AM_ZCOPY_SIZE  1000

struct gpu_am_rx {
    unsigned char data[GPU_AM_ZCOPY_SIZE + 64];
    size_t        length;
};

static ucs_status_t gpu_am_zcopy_handler(void *arg, void *data, size_t length,
                                         unsigned flags)
{
    gpu_am_rx *rx = static_cast<gpu_am_rx*>(arg);

    rx->length = (length < sizeof(rx->data)) ? length : sizeof(rx->data);
    memcpy(rx->data, data, rx->length);
    return UCS_OK;
}

void gpu::check_am_zcopy(int expect_bounce)
{
    uint64_t header = 0x5eed;
    unsigned char expect[GPU_AM_ZCOPY_SIZE];
    uct_test_md_stats_t before, after;
    uct_test_comp_t comp;
    ucs_status_t status;
    gpu_am_rx rx;
    uct_mem_h memh;
    uct_iov_t iov;
    void *gpu_buf;
    int i, j;

    a        = node_open(dev_a(), 0);
    b        = node_open(dev_b(), 0);
    nodes[0] = a;
    nodes[1] = b;
    uct_iface_set_am_handler(b->iface, GPU_AM_ID, gpu_am_zcopy_handler, &rx,
                             0);
    uct_test_node_connect_pair(a, b, &wa, &wb);

    gpu_buf = gpu_alloc(GPU_AM_ZCOPY_SIZE);
    gpu_fill(gpu_buf, GPU_AM_ZCOPY_SIZE, 11);
    uct_rc_gdr_cuda_memcpy_dtoh(expect, gpu_buf, GPU_AM_ZCOPY_SIZE);
    memset(&before, 0, sizeof(before));
    memset(&after, 0, sizeof(after));
    uct_test_md_stats_query(a->md, &before);
    status = uct_md_mem_reg(a->md, gpu_buf, GPU_AM_ZCOPY_SIZE,
                            UCT_MD_MEM_ACCESS_ALL, &memh);
    uct_test_md_stats_query(a->md, &after);
    printf("am: GPU memory registered: peermem %lu dmabuf %lu bounce %lu\n",
           (unsigned long)(after.peermem_regs - before.peermem_regs),
           (unsigned long)(after.dmabuf_regs - before.dmabuf_regs),
           (unsigned long)(after.bounce_regs - before.bounce_regs));
    ASSERT_EQ(UCS_OK, status) << "am: GPU memory registered";
    if (expect_bounce >= 0) {
        UCT_TEST_EXPECT(after.bounce_regs - before.bounce_regs ==
                        (uint64_t)expect_bounce,
                        "am: %d bounce registration(s) expected, %lu made",
                        expect_bounce,
                        (unsigned long)(after.bounce_regs -
                                        before.bounce_regs));
    }

    for (i = 0; i < 2; ++i) {
        uct_test_iov_init(&iov, gpu_buf, GPU_AM_ZCOPY_SIZE, memh);
        uct_test_comp_init(&comp);
        rx.length = 0;
        status    = UCT_TEST_RETRY(nodes, 2,
                                   uct_ep_am_zcopy(a->ep, GPU_AM_ID, &header,
                                                   sizeof(header), &iov, 1, 0,
                                                   &comp.comp));
        status    = uct_test_comp_wait(nodes, 2, status, &comp);
        for (j = 0; (status == UCS_OK) && (rx.length == 0) && (j < 1000000);
             ++j) {
            uct_test_progress(nodes, 2);
        }
        UCT_TEST_EXPECT((status == UCS_OK) && !a->ep_error &&
                        (rx.length == sizeof(header) + GPU_AM_ZCOPY_SIZE) &&
                        !memcmp(rx.data, &header, sizeof(header)) &&
                        !memcmp(rx.data + sizeof(header), expect,
                                GPU_AM_ZCOPY_SIZE),
                        "am: am_zcopy %d of %d bytes of GPU memory arrives "
                        "byte-exact (%s, %zu bytes)", i, GPU_AM_ZCOPY_SIZE,
                        ucs_status_string(status), rx.length);
    }

    uct_md_mem_dereg(a->md, memh);
    /* no more messages into rx, which is on this stack */
    uct_iface_set_am_handler(b->iface, GPU_AM_ID, NULL, NULL, 0);
    gpu_free(gpu_buf);
}


/* ------------------------------------------------------------- UCP -- */

void gpu::check_ucp_put_get()
{
    ucp_request_param_t rparam;
    uct_rc_gdr_ucp_pair pair;
    const char *what = "";
    void *gpu_buf[2];
    ucp_mem_h memh[2];
    ucp_rkey_h rkey;
    ucs_status_t status;
    int i;

    rparam.op_attr_mask = 0;
    status = pair.open(UCP_FEATURE_RMA, &what);
    ASSERT_EQ(UCS_OK, status) << what << ": " << ucs_status_string(status);

    for (i = 0; i < 2; ++i) {
        gpu_buf[i] = gpu_alloc(SIZE);
        status     = pair.mem_map(gpu_buf[i], SIZE, &memh[i]);
        ASSERT_EQ(UCS_OK, status) << "ucp_mem_map: "
                                  << ucs_status_string(status);
    }

    status = pair.rkey_unpack(memh[1], &rkey);
    ASSERT_EQ(UCS_OK, status) << "ucp_ep_rkey_unpack: "
                              << ucs_status_string(status);

    gpu_fill(gpu_buf[0], SIZE, 5);
    status = pair.wait(ucp_put_nbx(pair.eps[0], gpu_buf[0], SIZE,
                                   (uintptr_t)gpu_buf[1], rkey, &rparam));
    if (status == UCS_OK) {
        status = pair.wait(ucp_ep_flush_nbx(pair.eps[0], &rparam));
    }
    UCT_TEST_EXPECT((status == UCS_OK) && gpu_equals(gpu_buf[1], SIZE, 5),
                    "UCP put GPU -> GPU, %zu bytes (%s)", SIZE,
                    ucs_status_string(status));

    gpu_fill(gpu_buf[1], SIZE, 6);
    status = pair.wait(ucp_get_nbx(pair.eps[0], gpu_buf[0], SIZE,
                                   (uintptr_t)gpu_buf[1], rkey, &rparam));
    if (status == UCS_OK) {
        status = pair.wait(ucp_ep_flush_nbx(pair.eps[0], &rparam));
    }
    UCT_TEST_EXPECT((status == UCS_OK) && gpu_equals(gpu_buf[0], SIZE, 6),
                    "UCP get GPU <- GPU, %zu bytes (%s)", SIZE,
                    ucs_status_string(status));
    /* pair's destructor unmaps before the buffers are freed at TearDown */
}


/* ------------------------------------------------------------- gpu -- */

TEST_F(gpu, uct_md_registers_and_detects_cuda)
{
    gpu_pair_open();
    check_md_memory_types();
}

TEST_F(gpu, uct_put_get_zcopy_byte_exact)
{
    gpu_pair_open();
    check_put_get();
}

TEST_F(gpu, uct_reallocation_registered_anew)
{
    gpu_pair_open();
    check_reallocation();
}

TEST_F(gpu, uct_free_invalidates_registration)
{
    gpu_pair_open();
    check_free_invalidates();
}

TEST_F(gpu, am_zcopy_byte_exact)
{
    check_am_zcopy(-1);
}

TEST_F(gpu, ucp_put_get)
{
    env_set("UCX_TLS", "rc_gdr,ud_verbs:aux,self");
    check_ucp_put_get();
}


/* ---------------------------------------------------- gpu_emulated -- */

/* The stand-in CUDA driver on the guest's devices */
class gpu_emulated : public gpu {
protected:
    void SetUp() override
    {
        gpu::SetUp();
        if (!IsSkipped() && !emulated()) {
            GTEST_SKIP() << "needs the stand-in CUDA driver (test/mocks:"
                            " . contrib/env.sh --emulated-gpu); this one is"
                            " a real driver";
        }
        /* these tests stand on rxe's answers: no DMA-BUF; the stand-in NIC
         * serves it unless told otherwise (gdr_lane_by_dmabuf takes it) */
        nic_spec_set("dmabuf:off");
    }

    /* One registration of GPU memory on a, by DMA-BUF or by peermem as
     * named, none by the other mechanism or the bounce lane */
    void expect_one_gpu_registration_by(bool dmabuf)
    {
        uct_test_md_stats_t before, after;
        unsigned long d_dmabuf, d_peermem, d_bounce;
        gpu_region *region;
        void *gpu_buf = gpu_alloc(SIZE);

        before = uct_test_md_stats(a->md);
        ASSERT_EQ(UCS_OK, region_reg(a, b, gpu_buf, SIZE, &region));
        after     = uct_test_md_stats(a->md);
        d_dmabuf  = after.dmabuf_regs - before.dmabuf_regs;
        d_peermem = after.peermem_regs - before.peermem_regs;
        d_bounce  = after.bounce_regs - before.bounce_regs;
        UCT_TEST_EXPECT((d_dmabuf == (dmabuf ? 1u : 0u)) &&
                        (d_peermem == (dmabuf ? 0u : 1u)) && (d_bounce == 0),
                        "one GPU registration by %s, none by the others "
                        "(dmabuf %lu, peermem %lu, bounce %lu)",
                        dmabuf ? "dmabuf" : "peermem", d_dmabuf, d_peermem,
                        d_bounce);
    }
};

/* rxe refuses DMA-BUF, a test registration proves peermem: GPU memory is
 * registered by peermem, the GDR lane */
TEST_F(gpu_emulated, gdr_lane_by_peermem)
{
    gpu_pair_open();
    expect_one_gpu_registration_by(false);
}

/* A NIC that serves DMA-BUF (the stand-in NIC: the fd the driver exported,
 * reached through the driver): GPU memory is registered by DMA-BUF, the
 * preferred mechanism, the GDR lane */
TEST_F(gpu_emulated, gdr_lane_by_dmabuf)
{
    if (!nic_spec_set("dmabuf:on")) {
        GTEST_SKIP() << "needs a NIC with DMA-BUF: the stand-in NIC"
                        " (test/tnic); rxe has none";
    }
    gpu_pair_open();
    expect_one_gpu_registration_by(true);
}

/* A CUDA build of UCX: UCP with cuda_copy among its transports for its own
 * copies moves "GPU" memory over rc_gdr: the module's closing line counts
 * the work requests */
TEST_F(gpu_emulated, ucp_put_get_beside_cuda_copy)
{
    uct_component_h *components;
    uct_component_attr_t attr;
    unsigned i, count;
    bool cuda_copy = false;

    ASSERT_EQ(UCS_OK, uct_query_components(&components, &count));
    for (i = 0; i < count; ++i) {
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        cuda_copy       = cuda_copy ||
                          ((uct_component_query(components[i], &attr) ==
                            UCS_OK) && !strcmp(attr.name, "cuda_cpy"));
    }
    uct_release_component_list(components);
    if (!cuda_copy) {
        GTEST_SKIP() << "this UCX has no cuda_copy (a CUDA build of UCX has)";
    }

    env_set("UCX_TLS", "rc_gdr,ud_verbs:aux,self,cuda_copy");
    {
        log_capture capture(UCS_LOG_LEVEL_INFO);

        check_ucp_put_get();
    }

    std::regex closed("rc_gdr: .*:[0-9]+ closed: [1-9][0-9]* work requests");
    bool found = false;
    for (const std::string &line : captured_log) {
        found = found || std::regex_search(line, closed);
    }
    EXPECT_TRUE(found) << "the module logs 'rc_gdr: DEV:PORT closed: N work "
                          "requests' with N > 0 (" << captured_log.size()
                       << " lines logged)";
}

/* The --pcie-pairs guest: the stand-in driver's GPUs placed at the guest's
 * PCI functions, a on rxe0 and b on rxe1 */
static bool placed_pairs()
{
    uct_rc_gdr_cuda_driver_info_t info;
    int count;

    return (uct_rc_gdr_cuda_driver_info(&info) == UCS_OK) && info.placed &&
           (uct_rc_gdr_cuda_device_count(&count) == UCS_OK) && (count >= 2) &&
           !strcmp(uct_rc_gdr_test::dev_a(), "rxe0:1") &&
           !strcmp(uct_rc_gdr_test::dev_b(), "rxe1:1");
}

/*
 * The --pcie-pairs guest (contrib/rxe-vm.sh): GPU<i> stands beside rxe<i>,
 * the stand-in driver placed at the guest's PCI functions
 * (RC_GDR_FAKE_CUDA_PLACED), a and b on rxe0 and rxe1. In one process, one
 * endpoint: each GPU's memory registered on its near NIC takes the NIC lane,
 * on the far one the bounce lane, and a's puts into it follow the key.
 */
TEST_F(gpu_emulated, placed_gpus_lane_per_nic_in_one_process)
{
    std::vector<char> host(SIZE);
    uct_test_iface_stats_t s0, s1;
    uct_rc_gdr_cuda_ctx_h ctx;
    gpu_region *near_reg, *far_reg;
    uct_mem_h host_memh;

    if (!placed_pairs()) {
        GTEST_SKIP() << "needs the --pcie-pairs guest: two placed GPUs, "
                        "RC_GDR_DEV_A=rxe0:1 RC_GDR_DEV_B=rxe1:1";
    }
    gpu_pair_open();
    ASSERT_EQ(UCS_OK, uct_md_mem_reg(a->md, host.data(), SIZE,
                                     UCT_MD_MEM_ACCESS_ALL, &host_memh));

    for (int g = 0; g < 2; ++g) {
        /* rxe<g> is GPU<g>'s near NIC: a's for GPU0, b's for GPU1 */
        uct_test_node_t *near_node = (g == 0) ? a : b;
        uct_test_node_t *far_node  = (g == 0) ? b : a;
        const char *near_dev       = (g == 0) ? dev_a() : dev_b();
        const char *far_dev        = (g == 0) ? dev_b() : dev_a();

        ASSERT_EQ(UCS_OK, uct_rc_gdr_cuda_ctx_activate(g, &ctx));
        void *buf = gpu_alloc(SIZE);
        ASSERT_EQ(UCS_OK, uct_rc_gdr_cuda_ctx_activate(0, &ctx));

        /* registered on owner: the NIC lane near, the bounce lane far */
        auto reg_on = [&](uct_test_node_t *owner, uct_test_node_t *peer,
                          const char *dev, bool bounce) {
            gpu_region *region = nullptr;
            uct_test_md_stats_t before = uct_test_md_stats(owner->md), after;
            EXPECT_EQ(UCS_OK, region_reg(owner, peer, buf, SIZE, &region));
            after = uct_test_md_stats(owner->md);
            UCT_TEST_EXPECT((after.peermem_regs - before.peermem_regs ==
                             (bounce ? 0u : 1u)) &&
                            (after.bounce_regs - before.bounce_regs ==
                             (bounce ? 1u : 0u)),
                            "GPU%d on its %s NIC %s: the %s lane (peermem "
                            "+%lu, bounce +%lu)", g, bounce ? "far" : "near",
                            dev, bounce ? "bounce" : "NIC",
                            (unsigned long)(after.peermem_regs -
                                            before.peermem_regs),
                            (unsigned long)(after.bounce_regs -
                                            before.bounce_regs));
            return region;
        };
        near_reg = reg_on(near_node, far_node, near_dev, false);
        far_reg  = reg_on(far_node, near_node, far_dev, true);
        ASSERT_TRUE((near_reg != nullptr) && (far_reg != nullptr));

        /* a's put into the GPU through b's key: bounced where b is far */
        gpu_region *via_b = (g == 0) ? far_reg : near_reg;
        memset(host.data(), 0x40 + g, SIZE);
        s0 = uct_test_iface_stats(a->iface);
        ASSERT_EQ(UCS_OK, zcopy(true, host.data(), host_memh,
                                (uintptr_t)buf, via_b->rkey.rkey, SIZE));
        ASSERT_EQ(UCS_OK, uct_test_ep_flush(nodes, 2, a->ep));
        s1 = uct_test_iface_stats(a->iface);
        std::vector<char> back(SIZE);
        uct_rc_gdr_cuda_memcpy_dtoh(back.data(), buf, SIZE);
        printf("GPU%d: put by %s's key: %s, %lu bounce transfer(s), %s "
               "(EMULATED GPU placed at its PCI function)\n", g, dev_b(),
               (g == 0) ? "far" : "near",
               (unsigned long)(s1.bounce_xfers - s0.bounce_xfers),
               memcmp(back.data(), host.data(), SIZE) ? "DATA DIFFERS" :
                                                        "byte-exact");
        UCT_TEST_EXPECT(!memcmp(back.data(), host.data(), SIZE) &&
                        ((s1.bounce_xfers - s0.bounce_xfers) ==
                         ((g == 0) ? 1u : 0u)),
                        "put into GPU%d by %s's key: byte-exact, %s (bounce "
                        "transfers +%lu)", g, dev_b(),
                        (g == 0) ? "bounced (far)" : "by the NIC (near)",
                        (unsigned long)(s1.bounce_xfers - s0.bounce_xfers));
        region_dereg(near_reg);
        region_dereg(far_reg);
    }
    uct_md_mem_dereg(a->md, host_memh);
}

/*
 * The --pcie-pairs guest, through UCP: two workers of one process on both
 * NICs; for each GPU a tagged message (rendezvous), a put and a get between
 * two buffers of that GPU, byte-exact; the bytes each NIC carried are read
 * from rc_gdr's counters of every interface UCP opened there
 * (uct_rc_gdr_dev_stats_query). UCP ranks rendezvous lanes by the distance
 * between the memory's and the NIC's system devices: a GPU's tagged
 * message must put most of its bytes on its own NIC (1.13; 1.22 splits
 * evenly here: at least half). Where puts and gets go is printed, not
 * judged: UCP keeps an endpoint's one RMA lane.
 */
TEST_F(gpu_emulated, placed_gpus_ucp_bytes_per_nic)
{
    static const size_t length = 4u << 20;
    ucp_request_param_t rparam;
    uct_rc_gdr_ucp_pair pair;
    uct_rc_gdr_cuda_ctx_h ctx;
    const char *what = "";
    std::vector<std::string> nics;
    std::string nic_list;
    ucp_mem_h memh[2];
    ucp_rkey_h rkey;
    ucs_status_t status;
    void *buf[2];

    if (!placed_pairs()) {
        GTEST_SKIP() << "needs the --pcie-pairs guest: two placed GPUs, "
                        "RC_GDR_DEV_A=rxe0:1 RC_GDR_DEV_B=rxe1:1";
    }

    /* The NICs UCP may use: rxe<g>... stands beside GPU<g> (rxe-vm.sh
     * names a pair's second NIC rxe<g>b) */
    const char *env = getenv("RC_GDR_PCIE_NICS");
    nic_list        = (env != NULL) ? env : "rxe0:1,rxe1:1";
    for (size_t pos = 0; pos <= nic_list.size();) {
        size_t comma = nic_list.find(',', pos);
        if (comma == std::string::npos) {
            comma = nic_list.size();
        }
        nics.push_back(nic_list.substr(pos, comma - pos));
        pos = comma + 1;
    }
    auto near_gpu = [](const std::string &nic) { return nic[3] - '0'; };

    env_set("UCX_TLS", "rc_gdr,ud_verbs:aux,self");
    env_set("UCX_NET_DEVICES", nic_list.c_str());
    status = pair.open(UCP_FEATURE_TAG | UCP_FEATURE_RMA, &what);
    ASSERT_EQ(UCS_OK, status) << what << ": " << ucs_status_string(status);
    rparam.op_attr_mask = 0;

    auto dev_bytes = [&](const std::string &nic) {
        uct_test_iface_stats_t s;
        EXPECT_EQ(UCS_OK, uct_test_dev_stats(nic.c_str(), &s)) << nic;
        return s.rma_zcopy_bytes;
    };

    unsigned major, minor, release;
    ucp_get_version(&major, &minor, &release);
    /* 1.13 weighs its rendezvous lanes by distance (58:42 with one NIC
     * per GPU); 1.22 was seen to split them evenly: never more on the far
     * NICs, and on 1.13 more on the near ones, every near one used */
    bool ranks = (major == 1) && (minor == 13);

    for (int g = 0; g < 2; ++g) {
        ASSERT_EQ(UCS_OK, uct_rc_gdr_cuda_ctx_activate(g, &ctx));
        for (int i = 0; i < 2; ++i) {
            buf[i] = gpu_alloc(length);
            ASSERT_EQ(UCS_OK, pair.mem_map(buf[i], length, &memh[i]));
        }
        ASSERT_EQ(UCS_OK, uct_rc_gdr_cuda_ctx_activate(0, &ctx));
        ASSERT_EQ(UCS_OK, pair.rkey_unpack(memh[1], &rkey));

        const char *ops[3] = {"tag", "put", "get"};
        for (int op = 0; op < 3; ++op) {
            std::vector<uint64_t> moved;
            uint64_t near = 0, far = 0;
            bool every_near_used = true;
            std::string split;
            void *sreq, *rreq;

            for (const std::string &nic : nics) {
                moved.push_back(dev_bytes(nic));
            }
            gpu_fill(buf[op == 2 ? 1 : 0], length, 10 * g + op);
            if (op == 0) {
                rreq   = ucp_tag_recv_nbx(pair.workers[1], buf[1], length,
                                          0x77, (ucp_tag_t)-1, &rparam);
                sreq   = ucp_tag_send_nbx(pair.eps[0], buf[0], length, 0x77,
                                          &rparam);
                status = pair.wait(sreq);
                if (status == UCS_OK) {
                    status = pair.wait(rreq);
                }
            } else {
                sreq   = (op == 1) ?
                         ucp_put_nbx(pair.eps[0], buf[0], length,
                                     (uintptr_t)buf[1], rkey, &rparam) :
                         ucp_get_nbx(pair.eps[0], buf[0], length,
                                     (uintptr_t)buf[1], rkey, &rparam);
                status = pair.wait(sreq);
                if (status == UCS_OK) {
                    status = pair.wait(ucp_ep_flush_nbx(pair.eps[0],
                                                        &rparam));
                }
            }
            bool exact = gpu_equals(buf[op == 2 ? 0 : 1], length,
                                    10 * g + op);
            for (size_t n = 0; n < nics.size(); ++n) {
                moved[n]  = dev_bytes(nics[n]) - moved[n];
                split    += uct_test_str(" %s %" PRIu64 " B,",
                                         nics[n].c_str(), moved[n]);
                if (near_gpu(nics[n]) == g) {
                    near           += moved[n];
                    every_near_used = every_near_used && (moved[n] > 0);
                } else {
                    far += moved[n];
                }
            }
            printf("GPU%d %s %zu B:%s (zero-copy bytes from rc_gdr's "
                   "counters), %s (EMULATED GPU placed at its PCI "
                   "function)\n", g, ops[op], length, split.c_str(),
                   exact ? "byte-exact" : "DATA DIFFERS");
            UCT_TEST_EXPECT((status == UCS_OK) && exact,
                            "UCP %s on GPU%d, %zu bytes (%s)", ops[op], g,
                            length, ucs_status_string(status));
            if (op != 0) {
                continue;
            }
            printf("GPU%d tag: UCP %u.%u %s%s\n", g, major, minor,
                   (near > far) ? "favours its own NICs" :
                   (near == far) ? "splits evenly" : "favours the FAR NICs",
                   every_near_used ? ", every near NIC used" : "");
            UCT_TEST_EXPECT(ranks ? ((near > far) && every_near_used) :
                                    (near >= far),
                            "GPU%d's rendezvous %s on its own NICs%s: %"
                            PRIu64 " B there, %" PRIu64 " B on the far "
                            "ones", g, ranks ? "mostly" : "at least half",
                            ranks ? ", each used" : "", near, far);
        }
    }
    /* pair's destructor unmaps before the buffers are freed at TearDown */
}

/* One direction on the GDR lane, the other bounced: the target's policy
 * travels in its rkey (NO_READ / NO_WRITE), and peers bounce accordingly,
 * the flush read still reaching GPUs that need it. (NIC_READS_GPU=no on a
 * GPU that needs the flush read would bounce writes too: the read is what
 * the NIC may not do. An ordering GPU keeps one direction on GDR.) */
TEST_F(gpu_emulated, uct_nic_reads_gpu_off_on_ordering_gpu)
{
    require_writes_ordering(UCT_RC_GDR_CUDA_WRITES_ORDERING_OWNER);
    if (IsSkipped()) {
        return; /* GTEST_SKIP() in a helper returns from the helper */
    }
    env_set("UCX_RC_GDR_NIC_READS_GPU", "no");
    gpu_pair_open();
    check_md_memory_types();
    check_put_get();
    check_reallocation();
    check_free_invalidates();
}

TEST_F(gpu_emulated, uct_nic_writes_gpu_off)
{
    env_set("UCX_RC_GDR_NIC_WRITES_GPU", "no");
    gpu_pair_open();
    check_md_memory_types();
    check_put_get();
    check_reallocation();
    check_free_invalidates();
}

TEST_F(gpu_emulated, ucp_nic_reads_gpu_off_on_ordering_gpu)
{
    require_writes_ordering(UCT_RC_GDR_CUDA_WRITES_ORDERING_OWNER);
    if (IsSkipped()) {
        return; /* GTEST_SKIP() in a helper returns from the helper */
    }
    env_set("UCX_RC_GDR_NIC_READS_GPU", "no");
    env_set("UCX_TLS", "rc_gdr,ud_verbs:aux,self");
    check_ucp_put_get();
}

TEST_F(gpu_emulated, ucp_nic_reads_gpu_off_flush_always)
{
    env_set("UCX_RC_GDR_NIC_READS_GPU", "no");
    env_set("UCX_RC_GDR_FLUSH", "always");
    env_set("UCX_TLS", "rc_gdr,ud_verbs:aux,self");
    check_ucp_put_get();
}


/* ------------------------------------------------------- gpu_lanes -- */

/* The lane forced by rc_gdr's knobs, on the stand-in and rxe */
class gpu_lanes : public gpu_emulated {
protected:
    /* put_zcopy latency estimate of a's iface for GPU and host memory */
    void estimate(double *host_latency_p, double *gpu_latency_p);
};

void gpu_lanes::estimate(double *host_latency_p, double *gpu_latency_p)
{
    uct_perf_attr_t host, gpu_attr;

    memset(&host, 0, sizeof(host));
    host.field_mask         = UCT_PERF_ATTR_FIELD_OPERATION |
                              UCT_PERF_ATTR_FIELD_LOCAL_MEMORY_TYPE |
                              UCT_PERF_ATTR_FIELD_REMOTE_MEMORY_TYPE |
                              UCT_PERF_ATTR_FIELD_BANDWIDTH |
                              UCT_PERF_ATTR_FIELD_LATENCY;
    host.operation          = UCT_EP_OP_PUT_ZCOPY;
    host.local_memory_type  = UCS_MEMORY_TYPE_HOST;
    host.remote_memory_type = UCS_MEMORY_TYPE_HOST;
    gpu_attr                   = host;
    gpu_attr.local_memory_type = UCS_MEMORY_TYPE_CUDA;

    a = node_open(dev_a(), 0);
    ASSERT_EQ(UCS_OK, uct_iface_estimate_perf(a->iface, &host));
    ASSERT_EQ(UCS_OK, uct_iface_estimate_perf(a->iface, &gpu_attr));
    printf("put_zcopy estimate: host latency %.2f us, GPU latency %.2f us\n",
           host.latency.c * 1e6, gpu_attr.latency.c * 1e6);
    *host_latency_p = host.latency.c;
    *gpu_latency_p  = gpu_attr.latency.c;
}

/* No mechanism left (DMA-BUF only, which rxe refuses): a bounce
 * registration, which succeeds without any NIC registration. */
TEST_F(gpu_lanes, bounce_registration_when_dmabuf_only)
{
    uct_test_md_stats_t s;
    uct_mem_h memh;
    ucs_status_t status;
    void *gpu_buf;

    env_set("UCX_RC_GDR_REG_METHODS", "dmabuf");
    a       = node_open(dev_a(), 0);
    gpu_buf = gpu_alloc(SIZE);
    status  = uct_md_mem_reg(a->md, gpu_buf, SIZE, UCT_MD_MEM_ACCESS_ALL,
                             &memh);
    ASSERT_EQ(UCS_OK, status) << "registration of GPU memory succeeded";
    s = uct_test_md_stats(a->md);
    printf("lanes: gpus %lu emulated %lu peermem %lu dmabuf %lu bounce %lu\n",
           (unsigned long)s.num_gpus, (unsigned long)s.emulated_gpu,
           (unsigned long)s.peermem_regs, (unsigned long)s.dmabuf_regs,
           (unsigned long)s.bounce_regs);
    UCT_TEST_EXPECT((s.peermem_regs == 0) && (s.dmabuf_regs == 0) &&
                    (s.bounce_regs == 1),
                    "one bounce registration and no NIC one (peermem %lu "
                    "dmabuf %lu bounce %lu)", (unsigned long)s.peermem_regs,
                    (unsigned long)s.dmabuf_regs,
                    (unsigned long)s.bounce_regs);
    uct_md_mem_dereg(a->md, memh);
}

/* The performance UCP is told must be the lane's: a staged copy for the
 * bounce lane, the NIC's own for GDR. */
TEST_F(gpu_lanes, estimate_bounce_slower_than_host)
{
    double host, gpu_latency;

    env_set("UCX_RC_GDR_REG_METHODS", "dmabuf");
    estimate(&host, &gpu_latency);
    UCT_TEST_EXPECT(gpu_latency > host,
                    "bounce lane: GPU memory is estimated slower than host "
                    "memory (%.2f us, host %.2f us)", gpu_latency * 1e6,
                    host * 1e6);
}

TEST_F(gpu_lanes, estimate_gdr_like_host)
{
    double host, gpu_latency;

    estimate(&host, &gpu_latency);
    UCT_TEST_EXPECT(gpu_latency == host,
                    "GDR lane: GPU memory is estimated like host memory "
                    "(%.2f us, host %.2f us)", gpu_latency * 1e6, host * 1e6);
}

/* am_zcopy on the bounce lane: no NIC key, the send stages the bytes */
TEST_F(gpu_lanes, am_zcopy_bounce_lane_byte_exact)
{
    env_set("UCX_RC_GDR_REG_METHODS", "dmabuf");
    check_am_zcopy(1);
}

TEST_F(gpu_lanes, am_zcopy_gdr_lane_byte_exact)
{
    check_am_zcopy(0);
}

/* NIC_READS_GPU=no with writes allowed: the memory has a NIC key (for the
 * writes), but a send from it is staged like a put from it, not read by
 * the NIC */
TEST_F(gpu_emulated, am_zcopy_nic_reads_gpu_off_on_ordering_gpu)
{
    /* uct_rc_gdr_iface_stats_t (rc_gdr_iface.h) up to am_staged_bytes */
    struct {
        uint64_t size, fields[22], am_no_handler, am_staged_bytes;
    } st;
    typedef ucs_status_t (*query_t)(uct_iface_h, void*);
    query_t query = (query_t)uct_test_module_sym(
            "uct_rc_gdr_iface_stats_query");

    require_writes_ordering(UCT_RC_GDR_CUDA_WRITES_ORDERING_OWNER);
    if (IsSkipped()) {
        return;
    }
    env_set("UCX_RC_GDR_NIC_READS_GPU", "no");
    check_am_zcopy(0);
    ASSERT_TRUE(query != NULL);
    memset(&st, 0, sizeof(st));
    st.size = sizeof(st);
    ASSERT_EQ(UCS_OK, query(a->iface, &st));
    UCT_TEST_EXPECT((st.size == sizeof(st)) &&
                    (st.am_staged_bytes == 2 * GPU_AM_ZCOPY_SIZE),
                    "both sends staged through host memory: %lu bytes "
                    "copied, %d expected", (unsigned long)st.am_staged_bytes,
                    2 * GPU_AM_ZCOPY_SIZE);
}

/* Requiring GDR where no mechanism works: opening fails, naming the check */
TEST_F(gpu_lanes, require_gdr_refused_names_check)
{
    uct_md_config_t *md_config;
    ucs_status_t status;
    char md_name[64];
    uct_md_h md;
    bool named = false;

    env_set("UCX_RC_GDR_REG_METHODS", "dmabuf");
    env_set("UCX_RC_GDR_REQUIRE", "gdr");
    snprintf(md_name, sizeof(md_name), "%s", dev_a());
    *strchrnul(md_name, ':') = '\0';
    ASSERT_EQ(UCS_OK, uct_md_config_read(uct_test_component_find(), NULL,
                                         NULL, &md_config));
    {
        log_capture capture(UCS_LOG_LEVEL_DIAG);

        status = uct_md_open(uct_test_component_find(), md_name, md_config,
                             &md);
    }
    uct_config_release(md_config);
    if (status == UCS_OK) {
        uct_md_close(md);
    }

    for (const std::string &line : captured_log) {
        named = named || (line.find("registration.mechanism") !=
                          std::string::npos);
    }
    UCT_TEST_EXPECT(status != UCS_OK, "the md does not open (%s)",
                    ucs_status_string(status));
    UCT_TEST_EXPECT(named, "the refusal names registration.mechanism (%zu "
                    "lines logged%s%s)", captured_log.size(),
                    captured_log.empty() ? "" : ", first: ",
                    captured_log.empty() ? "" : captured_log[0].c_str());
}


/* ------------------------------------------------------- gpu_flush -- */

/*
 * Writes into GPU memory, then one flush: the GPU's write-ordering
 * attribute decides whether the flush reads, once per flush, not once per
 * put. expect is the number of reads one flush must cause.
 */
class gpu_flush : public gpu_emulated {
protected:
    void check_flush_reads(int expect);
};

static uint64_t gpu_flush_reads(uct_iface_h iface)
{
    return uct_test_iface_stats(iface).flush_reads;
}

void gpu_flush::check_flush_reads(int expect)
{
    const int num_puts = 10;
    ucs_status_t status = UCS_OK;
    gpu_region *src, *dst;
    uint64_t before, after;
    void *gpu_a, *gpu_b;
    int i;

    gpu_pair_open();
    gpu_a = gpu_alloc(SIZE);
    gpu_b = gpu_alloc(SIZE);
    ASSERT_EQ(UCS_OK, region_reg(a, b, gpu_a, SIZE, &src));
    ASSERT_EQ(UCS_OK, region_reg(b, a, gpu_b, SIZE, &dst));

    gpu_fill(gpu_a, SIZE, 7);
    before = gpu_flush_reads(a->iface);
    for (i = 0; (i < num_puts) && (status == UCS_OK); ++i) {
        status = zcopy(true, gpu_a, src->memh, (uintptr_t)gpu_b,
                       dst->rkey.rkey, SIZE);
    }
    after = gpu_flush_reads(a->iface);
    UCT_TEST_EXPECT((status == UCS_OK) && (after == before),
                    "%d puts into GPU memory post no read by themselves "
                    "(%s, %lu reads)", num_puts, ucs_status_string(status),
                    (unsigned long)(after - before));

    status = uct_test_ep_flush(nodes, 2, a->ep);
    after  = gpu_flush_reads(a->iface);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    (after - before == (uint64_t)expect) &&
                    gpu_equals(gpu_b, SIZE, 7),
                    "one flush after %d puts: %lu read(s), expected %d (%s)",
                    num_puts, (unsigned long)(after - before), expect,
                    ucs_status_string(status));

    status = uct_test_ep_flush(nodes, 2, a->ep);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    (gpu_flush_reads(a->iface) == after),
                    "a flush with nothing written since posts no read");

    /* UCP's rendezvous ends with puts, a fence and a message: the fence
     * reads, and the message waits for that read. */
    status = zcopy(true, gpu_a, src->memh, (uintptr_t)gpu_b, dst->rkey.rkey,
                   SIZE);
    before = gpu_flush_reads(a->iface);
    status = (status == UCS_OK) ? uct_ep_fence(a->ep, 0) : status;
    after  = gpu_flush_reads(a->iface);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    (after - before == (uint64_t)expect),
                    "a fence after a put: %lu read(s), expected %d",
                    (unsigned long)(after - before), expect);
    status = uct_test_ep_flush(nodes, 2, a->ep);
    UCT_TEST_EXPECT((status == UCS_OK) &&
                    (gpu_flush_reads(a->iface) == after),
                    "the flush after that fence does not read again");
}

TEST_F(gpu_flush, read_once_for_ordering_none)
{
    require_writes_ordering(UCT_RC_GDR_CUDA_WRITES_ORDERING_NONE);
    if (IsSkipped()) {
        return; /* GTEST_SKIP() in a helper returns from the helper */
    }
    check_flush_reads(1);
}

TEST_F(gpu_flush, no_read_for_ordering_owner)
{
    require_writes_ordering(UCT_RC_GDR_CUDA_WRITES_ORDERING_OWNER);
    if (IsSkipped()) {
        return; /* GTEST_SKIP() in a helper returns from the helper */
    }
    check_flush_reads(0);
}

TEST_F(gpu_flush, never_means_no_read)
{
    require_writes_ordering(UCT_RC_GDR_CUDA_WRITES_ORDERING_NONE);
    if (IsSkipped()) {
        return; /* GTEST_SKIP() in a helper returns from the helper */
    }
    env_set("UCX_RC_GDR_FLUSH", "never");
    check_flush_reads(0);
}


/* -------------------------------------------------------- memtypes -- */

/* What uct_md_query says the md registers and detects; whether a CUDA
 * driver is there is decided at process start (RC_GDR_CUDA_LIBRARY) */
class memtypes : public uct_rc_gdr_test {
protected:
    uct_md_attr_t md_attr_query();
};

uct_md_attr_t memtypes::md_attr_query()
{
    uct_md_attr_t attr;

    a = node_open(dev_a(), 0);
    uct_md_query(a->md, &attr);
    printf("memory types: reg 0x%lx detect 0x%lx\n",
           (unsigned long)attr.cap.reg_mem_types,
           (unsigned long)attr.cap.detect_mem_types);
    return attr;
}

TEST_F(memtypes, host_only_without_cuda_driver)
{
    uct_md_attr_t attr;

    if (uct_rc_gdr_cuda_init() == UCS_OK) {
        GTEST_SKIP() << "a CUDA driver is loaded (" <<
                        uct_rc_gdr_cuda_library_name() << "): run with"
                        " RC_GDR_CUDA_LIBRARY=/nonexistent/libcuda.so.1";
    }
    attr = md_attr_query();
    UCT_TEST_EXPECT(!(attr.cap.reg_mem_types &
                      UCS_BIT(UCS_MEMORY_TYPE_CUDA)) &&
                    (attr.cap.reg_mem_types ==
                     UCS_BIT(UCS_MEMORY_TYPE_HOST)) &&
                    (attr.cap.detect_mem_types == 0),
                    "without a CUDA driver: host memory only (reg 0x%lx "
                    "detect 0x%lx)", (unsigned long)attr.cap.reg_mem_types,
                    (unsigned long)attr.cap.detect_mem_types);
}

TEST_F(memtypes, cuda_with_cuda_driver)
{
    uct_md_attr_t attr;

    if (uct_rc_gdr_cuda_init() != UCS_OK) {
        GTEST_SKIP() << "no CUDA driver (set RC_GDR_CUDA_LIBRARY, or"
                        " . contrib/env.sh --emulated-gpu)";
    }
    attr = md_attr_query();
    UCT_TEST_EXPECT((attr.cap.reg_mem_types &
                     UCS_BIT(UCS_MEMORY_TYPE_CUDA)) &&
                    (attr.cap.detect_mem_types &
                     UCS_BIT(UCS_MEMORY_TYPE_CUDA)),
                    "with a CUDA driver: cuda memory registered and detected "
                    "(reg 0x%lx detect 0x%lx)",
                    (unsigned long)attr.cap.reg_mem_types,
                    (unsigned long)attr.cap.detect_mem_types);
}
