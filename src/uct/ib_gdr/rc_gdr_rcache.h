/**
 * Registration cache of the rc_gdr memory domain, for host and CUDA memory.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_RC_GDR_RCACHE_H_
#define UCT_RC_GDR_RCACHE_H_

#include <ucs/datastruct/list.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>

#include <stddef.h>
#include <stdint.h>

BEGIN_C_DECLS

/*
 * A cached registration covers whole pages. A get reuses a region only when
 * the region fully contains the request, has the same allocation identity
 * (buffer id and memory type) and was registered with at least the access
 * the get asks for; anything else gets its own region, so regions may
 * overlap.
 *
 * Every get gives out a handle of its own, naming the region and the exact
 * bytes asked for; a put takes that handle back. Handles carry a generation:
 * a handle put twice, or kept after its put, is refused with
 * UCS_ERR_INVALID_PARAM even when a later get was given the same slot.
 *
 * A region lives while handles name it. When the last one goes, a region
 * created with UCT_RC_GDR_RCACHE_GET_FLAG_RETAIN stays cached, unreferenced,
 * for the next get, within the cache's limits (least recently used first
 * out); any other region is released. Either way its registration goes at
 * once when the memory under it is freed (invalidate).
 */

typedef struct uct_rc_gdr_rcache     uct_rc_gdr_rcache_t;
typedef struct uct_rc_gdr_rcache_ref uct_rc_gdr_rcache_ref_t;


/*
 * What a get gives out: a generation in the high 40 bits and one more than
 * the index of the handle's slot in the low 24; never 0.
 */
typedef uint64_t uct_rc_gdr_rcache_handle_t;

#define UCT_RC_GDR_RCACHE_HANDLE_INDEX_BITS 24
#define UCT_RC_GDR_RCACHE_REF_CHUNK_BITS    10 /* handle slots per chunk */
#define UCT_RC_GDR_RCACHE_REF_CHUNKS_MAX \
    (1ul << (UCT_RC_GDR_RCACHE_HANDLE_INDEX_BITS - \
             UCT_RC_GDR_RCACHE_REF_CHUNK_BITS))


enum {
    /* Reuse a live region that contains the request, and cache a new one
       for later gets; without it the region is private to the handle */
    UCT_RC_GDR_RCACHE_GET_FLAG_SHARE  = UCS_BIT(0),
    /* A new region stays cached when its last handle is put (only with
       SHARE; only where the owner learns when the memory goes away) */
    UCT_RC_GDR_RCACHE_GET_FLAG_RETAIN = UCS_BIT(1)
};


/*
 * What a hit reads and writes, but for the 4 bytes of its hull: 32 bytes, so
 * that two regions share a cache line and the regions a process hits stay in
 * the CPU's cache (10,000 of them and their hulls take 360 KiB). The rest of
 * a region (its tree node, its lists, the md's private area) is kept apart
 * in the same block and found from the region's address, see
 * uct_rc_gdr_rcache_region_priv().
 */
typedef struct uct_rc_gdr_rcache_region {
    uintptr_t start;     /* page-rounded, inclusive */
    uintptr_t end;       /* page-rounded, exclusive */
    uint64_t  buffer_id; /* allocation identity (CUDA buffer ID), 0 = host */
    uint32_t  refcount;  /* handles naming it (plus one while released) */
    uint16_t  flags;     /* private */
    uint8_t   access;    /* access bits it was registered with */
    uint8_t   mem_type;  /* ucs_memory_type_t */
} uct_rc_gdr_rcache_region_t;


/* The largest access a get may ask for: the bits a region keeps */
#define UCT_RC_GDR_RCACHE_ACCESS_MAX UINT8_MAX


/* The slot of one handle */
struct uct_rc_gdr_rcache_ref {
    uct_rc_gdr_rcache_region_t *region;  /* NULL: the slot is free */
    uintptr_t                  address;  /* the bytes the get asked for */
    size_t                     length;
    uint64_t                   priv;     /* the owner's, 0 at get */

    /* Private to the cache */
    uct_rc_gdr_rcache_t        *rcache;  /* which cache owns the slot */
    uct_rc_gdr_rcache_ref_t    *next;    /* region's handles (tracked), or */
    uct_rc_gdr_rcache_ref_t    *prev;    /* the free list */
    uct_rc_gdr_rcache_handle_t handle;   /* the one live handle of the slot */
};


typedef struct uct_rc_gdr_rcache_ops {
    /* Register [region->start, region->end) with region->access; may write
       the region's priv area. Called with the cache lock held. */
    ucs_status_t (*mem_reg)(void *arg, uct_rc_gdr_rcache_region_t *region);

    /* Release what mem_reg made. Called once per successful mem_reg, with
       the cache lock held; may call uct_rc_gdr_rcache_invalidate() (a memory
       free hook running inside the deregistration). */
    void         (*mem_dereg)(void *arg, uct_rc_gdr_rcache_region_t *region);
} uct_rc_gdr_rcache_ops_t;


typedef struct uct_rc_gdr_rcache_params {
    size_t                        page_size;   /* rounding, a power of 2 */
    size_t                        priv_size;   /* bytes after each region */
    const uct_rc_gdr_rcache_ops_t *ops;
    void                          *arg;        /* passed to ops */
    const char                    *name;       /* for logs, may be NULL */
    unsigned long                 max_regions; /* cached regions, and */
    size_t                        max_size;    /* their bytes, beyond which
                                                  unreferenced ones are
                                                  released, oldest first;
                                                  0 or all ones: no limit */
} uct_rc_gdr_rcache_params_t;


typedef struct uct_rc_gdr_rcache_stats {
    uint64_t entries;       /* regions now in the cache (found by get) */
    uint64_t live;          /* regions not yet freed: entries plus
                               invalidated or private regions that still
                               have handles */
    uint64_t cached;        /* entries without handles, kept for reuse */
    uint64_t size;          /* bytes of the entries */
    uint64_t handles;       /* handles given out and not yet put */
    uint64_t hits;          /* get served by an existing region */
    uint64_t fast_hits;     /* ... of which without a tree walk */
    uint64_t misses;        /* get that had to register */
    uint64_t nic_regs;      /* successful ops->mem_reg calls */
    uint64_t nic_deregs;    /* ops->mem_dereg calls */
    uint64_t invalidations; /* regions invalidated because memory was freed
                               or its buffer id changed */
    uint64_t invalidations_queued; /* frees a memory hook queued because
                               another thread held the cache, applied by
                               the next operation */
    uint64_t evictions;     /* kept regions released to stay in limits */
    uint64_t lookup_steps;  /* tree nodes examined by get: O(log n) each
                               when few regions contain the request */
} uct_rc_gdr_rcache_stats_t;


ucs_status_t
uct_rc_gdr_rcache_create(const uct_rc_gdr_rcache_params_t *params,
                         uct_rc_gdr_rcache_t **rcache_p);


/* Deregisters what is left and warns about handles still given out */
void uct_rc_gdr_rcache_destroy(uct_rc_gdr_rcache_t *rcache);


/*
 * What a get asks of a region beside its bytes. 16 bytes, passed by value:
 * in two registers, so that every argument of a get is in a register.
 */
typedef struct uct_rc_gdr_rcache_key {
    uint64_t buffer_id; /* allocation identity (CUDA buffer ID), 0 = host */
    uint32_t access;    /* at most UCT_RC_GDR_RCACHE_ACCESS_MAX */
    uint16_t mem_type;  /* ucs_memory_type_t, at most UINT8_MAX */
    uint16_t flags;     /* UCT_RC_GDR_RCACHE_GET_FLAG_xx */
} uct_rc_gdr_rcache_key_t;


/*
 * Give out a handle on a region covering [address, address + length) rounded
 * to pages. With UCT_RC_GDR_RCACHE_GET_FLAG_SHARE in @a key.flags, a live
 * region of the same buffer id and memory type that contains it and has
 * every bit of @a key.access is reused; otherwise a new one is registered.
 * An access or memory type beyond what a region holds is refused with
 * UCS_ERR_INVALID_PARAM.
 */
ucs_status_t
uct_rc_gdr_rcache_get(uct_rc_gdr_rcache_t *rcache, void *address,
                      size_t length, uct_rc_gdr_rcache_key_t key,
                      uct_rc_gdr_rcache_handle_t *handle_p);


/*
 * Take back a handle given out by get. Returns UCS_ERR_INVALID_PARAM, and
 * changes nothing, when the handle is not live (a double or stale put, or a
 * handle of another cache).
 */
ucs_status_t uct_rc_gdr_rcache_put(uct_rc_gdr_rcache_t *rcache,
                                   uct_rc_gdr_rcache_handle_t handle);


/*
 * The memory [address, address + length) was freed: every region overlapping
 * it leaves the cache and its NIC registration is released. Holders keep
 * their handles; their puts only free the region. For a memory hook: it
 * never waits for another thread that holds the cache; the free is queued
 * then, and applied by that thread as it lets go, or by the next operation
 * on the cache, always before any lookup. It waits only for a holder that
 * touches the freed bytes (uct_rc_gdr_rcache_touch), or for room in a full
 * queue.
 */
void uct_rc_gdr_rcache_invalidate(uct_rc_gdr_rcache_t *rcache, void *address,
                                  size_t length);

/* Frees the queue holds; a hook that finds it full waits for room */
#define UCT_RC_GDR_RCACHE_INV_MAX 64


/*
 * For ops->mem_reg: the registration stands in for the one asked for (a GPU
 * registration the NIC refused, carried by the bounce lane instead). The
 * region is released at its last reference, never kept, so that the next
 * registration of the memory asks the NIC again.
 */
void uct_rc_gdr_rcache_region_no_keep(uct_rc_gdr_rcache_region_t *region);


/*
 * Release every kept region nobody holds, now: for an owner whose
 * registration failed at a resource limit (the NIC's MR count, locked
 * memory), before it tries once more. May be called from ops->mem_reg (the
 * region being registered is not kept). Returns how many were released.
 */
unsigned long uct_rc_gdr_rcache_evict_kept(uct_rc_gdr_rcache_t *rcache);


void uct_rc_gdr_rcache_stats(uct_rc_gdr_rcache_t *rcache,
                             uct_rc_gdr_rcache_stats_t *stats);


/* The params.priv_size bytes of the md that follow the region */
void *uct_rc_gdr_rcache_region_priv(uct_rc_gdr_rcache_region_t *region);


/*
 * The cache lock, for an owner whose own tables follow the cache's handles
 * and regions (recursive: cache calls may be made while holding it).
 */
void uct_rc_gdr_rcache_lock(uct_rc_gdr_rcache_t *rcache);
void uct_rc_gdr_rcache_unlock(uct_rc_gdr_rcache_t *rcache);


/*
 * With the lock held, until its outermost release: the caller will touch
 * [address, address + length), up to the end of the address space at most
 * (a synchronous bounce copy into registered memory). A free of any of
 * those bytes on another thread waits for the release, so that the memory
 * outlives the copy; other frees are queued and never wait for it.
 * Applies the frees queued so far: look the registration up after this.
 */
void uct_rc_gdr_rcache_touch(uct_rc_gdr_rcache_t *rcache, uint64_t address,
                             size_t length);


/*
 * With the lock held: the slot of a live handle of this cache, or NULL
 * (stale, put, foreign or garbage). Logs nothing.
 */
uct_rc_gdr_rcache_ref_t *
uct_rc_gdr_rcache_handle_check(uct_rc_gdr_rcache_t *rcache,
                               uct_rc_gdr_rcache_handle_t handle);


/*
 * For ops->mem_reg: keep the list of the region's handles, for
 * uct_rc_gdr_rcache_region_exposes(). Untracked regions (the default) cost
 * a get and a put nothing of the kind.
 */
void uct_rc_gdr_rcache_region_track(uct_rc_gdr_rcache_region_t *region);


/*
 * With the lock held: whether [address, address + length) lies inside the
 * bytes one live handle of @a region asked for. The region must be live and
 * tracked; an untracked one exposes nothing.
 */
int uct_rc_gdr_rcache_region_exposes(uct_rc_gdr_rcache_region_t *region,
                                     uint64_t address, uint64_t length);


/* Handle slots, by chunk; a chunk never moves or goes once published */
extern uct_rc_gdr_rcache_ref_t *
uct_rc_gdr_rcache_ref_chunks[UCT_RC_GDR_RCACHE_REF_CHUNKS_MAX];


/*
 * The slot of a handle the caller holds, unchecked: for the data path, where
 * a handle is the user's promise. Use uct_rc_gdr_rcache_handle_check() for
 * anything a user or peer may get wrong.
 */
static UCS_F_ALWAYS_INLINE uct_rc_gdr_rcache_ref_t *
uct_rc_gdr_rcache_handle_ref(uct_rc_gdr_rcache_handle_t handle)
{
    uint64_t index = (handle & UCS_MASK(UCT_RC_GDR_RCACHE_HANDLE_INDEX_BITS)) -
                     1;

    return &uct_rc_gdr_rcache_ref_chunks
            [index >> UCT_RC_GDR_RCACHE_REF_CHUNK_BITS]
            [index & UCS_MASK(UCT_RC_GDR_RCACHE_REF_CHUNK_BITS)];
}


END_C_DECLS

#endif
