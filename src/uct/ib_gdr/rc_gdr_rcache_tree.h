/**
 * The registration cache's index: an AVL tree of regions ordered by
 * (start, end, address), each node holding the largest end of its subtree,
 * so that overlap and containment queries prune subtrees. Apart from the
 * cache (rc_gdr_rcache.c), which calls down into it: the tree knows a node's
 * links and its region's range, nothing of handles, lists or limits.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_RC_GDR_RCACHE_TREE_H_
#define UCT_RC_GDR_RCACHE_TREE_H_

#include "rc_gdr_rcache.h"

#include <ucs/sys/compiler_def.h>

#include <stdint.h>

BEGIN_C_DECLS

typedef struct uct_rc_gdr_rcache_node uct_rc_gdr_rcache_node_t;


/* Visits one region overlapping a query; must not change the tree */
typedef void (*uct_rc_gdr_rcache_visit_func_t)(
        uct_rc_gdr_rcache_region_t *region, void *arg);


/* Total order of the tree: regions may share a start, and even a range */
static UCS_F_ALWAYS_INLINE int
uct_rc_gdr_rcache_region_cmp(const uct_rc_gdr_rcache_region_t *a,
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


/* Inserts node (its region set) into the subtree at root; the new root */
uct_rc_gdr_rcache_node_t *
uct_rc_gdr_rcache_tree_insert(uct_rc_gdr_rcache_node_t *root,
                              uct_rc_gdr_rcache_node_t *node);

/* Removes node, which is in the subtree at root; the new root */
uct_rc_gdr_rcache_node_t *
uct_rc_gdr_rcache_tree_remove(uct_rc_gdr_rcache_node_t *root,
                              uct_rc_gdr_rcache_node_t *node);

/* Visit, in order, every region that overlaps [start, end) */
void uct_rc_gdr_rcache_tree_overlap(uct_rc_gdr_rcache_node_t *node,
                                    uintptr_t start, uintptr_t end,
                                    uct_rc_gdr_rcache_visit_func_t cb,
                                    void *arg);

/*
 * Visit, in order, every region that contains [start, end), in O(log n) per
 * region found; *steps_p counts the nodes examined.
 */
void uct_rc_gdr_rcache_tree_contain(uct_rc_gdr_rcache_node_t *node,
                                    uintptr_t start, uintptr_t end,
                                    uct_rc_gdr_rcache_visit_func_t cb,
                                    void *arg, uint64_t *steps_p);

END_C_DECLS

#endif
