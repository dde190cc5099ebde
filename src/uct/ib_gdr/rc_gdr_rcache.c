/**
 * Registration cache of the rc_gdr memory domain, for host and CUDA memory.
 *
 * See file LICENSE for terms.
 */

#include "rc_gdr_rcache.h"

#include <ucs/datastruct/khash.h>
#include <ucs/debug/assert.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include "rc_gdr_glue_math.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>


/* The md's private area starts on this boundary after the region */
#define UCT_RC_GDR_RCACHE_PRIV_ALIGN 16

#define UCT_RC_GDR_RCACHE_REGION_SIZE \
    ucs_align_up_pow2(sizeof(uct_rc_gdr_rcache_region_t), \
                      UCT_RC_GDR_RCACHE_PRIV_ALIGN)

#define UCT_RC_GDR_RCACHE_REGION_FMT \
    "region %p [0x%lx..0x%lx) buffer %lu type %d refcount %u"

#define UCT_RC_GDR_RCACHE_REGION_ARG(_region) \
    (_region), (_region)->start, (_region)->end, (_region)->buffer_id, \
    (_region)->mem_type, (_region)->refcount


enum {
    /* In the interval tree: get can find it */
    UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE    = UCS_BIT(0),
    /* ops->mem_reg succeeded and ops->mem_dereg was not called yet */
    UCT_RC_GDR_RCACHE_REGION_FLAG_REGISTERED = UCS_BIT(1),
    /* Out of the tree, on a list whose registrations are being released */
    UCT_RC_GDR_RCACHE_REGION_FLAG_RELEASING  = UCS_BIT(2)
};


/*
 * Every region a put may still name, keyed by its address. put checks
 * membership here before it touches the pointer, so a double or stale put is
 * answered with an error instead of a use-after-free.
 */
KHASH_SET_INIT_INT64(uct_rc_gdr_rcache_live)


struct uct_rc_gdr_rcache {
    /*
     * One recursive lock around every operation. Recursive because
     * ops->mem_dereg (ibv_dereg_mr) may free memory, and the free hook calls
     * invalidate on this thread. A mutex rather than a spinlock: it is held
     * across ops->mem_reg, which pins pages in the kernel and may take
     * milliseconds for a large buffer.
     */
    pthread_mutex_t               lock;

    /*
     * The lookup structure: an AVL tree of regions keyed by (start, end,
     * address), each node also holding the largest end of its subtree, so a
     * stabbing or overlap query prunes subtrees and runs in O(log n + k).
     * Neither ucs_pgtable nor ucs_rcache fits: ucs_pgtable requires disjoint
     * regions, and ucs_rcache merges overlapping regions into one and evicts
     * the ones it replaces, while here a partial overlap must get its own
     * region and leave the other one alone.
     */
    uct_rc_gdr_rcache_region_t    *root;

    khash_t(uct_rc_gdr_rcache_live) live;
    uct_rc_gdr_rcache_stats_t     stats;
    size_t                        page_size;
    size_t                        priv_size;
    const uct_rc_gdr_rcache_ops_t *ops;
    void                          *arg;
    char                          *name;
};


/* What a get learns from one walk over the regions containing its range */
typedef struct {
    uintptr_t                  start;      /* rounded request */
    uintptr_t                  end;
    uintptr_t                  addr_start; /* request as asked */
    uintptr_t                  addr_end;
    uint64_t                   buffer_id;
    int                        mem_type;
    uct_rc_gdr_rcache_region_t *hit;
    uct_rc_gdr_rcache_region_t *stale;     /* list by next_release */
} uct_rc_gdr_rcache_lookup_t;


/* Visits one region overlapping a query; must not change the tree */
typedef void (*uct_rc_gdr_rcache_visit_func_t)(
        uct_rc_gdr_rcache_region_t *region, void *arg);


/* State of an in-order walk of the tree by uct_rc_gdr_rcache_check() */
typedef struct {
    uct_rc_gdr_rcache_region_t *prev;
    uint64_t                   count;
} uct_rc_gdr_rcache_check_ctx_t;


static void uct_rc_gdr_rcache_lock(uct_rc_gdr_rcache_t *rcache)
{
    pthread_mutex_lock(&rcache->lock);
}

static void uct_rc_gdr_rcache_unlock(uct_rc_gdr_rcache_t *rcache)
{
    pthread_mutex_unlock(&rcache->lock);
}

/* Total order of the tree: regions may share a start, and even a range */
static int uct_rc_gdr_rcache_region_cmp(const uct_rc_gdr_rcache_region_t *a,
                                        const uct_rc_gdr_rcache_region_t *b)
{
    if (a->start != b->start) {
        return (a->start < b->start) ? -1 : 1;
    }

    if (a->end != b->end) {
        return (a->end < b->end) ? -1 : 1;
    }

    if (a != b) {
        return ((uintptr_t)a < (uintptr_t)b) ? -1 : 1;
    }

    return 0;
}

static int uct_rc_gdr_rcache_node_height(const uct_rc_gdr_rcache_region_t *node)
{
    return (node == NULL) ? 0 : node->height;
}

/* Recompute the augmented fields of a node from its children */
static void uct_rc_gdr_rcache_node_update(uct_rc_gdr_rcache_region_t *node)
{
    node->height  = 1 + ucs_max(uct_rc_gdr_rcache_node_height(node->left),
                                uct_rc_gdr_rcache_node_height(node->right));
    node->max_end = node->end;
    if (node->left != NULL) {
        node->max_end = ucs_max(node->max_end, node->left->max_end);
    }
    if (node->right != NULL) {
        node->max_end = ucs_max(node->max_end, node->right->max_end);
    }
}

static uct_rc_gdr_rcache_region_t *
uct_rc_gdr_rcache_rotate_right(uct_rc_gdr_rcache_region_t *node)
{
    uct_rc_gdr_rcache_region_t *pivot = node->left;

    node->left   = pivot->right;
    pivot->right = node;
    uct_rc_gdr_rcache_node_update(node);
    uct_rc_gdr_rcache_node_update(pivot);
    return pivot;
}

static uct_rc_gdr_rcache_region_t *
uct_rc_gdr_rcache_rotate_left(uct_rc_gdr_rcache_region_t *node)
{
    uct_rc_gdr_rcache_region_t *pivot = node->right;

    node->right = pivot->left;
    pivot->left = node;
    uct_rc_gdr_rcache_node_update(node);
    uct_rc_gdr_rcache_node_update(pivot);
    return pivot;
}

/*
 * Restore the AVL balance of a subtree whose children are balanced and differ
 * in height by at most 2; returns the new subtree root.
 */
static uct_rc_gdr_rcache_region_t *
uct_rc_gdr_rcache_rebalance(uct_rc_gdr_rcache_region_t *node)
{
    int balance;

    uct_rc_gdr_rcache_node_update(node);
    balance = uct_rc_gdr_rcache_node_height(node->left) -
              uct_rc_gdr_rcache_node_height(node->right);

    if (balance > 1) {
        if (uct_rc_gdr_rcache_node_height(node->left->left) <
            uct_rc_gdr_rcache_node_height(node->left->right)) {
            node->left = uct_rc_gdr_rcache_rotate_left(node->left);
        }
        return uct_rc_gdr_rcache_rotate_right(node);
    }

    if (balance < -1) {
        if (uct_rc_gdr_rcache_node_height(node->right->right) <
            uct_rc_gdr_rcache_node_height(node->right->left)) {
            node->right = uct_rc_gdr_rcache_rotate_right(node->right);
        }
        return uct_rc_gdr_rcache_rotate_left(node);
    }

    return node;
}

static uct_rc_gdr_rcache_region_t *
uct_rc_gdr_rcache_tree_insert(uct_rc_gdr_rcache_region_t *root,
                              uct_rc_gdr_rcache_region_t *node)
{
    if (root == NULL) {
        node->left  = NULL;
        node->right = NULL;
        uct_rc_gdr_rcache_node_update(node);
        return node;
    }

    if (uct_rc_gdr_rcache_region_cmp(node, root) < 0) {
        root->left = uct_rc_gdr_rcache_tree_insert(root->left, node);
    } else {
        root->right = uct_rc_gdr_rcache_tree_insert(root->right, node);
    }

    return uct_rc_gdr_rcache_rebalance(root);
}

/* Unlink the leftmost node of a non-empty subtree into *min_p */
static uct_rc_gdr_rcache_region_t *
uct_rc_gdr_rcache_tree_remove_min(uct_rc_gdr_rcache_region_t *root,
                                  uct_rc_gdr_rcache_region_t **min_p)
{
    if (root->left == NULL) {
        *min_p = root;
        return root->right;
    }

    root->left = uct_rc_gdr_rcache_tree_remove_min(root->left, min_p);
    return uct_rc_gdr_rcache_rebalance(root);
}

static uct_rc_gdr_rcache_region_t *
uct_rc_gdr_rcache_tree_remove(uct_rc_gdr_rcache_region_t *root,
                              uct_rc_gdr_rcache_region_t *node)
{
    uct_rc_gdr_rcache_region_t *successor;
    int cmp;

    ucs_assert(root != NULL); /* the caller checked that node is in the tree */

    cmp = uct_rc_gdr_rcache_region_cmp(node, root);
    if (cmp < 0) {
        root->left = uct_rc_gdr_rcache_tree_remove(root->left, node);
    } else if (cmp > 0) {
        root->right = uct_rc_gdr_rcache_tree_remove(root->right, node);
    } else if (root->left == NULL) {
        return root->right;
    } else if (root->right == NULL) {
        return root->left;
    } else {
        /* The in-order successor takes the removed node's place, which keeps
           the order; rebalancing on the way up keeps the heights */
        root->right     = uct_rc_gdr_rcache_tree_remove_min(root->right,
                                                            &successor);
        successor->left  = root->left;
        successor->right = root->right;
        root             = successor;
    }

    return uct_rc_gdr_rcache_rebalance(root);
}

/* Visit, in order, every region that overlaps [start, end) */
static void uct_rc_gdr_rcache_tree_overlap(uct_rc_gdr_rcache_region_t *node,
                                           uintptr_t start, uintptr_t end,
                                           uct_rc_gdr_rcache_visit_func_t cb,
                                           void *arg)
{
    while ((node != NULL) && (node->max_end > start)) {
        uct_rc_gdr_rcache_tree_overlap(node->left, start, end, cb, arg);
        if (node->start >= end) {
            /* The right subtree starts even later */
            return;
        }

        if (node->end > start) {
            cb(node, arg);
        }

        node = node->right;
    }
}

/*
 * Visit, in order, every region that contains [start, end). Subtrees that end
 * too early and nodes that start too late are pruned, so regions inside the
 * range or beside it cost nothing: O(log n) per containing region found.
 * *steps_p counts the nodes examined.
 */
static void uct_rc_gdr_rcache_tree_contain(uct_rc_gdr_rcache_region_t *node,
                                           uintptr_t start, uintptr_t end,
                                           uct_rc_gdr_rcache_visit_func_t cb,
                                           void *arg, uint64_t *steps_p)
{
    while ((node != NULL) && (node->max_end >= end)) {
        ++(*steps_p);
        if (node->start > start) {
            /* The node and its right subtree start too late */
            node = node->left;
            continue;
        }

        uct_rc_gdr_rcache_tree_contain(node->left, start, end, cb, arg,
                                       steps_p);
        if (node->end >= end) {
            cb(node, arg);
        }

        node = node->right;
    }
}

static void uct_rc_gdr_rcache_tree_add(uct_rc_gdr_rcache_t *rcache,
                                       uct_rc_gdr_rcache_region_t *region)
{
    rcache->root    = uct_rc_gdr_rcache_tree_insert(rcache->root, region);
    region->flags  |= UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE;
    ++rcache->stats.entries;
}

static void uct_rc_gdr_rcache_tree_del(uct_rc_gdr_rcache_t *rcache,
                                       uct_rc_gdr_rcache_region_t *region)
{
    rcache->root   = uct_rc_gdr_rcache_tree_remove(rcache->root, region);
    region->flags &= ~UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE;
    region->left   = NULL;
    region->right  = NULL;
    --rcache->stats.entries;
}

static int uct_rc_gdr_rcache_is_live(uct_rc_gdr_rcache_t *rcache,
                                     const uct_rc_gdr_rcache_region_t *region)
{
    return kh_get(uct_rc_gdr_rcache_live, &rcache->live,
                  (uintptr_t)region) != kh_end(&rcache->live);
}

static void uct_rc_gdr_rcache_live_del(uct_rc_gdr_rcache_t *rcache,
                                       uct_rc_gdr_rcache_region_t *region)
{
    khiter_t iter;

    iter = kh_get(uct_rc_gdr_rcache_live, &rcache->live, (uintptr_t)region);
    ucs_assert(iter != kh_end(&rcache->live));
    kh_del(uct_rc_gdr_rcache_live, &rcache->live, iter);
    --rcache->stats.live;
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

/* Drop one reference; the last one releases and frees the region */
static void uct_rc_gdr_rcache_region_unref(uct_rc_gdr_rcache_t *rcache,
                                           uct_rc_gdr_rcache_region_t *region)
{
    ucs_assert(region->refcount > 0);
    if (--region->refcount > 0) {
        return;
    }

    /* Out of every lookup before mem_dereg, which may re-enter the cache */
    if (region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE) {
        uct_rc_gdr_rcache_tree_del(rcache, region);
    }
    uct_rc_gdr_rcache_live_del(rcache, region);
    uct_rc_gdr_rcache_region_dereg(rcache, region);
    ucs_free(region);
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

    for (region = list; region != NULL; region = region->next_release) {
        uct_rc_gdr_rcache_tree_del(rcache, region);
        region->flags |= UCT_RC_GDR_RCACHE_REGION_FLAG_RELEASING;
        ++region->refcount;
        ++rcache->stats.invalidations;
        ucs_debug("rcache %s: invalidate " UCT_RC_GDR_RCACHE_REGION_FMT,
                  rcache->name, UCT_RC_GDR_RCACHE_REGION_ARG(region));
    }

    while (list != NULL) {
        region               = list;
        list                 = region->next_release;
        region->next_release = NULL;
        uct_rc_gdr_rcache_region_dereg(rcache, region);
        region->flags       &= ~UCT_RC_GDR_RCACHE_REGION_FLAG_RELEASING;
        uct_rc_gdr_rcache_region_unref(rcache, region);
    }
}

/* Classify a region that contains the rounded request */
static void uct_rc_gdr_rcache_lookup_visit(uct_rc_gdr_rcache_region_t *region,
                                           void *arg)
{
    uct_rc_gdr_rcache_lookup_t *lookup = arg;

    if ((region->buffer_id == lookup->buffer_id) &&
        (region->mem_type == lookup->mem_type)) {
        if (lookup->hit == NULL) {
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
    if ((region->used_start < lookup->addr_end) &&
        (region->used_end > lookup->addr_start)) {
        region->next_release = lookup->stale;
        lookup->stale        = region;
    }
}

static void
uct_rc_gdr_rcache_invalidate_visit(uct_rc_gdr_rcache_region_t *region,
                                   void *arg)
{
    uct_rc_gdr_rcache_region_t **list_p = arg;

    region->next_release = *list_p;
    *list_p              = region;
}

/*
 * Round [address, address + length) out to pages, refusing ranges that are
 * empty or do not fit in the address space.
 */
static ucs_status_t
uct_rc_gdr_rcache_range_round(uct_rc_gdr_rcache_t *rcache, uintptr_t address,
                              size_t length, uintptr_t *start_p,
                              uintptr_t *end_p)
{
    uintptr_t last;

    if (length == 0) {
        ucs_error("rcache %s: empty range (length 0) at address 0x%lx",
                  rcache->name, address);
        return UCS_ERR_INVALID_PARAM;
    }

    last = address + (length - 1);
    if ((last < address) || (last > UINTPTR_MAX - rcache->page_size)) {
        ucs_error("rcache %s: range at 0x%lx length %zu overflows the address"
                  " space when rounded to %zu-byte pages", rcache->name,
                  address, length, rcache->page_size);
        return UCS_ERR_INVALID_PARAM;
    }

    *start_p = ucs_align_down_pow2(address, rcache->page_size);
    *end_p   = ucs_align_up_pow2(last + 1, rcache->page_size);
    return UCS_OK;
}

ucs_status_t
uct_rc_gdr_rcache_create(const uct_rc_gdr_rcache_params_t *params,
                         uct_rc_gdr_rcache_t **rcache_p)
{
    const char *name = (params->name != NULL) ? params->name : "rc_gdr";
    pthread_mutexattr_t attr;
    uct_rc_gdr_rcache_t *rcache;
    ucs_status_t status;
    int ret;

    if (!ucs_is_pow2(params->page_size)) {
        ucs_error("rcache %s: page size %zu is not a power of 2", name,
                  params->page_size);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((params->ops == NULL) || (params->ops->mem_reg == NULL) ||
        (params->ops->mem_dereg == NULL)) {
        ucs_error("rcache %s: mem_reg and mem_dereg operations are required",
                  name);
        return UCS_ERR_INVALID_PARAM;
    }

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

    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    ret = pthread_mutex_init(&rcache->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if (ret != 0) {
        ucs_error("rcache %s: pthread_mutex_init() failed: %s", name,
                  strerror(ret));
        status = UCS_ERR_IO_ERROR;
        goto err_free_name;
    }

    kh_init_inplace(uct_rc_gdr_rcache_live, &rcache->live);
    rcache->root      = NULL;
    rcache->page_size = params->page_size;
    rcache->priv_size = params->priv_size;
    rcache->ops       = params->ops;
    rcache->arg       = params->arg;

    ucs_debug("rcache %s: created, page size %zu, priv size %zu", name,
              rcache->page_size, rcache->priv_size);
    *rcache_p = rcache;
    return UCS_OK;

err_free_name:
    ucs_free(rcache->name);
err_free_rcache:
    ucs_free(rcache);
    return status;
}

void uct_rc_gdr_rcache_destroy(uct_rc_gdr_rcache_t *rcache)
{
    uct_rc_gdr_rcache_region_t *list = NULL;
    uct_rc_gdr_rcache_region_t *region;
    uint64_t key;

    uct_rc_gdr_rcache_lock(rcache);

    /* Empty the tree before releasing anything, for the same reason as
       uct_rc_gdr_rcache_release() */
    uct_rc_gdr_rcache_tree_overlap(rcache->root, 0, UINTPTR_MAX,
                                   uct_rc_gdr_rcache_invalidate_visit, &list);
    for (region = list; region != NULL; region = region->next_release) {
        uct_rc_gdr_rcache_tree_del(rcache, region);
    }

    while (list != NULL) {
        region               = list;
        list                 = region->next_release;
        region->next_release = NULL;
        uct_rc_gdr_rcache_region_dereg(rcache, region);
    }

    /* A region lives only while it has references: whatever is left leaked */
    kh_foreach_key(&rcache->live, key, {
        region = (uct_rc_gdr_rcache_region_t*)(uintptr_t)key;
        ucs_warn("rcache %s: destroying " UCT_RC_GDR_RCACHE_REGION_FMT
                 " still referenced", rcache->name,
                 UCT_RC_GDR_RCACHE_REGION_ARG(region));
        ucs_free(region);
    })

    ucs_debug("rcache %s: destroyed: hits %lu misses %lu nic regs %lu"
              " deregs %lu invalidations %lu", rcache->name,
              rcache->stats.hits, rcache->stats.misses,
              rcache->stats.nic_regs, rcache->stats.nic_deregs,
              rcache->stats.invalidations);

    kh_destroy_inplace(uct_rc_gdr_rcache_live, &rcache->live);
    uct_rc_gdr_rcache_unlock(rcache);
    pthread_mutex_destroy(&rcache->lock);
    ucs_free(rcache->name);
    ucs_free(rcache);
}

/* A miss: register a new region for the rounded range and cache it */
static ucs_status_t
uct_rc_gdr_rcache_region_create(uct_rc_gdr_rcache_t *rcache,
                                const uct_rc_gdr_rcache_lookup_t *lookup,
                                uct_rc_gdr_rcache_region_t **region_p)
{
    uct_rc_gdr_rcache_region_t *region;
    ucs_status_t status;
    int ret;

    region = ucs_calloc(1, UCT_RC_GDR_RCACHE_REGION_SIZE + rcache->priv_size,
                        "rc_gdr_rcache_region");
    if (region == NULL) {
        ucs_error("rcache %s: failed to allocate a region", rcache->name);
        return UCS_ERR_NO_MEMORY;
    }

    region->start      = lookup->start;
    region->end        = lookup->end;
    region->refcount   = 1;
    region->buffer_id  = lookup->buffer_id;
    region->mem_type   = lookup->mem_type;
    region->used_start = lookup->addr_start;
    region->used_end   = lookup->addr_end;

    /* Live before registering: a free hook inside mem_reg that re-enters the
       cache finds consistent bookkeeping (the region is not in the tree) */
    kh_put(uct_rc_gdr_rcache_live, &rcache->live, (uintptr_t)region, &ret);
    if (ret < 0) {
        ucs_error("rcache %s: failed to add a region to the live set",
                  rcache->name);
        status = UCS_ERR_NO_MEMORY;
        goto err_free;
    }
    ++rcache->stats.live;

    status = rcache->ops->mem_reg(rcache->arg, region);
    if (status != UCS_OK) {
        /* mem_reg decided and logged the error */
        goto err_live_del;
    }

    region->flags |= UCT_RC_GDR_RCACHE_REGION_FLAG_REGISTERED;
    ++rcache->stats.nic_regs;
    uct_rc_gdr_rcache_tree_add(rcache, region);
    *region_p = region;
    return UCS_OK;

err_live_del:
    uct_rc_gdr_rcache_live_del(rcache, region);
err_free:
    ucs_free(region);
    return status;
}

ucs_status_t
uct_rc_gdr_rcache_get(uct_rc_gdr_rcache_t *rcache, void *address,
                      size_t length, int mem_type, uint64_t buffer_id,
                      uct_rc_gdr_rcache_region_t **region_p)
{
    uct_rc_gdr_rcache_lookup_t lookup;
    uct_rc_gdr_rcache_region_t *region;
    ucs_status_t status;

    status = uct_rc_gdr_rcache_range_round(rcache, (uintptr_t)address, length,
                                           &lookup.start, &lookup.end);
    if (status != UCS_OK) {
        return status;
    }

    lookup.addr_start = (uintptr_t)address;
    lookup.addr_end   = (uintptr_t)address + length;
    lookup.buffer_id  = buffer_id;
    lookup.mem_type   = mem_type;

    uct_rc_gdr_rcache_lock(rcache);

    /* Releasing stale regions may re-enter the cache and change the tree,
       so look again until a walk finds nothing stale */
    for (;;) {
        lookup.hit   = NULL;
        lookup.stale = NULL;
        uct_rc_gdr_rcache_tree_contain(rcache->root, lookup.start, lookup.end,
                                       uct_rc_gdr_rcache_lookup_visit,
                                       &lookup, &rcache->stats.lookup_steps);
        if (lookup.stale == NULL) {
            break;
        }

        uct_rc_gdr_rcache_release(rcache, lookup.stale);
    }

    region = lookup.hit;
    if (region != NULL) {
        ++region->refcount;
        ++rcache->stats.hits;
        region->used_start = ucs_min(region->used_start, lookup.addr_start);
        region->used_end   = ucs_max(region->used_end, lookup.addr_end);
        ucs_trace("rcache %s: hit %p length %zu: "
                  UCT_RC_GDR_RCACHE_REGION_FMT, rcache->name, address,
                  length, UCT_RC_GDR_RCACHE_REGION_ARG(region));
        goto out;
    }

    ++rcache->stats.misses;
    status = uct_rc_gdr_rcache_region_create(rcache, &lookup, &region);
    if (status != UCS_OK) {
        goto out_unlock;
    }

    ucs_debug("rcache %s: miss %p length %zu: new "
              UCT_RC_GDR_RCACHE_REGION_FMT, rcache->name, address, length,
              UCT_RC_GDR_RCACHE_REGION_ARG(region));

out:
    *region_p = region;
out_unlock:
    uct_rc_gdr_rcache_unlock(rcache);
    return status;
}

ucs_status_t uct_rc_gdr_rcache_put(uct_rc_gdr_rcache_t *rcache,
                                   uct_rc_gdr_rcache_region_t *region)
{
    uct_rc_gdr_rcache_lock(rcache);

    if (!uct_rc_gdr_rcache_is_live(rcache, region)) {
        uct_rc_gdr_rcache_unlock(rcache);
        /* Only the pointer value may be printed: it may be freed memory */
        ucs_error("rcache %s: put of region %p which is not live (double or"
                  " stale deregistration)", rcache->name, region);
        return UCS_ERR_INVALID_PARAM;
    }

    ucs_trace("rcache %s: put " UCT_RC_GDR_RCACHE_REGION_FMT, rcache->name,
              UCT_RC_GDR_RCACHE_REGION_ARG(region));
    uct_rc_gdr_rcache_region_unref(rcache, region);
    uct_rc_gdr_rcache_unlock(rcache);
    return UCS_OK;
}

void uct_rc_gdr_rcache_invalidate(uct_rc_gdr_rcache_t *rcache, void *address,
                                  size_t length)
{
    uintptr_t start = (uintptr_t)address;
    uct_rc_gdr_rcache_region_t *list = NULL;
    uintptr_t end;

    if (length == 0) {
        return;
    }

    /* A range running past the end of the address space means up to it */
    end = (length > UINTPTR_MAX - start) ? UINTPTR_MAX : start + length;

    uct_rc_gdr_rcache_lock(rcache);
    uct_rc_gdr_rcache_tree_overlap(rcache->root, start, end,
                                   uct_rc_gdr_rcache_invalidate_visit, &list);
    if (list != NULL) {
        ucs_debug("rcache %s: memory [0x%lx..0x%lx) freed", rcache->name,
                  start, end);
        uct_rc_gdr_rcache_release(rcache, list);
    }
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
    return UCS_PTR_BYTE_OFFSET(region, UCT_RC_GDR_RCACHE_REGION_SIZE);
}

/* Check one subtree; returns its height, or -1 when an invariant is broken */
static int uct_rc_gdr_rcache_check_subtree(uct_rc_gdr_rcache_t *rcache,
                                           uct_rc_gdr_rcache_region_t *node,
                                           uct_rc_gdr_rcache_check_ctx_t *ctx)
{
    int left_height, right_height;
    uintptr_t max_end;

    if (node == NULL) {
        return 0;
    }

    left_height = uct_rc_gdr_rcache_check_subtree(rcache, node->left, ctx);
    if (left_height < 0) {
        return -1;
    }

    if ((ctx->prev != NULL) &&
        (uct_rc_gdr_rcache_region_cmp(ctx->prev, node) >= 0)) {
        ucs_error("rcache %s: " UCT_RC_GDR_RCACHE_REGION_FMT " is out of"
                  " order after region %p [0x%lx..0x%lx)", rcache->name,
                  UCT_RC_GDR_RCACHE_REGION_ARG(node), ctx->prev,
                  ctx->prev->start, ctx->prev->end);
        return -1;
    }
    ctx->prev = node;
    ++ctx->count;

    right_height = uct_rc_gdr_rcache_check_subtree(rcache, node->right, ctx);
    if (right_height < 0) {
        return -1;
    }

    if ((node->start >= node->end) || (node->refcount == 0) ||
        (node->flags != (UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE |
                         UCT_RC_GDR_RCACHE_REGION_FLAG_REGISTERED)) ||
        !uct_rc_gdr_rcache_is_live(rcache, node)) {
        ucs_error("rcache %s: " UCT_RC_GDR_RCACHE_REGION_FMT " flags 0x%x"
                  " live %d is not a valid cached region", rcache->name,
                  UCT_RC_GDR_RCACHE_REGION_ARG(node), node->flags,
                  uct_rc_gdr_rcache_is_live(rcache, node));
        return -1;
    }

    if ((abs(left_height - right_height) > 1) ||
        (node->height != 1 + ucs_max(left_height, right_height))) {
        ucs_error("rcache %s: " UCT_RC_GDR_RCACHE_REGION_FMT " height %d,"
                  " children %d and %d: not AVL balanced", rcache->name,
                  UCT_RC_GDR_RCACHE_REGION_ARG(node), node->height,
                  left_height, right_height);
        return -1;
    }

    max_end = node->end;
    if (node->left != NULL) {
        max_end = ucs_max(max_end, node->left->max_end);
    }
    if (node->right != NULL) {
        max_end = ucs_max(max_end, node->right->max_end);
    }
    if (node->max_end != max_end) {
        ucs_error("rcache %s: " UCT_RC_GDR_RCACHE_REGION_FMT " max end 0x%lx,"
                  " expected 0x%lx", rcache->name,
                  UCT_RC_GDR_RCACHE_REGION_ARG(node), node->max_end, max_end);
        return -1;
    }

    return node->height;
}

ucs_status_t uct_rc_gdr_rcache_check(uct_rc_gdr_rcache_t *rcache)
{
    uct_rc_gdr_rcache_check_ctx_t ctx = {NULL, 0};
    ucs_status_t status               = UCS_ERR_INVALID_PARAM;
    uct_rc_gdr_rcache_region_t *region;
    uint64_t key, in_tree;

    uct_rc_gdr_rcache_lock(rcache);

    if (uct_rc_gdr_rcache_check_subtree(rcache, rcache->root, &ctx) < 0) {
        goto out;
    }

    if (ctx.count != rcache->stats.entries) {
        ucs_error("rcache %s: tree holds %lu regions, entries counter %lu",
                  rcache->name, ctx.count, rcache->stats.entries);
        goto out;
    }

    /* Out of the tree, a live region is an invalidated one that still has
       references, and its registration is released, or is being released
       (when called from inside ops->mem_dereg) */
    in_tree = 0;
    kh_foreach_key(&rcache->live, key, {
        region = (uct_rc_gdr_rcache_region_t*)(uintptr_t)key;
        if (region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE) {
            ++in_tree;
        } else if ((region->refcount == 0) ||
                   ((region->flags != 0) &&
                    !(region->flags &
                      UCT_RC_GDR_RCACHE_REGION_FLAG_RELEASING))) {
            ucs_error("rcache %s: invalidated " UCT_RC_GDR_RCACHE_REGION_FMT
                      " has flags 0x%x", rcache->name,
                      UCT_RC_GDR_RCACHE_REGION_ARG(region), region->flags);
            goto out;
        }
    })

    if ((in_tree != ctx.count) ||
        (kh_size(&rcache->live) != rcache->stats.live)) {
        ucs_error("rcache %s: live set holds %u regions (%lu in the tree),"
                  " tree %lu, live counter %lu", rcache->name,
                  kh_size(&rcache->live), in_tree, ctx.count,
                  rcache->stats.live);
        goto out;
    }

    status = UCS_OK;

out:
    uct_rc_gdr_rcache_unlock(rcache);
    return status;
}
