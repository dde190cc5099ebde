/**
 * rc_gdr bounce lane, target role, above the transfers
 * (rc_gdr_bounce_target.h): the peer's puts (PUT_DATA copied into the
 * registration it names, then an ACK) and gets (GET_REQ served from GPU
 * memory through the staging engine as GET_DATA messages). Everything a
 * peer names is checked by the md before it is touched (doc/DESIGN.md
 * section 3, "What a peer may do").
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h" /* UCX's: its log level, assertions */
#endif

#include "rc_gdr_bounce_target.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>

#include <string.h>


/* What a peer may do again and again, said once per interface (the
 * counters count every one; the bits in uct_rc_gdr_bounce_iface_t's
 * `logged`): rc_gdr_log.h */
typedef enum {
    UCT_RC_GDR_BOUNCE_LOG_PUT_ORDER,    /* a put's messages out of order */
    UCT_RC_GDR_BOUNCE_LOG_GET_REFUSED,  /* a get of 0 bytes, or too many */
    UCT_RC_GDR_BOUNCE_LOG_SERVE_TIMEOUT /* a served get's peer silent */
} uct_rc_gdr_bounce_log_t;


/* What a peer names: a live token, the range inside its registration
 * (checked by the md). Nothing is touched before this passed. */
static uint64_t uct_rc_gdr_bounce_hdr_token(const uct_rc_gdr_bounce_hdr_t *hdr)
{
    return ((uint64_t)hdr->token_hi << 32) | hdr->token;
}


static ucs_status_t uct_rc_gdr_bounce_target(uct_rc_gdr_bounce_iface_t *b,
                                             uint64_t token, uint64_t address,
                                             uint64_t length, int *gpu_p,
                                             uint64_t *stamp_p)
{
    return uct_rc_gdr_md_bounce_target(b->md, token, address, length, 0,
                                       gpu_p, stamp_p);
}


/* Each chunk of a served get, after its copy and before it is sent: the
 * registration the request named is still the one alive, and the chunk in
 * its bytes. Memory freed (or deregistered) meanwhile stops the get: the
 * peer gets an error, never the bytes of whatever lives there now. */
static ucs_status_t
uct_rc_gdr_bounce_serve_check(uct_rc_gdr_bounce_xfer_t *xfer,
                                           size_t offset, size_t length)
{
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_bounce_ep_iface(xfer->bep);
    uint64_t stamp;
    int gpu;

    if ((uct_rc_gdr_md_bounce_target(iface->bounce->md, xfer->token,
                                     (uintptr_t)xfer->local + offset, length,
                                     xfer->stamp, &gpu, &stamp) == UCS_OK) &&
        (gpu == xfer->gpu)) {
        return UCS_OK;
    }

    ++iface->stats.bounce_revoked;
    ucs_debug("rc_gdr: bounce get %u served from %p: the registration went "
              "away at offset %zu: stopped", xfer->id, xfer->local, offset);
    return UCS_ERR_INVALID_ADDR;
}


/* The engine's post for a served get: a chunk copied, not yet sent, goes
 * out only if the memory was still registered after the copy (so before
 * any reuse) */
static ucs_status_t uct_rc_gdr_bounce_serve_post(void *arg, unsigned chunk,
                                                 uct_rc_gdr_stage_buf_t *buf,
                                                 size_t length, size_t offset)
{
    uct_rc_gdr_bounce_xfer_t *xfer = arg;
    ucs_status_t status;

    if (uct_rc_gdr_bounce_ep_is_dead(xfer->bep)) {
        return uct_rc_gdr_bounce_ep_dead_status(xfer->bep);
    }

    status = uct_rc_gdr_bounce_serve_check(xfer, offset, length);
    if (status != UCS_OK) {
        return status;
    }

    return uct_rc_gdr_bounce_xfer_stage_post(arg, chunk, buf, length, offset);
}


static const uct_rc_gdr_stage_ops_t uct_rc_gdr_bounce_serve_ops = {
    .post       = uct_rc_gdr_bounce_serve_post,
    .chunk_done = NULL,
    .complete   = uct_rc_gdr_bounce_xfer_stage_complete
};


/* Target: starts answering a validated get; UCS_ERR_NO_RESOURCE keeps it
 * waiting for a staging buffer */
ucs_status_t
uct_rc_gdr_bounce_serve_start(uct_rc_gdr_bounce_xfer_t *xfer)
{
    uct_rc_gdr_bounce_ep_t *bep  = xfer->bep;
    uct_rc_gdr_bounce_iface_t *b = uct_rc_gdr_bounce_ep_iface(bep)->bounce;
    uct_rc_gdr_stage_engine_t *engine;
    ucs_status_t status;

    /* One peer's share of the staging buffers: its gets beyond it wait, so
     * that gets whose data it does not take (for up to BOUNCE_TIMEOUT, and
     * again after) leave buffers to every other endpoint */
    if (ucs_list_length(&bep->serving) >= b->ep_max_serving) {
        return UCS_ERR_NO_RESOURCE;
    }

    status = uct_rc_gdr_bounce_engine(b, xfer->gpu, &engine);
    if (status == UCS_OK) {
        status = uct_rc_gdr_bounce_xfer_stage(xfer, engine,
                                              &uct_rc_gdr_bounce_serve_ops);
    }

    if (status == UCS_ERR_NO_RESOURCE) {
        return status;
    }

    ucs_list_del(&xfer->list);
    if (status == UCS_OK) {
        ucs_list_add_tail(&bep->serving, &xfer->list);
        return UCS_OK;
    }

    --bep->num_served;
    uct_rc_gdr_bounce_send_ack(bep, xfer->id, status);
    ucs_free(xfer);
    return UCS_OK;
}


/* Served gets whose peer, alive, took none of their data (returned no
 * credits for it) in BOUNCE_TIMEOUT: their queued messages fail, so that the
 * staging engine ends them and their buffers go back to the pool, and the
 * peer gets an error ACK, if it ever returns the credits for one. Calls no
 * user callback. */
unsigned uct_rc_gdr_bounce_serve_timeouts(uct_rc_gdr_bounce_ep_t *bep,
                                          ucs_time_t now)
{
    uct_rc_gdr_iface_t *iface    = uct_rc_gdr_bounce_ep_iface(bep);
    uct_rc_gdr_bounce_iface_t *b = iface->bounce;
    uct_rc_gdr_bounce_xfer_t *xfer;
    uct_rc_gdr_bounce_wire_t *wire;
    ucs_log_level_t level;
    unsigned count = 0;

    ucs_list_for_each(xfer, &bep->serving, list) {
        if ((now <= xfer->deadline) || (xfer->status != UCS_OK)) {
            continue;
        }

        /* only what waits for the peer: a chunk still being copied out of
         * the GPU is not the peer's delay */
        ucs_list_for_each(wire, &bep->sendq, sendq) {
            if ((wire->xfer == xfer) && (wire->post_status == UCS_OK)) {
                wire->post_status = UCS_ERR_TIMED_OUT;
                xfer->status      = UCS_ERR_TIMED_OUT;
            }
        }
        if (xfer->status == UCS_OK) {
            continue;
        }

        ++iface->stats.bounce_serve_timeouts;
        level = uct_rc_gdr_log_once_level(&b->logged,
                                          UCT_RC_GDR_BOUNCE_LOG_SERVE_TIMEOUT,
                                          UCS_LOG_LEVEL_WARN);
        ucs_log(level, "rc_gdr: QP 0x%x: bounce get %u served from %p (%zu "
                "bytes): the peer took no data in %.1f s "
                "(UCX_RC_GDR_BOUNCE_TIMEOUT): dropped%s", bep->ep->qp->qp_num,
                xfer->id, xfer->local, xfer->length,
                ucs_time_to_sec(b->timeout),
                uct_rc_gdr_log_once_more(level));
        ++count;
    }

    return count;
}


/* ------------------------------------------------------------------------
 * Requests of the peer
 * ------------------------------------------------------------------------ */

void uct_rc_gdr_bounce_recv_put_data(uct_rc_gdr_bounce_ep_t *bep,
                                            const uct_rc_gdr_bounce_hdr_t *hdr,
                                            const void *payload)
{
    uct_rc_gdr_iface_t *iface    = uct_rc_gdr_bounce_ep_iface(bep);
    uct_rc_gdr_bounce_iface_t *b = iface->bounce;
    ucs_log_level_t level;
    ucs_status_t status;
    uint64_t stamp;
    int gpu;

    if ((hdr->chunk == 0) || !bep->rx.active ||
        (bep->rx.id != hdr->xfer_id)) {
        bep->rx.active = 1;
        bep->rx.id     = hdr->xfer_id;
        bep->rx.status = UCS_OK;
        if (hdr->chunk != 0) {
            level = uct_rc_gdr_log_once_level(&b->logged,
                                              UCT_RC_GDR_BOUNCE_LOG_PUT_ORDER,
                                              UCS_LOG_LEVEL_ERROR);
            ucs_log(level, "rc_gdr: QP 0x%x: bounce put %u starts at message "
                    "%u: refused%s", bep->ep->qp->qp_num, hdr->xfer_id,
                    hdr->chunk, uct_rc_gdr_log_once_more(level));
            ++iface->stats.bounce_refused;
            bep->rx.status = UCS_ERR_INVALID_PARAM;
        }
    } else if (hdr->chunk != bep->rx.next_chunk) {
        if (bep->rx.status == UCS_OK) {
            level = uct_rc_gdr_log_once_level(&b->logged,
                                              UCT_RC_GDR_BOUNCE_LOG_PUT_ORDER,
                                              UCS_LOG_LEVEL_ERROR);
            ucs_log(level, "rc_gdr: QP 0x%x: bounce put %u: message %u, "
                    "expected %u: refused%s", bep->ep->qp->qp_num,
                    hdr->xfer_id, hdr->chunk, bep->rx.next_chunk,
                    uct_rc_gdr_log_once_more(level));
            ++iface->stats.bounce_refused;
        }
        bep->rx.status = UCS_ERR_INVALID_PARAM;
    }
    bep->rx.next_chunk = hdr->chunk + 1;

    /* once refused, the rest of the transfer is dropped without a word;
     * the registration is held from the check to the end of the copy, so a
     * free hook on another thread cannot release the memory in between */
    if (bep->rx.status == UCS_OK) {
        status = uct_rc_gdr_md_bounce_target_hold(
                b->md, uct_rc_gdr_bounce_hdr_token(hdr), hdr->addr,
                hdr->length, 0, &gpu, &stamp);
        if (status != UCS_OK) {
            ++iface->stats.bounce_refused;
            bep->rx.status = status;
        } else {
            if (hdr->length > 0) {
                bep->rx.status = uct_rc_gdr_bounce_copy_h2d(
                        b, gpu, (void*)hdr->addr, payload, hdr->length);
            }
            uct_rc_gdr_md_bounce_target_release(b->md);
        }
    }

    if (hdr->flags & UCT_RC_GDR_BOUNCE_MSG_FLAG_LAST) {
        bep->rx.active = 0;
        uct_rc_gdr_bounce_send_ack(bep, hdr->xfer_id, bep->rx.status);
    }
}


void uct_rc_gdr_bounce_recv_get_req(uct_rc_gdr_bounce_ep_t *bep,
                                           const uct_rc_gdr_bounce_hdr_t *hdr)
{
    uct_rc_gdr_iface_t *iface    = uct_rc_gdr_bounce_ep_iface(bep);
    uct_rc_gdr_bounce_iface_t *b = iface->bounce;
    uct_rc_gdr_bounce_xfer_t *xfer;
    ucs_log_level_t level;
    ucs_status_t status;
    uint64_t stamp;
    int gpu;

    if ((hdr->length == 0) ||
        (bep->num_served >= UCT_RC_GDR_BOUNCE_EP_MAX_XFERS)) {
        level = uct_rc_gdr_log_once_level(&b->logged,
                                          UCT_RC_GDR_BOUNCE_LOG_GET_REFUSED,
                                          UCS_LOG_LEVEL_ERROR);
        ucs_log(level, "rc_gdr: QP 0x%x: bounce get %u of %" PRIu64 " bytes "
                "refused (%u already served)%s", bep->ep->qp->qp_num,
                hdr->xfer_id, hdr->length, bep->num_served,
                uct_rc_gdr_log_once_more(level));
        ++iface->stats.bounce_refused;
        uct_rc_gdr_bounce_send_ack(bep, hdr->xfer_id,
                                   (hdr->length == 0) ? UCS_ERR_INVALID_PARAM :
                                   UCS_ERR_EXCEEDS_LIMIT);
        return;
    }

    status = uct_rc_gdr_bounce_target(b, uct_rc_gdr_bounce_hdr_token(hdr),
                                      hdr->addr, hdr->length, &gpu, &stamp);
    if (status != UCS_OK) {
        ++iface->stats.bounce_refused;
        uct_rc_gdr_bounce_send_ack(bep, hdr->xfer_id, status);
        return;
    }

    xfer = ucs_calloc(1, sizeof(*xfer), "rc_gdr_bounce_serve");
    if (xfer == NULL) {
        ucs_error("rc_gdr: failed to allocate a bounce get to serve");
        uct_rc_gdr_bounce_send_ack(bep, hdr->xfer_id, UCS_ERR_NO_MEMORY);
        return;
    }

    xfer->bep    = bep;
    xfer->kind   = UCT_RC_GDR_BOUNCE_SERVE_GET;
    xfer->id     = hdr->xfer_id;
    xfer->gpu    = gpu;
    xfer->status = UCS_OK;
    xfer->local  = (char*)hdr->addr;
    xfer->length = hdr->length;
    xfer->token  = uct_rc_gdr_bounce_hdr_token(hdr);
    xfer->stamp  = stamp;
    ++bep->num_served;
    ucs_list_add_tail(&bep->pending_gets, &xfer->list);
    if (ucs_list_is_only(&bep->pending_gets, &xfer->list)) {
        uct_rc_gdr_bounce_serve_start(xfer);
    }
}
