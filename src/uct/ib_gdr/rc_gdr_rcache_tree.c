/**
 * The registration cache's interval tree (see rc_gdr_rcache_tree.h).
 *
 * See file LICENSE for terms.
 */

#include "rc_gdr_rcache_int.h"

#include <ucs/debug/assert.h>


static int uct_rc_gdr_rcache_node_height(const uct_rc_gdr_rcache_node_t *node)
{
    return (node == NULL) ? 0 : node->height;
}

/* Recompute the augmented fields of a node from its children */
static void uct_rc_gdr_rcache_node_update(uct_rc_gdr_rcache_node_t *node)
{
    node->height  = 1 + ucs_max(uct_rc_gdr_rcache_node_height(node->left),
                                uct_rc_gdr_rcache_node_height(node->right));
    node->max_end = node->region->end;
    if (node->left != NULL) {
        node->max_end = ucs_max(node->max_end, node->left->max_end);
    }
    if (node->right != NULL) {
        node->max_end = ucs_max(node->max_end, node->right->max_end);
    }
}

static uct_rc_gdr_rcache_node_t *
uct_rc_gdr_rcache_rotate_right(uct_rc_gdr_rcache_node_t *node)
{
    uct_rc_gdr_rcache_node_t *pivot = node->left;

    node->left   = pivot->right;
    pivot->right = node;
    uct_rc_gdr_rcache_node_update(node);
    uct_rc_gdr_rcache_node_update(pivot);
    return pivot;
}

static uct_rc_gdr_rcache_node_t *
uct_rc_gdr_rcache_rotate_left(uct_rc_gdr_rcache_node_t *node)
{
    uct_rc_gdr_rcache_node_t *pivot = node->right;

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
static uct_rc_gdr_rcache_node_t *
uct_rc_gdr_rcache_rebalance(uct_rc_gdr_rcache_node_t *node)
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

uct_rc_gdr_rcache_node_t *
uct_rc_gdr_rcache_tree_insert(uct_rc_gdr_rcache_node_t *root,
                              uct_rc_gdr_rcache_node_t *node)
{
    if (root == NULL) {
        node->left  = NULL;
        node->right = NULL;
        uct_rc_gdr_rcache_node_update(node);
        return node;
    }

    if (uct_rc_gdr_rcache_region_cmp(node->region, root->region) < 0) {
        root->left = uct_rc_gdr_rcache_tree_insert(root->left, node);
    } else {
        root->right = uct_rc_gdr_rcache_tree_insert(root->right, node);
    }

    return uct_rc_gdr_rcache_rebalance(root);
}

/* Unlink the leftmost node of a non-empty subtree into *min_p */
static uct_rc_gdr_rcache_node_t *
uct_rc_gdr_rcache_tree_remove_min(uct_rc_gdr_rcache_node_t *root,
                                  uct_rc_gdr_rcache_node_t **min_p)
{
    if (root->left == NULL) {
        *min_p = root;
        return root->right;
    }

    root->left = uct_rc_gdr_rcache_tree_remove_min(root->left, min_p);
    return uct_rc_gdr_rcache_rebalance(root);
}

uct_rc_gdr_rcache_node_t *
uct_rc_gdr_rcache_tree_remove(uct_rc_gdr_rcache_node_t *root,
                              uct_rc_gdr_rcache_node_t *node)
{
    uct_rc_gdr_rcache_node_t *successor;
    int cmp;

    ucs_assert(root != NULL); /* the caller checked that node is in the tree */

    cmp = uct_rc_gdr_rcache_region_cmp(node->region, root->region);
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

void uct_rc_gdr_rcache_tree_overlap(uct_rc_gdr_rcache_node_t *node,
                                    uintptr_t start, uintptr_t end,
                                    uct_rc_gdr_rcache_visit_func_t cb,
                                    void *arg)
{
    while ((node != NULL) && (node->max_end > start)) {
        uct_rc_gdr_rcache_tree_overlap(node->left, start, end, cb, arg);
        if (node->region->start >= end) {
            /* The right subtree starts even later */
            return;
        }

        if (node->region->end > start) {
            cb(node->region, arg);
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
void uct_rc_gdr_rcache_tree_contain(uct_rc_gdr_rcache_node_t *node,
                                    uintptr_t start, uintptr_t end,
                                    uct_rc_gdr_rcache_visit_func_t cb,
                                    void *arg, uint64_t *steps_p)
{
    while ((node != NULL) && (node->max_end >= end)) {
        ++(*steps_p);
        if (node->region->start > start) {
            /* The node and its right subtree start too late */
            node = node->left;
            continue;
        }

        uct_rc_gdr_rcache_tree_contain(node->left, start, end, cb, arg,
                                       steps_p);
        if (node->region->end >= end) {
            cb(node->region, arg);
        }

        node = node->right;
    }
}
