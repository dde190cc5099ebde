/**
 * rc_gdr bounce lane, transfers: the layer above the wire units
 * (rc_gdr_bounce_xfer.h). The end of a transfer and its references, the
 * flush barrier behind the transfers of an endpoint, and the staging
 * engine's chunks on the wire (RDMA for staged transfers, messages for the
 * others). Calls no role: the initiator and the target build on it; a
 * transfer's kind says how its chunks travel and how it ends.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h" /* UCX's: its log level, assertions */
#endif

#include "rc_gdr_bounce_xfer.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>

#include <string.h>


/* ------------------------------------------------------------------------
 * Flush
 * ------------------------------------------------------------------------ */

/* Both parts of a flush ended: the user's completion */
static void uct_rc_gdr_bounce_flush_done(uct_completion_t *self)
{
    uct_rc_gdr_bounce_flush_t *flush;
    uct_rc_gdr_bounce_ep_t *bep;
    uct_completion_t *user;
    ucs_status_t status;

    flush  = ucs_container_of(self, uct_rc_gdr_bounce_flush_t, comp);
    bep    = flush->bep;
    user   = flush->user;
    status = self->status;

    ucs_list_del(&flush->list);
    ucs_free(flush);
    if (!uct_rc_gdr_bounce_ep_user_gone(bep)) {
        uct_invoke_completion(user, status);
    }
}


/* Flushes whose barrier passed: no transfer started before them is left */
static void uct_rc_gdr_bounce_ep_check_flushes(uct_rc_gdr_bounce_ep_t *bep)
{
    uct_rc_gdr_bounce_flush_t *flush, *tmp;
    uint64_t oldest;

    oldest = ucs_list_is_empty(&bep->xfers) ? UINT64_MAX :
             ucs_list_head(&bep->xfers, uct_rc_gdr_bounce_xfer_t,
                           list)->seq;
    ucs_list_for_each_safe(flush, tmp, &bep->flushes, list) {
        if (flush->seq > oldest) {
            break;
        }
        if (!flush->barrier_passed) {
            flush->barrier_passed = 1;
            uct_invoke_completion(&flush->comp, UCS_OK);
            if (bep->gone) {
                break; /* the user destroyed the endpoint: flushes freed */
            }
        }
    }
}


int uct_rc_gdr_bounce_ep_busy(uct_rc_gdr_ep_t *ep)
{
    return (ep->bounce != NULL) && !ucs_list_is_empty(&ep->bounce->xfers);
}


/*
 * The bounce lane's part of an endpoint flush: a barrier behind the
 * transfers started before it (ACKs included), and a completion with one
 * reference for the barrier and one for the endpoint's own part, if any;
 * the user's completes when both are gone.
 */
ucs_status_t uct_rc_gdr_bounce_ep_flush(uct_rc_gdr_ep_t *ep, int own_part,
                                        uct_completion_t **comp_p)
{
    uct_rc_gdr_bounce_ep_t *bep = ep->bounce;
    uct_rc_gdr_bounce_flush_t *flush;

    flush = ucs_malloc(sizeof(*flush), "rc_gdr_bounce_flush");
    if (flush == NULL) {
        ucs_error("rc_gdr: failed to allocate a flush of the bounce lane");
        return UCS_ERR_NO_MEMORY;
    }

    flush->comp.func      = uct_rc_gdr_bounce_flush_done;
    flush->comp.count     = own_part ? 2 : 1;
    flush->comp.status    = UCS_OK;
    flush->bep            = bep;
    flush->user           = *comp_p;
    flush->seq            = bep->next_seq;
    flush->barrier_passed = 0;
    ucs_list_add_tail(&bep->flushes, &flush->list);
    *comp_p = &flush->comp;
    return UCS_OK;
}


/* ------------------------------------------------------------------------
 * The end of a transfer
 * ------------------------------------------------------------------------ */

static void uct_rc_gdr_bounce_xfer_finish(uct_rc_gdr_bounce_xfer_t *xfer)
{
    uct_rc_gdr_bounce_ep_t *bep  = xfer->bep;
    uct_rc_gdr_iface_t *iface    = uct_rc_gdr_bounce_ep_iface(bep);
    uct_rc_gdr_bounce_iface_t *b = iface->bounce;
    ucs_status_t status          = xfer->status;
    uct_completion_t *comp       = xfer->comp;
    khiter_t iter;

    ucs_list_del(&xfer->list);
    if (bep->put_open == xfer) {
        bep->put_open = NULL;
    }

    if (xfer->kind == UCT_RC_GDR_BOUNCE_SERVE_GET) {
        ++b->events;
        --bep->num_served;
        if ((status != UCS_OK) && !uct_rc_gdr_bounce_ep_is_dead(bep)) {
            uct_rc_gdr_bounce_send_ack(bep, xfer->id, status);
        }
        ucs_free(xfer);
        return;
    }

    iter = kh_get(uct_rc_gdr_bounce_xfers, &b->xfers, xfer->id);
    if (iter != kh_end(&b->xfers)) {
        kh_del(uct_rc_gdr_bounce_xfers, &b->xfers, iter);
    }
    if (xfer->awaiting) {
        --bep->num_awaiting;
    }
    --bep->num_xfers;
    ++b->events;
    if (status != UCS_OK) {
        ++iface->stats.bounce_failed;
        ucs_debug("rc_gdr: bounce transfer %u (%zu bytes, kind %d) failed: "
                  "%s", xfer->id, xfer->length, xfer->kind,
                  ucs_status_string(status));
    }

    if ((xfer->unpack_cb != NULL) && (status == UCS_OK) &&
        !uct_rc_gdr_bounce_ep_user_gone(bep)) {
        xfer->unpack_cb(xfer->unpack_arg, xfer->owned, xfer->length);
    }
    ucs_free(xfer->owned);
    ucs_free(xfer);

    if (uct_rc_gdr_bounce_ep_user_gone(bep)) {
        return;
    }

    if (comp != NULL) {
        uct_invoke_completion(comp, status);
    }
    uct_rc_gdr_bounce_ep_check_flushes(bep);
}


void uct_rc_gdr_bounce_xfer_put_ref(uct_rc_gdr_bounce_xfer_t *xfer,
                                           ucs_status_t status)
{
    if ((status != UCS_OK) && (xfer->status == UCS_OK)) {
        xfer->status = status;
    }

    if ((status != UCS_OK) && (xfer->kind == UCT_RC_GDR_BOUNCE_PUT_MSG) &&
        xfer->awaiting && !xfer->last_sent) {
        /* the data failed before its LAST message: no ACK will come */
        xfer->awaiting = 0;
        --xfer->bep->num_awaiting;
        ucs_assert(xfer->refs >= 2);
        --xfer->refs;
    }

    ucs_assert(xfer->refs > 0);
    if (--xfer->refs == 0) {
        uct_rc_gdr_bounce_xfer_finish(xfer);
    }
}


/* The reply of the peer came, or will not come */
void uct_rc_gdr_bounce_xfer_replied(uct_rc_gdr_bounce_xfer_t *xfer,
                                           ucs_status_t status)
{
    ucs_assert(xfer->awaiting);
    xfer->awaiting = 0;
    --xfer->bep->num_awaiting;
    uct_rc_gdr_bounce_xfer_put_ref(xfer, status);
}


/* ------------------------------------------------------------------------
 * Staged chunks and message runs on the wire
 * ------------------------------------------------------------------------ */

/* A staged chunk's unit completed: the engine frees or retries the buffer */
static void uct_rc_gdr_bounce_xfer_chunk_sent(uct_rc_gdr_bounce_xfer_t *xfer,
                                              unsigned chunk,
                                              ucs_status_t status)
{
    if (status == UCS_OK) {
        uct_rc_gdr_stage_wire_done(xfer->stage, chunk);
    } else {
        uct_rc_gdr_stage_wire_error(xfer->stage, chunk, status);
    }
}


/* A part of a transfer (its GET_REQ, or its data from a NIC key) is out */
void uct_rc_gdr_bounce_xfer_part_done(uct_rc_gdr_bounce_xfer_t *xfer,
                                      unsigned chunk, ucs_status_t status)
{
    uct_rc_gdr_bounce_xfer_put_ref(xfer, status);
}


/* One RDMA work request for a staged chunk, straight from post() */
static ucs_status_t
uct_rc_gdr_bounce_post_rdma(uct_rc_gdr_bounce_xfer_t *xfer, unsigned chunk,
                            uct_rc_gdr_stage_buf_t *buf, size_t length,
                            size_t offset)
{
    uct_rc_gdr_bounce_ep_t *bep = xfer->bep;
    uct_rc_gdr_bounce_wire_t *wire;
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    uct_rc_gdr_op_t *op;
    ucs_status_t status;

    status = uct_rc_gdr_ep_get_op(bep->ep, UCT_RC_GDR_OP_SEND, 0, &op);
    if (status != UCS_OK) {
        return status;
    }

    wire = uct_rc_gdr_bounce_wire_new(bep, xfer,
                                      uct_rc_gdr_bounce_xfer_chunk_sent, 0);
    if (wire == NULL) {
        uct_rc_gdr_ep_release_op(op);
        return UCS_ERR_NO_MEMORY;
    }

    wire->chunk = chunk;
    op->comp    = &wire->comp;
    sge.addr    = (uintptr_t)buf->addr;
    sge.length  = length;
    sge.lkey    = uct_rc_gdr_bounce_buf_lkey(buf);
    memset(&wr, 0, sizeof(wr));
    wr.opcode              = (xfer->kind == UCT_RC_GDR_BOUNCE_PUT_STAGED) ?
                             IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
    wr.sg_list             = &sge;
    wr.num_sge             = 1;
    wr.wr.rdma.remote_addr = xfer->remote_addr + offset;
    wr.wr.rdma.rkey        = xfer->rkey.rkey;
    status = uct_rc_gdr_ep_post_bounce(bep->ep, &wr, op, &xfer->rkey);
    if (status != UCS_OK) {
        uct_rc_gdr_ep_release_op(op);
        uct_rc_gdr_bounce_wire_free(wire);
        return status;
    }

    /* the work request's reference stays: its completion reports */
    ++wire->comp.count;
    uct_invoke_completion(&wire->comp, UCS_OK);
    return UCS_INPROGRESS;
}


/* The staging engine's wire: chunk `chunk` is staged (put) or wanted
 * (get); a served get's role checks its chunk before (rc_gdr_bounce_target.c)
 */
ucs_status_t uct_rc_gdr_bounce_xfer_stage_post(void *arg, unsigned chunk,
                                               uct_rc_gdr_stage_buf_t *buf,
                                               size_t length, size_t offset)
{
    uct_rc_gdr_bounce_xfer_t *xfer = arg;
    uct_rc_gdr_bounce_ep_t *bep    = xfer->bep;
    uct_rc_gdr_bounce_wire_t *wire;
    uint8_t type;

    if (uct_rc_gdr_bounce_ep_is_dead(bep)) {
        return uct_rc_gdr_bounce_ep_dead_status(bep);
    }

    if ((xfer->kind == UCT_RC_GDR_BOUNCE_PUT_STAGED) ||
        (xfer->kind == UCT_RC_GDR_BOUNCE_GET_STAGED)) {
        return uct_rc_gdr_bounce_post_rdma(xfer, chunk, buf, length, offset);
    }

    /* PUT_MSG from keyless GPU memory, or SERVE_GET: messages out of the
     * staging buffer, queued behind those before */
    type = (xfer->kind == UCT_RC_GDR_BOUNCE_PUT_MSG) ?
           UCT_RC_GDR_BOUNCE_MSG_PUT_DATA : UCT_RC_GDR_BOUNCE_MSG_GET_DATA;
    wire = uct_rc_gdr_bounce_wire_new(bep, xfer,
                                      uct_rc_gdr_bounce_xfer_chunk_sent, type);
    if (wire == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    wire->chunk  = chunk;
    wire->src    = buf->addr;
    wire->lkey   = uct_rc_gdr_bounce_buf_lkey(buf);
    wire->length = length;
    if (type == UCT_RC_GDR_BOUNCE_MSG_PUT_DATA) {
        wire->hdr.token    = xfer->rkey.rkey;
        wire->hdr.token_hi = xfer->rkey.token_hi;
        wire->hdr.addr  = xfer->remote_addr + offset;
        wire->last      = (offset + length == xfer->length);
    } else {
        wire->hdr.addr  = offset;
        /* waits for the peer from now (not while it waited for a staging
         * buffer): taken by the deadline, or dropped */
        xfer->deadline  = ucs_get_time() +
                          uct_rc_gdr_bounce_ep_iface(bep)->bounce->timeout;
    }
    uct_rc_gdr_bounce_wire_enqueue(wire);
    return UCS_INPROGRESS;
}


void uct_rc_gdr_bounce_xfer_stage_complete(void *arg, ucs_status_t status)
{
    uct_rc_gdr_bounce_xfer_t *xfer = arg;

    xfer->stage = NULL;
    uct_rc_gdr_bounce_xfer_put_ref(xfer, status);
}


/* A transfer of this side staged by the engine (a served get adds its own
 * check to post: rc_gdr_bounce_target.c) */
const uct_rc_gdr_stage_ops_t uct_rc_gdr_bounce_xfer_stage_ops = {
    .post       = uct_rc_gdr_bounce_xfer_stage_post,
    .chunk_done = NULL,
    .complete   = uct_rc_gdr_bounce_xfer_stage_complete
};


ucs_status_t
uct_rc_gdr_bounce_xfer_stage(uct_rc_gdr_bounce_xfer_t *xfer,
                             uct_rc_gdr_stage_engine_t *engine,
                             const uct_rc_gdr_stage_ops_t *ops)
{
    uct_rc_gdr_stage_xfer_params_t params;
    ucs_status_t status;

    params.dir      = (xfer->kind == UCT_RC_GDR_BOUNCE_GET_STAGED) ?
                      UCT_RC_GDR_STAGE_WIRE_H2D : UCT_RC_GDR_STAGE_D2H_WIRE;
    params.gpu_addr = xfer->local;
    params.length   = xfer->length;
    params.depth    = 0;
    params.ops      = ops;
    params.arg      = xfer;
    status          = uct_rc_gdr_stage_xfer_start(engine, &params,
                                                  &xfer->stage);
    if (status == UCS_INPROGRESS) {
        ++xfer->refs;
        return UCS_OK;
    }

    ucs_assert(status != UCS_OK); /* never a zero length */
    return status;
}
