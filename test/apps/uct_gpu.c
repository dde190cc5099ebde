/*
 * uct_gpu: GPU memory through rc_gdr, at UCT and at UCP level, checked byte
 * for byte. Buffers come from the CUDA driver through the project's shim;
 * in the soft-RoCE guest that driver is the stand-in (test/mocks), so
 * every result is about an EMULATED GPU, and the program says so.
 *
 *   uct_gpu uct DEV_A DEV_B   put/get zcopy GPU<->GPU and GPU<->host; md
 *                             memory types; a freed and re-allocated
 *                             address is registered anew (never the old MR)
 *   uct_gpu ucp               two UCP workers in one process, put/get on
 *                             GPU memory with UCX_TLS from the environment
 *   uct_gpu lanes DEV         prints the md counters after registering GPU
 *                             memory: which lane the gate chose
 *   uct_gpu estimate DEV LANE the iface's performance estimate for GPU
 *                             memory matches LANE (gdr or bounce)
 *   uct_gpu flush A B READS   10 puts into GPU memory then one flush cause
 *                             exactly READS flush reads
 *   uct_gpu memtypes DEV cuda|host  the md's memory types (any driver)
 *
 * Prints "PASS"/"FAIL" lines and "N passed, N failed".
 */

#define _GNU_SOURCE

#include <uct/ib_gdr/rc_gdr_cuda.h>
#include "uct_test_util.h"

#include <uct/api/v2/uct_v2.h>
#include <ucp/api/ucp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define SIZE      (256 * 1024)
#define TIMEOUT_S 60.0


static void *gpu_alloc(size_t size)
{
    void *ptr;

    if (uct_rc_gdr_cuda_mem_alloc(size, &ptr) != UCS_OK) {
        uct_test_die("cuMemAlloc", UCS_ERR_NO_MEMORY);
    }
    return ptr;
}


static void gpu_fill(void *gpu, size_t size, unsigned seed)
{
    unsigned char *host = malloc(size);
    size_t i;

    for (i = 0; i < size; ++i) {
        host[i] = (unsigned char)(seed * 29 + i * 7 + (i >> 10));
    }
    uct_rc_gdr_cuda_memcpy_htod(gpu, host, size);
    free(host);
}


/* Compares GPU memory with a pattern, reading it through the driver. */
static int gpu_equals(const void *gpu, size_t size, unsigned seed)
{
    unsigned char *host = malloc(size);
    size_t i;
    int ok = 1;

    uct_rc_gdr_cuda_memcpy_dtoh(host, gpu, size);
    for (i = 0; i < size; ++i) {
        ok &= (host[i] == (unsigned char)(seed * 29 + i * 7 + (i >> 10)));
    }
    free(host);
    return ok;
}


static void announce_emulation(void)
{
    uct_rc_gdr_cuda_driver_info_t info;

    if ((uct_rc_gdr_cuda_driver_info(&info) == UCS_OK) && info.emulated) {
        printf("NOTE: EMULATED GPU: the CUDA driver is the project's "
               "stand-in (%s); \"GPU\" memory is host memory\n", info.library);
    }
}


/* ---------------------------------------------------------------- UCT -- */

static ucs_status_t zcopy(uct_test_node_t *a, uct_test_node_t *b, int put,
                          void *local, uct_mem_h memh, uint64_t remote,
                          uct_rkey_t rkey, size_t size)
{
    uct_iov_t iov             = {.buffer = local, .length = size,
                                 .memh = memh, .stride = 0, .count = 1};
    uct_test_node_t *nodes[2] = {a, b};
    uct_test_comp_t comp;
    ucs_status_t status;

    uct_test_comp_init(&comp);
    status = UCT_TEST_RETRY(nodes, 2,
                            put ? uct_ep_put_zcopy(a->ep, &iov, 1, remote,
                                                   rkey, &comp.comp) :
                                  uct_ep_get_zcopy(a->ep, &iov, 1, remote,
                                                   rkey, &comp.comp));
    return uct_test_comp_wait(nodes, 2, status, &comp);
}


typedef struct {
    void              *buf;
    uct_mem_h         memh;
    uct_rkey_bundle_t rkey;
} region_t;


static ucs_status_t region_reg(uct_test_node_t *owner, uct_test_node_t *peer,
                               void *buf, size_t size, region_t *region)
{
    void *packed;
    ucs_status_t status;

    region->buf = buf;
    status      = uct_md_mem_reg(owner->md, buf, size, UCT_MD_MEM_ACCESS_ALL,
                                 &region->memh);
    if (status != UCS_OK) {
        return status;
    }

    packed = calloc(1, owner->md_attr.rkey_packed_size);
    uct_md_mkey_pack(owner->md, region->memh, packed);
    status = uct_rkey_unpack(peer->component, packed, &region->rkey);
    free(packed);
    return status;
}


static void region_dereg(uct_test_node_t *owner, uct_test_node_t *peer,
                         region_t *region)
{
    uct_rkey_release(peer->component, &region->rkey);
    uct_md_mem_dereg(owner->md, region->memh);
}


static void run_uct(const char *dev_a, const char *dev_b)
{
    uct_test_node_t a, b;
    region_t src_gpu, dst_gpu, host;
    uct_md_attr_t attr;
    uct_test_md_stats_t before, after;
    void *gpu_a, *gpu_b, *again, *host_buf;
    ucs_memory_type_t mem_type;
    ucs_status_t status;

    uct_test_node_open(&a, dev_a, 0);
    uct_test_node_open(&b, dev_b, 0);
    uct_test_node_connect_pair(&a, &b, NULL, NULL);

    uct_md_query(a.md, &attr);
    uct_test_check((attr.cap.reg_mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) &&
                   (attr.cap.detect_mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)),
                   "uct_md_query: rc_gdr registers and detects cuda memory "
                   "(reg 0x%lx detect 0x%lx)",
                   (unsigned long)attr.cap.reg_mem_types,
                   (unsigned long)attr.cap.detect_mem_types);

    gpu_a    = gpu_alloc(SIZE);
    gpu_b    = gpu_alloc(SIZE);
    host_buf = calloc(1, SIZE);

    status = uct_md_detect_memory_type(a.md, gpu_a, SIZE, &mem_type);
    uct_test_check((status == UCS_OK) && (mem_type == UCS_MEMORY_TYPE_CUDA),
                   "cuda pointer detected as cuda memory");
    status = uct_md_detect_memory_type(a.md, host_buf, SIZE, &mem_type);
    uct_test_check(status != UCS_OK, "host pointer not claimed as cuda memory");

    before = uct_test_md_stats(a.md);
    if ((region_reg(&a, &b, gpu_a, SIZE, &src_gpu) != UCS_OK) ||
        (region_reg(&b, &a, gpu_b, SIZE, &dst_gpu) != UCS_OK) ||
        (region_reg(&b, &a, host_buf, SIZE, &host) != UCS_OK)) {
        uct_test_die("registration", UCS_ERR_IO_ERROR);
    }
    after = uct_test_md_stats(a.md);
    printf("lane of GPU memory on %s: peermem %lu, dmabuf %lu, bounce %lu "
           "new registrations\n", dev_a,
           (unsigned long)(after.peermem_regs - before.peermem_regs),
           (unsigned long)(after.dmabuf_regs - before.dmabuf_regs),
           (unsigned long)(after.bounce_regs - before.bounce_regs));

    gpu_fill(gpu_a, SIZE, 1);
    status = zcopy(&a, &b, 1, gpu_a, src_gpu.memh, (uintptr_t)gpu_b,
                   dst_gpu.rkey.rkey, SIZE);
    uct_test_check((status == UCS_OK) && gpu_equals(gpu_b, SIZE, 1),
                   "put_zcopy GPU -> GPU, %d bytes (%s)", SIZE,
                   ucs_status_string(status));

    gpu_fill(gpu_b, SIZE, 2);
    status = zcopy(&a, &b, 0, gpu_a, src_gpu.memh, (uintptr_t)gpu_b,
                   dst_gpu.rkey.rkey, SIZE);
    uct_test_check((status == UCS_OK) && gpu_equals(gpu_a, SIZE, 2),
                   "get_zcopy GPU <- GPU (%s)", ucs_status_string(status));

    gpu_fill(gpu_a, SIZE, 3);
    status = zcopy(&a, &b, 1, (char*)gpu_a + 4096 + 3, src_gpu.memh,
                   (uintptr_t)host_buf + 5, host.rkey.rkey, SIZE / 2);
    {
        void *tmp = malloc(SIZE);
        uct_rc_gdr_cuda_memcpy_dtoh(tmp, (char*)gpu_a + 4096 + 3, SIZE / 2);
        uct_test_check((status == UCS_OK) &&
                       !memcmp(tmp, (char*)host_buf + 5, SIZE / 2),
                       "put_zcopy GPU (interior, unaligned) -> host (%s)",
                       ucs_status_string(status));
        free(tmp);
    }

    /* A freed allocation's address handed out again: a new buffer ID, so
     * the cache must register it anew instead of reusing the old MR. */
    region_dereg(&a, &b, &src_gpu);
    uct_rc_gdr_cuda_mem_free(gpu_a);
    again  = gpu_alloc(SIZE);
    before = uct_test_md_stats(a.md);
    status = region_reg(&a, &b, again, SIZE, &src_gpu);
    after  = uct_test_md_stats(a.md);
    uct_test_check((status == UCS_OK) &&
                   ((after.peermem_regs + after.dmabuf_regs +
                     after.bounce_regs) ==
                    (before.peermem_regs + before.dmabuf_regs +
                     before.bounce_regs + 1)) &&
                   (after.cache_hits == before.cache_hits),
                   "re-allocation at %s address is registered anew (no cache "
                   "hit)", (again == gpu_a) ? "the same" : "another");
    gpu_fill(again, SIZE, 4);
    status = zcopy(&a, &b, 1, again, src_gpu.memh, (uintptr_t)gpu_b,
                   dst_gpu.rkey.rkey, SIZE);
    uct_test_check((status == UCS_OK) && gpu_equals(gpu_b, SIZE, 4),
                   "put_zcopy from the re-allocated buffer (%s)",
                   ucs_status_string(status));

    /* Freed while still registered: the free hook invalidates the entry
     * before the driver releases the memory; the late deregistration only
     * drops the reference. */
    before = uct_test_md_stats(a.md);
    uct_rc_gdr_cuda_mem_free(again);
    after  = uct_test_md_stats(a.md);
    uct_test_check(after.invalidations == before.invalidations + 1,
                   "cuMemFree of registered GPU memory invalidates its entry "
                   "at once (%lu -> %lu)", (unsigned long)before.invalidations,
                   (unsigned long)after.invalidations);
    uct_test_check(uct_md_mem_dereg(a.md, src_gpu.memh) == UCS_OK,
                   "deregistration after the free succeeds");
    uct_test_check(uct_md_mem_dereg(a.md, src_gpu.memh) ==
                   UCS_ERR_INVALID_PARAM,
                   "a second deregistration is refused "
                   "(UCS_ERR_INVALID_PARAM)");
    uct_rkey_release(b.component, &src_gpu.rkey);

    region_dereg(&b, &a, &dst_gpu);
    region_dereg(&b, &a, &host);
    uct_rc_gdr_cuda_mem_free(gpu_b);
    free(host_buf);
}


/* am_zcopy from GPU memory: whatever its lane, the bytes arrive (memory
 * registered for the bounce lane has no NIC key: the send stages it) */
#define AM_ZCOPY_SIZE 1000

static unsigned char g_am_data[AM_ZCOPY_SIZE + 64];
static size_t        g_am_length;

static ucs_status_t am_zcopy_handler(void *arg, void *data, size_t length,
                                     unsigned flags)
{
    g_am_length = (length < sizeof(g_am_data)) ? length : sizeof(g_am_data);
    memcpy(g_am_data, data, g_am_length);
    return UCS_OK;
}


static void run_am(const char *dev_a, const char *dev_b)
{
    uct_test_node_t a, b, *nodes[2] = {&a, &b};
    uint64_t header               = 0x5eed;
    unsigned char expect[AM_ZCOPY_SIZE];
    uct_test_md_stats_t before, after;
    uct_test_comp_t comp;
    ucs_status_t status;
    uct_mem_h memh;
    uct_iov_t iov;
    void *gpu;
    int i, j;

    uct_test_node_open(&a, dev_a, 0);
    uct_test_node_open(&b, dev_b, 0);
    uct_iface_set_am_handler(b.iface, 5, am_zcopy_handler, NULL, 0);
    uct_test_node_connect_pair(&a, &b, NULL, NULL);

    gpu = gpu_alloc(AM_ZCOPY_SIZE);
    gpu_fill(gpu, AM_ZCOPY_SIZE, 11);
    uct_rc_gdr_cuda_memcpy_dtoh(expect, gpu, AM_ZCOPY_SIZE);
    uct_test_md_stats_query(a.md, &before);
    status = uct_md_mem_reg(a.md, gpu, AM_ZCOPY_SIZE, UCT_MD_MEM_ACCESS_ALL,
                            &memh);
    uct_test_md_stats_query(a.md, &after);
    uct_test_check(status == UCS_OK, "am: GPU memory registered (%s): "
                   "peermem %lu dmabuf %lu bounce %lu",
                   ucs_status_string(status),
                   (unsigned long)(after.peermem_regs - before.peermem_regs),
                   (unsigned long)(after.dmabuf_regs - before.dmabuf_regs),
                   (unsigned long)(after.bounce_regs - before.bounce_regs));

    for (i = 0; i < 2; ++i) {
        uct_test_iov_init(&iov, gpu, AM_ZCOPY_SIZE, memh);
        uct_test_comp_init(&comp);
        g_am_length = 0;
        status = UCT_TEST_RETRY(nodes, 2,
                                uct_ep_am_zcopy(a.ep, 5, &header,
                                                sizeof(header), &iov, 1, 0,
                                                &comp.comp));
        status = uct_test_comp_wait(nodes, 2, status, &comp);
        for (j = 0; (status == UCS_OK) && (g_am_length == 0) &&
                    (j < 1000000); ++j) {
            uct_test_progress(nodes, 2);
        }
        uct_test_check((status == UCS_OK) && !a.ep_error &&
                       (g_am_length == sizeof(header) + AM_ZCOPY_SIZE) &&
                       !memcmp(g_am_data, &header, sizeof(header)) &&
                       !memcmp(g_am_data + sizeof(header), expect,
                               AM_ZCOPY_SIZE),
                       "am: am_zcopy of %d bytes of GPU memory arrives "
                       "byte-exact (%s, %zu bytes)", AM_ZCOPY_SIZE,
                       ucs_status_string(status), g_am_length);
    }

    uct_md_mem_dereg(a.md, memh);
    uct_rc_gdr_cuda_mem_free(gpu);
    uct_test_node_close(&a);
    uct_test_node_close(&b);
}


static void run_lanes(const char *dev)
{
    uct_test_node_t a;
    uct_test_md_stats_t s;
    uct_mem_h memh;
    void *gpu;

    memset(&a, 0, sizeof(a));
    uct_test_md_open(&a, dev);
    gpu = gpu_alloc(SIZE);
    if (uct_md_mem_reg(a.md, gpu, SIZE, UCT_MD_MEM_ACCESS_ALL, &memh) !=
        UCS_OK) {
        uct_test_die("uct_md_mem_reg", UCS_ERR_IO_ERROR);
    }
    s = uct_test_md_stats(a.md);
    printf("lanes: gpus %lu emulated %lu peermem %lu dmabuf %lu bounce %lu\n",
           (unsigned long)s.num_gpus, (unsigned long)s.emulated_gpu,
           (unsigned long)s.peermem_regs, (unsigned long)s.dmabuf_regs,
           (unsigned long)s.bounce_regs);
    uct_test_check(1, "registration of GPU memory succeeded");
    uct_md_mem_dereg(a.md, memh);
    uct_rc_gdr_cuda_mem_free(gpu);
    uct_md_close(a.md);
}


static uint64_t flush_reads(uct_iface_h iface)
{
    return uct_test_iface_stats(iface).flush_reads;
}


/*
 * Writes into GPU memory, then one flush: the GPU's write-ordering attribute
 * (the stand-in driver's RC_GDR_FAKE_CUDA_WRITES_ORDERING) decides whether
 * the flush reads, once per flush, not once per put. EXPECT is the number of
 * reads one flush must cause.
 */
static void run_flush(const char *dev_a, const char *dev_b, int expect)
{
    const int num_puts = 10;
    region_t src, dst;
    uint64_t before, after;
    ucs_status_t status = UCS_OK;
    uct_test_node_t a, b, *nodes[2] = {&a, &b};
    void *gpu_a, *gpu_b;
    int i;

    uct_test_node_open(&a, dev_a, 0);
    uct_test_node_open(&b, dev_b, 0);
    uct_test_node_connect_pair(&a, &b, NULL, NULL);
    gpu_a = gpu_alloc(SIZE);
    gpu_b = gpu_alloc(SIZE);
    if ((region_reg(&a, &b, gpu_a, SIZE, &src) != UCS_OK) ||
        (region_reg(&b, &a, gpu_b, SIZE, &dst) != UCS_OK)) {
        uct_test_die("registration", UCS_ERR_IO_ERROR);
    }

    gpu_fill(gpu_a, SIZE, 7);
    before = flush_reads(a.iface);
    for (i = 0; (i < num_puts) && (status == UCS_OK); ++i) {
        status = zcopy(&a, &b, 1, gpu_a, src.memh, (uintptr_t)gpu_b,
                       dst.rkey.rkey, SIZE);
    }
    after = flush_reads(a.iface);
    uct_test_check((status == UCS_OK) && (after == before),
                   "%d puts into GPU memory post no read by themselves",
                   num_puts);

    status = uct_test_ep_flush(nodes, 2, a.ep);
    after  = flush_reads(a.iface);
    uct_test_check((status == UCS_OK) && (after - before == (uint64_t)expect) &&
                   gpu_equals(gpu_b, SIZE, 7),
                   "one flush after %d puts: %lu read(s), expected %d",
                   num_puts, (unsigned long)(after - before), expect);

    status = uct_test_ep_flush(nodes, 2, a.ep);
    uct_test_check((status == UCS_OK) && (flush_reads(a.iface) == after),
                   "a flush with nothing written since posts no read");

    /* UCP's rendezvous ends with puts, a fence and a message: the fence
     * reads, and the message waits for that read. */
    status = zcopy(&a, &b, 1, gpu_a, src.memh, (uintptr_t)gpu_b,
                   dst.rkey.rkey, SIZE);
    before = flush_reads(a.iface);
    status = (status == UCS_OK) ? uct_ep_fence(a.ep, 0) : status;
    after  = flush_reads(a.iface);
    uct_test_check((status == UCS_OK) && (after - before == (uint64_t)expect),
                   "a fence after a put: %lu read(s), expected %d",
                   (unsigned long)(after - before), expect);
    status = uct_test_ep_flush(nodes, 2, a.ep);
    uct_test_check((status == UCS_OK) && (flush_reads(a.iface) == after),
                   "the flush after that fence does not read again");

    region_dereg(&a, &b, &src);
    region_dereg(&b, &a, &dst);
    uct_rc_gdr_cuda_mem_free(gpu_a);
    uct_rc_gdr_cuda_mem_free(gpu_b);
}


/* The performance UCP is told must be the lane's: a staged copy for the
 * bounce lane, the NIC's own for GDR. */
static void run_estimate(const char *dev, const char *expect)
{
    uct_perf_attr_t host = {0}, gpu = {0};
    uct_test_node_t a;

    uct_test_node_open(&a, dev, 0);
    host.field_mask = UCT_PERF_ATTR_FIELD_OPERATION |
                      UCT_PERF_ATTR_FIELD_LOCAL_MEMORY_TYPE |
                      UCT_PERF_ATTR_FIELD_REMOTE_MEMORY_TYPE |
                      UCT_PERF_ATTR_FIELD_BANDWIDTH |
                      UCT_PERF_ATTR_FIELD_LATENCY;
    host.operation          = UCT_EP_OP_PUT_ZCOPY;
    host.local_memory_type  = UCS_MEMORY_TYPE_HOST;
    host.remote_memory_type = UCS_MEMORY_TYPE_HOST;
    gpu                     = host;
    gpu.local_memory_type   = UCS_MEMORY_TYPE_CUDA;
    if ((uct_iface_estimate_perf(a.iface, &host) != UCS_OK) ||
        (uct_iface_estimate_perf(a.iface, &gpu) != UCS_OK)) {
        uct_test_die("uct_iface_estimate_perf", UCS_ERR_UNSUPPORTED);
    }

    printf("put_zcopy estimate: host latency %.2f us, GPU latency %.2f us\n",
           host.latency.c * 1e6, gpu.latency.c * 1e6);
    if (!strcmp(expect, "bounce")) {
        uct_test_check(gpu.latency.c > host.latency.c,
                       "bounce lane: GPU memory is estimated slower than "
                       "host memory");
    } else {
        uct_test_check(gpu.latency.c == host.latency.c,
                       "GDR lane: GPU memory is estimated like host memory");
    }
}


/* ---------------------------------------------------------------- UCP -- */

static void ucp_wait(ucp_worker_h *workers, void *request)
{
    double deadline = uct_test_now() + TIMEOUT_S;

    if (request == NULL) {
        return;
    }
    if (UCS_PTR_IS_ERR(request)) {
        fprintf(stderr, "uct_gpu: ucp request failed: %s\n",
                ucs_status_string(UCS_PTR_STATUS(request)));
        return;
    }
    while ((ucp_request_check_status(request) == UCS_INPROGRESS) &&
           (uct_test_now() < deadline)) {
        ucp_worker_progress(workers[0]);
        ucp_worker_progress(workers[1]);
    }
    ucp_request_free(request);
}


static void run_ucp(void)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features   = UCP_FEATURE_RMA};
    ucp_worker_params_t wparams = {.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                   .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_request_param_t rparam = {.op_attr_mask = 0};
    ucp_worker_h workers[2];
    ucp_address_t *addr[2];
    size_t addr_len[2];
    ucp_ep_h eps[2];
    ucp_mem_h mem[2];
    ucp_rkey_h rkey;
    ucp_context_h context;
    ucp_config_t *config;
    void *gpu[2], *rkey_buf;
    size_t rkey_size;
    int i;

    ucp_config_read(NULL, NULL, &config);
    if (ucp_init(&params, config, &context) != UCS_OK) {
        uct_test_die("ucp_init", UCS_ERR_NO_DEVICE);
    }
    ucp_config_release(config);

    for (i = 0; i < 2; ++i) {
        ucp_worker_create(context, &wparams, &workers[i]);
        ucp_worker_get_address(workers[i], &addr[i], &addr_len[i]);
    }
    for (i = 0; i < 2; ++i) {
        ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                                     .address    = addr[1 - i]};
        if (ucp_ep_create(workers[i], &ep_params, &eps[i]) != UCS_OK) {
            uct_test_die("ucp_ep_create", UCS_ERR_UNREACHABLE);
        }
    }

    for (i = 0; i < 2; ++i) {
        ucp_mem_map_params_t mparams = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                                      UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                                        .length     = SIZE};
        gpu[i]          = gpu_alloc(SIZE);
        mparams.address = gpu[i];
        if (ucp_mem_map(context, &mparams, &mem[i]) != UCS_OK) {
            uct_test_die("ucp_mem_map", UCS_ERR_IO_ERROR);
        }
    }

    ucp_rkey_pack(context, mem[1], &rkey_buf, &rkey_size);
    if (ucp_ep_rkey_unpack(eps[0], rkey_buf, &rkey) != UCS_OK) {
        uct_test_die("ucp_ep_rkey_unpack", UCS_ERR_INVALID_PARAM);
    }
    ucp_rkey_buffer_release(rkey_buf);

    gpu_fill(gpu[0], SIZE, 5);
    ucp_wait(workers, ucp_put_nbx(eps[0], gpu[0], SIZE, (uintptr_t)gpu[1],
                                  rkey, &rparam));
    ucp_wait(workers, ucp_ep_flush_nbx(eps[0], &rparam));
    uct_test_check(gpu_equals(gpu[1], SIZE, 5), "UCP put GPU -> GPU, %d bytes",
                   SIZE);

    gpu_fill(gpu[1], SIZE, 6);
    ucp_wait(workers, ucp_get_nbx(eps[0], gpu[0], SIZE, (uintptr_t)gpu[1],
                                  rkey, &rparam));
    ucp_wait(workers, ucp_ep_flush_nbx(eps[0], &rparam));
    uct_test_check(gpu_equals(gpu[0], SIZE, 6), "UCP get GPU <- GPU, %d bytes",
                   SIZE);

    ucp_rkey_destroy(rkey);
    for (i = 0; i < 2; ++i) {
        ucp_wait(workers, ucp_ep_close_nbx(eps[i], &rparam));
    }
    for (i = 0; i < 2; ++i) {
        ucp_mem_unmap(context, mem[i]);
        uct_rc_gdr_cuda_mem_free(gpu[i]);
        ucp_worker_release_address(workers[i], addr[i]);
        ucp_worker_destroy(workers[i]);
    }
    ucp_cleanup(context);
}


/* What uct_md_query says the md registers and detects: cuda memory when a
 * CUDA driver with a GPU is there, host memory only otherwise. Runs with or
 * without a driver. */
static void run_memtypes(const char *dev, const char *expect)
{
    uct_test_node_t a;
    uct_md_attr_t attr;
    int cuda;

    memset(&a, 0, sizeof(a));
    uct_test_md_open(&a, dev);
    uct_md_query(a.md, &attr);
    cuda = !!(attr.cap.reg_mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) &&
           !!(attr.cap.detect_mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
    printf("memory types: reg 0x%lx detect 0x%lx\n",
           (unsigned long)attr.cap.reg_mem_types,
           (unsigned long)attr.cap.detect_mem_types);
    if (!strcmp(expect, "cuda")) {
        uct_test_check(cuda, "with a CUDA driver: cuda memory registered and "
                       "detected");
    } else {
        uct_test_check(!cuda && (attr.cap.reg_mem_types ==
                                 UCS_BIT(UCS_MEMORY_TYPE_HOST)) &&
                       (attr.cap.detect_mem_types == 0),
                       "without a CUDA driver: host memory only");
    }
    uct_md_close(a.md);
}


int main(int argc, char **argv)
{
    uct_test_init("uct_gpu", TIMEOUT_S);
    if ((argc == 4) && !strcmp(argv[1], "memtypes")) {
        run_memtypes(argv[2], argv[3]);
        return uct_test_summary();
    }

    if (uct_rc_gdr_cuda_init() != UCS_OK) {
        printf("SKIP uct_gpu: no CUDA driver (set RC_GDR_CUDA_LIBRARY, or "
               ". contrib/env.sh --emulated-gpu)\n0 passed, 0 failed\n");
        return 0;
    }
    announce_emulation();
    {
        uct_rc_gdr_cuda_ctx_h ctx;
        if (uct_rc_gdr_cuda_ctx_activate(0, &ctx) != UCS_OK) {
            uct_test_die("primary context of GPU 0", UCS_ERR_NO_DEVICE);
        }
    }

    if ((argc == 4) && !strcmp(argv[1], "uct")) {
        run_uct(argv[2], argv[3]);
    } else if ((argc == 2) && !strcmp(argv[1], "ucp")) {
        run_ucp();
    } else if ((argc == 4) && !strcmp(argv[1], "am")) {
        run_am(argv[2], argv[3]);
    } else if ((argc == 3) && !strcmp(argv[1], "lanes")) {
        run_lanes(argv[2]);
    } else if ((argc == 5) && !strcmp(argv[1], "flush")) {
        run_flush(argv[2], argv[3], atoi(argv[4]));
    } else if ((argc == 4) && !strcmp(argv[1], "estimate")) {
        run_estimate(argv[2], argv[3]);
    } else {
        fprintf(stderr, "usage: %s uct DEV_A DEV_B | am DEV_A DEV_B | ucp | lanes DEV | "
                "estimate DEV gdr|bounce | flush DEV_A DEV_B READS\n", argv[0]);
        return 2;
    }

    return uct_test_summary();
}
