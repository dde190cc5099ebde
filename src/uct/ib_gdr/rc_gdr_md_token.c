/*
 * rc_gdr memory domain: the peer tokens (see rc_gdr_md_token.h). Drawn at
 * registration (rc_gdr_md.c), checked here when a peer's bounce-lane request
 * names one: a request reaches only the exact bytes of a live registration.
 */

#include "rc_gdr_md_token.h"
#include "rc_gdr_md.h"
#include "rc_gdr_log.h"

#include <ucs/debug/log.h>

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/random.h>


void uct_rc_gdr_md_token_init(uct_rc_gdr_md_t *md)
{
    md->next_stamp = 0;
    kh_init_inplace(uct_rc_gdr_token, &md->tokens);
}


void uct_rc_gdr_md_token_cleanup(uct_rc_gdr_md_t *md)
{
    kh_destroy_inplace(uct_rc_gdr_token, &md->tokens);
}


/* Random bits from the kernel's generator (getrandom), or an error: a
 * token is all that keeps a peer out of another registration's memory, so
 * nothing guessable (time, pid, an address) may stand in for it. Blocks
 * only before the kernel's generator is first seeded. */
static ucs_status_t uct_rc_gdr_md_token_random(uct_rc_gdr_md_t *md,
                                               uint64_t *value_p)
{
    uint64_t value;
    ssize_t ret;

    do {
        ret = getrandom(&value, sizeof(value), 0);
    } while ((ret < 0) && (errno == EINTR));

    if (ret != sizeof(value)) {
        ucs_error("rc_gdr: %s: getrandom() failed: %s: no unguessable bounce "
                  "token, registration refused", md->name,
                  (ret < 0) ? strerror(errno) : "short read");
        return UCS_ERR_IO_ERROR;
    }

    *value_p = value;
    return UCS_OK;
}


/* A token's bits above the 32 of the key: the rkey's token_hi */
#define UCT_RC_GDR_MD_TOKEN_MASK \
    (((uint64_t)UCT_RC_GDR_RKEY_TOKEN_HI_MASK << 32) | UINT32_MAX)


ucs_status_t uct_rc_gdr_md_token_add(uct_rc_gdr_md_t *md, uint32_t nic_key,
                                     uct_rc_gdr_rcache_handle_t handle,
                                     uct_rc_gdr_rcache_region_t *region,
                                     uint64_t *token_p)
{
    ucs_status_t status;
    uint64_t token;
    khiter_t iter;
    int ret;

    do {
        status = uct_rc_gdr_md_token_random(md, &token);
        if (status != UCS_OK) {
            return status;
        }
        token &= UCT_RC_GDR_MD_TOKEN_MASK;
        if (region != NULL) {
            token = (token & ~(uint64_t)UINT32_MAX) | nic_key;
        }
    } while (((token >> 32) == 0) || /* an rkey without token_hi has none */
             (kh_get(uct_rc_gdr_token, &md->tokens, token) !=
              kh_end(&md->tokens)));

    iter = kh_put(uct_rc_gdr_token, &md->tokens, token, &ret);
    if (ret == -1) {
        ucs_error("rc_gdr: %s: failed to add a bounce token", md->name);
        return UCS_ERR_NO_MEMORY;
    }
    ucs_assert(ret != 0); /* absent, checked above */

    kh_value(&md->tokens, iter).handle = handle;
    kh_value(&md->tokens, iter).region = region;
    kh_value(&md->tokens, iter).stamp  = ++md->next_stamp;
    *token_p                           = token;
    return UCS_OK;
}


void uct_rc_gdr_md_token_del(uct_rc_gdr_md_t *md, uint64_t token)
{
    khiter_t iter = kh_get(uct_rc_gdr_token, &md->tokens, token);

    if (iter != kh_end(&md->tokens)) {
        kh_del(uct_rc_gdr_token, &md->tokens, iter);
    }
}


ucs_status_t uct_rc_gdr_md_bounce_target(uct_rc_gdr_md_t *md, uint64_t token,
                                         uint64_t address, size_t length,
                                         uint64_t expect_stamp, int *gpu_p,
                                         uint64_t *stamp_p)
{
    ucs_status_t status;

    status = uct_rc_gdr_md_bounce_target_hold(md, token, address, length,
                                              expect_stamp, gpu_p, stamp_p);
    if (status == UCS_OK) {
        uct_rc_gdr_md_bounce_target_release(md);
    }
    return status;
}


void uct_rc_gdr_md_bounce_target_release(uct_rc_gdr_md_t *md)
{
    uct_rc_gdr_rcache_unlock(md->rcache);
}


/* Why a peer's bounce request was refused (the md's refusals_logged) */
typedef enum {
    UCT_RC_GDR_MD_REFUSAL_UNKNOWN,  /* no registration has the token */
    UCT_RC_GDR_MD_REFUSAL_REISSUED, /* the token names other memory now */
    UCT_RC_GDR_MD_REFUSAL_FREED,    /* freed under its registration */
    UCT_RC_GDR_MD_REFUSAL_OUTSIDE,  /* bytes outside the registration */
    UCT_RC_GDR_MD_REFUSAL_LAST
} uct_rc_gdr_md_refusal_t;


static const char *uct_rc_gdr_md_refusal_names[] = {
    [UCT_RC_GDR_MD_REFUSAL_UNKNOWN]  = "an unknown",
    [UCT_RC_GDR_MD_REFUSAL_REISSUED] = "a reissued",
    [UCT_RC_GDR_MD_REFUSAL_FREED]    = "the freed memory of a",
    [UCT_RC_GDR_MD_REFUSAL_OUTSIDE]  = "bytes outside the registration of its"
};


ucs_status_t uct_rc_gdr_md_bounce_target_hold(uct_rc_gdr_md_t *md,
                                              uint64_t token,
                                              uint64_t address, size_t length,
                                              uint64_t expect_stamp,
                                              int *gpu_p, uint64_t *stamp_p)
{
    uct_rc_gdr_md_refusal_t why        = UCT_RC_GDR_MD_REFUSAL_UNKNOWN;
    uct_rc_gdr_rcache_region_t *region = NULL;
    uct_rc_gdr_token_target_t target;
    uct_rc_gdr_rcache_ref_t *ref;
    uct_rc_gdr_mr_t *gdr_mr;
    ucs_log_level_t level;
    khiter_t iter;
    int inside;

    /* The bytes are published before the lookup: a free of them on another
     * thread either waits for the release, or is applied here first */
    uct_rc_gdr_rcache_lock(md->rcache);
    uct_rc_gdr_rcache_touch(md->rcache, address, length);
    iter = kh_get(uct_rc_gdr_token, &md->tokens, token);
    if (iter == kh_end(&md->tokens)) {
        goto out_refuse;
    }

    /* The bytes registered, not the pages around them: small allocations
     * share pages, and a containing region serves registrations of other
     * bytes too */
    target = kh_value(&md->tokens, iter);
    if ((expect_stamp != 0) && (target.stamp != expect_stamp)) {
        why = UCT_RC_GDR_MD_REFUSAL_REISSUED;
        goto out_refuse;
    }

    if (target.handle != 0) {
        ref    = uct_rc_gdr_rcache_handle_check(md->rcache, target.handle);
        region = (ref == NULL) ? NULL : ref->region;
        inside = (ref != NULL) && (address >= ref->address) &&
                 (address - ref->address <= ref->length) &&
                 (length <= ref->length - (address - ref->address));
    } else {
        region = target.region;
        inside = uct_rc_gdr_rcache_region_exposes(region, address, length);
    }

    if (region != NULL) {
        gdr_mr = uct_rc_gdr_rcache_region_priv(region);
        if (!gdr_mr->registered) {
            /* Memory freed under a live registration released it */
            why = UCT_RC_GDR_MD_REFUSAL_FREED;
        } else if (!inside) {
            why = UCT_RC_GDR_MD_REFUSAL_OUTSIDE;
        } else {
            /* Held: a free of these bytes on another thread waits until
             * the caller has copied and released them */
            *gpu_p   = gdr_mr->gpu;
            *stamp_p = target.stamp;
            return UCS_OK;
        }
    }

out_refuse:
    /* A peer may repeat a refused request at will: the first of each kind
     * is said, the rest go to the debug log (the interface counts them) */
    level = uct_rc_gdr_log_once_level(&md->refusals_logged, why,
                                      UCS_LOG_LEVEL_ERROR);
    uct_rc_gdr_rcache_unlock(md->rcache);

    ucs_log(level, "rc_gdr: %s: a peer named %s bounce key 0x%" PRIx64 " for "
            "0x%" PRIx64 "+%zu: refused%s", md->name,
            uct_rc_gdr_md_refusal_names[why], token, address, length,
            uct_rc_gdr_log_once_more(level));
    return UCS_ERR_INVALID_ADDR;
}
