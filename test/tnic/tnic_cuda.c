/*
 * CUDA memory on the stand-in NIC, reached only through the CUDA driver, as
 * a NIC reaches GPU memory over PCIe:
 *
 *   peermem  ibv_reg_mr on a device pointer succeeds only while the
 *            "peer-memory client" is loaded (knob `peermem:off` unloads
 *            it); without it the registration fails with EFAULT, as the
 *            kernel's get_user_pages answers for a device address;
 *   DMA-BUF  ibv_reg_dmabuf_mr takes an fd the driver exported
 *            (cuMemGetHandleForAddressRange); the device checks that the fd
 *            is a dma-buf (or, on the project's stand-in CUDA driver, its
 *            memfd export) whose size covers offset + length, and that the
 *            exported range is device memory mapped contiguously, then reaches
 *            exactly [iova, iova + length) (knob `dmabuf:off`: a provider
 *            without DMA-BUF, EOPNOTSUPP).
 *
 * The driver is the one the process already loaded (RTLD_NOLOAD): a process
 * without CUDA has no device memory to register, and the stand-in never
 * brings a driver in. Device memory is read and written with synchronous
 * cuMemcpy in the pointer's device's primary context; atomics are a
 * read-modify-write under one lock (atomic against the NIC's own accesses,
 * not against GPU kernels: what a test of the transport needs).
 * A copy the driver refuses (memory freed under the registration, as a
 * peer-memory invalidation would report) fails the access.
 */

#include "tnic.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The few driver types and values used here, so that the stand-in builds
 * without CUDA headers (values from the driver API, stable since CUDA 4) */
typedef int tnic_cu_result_t;
typedef unsigned long long tnic_cu_ptr_t;
typedef void *tnic_cu_ctx_t;
typedef int tnic_cu_device_t;

enum {
    TNIC_CU_POINTER_ATTRIBUTE_MEMORY_TYPE    = 2,
    TNIC_CU_POINTER_ATTRIBUTE_IS_MANAGED     = 8,
    TNIC_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    TNIC_CU_MEMORYTYPE_DEVICE                = 2
};

static struct {
    pthread_mutex_t  load_lock;
    pthread_mutex_t  atomic_lock;
    int              loaded;
    tnic_cu_result_t (*pointer_get_attribute)(void*, int, tnic_cu_ptr_t);
    tnic_cu_result_t (*mem_get_address_range)(tnic_cu_ptr_t*, size_t*,
                                              tnic_cu_ptr_t);
    tnic_cu_result_t (*memcpy_dtoh)(void*, tnic_cu_ptr_t, size_t);
    tnic_cu_result_t (*memcpy_htod)(tnic_cu_ptr_t, const void*, size_t);
    tnic_cu_result_t (*device_get)(tnic_cu_device_t*, int);
    tnic_cu_result_t (*primary_ctx_retain)(tnic_cu_ctx_t*, tnic_cu_device_t);
    tnic_cu_result_t (*primary_ctx_release)(tnic_cu_device_t);
    tnic_cu_result_t (*ctx_push)(tnic_cu_ctx_t);
    tnic_cu_result_t (*ctx_pop)(tnic_cu_ctx_t*);
} tnic_cuda = {
    .load_lock   = PTHREAD_MUTEX_INITIALIZER,
    .atomic_lock = PTHREAD_MUTEX_INITIALIZER
};

/* What an MR on device memory keeps: the context its copies run in */
typedef struct tnic_cuda_mr {
    tnic_cu_device_t dev;
    tnic_cu_ctx_t    ctx;   /* the device's primary context, retained */
} tnic_cuda_mr_t;

/* Finds the driver once the process has one; until then every call looks
 * again (a process may load CUDA after its first host registration) */
static int tnic_cuda_load(void)
{
    const char *name = getenv("RC_GDR_CUDA_LIBRARY");
    void *handle;

    if (__atomic_load_n(&tnic_cuda.loaded, __ATOMIC_ACQUIRE)) {
        return 1;
    }
    pthread_mutex_lock(&tnic_cuda.load_lock);
    if (tnic_cuda.loaded) {
        goto out;
    }
    handle = dlopen((name != NULL) ? name : "libcuda.so.1",
                    RTLD_NOW | RTLD_NOLOAD);
    if (handle == NULL) {
        goto out;
    }

#define TNIC_CUDA_SYM(_field, _name) \
    if ((*(void**)&tnic_cuda._field = dlsym(handle, _name)) == NULL) { \
        TNIC_LOG("CUDA driver without %s: device memory not reachable", \
                 _name); \
        goto out; \
    }
    TNIC_CUDA_SYM(pointer_get_attribute, "cuPointerGetAttribute");
    TNIC_CUDA_SYM(mem_get_address_range, "cuMemGetAddressRange_v2");
    TNIC_CUDA_SYM(memcpy_dtoh, "cuMemcpyDtoH_v2");
    TNIC_CUDA_SYM(memcpy_htod, "cuMemcpyHtoD_v2");
    TNIC_CUDA_SYM(device_get, "cuDeviceGet");
    TNIC_CUDA_SYM(primary_ctx_retain, "cuDevicePrimaryCtxRetain");
    TNIC_CUDA_SYM(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2");
    TNIC_CUDA_SYM(ctx_push, "cuCtxPushCurrent_v2");
    TNIC_CUDA_SYM(ctx_pop, "cuCtxPopCurrent_v2");
#undef TNIC_CUDA_SYM
    __atomic_store_n(&tnic_cuda.loaded, 1, __ATOMIC_RELEASE);
out:
    pthread_mutex_unlock(&tnic_cuda.load_lock);
    return tnic_cuda.loaded;
}

/* Whether addr is device memory, and its device then; managed memory is
 * host-reachable (the CPU can touch it, as the NIC's host path does), so it
 * is not device memory here */
static int tnic_cuda_is_device(uint64_t addr, tnic_cu_device_t *dev_p)
{
    unsigned int mem_type = 0, managed = 0;
    int ordinal;

    if (!tnic_cuda_load() ||
        (tnic_cuda.pointer_get_attribute(&mem_type,
                                         TNIC_CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                         addr) != 0) ||
        (mem_type != TNIC_CU_MEMORYTYPE_DEVICE)) {
        return 0;
    }
    if ((tnic_cuda.pointer_get_attribute(&managed,
                                         TNIC_CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                         addr) == 0) && managed) {
        return 0;
    }
    if ((tnic_cuda.pointer_get_attribute(&ordinal,
                                     TNIC_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                     addr) != 0) ||
        (tnic_cuda.device_get(dev_p, ordinal) != 0)) {
        *dev_p = -1;    /* device memory the NIC cannot place: refused */
    }
    return 1;
}

/* Whether [addr, addr + length) is device memory mapped without a hole:
 * one allocation, or VMM chunks mapped back to back (registered whole, never
 * as the first chunk alone); registrations are page-rounded, and a NIC pins
 * whole pages */
#define TNIC_CUDA_PAGE 4096
static int tnic_cuda_range_mapped(uint64_t addr, size_t length)
{
    uint64_t end = addr + length;
    tnic_cu_ptr_t base;
    size_t size;

    while (addr < end) {
        if (tnic_cuda.mem_get_address_range(&base, &size, addr) == 0) {
            addr = base + size;
        } else if (addr % TNIC_CUDA_PAGE) {
            /* the tail of the page an allocation ends in: pinned with it */
            addr += TNIC_CUDA_PAGE - (addr % TNIC_CUDA_PAGE);
        } else {
            return 0;
        }
    }
    return 1;
}

static int tnic_cuda_ctx_enter(tnic_cuda_mr_t *cmr)
{
    return tnic_cuda.ctx_push(cmr->ctx) == 0;
}

static void tnic_cuda_ctx_leave(void)
{
    tnic_cu_ctx_t ctx;

    tnic_cuda.ctx_pop(&ctx);
}

/* One copy per physical allocation the range crosses: a VMM range maps
 * several back to back, and a driver copies within one */
static int tnic_cuda_copy(void *mr_priv, uint64_t addr, void *host,
                          size_t len, int to_device)
{
    tnic_cu_ptr_t base;
    size_t size, n;
    int ret = 0;

    if (!tnic_cuda_ctx_enter(mr_priv)) {
        return EFAULT;
    }
    while ((len > 0) && (ret == 0)) {
        if ((tnic_cuda.mem_get_address_range(&base, &size, addr) != 0) ||
            (addr >= base + size)) {
            ret = EFAULT;
            break;
        }
        n = base + size - addr;
        if (n > len) {
            n = len;
        }
        if ((to_device ? tnic_cuda.memcpy_htod(addr, host, n) :
                         tnic_cuda.memcpy_dtoh(host, addr, n)) != 0) {
            ret = EFAULT;
        }
        addr += n;
        host  = (char*)host + n;
        len  -= n;
    }
    tnic_cuda_ctx_leave();
    return ret;
}

static int tnic_cuda_mem_read(void *mr_priv, uint64_t addr, void *dst,
                              size_t len)
{
    return tnic_cuda_copy(mr_priv, addr, dst, len, 0);
}

static int tnic_cuda_mem_write(void *mr_priv, uint64_t addr, const void *src,
                               size_t len)
{
    return tnic_cuda_copy(mr_priv, addr, (void*)src, len, 1);
}

static int tnic_cuda_mem_atomic(void *mr_priv, uint64_t addr, int is_cswap,
                                uint64_t compare_add, uint64_t swap,
                                uint64_t *orig_p)
{
    uint64_t value;
    int ret;

    pthread_mutex_lock(&tnic_cuda.atomic_lock);
    ret = tnic_cuda_mem_read(mr_priv, addr, &value, sizeof(value));
    if (ret == 0) {
        *orig_p = value;
        if (is_cswap) {
            value = (value == compare_add) ? swap : value;
        } else {
            value += compare_add;
        }
        ret = tnic_cuda_mem_write(mr_priv, addr, &value, sizeof(value));
    }
    pthread_mutex_unlock(&tnic_cuda.atomic_lock);
    return ret;
}

static void tnic_cuda_mem_release(void *mr_priv)
{
    tnic_cuda_mr_t *cmr = mr_priv;

    tnic_cuda.primary_ctx_release(cmr->dev);
    free(cmr);
}

static const tnic_mem_ops_t tnic_mem_cuda_ops = {
    .read    = tnic_cuda_mem_read,
    .write   = tnic_cuda_mem_write,
    .atomic  = tnic_cuda_mem_atomic,
    .release = tnic_cuda_mem_release
};

static int tnic_cuda_mr_priv(tnic_cu_device_t dev, void **priv_p)
{
    tnic_cuda_mr_t *cmr = malloc(sizeof(*cmr));

    if (cmr == NULL) {
        return ENOMEM;
    }
    cmr->dev = dev;
    if (tnic_cuda.primary_ctx_retain(&cmr->ctx, dev) != 0) {
        free(cmr);
        return EFAULT;
    }
    *priv_p = cmr;
    return 0;
}

int tnic_cuda_reg_classify(void *addr, size_t length,
                           const tnic_mem_ops_t **ops_p, void **priv_p)
{
    tnic_cu_device_t dev;

    if (!tnic_cuda_is_device((uintptr_t)addr, &dev)) {
        *ops_p  = &tnic_mem_host_ops;
        *priv_p = NULL;
        return 0;
    }
    /* without the peer-memory client the kernel pins no device page */
    if (!tnic_fault.peermem || (dev < 0) ||
        !tnic_cuda_range_mapped((uintptr_t)addr, length)) {
        return EFAULT;
    }
    *ops_p = &tnic_mem_cuda_ops;
    return tnic_cuda_mr_priv(dev, priv_p);
}

/* The size of a dma-buf fd, and whether it is one: the kernel's dma-buf
 * (fdinfo names its exporter) or the stand-in CUDA driver's memfd export */
static int tnic_cuda_dmabuf_size(int fd, uint64_t *size_p)
{
    char path[64], line[128], target[256];
    int is_dmabuf = 0;
    struct stat st;
    ssize_t n;
    FILE *f;

    *size_p = 0;
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
    f = fopen(path, "r");
    if (f == NULL) {
        return EBADF;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (!strncmp(line, "exp_name:", 9)) {
            is_dmabuf = 1;
        } else if (!strncmp(line, "size:", 5)) {
            *size_p = strtoull(line + 5, NULL, 10);
        }
    }
    fclose(f);
    if (is_dmabuf) {
        return (*size_p != 0) ? 0 : EINVAL;
    }

    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    n = readlink(path, target, sizeof(target) - 1);
    if (n < 0) {
        return EBADF;
    }
    target[n] = '\0';
    if (strncmp(target, "/memfd:rc_gdr_fake_dmabuf", 25) ||
        (fstat(fd, &st) != 0)) {
        return EINVAL;  /* an fd, but no dma-buf: as the kernel's dma_buf_get */
    }
    *size_p = st.st_size;
    return 0;
}

int tnic_dmabuf_resolve(int fd, uint64_t offset, size_t length,
                        uint64_t iova, const tnic_mem_ops_t **ops_p,
                        void **priv_p)
{
    tnic_cu_device_t dev;
    uint64_t size;
    int ret;

    if (fd < 0) {
        return EBADF;   /* the probe rdma-core's callers make with fd -1 */
    }
    ret = tnic_cuda_dmabuf_size(fd, &size);
    if (ret != 0) {
        return ret;
    }
    if ((offset > size) || (length > size - offset) || (iova < offset)) {
        return EINVAL;
    }
    /* the exported pages are [iova - offset, + size): device memory, mapped
     * whole, and the accesses reach exactly [iova, iova + length) */
    if (!tnic_cuda_is_device(iova, &dev) || (dev < 0) ||
        !tnic_cuda_range_mapped(iova - offset, size)) {
        return EINVAL;
    }
    *ops_p = &tnic_mem_cuda_ops;
    return tnic_cuda_mr_priv(dev, priv_p);
}
