/**
 * rc_gdr: the CUDA driver shim.
 *
 * The module must load, and serve host memory, on machines without CUDA, so
 * libcuda is never linked: it is opened with dlopen() on first use and its
 * entry points are resolved by version. When the driver is absent or unusable
 * every function below returns UCS_ERR_NO_DEVICE and
 * uct_rc_gdr_cuda_is_available() returns 0.
 *
 * This header does not include cuda.h: driver objects (contexts, streams,
 * events) are opaque handles, device pointers are plain pointers (CUDA uses
 * unified addressing on every platform rc_gdr supports).
 *
 * Environment:
 *   RC_GDR_CUDA_LIBRARY  library to open instead of "libcuda.so.1": a name
 *                        for the dynamic loader or a path. For tests (the
 *                        emulated driver in test/mocks) and for sites
 *                        with an unusual driver installation. Read once, by
 *                        the first call into the shim.
 */

#ifndef UCT_RC_GDR_CUDA_H_
#define UCT_RC_GDR_CUDA_H_

#include <ucs/type/status.h>
#include <ucs/memory/memory_type.h>
#include <ucs/sys/compiler_def.h>

#include <stddef.h>
#include <stdint.h>

BEGIN_C_DECLS

#define UCT_RC_GDR_CUDA_LIBRARY_ENV      "RC_GDR_CUDA_LIBRARY"
#define UCT_RC_GDR_CUDA_LIBRARY_DEFAULT  "libcuda.so.1"

/* "dddd:bb:dd.f" and a terminator, with room for drivers that print more */
#define UCT_RC_GDR_CUDA_PCI_BUS_ID_MAX   32
#define UCT_RC_GDR_CUDA_DEV_NAME_MAX     128


/* Opaque driver objects (CUcontext, CUstream, CUevent) */
typedef struct uct_rc_gdr_cuda_ctx    *uct_rc_gdr_cuda_ctx_h;
typedef struct uct_rc_gdr_cuda_stream *uct_rc_gdr_cuda_stream_h;
typedef struct uct_rc_gdr_cuda_event  *uct_rc_gdr_cuda_event_h;


/*
 * Driver
 */

typedef struct uct_rc_gdr_cuda_driver_info {
    const char *library;          /* what was passed to dlopen() */
    int        driver_version;    /* cuDriverGetVersion(), e.g. 13000 */
    int        by_proc_address;   /* 1: entry points from cuGetProcAddress_v2,
                                     0: from dlsym() of versioned names */
    unsigned   num_missing;       /* optional entry points the driver lacks */
    int        emulated;          /* 1: the project's stand-in driver
                                     (test/mocks): "GPU" memory is host
                                     memory, and results must say so */
    int        placed;            /* 1: emulated GPUs standing at the PCI
                                     functions they report (a guest's):
                                     the gate judges their place */
} uct_rc_gdr_cuda_driver_info_t;


/**
 * Open the driver and run cuInit(0), once per process (later calls return
 * the first outcome). Every other function calls it implicitly; tests call it
 * explicitly after choosing the library with RC_GDR_CUDA_LIBRARY.
 *
 * @return UCS_OK when the driver is usable, UCS_ERR_NO_DEVICE otherwise.
 */
ucs_status_t uct_rc_gdr_cuda_init(void);

/** 1 when the driver is loaded and initialized, 0 otherwise. */
int uct_rc_gdr_cuda_is_available(void);

/**
 * The library the shim opens (or opened): $RC_GDR_CUDA_LIBRARY when set and
 * not empty, "libcuda.so.1" otherwise. Does not load anything.
 */
const char *uct_rc_gdr_cuda_library_name(void);

ucs_status_t uct_rc_gdr_cuda_driver_info(uct_rc_gdr_cuda_driver_info_t *info_p);

/** Text of a CUresult (cuGetErrorString when the driver is loaded). */
const char *uct_rc_gdr_cuda_strerror(int result);


/*
 * Devices
 */

/* CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING */
typedef enum {
    UCT_RC_GDR_CUDA_WRITES_ORDERING_NONE        = 0,
    UCT_RC_GDR_CUDA_WRITES_ORDERING_OWNER       = 100,
    UCT_RC_GDR_CUDA_WRITES_ORDERING_ALL_DEVICES = 200
} uct_rc_gdr_cuda_writes_ordering_t;

/* CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS bits */
enum {
    UCT_RC_GDR_CUDA_FLUSH_WRITES_OPTION_HOST   = UCS_BIT(0),
    UCT_RC_GDR_CUDA_FLUSH_WRITES_OPTION_MEMOPS = UCS_BIT(1)
};

/* Which fields of uct_rc_gdr_cuda_dev_attr_t could be read from the driver */
enum {
    UCT_RC_GDR_CUDA_DEV_ATTR_NAME            = UCS_BIT(0),
    UCT_RC_GDR_CUDA_DEV_ATTR_PCI_BUS_ID      = UCS_BIT(1),
    UCT_RC_GDR_CUDA_DEV_ATTR_CC              = UCS_BIT(2),
    UCT_RC_GDR_CUDA_DEV_ATTR_GDR             = UCS_BIT(3),
    UCT_RC_GDR_CUDA_DEV_ATTR_DMABUF          = UCS_BIT(4),
    UCT_RC_GDR_CUDA_DEV_ATTR_WRITES_ORDERING = UCS_BIT(5),
    UCT_RC_GDR_CUDA_DEV_ATTR_FLUSH_OPTIONS   = UCS_BIT(6),
    UCT_RC_GDR_CUDA_DEV_ATTR_VMM             = UCS_BIT(7),
    UCT_RC_GDR_CUDA_DEV_ATTR_MEMPOOLS        = UCS_BIT(8),
    UCT_RC_GDR_CUDA_DEV_ATTR_PCI_LOCATION    = UCS_BIT(9)
};

/*
 * One GPU as the driver describes it. A field is meaningful only when its bit
 * is set in valid_mask: an older driver that does not know an attribute is a
 * fact the capability gate records, not a zero. The struct is plain data so
 * that gate tests can build synthetic GPUs.
 */
typedef struct uct_rc_gdr_cuda_dev_attr {
    int      ordinal;
    uint64_t valid_mask;              /* UCT_RC_GDR_CUDA_DEV_ATTR_* */
    char     name[UCT_RC_GDR_CUDA_DEV_NAME_MAX];
    char     pci_bus_id[UCT_RC_GDR_CUDA_PCI_BUS_ID_MAX]; /* "0000:17:00.0",
                                                            lower case */
    int      cc_major;
    int      cc_minor;
    int      gdr_supported;           /* GPU_DIRECT_RDMA_SUPPORTED */
    int      dmabuf_supported;        /* DMA_BUF_SUPPORTED */
    int      writes_ordering;         /* uct_rc_gdr_cuda_writes_ordering_t */
    int      flush_writes_options;    /* UCT_RC_GDR_CUDA_FLUSH_WRITES_... */
    int      vmm_supported;           /* VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
    int      mempools_supported;      /* MEMORY_POOLS_SUPPORTED */
    int      pci_domain;              /* PCI_DOMAIN_ID, PCI_BUS_ID and */
    int      pci_bus;                 /* PCI_DEVICE_ID: where UCX's topology */
    int      pci_device;              /* places the GPU (function 0) */
} uct_rc_gdr_cuda_dev_attr_t;


ucs_status_t uct_rc_gdr_cuda_device_count(int *count_p);

/**
 * Read the attributes of one device. Attributes the driver cannot report are
 * left out of valid_mask (and logged at debug level); only a bad ordinal or
 * an unusable driver is an error.
 */
ucs_status_t
uct_rc_gdr_cuda_device_attr_query(int ordinal,
                                  uct_rc_gdr_cuda_dev_attr_t *attr_p);

const char *uct_rc_gdr_cuda_writes_ordering_str(int writes_ordering);


/*
 * Memory classification
 */

/* What kind of memory a pointer refers to, finer than ucs_memory_type_t */
typedef enum {
    UCT_RC_GDR_CUDA_MEM_HOST,     /* not known to CUDA */
    UCT_RC_GDR_CUDA_MEM_PINNED,   /* cuMemHostAlloc, cuMemHostRegister */
    UCT_RC_GDR_CUDA_MEM_DEVICE,   /* cuMemAlloc, VMM (cuMemCreate + cuMemMap) */
    UCT_RC_GDR_CUDA_MEM_MANAGED,  /* cuMemAllocManaged: may migrate to host */
    UCT_RC_GDR_CUDA_MEM_POOL,     /* cuMemAllocAsync (stream-ordered pool):
                                     the pool may hand the range to another
                                     allocation without any free call */
    UCT_RC_GDR_CUDA_MEM_LAST
} uct_rc_gdr_cuda_mem_kind_t;

enum {
    /* base_address/alloc_length come from cuMemGetAddressRange; without it
     * they are the caller's range */
    UCT_RC_GDR_CUDA_MEM_INFO_RANGE   = UCS_BIT(0),
    /* the driver answered the mempool attribute: without it pool memory
     * cannot be told from device memory and reads as DEVICE */
    UCT_RC_GDR_CUDA_MEM_INFO_MEMPOOL = UCS_BIT(1)
};

typedef struct uct_rc_gdr_cuda_mem_info {
    uct_rc_gdr_cuda_mem_kind_t kind;
    ucs_memory_type_t          mem_type;       /* HOST, CUDA or CUDA_MANAGED */
    unsigned                   flags;          /* UCT_RC_GDR_CUDA_MEM_INFO_* */
    int                        device_ordinal; /* -1 when none */
    uint64_t                   buffer_id;      /* 0 for host memory */
    void                       *base_address;
    size_t                     alloc_length;
    uct_rc_gdr_cuda_ctx_h      context;        /* NULL for pool, VMM memory */
    void                       *mempool;       /* CUmemoryPool or NULL */
} uct_rc_gdr_cuda_mem_info_t;


/**
 * Classify [addr, addr+len) with one cuPointerGetAttributes call. Pointers
 * CUDA does not know are host memory (UCS_OK, kind HOST). For VMM memory the
 * range is the one mapping that holds addr, not the whole reservation.
 */
ucs_status_t uct_rc_gdr_cuda_mem_query(const void *addr, size_t len,
                                       uct_rc_gdr_cuda_mem_info_t *info_p);

const char *uct_rc_gdr_cuda_mem_kind_str(uct_rc_gdr_cuda_mem_kind_t kind);

/**
 * Whether [addr, addr+len) lies inside CUDA memory: the allocation @a info
 * describes (uct_rc_gdr_cuda_mem_query of addr) and, for VMM memory, the
 * mappings of the same device that continue it without a gap, so a range
 * spanning contiguous mapped chunks is accepted whole. Memory of any other
 * kind ends at its allocation: two cuMemAlloc blocks may be adjacent, and
 * one must never be reached through the other's registration.
 *
 * @return UCS_OK; UCS_ERR_INVALID_ADDR when the range leaves the memory,
 *         with the end of what it covers in *end_p; UCS_ERR_UNSUPPORTED when
 *         the driver did not tell the allocation's range.
 */
ucs_status_t
uct_rc_gdr_cuda_mem_range_check(const void *addr, size_t len,
                                const uct_rc_gdr_cuda_mem_info_t *info,
                                uintptr_t *end_p);

/**
 * The driver's process-wide unique id of the allocation holding addr (one
 * cuPointerGetAttribute call). A freed and reallocated address gets a new id,
 * which is how the registration cache proves a hit is not stale.
 *
 * @return UCS_OK, UCS_ERR_NO_ELEM when addr is not (or no longer) CUDA
 *         memory, UCS_ERR_NO_DEVICE without a driver.
 */
ucs_status_t uct_rc_gdr_cuda_buffer_id(const void *addr, uint64_t *id_p);

/**
 * Set CU_POINTER_ATTRIBUTE_SYNC_MEMOPS on the allocation holding addr, so
 * synchronous copies into it complete before an RDMA access can observe it.
 */
ucs_status_t uct_rc_gdr_cuda_set_sync_memops(const void *addr);


/*
 * DMA-BUF
 */

/**
 * The range a DMA-BUF export covers: [floor(addr), ceil(addr + len)) in
 * page_size units; offset is where addr lies inside it, and is what
 * ibv_reg_dmabuf_mr needs (not 0: addr may be interior to a page).
 * page_size must be a power of 2.
 */
static UCS_F_ALWAYS_INLINE void
uct_rc_gdr_cuda_dmabuf_range(const void *addr, size_t len, size_t page_size,
                             void **aligned_base_p, size_t *aligned_len_p,
                             size_t *offset_p)
{
    uintptr_t start = (uintptr_t)addr;
    uintptr_t base  = start & ~((uintptr_t)page_size - 1);
    uintptr_t end   = (start + len + page_size - 1) &
                      ~((uintptr_t)page_size - 1);

    *aligned_base_p = (void*)base;
    *aligned_len_p  = end - base;
    *offset_p       = start - base;
}

/**
 * Export [addr, addr+len), page-aligned, as a DMA-BUF file descriptor
 * (cuMemGetHandleForAddressRange). The whole aligned range is exported, also
 * when it spans several VMM mappings; if the driver refuses such a range the
 * export fails, it is never shortened. The caller owns *fd_p and closes it
 * once the memory region is registered.
 *
 * @param page_size  alignment of the exported range, 0 for the host page
 *                   size (what the driver requires).
 *
 * @return UCS_ERR_UNSUPPORTED when the driver or device has no DMA-BUF
 *         export, UCS_ERR_INVALID_PARAM for a range it refuses.
 */
ucs_status_t uct_rc_gdr_cuda_dmabuf_export(const void *addr, size_t len,
                                           size_t page_size, int *fd_p,
                                           size_t *offset_p,
                                           void **aligned_base_p,
                                           size_t *aligned_len_p);


/*
 * Contexts
 */

/** Retain the primary context of a device (pair with ctx_release). */
ucs_status_t uct_rc_gdr_cuda_ctx_retain(int ordinal,
                                        uct_rc_gdr_cuda_ctx_h *ctx_p);

ucs_status_t uct_rc_gdr_cuda_ctx_release(int ordinal);

ucs_status_t uct_rc_gdr_cuda_ctx_set_current(uct_rc_gdr_cuda_ctx_h ctx);

ucs_status_t uct_rc_gdr_cuda_ctx_get_current(uct_rc_gdr_cuda_ctx_h *ctx_p);

/** Retain the primary context of a device and make it current. */
ucs_status_t uct_rc_gdr_cuda_ctx_activate(int ordinal,
                                          uct_rc_gdr_cuda_ctx_h *ctx_p);


/*
 * Allocation (in the current context)
 */

ucs_status_t uct_rc_gdr_cuda_mem_alloc(size_t len, void **ptr_p);

ucs_status_t uct_rc_gdr_cuda_mem_free(void *ptr);

/* Pinned host memory, usable from every context (CU_MEMHOSTALLOC_PORTABLE) */
ucs_status_t uct_rc_gdr_cuda_host_alloc(size_t len, void **ptr_p);

ucs_status_t uct_rc_gdr_cuda_host_free(void *ptr);

/* Allocations only tests make (VMM, managed, stream-ordered, registered host
 * memory): test/gtest/cuda_alloc.h */


/*
 * Streams and events
 */

/* A stream that does not synchronize with the legacy default stream */
ucs_status_t uct_rc_gdr_cuda_stream_create(uct_rc_gdr_cuda_stream_h *stream_p);

ucs_status_t uct_rc_gdr_cuda_stream_destroy(uct_rc_gdr_cuda_stream_h stream);

ucs_status_t
uct_rc_gdr_cuda_stream_synchronize(uct_rc_gdr_cuda_stream_h stream);

/* An event without timing (cheaper to record and query) */
ucs_status_t uct_rc_gdr_cuda_event_create(uct_rc_gdr_cuda_event_h *event_p);

ucs_status_t uct_rc_gdr_cuda_event_record(uct_rc_gdr_cuda_event_h event,
                                          uct_rc_gdr_cuda_stream_h stream);

/** @return UCS_OK when the work before the event is done, UCS_INPROGRESS
 *          while it is not. */
ucs_status_t uct_rc_gdr_cuda_event_query(uct_rc_gdr_cuda_event_h event);

ucs_status_t uct_rc_gdr_cuda_event_synchronize(uct_rc_gdr_cuda_event_h event);

ucs_status_t uct_rc_gdr_cuda_event_destroy(uct_rc_gdr_cuda_event_h event);


/*
 * Copies. The asynchronous ones need pinned host memory to overlap.
 */

ucs_status_t uct_rc_gdr_cuda_memcpy_dtoh_async(void *dst, const void *src,
                                               size_t len,
                                               uct_rc_gdr_cuda_stream_h stream);

ucs_status_t uct_rc_gdr_cuda_memcpy_htod_async(void *dst, const void *src,
                                               size_t len,
                                               uct_rc_gdr_cuda_stream_h stream);

ucs_status_t uct_rc_gdr_cuda_memcpy_dtoh(void *dst, const void *src,
                                         size_t len);

ucs_status_t uct_rc_gdr_cuda_memcpy_htod(void *dst, const void *src,
                                         size_t len);

END_C_DECLS

#endif
