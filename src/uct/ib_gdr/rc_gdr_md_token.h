/*
 * rc_gdr memory domain: the peer tokens. A bounce-lane request of a peer
 * names memory by a token drawn at registration; this table is all that
 * maps a token to the bytes it may reach. Apart from registration
 * (rc_gdr_md.c) because it is the md's trust boundary: what a peer may
 * name, and how a request naming anything else is refused.
 */

#ifndef UCT_RC_GDR_MD_TOKEN_H_
#define UCT_RC_GDR_MD_TOKEN_H_

#include "rc_gdr_rcache.h"

#include <ucs/datastruct/khash.h>
#include <ucs/type/status.h>

#include <stddef.h>
#include <stdint.h>


typedef struct uct_rc_gdr_md uct_rc_gdr_md_t;


/*
 * What a bounce token names: the registration (cache handle) whose exact
 * bytes a peer may reach, for a bounce registration, whose token is its own;
 * or, for a one-direction region whose NIC key is the token, the region:
 * then the bytes of any live registration of it.
 */
typedef struct uct_rc_gdr_token_target {
    uct_rc_gdr_rcache_handle_t handle;  /* 0: a region's NIC key */
    uct_rc_gdr_rcache_region_t *region;
    uint64_t                   stamp;   /* unique in the md's lifetime: a
                                           token issued again (a NIC key
                                           reused) is another stamp */
} uct_rc_gdr_token_target_t;


KHASH_MAP_INIT_INT64(uct_rc_gdr_token, uct_rc_gdr_token_target_t);


/* An empty token table for a new md, and its release at md close */
void uct_rc_gdr_md_token_init(uct_rc_gdr_md_t *md);

void uct_rc_gdr_md_token_cleanup(uct_rc_gdr_md_t *md);

/*
 * Makes registered bytes reachable by peers' bounce-lane messages, under the
 * cache lock. The token is drawn at random, not counted: a peer cannot guess
 * another registration's from its own. @a nic_key 0: all of its 55 bits, for
 * the registration @a handle (a bounce registration has no NIC key to
 * offer); for a @a region, its NIC key, which its rkey already
 * carries, below 23 random bits.
 */
ucs_status_t uct_rc_gdr_md_token_add(uct_rc_gdr_md_t *md, uint32_t nic_key,
                                     uct_rc_gdr_rcache_handle_t handle,
                                     uct_rc_gdr_rcache_region_t *region,
                                     uint64_t *token_p);

/* No peer request passes the token's check after this (cache lock held) */
void uct_rc_gdr_md_token_del(uct_rc_gdr_md_t *md, uint64_t token);

/**
 * Validates a bounce-lane target named by a peer: @a token must name a live
 * registration of this md and [address, address + length) lie inside the
 * bytes it registered (not the page-rounded region around them). On success
 * *gpu_p is the CUDA ordinal of the memory and *stamp_p what identifies this
 * registration's token for good.
 *
 * A transfer served over time checks each part again with the stamp of its
 * first check as @a expect_stamp (0: any): a token deregistered, or issued
 * anew to other memory since, is refused.
 *
 * @return UCS_OK, or UCS_ERR_INVALID_ADDR (the peer sent a stale or corrupt
 *         key or address, or the memory went away meanwhile: logged the
 *         first time of each kind, at debug level after that).
 */
ucs_status_t uct_rc_gdr_md_bounce_target(uct_rc_gdr_md_t *md, uint64_t token,
                                         uint64_t address, size_t length,
                                         uint64_t expect_stamp, int *gpu_p,
                                         uint64_t *stamp_p);

/**
 * As uct_rc_gdr_md_bounce_target(), but on success the registration is held
 * until uct_rc_gdr_md_bounce_target_release(): a free of those bytes on
 * another thread (cudaFree, munmap) waits meanwhile, so the memory cannot
 * go between the check and the copy into or out of it; frees of other
 * memory are queued, and never wait for the copy. Hold it only for a
 * synchronous copy; on failure nothing is held.
 */
ucs_status_t uct_rc_gdr_md_bounce_target_hold(uct_rc_gdr_md_t *md,
                                              uint64_t token,
                                              uint64_t address, size_t length,
                                              uint64_t expect_stamp,
                                              int *gpu_p, uint64_t *stamp_p);

void uct_rc_gdr_md_bounce_target_release(uct_rc_gdr_md_t *md);

#endif
