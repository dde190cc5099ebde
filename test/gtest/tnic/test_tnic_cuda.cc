/*
 * CUDA memory on the stand-in NIC: the device reaches it only through the
 * CUDA driver, as a NIC reaches GPU memory over PCIe. peermem (ibv_reg_mr on
 * a device pointer) and DMA-BUF (ibv_reg_dmabuf_mr on the driver's export)
 * both move bytes exactly, each can be switched off, and the memory kinds
 * that broke peers are registered whole or refused, never in part.
 *
 * The driver is whatever libcuda.so.1 the process finds (RC_GDR_CUDA_LIBRARY
 * picks another): on a GPU machine a real GPU, elsewhere the project's
 * stand-in driver (test/mocks), when the results say EMULATED GPU. Without
 * a driver or a device every test skips and says why.
 *
 * See file LICENSE for terms.
 */

#include "tnic_fixture.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

namespace {

/* The driver API this suite calls, resolved at run time */
typedef int cu_result_t;
typedef unsigned long long cu_ptr_t;
typedef unsigned long long cu_handle_t;

struct cuda_api {
    void        *lib = nullptr;
    bool        emulated = false;
    void        *ctx = nullptr;
    cu_result_t (*init)(unsigned);
    cu_result_t (*device_get)(int*, int);
    cu_result_t (*primary_ctx_retain)(void**, int);
    cu_result_t (*ctx_set_current)(void*);
    cu_result_t (*mem_alloc)(cu_ptr_t*, size_t);
    cu_result_t (*mem_free)(cu_ptr_t);
    cu_result_t (*mem_alloc_managed)(cu_ptr_t*, size_t, unsigned);
    cu_result_t (*mem_alloc_async)(cu_ptr_t*, size_t, void*);
    cu_result_t (*mem_free_async)(cu_ptr_t, void*);
    cu_result_t (*stream_sync)(void*);
    cu_result_t (*mem_host_alloc)(void**, size_t, unsigned);
    cu_result_t (*mem_free_host)(void*);
    cu_result_t (*htod)(cu_ptr_t, const void*, size_t);
    cu_result_t (*dtoh)(void*, cu_ptr_t, size_t);
    cu_result_t (*export_dmabuf)(void*, cu_ptr_t, size_t, int,
                                 unsigned long long);
    cu_result_t (*granularity)(size_t*, const void*, int);
    cu_result_t (*address_reserve)(cu_ptr_t*, size_t, size_t, cu_ptr_t,
                                   unsigned long long);
    cu_result_t (*address_free)(cu_ptr_t, size_t);
    cu_result_t (*create)(cu_handle_t*, size_t, const void*,
                          unsigned long long);
    cu_result_t (*release)(cu_handle_t);
    cu_result_t (*map)(cu_ptr_t, size_t, size_t, cu_handle_t,
                       unsigned long long);
    cu_result_t (*unmap)(cu_ptr_t, size_t);
    cu_result_t (*set_access)(cu_ptr_t, size_t, const void*, size_t);
};

/* CUmemAllocationProp and CUmemAccessDesc as the driver API lays them out
 * (stable since CUDA 10.2): pinned device memory on device 0 */
struct cu_alloc_prop {
    int      type;              /* CU_MEM_ALLOCATION_TYPE_PINNED = 1 */
    int      handle_types;      /* none */
    struct {
        int  type;              /* CU_MEM_LOCATION_TYPE_DEVICE = 1 */
        int  id;
    }        location;
    void     *win32_meta;
    struct {
        unsigned char compression_type, gpu_direct_rdma_capable;
        unsigned short usage;
        unsigned char reserved[4];
    }        flags;
};

struct cu_access_desc {
    struct {
        int  type;
        int  id;
    }        location;
    int      flags;             /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 */
};

class tnic_cuda : public tnic {
protected:
    void SetUp() override
    {
        tnic::SetUp();
        if (IsSkipped() || HasFatalFailure()) {
            return;
        }
        const char *name = getenv("RC_GDR_CUDA_LIBRARY");
        cu.lib = dlopen(name ? name : "libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (cu.lib == nullptr) {
            GTEST_SKIP() << "no CUDA driver: " << dlerror();
        }
        cu.emulated = dlsym(cu.lib, "rc_gdr_fake_cuda_control") != nullptr;
#define CU_SYM(_f, _n) *(void**)&cu._f = dlsym(cu.lib, _n); \
        ASSERT_NE(nullptr, (void*)cu._f) << _n;
        CU_SYM(init, "cuInit");
        CU_SYM(device_get, "cuDeviceGet");
        CU_SYM(primary_ctx_retain, "cuDevicePrimaryCtxRetain");
        CU_SYM(ctx_set_current, "cuCtxSetCurrent");
        CU_SYM(mem_alloc, "cuMemAlloc_v2");
        CU_SYM(mem_free, "cuMemFree_v2");
        CU_SYM(mem_alloc_managed, "cuMemAllocManaged");
        CU_SYM(mem_alloc_async, "cuMemAllocAsync");
        CU_SYM(mem_free_async, "cuMemFreeAsync");
        CU_SYM(stream_sync, "cuStreamSynchronize");
        CU_SYM(mem_host_alloc, "cuMemHostAlloc");
        CU_SYM(mem_free_host, "cuMemFreeHost");
        CU_SYM(htod, "cuMemcpyHtoD_v2");
        CU_SYM(dtoh, "cuMemcpyDtoH_v2");
        CU_SYM(export_dmabuf, "cuMemGetHandleForAddressRange");
        CU_SYM(granularity, "cuMemGetAllocationGranularity");
        CU_SYM(address_reserve, "cuMemAddressReserve");
        CU_SYM(address_free, "cuMemAddressFree");
        CU_SYM(create, "cuMemCreate");
        CU_SYM(release, "cuMemRelease");
        CU_SYM(map, "cuMemMap");
        CU_SYM(unmap, "cuMemUnmap");
        CU_SYM(set_access, "cuMemSetAccess");
#undef CU_SYM
        int dev;
        if ((cu.init(0) != 0) || (cu.device_get(&dev, 0) != 0)) {
            GTEST_SKIP() << "the CUDA driver finds no GPU";
        }
        ASSERT_EQ(0, cu.primary_ctx_retain(&cu.ctx, dev));
        ASSERT_EQ(0, cu.ctx_set_current(cu.ctx));
        printf("%s\n", cu.emulated ?
               "EMULATED GPU: the project's stand-in CUDA driver" :
               "REAL GPU: the machine's CUDA driver");
        connect();
    }

    /* RDMA-writes len (< 32 KiB) bytes of pattern seed from a's host buffer
     * to rkey at raddr, then reads them back into a's buffer at 32 KiB; the
     * status of
     * the first failing completion, or IBV_WC_SUCCESS */
    int write_read(uint64_t raddr, uint32_t rkey, size_t len, int seed)
    {
        struct ibv_wc wc;

        for (size_t i = 0; i < len; ++i) {
            a.buf[i] = (uint8_t)(i * 13 + seed);
        }
        memset(a.buf.data() + BUF / 2, 0, len);
        EXPECT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 1, a.buf.data(), len,
                          a.mr->lkey, raddr, rkey));
        if (!wait_wc(a, &wc)) {
            return -1;
        }
        if (wc.status != IBV_WC_SUCCESS) {
            return wc.status;
        }
        EXPECT_EQ(0, post(a, IBV_WR_RDMA_READ, 2, a.buf.data() + BUF / 2,
                          len, a.mr->lkey, raddr, rkey));
        if (!wait_wc(a, &wc)) {
            return -1;
        }
        if (wc.status == IBV_WC_SUCCESS) {
            EXPECT_EQ(0, memcmp(a.buf.data(), a.buf.data() + BUF / 2, len));
        }
        return wc.status;
    }

    /* the device bytes [dptr, + len) hold what write_read put there; read
     * in two copies split at seam when the range crosses two allocations */
    void expect_device_holds(cu_ptr_t dptr, size_t len, cu_ptr_t seam = 0)
    {
        std::vector<uint8_t> copy(len);
        size_t head = ((seam > dptr) && (seam < dptr + len)) ?
                      (seam - dptr) : len;

        ASSERT_EQ(0, cu.dtoh(copy.data(), dptr, head));
        if (head < len) {
            ASSERT_EQ(0, cu.dtoh(copy.data() + head, seam, len - head));
        }
        EXPECT_EQ(0, memcmp(copy.data(), a.buf.data(), len));
    }

    static const int ACCESS = IBV_ACCESS_LOCAL_WRITE |
                              IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_ATOMIC;

    cuda_api cu;
};

TEST_F(tnic_cuda, peermem_moves_device_memory_byte_exact)
{
    const size_t size = 1 << 20, off = 4097, len = 30000;
    struct ibv_wc wc;
    cu_ptr_t dptr;

    ASSERT_EQ(0, cu.mem_alloc(&dptr, size));
    struct ibv_mr *mr = ibv_reg_mr(b.pd, (void*)dptr, size, ACCESS);
    ASSERT_NE(nullptr, mr) << strerror(errno);
    EXPECT_EQ(IBV_WC_SUCCESS, write_read(dptr + off, mr->rkey, len, 1));
    expect_device_holds(dptr + off, len);

    /* an atomic on device memory returns the old value and leaves the sum */
    uint64_t init = 40, result;
    ASSERT_EQ(0, cu.htod(dptr, &init, 8));
    ASSERT_EQ(0, post(a, IBV_WR_ATOMIC_FETCH_AND_ADD, 3, a.buf.data(), 8,
                      a.mr->lkey, dptr, mr->rkey, IBV_SEND_SIGNALED, 2));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    memcpy(&result, a.buf.data(), 8);
    EXPECT_EQ(40u, result);
    ASSERT_EQ(0, cu.dtoh(&result, dptr, 8));
    EXPECT_EQ(42u, result);

    /* device memory as the local side of a write: the NIC reads the GPU */
    struct ibv_mr *lmr = ibv_reg_mr(a.pd, (void*)dptr, size, ACCESS);
    ASSERT_NE(nullptr, lmr);
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 4, (void*)(dptr + off), len,
                      lmr->lkey, raddr(b), b.mr->rkey));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    std::vector<uint8_t> copy(len);
    ASSERT_EQ(0, cu.dtoh(copy.data(), dptr + off, len));
    EXPECT_EQ(0, memcmp(copy.data(), b.buf.data(), len));

    ibv_dereg_mr(lmr);
    ibv_dereg_mr(mr);
    cu.mem_free(dptr);
}

TEST_F(tnic_cuda, peermem_off_refuses_device_pointers_as_a_nic_does)
{
    cu_ptr_t dptr;

    ASSERT_EQ(0, cu.mem_alloc(&dptr, 1 << 20));
    ASSERT_EQ(0, fault_set("peermem:off"));
    errno = 0;
    EXPECT_EQ(nullptr, ibv_reg_mr(b.pd, (void*)dptr, 1 << 20, ACCESS));
    EXPECT_EQ(EFAULT, errno);
    /* host memory is untouched by the switch */
    std::vector<uint8_t> host(4096);
    struct ibv_mr *mr = ibv_reg_mr(b.pd, host.data(), host.size(), ACCESS);
    EXPECT_NE(nullptr, mr);
    ibv_dereg_mr(mr);
    cu.mem_free(dptr);
}

TEST_F(tnic_cuda, dmabuf_reaches_exactly_the_registered_bytes)
{
    const size_t size = 2 << 20, offset = 8192 + 100, len = 30000;
    struct ibv_wc wc;
    cu_ptr_t dptr;
    int fd = -1;

    ASSERT_EQ(0, cu.mem_alloc(&dptr, size));
    std::vector<uint8_t> zero(size, 0xee);
    ASSERT_EQ(0, cu.htod(dptr, zero.data(), size));
    ASSERT_EQ(0, cu.export_dmabuf(&fd, dptr, size,
                                  1 /* CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD */,
                                  0));
    struct ibv_mr *mr = ibv_reg_dmabuf_mr(b.pd, offset, len, dptr + offset,
                                          fd, ACCESS);
    int err = errno;
    close(fd);
    ASSERT_NE(nullptr, mr) << strerror(err);
    EXPECT_EQ(IBV_WC_SUCCESS, write_read(dptr + offset, mr->rkey, len, 2));
    expect_device_holds(dptr + offset, len);

    /* the bytes around the registration are the GPU's, not the NIC's */
    std::vector<uint8_t> copy(size);
    ASSERT_EQ(0, cu.dtoh(copy.data(), dptr, size));
    EXPECT_EQ(0, memcmp(copy.data(), zero.data(), offset));
    EXPECT_EQ(0, memcmp(copy.data() + offset + len, zero.data(),
                        size - offset - len));
    /* one byte past the registration is the NIC's remote access error */
    ASSERT_EQ(0, post(a, IBV_WR_RDMA_WRITE, 5, a.buf.data(), 2, a.mr->lkey,
                      dptr + offset + len - 1, mr->rkey));
    ASSERT_TRUE(wait_wc(a, &wc));
    EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, wc.status);

    ibv_dereg_mr(mr);
    cu.mem_free(dptr);
}

TEST_F(tnic_cuda, dmabuf_refusals)
{
    const size_t size = 2 << 20;
    cu_ptr_t dptr;
    int fd, pipefd[2];

    ASSERT_EQ(0, cu.mem_alloc(&dptr, size));
    errno = 0;
    EXPECT_EQ(nullptr, ibv_reg_dmabuf_mr(b.pd, 0, 4096, dptr, -1, ACCESS));
    EXPECT_EQ(EBADF, errno) << "the probe callers make with fd -1";

    ASSERT_EQ(0, pipe(pipefd));
    errno = 0;
    EXPECT_EQ(nullptr, ibv_reg_dmabuf_mr(b.pd, 0, 4096, dptr, pipefd[0],
                                         ACCESS));
    EXPECT_EQ(EINVAL, errno) << "an fd that is no dma-buf";
    close(pipefd[0]);
    close(pipefd[1]);

    ASSERT_EQ(0, cu.export_dmabuf(&fd, dptr, size / 2, 1, 0));
    errno = 0;
    EXPECT_EQ(nullptr, ibv_reg_dmabuf_mr(b.pd, 4096, size / 2, dptr + 4096,
                                         fd, ACCESS));
    EXPECT_EQ(EINVAL, errno) << "offset + length past the export";

    ASSERT_EQ(0, fault_set("dmabuf:off"));
    errno = 0;
    EXPECT_EQ(nullptr, ibv_reg_dmabuf_mr(b.pd, 0, 4096, dptr, fd, ACCESS));
    EXPECT_EQ(EOPNOTSUPP, errno) << "a provider without DMA-BUF";
    close(fd);
    cu.mem_free(dptr);
}

TEST_F(tnic_cuda, freed_device_memory_fails_the_access_not_the_process)
{
    cu_ptr_t dptr;

    ASSERT_EQ(0, cu.mem_alloc(&dptr, 1 << 20));
    struct ibv_mr *mr = ibv_reg_mr(b.pd, (void*)dptr, 1 << 20, ACCESS);
    ASSERT_NE(nullptr, mr);
    ASSERT_EQ(0, cu.mem_free(dptr));
    /* as a peer-memory invalidation: the access fails, nothing is written */
    EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, write_read(dptr, mr->rkey, 4096, 3));
    ibv_dereg_mr(mr);
}

/* A VMM range of two physical allocations mapped back to back (UCX issue
 * 11461: registered as its first chunk only) is registered whole or refused;
 * when registered, the NIC reaches the second chunk too */
TEST_F(tnic_cuda, vmm_range_of_two_chunks_whole_or_refused)
{
    cu_alloc_prop prop = {};
    cu_access_desc access = {};
    cu_handle_t h[2];
    size_t gran = 0;
    cu_ptr_t va;
    int fd;

    prop.type          = 1;
    prop.location.type = 1;
    prop.location.id   = 0;
    ASSERT_EQ(0, cu.granularity(&gran, &prop, 0));
    ASSERT_EQ(0, cu.address_reserve(&va, 2 * gran, 0, 0, 0));
    for (int i = 0; i < 2; ++i) {
        ASSERT_EQ(0, cu.create(&h[i], gran, &prop, 0));
        ASSERT_EQ(0, cu.map(va + i * gran, gran, 0, h[i], 0));
    }
    access.location = {1, 0};
    access.flags    = 3;
    ASSERT_EQ(0, cu.set_access(va, 2 * gran, &access, 1));

    const size_t off = gran - 5000, len = 20000;  /* across the seam */
    struct ibv_mr *mr = ibv_reg_mr(b.pd, (void*)va, 2 * gran, ACCESS);
    if (mr != nullptr) {
        EXPECT_EQ(IBV_WC_SUCCESS, write_read(va + off, mr->rkey, len, 4));
        expect_device_holds(va + off, len, va + gran);
        ibv_dereg_mr(mr);
    } else {
        printf("peermem refused the two-chunk range: %s\n", strerror(errno));
    }
    if (cu.export_dmabuf(&fd, va, 2 * gran, 1, 0) == 0) {
        mr = ibv_reg_dmabuf_mr(b.pd, 0, 2 * gran, va, fd, ACCESS);
        close(fd);
        if (mr != nullptr) {
            EXPECT_EQ(IBV_WC_SUCCESS, write_read(va + off, mr->rkey, len, 5));
            expect_device_holds(va + off, len, va + gran);
            ibv_dereg_mr(mr);
        } else {
            printf("DMA-BUF refused the two-chunk range: %s\n",
                   strerror(errno));
        }
    } else {
        printf("the driver refused to export the two-chunk range\n");
    }
    for (int i = 0; i < 2; ++i) {
        cu.unmap(va + i * gran, gran);
        cu.release(h[i]);
    }
    cu.address_free(va, 2 * gran);
}

/* Stream-ordered pool memory (UCX issue 11922: a crash probing its DMA-BUF
 * export), managed memory and pinned host memory: registered and moved
 * byte-exact, or refused with an error */
TEST_F(tnic_cuda, pool_managed_and_pinned_host_memory)
{
    const size_t size = 1 << 20, len = 10000;
    cu_ptr_t pool, managed;
    void *host;
    int fd;

    ASSERT_EQ(0, cu.mem_alloc_async(&pool, size, nullptr));
    ASSERT_EQ(0, cu.stream_sync(nullptr));
    struct ibv_mr *mr = ibv_reg_mr(b.pd, (void*)pool, size, ACCESS);
    ASSERT_NE(nullptr, mr) << "pool memory by peermem: " << strerror(errno);
    EXPECT_EQ(IBV_WC_SUCCESS, write_read(pool + 64, mr->rkey, len, 6));
    expect_device_holds(pool + 64, len);
    ibv_dereg_mr(mr);
    if (cu.export_dmabuf(&fd, pool, size, 1, 0) == 0) {
        mr = ibv_reg_dmabuf_mr(b.pd, 0, size, pool, fd, ACCESS);
        close(fd);
        ASSERT_NE(nullptr, mr) << "pool memory by DMA-BUF: "
                               << strerror(errno);
        EXPECT_EQ(IBV_WC_SUCCESS, write_read(pool + 64, mr->rkey, len, 7));
        expect_device_holds(pool + 64, len);
        ibv_dereg_mr(mr);
    } else {
        printf("the driver refused to export pool memory\n");
    }
    cu.mem_free_async(pool, nullptr);
    cu.stream_sync(nullptr);

    ASSERT_EQ(0, cu.mem_alloc_managed(&managed, size, 1 /* GLOBAL */));
    mr = ibv_reg_mr(b.pd, (void*)managed, size, ACCESS);
    ASSERT_NE(nullptr, mr) << "managed memory: " << strerror(errno);
    EXPECT_EQ(IBV_WC_SUCCESS, write_read(managed + 8, mr->rkey, len, 8));
    EXPECT_EQ(0, memcmp((void*)(managed + 8), a.buf.data(), len));
    ibv_dereg_mr(mr);
    cu.mem_free(managed);

    ASSERT_EQ(0, cu.mem_host_alloc(&host, size, 0));
    mr = ibv_reg_mr(b.pd, host, size, ACCESS);
    ASSERT_NE(nullptr, mr) << "pinned host memory: " << strerror(errno);
    EXPECT_EQ(IBV_WC_SUCCESS, write_read((uintptr_t)host + 8, mr->rkey, len,
                                         9));
    EXPECT_EQ(0, memcmp((uint8_t*)host + 8, a.buf.data(), len));
    ibv_dereg_mr(mr);
    cu.mem_free_host(host);
}

} // namespace
