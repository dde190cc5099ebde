/*
 * rc_gdr endpoint: the posting layer, shared by the endpoint's operations
 * (rc_gdr_ep.c) and the bounce lane's work requests (rc_gdr_bounce*.c).
 *
 *   resources   uct_rc_gdr_ep_check_room, uct_rc_gdr_ep_check_tx,
 *               uct_rc_gdr_ep_start_internal_op
 *   descriptor  uct_rc_gdr_ep_get_op, uct_rc_gdr_ep_release_op
 *   post        uct_rc_gdr_ep_post (traced: rc_gdr_trace.h),
 *               uct_rc_gdr_ep_post_op, uct_rc_gdr_ep_post_bare (none)
 *   messages    uct_rc_gdr_ep_take_imm, uct_rc_gdr_ep_post_credit (the one
 *               credit-only SEND), uct_rc_gdr_ep_probe (keepalive),
 *               uct_rc_gdr_ep_post_bounce
 *   flush       uct_rc_gdr_ep_flush_note_write
 *
 * Nothing here calls a user callback or decides a lane.
 */

#ifndef UCT_RC_GDR_EP_INL_
#define UCT_RC_GDR_EP_INL_

#include "rc_gdr_ep.h"
#include "rc_gdr_flush.h"
#include "rc_gdr_trace.h"

#include <ucs/datastruct/mpool.inl>
#include <ucs/debug/log.h>
#include <ucs/sys/math.h>

#include <arpa/inet.h>
#include <string.h>


static UCS_F_ALWAYS_INLINE uct_rc_gdr_iface_t *
uct_rc_gdr_ep_iface(uct_rc_gdr_ep_t *ep)
{
    return ucs_derived_of(ep->super.super.iface, uct_rc_gdr_iface_t);
}


static UCS_F_ALWAYS_INLINE uct_rc_gdr_md_t *
uct_rc_gdr_ep_md(uct_rc_gdr_ep_t *ep)
{
    return ucs_derived_of(uct_rc_gdr_ep_iface(ep)->super.md, uct_rc_gdr_md_t);
}


/* Room for one more work request (and a credit, for a message). */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_gdr_ep_check_room(uct_rc_gdr_ep_t *ep, int needs_credit)
{
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);

    if (ucs_unlikely(!(ep->flags & UCT_RC_GDR_EP_FLAG_CONNECTED) ||
                     (ep->sq_avail == 0) || (iface->tx_cq_avail == 0) ||
                     (needs_credit && (ep->fc_credits <= 0)))) {
        return UCS_ERR_NO_RESOURCE;
    }

    return UCS_OK;
}


/* Room, on an endpoint that has not failed. Internal work requests
 * (credits, flush reads, the bounce lane's) take this check alone; those the
 * user asks for also wait for their turn (rc_gdr_ep.c). */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_gdr_ep_check_tx(uct_rc_gdr_ep_t *ep, int needs_credit)
{
    if (ucs_unlikely(ep->flags & UCT_RC_GDR_EP_FLAG_FAILED)) {
        return ep->status;
    }

    return uct_rc_gdr_ep_check_room(ep, needs_credit);
}


static UCS_F_ALWAYS_INLINE void uct_rc_gdr_ep_release_op(uct_rc_gdr_op_t *op)
{
    if (op->buf != NULL) {
        ucs_mpool_put_inline(op->buf);
    }
    ucs_mpool_put_inline(op);
}


/* An operation descriptor, and a registered buffer when asked. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_gdr_ep_get_op(uct_rc_gdr_ep_t *ep, uct_rc_gdr_op_type_t type,
                     int with_buf, uct_rc_gdr_op_t **op_p)
{
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);
    uct_rc_gdr_op_t *op;

    op = ucs_mpool_get_inline(&iface->op_mp);
    if (ucs_unlikely(op == NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }

    op->ep       = ep;
    op->type     = type;
    op->signaled = 0;
    op->internal = 0;
    op->comp     = NULL;
    op->buf      = NULL;
    if (with_buf) {
        op->buf = ucs_mpool_get_inline(&iface->tx_mp);
        if (ucs_unlikely(op->buf == NULL)) {
            ucs_mpool_put_inline(op);
            return UCS_ERR_NO_RESOURCE;
        }
    }

    *op_p = op;
    return UCS_OK;
}


/* Resources, then the descriptor, for a work request of rc_gdr's own (no
 * credit, no turn). */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_gdr_ep_start_internal_op(uct_rc_gdr_ep_t *ep,
                                uct_rc_gdr_op_type_t type, int with_buf,
                                uct_rc_gdr_op_t **op_p)
{
    ucs_status_t status = uct_rc_gdr_ep_check_tx(ep, 0);

    if (status != UCS_OK) {
        return status;
    }
    return uct_rc_gdr_ep_get_op(ep, type, with_buf, op_p);
}


static UCS_F_NOINLINE ucs_status_t
uct_rc_gdr_ep_post_failed(uct_rc_gdr_ep_t *ep, const struct ibv_send_wr *wr,
                          int ret)
{
    ucs_error("rc_gdr: ibv_post_send(QP 0x%x, opcode %d) failed: %s",
              ep->qp->qp_num, wr->opcode, strerror(ret));
    return UCS_ERR_IO_ERROR;
}


/* Hands one work request, whose resources were checked, to the QP and
 * counts it; on failure nothing was posted. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_gdr_ep_post_wr(uct_rc_gdr_ep_t *ep, struct ibv_send_wr *wr,
                      int signaled)
{
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);
    struct ibv_send_wr *bad_wr;
    int ret;

    wr->next = NULL;
    if (ep->flags & UCT_RC_GDR_EP_FLAG_FENCE) {
        /* Waits for the reads and atomics posted before the fence. */
        wr->send_flags |= IBV_SEND_FENCE;
    }

    uct_rc_gdr_trace_post_send(ep->qp->qp_num, wr);
    ret = ibv_post_send(ep->qp, wr, &bad_wr);
    if (ucs_unlikely(ret != 0)) {
        return uct_rc_gdr_ep_post_failed(ep, wr, ret);
    }

    ep->flags &= ~UCT_RC_GDR_EP_FLAG_FENCE;
    ++ep->tx_posted;
    --ep->sq_avail;
    /* Every request may report (an error completion does even when not
     * signaled): the completion queue is sized for all of them. */
    --iface->tx_cq_avail;
    iface->tx_signaled += !!signaled;
    ep->unsignaled      = signaled ? 0 : (ep->unsignaled + 1);
    ++iface->stats.tx_wrs;
    return UCS_OK;
}


/* Whether the next work request must report: the moderation's turn (one in
 * tx_cq_moderation). One that need not may go without a descriptor; one that
 * reports needs a descriptor for its completion to name. */
static UCS_F_ALWAYS_INLINE int
uct_rc_gdr_ep_moderation_turn(uct_rc_gdr_ep_t *ep)
{
    return ep->unsignaled + 1 >=
           uct_rc_gdr_ep_iface(ep)->config.tx_cq_moderation;
}


/*
 * Posts one work request owned by @a op, whose resources were checked.
 * Writes and sends nobody waits for report only every tx_cq_moderation-th
 * time: that completion retires all before it (rc_gdr_ep.c,
 * uct_rc_gdr_ep_send_completion). On failure nothing was posted and @a op
 * is still the caller's.
 */
static inline ucs_status_t uct_rc_gdr_ep_post(uct_rc_gdr_ep_t *ep,
                                              struct ibv_send_wr *wr,
                                              uct_rc_gdr_op_t *op)
{
    ucs_status_t status;

    op->signaled   |= (op->comp != NULL) || (op->type != UCT_RC_GDR_OP_SEND) ||
                      uct_rc_gdr_ep_moderation_turn(ep);
    wr->wr_id       = (uintptr_t)op;
    if (op->signaled) {
        wr->send_flags |= IBV_SEND_SIGNALED;
    }

    status = uct_rc_gdr_ep_post_wr(ep, wr, op->signaled);
    if (ucs_likely(status == UCS_OK)) {
        op->seq = ep->tx_posted;
        ucs_queue_push(&ep->outstanding, &op->queue);
    }
    return status;
}


/*
 * Posts a work request nobody waits for without a descriptor (when it is
 * not uct_rc_gdr_ep_moderation_turn): unsignaled, it is retired by the next
 * completion after it, or in error by its own, whose wr_id gives its
 * sequence number (UCT_RC_GDR_WR_ID_BARE). As rc_verbs does: no mpool, no
 * queue, for the short sends.
 */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_gdr_ep_post_bare(uct_rc_gdr_ep_t *ep, struct ibv_send_wr *wr)
{
    wr->wr_id = ((uint64_t)(uint32_t)(ep->tx_posted + 1) << 1) |
                UCT_RC_GDR_WR_ID_BARE;
    return uct_rc_gdr_ep_post_wr(ep, wr, 0);
}


/* Posts, or gives the descriptor back when the post fails. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_gdr_ep_post_op(uct_rc_gdr_ep_t *ep, struct ibv_send_wr *wr,
                      uct_rc_gdr_op_t *op)
{
    ucs_status_t status = uct_rc_gdr_ep_post(ep, wr, op);

    if (ucs_unlikely(status != UCS_OK)) {
        uct_rc_gdr_ep_release_op(op);
    }
    return status;
}


/* The fields of an RDMA work request (uct_rc_gdr_ep_post sets wr_id and
 * next; nothing else of struct ibv_send_wr is read for RC). */
static UCS_F_ALWAYS_INLINE void
uct_rc_gdr_ep_wr_rdma(struct ibv_send_wr *wr, enum ibv_wr_opcode opcode,
                      struct ibv_sge *sges, int num_sge, uint64_t remote_addr,
                      uint32_t rkey, unsigned send_flags)
{
    wr->opcode              = opcode;
    wr->sg_list             = sges;
    wr->num_sge             = num_sge;
    wr->send_flags          = send_flags;
    wr->wr.rdma.remote_addr = remote_addr;
    wr->wr.rdma.rkey        = rkey;
}


/* The same for a SEND_WITH_IMM; its immediate data is the caller's. */
static UCS_F_ALWAYS_INLINE void
uct_rc_gdr_ep_wr_send(struct ibv_send_wr *wr, struct ibv_sge *sges,
                      int num_sge, unsigned send_flags)
{
    wr->opcode     = IBV_WR_SEND_WITH_IMM;
    wr->sg_list    = sges;
    wr->num_sge    = num_sge;
    wr->send_flags = send_flags;
}


/* Immediate data of the next SEND: piggy-backs the credits we owe. */
static UCS_F_ALWAYS_INLINE uint32_t
uct_rc_gdr_ep_take_imm(uct_rc_gdr_ep_t *ep, uint32_t bits)
{
    unsigned credits = ucs_min(ep->fc_to_return, UCT_RC_GDR_IMM_CREDITS_MAX);

    ep->fc_to_return -= credits;
    return htonl(bits | (credits << UCT_RC_GDR_IMM_CREDITS_SHIFT));
}


/*
 * The credit-only message: a SEND_WITH_IMM without data that returns the
 * credits we owe and consumes none of the peer's (its receive queue takes it
 * like any credit return). It grants credits, makes a completion report
 * (signaled) and probes the peer (keepalive); @a op is given back when the
 * post fails.
 */
static inline ucs_status_t
uct_rc_gdr_ep_post_credit(uct_rc_gdr_ep_t *ep, uct_rc_gdr_op_t *op)
{
    struct ibv_send_wr wr;

    uct_rc_gdr_ep_wr_send(&wr, NULL, 0, 0);
    wr.imm_data = uct_rc_gdr_ep_take_imm(ep, UCT_RC_GDR_IMM_CREDIT_ONLY);
    return uct_rc_gdr_ep_post_op(ep, &wr, op);
}


/* Keepalive: a signaled credit-only message (with whatever credits are
 * owed), unless a signaled request in flight already probes the peer, its
 * failure is known, or there is no room (the caller probes again later). A
 * dead peer never acknowledges it, and the QP reports the failure after the
 * configured timeout. Unsignaled requests alone do not probe: acknowledged
 * before the peer died, they report nothing, ever. */
static inline ucs_status_t uct_rc_gdr_ep_probe(uct_rc_gdr_ep_t *ep)
{
    uct_rc_gdr_op_t *op;

    if ((ep->flags & UCT_RC_GDR_EP_FLAG_FAILED) ||
        (uct_rc_gdr_ep_in_flight(ep) > ep->unsignaled) ||
        (uct_rc_gdr_ep_start_internal_op(ep, UCT_RC_GDR_OP_SEND, 0, &op) !=
         UCS_OK)) {
        return UCS_OK;
    }

    op->signaled = 1;
    return uct_rc_gdr_ep_post_credit(ep, op);
}


/*
 * After a write or atomic was posted: remember where the next flush must
 * read, when the knob or the target (its rkey flag) asks for a read
 * (rc_gdr_flush.h). One target per endpoint: the last one written that needs
 * the read. The NIC's read of that GPU's memory returns only after the
 * writes it placed there before (PCIe reads do not pass posted writes), so a
 * batch of puts into one GPU costs one read; writes into two GPUs behind one
 * endpoint between two flushes are made visible only in the last one.
 */
static UCS_F_ALWAYS_INLINE void
uct_rc_gdr_ep_flush_note_write(uct_rc_gdr_ep_t *ep,
                               const uct_rc_gdr_rkey_t *rkey,
                               uint64_t remote_addr, size_t length)
{
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);

    if (length == 0) {
        return; /* touched no memory */
    }

    if ((rkey->flags & UCT_RC_GDR_RKEY_FLAG_NO_READ) &&
        !(rkey->flags & UCT_RC_GDR_RKEY_FLAG_FLUSH_READ)) {
        /* The target's NIC may not read this memory, and its GPU does not
         * need the read: "always" has nothing it may read here. */
        return;
    }

    if (!uct_rc_gdr_flush_rkey_needs_read(iface->config.flush_mode,
                                          rkey->flags)) {
#if UCT_RC_GDR_HAVE_FLUSH_REMOTE
        /* UCT_FLUSH_FLAG_REMOTE reads after any write; a target that needs
         * the read for visibility keeps its place. */
        ep->flags |= UCT_RC_GDR_EP_FLAG_WRITTEN;
        if (ep->flags & UCT_RC_GDR_EP_FLAG_FLUSH_READ) {
            return;
        }
#else
        return;
#endif
    } else {
        ep->flags |= UCT_RC_GDR_EP_FLAG_FLUSH_READ |
                     UCT_RC_GDR_EP_FLAG_WRITTEN;
    }

    ep->flush.remote_addr = remote_addr;
    ep->flush.rkey        = rkey->rkey;
    ep->flush.length      = ucs_min(length,
                                    (size_t)UCT_RC_GDR_FLUSH_READ_MAX);
}


/*
 * Posts one work request of the bounce lane with the checks and accounting
 * of the UCT operations: a SEND_WITH_IMM gets the internal imm bit and the
 * credits owed, and consumes a credit; an RDMA WRITE is noted for the flush
 * (@a rkey). On failure nothing was posted and @a op still belongs to the
 * caller.
 *
 * @return UCS_OK, UCS_ERR_NO_RESOURCE, or the endpoint's error.
 */
static inline ucs_status_t
uct_rc_gdr_ep_post_bounce(uct_rc_gdr_ep_t *ep, struct ibv_send_wr *wr,
                          uct_rc_gdr_op_t *op, const uct_rc_gdr_rkey_t *rkey)
{
    int is_msg = (wr->opcode == IBV_WR_SEND_WITH_IMM);
    ucs_status_t status;

    status = uct_rc_gdr_ep_check_tx(ep, is_msg);
    if (status != UCS_OK) {
        return status;
    }

    if (is_msg) {
        wr->imm_data = uct_rc_gdr_ep_take_imm(ep, UCT_RC_GDR_IMM_INTERNAL);
    }

    op->internal = 1;
    status       = uct_rc_gdr_ep_post(ep, wr, op);
    if (status != UCS_OK) {
        return status;
    }

    if (is_msg) {
        --ep->fc_credits;
    } else if (wr->opcode == IBV_WR_RDMA_WRITE) {
        uct_rc_gdr_ep_flush_note_write(ep, rkey, wr->wr.rdma.remote_addr,
                                       wr->sg_list[0].length);
    }
    return UCS_OK;
}

#endif
