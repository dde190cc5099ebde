/**
 * Registration cache of the rc_gdr memory domain, for host and CUDA memory.
 * Its index, the interval tree, is rc_gdr_rcache_tree.c; its layout, which
 * the tree and the tests' invariant checker share, rc_gdr_rcache_int.h.
 *
 * See file LICENSE for terms.
 */

#include "rc_gdr_rcache_int.h"

#include <ucs/arch/bitops.h>
#include <ucs/debug/assert.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include "rc_gdr_glue_math.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>


/* Direct cache: log2 of its slots, first and largest */
#define UCT_RC_GDR_RCACHE_DC_MIN_BITS 6
#define UCT_RC_GDR_RCACHE_DC_MAX_BITS 22

#define UCT_RC_GDR_RCACHE_HANDLE_GEN(_handle) \
    ((_handle) >> UCT_RC_GDR_RCACHE_HANDLE_INDEX_BITS)


/* What a get learns from one walk over the regions containing its range */
typedef struct {
    uintptr_t                  start;      /* rounded request */
    uintptr_t                  end;
    uintptr_t                  addr_start; /* request as asked */
    uintptr_t                  addr_end;
    uct_rc_gdr_rcache_key_t    key;
    uct_rc_gdr_rcache_region_t *hit;
    uct_rc_gdr_rcache_region_t *stale;     /* list by next_release */
} uct_rc_gdr_rcache_lookup_t;


/*
 * Handle slots of every cache of the process. A cache takes whole chunks and
 * gives them back at destroy, each slot's generation raised, so a handle
 * outlives neither its put nor its cache. Chunks are never freed: a stale
 * handle always points at a slot, never at freed memory.
 */
uct_rc_gdr_rcache_ref_t *
uct_rc_gdr_rcache_ref_chunks[UCT_RC_GDR_RCACHE_REF_CHUNKS_MAX];

static struct {
    pthread_mutex_t lock;
    unsigned        count;      /* chunks allocated */
    unsigned        *free;      /* indexes of chunks no cache owns */
    unsigned        num_free;
} uct_rc_gdr_rcache_ref_pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER
};


static void uct_rc_gdr_rcache_inv_apply(uct_rc_gdr_rcache_t *rcache);

/* Frees queued by memory hooks wait for this (uct_rc_gdr_rcache_t::inv) */
static UCS_F_ALWAYS_INLINE int
uct_rc_gdr_rcache_inv_pending(uct_rc_gdr_rcache_t *rcache)
{
    return __atomic_load_n(&rcache->inv_count, __ATOMIC_ACQUIRE) != 0;
}

/* With the lock held: apply the queued frees, if any */
static UCS_F_ALWAYS_INLINE void
uct_rc_gdr_rcache_inv_check(uct_rc_gdr_rcache_t *rcache)
{
    if (ucs_unlikely(uct_rc_gdr_rcache_inv_pending(rcache))) {
        uct_rc_gdr_rcache_inv_apply(rcache);
    }
}

/* Every path that takes the lock applies the queued frees first, so no
   lookup finds a region of freed memory */
void uct_rc_gdr_rcache_lock(uct_rc_gdr_rcache_t *rcache)
{
    uct_rc_gdr_lock_acquire(&rcache->lock);
    uct_rc_gdr_rcache_inv_check(rcache);
}

/* ... and the outermost release applies what came meanwhile, then lets the
   hooks waiting for the touched bytes go */
void uct_rc_gdr_rcache_unlock(uct_rc_gdr_rcache_t *rcache)
{
    if (rcache->lock.depth == 0) {
        uct_rc_gdr_rcache_inv_check(rcache);
        __atomic_store_n(&rcache->touch_end, 0, __ATOMIC_RELEASE);
    }
    uct_rc_gdr_lock_release(&rcache->lock);
}

/* The end of [start, start + length): a range running past the end of the
   address space means up to it */
static uintptr_t uct_rc_gdr_rcache_range_end(uintptr_t start, size_t length)
{
    return (length > UINTPTR_MAX - start) ? UINTPTR_MAX : start + length;
}

/* A hook pushes its range (the queue's count), then looks at the touched
   bytes; the holder publishes them, then looks at the count: each store
   and load sequentially consistent, so one of them sees the other (the
   hook waits, or the holder applies the free before its lookup) */
void uct_rc_gdr_rcache_touch(uct_rc_gdr_rcache_t *rcache, uint64_t address,
                             size_t length)
{
    __atomic_store_n(&rcache->touch_start, address, __ATOMIC_RELAXED);
    __atomic_store_n(&rcache->touch_end,
                     uct_rc_gdr_rcache_range_end(address, length),
                     __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&rcache->inv_count, __ATOMIC_SEQ_CST) != 0) {
        uct_rc_gdr_rcache_inv_apply(rcache);
    }
}

static int uct_rc_gdr_rcache_touches(uct_rc_gdr_rcache_t *rcache,
                                     uintptr_t start, uintptr_t end)
{
    uintptr_t touch_end   = __atomic_load_n(&rcache->touch_end,
                                            __ATOMIC_SEQ_CST);
    uintptr_t touch_start = __atomic_load_n(&rcache->touch_start,
                                            __ATOMIC_RELAXED);

    return (touch_start < touch_end) && (start < touch_end) &&
           (touch_start < end);
}

static void uct_rc_gdr_rcache_tree_add(uct_rc_gdr_rcache_t *rcache,
                                       uct_rc_gdr_rcache_region_t *region)
{
    rcache->root   = uct_rc_gdr_rcache_tree_insert(
            rcache->root, uct_rc_gdr_rcache_node(region));
    region->flags |= UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE;
    ++rcache->stats.entries;
    rcache->stats.size += region->end - region->start;
}

static void uct_rc_gdr_rcache_lru_del(uct_rc_gdr_rcache_t *rcache,
                                      uct_rc_gdr_rcache_region_t *region)
{
    if (region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_IN_LRU) {
        ucs_list_del(&uct_rc_gdr_rcache_node(region)->lru);
        region->flags &= ~UCT_RC_GDR_RCACHE_REGION_FLAG_IN_LRU;
        --rcache->stats.cached;
    }
}

/* Out of every lookup: the tree, the direct cache, the kept list */
static void uct_rc_gdr_rcache_tree_del(uct_rc_gdr_rcache_t *rcache,
                                       uct_rc_gdr_rcache_region_t *region)
{
    uct_rc_gdr_rcache_node_t *node = uct_rc_gdr_rcache_node(region);

    rcache->root   = uct_rc_gdr_rcache_tree_remove(rcache->root, node);
    region->flags &= ~UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE;
    node->left     = NULL;
    node->right    = NULL;
    --rcache->stats.entries;
    rcache->stats.size -= region->end - region->start;
    uct_rc_gdr_rcache_lru_del(rcache, region);
}


/* Carve a new block into the free list: its regions, each with its node */
static ucs_status_t uct_rc_gdr_rcache_block_add(uct_rc_gdr_rcache_t *rcache)
{
    uct_rc_gdr_rcache_block_t *block;
    uct_rc_gdr_rcache_node_t *node;
    unsigned i;
    int ret;

    ret = ucs_posix_memalign((void**)&block, UCT_RC_GDR_RCACHE_BLOCK_SIZE,
                             UCT_RC_GDR_RCACHE_BLOCK_SIZE,
                             "rc_gdr_rcache_regions");
    if (ret != 0) {
        ucs_error("rcache %s: failed to allocate regions", rcache->name);
        return UCS_ERR_NO_MEMORY;
    }

    block->next      = rcache->blocks;
    block->nodes     = (uct_rc_gdr_rcache_node_t*)
            ucs_align_up_pow2((uintptr_t)&block->regions[rcache->block_regions],
                              UCT_RC_GDR_RCACHE_NODE_ALIGN);
    block->node_size = rcache->node_size;
    rcache->blocks   = block;
    for (i = 0; i < rcache->block_regions; ++i) {
        node                 = UCS_PTR_BYTE_OFFSET(block->nodes,
                                                   i * rcache->node_size);
        node->region         = &block->regions[i];
        node->region->flags  = 0;
        node->left           = rcache->free_nodes;
        rcache->free_nodes   = node;
    }
    return UCS_OK;
}

/* A new region, zeroed with its node, from the cache's free list */
static uct_rc_gdr_rcache_region_t *
uct_rc_gdr_rcache_region_alloc(uct_rc_gdr_rcache_t *rcache)
{
    uct_rc_gdr_rcache_region_t *region;
    uct_rc_gdr_rcache_node_t *node;

    if ((rcache->free_nodes == NULL) &&
        (uct_rc_gdr_rcache_block_add(rcache) != UCS_OK)) {
        return NULL;
    }

    node               = rcache->free_nodes;
    rcache->free_nodes = node->left;
    region             = node->region;
    memset(region, 0, sizeof(*region));
    memset(node, 0, rcache->node_size);
    node->region       = region;
    ucs_list_add_tail(&rcache->regions, &node->list);
    ++rcache->stats.live;
    return region;
}

/* No longer live: out of the list of regions, not counted */
static void uct_rc_gdr_rcache_region_forget(uct_rc_gdr_rcache_t *rcache,
                                            uct_rc_gdr_rcache_region_t *region)
{
    ucs_list_del(&uct_rc_gdr_rcache_node(region)->list);
    --rcache->stats.live;
}

/* Back to the free list; the memory stays readable for the direct cache */
static void uct_rc_gdr_rcache_region_recycle(uct_rc_gdr_rcache_t *rcache,
                                             uct_rc_gdr_rcache_region_t *region)
{
    uct_rc_gdr_rcache_node_t *node = uct_rc_gdr_rcache_node(region);

    ucs_assert(!(region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE));
    region->flags      = 0;
    node->left         = rcache->free_nodes;
    rcache->free_nodes = node;
}

/* Give the cache another chunk of handle slots */
static ucs_status_t uct_rc_gdr_rcache_ref_grow(uct_rc_gdr_rcache_t *rcache)
{
    uct_rc_gdr_rcache_ref_t *chunk, *ref;
    unsigned index, i, *chunks;
    ucs_status_t status = UCS_OK;

    chunks = ucs_realloc(rcache->chunks,
                         (rcache->num_chunks + 1) * sizeof(*chunks),
                         "rc_gdr_rcache_chunks");
    if (chunks == NULL) {
        ucs_error("rcache %s: failed to allocate handle chunks",
                  rcache->name);
        return UCS_ERR_NO_MEMORY;
    }
    rcache->chunks = chunks;

    pthread_mutex_lock(&uct_rc_gdr_rcache_ref_pool.lock);
    if (uct_rc_gdr_rcache_ref_pool.num_free > 0) {
        index = uct_rc_gdr_rcache_ref_pool.free[
                --uct_rc_gdr_rcache_ref_pool.num_free];
    } else if (uct_rc_gdr_rcache_ref_pool.count <
               UCT_RC_GDR_RCACHE_REF_CHUNKS_MAX - 1) {
        index = uct_rc_gdr_rcache_ref_pool.count;
        chunk = ucs_calloc(UCT_RC_GDR_RCACHE_REF_CHUNK_SIZE, sizeof(*chunk),
                           "rc_gdr_rcache_refs");
        if (chunk == NULL) {
            ucs_error("rcache %s: failed to allocate handle slots",
                      rcache->name);
            status = UCS_ERR_NO_MEMORY;
            goto out_unlock;
        }

        for (i = 0; i < UCT_RC_GDR_RCACHE_REF_CHUNK_SIZE; ++i) {
            /* Generation 1, index + 1 */
            chunk[i].handle = UCS_BIT(UCT_RC_GDR_RCACHE_HANDLE_INDEX_BITS) +
                              (index << UCT_RC_GDR_RCACHE_REF_CHUNK_BITS) +
                              i + 1;
        }

        /* Readers find the chunk without the lock: publish it whole */
        __atomic_store_n(&uct_rc_gdr_rcache_ref_chunks[index], chunk,
                         __ATOMIC_RELEASE);
        ++uct_rc_gdr_rcache_ref_pool.count;
    } else {
        ucs_error("rcache %s: all %lu handle slots of the process are in use",
                  rcache->name, (UCT_RC_GDR_RCACHE_REF_CHUNKS_MAX - 1) *
                  UCT_RC_GDR_RCACHE_REF_CHUNK_SIZE);
        status = UCS_ERR_EXCEEDS_LIMIT;
        goto out_unlock;
    }

    chunk = uct_rc_gdr_rcache_ref_chunks[index];
    for (i = UCT_RC_GDR_RCACHE_REF_CHUNK_SIZE; i-- > 0;) {
        ref               = &chunk[i];
        ref->rcache       = rcache;
        ref->region       = NULL;
        ref->prev         = NULL;
        ref->next         = rcache->free_refs;
        rcache->free_refs = ref;
    }
    rcache->chunks[rcache->num_chunks++] = index;

out_unlock:
    pthread_mutex_unlock(&uct_rc_gdr_rcache_ref_pool.lock);
    return status;
}

/* The next generation of a slot's handle: a stale copy never matches */
static UCS_F_ALWAYS_INLINE void
uct_rc_gdr_rcache_ref_retire(uct_rc_gdr_rcache_ref_t *ref)
{
    /* One more in the high bits; the sum wraps the generation to 0 (and
       leaves the index alone), and 0 is skipped: no handle is 0 */
    ref->handle += UCS_BIT(UCT_RC_GDR_RCACHE_HANDLE_INDEX_BITS);
    if (ucs_unlikely(UCT_RC_GDR_RCACHE_HANDLE_GEN(ref->handle) == 0)) {
        ref->handle += UCS_BIT(UCT_RC_GDR_RCACHE_HANDLE_INDEX_BITS);
    }
    ref->region = NULL;
}

/* Give back the chunks of a destroyed cache, every handle retired */
static void uct_rc_gdr_rcache_ref_release_all(uct_rc_gdr_rcache_t *rcache)
{
    uct_rc_gdr_rcache_ref_t *chunk;
    unsigned *free_list;
    unsigned c, i;

    if (rcache->num_chunks == 0) {
        return;
    }

    pthread_mutex_lock(&uct_rc_gdr_rcache_ref_pool.lock);
    free_list = ucs_realloc(uct_rc_gdr_rcache_ref_pool.free,
                            (uct_rc_gdr_rcache_ref_pool.num_free +
                             rcache->num_chunks) * sizeof(*free_list),
                            "rc_gdr_rcache_free_chunks");
    for (c = 0; c < rcache->num_chunks; ++c) {
        chunk = uct_rc_gdr_rcache_ref_chunks[rcache->chunks[c]];
        for (i = 0; i < UCT_RC_GDR_RCACHE_REF_CHUNK_SIZE; ++i) {
            uct_rc_gdr_rcache_ref_retire(&chunk[i]);
            chunk[i].rcache = NULL;
            chunk[i].next   = NULL;
            chunk[i].prev   = NULL;
        }
        if (free_list != NULL) {
            free_list[uct_rc_gdr_rcache_ref_pool.num_free++] =
                    rcache->chunks[c];
        }
        /* else: the chunk stays allocated and unowned, which is harmless */
    }
    if (free_list != NULL) {
        uct_rc_gdr_rcache_ref_pool.free = free_list;
    }
    pthread_mutex_unlock(&uct_rc_gdr_rcache_ref_pool.lock);
    ucs_free(rcache->chunks);
}

/* Hand out a slot for @a region, linked to its handles when tracked */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_gdr_rcache_ref_get(uct_rc_gdr_rcache_t *rcache,
                          uct_rc_gdr_rcache_region_t *region,
                          uintptr_t address, size_t length,
                          uct_rc_gdr_rcache_handle_t *handle_p)
{
    uct_rc_gdr_rcache_node_t *node;
    uct_rc_gdr_rcache_ref_t *ref;
    ucs_status_t status;

    if (ucs_unlikely(rcache->free_refs == NULL)) {
        status = uct_rc_gdr_rcache_ref_grow(rcache);
        if (status != UCS_OK) {
            return status;
        }
    }

    ref               = rcache->free_refs;
    rcache->free_refs = ref->next;
    ref->region       = region;
    ref->address      = address;
    ref->length       = length;
    ref->priv         = 0;
    if (ucs_unlikely(region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_TRACKED)) {
        node      = uct_rc_gdr_rcache_node(region);
        ref->prev = NULL;
        ref->next = node->refs;
        if (node->refs != NULL) {
            node->refs->prev = ref;
        }
        node->refs = ref;
    }
    ++rcache->stats.handles;
    *handle_p = ref->handle;
    return UCS_OK;
}

/* Unlink a live slot from its region and free it for reuse */
static UCS_F_ALWAYS_INLINE void
uct_rc_gdr_rcache_ref_put(uct_rc_gdr_rcache_t *rcache,
                          uct_rc_gdr_rcache_ref_t *ref)
{
    uct_rc_gdr_rcache_region_t *region = ref->region;

    if (ucs_unlikely(region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_TRACKED)) {
        if (ref->prev != NULL) {
            ref->prev->next = ref->next;
        } else {
            uct_rc_gdr_rcache_node(region)->refs = ref->next;
        }
        if (ref->next != NULL) {
            ref->next->prev = ref->prev;
        }
        ref->prev = NULL;
    }

    uct_rc_gdr_rcache_ref_retire(ref);
    ref->next         = rcache->free_refs;
    rcache->free_refs = ref;
    --rcache->stats.handles;
}

static UCS_F_ALWAYS_INLINE uct_rc_gdr_rcache_ref_t *
uct_rc_gdr_rcache_handle_check_inline(uct_rc_gdr_rcache_t *rcache,
                                      uct_rc_gdr_rcache_handle_t handle)
{
    uint64_t index = handle & UCS_MASK(UCT_RC_GDR_RCACHE_HANDLE_INDEX_BITS);
    uct_rc_gdr_rcache_ref_t *chunk, *ref;

    /* A slot's handle never has generation 0, so the compare below refuses
       one; index 0 would read before the chunks */
    if (ucs_unlikely(index == 0)) {
        return NULL;
    }

    --index;
    chunk = __atomic_load_n(&uct_rc_gdr_rcache_ref_chunks
                                    [index >> UCT_RC_GDR_RCACHE_REF_CHUNK_BITS],
                            __ATOMIC_ACQUIRE);
    if (ucs_unlikely(chunk == NULL)) {
        return NULL;
    }

    ref = &chunk[index & UCS_MASK(UCT_RC_GDR_RCACHE_REF_CHUNK_BITS)];
    if (ucs_unlikely((ref->rcache != rcache) || (ref->handle != handle) ||
                     (ref->region == NULL))) {
        return NULL;
    }

    return ref;
}

uct_rc_gdr_rcache_ref_t *
uct_rc_gdr_rcache_handle_check(uct_rc_gdr_rcache_t *rcache,
                               uct_rc_gdr_rcache_handle_t handle)
{
    return uct_rc_gdr_rcache_handle_check_inline(rcache, handle);
}

void uct_rc_gdr_rcache_region_track(uct_rc_gdr_rcache_region_t *region)
{
    ucs_assert(region->refcount == 0);
    region->flags |= UCT_RC_GDR_RCACHE_REGION_FLAG_TRACKED;
}

int uct_rc_gdr_rcache_region_exposes(uct_rc_gdr_rcache_region_t *region,
                                     uint64_t address, uint64_t length)
{
    uct_rc_gdr_rcache_ref_t *ref;

    ucs_assert(region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_TRACKED);
    for (ref = uct_rc_gdr_rcache_node(region)->refs; ref != NULL;
         ref = ref->next) {
        if ((address >= ref->address) &&
            (address - ref->address <= ref->length) &&
            (length <= ref->length - (address - ref->address))) {
            return 1;
        }
    }
    return 0;
}


static void uct_rc_gdr_rcache_region_dereg(uct_rc_gdr_rcache_t *rcache,
                                           uct_rc_gdr_rcache_region_t *region)
{
    if (!(region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_REGISTERED)) {
        return;
    }

    /* Cleared before the call: a put re-entering from inside mem_dereg must
       not release the same registration again */
    region->flags &= ~UCT_RC_GDR_RCACHE_REGION_FLAG_REGISTERED;
    ++rcache->stats.nic_deregs;
    ucs_debug("rcache %s: dereg " UCT_RC_GDR_RCACHE_REGION_FMT, rcache->name,
              UCT_RC_GDR_RCACHE_REGION_ARG(region));
    rcache->ops->mem_dereg(rcache->arg, region);
}

/* Release a region no lookup can find any more, and free it */
static void uct_rc_gdr_rcache_region_destroy(uct_rc_gdr_rcache_t *rcache,
                                             uct_rc_gdr_rcache_region_t *region)
{
    ucs_assert(!(region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE));
    uct_rc_gdr_rcache_region_forget(rcache, region);
    uct_rc_gdr_rcache_region_dereg(rcache, region);
    uct_rc_gdr_rcache_region_recycle(rcache, region);
}

/*
 * Release kept regions, least recently used first, while the cache holds
 * more than max_regions regions or max_size bytes. Each leaves the tree
 * before its mem_dereg, which may re-enter.
 */
static unsigned long uct_rc_gdr_rcache_trim_to(uct_rc_gdr_rcache_t *rcache,
                                               unsigned long max_regions,
                                               size_t max_size)
{
    uct_rc_gdr_rcache_region_t *region;
    unsigned long count = 0;

    while (((rcache->stats.entries > max_regions) ||
            (rcache->stats.size > max_size)) &&
           !ucs_list_is_empty(&rcache->lru)) {
        region = ucs_list_head(&rcache->lru, uct_rc_gdr_rcache_node_t,
                               lru)->region;
        ucs_assert(region->refcount == 0);
        uct_rc_gdr_rcache_tree_del(rcache, region);
        ++rcache->stats.evictions;
        ucs_debug("rcache %s: evict " UCT_RC_GDR_RCACHE_REGION_FMT
                  " (%lu regions, %lu bytes cached)", rcache->name,
                  UCT_RC_GDR_RCACHE_REGION_ARG(region),
                  rcache->stats.entries, rcache->stats.size);
        uct_rc_gdr_rcache_region_destroy(rcache, region);
        ++count;
    }
    return count;
}


static void uct_rc_gdr_rcache_trim(uct_rc_gdr_rcache_t *rcache)
{
    uct_rc_gdr_rcache_trim_to(rcache, rcache->max_regions, rcache->max_size);
}


/* Release every region only kept, at a resource limit. It waits for the
 * lock, as a registration does; the fork handler below must not. */
unsigned long uct_rc_gdr_rcache_evict_kept(uct_rc_gdr_rcache_t *rcache)
{
    unsigned long count;

    uct_rc_gdr_rcache_lock(rcache);
    count = uct_rc_gdr_rcache_trim_to(rcache, 0, 0);
    uct_rc_gdr_rcache_unlock(rcache);
    return count;
}


/*
 * Before fork() every cache releases the regions it only keeps. A NIC
 * registration marks its pages MADV_DONTFORK (where verbs' fork support is
 * on): a kept one would leave the child without pages it shares with other
 * allocations, and a page the parent writes after fork may move away from
 * what the NIC has pinned. Regions still referenced stay, as in UCX's
 * ucs_rcache (UCS_RCACHE_FLAG_PURGE_ON_FORK).
 */
static struct {
    pthread_mutex_t lock;
    ucs_list_link_t caches;
    int             atfork_installed;
} uct_rc_gdr_rcache_fork = {
    .lock   = PTHREAD_MUTEX_INITIALIZER,
    .caches = UCS_LIST_INITIALIZER(&uct_rc_gdr_rcache_fork.caches,
                                   &uct_rc_gdr_rcache_fork.caches)
};


static void uct_rc_gdr_rcache_before_fork(void)
{
    uct_rc_gdr_rcache_t *rcache;

    pthread_mutex_lock(&uct_rc_gdr_rcache_fork.lock);
    ucs_list_for_each(rcache, &uct_rc_gdr_rcache_fork.caches, fork_list) {
        /* Never wait here: a thread that holds the cache may be waiting for
         * this fork to return. Its kept registrations then stay. */
        if (!uct_rc_gdr_lock_try(&rcache->lock)) {
            ucs_debug("rcache %s: busy at fork(): kept registrations stay",
                      rcache->name);
            continue;
        }
        uct_rc_gdr_rcache_trim_to(rcache, 0, 0);
        uct_rc_gdr_rcache_unlock(rcache);
    }
    pthread_mutex_unlock(&uct_rc_gdr_rcache_fork.lock);
}


static void uct_rc_gdr_rcache_fork_add(uct_rc_gdr_rcache_t *rcache)
{
    int ret;

    pthread_mutex_lock(&uct_rc_gdr_rcache_fork.lock);
    if (!uct_rc_gdr_rcache_fork.atfork_installed) {
        ret = pthread_atfork(uct_rc_gdr_rcache_before_fork, NULL, NULL);
        if (ret == 0) {
            uct_rc_gdr_rcache_fork.atfork_installed = 1;
        } else {
            ucs_warn("rcache %s: pthread_atfork() failed (%s): kept "
                     "registrations stay across fork()", rcache->name,
                     strerror(ret));
        }
    }
    ucs_list_add_tail(&uct_rc_gdr_rcache_fork.caches, &rcache->fork_list);
    pthread_mutex_unlock(&uct_rc_gdr_rcache_fork.lock);
}


static void uct_rc_gdr_rcache_fork_del(uct_rc_gdr_rcache_t *rcache)
{
    pthread_mutex_lock(&uct_rc_gdr_rcache_fork.lock);
    ucs_list_del(&rcache->fork_list);
    pthread_mutex_unlock(&uct_rc_gdr_rcache_fork.lock);
}

/*
 * The last reference went: a retained region stays in the cache, on the
 * kept list; any other region is released and freed.
 */
static void uct_rc_gdr_rcache_region_unref_last(uct_rc_gdr_rcache_t *rcache,
                                                uct_rc_gdr_rcache_region_t *region)
{
    if ((region->flags & (UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE |
                          UCT_RC_GDR_RCACHE_REGION_FLAG_RETAIN)) ==
        (UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE |
         UCT_RC_GDR_RCACHE_REGION_FLAG_RETAIN)) {
        ucs_list_add_tail(&rcache->lru, &uct_rc_gdr_rcache_node(region)->lru);
        region->flags |= UCT_RC_GDR_RCACHE_REGION_FLAG_IN_LRU;
        ++rcache->stats.cached;
        uct_rc_gdr_rcache_trim(rcache);
        return;
    }

    /* Out of every lookup before mem_dereg, which may re-enter the cache */
    if (region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE) {
        uct_rc_gdr_rcache_tree_del(rcache, region);
    }
    uct_rc_gdr_rcache_region_destroy(rcache, region);
}

/* Drop one reference */
static UCS_F_ALWAYS_INLINE void
uct_rc_gdr_rcache_region_unref(uct_rc_gdr_rcache_t *rcache,
                               uct_rc_gdr_rcache_region_t *region)
{
    ucs_assert(region->refcount > 0);
    if (ucs_unlikely(--region->refcount == 0)) {
        uct_rc_gdr_rcache_region_unref_last(rcache, region);
    }
}

/* Put a region on a list for uct_rc_gdr_rcache_release() */
static void
uct_rc_gdr_rcache_release_push(uct_rc_gdr_rcache_region_t **list_p,
                               uct_rc_gdr_rcache_region_t *region)
{
    uct_rc_gdr_rcache_node(region)->next_release = *list_p;
    *list_p                                      = region;
}

/* Take the first region off such a list; NULL when it is empty */
static uct_rc_gdr_rcache_region_t *
uct_rc_gdr_rcache_release_pop(uct_rc_gdr_rcache_region_t **list_p)
{
    uct_rc_gdr_rcache_region_t *region = *list_p;
    uct_rc_gdr_rcache_node_t *node;

    if (region != NULL) {
        node               = uct_rc_gdr_rcache_node(region);
        *list_p            = node->next_release;
        node->next_release = NULL;
    }
    return region;
}

/*
 * Take the listed regions out of the tree and release their NIC
 * registrations. Every region leaves the tree before the first mem_dereg, so
 * an invalidate re-entering from a free hook inside mem_dereg sees a
 * consistent tree and never finds a region of this list. Each listed region
 * holds an extra reference meanwhile, so a re-entering put cannot free a
 * region that is still on the list.
 */
static void uct_rc_gdr_rcache_release(uct_rc_gdr_rcache_t *rcache,
                                      uct_rc_gdr_rcache_region_t *list)
{
    uct_rc_gdr_rcache_region_t *region;

    for (region = list; region != NULL;
         region = uct_rc_gdr_rcache_node(region)->next_release) {
        uct_rc_gdr_rcache_tree_del(rcache, region);
        region->flags |= UCT_RC_GDR_RCACHE_REGION_FLAG_RELEASING;
        ++region->refcount;
        ++rcache->stats.invalidations;
        ucs_debug("rcache %s: invalidate " UCT_RC_GDR_RCACHE_REGION_FMT,
                  rcache->name, UCT_RC_GDR_RCACHE_REGION_ARG(region));
    }

    while ((region = uct_rc_gdr_rcache_release_pop(&list)) != NULL) {
        uct_rc_gdr_rcache_region_dereg(rcache, region);
        region->flags &= ~UCT_RC_GDR_RCACHE_REGION_FLAG_RELEASING;
        uct_rc_gdr_rcache_region_unref(rcache, region);
    }
}

static int uct_rc_gdr_rcache_lookup_matches(
        const uct_rc_gdr_rcache_lookup_t *lookup,
        const uct_rc_gdr_rcache_region_t *region)
{
    return (region->buffer_id == lookup->key.buffer_id) &&
           (region->mem_type == lookup->key.mem_type);
}

/* Classify a region that contains the rounded request */
static void uct_rc_gdr_rcache_lookup_visit(uct_rc_gdr_rcache_region_t *region,
                                           void *arg)
{
    uct_rc_gdr_rcache_lookup_t *lookup = arg;
    const uct_rc_gdr_rcache_hull_t *hull;

    if (uct_rc_gdr_rcache_lookup_matches(lookup, region)) {
        /* Same allocation: a region registered with less access is no
           hit, and no harm either */
        if ((lookup->hit == NULL) &&
            ((region->access & lookup->key.access) == lookup->key.access)) {
            lookup->hit = region;
        }
        return;
    }

    /*
     * Another allocation identity. If bytes once asked for with the old
     * identity are now asked for with the new one, the old allocation was
     * freed and its address reused: the region is stale and must go now, so
     * that no later request can hit it. If the two only share a page (small
     * CUDA allocations can), the old allocation may still be in use and keeps
     * its registration; the request just gets a region of its own.
     */
    hull = uct_rc_gdr_rcache_hull(region);
    if ((region->start + hull->head < lookup->addr_end) &&
        (region->end - hull->tail > lookup->addr_start)) {
        uct_rc_gdr_rcache_release_push(&lookup->stale, region);
    }
}

/* Mark a new region and every region of another identity overlapping it */
static void uct_rc_gdr_rcache_contest_visit(uct_rc_gdr_rcache_region_t *region,
                                            void *arg)
{
    uct_rc_gdr_rcache_region_t *added = arg;

    if ((region != added) &&
        ((region->buffer_id != added->buffer_id) ||
         (region->mem_type != added->mem_type))) {
        region->flags |= UCT_RC_GDR_RCACHE_REGION_FLAG_CONTESTED;
        added->flags  |= UCT_RC_GDR_RCACHE_REGION_FLAG_CONTESTED;
    }
}

static void
uct_rc_gdr_rcache_invalidate_visit(uct_rc_gdr_rcache_region_t *region,
                                   void *arg)
{
    uct_rc_gdr_rcache_release_push(arg, region);
}

/*
 * Round [address, address + length) out to pages, refusing ranges that are
 * empty or do not fit in the address space.
 */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_gdr_rcache_range_round(uct_rc_gdr_rcache_t *rcache, uintptr_t address,
                              size_t length, uintptr_t *start_p,
                              uintptr_t *end_p)
{
    uintptr_t last;

    if (ucs_unlikely(length == 0)) {
        ucs_error("rcache %s: empty range (length 0) at address 0x%lx",
                  rcache->name, address);
        return UCS_ERR_INVALID_PARAM;
    }

    last = address + (length - 1);
    if (ucs_unlikely((last < address) ||
                     (last > UINTPTR_MAX - rcache->page_size))) {
        ucs_error("rcache %s: range at 0x%lx length %zu overflows the address"
                  " space when rounded to %zu-byte pages", rcache->name,
                  address, length, rcache->page_size);
        return UCS_ERR_INVALID_PARAM;
    }

    *start_p = ucs_align_down_pow2(address, rcache->page_size);
    *end_p   = ucs_align_up_pow2(last + 1, rcache->page_size);
    return UCS_OK;
}

static UCS_F_ALWAYS_INLINE uct_rc_gdr_rcache_dc_slot_t *
uct_rc_gdr_rcache_dc_slot(uct_rc_gdr_rcache_t *rcache, uintptr_t start)
{
    /* Neighbouring pages in neighbouring slots, as a page table keeps them
       (a cache line of slots serves 8 pages), with the higher bits folded
       in once so that strided buffers do not all meet in one slot (one
       fold: the hit path pays for each shift) */
    uint64_t page = start >> rcache->page_shift;

    return &rcache->dc[(page ^ (page >> rcache->dc_bits)) & rcache->dc_mask];
}

static void uct_rc_gdr_rcache_dc_fill_visit(uct_rc_gdr_rcache_region_t *region,
                                            void *arg)
{
    *uct_rc_gdr_rcache_dc_slot(arg, region->start) = region;
}

/* Keep at least half of the direct cache's slots for the entries */
static void uct_rc_gdr_rcache_dc_fit(uct_rc_gdr_rcache_t *rcache)
{
    uct_rc_gdr_rcache_dc_slot_t *dc;
    unsigned bits = rcache->dc_bits;

    while ((bits < UCT_RC_GDR_RCACHE_DC_MAX_BITS) &&
           (rcache->stats.entries * 2 > UCS_BIT(bits))) {
        ++bits;
    }

    if (bits == rcache->dc_bits) {
        return;
    }

    /* The slots are hints: a failed allocation keeps the old table */
    dc = ucs_calloc(UCS_BIT(bits), sizeof(*dc), "rc_gdr_rcache_dc");
    if (dc == NULL) {
        return;
    }

    ucs_free(rcache->dc);
    rcache->dc      = dc;
    rcache->dc_bits = bits;
    rcache->dc_mask = UCS_MASK(bits);

    /* Each entry at its first page, where most gets for it start */
    uct_rc_gdr_rcache_tree_overlap(rcache->root, 0, UINTPTR_MAX,
                                   uct_rc_gdr_rcache_dc_fill_visit, rcache);
}

ucs_status_t
uct_rc_gdr_rcache_create(const uct_rc_gdr_rcache_params_t *params,
                         uct_rc_gdr_rcache_t **rcache_p)
{
    const char *name = (params->name != NULL) ? params->name : "rc_gdr";
    size_t node_size;
    uct_rc_gdr_rcache_t *rcache;
    ucs_status_t status;
    int ret;

    /* A hull's ends are less than a page (uct_rc_gdr_rcache_hull_t) */
    if (!ucs_is_pow2(params->page_size) ||
        (params->page_size > UINT16_MAX + 1)) {
        ucs_error("rcache %s: page size %zu is not a power of 2 of at most"
                  " 64 KiB", name, params->page_size);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((params->ops == NULL) || (params->ops->mem_reg == NULL) ||
        (params->ops->mem_dereg == NULL)) {
        ucs_error("rcache %s: mem_reg and mem_dereg operations are required",
                  name);
        return UCS_ERR_INVALID_PARAM;
    }

    /* A block must hold a few regions with their private areas */
    if (params->priv_size > UCT_RC_GDR_RCACHE_BLOCK_SIZE / 8) {
        ucs_error("rcache %s: private size %zu is above the limit of %lu",
                  name, params->priv_size, UCT_RC_GDR_RCACHE_BLOCK_SIZE / 8);
        return UCS_ERR_INVALID_PARAM;
    }

    node_size = ucs_align_up_pow2(UCT_RC_GDR_RCACHE_NODE_HEADER_SIZE +
                                  params->priv_size,
                                  UCT_RC_GDR_RCACHE_NODE_ALIGN);

    rcache = ucs_calloc(1, sizeof(*rcache), "rc_gdr_rcache");
    if (rcache == NULL) {
        ucs_error("rcache %s: failed to allocate the cache", name);
        return UCS_ERR_NO_MEMORY;
    }

    rcache->name = ucs_strdup(name, "rc_gdr_rcache_name");
    if (rcache->name == NULL) {
        ucs_error("rcache %s: failed to allocate the name", name);
        status = UCS_ERR_NO_MEMORY;
        goto err_free_rcache;
    }

    rcache->dc_bits = UCT_RC_GDR_RCACHE_DC_MIN_BITS;
    rcache->dc_mask = UCS_MASK(rcache->dc_bits);
    rcache->dc      = ucs_calloc(UCS_BIT(rcache->dc_bits), sizeof(*rcache->dc),
                                 "rc_gdr_rcache_dc");
    if (rcache->dc == NULL) {
        ucs_error("rcache %s: failed to allocate the direct cache", name);
        status = UCS_ERR_NO_MEMORY;
        goto err_free_name;
    }

    ret = pthread_spin_init(&rcache->inv_lock, PTHREAD_PROCESS_PRIVATE);
    if (ret != 0) {
        ucs_error("rcache %s: pthread_spin_init() failed: %s", name,
                  strerror(ret));
        status = UCS_ERR_IO_ERROR;
        goto err_free_dc;
    }

    uct_rc_gdr_lock_init(&rcache->lock);
    ucs_list_head_init(&rcache->lru);
    ucs_list_head_init(&rcache->regions);
    rcache->root        = NULL;
    rcache->page_size   = params->page_size;
    rcache->page_shift  = ucs_ilog2(params->page_size);
    rcache->priv_size   = params->priv_size;
    rcache->node_size   = node_size;
    /* Whatever the nodes leave after the header and the alignment of the
       first node */
    rcache->block_regions = ucs_min((UCT_RC_GDR_RCACHE_BLOCK_SIZE -
                                     sizeof(uct_rc_gdr_rcache_block_t) -
                                     UCT_RC_GDR_RCACHE_NODE_ALIGN) /
                                    (sizeof(uct_rc_gdr_rcache_region_t) +
                                     node_size),
                                    UCT_RC_GDR_RCACHE_BLOCK_REGIONS_MAX);
    rcache->max_regions = (params->max_regions == 0) ? ULONG_MAX :
                          params->max_regions;
    rcache->max_size    = (params->max_size == 0) ? SIZE_MAX :
                          params->max_size;
    rcache->ops         = params->ops;
    rcache->arg         = params->arg;

    uct_rc_gdr_rcache_fork_add(rcache);
    ucs_debug("rcache %s: created, page size %zu, priv size %zu, at most %lu"
              " regions and %zu bytes kept", name, rcache->page_size,
              rcache->priv_size, rcache->max_regions, rcache->max_size);
    *rcache_p = rcache;
    return UCS_OK;

err_free_dc:
    ucs_free(rcache->dc);
err_free_name:
    ucs_free(rcache->name);
err_free_rcache:
    ucs_free(rcache);
    return status;
}

void uct_rc_gdr_rcache_destroy(uct_rc_gdr_rcache_t *rcache)
{
    uct_rc_gdr_rcache_region_t *list = NULL;
    uct_rc_gdr_rcache_node_t *node, *tmp;
    uct_rc_gdr_rcache_region_t *region;
    uct_rc_gdr_rcache_block_t *block;

    uct_rc_gdr_rcache_fork_del(rcache);
    uct_rc_gdr_rcache_lock(rcache);

    /* Empty the tree before releasing anything, for the same reason as
       uct_rc_gdr_rcache_release() */
    uct_rc_gdr_rcache_tree_overlap(rcache->root, 0, UINTPTR_MAX,
                                   uct_rc_gdr_rcache_invalidate_visit, &list);
    for (region = list; region != NULL;
         region = uct_rc_gdr_rcache_node(region)->next_release) {
        uct_rc_gdr_rcache_tree_del(rcache, region);
    }

    while ((region = uct_rc_gdr_rcache_release_pop(&list)) != NULL) {
        uct_rc_gdr_rcache_region_dereg(rcache, region);
    }

    /* What is left has handles given out and never put: they leaked */
    ucs_list_for_each_safe(node, tmp, &rcache->regions, list) {
        region = node->region;
        if (region->refcount > 0) {
            ucs_warn("rcache %s: destroying " UCT_RC_GDR_RCACHE_REGION_FMT
                     " still referenced", rcache->name,
                     UCT_RC_GDR_RCACHE_REGION_ARG(region));
        }
        uct_rc_gdr_rcache_region_forget(rcache, region);
        uct_rc_gdr_rcache_region_dereg(rcache, region);
        uct_rc_gdr_rcache_region_recycle(rcache, region);
    }

    ucs_debug("rcache %s: destroyed: hits %lu (%lu direct) misses %lu nic"
              " regs %lu deregs %lu invalidations %lu evictions %lu",
              rcache->name, rcache->stats.hits, rcache->stats.fast_hits,
              rcache->stats.misses, rcache->stats.nic_regs,
              rcache->stats.nic_deregs, rcache->stats.invalidations,
              rcache->stats.evictions);

    uct_rc_gdr_rcache_ref_release_all(rcache);
    while (rcache->blocks != NULL) {
        block          = rcache->blocks;
        rcache->blocks = block->next;
        ucs_free(block);
    }

    /* no hook is left to queue (the owner removed them): nothing to apply */
    uct_rc_gdr_lock_release(&rcache->lock);
    pthread_spin_destroy(&rcache->inv_lock);
    ucs_free(rcache->dc);
    ucs_free(rcache->name);
    ucs_free(rcache);
}

/* A miss: register a new region for the rounded range */
static ucs_status_t
uct_rc_gdr_rcache_region_create(uct_rc_gdr_rcache_t *rcache,
                                const uct_rc_gdr_rcache_lookup_t *lookup,
                                uct_rc_gdr_rcache_region_t **region_p)
{
    uct_rc_gdr_rcache_region_t *region;
    uct_rc_gdr_rcache_hull_t *hull;
    ucs_status_t status;

    /* Live before registering: a free hook inside mem_reg that re-enters the
       cache finds consistent bookkeeping (the region is not in the tree) */
    region = uct_rc_gdr_rcache_region_alloc(rcache);
    if (region == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    region->start     = lookup->start;
    region->end       = lookup->end;
    region->buffer_id = lookup->key.buffer_id;
    region->mem_type  = lookup->key.mem_type;
    region->access    = lookup->key.access;
    hull              = uct_rc_gdr_rcache_hull(region);
    hull->head        = lookup->addr_start - lookup->start;
    hull->tail        = lookup->end - lookup->addr_end;
    if ((lookup->key.flags & (UCT_RC_GDR_RCACHE_GET_FLAG_SHARE |
                              UCT_RC_GDR_RCACHE_GET_FLAG_RETAIN)) ==
        (UCT_RC_GDR_RCACHE_GET_FLAG_SHARE |
         UCT_RC_GDR_RCACHE_GET_FLAG_RETAIN)) {
        region->flags |= UCT_RC_GDR_RCACHE_REGION_FLAG_RETAIN;
    }

    status = rcache->ops->mem_reg(rcache->arg, region);
    if (status != UCS_OK) {
        /* mem_reg decided and logged the error */
        uct_rc_gdr_rcache_region_forget(rcache, region);
        uct_rc_gdr_rcache_region_recycle(rcache, region);
        return status;
    }

    region->flags |= UCT_RC_GDR_RCACHE_REGION_FLAG_REGISTERED;
    ++rcache->stats.nic_regs;
    if (lookup->key.flags & UCT_RC_GDR_RCACHE_GET_FLAG_SHARE) {
        uct_rc_gdr_rcache_tree_add(rcache, region);
        uct_rc_gdr_rcache_tree_overlap(rcache->root, region->start,
                                       region->end,
                                       uct_rc_gdr_rcache_contest_visit,
                                       region);
        uct_rc_gdr_rcache_dc_fit(rcache);
    }

    *region_p = region;
    return UCS_OK;
}

/* A get served by a live region: one more reference (a kept region leaves
   the kept list) and the bytes asked for in its hull */
static UCS_F_ALWAYS_INLINE void
uct_rc_gdr_rcache_region_hit(uct_rc_gdr_rcache_t *rcache,
                             uct_rc_gdr_rcache_region_t *region,
                             uintptr_t address, size_t length)
{
    uct_rc_gdr_rcache_hull_t *hull = uct_rc_gdr_rcache_hull(region);
    uintptr_t head                 = address - region->start;
    uintptr_t tail                 = region->end - (address + length);

    if (ucs_unlikely(region->refcount++ == 0)) {
        uct_rc_gdr_rcache_lru_del(rcache, region);
    }
    if (ucs_unlikely(head < hull->head)) {
        hull->head = head;
    }
    if (ucs_unlikely(tail < hull->tail)) {
        hull->tail = tail;
    }
    ++rcache->stats.hits;
    ucs_trace("rcache %s: hit 0x%lx length %zu: "
              UCT_RC_GDR_RCACHE_REGION_FMT, rcache->name, address, length,
              UCT_RC_GDR_RCACHE_REGION_ARG(region));
}

static void uct_rc_gdr_rcache_lookup_init(uct_rc_gdr_rcache_lookup_t *lookup,
                                          uintptr_t start, uintptr_t end,
                                          uintptr_t address, size_t length,
                                          uct_rc_gdr_rcache_key_t key)
{
    lookup->start      = start;
    lookup->end        = end;
    lookup->addr_start = address;
    lookup->addr_end   = address + length;
    lookup->key        = key;
}

/* The walk: a containing region to reuse, stale ones released on the way */
static uct_rc_gdr_rcache_region_t *
uct_rc_gdr_rcache_lookup(uct_rc_gdr_rcache_t *rcache,
                         uct_rc_gdr_rcache_lookup_t *lookup)
{
    /* Releasing stale regions may re-enter the cache and change the tree,
       so look again until a walk finds nothing stale */
    for (;;) {
        lookup->hit   = NULL;
        lookup->stale = NULL;
        uct_rc_gdr_rcache_tree_contain(rcache->root, lookup->start,
                                       lookup->end,
                                       uct_rc_gdr_rcache_lookup_visit, lookup,
                                       &rcache->stats.lookup_steps);
        if (lookup->stale == NULL) {
            return lookup->hit;
        }

        uct_rc_gdr_rcache_release(rcache, lookup->stale);
    }
}

/* Every get the hit path (uct_rc_gdr_rcache_get) does not serve */
static UCS_F_NOINLINE ucs_status_t
uct_rc_gdr_rcache_get_slow(uct_rc_gdr_rcache_t *rcache, void *address,
                           size_t length, uct_rc_gdr_rcache_key_t key,
                           uct_rc_gdr_rcache_handle_t *handle_p)
{
    uintptr_t addr_start = (uintptr_t)address;
    uct_rc_gdr_rcache_lookup_t lookup;
    uct_rc_gdr_rcache_region_t *region;
    uintptr_t start, end;
    ucs_status_t status;

    status = uct_rc_gdr_rcache_range_round(rcache, addr_start, length, &start,
                                           &end);
    if (ucs_unlikely(status != UCS_OK)) {
        return status;
    }

    /* What a region can hold (uct_rc_gdr_rcache_region_t) */
    if (ucs_unlikely((key.access > UCT_RC_GDR_RCACHE_ACCESS_MAX) ||
                     (key.mem_type > UINT8_MAX))) {
        ucs_error("rcache %s: access 0x%x or memory type %u out of range",
                  rcache->name, key.access, key.mem_type);
        return UCS_ERR_INVALID_PARAM;
    }

    uct_rc_gdr_rcache_lock(rcache);

    if (!(key.flags & UCT_RC_GDR_RCACHE_GET_FLAG_SHARE)) {
        goto miss;
    }

    /* What the hit path did not serve (a tracked region, a contested one,
       no free handle slot) walks the tree */
    uct_rc_gdr_rcache_lookup_init(&lookup, start, end, addr_start, length,
                                  key);
    region = uct_rc_gdr_rcache_lookup(rcache, &lookup);
    if (region == NULL) {
        goto miss_init;
    }

    /* The table may have moved if releasing stale regions re-entered */
    *uct_rc_gdr_rcache_dc_slot(rcache, start) = region;

    status = uct_rc_gdr_rcache_ref_get(rcache, region, addr_start, length,
                                       handle_p);
    if (ucs_unlikely(status != UCS_OK)) {
        goto out_unlock;
    }

    uct_rc_gdr_rcache_region_hit(rcache, region, addr_start, length);
    goto out_unlock;

miss:
    uct_rc_gdr_rcache_lookup_init(&lookup, start, end, addr_start, length,
                                  key);
miss_init:
    ++rcache->stats.misses;
    status = uct_rc_gdr_rcache_region_create(rcache, &lookup, &region);
    if (status != UCS_OK) {
        goto out_unlock;
    }

    status = uct_rc_gdr_rcache_ref_get(rcache, region, addr_start, length,
                                       handle_p);
    if (status != UCS_OK) {
        if (region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE) {
            uct_rc_gdr_rcache_tree_del(rcache, region);
        }
        uct_rc_gdr_rcache_region_destroy(rcache, region);
        goto out_unlock;
    }

    region->refcount = 1;
    if (region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE) {
        *uct_rc_gdr_rcache_dc_slot(rcache, start) = region;
        /* The new entry may push kept ones out */
        uct_rc_gdr_rcache_trim(rcache);
    }

    ucs_debug("rcache %s: miss %p length %zu: new "
              UCT_RC_GDR_RCACHE_REGION_FMT, rcache->name, address, length,
              UCT_RC_GDR_RCACHE_REGION_ARG(region));

out_unlock:
    uct_rc_gdr_rcache_unlock(rcache);
    return status;
}

/* The hit path took the lock and found no hit: let go, and start over. Apart,
   so that the hit path keeps nothing across a call; it finds the lock's
   entry again rather than take a seventh argument, on the stack. */
static UCS_F_NOINLINE ucs_status_t
uct_rc_gdr_rcache_get_leave_slow(uct_rc_gdr_rcache_t *rcache, void *address,
                                 size_t length, uct_rc_gdr_rcache_key_t key,
                                 uct_rc_gdr_rcache_handle_t *handle_p)
{
    uct_rc_gdr_lock_leave_once(&rcache->lock,
                               uct_rc_gdr_lock_entry(&rcache->lock));
    return uct_rc_gdr_rcache_get_slow(rcache, address, length, key, handle_p);
}

/*
 * The hit of a repeated get, as short as it can be: one probe of the direct
 * cache and one handle slot, under one lock exchange. Anything else (a miss,
 * bad input, a walk, a tracked region, no free slot, a lock that is not
 * free) takes the slow path, which starts over.
 */
ucs_status_t
uct_rc_gdr_rcache_get(uct_rc_gdr_rcache_t *rcache, void *address,
                      size_t length, uct_rc_gdr_rcache_key_t key,
                      uct_rc_gdr_rcache_handle_t *handle_p)
{
    uintptr_t addr_start = (uintptr_t)address;
    uintptr_t last       = addr_start + length - 1;
    uct_rc_gdr_rcache_region_t *region;
    uct_rc_gdr_lock_entry_t entry;

    /* A region holds whole pages, so start <= address and end > last mean
       it holds the pages of both, and nothing that wraps the address space
       gets this far */
    if (ucs_unlikely(!(key.flags & UCT_RC_GDR_RCACHE_GET_FLAG_SHARE) ||
                     (length == 0) || (last < addr_start))) {
        goto slow;
    }

    entry = uct_rc_gdr_lock_enter_free(&rcache->lock);
    if (ucs_unlikely(entry == 0)) {
        goto slow;
    }

    region = *uct_rc_gdr_rcache_dc_slot(rcache, addr_start);
    if (ucs_unlikely((region == NULL) || (rcache->free_refs == NULL) ||
                     uct_rc_gdr_rcache_inv_pending(rcache) ||
                     ((region->flags &
                       (UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE |
                        UCT_RC_GDR_RCACHE_REGION_FLAG_CONTESTED |
                        UCT_RC_GDR_RCACHE_REGION_FLAG_TRACKED)) !=
                      UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE) ||
                     (region->start > addr_start) || (region->end <= last) ||
                     (region->buffer_id != key.buffer_id) ||
                     (region->mem_type != key.mem_type) ||
                     ((region->access & key.access) != key.access))) {
        return uct_rc_gdr_rcache_get_leave_slow(rcache, address, length, key,
                                                handle_p);
    }

    /* a free slot is there: this cannot fail */
    uct_rc_gdr_rcache_ref_get(rcache, region, addr_start, length, handle_p);
    uct_rc_gdr_rcache_region_hit(rcache, region, addr_start, length);
    ++rcache->stats.fast_hits;
    uct_rc_gdr_lock_leave_once(&rcache->lock, entry);
    return UCS_OK;

slow:
    return uct_rc_gdr_rcache_get_slow(rcache, address, length, key,
                                      handle_p);
}

void uct_rc_gdr_rcache_region_no_keep(uct_rc_gdr_rcache_region_t *region)
{
    region->flags &= ~UCT_RC_GDR_RCACHE_REGION_FLAG_RETAIN;
}

/* A put with the lock held; a release it leads to may re-enter the lock */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_gdr_rcache_put_locked(uct_rc_gdr_rcache_t *rcache,
                             uct_rc_gdr_rcache_handle_t handle)
{
    uct_rc_gdr_rcache_region_t *region;
    uct_rc_gdr_rcache_ref_t *ref;

    ref = uct_rc_gdr_rcache_handle_check_inline(rcache, handle);
    if (ucs_unlikely(ref == NULL)) {
        ucs_error("rcache %s: put of handle 0x%lx which is not live (double"
                  " or stale deregistration)", rcache->name, handle);
        return UCS_ERR_INVALID_PARAM;
    }

    region = ref->region;
    ucs_trace("rcache %s: put handle 0x%lx of " UCT_RC_GDR_RCACHE_REGION_FMT,
              rcache->name, handle, UCT_RC_GDR_RCACHE_REGION_ARG(region));
    uct_rc_gdr_rcache_ref_put(rcache, ref);
    uct_rc_gdr_rcache_region_unref(rcache, region);
    return UCS_OK;
}

/* A put that found the lock taken: by another thread, or by this one (a
   free hook) */
static UCS_F_NOINLINE ucs_status_t
uct_rc_gdr_rcache_put_slow(uct_rc_gdr_rcache_t *rcache,
                           uct_rc_gdr_rcache_handle_t handle)
{
    ucs_status_t status;

    uct_rc_gdr_rcache_lock(rcache);
    status = uct_rc_gdr_rcache_put_locked(rcache, handle);
    uct_rc_gdr_rcache_unlock(rcache);
    return status;
}

/* As get, the common case under one lock exchange and nothing to undo */
ucs_status_t uct_rc_gdr_rcache_put(uct_rc_gdr_rcache_t *rcache,
                                   uct_rc_gdr_rcache_handle_t handle)
{
    uct_rc_gdr_lock_entry_t entry;
    ucs_status_t status;

    entry = uct_rc_gdr_lock_enter_free(&rcache->lock);
    if (ucs_unlikely(entry == 0)) {
        return uct_rc_gdr_rcache_put_slow(rcache, handle);
    }

    status = uct_rc_gdr_rcache_put_locked(rcache, handle);
    uct_rc_gdr_lock_leave_once(&rcache->lock, entry);
    return status;
}

/* [start, end) was freed: its regions leave the cache, with the lock held */
static void uct_rc_gdr_rcache_invalidate_locked(uct_rc_gdr_rcache_t *rcache,
                                                uintptr_t start, uintptr_t end)
{
    uct_rc_gdr_rcache_region_t *list = NULL;

    uct_rc_gdr_rcache_tree_overlap(rcache->root, start, end,
                                   uct_rc_gdr_rcache_invalidate_visit, &list);
    if (list != NULL) {
        ucs_debug("rcache %s: memory [0x%lx..0x%lx) freed", rcache->name,
                  start, end);
        uct_rc_gdr_rcache_release(rcache, list);
    }
}

/* The queue is taken whole, so that frees queued while it is applied (a
   deregistration may free memory) wait for the next check, not for this
   loop */
static UCS_F_NOINLINE void
uct_rc_gdr_rcache_inv_apply(uct_rc_gdr_rcache_t *rcache)
{
    uct_rc_gdr_rcache_inv_t inv[UCT_RC_GDR_RCACHE_INV_MAX];
    unsigned i, count;

    pthread_spin_lock(&rcache->inv_lock);
    count = rcache->inv_count;
    memcpy(inv, rcache->inv, count * sizeof(*inv));
    __atomic_store_n(&rcache->inv_count, 0, __ATOMIC_RELAXED);
    pthread_spin_unlock(&rcache->inv_lock);

    rcache->stats.invalidations_queued += count;
    for (i = 0; i < count; ++i) {
        uct_rc_gdr_rcache_invalidate_locked(rcache, inv[i].start, inv[i].end);
    }
}

/* Queue a free for the holder of the lock: 0 when the queue is full */
static int uct_rc_gdr_rcache_inv_push(uct_rc_gdr_rcache_t *rcache,
                                      uintptr_t start, uintptr_t end)
{
    unsigned count;

    pthread_spin_lock(&rcache->inv_lock);
    count = rcache->inv_count;
    if (count < UCT_RC_GDR_RCACHE_INV_MAX) {
        rcache->inv[count].start = start;
        rcache->inv[count].end   = end;
        __atomic_store_n(&rcache->inv_count, count + 1, __ATOMIC_SEQ_CST);
    }
    pthread_spin_unlock(&rcache->inv_lock);
    return count < UCT_RC_GDR_RCACHE_INV_MAX;
}

void uct_rc_gdr_rcache_invalidate(uct_rc_gdr_rcache_t *rcache, void *address,
                                  size_t length)
{
    uintptr_t start = (uintptr_t)address;
    uintptr_t end;

    if (length == 0) {
        return;
    }

    end = uct_rc_gdr_rcache_range_end(start, length);

    /* Take the lock if free or ours. Another holder is never waited for
       (uct_rc_gdr_rcache_t::inv): the free is queued, then waited for only
       while the holder touches these bytes, and the lock tried once more in
       case the holder left before it looked. */
    while (!uct_rc_gdr_lock_try(&rcache->lock)) {
        if (uct_rc_gdr_rcache_inv_push(rcache, start, end)) {
            while (uct_rc_gdr_rcache_touches(rcache, start, end)) {
                sched_yield();
            }
            if (uct_rc_gdr_lock_try(&rcache->lock)) {
                uct_rc_gdr_rcache_unlock(rcache); /* applies it */
            }
            return;
        }
        sched_yield(); /* the queue is full */
    }

    uct_rc_gdr_rcache_inv_check(rcache);
    uct_rc_gdr_rcache_invalidate_locked(rcache, start, end);
    uct_rc_gdr_rcache_unlock(rcache);
}

void uct_rc_gdr_rcache_stats(uct_rc_gdr_rcache_t *rcache,
                             uct_rc_gdr_rcache_stats_t *stats)
{
    uct_rc_gdr_rcache_lock(rcache);
    *stats = rcache->stats;
    uct_rc_gdr_rcache_unlock(rcache);
}

void *uct_rc_gdr_rcache_region_priv(uct_rc_gdr_rcache_region_t *region)
{
    return UCS_PTR_BYTE_OFFSET(uct_rc_gdr_rcache_node(region),
                               UCT_RC_GDR_RCACHE_NODE_HEADER_SIZE);
}
