/**
 * rc_gdr bounce lane, initiator role, above the transfers
 * (rc_gdr_bounce_initiator.h): the endpoint's entry points (put/get zcopy, and
 * put_short/put_bcopy/get_bcopy to memory without a NIC key) and the peer's
 * replies (ACK, GET_DATA).
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h" /* UCX's: its log level, assertions */
#endif

#include "rc_gdr_bounce_initiator.h"

#include <uct/base/uct_iov.inl>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/math.h>

#include <string.h>


/* ------------------------------------------------------------------------
 * Endpoint operations
 * ------------------------------------------------------------------------ */

/* Whether the endpoint takes one more bounce transfer now; NO_RESOURCE is
 * back-pressure (pending), never a failure */
static ucs_status_t uct_rc_gdr_bounce_admit(uct_rc_gdr_ep_t *ep,
                                            unsigned route, int is_put,
                                            uct_rc_gdr_bounce_ep_t **bep_p)
{
    uct_rc_gdr_iface_t *iface    = uct_rc_gdr_ep_iface(ep);
    uct_rc_gdr_bounce_iface_t *b = iface->bounce;
    uct_rc_gdr_bounce_ep_t *bep;

    if (ep->flags & UCT_RC_GDR_EP_FLAG_FAILED) {
        return ep->status;
    }

    if (!(ep->flags & UCT_RC_GDR_EP_FLAG_CONNECTED)) {
        return UCS_ERR_NO_RESOURCE;
    }

    bep = uct_rc_gdr_bounce_ep_get(ep);
    if (bep == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    if (bep->num_xfers >= UCT_RC_GDR_BOUNCE_EP_MAX_XFERS) {
        b->blocked = 1;
        return UCS_ERR_NO_RESOURCE;
    }

    if (route & UCT_RC_GDR_BOUNCE_REMOTE_KEYLESS) {
        /* messages go out in order: a transfer waits for the ones queued,
         * and a put for the put whose data still goes out */
        if (!ucs_list_is_empty(&bep->sendq) ||
            (is_put && (bep->put_open != NULL))) {
            b->blocked = 1;
            return UCS_ERR_NO_RESOURCE;
        }
        if ((ep->fc_credits <= 0) || (ep->sq_avail == 0) ||
            (iface->tx_cq_avail == 0)) {
            return UCS_ERR_NO_RESOURCE;
        }
    }

    *bep_p = bep;
    return UCS_OK;
}


/* What a transfer moves on this side */
typedef struct {
    char                  *local;
    size_t                length;
    int                   gpu;       /* -1: host memory */
    uint32_t              lkey;      /* 0: none (copied, or staged) */
    void                  *owned;    /* freed with the transfer */
    uct_unpack_callback_t unpack_cb; /* get_bcopy: called with `owned` */
    void                  *unpack_arg;
} uct_rc_gdr_bounce_local_t;


/* Starts an admitted transfer; on failure nothing is left behind (and
 * `owned` is the caller's again) */
static ucs_status_t
uct_rc_gdr_bounce_start(uct_rc_gdr_bounce_ep_t *bep, int is_put,
                        unsigned route, const uct_rc_gdr_bounce_local_t *local,
                        uint64_t remote_addr, const uct_rc_gdr_rkey_t *rkey,
                        uct_completion_t *comp)
{
    uct_rc_gdr_iface_t *iface         = uct_rc_gdr_bounce_ep_iface(bep);
    uct_rc_gdr_bounce_iface_t *b      = iface->bounce;
    int remote_keyless                = route &
                                        UCT_RC_GDR_BOUNCE_REMOTE_KEYLESS;
    int staged                        = route &
                                        UCT_RC_GDR_BOUNCE_LOCAL_STAGED;
    uct_rc_gdr_stage_engine_t *engine = NULL;
    uct_rc_gdr_bounce_wire_t *wire    = NULL;
    uct_rc_gdr_bounce_xfer_t *xfer;
    ucs_status_t status;
    khiter_t iter;
    int ret;

    if (staged) {
        status = uct_rc_gdr_bounce_engine(b, local->gpu, &engine);
        if (status != UCS_OK) {
            return status;
        }
    }

    xfer = ucs_calloc(1, sizeof(*xfer), "rc_gdr_bounce_xfer");
    if (xfer == NULL) {
        ucs_error("rc_gdr: failed to allocate a bounce transfer");
        return UCS_ERR_NO_MEMORY;
    }

    xfer->bep         = bep;
    xfer->comp        = comp;
    xfer->gpu         = local->gpu;
    xfer->status      = UCS_OK;
    xfer->local       = local->local;
    xfer->length      = local->length;
    xfer->owned       = local->owned;
    xfer->unpack_cb   = local->unpack_cb;
    xfer->unpack_arg  = local->unpack_arg;
    xfer->remote_addr = remote_addr;
    xfer->rkey        = *rkey;
    xfer->kind        = remote_keyless ?
                        (is_put ? UCT_RC_GDR_BOUNCE_PUT_MSG :
                                  UCT_RC_GDR_BOUNCE_GET_MSG) :
                        (is_put ? UCT_RC_GDR_BOUNCE_PUT_STAGED :
                                  UCT_RC_GDR_BOUNCE_GET_STAGED);

    do {
        xfer->id = ++b->next_id;
    } while ((xfer->id == 0) ||
             (kh_get(uct_rc_gdr_bounce_xfers, &b->xfers, xfer->id) !=
              kh_end(&b->xfers)));
    iter = kh_put(uct_rc_gdr_bounce_xfers, &b->xfers, xfer->id, &ret);
    if (ret == -1) {
        ucs_error("rc_gdr: out of memory adding bounce transfer %u",
                  xfer->id);
        status = UCS_ERR_NO_MEMORY;
        goto err_free;
    }
    kh_value(&b->xfers, iter) = xfer;

    if (xfer->kind == UCT_RC_GDR_BOUNCE_GET_MSG) {
        /* a GET_REQ, then the data (or an error ACK) */
        wire = uct_rc_gdr_bounce_wire_new(bep, xfer,
                                          uct_rc_gdr_bounce_xfer_part_done,
                                          UCT_RC_GDR_BOUNCE_MSG_GET_REQ);
        if (wire == NULL) {
            status = UCS_ERR_NO_MEMORY;
            goto err_del;
        }
        wire->hdr.token    = rkey->rkey;
        wire->hdr.token_hi = rkey->token_hi;
        wire->hdr.addr     = remote_addr;
        wire->hdr.length = xfer->length;
    } else if ((xfer->kind == UCT_RC_GDR_BOUNCE_PUT_MSG) && !staged) {
        /* the data straight from its NIC key (or copied into each message:
         * no key), then the ACK */
        wire = uct_rc_gdr_bounce_wire_new(bep, xfer,
                                          uct_rc_gdr_bounce_xfer_part_done,
                                          UCT_RC_GDR_BOUNCE_MSG_PUT_DATA);
        if (wire == NULL) {
            status = UCS_ERR_NO_MEMORY;
            goto err_del;
        }
        wire->src       = xfer->local;
        wire->lkey      = local->lkey;
        wire->length    = xfer->length;
        wire->last      = 1;
        wire->hdr.token    = rkey->rkey;
        wire->hdr.token_hi = rkey->token_hi;
        wire->hdr.addr     = remote_addr;
    } else {
        status = uct_rc_gdr_bounce_xfer_stage(
                xfer, engine, &uct_rc_gdr_bounce_xfer_stage_ops);
        if (status != UCS_OK) {
            if (status == UCS_ERR_NO_RESOURCE) {
                b->blocked = 1;
            }
            goto err_del;
        }
    }

    if (wire != NULL) {
        ++xfer->refs;
        uct_rc_gdr_bounce_wire_enqueue(wire);
    }
    if (remote_keyless) {
        ++xfer->refs;
        xfer->awaiting = 1;
        xfer->deadline = ucs_get_time() + b->timeout;
        ++bep->num_awaiting;
    }

    if (xfer->kind == UCT_RC_GDR_BOUNCE_PUT_MSG) {
        bep->put_open = xfer;
    }
    xfer->seq = bep->next_seq++;
    ucs_list_add_tail(&bep->xfers, &xfer->list);
    ++bep->num_xfers;
    ++iface->stats.bounce_xfers;
    uct_rc_gdr_bounce_ep_pump(bep);
    uct_rc_gdr_bounce_update_stats(b);
    return UCS_OK;

err_del:
    kh_del(uct_rc_gdr_bounce_xfers, &b->xfers, iter);
err_free:
    ucs_free(xfer);
    return status;
}


ucs_status_t uct_rc_gdr_bounce_zcopy(uct_rc_gdr_ep_t *ep, int is_put,
                                     unsigned route, const uct_iov_t *iov,
                                     size_t iovcnt, uint64_t remote_addr,
                                     const uct_rc_gdr_rkey_t *rkey,
                                     uct_completion_t *comp)
{
    const uct_iov_t *entry     = NULL;
    uct_rc_gdr_bounce_local_t local;
    uct_rc_gdr_bounce_ep_t *bep;
    const uct_rc_gdr_mr_t *mr;
    ucs_status_t status;
    size_t i;

    for (i = 0; i < iovcnt; ++i) {
        if (uct_iov_get_length(&iov[i]) == 0) {
            continue;
        }
        if ((entry != NULL) || (iov[i].count > 1)) {
            ucs_error("rc_gdr: the bounce lane moves one contiguous buffer "
                      "per operation (%zu iov entries)", iovcnt);
            return UCS_ERR_UNSUPPORTED;
        }
        entry = &iov[i];
    }

    if (entry == NULL) {
        return UCS_OK; /* nothing to move */
    }

    status = uct_rc_gdr_bounce_admit(ep, route, is_put, &bep);
    if (status != UCS_OK) {
        return status;
    }

    memset(&local, 0, sizeof(local));
    local.local  = entry->buffer;
    local.length = uct_iov_get_length(entry);
    local.gpu    = -1;
    if (entry->memh != UCT_MEM_HANDLE_NULL) {
        mr         = uct_rc_gdr_memh_mr(entry->memh);
        local.gpu  = mr->gpu;
        local.lkey = (route & UCT_RC_GDR_BOUNCE_LOCAL_STAGED) ? 0 : mr->lkey;
    }

    status = uct_rc_gdr_bounce_start(bep, is_put, route, &local, remote_addr,
                                     rkey, comp);
    return (status == UCS_OK) ? UCS_INPROGRESS : status;
}


/* put_short / put_bcopy to a target without a NIC key: the data is copied
 * now (the caller's buffer is free at return) and sent like a put_zcopy of
 * host memory; a flush waits for its ACK */
static ucs_status_t uct_rc_gdr_bounce_put_copy(uct_rc_gdr_ep_t *ep,
                                               uct_rc_gdr_bounce_ep_t *bep,
                                               void *copy, size_t length,
                                               uint64_t remote_addr,
                                               const uct_rc_gdr_rkey_t *rkey)
{
    uct_rc_gdr_bounce_local_t local;
    ucs_status_t status;

    memset(&local, 0, sizeof(local));
    local.local  = copy;
    local.length = length;
    local.gpu    = -1;
    local.owned  = copy;
    status       = uct_rc_gdr_bounce_start(bep, 1,
                                           UCT_RC_GDR_BOUNCE_REMOTE_KEYLESS,
                                           &local, remote_addr, rkey, NULL);
    if (status != UCS_OK) {
        ucs_free(copy);
    }
    return status;
}


ucs_status_t uct_rc_gdr_bounce_put_short(uct_rc_gdr_ep_t *ep,
                                         const void *buffer, unsigned length,
                                         uint64_t remote_addr,
                                         const uct_rc_gdr_rkey_t *rkey)
{
    uct_rc_gdr_bounce_ep_t *bep;
    ucs_status_t status;
    void *copy;

    ucs_assert(length > 0); /* zero bytes go on the wire without a key */
    status = uct_rc_gdr_bounce_admit(ep, UCT_RC_GDR_BOUNCE_REMOTE_KEYLESS, 1,
                                     &bep);
    if (status != UCS_OK) {
        return status;
    }

    copy = ucs_malloc(length, "rc_gdr_bounce_short");
    if (copy == NULL) {
        ucs_error("rc_gdr: failed to allocate %u bytes for a bounce put",
                  length);
        return UCS_ERR_NO_MEMORY;
    }

    memcpy(copy, buffer, length);
    return uct_rc_gdr_bounce_put_copy(ep, bep, copy, length, remote_addr,
                                      rkey);
}


ssize_t uct_rc_gdr_bounce_put_bcopy(uct_rc_gdr_ep_t *ep,
                                    uct_pack_callback_t pack_cb, void *arg,
                                    uint64_t remote_addr,
                                    const uct_rc_gdr_rkey_t *rkey)
{
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);
    uct_rc_gdr_bounce_ep_t *bep;
    ucs_status_t status;
    size_t length;
    void *copy;

    status = uct_rc_gdr_bounce_admit(ep, UCT_RC_GDR_BOUNCE_REMOTE_KEYLESS, 1,
                                     &bep);
    if (status != UCS_OK) {
        return status;
    }

    copy = ucs_malloc(iface->config.seg_size, "rc_gdr_bounce_bcopy");
    if (copy == NULL) {
        ucs_error("rc_gdr: failed to allocate %zu bytes for a bounce put",
                  iface->config.seg_size);
        return UCS_ERR_NO_MEMORY;
    }

    length = pack_cb(copy, arg);
    if (length == 0) {
        ucs_free(copy);
        return 0;
    }

    status = uct_rc_gdr_bounce_put_copy(ep, bep, copy, length, remote_addr,
                                        rkey);
    return (status == UCS_OK) ? (ssize_t)length : status;
}


ucs_status_t uct_rc_gdr_bounce_get_bcopy(uct_rc_gdr_ep_t *ep,
                                         uct_unpack_callback_t unpack_cb,
                                         void *arg, size_t length,
                                         uint64_t remote_addr,
                                         const uct_rc_gdr_rkey_t *rkey,
                                         uct_completion_t *comp)
{
    uct_rc_gdr_bounce_local_t local;
    uct_rc_gdr_bounce_ep_t *bep;
    ucs_status_t status;

    ucs_assert(length > 0); /* zero bytes go on the wire without a key */
    status = uct_rc_gdr_bounce_admit(ep, UCT_RC_GDR_BOUNCE_REMOTE_KEYLESS, 0,
                                     &bep);
    if (status != UCS_OK) {
        return status;
    }

    /* gathered here, unpacked at once when the last byte came */
    memset(&local, 0, sizeof(local));
    local.local      = ucs_malloc(length, "rc_gdr_bounce_get_bcopy");
    local.length     = length;
    local.gpu        = -1;
    local.owned      = local.local;
    local.unpack_cb  = unpack_cb;
    local.unpack_arg = arg;
    if (local.local == NULL) {
        ucs_error("rc_gdr: failed to allocate %zu bytes for a bounce get",
                  length);
        return UCS_ERR_NO_MEMORY;
    }

    status = uct_rc_gdr_bounce_start(bep, 0, UCT_RC_GDR_BOUNCE_REMOTE_KEYLESS,
                                     &local, remote_addr, rkey, comp);
    if (status != UCS_OK) {
        ucs_free(local.owned);
        return status;
    }
    return UCS_INPROGRESS;
}


/* ------------------------------------------------------------------------
 * Replies of the peer
 * ------------------------------------------------------------------------ */

/* A reply to one of our transfers: checked against what we asked */
static uct_rc_gdr_bounce_xfer_t *
uct_rc_gdr_bounce_recv_find(uct_rc_gdr_bounce_ep_t *bep,
                            const uct_rc_gdr_bounce_hdr_t *hdr)
{
    uct_rc_gdr_iface_t *iface    = uct_rc_gdr_bounce_ep_iface(bep);
    uct_rc_gdr_bounce_iface_t *b = iface->bounce;
    uct_rc_gdr_bounce_xfer_t *xfer;
    khiter_t iter;

    iter = kh_get(uct_rc_gdr_bounce_xfers, &b->xfers, hdr->xfer_id);
    xfer = (iter == kh_end(&b->xfers)) ? NULL :
           kh_value(&b->xfers, iter);
    if ((xfer == NULL) || (xfer->bep != bep) || !xfer->awaiting ||
        ((hdr->type == UCT_RC_GDR_BOUNCE_MSG_GET_DATA) &&
         ((xfer->kind != UCT_RC_GDR_BOUNCE_GET_MSG) ||
          (hdr->addr > xfer->length) ||
          (hdr->length > xfer->length - hdr->addr)))) {
        if (iface->stats.bounce_unexpected++ == 0) {
            ucs_error("rc_gdr: QP 0x%x: unexpected bounce message type %u "
                      "for transfer %u (offset %" PRIu64 ", %" PRIu64
                      " bytes): dropped (counted)", bep->ep->qp->qp_num,
                      hdr->type, hdr->xfer_id, hdr->addr, hdr->length);
        }
        return NULL;
    }

    return xfer;
}


void uct_rc_gdr_bounce_recv_get_data(uct_rc_gdr_bounce_ep_t *bep,
                                            const uct_rc_gdr_bounce_hdr_t *hdr,
                                            const void *payload)
{
    uct_rc_gdr_bounce_iface_t *b = uct_rc_gdr_bounce_ep_iface(bep)->bounce;
    uct_rc_gdr_bounce_xfer_t *xfer;
    ucs_status_t status;

    xfer = uct_rc_gdr_bounce_recv_find(bep, hdr);
    if (xfer == NULL) {
        return;
    }

    /* The target sends a get's data once, in order: a repeated or skipped
     * part would complete the get early, over bytes never written */
    if (hdr->addr != xfer->received) {
        if (uct_rc_gdr_bounce_ep_iface(bep)->stats.bounce_unexpected++ == 0) {
            ucs_error("rc_gdr: QP 0x%x: bounce get %u: data for offset %"
                      PRIu64 ", expected %zu: the get fails (counted)",
                      bep->ep->qp->qp_num, hdr->xfer_id, hdr->addr,
                      xfer->received);
        }
        uct_rc_gdr_bounce_xfer_replied(xfer, UCS_ERR_IO_ERROR);
        return;
    }

    xfer->deadline = ucs_get_time() + b->timeout;
    if ((xfer->status == UCS_OK) && (hdr->length > 0)) {
        if (xfer->gpu >= 0) {
            status = uct_rc_gdr_bounce_copy_h2d(b, xfer->gpu,
                                                xfer->local + hdr->addr,
                                                payload, hdr->length);
            if (status != UCS_OK) {
                xfer->status = status;
            }
        } else {
            memcpy(xfer->local + hdr->addr, payload, hdr->length);
        }
    }

    xfer->received += hdr->length;
    if (xfer->received >= xfer->length) {
        uct_rc_gdr_bounce_xfer_replied(xfer, UCS_OK);
    }
}


void uct_rc_gdr_bounce_recv_ack(uct_rc_gdr_bounce_ep_t *bep,
                                       const uct_rc_gdr_bounce_hdr_t *hdr)
{
    ucs_status_t status = (ucs_status_t)hdr->status;
    uct_rc_gdr_bounce_xfer_t *xfer;

    xfer = uct_rc_gdr_bounce_recv_find(bep, hdr);
    if (xfer == NULL) {
        return;
    }

    if ((status > UCS_OK) || (status <= UCS_ERR_LAST) ||
        ((status == UCS_OK) && (xfer->kind == UCT_RC_GDR_BOUNCE_GET_MSG))) {
        ucs_error("rc_gdr: QP 0x%x: bounce transfer %u: acknowledged with "
                  "invalid status %d", bep->ep->qp->qp_num, hdr->xfer_id,
                  hdr->status);
        status = UCS_ERR_IO_ERROR;
    } else if (status != UCS_OK) {
        ucs_debug("rc_gdr: QP 0x%x: bounce transfer %u refused by the "
                  "peer: %s", bep->ep->qp->qp_num, hdr->xfer_id,
                  ucs_status_string(status));
    }

    uct_rc_gdr_bounce_xfer_replied(xfer, status);
}
