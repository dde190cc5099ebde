/**
 * rc_gdr bounce lane: put/get zcopy through pinned host memory when one
 * side's GPU memory has no NIC key (overview in rc_gdr_bounce.h, layers in
 * rc_gdr_bounce_core.h). This file is the top layer: the dispatcher of
 * received messages, the lane's progress (timeouts, a dead endpoint's
 * sweep, queued messages, waiting gets), the interface's open and close
 * and an endpoint's cleanup.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h" /* UCX's: its log level, assertions */
#endif

#include "rc_gdr_bounce_initiator.h"
#include "rc_gdr_bounce_target.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>

#include <string.h>


/* ------------------------------------------------------------------------
 * Received messages
 * ------------------------------------------------------------------------ */

/* A received SEND with the internal imm bit (the interface's lane ops):
 * checked, then handed to the initiator or the target role. @a ep is NULL
 * when the QP is unknown (the message is dropped). */
static void uct_rc_gdr_bounce_recv(uct_rc_gdr_iface_t *iface,
                                   uct_rc_gdr_ep_t *ep, const void *data,
                                   size_t length)
{
    size_t payload_len = length - sizeof(uct_rc_gdr_bounce_hdr_t);
    uct_rc_gdr_bounce_hdr_t hdr;
    uct_rc_gdr_bounce_ep_t *bep;
    int ok;

    if ((ep == NULL) || (length < sizeof(hdr))) {
        if (iface->stats.bounce_malformed++ == 0) {
            ucs_error("rc_gdr: bounce message of %zu bytes from %s: dropped "
                      "(counted)", length,
                      (ep == NULL) ? "an unknown QP" : "a peer");
        }
        return;
    }

    memcpy(&hdr, data, sizeof(hdr));
    switch (hdr.type) {
    case UCT_RC_GDR_BOUNCE_MSG_PUT_DATA:
    case UCT_RC_GDR_BOUNCE_MSG_GET_DATA:
        ok = (hdr.length == payload_len);
        break;
    case UCT_RC_GDR_BOUNCE_MSG_GET_REQ:
    case UCT_RC_GDR_BOUNCE_MSG_ACK:
        ok = (payload_len == 0);
        break;
    default:
        ok = 0;
        break;
    }
    if (!ok) {
        if (iface->stats.bounce_malformed++ == 0) {
            ucs_error("rc_gdr: QP 0x%x: malformed bounce message (type %u, "
                      "length %" PRIu64 ", %zu bytes): dropped (counted)",
                      ep->qp->qp_num, hdr.type, hdr.length, length);
        }
        return;
    }

    bep = uct_rc_gdr_bounce_ep_get(ep);
    if ((bep == NULL) || bep->gone) {
        return;
    }

    uct_rc_gdr_bounce_enter(iface->bounce);

    switch (hdr.type) {
    case UCT_RC_GDR_BOUNCE_MSG_PUT_DATA:
        uct_rc_gdr_bounce_recv_put_data(bep, &hdr,
                                        UCS_PTR_BYTE_OFFSET(data,
                                                            sizeof(hdr)));
        break;
    case UCT_RC_GDR_BOUNCE_MSG_GET_REQ:
        uct_rc_gdr_bounce_recv_get_req(bep, &hdr);
        break;
    case UCT_RC_GDR_BOUNCE_MSG_GET_DATA:
        uct_rc_gdr_bounce_recv_get_data(bep, &hdr,
                                        UCS_PTR_BYTE_OFFSET(data,
                                                            sizeof(hdr)));
        break;
    default:
        uct_rc_gdr_bounce_recv_ack(bep, &hdr);
        break;
    }
    uct_rc_gdr_bounce_leave(iface->bounce);
    uct_rc_gdr_bounce_update_stats(iface->bounce);
}


/* ------------------------------------------------------------------------
 * Progress
 * ------------------------------------------------------------------------ */

/* A dead endpoint: what waits for the wire or the peer ends with its error.
 * Work requests in flight still complete (flushed) and report themselves. */
static unsigned uct_rc_gdr_bounce_ep_sweep(uct_rc_gdr_bounce_ep_t *bep)
{
    int dead            = uct_rc_gdr_bounce_ep_is_dead(bep);
    ucs_status_t status = dead ? uct_rc_gdr_bounce_ep_dead_status(bep) :
                          UCS_OK;
    uct_rc_gdr_bounce_xfer_t *xfer, *txfer;
    uct_rc_gdr_bounce_wire_t *wire, *twire;
    unsigned count      = 0;

    /* one at a time: a completion may end a transfer, whose user callback
     * may destroy the endpoint (then bep->gone) */
    for (;;) {
        wire = NULL;
        ucs_list_for_each(twire, &bep->sendq, sendq) {
            if (dead || (twire->post_status != UCS_OK)) {
                wire = twire;
                break;
            }
        }
        if (wire == NULL) {
            break;
        }
        uct_rc_gdr_bounce_wire_dequeue(wire);
        uct_invoke_completion(&wire->comp, dead ? status : wire->post_status);
        ++count;
        if (bep->gone) {
            return count;
        }
    }

    if (!dead) {
        return count;
    }

    ucs_list_for_each_safe(xfer, txfer, &bep->pending_gets, list) {
        ucs_list_del(&xfer->list);
        --bep->num_served;
        ucs_free(xfer);
        ++count;
    }

    /* one at a time: each may end its transfer, and the user's callback */
    while (bep->num_awaiting > 0) {
        ucs_list_for_each(xfer, &bep->xfers, list) {
            if (xfer->awaiting) {
                break;
            }
        }
        if (&xfer->list == &bep->xfers) {
            ucs_assertv(0, "bep %p: %u awaiting, none found", bep,
                        bep->num_awaiting);
            bep->num_awaiting = 0;
            break;
        }
        uct_rc_gdr_bounce_xfer_replied(xfer, status);
        ++count;
        if (bep->gone) {
            return count;
        }
    }

    bep->rx.active = 0;
    return count;
}


/* A live peer that neither answers a transfer nor takes its next message
 * (returns no credits) in BOUNCE_TIMEOUT: the transfer ends with
 * UCS_ERR_TIMED_OUT, its queued messages with it (the sweep posts nothing
 * of a unit marked failed). One at a time: each may call the user. */
static unsigned uct_rc_gdr_bounce_ep_timeouts(uct_rc_gdr_bounce_ep_t *bep,
                                              ucs_time_t now)
{
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_bounce_ep_iface(bep);
    uct_rc_gdr_bounce_xfer_t *xfer, *expired;
    uct_rc_gdr_bounce_wire_t *wire;
    unsigned count = 0;

    while (bep->num_awaiting > 0) {
        expired = NULL;
        ucs_list_for_each(xfer, &bep->xfers, list) {
            if (xfer->awaiting && (now > xfer->deadline)) {
                expired = xfer;
                break;
            }
        }
        if (expired == NULL) {
            break;
        }

        ++iface->stats.bounce_timeouts;
        ucs_warn("rc_gdr: QP 0x%x: bounce transfer %u (%zu bytes): the peer "
                 "did not answer in %.1f s (UCX_RC_GDR_BOUNCE_TIMEOUT)",
                 bep->ep->qp->qp_num, expired->id, expired->length,
                 ucs_time_to_sec(iface->bounce->timeout));
        ucs_list_for_each(wire, &bep->sendq, sendq) {
            if ((wire->xfer == expired) && (wire->post_status == UCS_OK)) {
                wire->post_status = UCS_ERR_TIMED_OUT;
            }
        }
        uct_rc_gdr_bounce_xfer_replied(expired, UCS_ERR_TIMED_OUT);
        ++count;
        if (bep->gone) {
            break;
        }
    }

    return count;
}


static unsigned uct_rc_gdr_bounce_ep_progress(uct_rc_gdr_bounce_ep_t *bep)
{
    uct_rc_gdr_ep_t *ep = bep->ep;
    uct_rc_gdr_bounce_xfer_t *xfer;
    unsigned count;
    ucs_time_t now;

    if (bep->gone ||
        (ucs_list_is_empty(&bep->sendq) && (bep->num_awaiting == 0) &&
         ucs_list_is_empty(&bep->pending_gets))) {
        return 0;
    }

    count = 0;
    if (((bep->num_awaiting > 0) || !ucs_list_is_empty(&bep->serving)) &&
        !uct_rc_gdr_bounce_ep_is_dead(bep)) {
        now = ucs_get_time();
        if ((now - bep->last_timeout_check) >
            ucs_time_from_sec(UCT_RC_GDR_BOUNCE_PROBE_INTERVAL)) {
            bep->last_timeout_check = now;
            count += uct_rc_gdr_bounce_serve_timeouts(bep, now);
            count += uct_rc_gdr_bounce_ep_timeouts(bep, now);
            if (bep->gone) {
                return count;
            }
        }
    }

    count += uct_rc_gdr_bounce_ep_sweep(bep);
    if (uct_rc_gdr_bounce_ep_is_dead(bep)) {
        return count;
    }

    uct_rc_gdr_bounce_ep_pump(bep);

    while (!ucs_list_is_empty(&bep->pending_gets)) {
        xfer = ucs_list_head(&bep->pending_gets, uct_rc_gdr_bounce_xfer_t,
                             list);
        if (uct_rc_gdr_bounce_serve_start(xfer) == UCS_ERR_NO_RESOURCE) {
            break;
        }
        ++count;
    }

    /* waiting for the peer with nothing in flight that reports: probe it,
     * so that its death shows as a failed work request */
    if ((bep->num_awaiting > 0) &&
        (uct_rc_gdr_ep_in_flight(ep) <= ep->unsignaled)) {
        now = ucs_get_time();
        if ((now - bep->last_probe) >
            ucs_time_from_sec(UCT_RC_GDR_BOUNCE_PROBE_INTERVAL)) {
            bep->last_probe = now;
            uct_rc_gdr_ep_probe(ep);
        }
    }

    return count;
}


static unsigned uct_rc_gdr_bounce_progress(uct_rc_gdr_iface_t *iface)
{
    uct_rc_gdr_bounce_iface_t *b = iface->bounce;
    uct_rc_gdr_bounce_ep_t *bep, *tmp;
    unsigned count = 0;
    int i;

    if (ucs_list_is_empty(&b->eps)) {
        return 0;
    }

    /* endpoints a callback destroys stay listed (gone) until the end */
    uct_rc_gdr_bounce_enter(b);
    for (i = 0; i < b->num_gpus; ++i) {
        if (b->engines[i] != NULL) {
            count += uct_rc_gdr_stage_progress(b->engines[i]);
        }
    }

    ucs_list_for_each_safe(bep, tmp, &b->eps, list) {
        count += uct_rc_gdr_bounce_ep_progress(bep);
    }
    uct_rc_gdr_bounce_leave(b);

    /* a transfer that ended (also inside a send completion) freed what
     * others may wait for */
    count    += b->events;
    b->events = 0;
    if (count > 0) {
        b->blocked = 0; /* pending requests may go again */
    }
    uct_rc_gdr_bounce_update_stats(b);
    return count;
}


/* What the interface hands up to the lane */
static const uct_rc_gdr_iface_lane_ops_t uct_rc_gdr_bounce_lane_ops = {
    .recv     = uct_rc_gdr_bounce_recv,
    .progress = uct_rc_gdr_bounce_progress
};


/* ------------------------------------------------------------------------
 * Setup and teardown
 * ------------------------------------------------------------------------ */

void uct_rc_gdr_bounce_ep_cleanup(uct_rc_gdr_ep_t *ep)
{
    uct_rc_gdr_bounce_ep_t *bep = ep->bounce;
    uct_rc_gdr_bounce_iface_t *b;
    uct_rc_gdr_bounce_xfer_t *xfer;
    uct_rc_gdr_bounce_flush_t *flush;
    uct_rc_gdr_bounce_wire_t *wire;
    ucs_list_link_t *lists[3];
    unsigned i;

    if (bep == NULL) {
        return;
    }

    b         = uct_rc_gdr_bounce_ep_iface(bep)->bounce;
    bep->gone = 1;
    lists[0]  = &bep->xfers;
    lists[1]  = &bep->serving;
    lists[2]  = &bep->pending_gets;

    /* The engine gets its buffers back (the QP is gone: the NIC no longer
     * touches them); the transfers end without user callbacks. */
    for (i = 0; i < ucs_static_array_size(lists); ++i) {
        while (!ucs_list_is_empty(lists[i])) {
            xfer = ucs_list_head(lists[i], uct_rc_gdr_bounce_xfer_t, list);
            if (xfer->stage != NULL) {
                uct_rc_gdr_stage_xfer_cancel(xfer->stage, UCS_ERR_CANCELED);
                continue; /* ended, or left without its engine part */
            }
            if (xfer->kind == UCT_RC_GDR_BOUNCE_SERVE_GET) {
                --bep->num_served;
                ucs_list_del(&xfer->list);
                ucs_free(xfer);
                continue;
            }
            xfer->refs     = 1;
            xfer->awaiting = 0;
            uct_rc_gdr_bounce_xfer_put_ref(xfer, UCS_ERR_CANCELED);
        }
    }

    /* units whose work requests never completed, and those never posted */
    while (!ucs_list_is_empty(&bep->wires)) {
        wire = ucs_list_head(&bep->wires, uct_rc_gdr_bounce_wire_t, list);
        uct_rc_gdr_bounce_wire_free(wire);
    }

    while (!ucs_list_is_empty(&bep->flushes)) {
        flush = ucs_list_extract_head(&bep->flushes,
                                      uct_rc_gdr_bounce_flush_t, list);
        ucs_free(flush);
    }

    ep->bounce = NULL;
    bep->ep    = NULL;
    uct_rc_gdr_bounce_ep_release(b, bep);
    uct_rc_gdr_bounce_update_stats(b);
}


ucs_status_t uct_rc_gdr_bounce_iface_init(uct_rc_gdr_iface_t *iface,
                                          const uct_rc_gdr_bounce_config_t
                                          *config)
{
    ucs_status_t status;

    status = uct_rc_gdr_bounce_iface_create(iface, config, &iface->bounce);
    if (status != UCS_OK) {
        return status;
    }

    iface->lane_ops = &uct_rc_gdr_bounce_lane_ops;
    return UCS_OK;
}


void uct_rc_gdr_bounce_iface_cleanup(uct_rc_gdr_iface_t *iface)
{
    uct_rc_gdr_bounce_iface_t *b = iface->bounce;

    if (b == NULL) {
        return;
    }

    /* endpoints still open: their transfers end here, without callbacks
     * (those already gone were freed when the last lane call returned) */
    ucs_assert(b->depth == 0);
    while (!ucs_list_is_empty(&b->eps)) {
        uct_rc_gdr_bounce_ep_cleanup(ucs_list_head(&b->eps,
                                                   uct_rc_gdr_bounce_ep_t,
                                                   list)->ep);
    }

    uct_rc_gdr_bounce_iface_destroy(b);
    iface->bounce = NULL;
}
