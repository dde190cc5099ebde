/*
 * rc_gdr memory domain: one per verbs device. Registers host memory (and,
 * through the gate, CUDA memory) behind the registration cache.
 */

#ifndef UCT_RC_GDR_MD_H_
#define UCT_RC_GDR_MD_H_

#include "rc_gdr_glue.h"
#include "rc_gdr_gate.h"
#include "rc_gdr_rcache.h"

#include <ucs/datastruct/khash.h>

#include <infiniband/verbs.h>
#include <pthread.h>


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
} uct_rc_gdr_md_config_t;


/* What the cache keeps per region, after the region header. */
typedef struct uct_rc_gdr_mr {
    struct ibv_mr     *mr;          /* NULL: a bounce registration, no NIC
                                       key: the bounce lane moves its data */
    uint8_t           rkey_flags;   /* UCT_RC_GDR_RKEY_FLAG_xx */
    uint8_t           lane;         /* uct_rc_gdr_lane_t; host memory: GDR */
    int8_t            gpu;          /* CUDA ordinal, -1 for host memory */
    uint32_t          token;        /* bounce registrations: what the rkey
                                       carries instead of a NIC key */
} uct_rc_gdr_mr_t;


KHASH_MAP_INIT_INT(uct_rc_gdr_token, uct_rc_gdr_rcache_region_t*);


/* What the gate decided for one GPU seen from this md's NIC. */
typedef struct uct_rc_gdr_md_gpu {
    uct_rc_gdr_lane_t lane[UCT_RC_GDR_DIR_LAST];
    int               flush_read;   /* writes into it need a read-flush */
} uct_rc_gdr_md_gpu_t;


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
} uct_rc_gdr_md_stats_t;


typedef struct uct_rc_gdr_md {
    uct_md_t                  super;
    struct ibv_context        *ibv_ctx;
    struct ibv_pd             *pd;
    struct ibv_device_attr    dev_attr;
    char                      name[UCT_MD_NAME_MAX];
    uct_rc_gdr_rcache_t       *rcache;
    int                       mr_access;   /* ibv_access_flags of every MR */
    int                       num_gpus;    /* 0: no CUDA driver or GPU */
    uct_rc_gdr_md_gpu_t       *gpus;       /* by CUDA ordinal */
    int                       emulated_gpu;
    uct_rc_gdr_md_stats_t     stats;
    /* Bounce registrations by token: a peer's bounce-lane request names
     * one, and is served only inside that registration. */
    pthread_mutex_t           token_lock;
    khash_t(uct_rc_gdr_token) tokens;
    uint32_t                  next_token;
} uct_rc_gdr_md_t;


/* The memh handed to UCT users is the cache region. */
static inline uct_rc_gdr_mr_t *uct_rc_gdr_memh_mr(uct_mem_h memh)
{
    return (uct_rc_gdr_mr_t*)uct_rc_gdr_rcache_region_priv(
            (uct_rc_gdr_rcache_region_t*)memh);
}


static inline uint32_t uct_rc_gdr_memh_lkey(uct_mem_h memh)
{
    struct ibv_mr *mr = uct_rc_gdr_memh_mr(memh)->mr;

    return (mr == NULL) ? 0 : mr->lkey;
}


/* Registers a buffer the transport itself owns (bounce buffers, staging). */
ucs_status_t uct_rc_gdr_md_reg_internal(uct_rc_gdr_md_t *md, void *address,
                                        size_t length, struct ibv_mr **mr_p);

/**
 * Validates a bounce-lane target named by a peer: @a token must be a live
 * bounce registration of this md and [address, address + length) inside it.
 * On success *gpu_p is the CUDA ordinal of the memory.
 *
 * @return UCS_OK, or UCS_ERR_INVALID_ADDR (logged: the peer sent a stale or
 *         corrupt key or address).
 */
ucs_status_t uct_rc_gdr_md_bounce_target(uct_rc_gdr_md_t *md, uint32_t token,
                                         uint64_t address, size_t length,
                                         int *gpu_p);

/* Exported for tests: the counters of an rc_gdr md. */
ucs_status_t uct_rc_gdr_md_stats_query(uct_md_h md,
                                       uct_rc_gdr_md_stats_t *stats);

#endif
