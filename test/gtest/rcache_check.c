/**
 * Test helper: the registration cache's invariant checker (see
 * rcache_check.h). Walks what the cache keeps (rc_gdr_rcache_int.h) and
 * checks that every structure agrees with the others and with the counters.
 *
 * See file LICENSE for terms.
 */

#include "rcache_check.h"

#include <uct/ib_gdr/rc_gdr_glue_math.h> /* ucs_align_*, by release */
#include <uct/ib_gdr/rc_gdr_rcache_int.h>

#include <ucs/debug/log.h>

#include <stdlib.h>


/* State of an in-order walk of the tree by uct_rc_gdr_rcache_check() */
typedef struct {
    uct_rc_gdr_rcache_region_t *prev;
    uint64_t                   count;
    uint64_t                   size;
} uct_rc_gdr_rcache_check_ctx_t;


/* Check one subtree; returns its height, or -1 when an invariant is broken */
static int uct_rc_gdr_rcache_check_subtree(uct_rc_gdr_rcache_t *rcache,
                                           uct_rc_gdr_rcache_node_t *node,
                                           uct_rc_gdr_rcache_check_ctx_t *ctx)
{
    unsigned expected = UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE |
                        UCT_RC_GDR_RCACHE_REGION_FLAG_REGISTERED;
    unsigned ignored  = UCT_RC_GDR_RCACHE_REGION_FLAG_RETAIN |
                        UCT_RC_GDR_RCACHE_REGION_FLAG_CONTESTED |
                        UCT_RC_GDR_RCACHE_REGION_FLAG_TRACKED;
    uct_rc_gdr_rcache_region_t *region;
    int left_height, right_height;
    uintptr_t max_end;

    if (node == NULL) {
        return 0;
    }

    region = node->region;
    if ((region == NULL) || (uct_rc_gdr_rcache_node(region) != node)) {
        ucs_error("rcache %s: node %p names region %p, whose node is %p",
                  rcache->name, node, region,
                  (region == NULL) ? NULL : uct_rc_gdr_rcache_node(region));
        return -1;
    }

    left_height = uct_rc_gdr_rcache_check_subtree(rcache, node->left, ctx);
    if (left_height < 0) {
        return -1;
    }

    if ((ctx->prev != NULL) &&
        (uct_rc_gdr_rcache_region_cmp(ctx->prev, region) >= 0)) {
        ucs_error("rcache %s: " UCT_RC_GDR_RCACHE_REGION_FMT " is out of"
                  " order after region %p [0x%lx..0x%lx)", rcache->name,
                  UCT_RC_GDR_RCACHE_REGION_ARG(region), ctx->prev,
                  ctx->prev->start, ctx->prev->end);
        return -1;
    }
    ctx->prev  = region;
    ctx->size += region->end - region->start;
    ++ctx->count;

    right_height = uct_rc_gdr_rcache_check_subtree(rcache, node->right, ctx);
    if (right_height < 0) {
        return -1;
    }

    /* Kept regions have no handles and are on the kept list; the others
       have handles */
    if (region->refcount == 0) {
        expected |= UCT_RC_GDR_RCACHE_REGION_FLAG_IN_LRU |
                    UCT_RC_GDR_RCACHE_REGION_FLAG_RETAIN;
    }
    if ((region->start >= region->end) ||
        ((region->flags & ~ignored) != (expected & ~ignored)) ||
        ((region->flags & expected) != expected)) {
        ucs_error("rcache %s: " UCT_RC_GDR_RCACHE_REGION_FMT " flags 0x%x"
                  " is not a valid cached region", rcache->name,
                  UCT_RC_GDR_RCACHE_REGION_ARG(region), region->flags);
        return -1;
    }

    if ((abs(left_height - right_height) > 1) ||
        (node->height != 1 + ucs_max(left_height, right_height))) {
        ucs_error("rcache %s: " UCT_RC_GDR_RCACHE_REGION_FMT " height %d,"
                  " children %d and %d: not AVL balanced", rcache->name,
                  UCT_RC_GDR_RCACHE_REGION_ARG(region), node->height,
                  left_height, right_height);
        return -1;
    }

    max_end = region->end;
    if (node->left != NULL) {
        max_end = ucs_max(max_end, node->left->max_end);
    }
    if (node->right != NULL) {
        max_end = ucs_max(max_end, node->right->max_end);
    }
    if (node->max_end != max_end) {
        ucs_error("rcache %s: " UCT_RC_GDR_RCACHE_REGION_FMT " max end 0x%lx,"
                  " expected 0x%lx", rcache->name,
                  UCT_RC_GDR_RCACHE_REGION_ARG(region), node->max_end, max_end);
        return -1;
    }

    return node->height;
}

/* A tracked region lists exactly its handles, linked both ways */
static int uct_rc_gdr_rcache_check_tracked(uct_rc_gdr_rcache_t *rcache,
                                           uct_rc_gdr_rcache_region_t *region)
{
    uct_rc_gdr_rcache_ref_t *ref, *prev = NULL;
    unsigned count = 0;

    uct_rc_gdr_rcache_node_t *node = uct_rc_gdr_rcache_node(region);

    for (ref = node->refs; ref != NULL; prev = ref, ref = ref->next) {
        if ((ref->region != region) || (ref->prev != prev)) {
            ucs_error("rcache %s: handle 0x%lx listed by "
                      UCT_RC_GDR_RCACHE_REGION_FMT " is broken", rcache->name,
                      ref->handle, UCT_RC_GDR_RCACHE_REGION_ARG(region));
            return -1;
        }
        ++count;
    }

    if (count != node->check_refs) {
        ucs_error("rcache %s: " UCT_RC_GDR_RCACHE_REGION_FMT " lists %u of"
                  " its %u handles", rcache->name,
                  UCT_RC_GDR_RCACHE_REGION_ARG(region), count,
                  node->check_refs);
        return -1;
    }
    return 0;
}

/*
 * Every live slot of the cache's chunks: a handle that checks, inside its
 * region, counted into its node's check_refs. Returns the number of handles,
 * or -1.
 */
static int64_t uct_rc_gdr_rcache_check_handles(uct_rc_gdr_rcache_t *rcache)
{
    uct_rc_gdr_rcache_ref_t *chunk, *ref;
    int64_t handles = 0;
    unsigned c, i;

    for (c = 0; c < rcache->num_chunks; ++c) {
        chunk = uct_rc_gdr_rcache_ref_chunks[rcache->chunks[c]];
        for (i = 0; i < UCT_RC_GDR_RCACHE_REF_CHUNK_SIZE; ++i) {
            ref = &chunk[i];
            if (ref->region == NULL) {
                continue;
            }

            if ((ref->rcache != rcache) ||
                (uct_rc_gdr_rcache_handle_check(rcache, ref->handle) !=
                 ref) ||
                (ucs_align_down_pow2(ref->address, rcache->page_size) <
                 ref->region->start) ||
                (ref->address + ref->length > ref->region->end)) {
                ucs_error("rcache %s: handle 0x%lx of "
                          UCT_RC_GDR_RCACHE_REGION_FMT " is broken",
                          rcache->name, ref->handle,
                          UCT_RC_GDR_RCACHE_REGION_ARG(ref->region));
                return -1;
            }
            ++uct_rc_gdr_rcache_node(ref->region)->check_refs;
            ++handles;
        }
    }
    return handles;
}

ucs_status_t uct_rc_gdr_rcache_check(uct_rc_gdr_rcache_t *rcache)
{
    uct_rc_gdr_rcache_check_ctx_t ctx = {NULL, 0, 0};
    ucs_status_t status               = UCS_ERR_INVALID_PARAM;
    uint64_t live = 0, in_lru = 0, kept = 0;
    const uct_rc_gdr_rcache_hull_t *hull;
    uct_rc_gdr_rcache_region_t *region;
    uct_rc_gdr_rcache_node_t *node;
    unsigned holds;
    int64_t handles;

    uct_rc_gdr_rcache_lock(rcache);

    if (uct_rc_gdr_rcache_check_subtree(rcache, rcache->root, &ctx) < 0) {
        goto out;
    }

    if ((ctx.count != rcache->stats.entries) ||
        (ctx.size != rcache->stats.size)) {
        ucs_error("rcache %s: tree holds %lu regions of %lu bytes, counters"
                  " %lu and %lu", rcache->name, ctx.count, ctx.size,
                  rcache->stats.entries, rcache->stats.size);
        goto out;
    }

    ucs_list_for_each(node, &rcache->lru, lru) {
        region = node->region;
        if (!(region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_IN_LRU) ||
            !(region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE) ||
            (region->refcount != 0)) {
            ucs_error("rcache %s: kept " UCT_RC_GDR_RCACHE_REGION_FMT
                      " flags 0x%x", rcache->name,
                      UCT_RC_GDR_RCACHE_REGION_ARG(region), region->flags);
            goto out;
        }
        ++in_lru;
    }

    /* Each live region has exactly its refcount in handles (one more
       while released). Out of the tree, a live region is an invalidated or
       private one that still has handles, and its registration is released,
       or is being released (when called from inside ops->mem_dereg), unless
       private. */
    ucs_list_for_each(node, &rcache->regions, list) {
        node->check_refs = 0;
    }
    handles = uct_rc_gdr_rcache_check_handles(rcache);
    if (handles < 0) {
        goto out;
    }

    ucs_list_for_each(node, &rcache->regions, list) {
        region = node->region;
        ++live;
        if (region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_IN_LRU) {
            ++kept;
        }
        holds = (region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_RELEASING) ?
                1 : 0;
        if (node->check_refs + holds != region->refcount) {
            ucs_error("rcache %s: " UCT_RC_GDR_RCACHE_REGION_FMT " has %u"
                      " handles", rcache->name,
                      UCT_RC_GDR_RCACHE_REGION_ARG(region),
                      node->check_refs);
            goto out;
        }
        if ((region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_TRACKED) &&
            (uct_rc_gdr_rcache_check_tracked(rcache, region) < 0)) {
            goto out;
        }
        /* Each end of the hull on the region's first or last page */
        hull = uct_rc_gdr_rcache_hull(region);
        if ((hull->head >= rcache->page_size) ||
            (hull->tail >= rcache->page_size) ||
            (hull->head + hull->tail >= region->end - region->start)) {
            ucs_error("rcache %s: " UCT_RC_GDR_RCACHE_REGION_FMT " leaves"
                      " out %u and %u bytes of its hull", rcache->name,
                      UCT_RC_GDR_RCACHE_REGION_ARG(region), hull->head,
                      hull->tail);
            goto out;
        }
        if (!(region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_IN_TREE) &&
            ((region->refcount == 0) ||
             (region->flags & UCT_RC_GDR_RCACHE_REGION_FLAG_IN_LRU))) {
            ucs_error("rcache %s: out of the tree "
                      UCT_RC_GDR_RCACHE_REGION_FMT " has flags 0x%x",
                      rcache->name, UCT_RC_GDR_RCACHE_REGION_ARG(region),
                      region->flags);
            goto out;
        }
    }

    if ((live != rcache->stats.live) || (in_lru != kept) ||
        (in_lru != rcache->stats.cached) ||
        ((uint64_t)handles != rcache->stats.handles)) {
        ucs_error("rcache %s: %lu live regions (counter %lu), %lu kept (list"
                  " %lu, counter %lu), %ld handles (counter %lu)",
                  rcache->name, live, rcache->stats.live, kept, in_lru,
                  rcache->stats.cached, handles, rcache->stats.handles);
        goto out;
    }

    status = UCS_OK;

out:
    uct_rc_gdr_rcache_unlock(rcache);
    return status;
}
