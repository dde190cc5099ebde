/**
 * rc_gdr bounce lane, wire units: the layer above the core
 * (rc_gdr_bounce_wire.h; the message format is the core's). A unit posts
 * its messages in order as credits and the send queue allow; the
 * completions of its work requests come back through its uct_completion_t,
 * and the unit reports to the callback its maker stored. Received messages
 * are the top layer's (rc_gdr_bounce.c).
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h" /* UCX's: its log level, assertions */
#endif

#include "rc_gdr_bounce_wire.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/math.h>

#include <string.h>


/* ------------------------------------------------------------------------
 * Wire units
 * ------------------------------------------------------------------------ */

static void uct_rc_gdr_bounce_wire_done(uct_completion_t *self);


uct_rc_gdr_bounce_wire_t *
uct_rc_gdr_bounce_wire_new(uct_rc_gdr_bounce_ep_t *bep,
                           uct_rc_gdr_bounce_xfer_t *xfer,
                           uct_rc_gdr_bounce_wire_cb_t cb, uint8_t type)
{
    uct_rc_gdr_bounce_wire_t *wire;

    wire = ucs_calloc(1, sizeof(*wire), "rc_gdr_bounce_wire");
    if (wire == NULL) {
        ucs_error("rc_gdr: failed to allocate a bounce lane wire unit");
        return NULL;
    }

    wire->comp.func    = uct_rc_gdr_bounce_wire_done;
    wire->comp.count   = 1; /* the posting reference */
    wire->comp.status  = UCS_OK;
    wire->bep          = bep;
    wire->xfer         = xfer;
    wire->cb           = cb;
    wire->post_status  = UCS_OK;
    wire->hdr.type     = type;
    if (xfer != NULL) {
        wire->hdr.xfer_id = xfer->id;
    }
    ucs_list_add_tail(&bep->wires, &wire->list);
    return wire;
}


void uct_rc_gdr_bounce_wire_free(uct_rc_gdr_bounce_wire_t *wire)
{
    if (wire->queued) {
        uct_rc_gdr_bounce_wire_dequeue(wire);
    }
    ucs_list_del(&wire->list);
    ucs_free(wire);
}


void uct_rc_gdr_bounce_wire_enqueue(uct_rc_gdr_bounce_wire_t *wire)
{
    uct_rc_gdr_bounce_ep_t *bep      = wire->bep;
    uct_rc_gdr_iface_stats_t *stats = &uct_rc_gdr_bounce_ep_iface(bep)->stats;

    wire->queued = 1;
    ucs_list_add_tail(&bep->sendq, &wire->sendq);
    if (wire->hdr.type == UCT_RC_GDR_BOUNCE_MSG_ACK) {
        ++bep->num_acks;
    }
    if (++bep->num_queued > stats->bounce_queued_max) {
        stats->bounce_queued_max = bep->num_queued;
    }
}


void uct_rc_gdr_bounce_wire_dequeue(uct_rc_gdr_bounce_wire_t *wire)
{
    ucs_assert(wire->queued);
    wire->queued = 0;
    ucs_list_del(&wire->sendq);
    --wire->bep->num_queued;
    if (wire->hdr.type == UCT_RC_GDR_BOUNCE_MSG_ACK) {
        ucs_assert(wire->bep->num_acks > 0);
        --wire->bep->num_acks;
    }
}


/* Every work request of the unit completed and nothing more is posted */
static void uct_rc_gdr_bounce_wire_done(uct_completion_t *self)
{
    uct_rc_gdr_bounce_wire_t *wire = ucs_container_of(self,
                                                      uct_rc_gdr_bounce_wire_t,
                                                      comp);
    uct_rc_gdr_bounce_xfer_t *xfer = wire->xfer;
    uct_rc_gdr_bounce_iface_t *b   = uct_rc_gdr_bounce_ep_iface(wire->bep)->
                                     bounce;
    ucs_status_t status            = self->status;
    uct_rc_gdr_bounce_wire_cb_t cb = wire->cb;
    unsigned chunk                 = wire->chunk;

    if (status == UCS_OK) {
        status = wire->post_status;
    }
    uct_rc_gdr_bounce_wire_free(wire);

    /* from a send completion too: the user's callback may destroy the
     * endpoint while the lane still walks it */
    uct_rc_gdr_bounce_enter(b);
    if (cb != NULL) {
        cb(xfer, chunk, status);
    }
    uct_rc_gdr_bounce_leave(b);
}


/* Posts the next message of a unit: the header in a transmit buffer, the
 * payload from registered memory (or copied after the header) */
static ucs_status_t
uct_rc_gdr_bounce_wire_post_msg(uct_rc_gdr_bounce_wire_t *wire)
{
    uct_rc_gdr_bounce_ep_t *bep  = wire->bep;
    uct_rc_gdr_iface_t *iface    = uct_rc_gdr_bounce_ep_iface(bep);
    uct_rc_gdr_bounce_iface_t *b = iface->bounce;
    size_t length                = ucs_min(wire->length - wire->posted,
                                           b->msg_max);
    uct_rc_gdr_bounce_hdr_t *hdr;
    struct ibv_send_wr wr;
    struct ibv_sge sges[2];
    uct_rc_gdr_op_t *op;
    ucs_status_t status;
    int num_sge;

    status = uct_rc_gdr_ep_get_op(bep->ep, UCT_RC_GDR_OP_SEND, 1, &op);
    if (status != UCS_OK) {
        return status;
    }

    op->comp = &wire->comp;
    hdr  = (uct_rc_gdr_bounce_hdr_t*)(op->buf + 1);
    *hdr = wire->hdr;
    switch (hdr->type) {
    case UCT_RC_GDR_BOUNCE_MSG_PUT_DATA:
        hdr->addr  += wire->posted;
        hdr->chunk  = wire->xfer->next_msg;
        hdr->length = length;
        if (wire->last && (wire->posted + length == wire->length)) {
            hdr->flags |= UCT_RC_GDR_BOUNCE_MSG_FLAG_LAST;
        }
        break;
    case UCT_RC_GDR_BOUNCE_MSG_GET_DATA:
        hdr->addr  += wire->posted;
        hdr->length = length;
        break;
    default:
        break;
    }

    sges[0].addr   = (uintptr_t)hdr;
    sges[0].length = sizeof(*hdr);
    sges[0].lkey   = op->buf->lkey;
    num_sge        = 1;
    if (length > 0) {
        if (wire->lkey == 0) {
            memcpy(hdr + 1, wire->src + wire->posted, length);
            sges[0].length += length;
        } else {
            sges[1].addr   = (uintptr_t)(wire->src + wire->posted);
            sges[1].length = length;
            sges[1].lkey   = wire->lkey;
            num_sge        = 2;
        }
    }

    memset(&wr, 0, sizeof(wr));
    wr.opcode  = IBV_WR_SEND_WITH_IMM;
    wr.sg_list = sges;
    wr.num_sge = num_sge;
    status     = uct_rc_gdr_ep_post_bounce(bep->ep, &wr, op, NULL);
    if (status != UCS_OK) {
        uct_rc_gdr_ep_release_op(op);
        return status;
    }

    ++wire->comp.count;
    wire->posted += length;
    if (wire->xfer != NULL) {
        /* the peer took a message (its credits came): it is alive. Only a
         * transfer that waits for the peer, or a served get, reads it. */
        wire->xfer->deadline = ucs_get_time() + b->timeout;
    }
    if (hdr->type == UCT_RC_GDR_BOUNCE_MSG_PUT_DATA) {
        ++wire->xfer->next_msg;
        if (hdr->flags & UCT_RC_GDR_BOUNCE_MSG_FLAG_LAST) {
            wire->xfer->last_sent = 1;
            if (bep->put_open == wire->xfer) {
                bep->put_open = NULL;
            }
        }
    }
    ++iface->stats.bounce_msgs;
    return UCS_OK;
}


/* Posts queued messages in order while the endpoint has the resources. A
 * unit whose post fails for good stays first, marked, until the progress
 * sweeps it: this runs inside UCT operations too, where nothing may
 * complete. */
void uct_rc_gdr_bounce_ep_pump(uct_rc_gdr_bounce_ep_t *bep)
{
    uct_rc_gdr_bounce_wire_t *wire;
    ucs_status_t status;

    if (uct_rc_gdr_bounce_ep_is_dead(bep)) {
        return;
    }

    while (!ucs_list_is_empty(&bep->sendq)) {
        wire = ucs_list_head(&bep->sendq, uct_rc_gdr_bounce_wire_t, sendq);
        if (wire->post_status != UCS_OK) {
            break;
        }

        status = uct_rc_gdr_bounce_wire_post_msg(wire);
        if (status == UCS_ERR_NO_RESOURCE) {
            break;
        } else if (status != UCS_OK) {
            wire->post_status = status;
            break;
        }

        if (wire->posted >= wire->length) {
            /* a work request is in flight: this cannot complete the unit */
            uct_rc_gdr_bounce_wire_dequeue(wire);
            uct_invoke_completion(&wire->comp, UCS_OK);
        }
    }
}


void uct_rc_gdr_bounce_send_ack(uct_rc_gdr_bounce_ep_t *bep,
                                       uint32_t xfer_id, ucs_status_t status)
{
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_bounce_ep_iface(bep);
    uct_rc_gdr_bounce_wire_t *wire;

    /* A peer that asks for more replies than it may have outstanding, and
     * does not return the credits to send them, loses the excess */
    if (bep->num_acks >= UCT_RC_GDR_BOUNCE_EP_MAX_ACKS) {
        if (iface->stats.bounce_acks_dropped++ == 0) {
            ucs_error("rc_gdr: QP 0x%x: %u bounce replies wait for credits "
                      "the peer does not return: reply to transfer %u "
                      "dropped (protocol error, counted)",
                      bep->ep->qp->qp_num, bep->num_acks, xfer_id);
        }
        return;
    }

    wire = uct_rc_gdr_bounce_wire_new(bep, NULL, NULL,
                                      UCT_RC_GDR_BOUNCE_MSG_ACK);
    if (wire == NULL) {
        return; /* the initiator's transfer fails when the QP does */
    }

    wire->hdr.xfer_id = xfer_id;
    wire->hdr.status  = status;
    uct_rc_gdr_bounce_wire_enqueue(wire);
    uct_rc_gdr_bounce_ep_pump(bep);
}
