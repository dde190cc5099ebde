/**
 * The registration cache's layout, for the files that make it up: the cache
 * (rc_gdr_rcache.c), its interval tree (rc_gdr_rcache_tree.c) and the tests'
 * invariant checker (test/gtest/rcache_check.c). Users of the cache include
 * rc_gdr_rcache.h only.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_RC_GDR_RCACHE_INT_H_
#define UCT_RC_GDR_RCACHE_INT_H_

#include "rc_gdr_rcache.h"
#include "rc_gdr_rcache_tree.h"
#include "rc_gdr_lock.h"
#include "rc_gdr_glue_math.h"

#include <ucs/arch/bitops.h>
#include <ucs/sys/compiler_def.h>

BEGIN_C_DECLS

/* Nodes start on a cache line; the md's private area follows the node on
   this boundary */
#define UCT_RC_GDR_RCACHE_NODE_ALIGN 64
#define UCT_RC_GDR_RCACHE_PRIV_ALIGN 16

#define UCT_RC_GDR_RCACHE_NODE_HEADER_SIZE \
    ucs_align_up_pow2(sizeof(uct_rc_gdr_rcache_node_t), \
                      UCT_RC_GDR_RCACHE_PRIV_ALIGN)

/* Regions are carved from blocks of this size, aligned to it and kept until
   destroy: a region finds its node from its own address */
#define UCT_RC_GDR_RCACHE_BLOCK_SIZE UCS_BIT(16)

/* More than a block of the smallest nodes holds */
#define UCT_RC_GDR_RCACHE_BLOCK_REGIONS_MAX 512

#define UCT_RC_GDR_RCACHE_REF_CHUNK_SIZE \
    UCS_BIT(UCT_RC_GDR_RCACHE_REF_CHUNK_BITS)

#define UCT_RC_GDR_RCACHE_REGION_FMT \
    "region %p [0x%lx..0x%lx) buffer %lu type %d access 0x%x refcount %u"

#define UCT_RC_GDR_RCACHE_REGION_ARG(_region) \
    (_region), (_region)->start, (_region)->end, (_region)->buffer_id, \
    (_region)->mem_type, (_region)->access, (_region)->refcount


enum {
    /* In the interval tree: get can find it */
    UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE    = UCS_BIT(0),
    /* ops->mem_reg succeeded and ops->mem_dereg was not called yet */
    UCT_RC_GDR_RCACHE_REGION_FLAG_REGISTERED = UCS_BIT(1),
    /* Out of the tree, on a list whose registrations are being released */
    UCT_RC_GDR_RCACHE_REGION_FLAG_RELEASING  = UCS_BIT(2),
    /* Stays cached when its last handle goes */
    UCT_RC_GDR_RCACHE_REGION_FLAG_RETAIN     = UCS_BIT(3),
    /* Without handles, on the kept (LRU) list */
    UCT_RC_GDR_RCACHE_REGION_FLAG_IN_LRU     = UCS_BIT(4),
    /* A region of another allocation identity overlaps it (now or once):
       a get must walk the tree, where stale regions are found */
    UCT_RC_GDR_RCACHE_REGION_FLAG_CONTESTED  = UCS_BIT(5),
    /* Its handles are listed in its node's refs */
    UCT_RC_GDR_RCACHE_REGION_FLAG_TRACKED    = UCS_BIT(6)
};


/*
 * The hull of a region: the bytes asked for with its buffer, from the first
 * to the last, as what its two ends leave out. The first get asked for bytes
 * on its first and its last page, so each end leaves out less than a page,
 * and a hit only ever makes them smaller.
 */
typedef struct uct_rc_gdr_rcache_hull {
    uint16_t head; /* bytes after region->start never asked for */
    uint16_t tail; /* bytes before region->end never asked for */
} uct_rc_gdr_rcache_hull_t;


/*
 * The part of a region a hit does not touch, in the same block as the region
 * (uct_rc_gdr_rcache_node()).
 */
typedef struct uct_rc_gdr_rcache_node {
    uct_rc_gdr_rcache_region_t    *region;       /* what it belongs to */
    struct uct_rc_gdr_rcache_node *left;         /* interval tree; also the */
    struct uct_rc_gdr_rcache_node *right;        /* free list, by left */
    uintptr_t                     max_end;       /* largest end in subtree */
    int                           height;        /* AVL, leaf = 1 */
    unsigned                      check_refs;    /* for the check */
    uct_rc_gdr_rcache_region_t    *next_release; /* pending release */
    ucs_list_link_t               lru;           /* kept, unreferenced */
    ucs_list_link_t               list;          /* every live region */
    uct_rc_gdr_rcache_ref_t       *refs;         /* its handles, if tracked */

    /* followed, at UCT_RC_GDR_RCACHE_NODE_HEADER_SIZE, by params.priv_size
       bytes for the md */
} uct_rc_gdr_rcache_node_t;


/*
 * A block: this header with the hulls, then the regions, packed, then their
 * nodes, all in the same order. A hit reads a region and its hull, both
 * packed (32 and 4 bytes), and no node.
 */
typedef struct uct_rc_gdr_rcache_block {
    struct uct_rc_gdr_rcache_block *next;
    uct_rc_gdr_rcache_node_t       *nodes;     /* the node of regions[0] */
    size_t                         node_size;  /* with the private area */
    uct_rc_gdr_rcache_hull_t       hulls[UCT_RC_GDR_RCACHE_BLOCK_REGIONS_MAX]
                                   UCS_V_ALIGNED(64);
    uct_rc_gdr_rcache_region_t     regions[] UCS_V_ALIGNED(64);
} uct_rc_gdr_rcache_block_t;


/*
 * One slot of the direct cache: the region a get for a range starting on
 * some page found last. Nothing clears a slot: region memory is kept until
 * destroy, so a slot always names readable memory, and a hit takes only a
 * region that is in the tree and serves the request, whatever put it in the
 * slot.
 */
typedef uct_rc_gdr_rcache_region_t *uct_rc_gdr_rcache_dc_slot_t;


/* A freed range, page-rounded outwards */
typedef struct uct_rc_gdr_rcache_inv {
    uintptr_t start;
    uintptr_t end;
} uct_rc_gdr_rcache_inv_t;


struct uct_rc_gdr_rcache {
    /*
     * One recursive lock around every operation. Recursive because
     * ops->mem_dereg (ibv_dereg_mr) may free memory, and the free hook calls
     * invalidate on this thread. Waiters spin briefly, then give their CPU
     * away: it is held across ops->mem_reg, which pins pages in the kernel
     * and may take milliseconds. Biased towards the thread using the cache,
     * so that a hit's two entries pay no atomic (rc_gdr_lock.h).
     */
    uct_rc_gdr_lock_t             lock;

    /*
     * Frees seen while another thread held the lock. A memory hook never
     * waits for the holder: the holder may be waiting for a lock the freeing
     * thread holds, inside ops->mem_reg or mem_dereg (the provider's device
     * lock, a malloc arena: a deadlock seen on the stand-in NIC) or inside a
     * bounce copy (the CUDA driver's own locks). The hook queues the range
     * instead; whoever holds the lock next applies the queue before any
     * lookup, and at its outermost release. A hook waits only when the queue
     * is full, or when its range meets the bytes the holder touches
     * (uct_rc_gdr_rcache_touch), which must outlive the copy.
     */
    uintptr_t                     touch_start; /* the holder's copy, */
    uintptr_t                     touch_end;   /* empty when end <= start */
    pthread_spinlock_t            inv_lock;
    unsigned                      inv_count; /* read without inv_lock */
    uct_rc_gdr_rcache_inv_t       inv[UCT_RC_GDR_RCACHE_INV_MAX];

    /*
     * The lookup structure: an AVL tree of regions keyed by (start, end,
     * address), each node also holding the largest end of its subtree, so a
     * stabbing or overlap query prunes subtrees and runs in O(log n + k).
     * Neither ucs_pgtable nor ucs_rcache fits: ucs_pgtable requires disjoint
     * regions, and ucs_rcache merges overlapping regions into one and evicts
     * the ones it replaces, while here a partial overlap must get its own
     * region and leave the other one alone.
     */
    uct_rc_gdr_rcache_node_t      *root;

    /*
     * In front of the tree, a direct-mapped cache keyed by the first page of
     * a request: a repeated get costs one probe instead of a walk. It only
     * answers for regions no other allocation identity overlaps (the walk
     * is where stale regions are found), and at least half of its slots are
     * free for the entries.
     */
    uct_rc_gdr_rcache_dc_slot_t   *dc;
    unsigned                      dc_bits;
    uint64_t                      dc_mask;   /* slots - 1, for the hit */
    unsigned                      page_shift;

    ucs_list_link_t               lru;       /* kept regions, oldest first */
    ucs_list_link_t               fork_list; /* in the caches fork purges */
    ucs_list_link_t               regions;   /* every live region */
    uct_rc_gdr_rcache_node_t      *free_nodes; /* by left */
    uct_rc_gdr_rcache_block_t     *blocks;
    size_t                        node_size;
    unsigned                      block_regions; /* regions per block */

    /* Handle slots of this cache waiting for reuse, the last one freed
       first (it is in the CPU cache), its generation one higher: a stale
       handle matches again only after 2^40 reuses of its slot */
    uct_rc_gdr_rcache_ref_t       *free_refs;
    unsigned                      *chunks;   /* indexes of the slot chunks */
    unsigned                      num_chunks;

    uct_rc_gdr_rcache_stats_t     stats;
    size_t                        page_size;
    size_t                        priv_size;
    unsigned long                 max_regions;
    size_t                        max_size;
    const uct_rc_gdr_rcache_ops_t *ops;
    void                          *arg;
    char                          *name;
};


static UCS_F_ALWAYS_INLINE uct_rc_gdr_rcache_block_t *
uct_rc_gdr_rcache_block(const uct_rc_gdr_rcache_region_t *region)
{
    return (uct_rc_gdr_rcache_block_t*)
            ucs_align_down_pow2((uintptr_t)region,
                                UCT_RC_GDR_RCACHE_BLOCK_SIZE);
}

/* The hull of a region, beside the hulls of its neighbours */
static UCS_F_ALWAYS_INLINE uct_rc_gdr_rcache_hull_t *
uct_rc_gdr_rcache_hull(const uct_rc_gdr_rcache_region_t *region)
{
    uct_rc_gdr_rcache_block_t *block = uct_rc_gdr_rcache_block(region);

    return &block->hulls[region - block->regions];
}

/* The node of a region: the same index in the same block */
static UCS_F_ALWAYS_INLINE uct_rc_gdr_rcache_node_t *
uct_rc_gdr_rcache_node(const uct_rc_gdr_rcache_region_t *region)
{
    uct_rc_gdr_rcache_block_t *block = uct_rc_gdr_rcache_block(region);

    return UCS_PTR_BYTE_OFFSET(block->nodes, (region - block->regions) *
                                             block->node_size);
}

END_C_DECLS

#endif
