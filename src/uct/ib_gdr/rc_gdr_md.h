/*
 * rc_gdr memory domain: one per verbs device. Registers host memory (and,
 * through the gate, CUDA memory) behind the registration cache.
 */

#ifndef UCT_RC_GDR_MD_H_
#define UCT_RC_GDR_MD_H_

#include "rc_gdr_glue.h"
#include "rc_gdr_addr.h"
#include "rc_gdr_gate.h"
#include "rc_gdr_md_token.h"
#include "rc_gdr_rcache.h"

#include <ucs/datastruct/khash.h>

#include <infiniband/verbs.h>


#define UCT_RC_GDR_COMPONENT_NAME "rc_gdr"
#define UCT_RC_GDR_CONFIG_PREFIX  "RC_GDR_"


typedef struct uct_rc_gdr_md_config {
    uct_md_config_t super;
    /* The capability gate's knobs, parsed by rc_gdr_gate.c */
    char            *max_distance;
    char            *nic_reads_gpu;
    char            *nic_writes_gpu;
    char            *reg_methods;
    char            *bounce;
    char            *require;
    /* The registration cache */
    int             fork_init;      /* ucs_ternary_auto_value_t */
    int             rcache;         /* ucs_ternary_auto_value_t */
    size_t          rcache_max_size;
    unsigned long   rcache_max_regions;
    int             relaxed_order;  /* ucs_config_on_off_auto_t */
} uct_rc_gdr_md_config_t;


/*
 * What the cache keeps per region, after the region header. Free hooks run
 * on any thread and release the NIC registration under the cache lock; the
 * data path reads without it, so what it reads (lkey, rkey_flags, lane, gpu)
 * is written once, before the region's first handle is given out, and never
 * changed: a handle used after its memory was freed posts a stale key (a
 * completion error), never reads a released ibv_mr.
 */
typedef struct uct_rc_gdr_mr {
    struct ibv_mr     *mr;          /* NULL: a bounce registration, no NIC
                                       key: the bounce lane moves its data.
                                       Under the cache lock only */
    uint32_t          lkey;         /* mr->lkey, 0 without a NIC key */
    uint8_t           rkey_flags;   /* UCT_RC_GDR_RKEY_FLAG_xx; FLAG_NIC:
                                       registered with the NIC */
    uint8_t           lane;         /* uct_rc_gdr_lane_t; host memory: GDR */
    int8_t            gpu;          /* CUDA ordinal, -1 for host memory */
    uint8_t           registered;   /* 0 once released (memory freed) */
    uint64_t          token;        /* one-direction GPU memory: its NIC key
                                       and random high bits (rkey token_hi),
                                       which peers name to bounce the other
                                       direction; 0 otherwise */
} uct_rc_gdr_mr_t;


/* What the gate decided for one GPU seen from this md's NIC. */
typedef struct uct_rc_gdr_md_gpu {
    uct_rc_gdr_lane_t lane[UCT_RC_GDR_DIR_LAST];
    int               flush_read;   /* writes into it need a read-flush */
    ucs_sys_device_t  sys_dev;      /* in UCX's topology, for memory
                                       queries: UCP ranks lanes by it */
} uct_rc_gdr_md_gpu_t;


/* Why the NIC refused to register memory at run time */
typedef enum {
    /* ENOMEM, EAGAIN: the NIC's MR count, the locked-memory limit or the
       GPU's BAR1 space ran out */
    UCT_RC_GDR_MD_REG_CAUSE_LIMIT,
    /* The mechanism refused this allocation (EFAULT, EINVAL, EPERM, ...) */
    UCT_RC_GDR_MD_REG_CAUSE_REFUSED,
    /* The CUDA driver did not export it as a DMA-BUF */
    UCT_RC_GDR_MD_REG_CAUSE_EXPORT,
    UCT_RC_GDR_MD_REG_CAUSE_LAST
} uct_rc_gdr_md_reg_cause_t;


/* Counters, for tests and diagnostics (uct_rc_gdr_md_stats_query). */
typedef struct uct_rc_gdr_md_stats {
    uint64_t          size;         /* sizeof(uct_rc_gdr_md_stats_t) */
    uint64_t          host_regs;    /* NIC registrations of host memory */
    uint64_t          dmabuf_regs;  /* GPU memory registered by DMA-BUF */
    uint64_t          peermem_regs; /* GPU memory registered by pointer */
    uint64_t          bounce_regs;  /* GPU memory without a NIC key */
    uint64_t          cache_hits;
    uint64_t          cache_entries;
    uint64_t          invalidations;
    uint64_t          num_gpus;
    uint64_t          emulated_gpu; /* 1: the stand-in CUDA driver */
    /* Appended later: a caller built for the fields above gets those */
    uint64_t          cache_misses;
    uint64_t          cache_kept;   /* cached regions nobody holds */
    uint64_t          cache_evictions; /* kept ones released for limits */
    uint64_t          deregs;       /* registrations released */
    uint64_t          host_cache;   /* UCT_RC_GDR_RCACHE_GET_FLAG_xx of */
    uint64_t          gpu_cache;    /* host and of GPU memory */
    /* GPU registrations the NIC refused at run time, served by the bounce
     * lane instead, by cause (uct_rc_gdr_md_reg_cause_t) */
    uint64_t          fallbacks[UCT_RC_GDR_MD_REG_CAUSE_LAST];
    uint64_t          limit_retries; /* registrations tried again after the
                                        kept ones were released at a limit */
} uct_rc_gdr_md_stats_t;


typedef struct uct_rc_gdr_md {
    uct_md_t                  super;
    struct ibv_context        *ibv_ctx;
    struct ibv_pd             *pd;
    struct ibv_device_attr    dev_attr;
    char                      name[UCT_MD_NAME_MAX];
    ucs_sys_device_t          sys_dev;     /* the NIC's PCI function in
                                              UCX's topology */
    int                       reg_access;  /* added to every registration's
                                              access: relaxed ordering */
    uct_rc_gdr_rcache_t       *rcache;
    /* UCT_RC_GDR_RCACHE_GET_FLAG_xx for host and for GPU memory: shared
     * and kept only where the md learns when the memory goes away */
    unsigned                  rcache_host_flags;
    unsigned                  rcache_gpu_flags;
    int                       mem_events;  /* subscribed to unmap events */
    int                       cuda_events; /* CUDA free hooks installed */
    unsigned                  fork_generation; /* forks before its opening:
                                                  its events are ignored in a
                                                  child forked after it */
    int                       num_gpus;    /* 0: no CUDA driver or GPU */
    uct_rc_gdr_md_gpu_t       *gpus;       /* by CUDA ordinal */
    int                       emulated_gpu;
    /* A GPU registration the NIC refuses at run time falls back to the
     * bounce lane (UCX_RC_GDR_BOUNCE allows it, REQUIRE is not gdr) */
    int                       bounce_fallback;
    unsigned                  causes_logged; /* UCS_BIT(cause): said once */
    unsigned                  refusals_logged; /* peers' bounce requests,
                                                  UCS_BIT(why): said once */
    uct_rc_gdr_md_stats_t     stats;
    /* What a peer's bounce-lane request may name, by token; served only
     * inside the bytes registered. Under the cache lock, which every
     * change of a registration holds. */
    khash_t(uct_rc_gdr_token) tokens;
    uint64_t                  next_stamp;
} uct_rc_gdr_md_t;


/*
 * The memh handed to UCT users is a cache handle, one per registration; its
 * region carries the NIC registration. Unchecked: for memory handles a user
 * holds (a stale one is refused by mem_dereg, not here).
 */
static inline uct_rc_gdr_mr_t *uct_rc_gdr_memh_mr(uct_mem_h memh)
{
    return (uct_rc_gdr_mr_t*)uct_rc_gdr_rcache_region_priv(
            uct_rc_gdr_rcache_handle_ref((uintptr_t)memh)->region);
}


static inline uint32_t uct_rc_gdr_memh_lkey(uct_mem_h memh)
{
    return uct_rc_gdr_memh_mr(memh)->lkey;
}


/* Whether the NIC holds a registration of the memory (lock-free: see
 * uct_rc_gdr_mr_t) */
static inline int uct_rc_gdr_mr_is_nic(const uct_rc_gdr_mr_t *mr)
{
    return !!(mr->rkey_flags & UCT_RC_GDR_RKEY_FLAG_NIC);
}


/* Registers a buffer the transport itself owns and only the local NIC
 * touches (staging buffers): local write access, nothing remote. */
ucs_status_t uct_rc_gdr_md_reg_internal(uct_rc_gdr_md_t *md, void *address,
                                        size_t length, struct ibv_mr **mr_p);

/* Exported for tests: the counters of an rc_gdr md. */
ucs_status_t uct_rc_gdr_md_stats_query(uct_md_h md,
                                       uct_rc_gdr_md_stats_t *stats);

#endif
