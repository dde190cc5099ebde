/**
 * Registration cache of the rc_gdr memory domain, for host and CUDA memory.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_RC_GDR_RCACHE_H_
#define UCT_RC_GDR_RCACHE_H_

#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

#include <stddef.h>
#include <stdint.h>

BEGIN_C_DECLS

/*
 * A cached registration covers whole pages. A get reuses a region only when
 * the region fully contains the request and has the same allocation identity
 * (buffer id and memory type); anything else gets its own region, so regions
 * may overlap. A region lives while it has references; its NIC registration
 * is released at the last put, or at once when the memory under it is freed
 * (invalidate), whichever comes first.
 */

typedef struct uct_rc_gdr_rcache uct_rc_gdr_rcache_t;


typedef struct uct_rc_gdr_rcache_region {
    uintptr_t start;     /* page-rounded, inclusive */
    uintptr_t end;       /* page-rounded, exclusive */
    unsigned  refcount;
    uint64_t  buffer_id; /* allocation identity (CUDA buffer ID), 0 = host */
    int       mem_type;  /* ucs_memory_type_t */

    /* Private to the cache, read and written under its lock */
    struct uct_rc_gdr_rcache_region *left;         /* interval tree */
    struct uct_rc_gdr_rcache_region *right;
    struct uct_rc_gdr_rcache_region *next_release; /* pending release */
    uintptr_t                       max_end;       /* largest end in subtree */
    uintptr_t                       used_start;    /* hull of the bytes asked */
    uintptr_t                       used_end;      /* for with this buffer */
    int                             height;        /* AVL, leaf = 1 */
    unsigned                        flags;

    /* followed by params.priv_size bytes for the md, see
       uct_rc_gdr_rcache_region_priv() */
} uct_rc_gdr_rcache_region_t;


typedef struct uct_rc_gdr_rcache_ops {
    /* Register [region->start, region->end); may write the region's priv
       area. Called with the cache lock held. */
    ucs_status_t (*mem_reg)(void *arg, uct_rc_gdr_rcache_region_t *region);

    /* Release what mem_reg made. Called once per successful mem_reg, with
       the cache lock held; may call uct_rc_gdr_rcache_invalidate() (a memory
       free hook running inside the deregistration). */
    void         (*mem_dereg)(void *arg, uct_rc_gdr_rcache_region_t *region);
} uct_rc_gdr_rcache_ops_t;


typedef struct uct_rc_gdr_rcache_params {
    size_t                        page_size; /* rounding, a power of 2 */
    size_t                        priv_size; /* bytes after each region */
    const uct_rc_gdr_rcache_ops_t *ops;
    void                          *arg;      /* passed to ops */
    const char                    *name;     /* for logs, may be NULL */
} uct_rc_gdr_rcache_params_t;


typedef struct uct_rc_gdr_rcache_stats {
    uint64_t entries;       /* regions now in the cache (found by get) */
    uint64_t live;          /* regions a put still accepts: entries plus
                               invalidated regions that still have
                               references */
    uint64_t hits;          /* get served by an existing region */
    uint64_t misses;        /* get that had to register */
    uint64_t nic_regs;      /* successful ops->mem_reg calls */
    uint64_t nic_deregs;    /* ops->mem_dereg calls */
    uint64_t invalidations; /* regions invalidated because memory was freed
                               or its buffer id changed */
    uint64_t lookup_steps;  /* tree nodes examined by get: O(log n) each
                               when few regions contain the request */
} uct_rc_gdr_rcache_stats_t;


ucs_status_t
uct_rc_gdr_rcache_create(const uct_rc_gdr_rcache_params_t *params,
                         uct_rc_gdr_rcache_t **rcache_p);


/* Deregisters what is left and warns about references still held */
void uct_rc_gdr_rcache_destroy(uct_rc_gdr_rcache_t *rcache);


/*
 * Take a reference on a region covering [address, address + length) rounded
 * to pages, registering a new one when no live region of the same buffer id
 * and memory type contains it.
 */
ucs_status_t
uct_rc_gdr_rcache_get(uct_rc_gdr_rcache_t *rcache, void *address,
                      size_t length, int mem_type, uint64_t buffer_id,
                      uct_rc_gdr_rcache_region_t **region_p);


/*
 * Drop a reference taken by get. Returns UCS_ERR_INVALID_PARAM, without
 * touching the pointer, when the region is not live (double or stale put).
 */
ucs_status_t uct_rc_gdr_rcache_put(uct_rc_gdr_rcache_t *rcache,
                                   uct_rc_gdr_rcache_region_t *region);


/*
 * The memory [address, address + length) was freed: every region overlapping
 * it leaves the cache and its NIC registration is released now. Holders keep
 * their references; their puts only free the region.
 */
void uct_rc_gdr_rcache_invalidate(uct_rc_gdr_rcache_t *rcache, void *address,
                                  size_t length);


void uct_rc_gdr_rcache_stats(uct_rc_gdr_rcache_t *rcache,
                             uct_rc_gdr_rcache_stats_t *stats);


/* The params.priv_size bytes of the md that follow the region */
void *uct_rc_gdr_rcache_region_priv(uct_rc_gdr_rcache_region_t *region);


/*
 * For tests: verify the tree (order, AVL balance, subtree max end), the entry
 * count and the set of live regions. Returns UCS_OK or logs the first broken
 * invariant and returns UCS_ERR_INVALID_PARAM.
 */
ucs_status_t uct_rc_gdr_rcache_check(uct_rc_gdr_rcache_t *rcache);

END_C_DECLS

#endif
