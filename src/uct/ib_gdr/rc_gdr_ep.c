/*
 * rc_gdr endpoint: the UCT operations. Each reads top-down as
 * lane (NIC or bounce lane) -> resources and its turn -> work request ->
 * post (rc_gdr_ep.inl) -> completion (uct_rc_gdr_ep_send_completion).
 */

#ifdef HAVE_CONFIG_H
#  include "config.h" /* UCX's: its log level, assertions */
#endif

#include "rc_gdr_ep.inl"
#include "rc_gdr_addr.h"
#include "rc_gdr_cuda.h"

#include <uct/base/uct_iov.inl>
#include <ucs/type/class.h>


#define UCT_RC_GDR_MIN_RNR_TIMER  12 /* 0.64 ms */
#define UCT_RC_GDR_RNR_RETRY_INF  7
#define UCT_RC_GDR_HOP_LIMIT      64


/* ------------------------------------------------------------------------
 * The turn and resources of a user's operation (posting: rc_gdr_ep.inl)
 * ------------------------------------------------------------------------ */

/*
 * The check of an operation the user asked for: the resources, and its
 * turn. While requests wait in the pending queue a new operation is refused
 * (UCS_ERR_NO_RESOURCE), or it would overtake them; the request being
 * dispatched is the one exception. Internal work requests (credits, flush
 * reads, the bounce lane's chunks) take uct_rc_gdr_ep_check_tx() alone.
 */
static UCS_F_ALWAYS_INLINE int uct_rc_gdr_ep_behind_pending(uct_rc_gdr_ep_t *ep)
{
    return ucs_unlikely(!ucs_queue_is_empty(&ep->pending)) &&
           !(ep->flags & (UCT_RC_GDR_EP_FLAG_DISPATCH |
                          UCT_RC_GDR_EP_FLAG_FAILED));
}


static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_gdr_ep_check_user_tx(uct_rc_gdr_ep_t *ep, int needs_credit)
{
    if (uct_rc_gdr_ep_behind_pending(ep)) {
        return UCS_ERR_NO_RESOURCE;
    }

    if (ucs_unlikely((ep->flags & (UCT_RC_GDR_EP_FLAG_FAILED |
                                   UCT_RC_GDR_EP_FLAG_ERR_RAISED)) ==
                     UCT_RC_GDR_EP_FLAG_FAILED)) {
        /* Failed but not reported yet (uct_ep_invalidate): the operation is
         * posted like any other, the QP in error flushes it, and the error
         * reaches the user through its completion and the error handler, as
         * with UCX's own transports. */
        return uct_rc_gdr_ep_check_room(ep, needs_credit);
    }

    return uct_rc_gdr_ep_check_tx(ep, needs_credit);
}


/* The moderation's turn: a descriptor its completion names (out of line,
 * one call in TX_CQ_MODERATION, so that the short sends stay small) */
static UCS_F_NOINLINE ucs_status_t
uct_rc_gdr_ep_post_reporting(uct_rc_gdr_ep_t *ep, struct ibv_send_wr *wr)
{
    uct_rc_gdr_op_t *op;
    ucs_status_t status;

    status = uct_rc_gdr_ep_get_op(ep, UCT_RC_GDR_OP_SEND, 0, &op);
    if (status != UCS_OK) {
        return status;
    }
    return uct_rc_gdr_ep_post_op(ep, wr, op);
}


/* A work request nobody waits for (a short put or message): without a
 * descriptor when it need not report, else with one its completion names. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_gdr_ep_post_quiet(uct_rc_gdr_ep_t *ep, struct ibv_send_wr *wr)
{
    if (ucs_likely(!uct_rc_gdr_ep_moderation_turn(ep))) {
        return uct_rc_gdr_ep_post_bare(ep, wr);
    }
    return uct_rc_gdr_ep_post_reporting(ep, wr);
}


/* Resources for one more work request the user asked for, then its
 * descriptor. */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_gdr_ep_start_op(uct_rc_gdr_ep_t *ep, int needs_credit,
                       uct_rc_gdr_op_type_t type, int with_buf,
                       uct_rc_gdr_op_t **op_p)
{
    ucs_status_t status = uct_rc_gdr_ep_check_user_tx(ep, needs_credit);

    if (status != UCS_OK) {
        return status;
    }
    return uct_rc_gdr_ep_get_op(ep, type, with_buf, op_p);
}


/*
 * The send entries of an iov; *unreadable_p is set when the NIC may not
 * read one of them: GPU memory without a NIC key, or with one the gate
 * keeps off that direction (UCX_RC_GDR_NIC_READS_GPU=no with writes
 * allowed). The rule of the RMA paths (uct_rc_gdr_bounce_mr_staged): a
 * send's source is read by the NIC, as a put's.
 */
static size_t uct_rc_gdr_ep_fill_sges(const uct_rc_gdr_md_t *md,
                                      struct ibv_sge *sges,
                                      const uct_iov_t *iov, size_t iovcnt,
                                      int *num_sge_p, int *unreadable_p)
{
    size_t total   = 0;
    int unreadable = 0;
    const uct_rc_gdr_mr_t *mr;
    size_t i, length;
    int num_sge    = 0;

    for (i = 0; i < iovcnt; ++i) {
        length = uct_iov_get_length(&iov[i]);
        if (length == 0) {
            continue;
        }
        sges[num_sge].addr   = (uintptr_t)iov[i].buffer;
        sges[num_sge].length = length;
        if (iov[i].memh == UCT_MEM_HANDLE_NULL) {
            sges[num_sge].lkey = 0;
        } else {
            mr                 = uct_rc_gdr_memh_mr(iov[i].memh);
            sges[num_sge].lkey = mr->lkey;
            unreadable        |= uct_rc_gdr_bounce_mr_staged(md, mr, 1);
        }
        total += length;
        ++num_sge;
    }

    *num_sge_p    = num_sge;
    *unreadable_p = unreadable;
    return total;
}


/* ------------------------------------------------------------------------
 * The lane of an RMA: the NIC, or the bounce lane
 * ------------------------------------------------------------------------ */

typedef enum {
    UCT_RC_GDR_EP_LANE_NIC,     /* the NIC moves it, with the decoded key */
    UCT_RC_GDR_EP_LANE_BOUNCE,  /* the target's NIC may not: the bounce lane
                                   (rc_gdr_bounce.h), with the decoded key */
    UCT_RC_GDR_EP_LANE_BAD_KEY  /* not a key rc_gdr unpacked */
} uct_rc_gdr_ep_lane_t;


/*
 * Decodes the remote key of one RMA, once, and says who moves its @a length
 * bytes: the NIC, or, when the target's NIC may not write (or read) that
 * memory, the bounce lane, which is handed the decoded key. A zero-length
 * access touches no memory and needs no key (UCT allows any rkey,
 * UCT_INVALID_RKEY too; the NIC checks none, IB C9-88): it still goes on the
 * wire, so that it orders and reports like any other operation (a flush
 * after it finds a dead peer).
 */
static UCS_F_ALWAYS_INLINE uct_rc_gdr_ep_lane_t
uct_rc_gdr_ep_lane(uct_rkey_t uct_rkey, int is_write, size_t length,
                   uct_rc_gdr_rkey_t *rkey_p)
{
    if (ucs_unlikely(length == 0)) {
        rkey_p->rkey  = 0;
        rkey_p->flags = 0;
        return UCT_RC_GDR_EP_LANE_NIC;
    }

    if (ucs_unlikely(uct_rc_gdr_rkey_from_uct(uct_rkey, rkey_p) != UCS_OK)) {
        return UCT_RC_GDR_EP_LANE_BAD_KEY;
    }

    return ucs_likely(uct_rc_gdr_rkey_nic_allows(rkey_p, is_write)) ?
           UCT_RC_GDR_EP_LANE_NIC : UCT_RC_GDR_EP_LANE_BOUNCE;
}


static UCS_F_NOINLINE ucs_status_t
uct_rc_gdr_ep_bad_key(uct_rkey_t uct_rkey)
{
    ucs_error("rc_gdr: remote key 0x%" PRIx64 " was not unpacked by rc_gdr",
              (uint64_t)uct_rkey);
    return UCS_ERR_INVALID_PARAM;
}


/*
 * The local side of a zcopy RMA: one scatter/gather entry per non-empty iov
 * entry, and whether any of them is GPU memory that the NIC may not access
 * in this direction (rc_gdr_bounce.h): then the bounce lane stages it, and
 * the entries made here are not used.
 */
static UCS_F_ALWAYS_INLINE size_t
uct_rc_gdr_ep_rdma_sge(uct_rc_gdr_ep_t *ep, struct ibv_sge *sge,
                       const uct_iov_t *iov, int is_write, int *staged_p)
{
    size_t length = uct_iov_get_length(iov);
    const uct_rc_gdr_mr_t *mr;

    sge->addr   = (uintptr_t)iov->buffer;
    sge->length = length;
    sge->lkey   = 0;
    if (iov->memh != UCT_MEM_HANDLE_NULL) {
        mr = uct_rc_gdr_memh_mr(iov->memh);
        if (ucs_unlikely(mr->gpu >= 0) && (length > 0)) {
            *staged_p |= uct_rc_gdr_bounce_mr_staged(uct_rc_gdr_ep_md(ep), mr,
                                                     is_write);
        }
        sge->lkey = mr->lkey;
    }
    return length;
}


static UCS_F_ALWAYS_INLINE size_t
uct_rc_gdr_ep_rdma_sges(uct_rc_gdr_ep_t *ep, struct ibv_sge *sges,
                        const uct_iov_t *iov, size_t iovcnt, int is_write,
                        int *num_sge_p, int *staged_p)
{
    size_t total = 0;
    int num_sge  = 0;
    size_t i, length;

    *staged_p = 0;
    if (ucs_likely(iovcnt == 1)) { /* what UCP and most users pass */
        total      = uct_rc_gdr_ep_rdma_sge(ep, sges, iov, is_write,
                                            staged_p);
        *num_sge_p = (total > 0);
        return total;
    }

    for (i = 0; i < iovcnt; ++i) {
        length = uct_rc_gdr_ep_rdma_sge(ep, &sges[num_sge], &iov[i], is_write,
                                        staged_p);
        if (length > 0) {
            total += length;
            ++num_sge;
        }
    }

    *num_sge_p = num_sge;
    return total;
}


/* ------------------------------------------------------------------------
 * RMA
 * ------------------------------------------------------------------------ */

/*
 * put_zcopy and get_zcopy: lane, then post; the completion arrives through
 * uct_rc_gdr_ep_send_completion() below.
 */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_gdr_ep_rdma_zcopy(uct_rc_gdr_ep_t *ep, enum ibv_wr_opcode opcode,
                         const uct_iov_t *iov, size_t iovcnt,
                         uint64_t remote_addr, uct_rkey_t rkey,
                         uct_completion_t *comp)
{
    int is_write = (opcode == IBV_WR_RDMA_WRITE);
    struct ibv_sge sges[UCT_RC_GDR_MAX_IOV];
    uct_rc_gdr_rkey_t remote_key;
    uct_rc_gdr_ep_lane_t lane;
    struct ibv_send_wr wr;
    uct_rc_gdr_op_t *op;
    ucs_status_t status;
    int num_sge, staged;
    size_t length;

    if (ucs_unlikely(iovcnt > UCT_RC_GDR_MAX_IOV)) {
        ucs_error("rc_gdr: %zu iov entries, at most %d", iovcnt,
                  UCT_RC_GDR_MAX_IOV);
        return UCS_ERR_INVALID_PARAM;
    }

    length = uct_rc_gdr_ep_rdma_sges(ep, sges, iov, iovcnt, is_write,
                                     &num_sge, &staged);
    lane   = uct_rc_gdr_ep_lane(rkey, is_write, length, &remote_key);
    if (ucs_unlikely((lane != UCT_RC_GDR_EP_LANE_NIC) || staged)) {
        if (lane == UCT_RC_GDR_EP_LANE_BAD_KEY) {
            return uct_rc_gdr_ep_bad_key(rkey);
        }
        /* a side without a NIC key for this direction */
        if (uct_rc_gdr_ep_behind_pending(ep)) {
            return UCS_ERR_NO_RESOURCE;
        }
        status = uct_rc_gdr_bounce_zcopy(
                ep, is_write,
                ((lane == UCT_RC_GDR_EP_LANE_BOUNCE) ?
                 UCT_RC_GDR_BOUNCE_REMOTE_KEYLESS : 0) |
                (staged ? UCT_RC_GDR_BOUNCE_LOCAL_STAGED : 0),
                iov, iovcnt, remote_addr, &remote_key, comp);
        if (!UCS_STATUS_IS_ERR(status)) {
            uct_rc_gdr_ep_iface(ep)->stats.rma_zcopy_bytes += length;
        }
        return status;
    }

    status = uct_rc_gdr_ep_start_op(ep, 0, UCT_RC_GDR_OP_SEND, 0, &op);
    if (status != UCS_OK) {
        return status;
    }

    op->comp = comp;
    uct_rc_gdr_ep_wr_rdma(&wr, opcode, sges, num_sge, remote_addr,
                          remote_key.rkey, 0);
    status = uct_rc_gdr_ep_post_op(ep, &wr, op);
    if (status != UCS_OK) {
        return status;
    }

    uct_rc_gdr_ep_iface(ep)->stats.rma_zcopy_bytes += length;
    if (is_write) {
        uct_rc_gdr_ep_flush_note_write(ep, &remote_key, remote_addr, length);
    }
    return UCS_INPROGRESS;
}


ucs_status_t uct_rc_gdr_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                     size_t iovcnt, uint64_t remote_addr,
                                     uct_rkey_t rkey, uct_completion_t *comp)
{
    return uct_rc_gdr_ep_rdma_zcopy(ucs_derived_of(tl_ep, uct_rc_gdr_ep_t),
                                    IBV_WR_RDMA_WRITE, iov, iovcnt,
                                    remote_addr, rkey, comp);
}


ucs_status_t uct_rc_gdr_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                     size_t iovcnt, uint64_t remote_addr,
                                     uct_rkey_t rkey, uct_completion_t *comp)
{
    return uct_rc_gdr_ep_rdma_zcopy(ucs_derived_of(tl_ep, uct_rc_gdr_ep_t),
                                    IBV_WR_RDMA_READ, iov, iovcnt,
                                    remote_addr, rkey, comp);
}


ucs_status_t uct_rc_gdr_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                                     unsigned length, uint64_t remote_addr,
                                     uct_rkey_t rkey)
{
    uct_rc_gdr_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_gdr_ep_t);
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);
    uct_rc_gdr_rkey_t remote_key;
    uct_rc_gdr_ep_lane_t lane;
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    ucs_status_t status;

    if (ucs_unlikely(length > iface->config.max_inline)) {
        ucs_error("rc_gdr: put_short length %u exceeds max_short %zu",
                  length, iface->config.max_inline);
        return UCS_ERR_INVALID_PARAM;
    }

    lane = uct_rc_gdr_ep_lane(rkey, 1, length, &remote_key);
    if (ucs_unlikely(lane != UCT_RC_GDR_EP_LANE_NIC)) {
        if (lane == UCT_RC_GDR_EP_LANE_BAD_KEY) {
            return uct_rc_gdr_ep_bad_key(rkey);
        }
        /* no NIC key at the target: the bounce lane's messages */
        if (uct_rc_gdr_ep_behind_pending(ep)) {
            return UCS_ERR_NO_RESOURCE;
        }
        return uct_rc_gdr_bounce_put_short(ep, buffer, length, remote_addr,
                                           &remote_key);
    }

    status = uct_rc_gdr_ep_check_user_tx(ep, 0);
    if (status != UCS_OK) {
        return status;
    }

    sge.addr   = (uintptr_t)buffer;
    sge.length = length;
    sge.lkey   = 0;
    uct_rc_gdr_ep_wr_rdma(&wr, IBV_WR_RDMA_WRITE, &sge, 1, remote_addr,
                          remote_key.rkey, IBV_SEND_INLINE);
    status = uct_rc_gdr_ep_post_quiet(ep, &wr);
    if (status == UCS_OK) {
        uct_rc_gdr_ep_flush_note_write(ep, &remote_key, remote_addr, length);
    }
    return status;
}


ssize_t uct_rc_gdr_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb,
                                void *arg, uint64_t remote_addr,
                                uct_rkey_t rkey)
{
    uct_rc_gdr_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_gdr_ep_t);
    uct_rc_gdr_rkey_t remote_key;
    uct_rc_gdr_ep_lane_t lane;
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    uct_rc_gdr_op_t *op;
    ucs_status_t status;
    size_t length;

    /* The length is known only once packed: the lane of a non-empty put */
    lane = uct_rc_gdr_ep_lane(rkey, 1, SIZE_MAX, &remote_key);
    if (ucs_unlikely(lane == UCT_RC_GDR_EP_LANE_BOUNCE)) {
        /* no NIC key at the target: the bounce lane's messages */
        if (uct_rc_gdr_ep_behind_pending(ep)) {
            return UCS_ERR_NO_RESOURCE;
        }
        return uct_rc_gdr_bounce_put_bcopy(ep, pack_cb, arg, remote_addr,
                                           &remote_key);
    }

    status = uct_rc_gdr_ep_start_op(ep, 0, UCT_RC_GDR_OP_SEND, 1, &op);
    if (status != UCS_OK) {
        return status;
    }

    length = pack_cb(op->buf + 1, arg);
    if (ucs_unlikely(lane == UCT_RC_GDR_EP_LANE_BAD_KEY)) {
        /* zero bytes need no key */
        if (length > 0) {
            uct_rc_gdr_ep_release_op(op);
            return uct_rc_gdr_ep_bad_key(rkey);
        }
        remote_key.rkey  = 0;
        remote_key.flags = 0;
    }

    sge.addr   = (uintptr_t)(op->buf + 1);
    sge.length = length;
    sge.lkey   = op->buf->lkey;
    uct_rc_gdr_ep_wr_rdma(&wr, IBV_WR_RDMA_WRITE, &sge, 1, remote_addr,
                          remote_key.rkey, 0);
    status = uct_rc_gdr_ep_post_op(ep, &wr, op);
    if (status != UCS_OK) {
        return status;
    }

    uct_rc_gdr_ep_flush_note_write(ep, &remote_key, remote_addr, length);
    return (ssize_t)length;
}


ucs_status_t uct_rc_gdr_ep_get_bcopy(uct_ep_h tl_ep,
                                     uct_unpack_callback_t unpack_cb,
                                     void *arg, size_t length,
                                     uint64_t remote_addr, uct_rkey_t rkey,
                                     uct_completion_t *comp)
{
    uct_rc_gdr_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_gdr_ep_t);
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);
    uct_rc_gdr_rkey_t remote_key;
    uct_rc_gdr_ep_lane_t lane;
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    uct_rc_gdr_op_t *op;
    ucs_status_t status;

    if (ucs_unlikely(length > iface->config.seg_size)) {
        ucs_error("rc_gdr: get_bcopy length %zu exceeds max_bcopy %zu",
                  length, iface->config.seg_size);
        return UCS_ERR_INVALID_PARAM;
    }

    lane = uct_rc_gdr_ep_lane(rkey, 0, length, &remote_key);
    if (ucs_unlikely(lane != UCT_RC_GDR_EP_LANE_NIC)) {
        if (lane == UCT_RC_GDR_EP_LANE_BAD_KEY) {
            return uct_rc_gdr_ep_bad_key(rkey);
        }
        /* no NIC key at the target: the bounce lane's messages */
        if (uct_rc_gdr_ep_behind_pending(ep)) {
            return UCS_ERR_NO_RESOURCE;
        }
        return uct_rc_gdr_bounce_get_bcopy(ep, unpack_cb, arg, length,
                                           remote_addr, &remote_key, comp);
    }

    status = uct_rc_gdr_ep_start_op(ep, 0, UCT_RC_GDR_OP_GET_BCOPY, 1, &op);
    if (status != UCS_OK) {
        return status;
    }

    op->comp             = comp;
    op->get_bcopy.cb     = unpack_cb;
    op->get_bcopy.arg    = arg;
    op->get_bcopy.length = length;
    sge.addr             = (uintptr_t)(op->buf + 1);
    sge.length           = length;
    sge.lkey             = op->buf->lkey;
    uct_rc_gdr_ep_wr_rdma(&wr, IBV_WR_RDMA_READ, &sge, 1, remote_addr,
                          remote_key.rkey, 0);
    status = uct_rc_gdr_ep_post_op(ep, &wr, op);
    return (status == UCS_OK) ? UCS_INPROGRESS : status;
}


/* ------------------------------------------------------------------------
 * Active messages: SEND with immediate data, flow-controlled by credits
 * ------------------------------------------------------------------------ */

/* A message sent with UCT_SEND_FLAG_SIGNALED wakes a receiver armed for
 * UCT_EVENT_RECV_SIG: the solicited-event bit of the send. */
static UCS_F_ALWAYS_INLINE int uct_rc_gdr_ep_am_solicited(unsigned flags)
{
    return (flags & UCT_SEND_FLAG_SIGNALED) ? IBV_SEND_SOLICITED : 0;
}


/* Posts a message, with @a op, or without one that nobody waits for */
static UCS_F_ALWAYS_INLINE ucs_status_t
uct_rc_gdr_ep_am_post(uct_rc_gdr_ep_t *ep, uint8_t id, struct ibv_send_wr *wr,
                      uct_rc_gdr_op_t *op)
{
    ucs_status_t status;

    wr->imm_data = uct_rc_gdr_ep_take_imm(ep, id);
    status       = (op == NULL) ? uct_rc_gdr_ep_post_quiet(ep, wr) :
                                  uct_rc_gdr_ep_post_op(ep, wr, op);
    if (status == UCS_OK) {
        --ep->fc_credits;
        /* UCX's AM tracer (uct_iface_set_am_tracer) and data log: compiled
         * out where UCX's logging stops below TRACE_DATA */
        uct_iface_trace_am(&uct_rc_gdr_ep_iface(ep)->super,
                           UCT_AM_TRACE_TYPE_SEND, id,
                           (void*)(uintptr_t)wr->sg_list[0].addr,
                           wr->sg_list[0].length, "rc_gdr: QP 0x%x TX",
                           ep->qp->qp_num);
    }
    return status;
}


static ucs_status_t uct_rc_gdr_ep_am_check(uct_rc_gdr_ep_t *ep, uint8_t id)
{
    if (ucs_unlikely(id >= UCT_AM_ID_MAX)) {
        ucs_error("rc_gdr: invalid active message id %u", id);
        return UCS_ERR_INVALID_PARAM;
    }
    return uct_rc_gdr_ep_check_user_tx(ep, 1);
}


ucs_status_t uct_rc_gdr_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t hdr,
                                    const void *buffer, unsigned length)
{
    uct_rc_gdr_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_gdr_ep_t);
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);
    struct ibv_send_wr wr;
    struct ibv_sge sges[2];
    ucs_status_t status;

    /* max_short counts the header too, as UCT defines it. */
    if (ucs_unlikely(length + sizeof(hdr) > iface->config.max_inline)) {
        ucs_error("rc_gdr: am_short length %zu (header included) exceeds "
                  "max_short %zu", length + sizeof(hdr),
                  iface->config.max_inline);
        return UCS_ERR_INVALID_PARAM;
    }

    status = uct_rc_gdr_ep_am_check(ep, id);
    if (status != UCS_OK) {
        return status;
    }

    sges[0].addr   = (uintptr_t)&hdr;
    sges[0].length = sizeof(hdr);
    sges[0].lkey   = 0;
    sges[1].addr   = (uintptr_t)buffer;
    sges[1].length = length;
    sges[1].lkey   = 0;
    uct_rc_gdr_ep_wr_send(&wr, sges, (length > 0) ? 2 : 1, IBV_SEND_INLINE);
    return uct_rc_gdr_ep_am_post(ep, id, &wr, NULL);
}


ssize_t uct_rc_gdr_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                               uct_pack_callback_t pack_cb, void *arg,
                               unsigned flags)
{
    uct_rc_gdr_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_gdr_ep_t);
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    uct_rc_gdr_op_t *op;
    ucs_status_t status;
    size_t length;

    status = uct_rc_gdr_ep_am_check(ep, id);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_rc_gdr_ep_get_op(ep, UCT_RC_GDR_OP_SEND, 1, &op);
    if (status != UCS_OK) {
        return status;
    }

    length     = pack_cb(op->buf + 1, arg);
    sge.addr   = (uintptr_t)(op->buf + 1);
    sge.length = length;
    sge.lkey   = op->buf->lkey;
    uct_rc_gdr_ep_wr_send(&wr, &sge, 1, uct_rc_gdr_ep_am_solicited(flags));
    status     = uct_rc_gdr_ep_am_post(ep, id, &wr, op);
    return (status == UCS_OK) ? (ssize_t)length : status;
}


/*
 * An am_zcopy with an iov the NIC cannot read: its bytes, and every iov's
 * after the header, are copied into the send buffer, which holds max_zcopy
 * bytes; the message goes out as one entry.
 */
static UCS_F_NOINLINE ucs_status_t
uct_rc_gdr_ep_am_zcopy_stage(uct_rc_gdr_iface_t *iface, void *dest,
                             const uct_iov_t *iov, size_t iovcnt)
{
    ucs_status_t status;
    size_t i, length;

    for (i = 0; i < iovcnt; ++i) {
        length = uct_iov_get_length(&iov[i]);
        if (length == 0) {
            continue;
        }
        if ((iov[i].memh != UCT_MEM_HANDLE_NULL) &&
            (uct_rc_gdr_memh_mr(iov[i].memh)->gpu >= 0)) {
            status = uct_rc_gdr_cuda_memcpy_dtoh(dest, iov[i].buffer, length);
            if (status != UCS_OK) {
                ucs_error("rc_gdr: am_zcopy: copying %zu bytes of GPU memory "
                          "at %p failed: %s", length, iov[i].buffer,
                          ucs_status_string(status));
                return status;
            }
            iface->stats.am_staged_bytes += length;
        } else {
            memcpy(dest, iov[i].buffer, length);
        }
        dest = UCS_PTR_BYTE_OFFSET(dest, length);
    }
    return UCS_OK;
}


ucs_status_t uct_rc_gdr_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id,
                                    const void *header, unsigned header_length,
                                    const uct_iov_t *iov, size_t iovcnt,
                                    unsigned flags, uct_completion_t *comp)
{
    uct_rc_gdr_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_gdr_ep_t);
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);
    struct ibv_sge sges[UCT_RC_GDR_MAX_IOV];
    struct ibv_send_wr wr;
    uct_rc_gdr_op_t *op;
    ucs_status_t status;
    size_t length;
    int num_sge, unreadable;

    if (ucs_unlikely(header_length > UCT_RC_GDR_AM_MAX_HDR)) {
        ucs_error("rc_gdr: am_zcopy header length %u exceeds max_hdr %d",
                  header_length, UCT_RC_GDR_AM_MAX_HDR);
        return UCS_ERR_INVALID_PARAM;
    }

    if (ucs_unlikely(iovcnt + 1 > iface->config.max_send_sge)) {
        ucs_error("rc_gdr: am_zcopy with %zu iov entries, at most %u",
                  iovcnt, iface->config.max_send_sge - 1);
        return UCS_ERR_INVALID_PARAM;
    }

    status = uct_rc_gdr_ep_am_check(ep, id);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_rc_gdr_ep_get_op(ep, UCT_RC_GDR_OP_SEND, 1, &op);
    if (status != UCS_OK) {
        return status;
    }

    memcpy(op->buf + 1, header, header_length);
    sges[0].addr   = (uintptr_t)(op->buf + 1);
    sges[0].length = header_length;
    sges[0].lkey   = op->buf->lkey;
    length         = uct_rc_gdr_ep_fill_sges(uct_rc_gdr_ep_md(ep), sges + 1,
                                             iov, iovcnt, &num_sge,
                                             &unreadable);
    if (ucs_unlikely(header_length + length > iface->config.seg_size)) {
        ucs_error("rc_gdr: am_zcopy length %zu exceeds max_zcopy %zu",
                  header_length + length, iface->config.seg_size);
        uct_rc_gdr_ep_release_op(op);
        return UCS_ERR_INVALID_PARAM;
    }

    if (ucs_unlikely(unreadable)) {
        status = uct_rc_gdr_ep_am_zcopy_stage(
                iface, UCS_PTR_BYTE_OFFSET(op->buf + 1, header_length), iov,
                iovcnt);
        if (status != UCS_OK) {
            uct_rc_gdr_ep_release_op(op);
            return status;
        }
        sges[0].length = header_length + length;
        num_sge        = 0;
    }

    op->comp   = comp;
    uct_rc_gdr_ep_wr_send(&wr, sges, num_sge + 1,
                          uct_rc_gdr_ep_am_solicited(flags));
    status     = uct_rc_gdr_ep_am_post(ep, id, &wr, op);
    return (status == UCS_OK) ? UCS_INPROGRESS : status;
}


/* The endpoint has something to do once resources come back. */
static void uct_rc_gdr_ep_mark_busy(uct_rc_gdr_ep_t *ep)
{
    if (!(ep->flags & UCT_RC_GDR_EP_FLAG_BUSY)) {
        ep->flags |= UCT_RC_GDR_EP_FLAG_BUSY;
        ucs_list_add_tail(&uct_rc_gdr_ep_iface(ep)->busy_eps, &ep->busy_link);
    }
}


static void uct_rc_gdr_ep_mark_idle(uct_rc_gdr_ep_t *ep)
{
    if (ep->flags & UCT_RC_GDR_EP_FLAG_BUSY) {
        ep->flags &= ~UCT_RC_GDR_EP_FLAG_BUSY;
        ucs_list_del(&ep->busy_link);
    }
}


/* Returns the credits we owe in a message of its own once they reach
 * credits_due (the iface's fc_grant_now or fc_grant_idle). Fewer, but half
 * a window or more, keep the endpoint busy: a reply of the user's may carry
 * them first, or progress sends them when the receive queue is idle. */
void uct_rc_gdr_ep_grant_credits(uct_rc_gdr_ep_t *ep, unsigned credits_due)
{
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);
    uct_rc_gdr_op_t *op;

    if (ep->flags & UCT_RC_GDR_EP_FLAG_DESTROYED) {
        return;
    }

    if (ep->fc_to_return < credits_due) {
        if (ep->fc_to_return >= iface->config.fc_grant_idle) {
            uct_rc_gdr_ep_mark_busy(ep);
        }
        return;
    }

    if (uct_rc_gdr_ep_start_internal_op(ep, UCT_RC_GDR_OP_SEND, 0, &op) !=
        UCS_OK) {
        uct_rc_gdr_ep_mark_busy(ep); /* retried when resources return */
        return;
    }

    if (uct_rc_gdr_ep_post_credit(ep, op) == UCS_OK) {
        ++iface->stats.credit_grants;
    }
}


/* A peer returns at most what we sent: more is a protocol error, capped so
 * that the count never overflows and never lets us send past its window */
void uct_rc_gdr_ep_recv_credits(uct_rc_gdr_ep_t *ep, unsigned credits)
{
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);
    int room                  = (int)iface->config.fc_wnd_size -
                                ep->fc_credits;

    if (ucs_unlikely((int)credits > room)) {
        if (iface->stats.credit_overflows++ == 0) {
            ucs_error("rc_gdr: QP 0x%x: peer returned %u credits, %d were "
                      "owed: capped (protocol error, counted)",
                      ep->qp->qp_num, credits, ucs_max(room, 0));
        }
        credits = ucs_max(room, 0);
    }
    ep->fc_credits += credits;
}


/* ------------------------------------------------------------------------
 * Atomics (64-bit: what plain verbs offers)
 * ------------------------------------------------------------------------ */

static ucs_status_t uct_rc_gdr_ep_atomic(uct_rc_gdr_ep_t *ep,
                                         enum ibv_wr_opcode opcode,
                                         uint64_t compare_add, uint64_t swap,
                                         uint64_t remote_addr, uct_rkey_t rkey,
                                         uint64_t *result,
                                         uct_completion_t *comp)
{
    uct_rc_gdr_rkey_t remote_key;
    uct_rc_gdr_ep_lane_t lane;
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    uct_rc_gdr_op_t *op;
    ucs_status_t status;

    if (ucs_unlikely(remote_addr % sizeof(uint64_t))) {
        ucs_error("rc_gdr: atomic on unaligned remote address 0x%" PRIx64,
                  remote_addr);
        return UCS_ERR_INVALID_PARAM;
    }

    /* An atomic reads and writes: both must be the NIC's to do; the bounce
     * lane has none. */
    lane = uct_rc_gdr_ep_lane(rkey, 1, sizeof(uint64_t), &remote_key);
    if (ucs_unlikely(lane == UCT_RC_GDR_EP_LANE_BAD_KEY)) {
        return uct_rc_gdr_ep_bad_key(rkey);
    } else if (ucs_unlikely((lane == UCT_RC_GDR_EP_LANE_BOUNCE) ||
                            !uct_rc_gdr_rkey_nic_allows(&remote_key, 0))) {
        return UCS_ERR_UNSUPPORTED;
    }

    status = uct_rc_gdr_ep_start_op(ep, 0, (result == NULL) ?
                                    UCT_RC_GDR_OP_SEND : UCT_RC_GDR_OP_ATOMIC,
                                    1, &op);
    if (status != UCS_OK) {
        return status;
    }

    op->comp                = comp;
    op->atomic.result       = result;
    op->atomic.size         = sizeof(uint64_t);
    sge.addr                = (uintptr_t)(op->buf + 1);
    sge.length              = sizeof(uint64_t);
    sge.lkey                = op->buf->lkey;
    wr.opcode                = opcode;
    wr.sg_list               = &sge;
    wr.num_sge               = 1;
    wr.send_flags            = 0;
    wr.wr.atomic.remote_addr = remote_addr;
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap        = swap;
    wr.wr.atomic.rkey        = remote_key.rkey;
    status = uct_rc_gdr_ep_post_op(ep, &wr, op);
    if (status != UCS_OK) {
        return status;
    }

    uct_rc_gdr_ep_flush_note_write(ep, &remote_key, remote_addr,
                                   sizeof(uint64_t));
    return (result == NULL) ? UCS_OK : UCS_INPROGRESS;
}


ucs_status_t uct_rc_gdr_ep_atomic_cswap64(uct_ep_h tl_ep, uint64_t compare,
                                          uint64_t swap, uint64_t remote_addr,
                                          uct_rkey_t rkey, uint64_t *result,
                                          uct_completion_t *comp)
{
    return uct_rc_gdr_ep_atomic(ucs_derived_of(tl_ep, uct_rc_gdr_ep_t),
                                IBV_WR_ATOMIC_CMP_AND_SWP, compare, swap,
                                remote_addr, rkey, result, comp);
}


ucs_status_t uct_rc_gdr_ep_atomic64_post(uct_ep_h tl_ep, unsigned opcode,
                                         uint64_t value, uint64_t remote_addr,
                                         uct_rkey_t rkey)
{
    if (opcode != UCT_ATOMIC_OP_ADD) {
        return UCS_ERR_UNSUPPORTED;
    }

    return uct_rc_gdr_ep_atomic(ucs_derived_of(tl_ep, uct_rc_gdr_ep_t),
                                IBV_WR_ATOMIC_FETCH_AND_ADD, value, 0,
                                remote_addr, rkey, NULL, NULL);
}


ucs_status_t uct_rc_gdr_ep_atomic64_fetch(uct_ep_h tl_ep,
                                          uct_atomic_op_t opcode,
                                          uint64_t value, uint64_t *result,
                                          uint64_t remote_addr,
                                          uct_rkey_t rkey,
                                          uct_completion_t *comp)
{
    if ((opcode != UCT_ATOMIC_OP_ADD) || (result == NULL)) {
        return UCS_ERR_UNSUPPORTED;
    }

    return uct_rc_gdr_ep_atomic(ucs_derived_of(tl_ep, uct_rc_gdr_ep_t),
                                IBV_WR_ATOMIC_FETCH_AND_ADD, value, 0,
                                remote_addr, rkey, result, comp);
}


/* ------------------------------------------------------------------------
 * Completion and failure
 * ------------------------------------------------------------------------ */

static ucs_status_t uct_rc_gdr_ep_wc_status(enum ibv_wc_status wc_status)
{
    switch (wc_status) {
    case IBV_WC_SUCCESS:
        return UCS_OK;
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
        return UCS_ERR_ENDPOINT_TIMEOUT;
    case IBV_WC_WR_FLUSH_ERR:
        return UCS_ERR_CANCELED;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
        return UCS_ERR_INVALID_ADDR;
    default:
        return UCS_ERR_IO_ERROR;
    }
}


static void uct_rc_gdr_ep_set_failed(uct_rc_gdr_ep_t *ep, ucs_status_t status)
{
    if (ep->flags & UCT_RC_GDR_EP_FLAG_FAILED) {
        return;
    }

    ep->flags  |= UCT_RC_GDR_EP_FLAG_FAILED;
    ep->status  = status;
}


static UCS_F_ALWAYS_INLINE void
uct_rc_gdr_ep_complete_op(uct_rc_gdr_ep_t *ep, uct_rc_gdr_op_t *op,
                          ucs_status_t status)
{
    if (!(ep->flags & UCT_RC_GDR_EP_FLAG_DESTROYED)) {
        if (status == UCS_OK) {
            if (op->type == UCT_RC_GDR_OP_GET_BCOPY) {
                op->get_bcopy.cb(op->get_bcopy.arg, op->buf + 1,
                                 op->get_bcopy.length);
            } else if (op->type == UCT_RC_GDR_OP_ATOMIC) {
                memcpy(op->atomic.result, op->buf + 1, op->atomic.size);
            }
        }

        if (op->comp != NULL) {
            uct_invoke_completion(op->comp, status);
        }
    }

    uct_rc_gdr_ep_release_op(op);
}


/*
 * A completion retires every work request up to its own (RC executes a
 * queue pair's sends in order): those without a descriptor are only
 * counted, those with one complete in posting order, and so do the flushes
 * queued among them. Its sequence number is its descriptor's, or in its
 * wr_id when it has none (an error completion, which verbs reports even
 * for an unsignaled request). An error fails that request and, through the
 * endpoint's status, those after it.
 */
void uct_rc_gdr_ep_send_completion(uct_rc_gdr_ep_t *ep, struct ibv_wc *wc)
{
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);
    uint32_t seq, count;
    unsigned signaled;
    ucs_status_t status;
    uct_rc_gdr_op_t *op;

    if (ucs_unlikely(wc->status != IBV_WC_SUCCESS)) {
        status = uct_rc_gdr_ep_wc_status(wc->status);
        if (!(ep->flags & UCT_RC_GDR_EP_FLAG_FAILED) &&
            (wc->status != IBV_WC_WR_FLUSH_ERR)) {
            ucs_error("rc_gdr: QP 0x%x: %s (vendor error 0x%x): %s",
                      wc->qp_num, ibv_wc_status_str(wc->status),
                      wc->vendor_err, ucs_status_string(status));
        }
        uct_rc_gdr_ep_set_failed(ep, status);
    }

    if (wc->wr_id & UCT_RC_GDR_WR_ID_BARE) {
        seq      = (uint32_t)(wc->wr_id >> 1);
        signaled = 0;
    } else {
        op       = (uct_rc_gdr_op_t*)wc->wr_id;
        seq      = op->seq;
        signaled = op->signaled; /* if not, an error completion */
    }
    count = seq - ep->tx_retired;
    if (ucs_unlikely((count == 0) || (count > uct_rc_gdr_ep_in_flight(ep)))) {
        ucs_error("rc_gdr: completion on QP 0x%x (wr_id 0x%" PRIx64 ") "
                  "matches no posted request", wc->qp_num,
                  (uint64_t)wc->wr_id);
        return;
    }

    /* Room first: a callback below may post again. A callback may also
     * destroy the endpoint, which then waits for the loop's end. */
    iface->tx_signaled  -= signaled;
    ++ep->tx_done;
    ep->tx_retired       = seq;
    ep->sq_avail        += count;
    iface->tx_cq_avail  += count;
    ep->flags           |= UCT_RC_GDR_EP_FLAG_COMPLETING;
    while (!ucs_queue_is_empty(&ep->outstanding)) {
        op = ucs_queue_head_elem_non_empty(&ep->outstanding, uct_rc_gdr_op_t,
                                           queue);
        if ((int32_t)(op->seq - seq) > 0) {
            break; /* posted after it */
        }
        ucs_queue_pull_non_empty(&ep->outstanding);
        uct_rc_gdr_ep_complete_op(ep, op,
                                  (ep->flags & UCT_RC_GDR_EP_FLAG_FAILED) ?
                                  ep->status : UCS_OK);
    }
    ep->flags &= ~UCT_RC_GDR_EP_FLAG_COMPLETING;

    if (ucs_likely(!(ep->flags & (UCT_RC_GDR_EP_FLAG_DESTROYED |
                                  UCT_RC_GDR_EP_FLAG_FAILED)))) {
        return;
    }

    if (ep->flags & UCT_RC_GDR_EP_FLAG_DESTROYED) {
        if (uct_rc_gdr_ep_in_flight(ep) == 0) {
            uct_rc_gdr_ep_free_zombie(ep);
        }
        return;
    }

    if ((ep->flags & UCT_RC_GDR_EP_FLAG_FAILED) &&
        !(ep->flags & UCT_RC_GDR_EP_FLAG_ERR_RAISED)) {
        /* Last: the user's handler may destroy the endpoint. */
        ep->flags |= UCT_RC_GDR_EP_FLAG_ERR_RAISED;
        uct_iface_handle_ep_err(&iface->super.super, &ep->super.super,
                                ep->status);
    }
}


static void uct_rc_gdr_ep_move_to_error(uct_rc_gdr_ep_t *ep)
{
    struct ibv_qp_attr attr;
    int ret;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_ERR;
    ret = ibv_modify_qp(ep->qp, &attr, IBV_QP_STATE);
    if (ret != 0) {
        ucs_warn("rc_gdr: QP 0x%x: moving to error state failed: %s",
                 ep->qp->qp_num, strerror(ret));
    }
}


/*
 * Fails the endpoint with reason now: its QP goes to the error state, and a
 * work request posted there completes at once with a flush error, which
 * retires every request before it and raises the error from the progress
 * context. Requests the NIC finished whose completions never came (a CQ
 * overrun lost them) report nothing else, ever. Without room for one, the
 * requests in flight are still on the QP and their flush completions do the
 * same. Returns UCS_ERR_NO_RESOURCE, changing nothing, when there is neither
 * (the caller progresses and tries again).
 */
static ucs_status_t uct_rc_gdr_ep_fail(uct_rc_gdr_ep_t *ep,
                                       ucs_status_t reason)
{
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);
    uct_rc_gdr_op_t *op       = NULL;

    if ((ep->sq_avail == 0) || (iface->tx_cq_avail == 0) ||
        (uct_rc_gdr_ep_get_op(ep, UCT_RC_GDR_OP_SEND, 0, &op) != UCS_OK)) {
        op = NULL;
        if (uct_rc_gdr_ep_in_flight(ep) == 0) {
            return UCS_ERR_NO_RESOURCE; /* after progress frees the queue */
        }
    }

    uct_rc_gdr_ep_move_to_error(ep);
    uct_rc_gdr_ep_set_failed(ep, reason);
    return (op != NULL) ? uct_rc_gdr_ep_post_credit(ep, op) : UCS_OK;
}


/*
 * One sweep of the stall check (rc_gdr_iface.c). An endpoint stalls when a
 * signaled request is in flight and nothing completed since the last
 * sweep; after max_sweeps such sweeps in a row it fails with
 * UCS_ERR_ENDPOINT_TIMEOUT (uct_rc_gdr_ep_fail): its QP goes to the error
 * state, whose flush completions finish every request and raise the error,
 * even when the completions of the requests in flight were lost (a CQ
 * overrun). The NIC finishes every request within its retry timeout, so
 * this fires only when that timeout did not (rxe with RETRY_COUNT=7, a
 * lost retry timer, lost completions). SENDs
 * are no exception: to a dead peer they wait on that same timer (UCX's
 * test_uct_peer_failure_multiple hung in a flush whose credit and flush
 * messages went to QPs in error). The cost: a SEND that waits this long in
 * RNR retries, for a peer that posts no receive buffers, fails too.
 * Unsignaled requests alone report nothing, done or not (a SEND of UCP's
 * eager protocol in RNR retries forever, with no error handling asked for,
 * waited silently): after a sweep in which none completed, a signaled
 * credit-only message goes behind them; its completion retires them, or
 * this check fails the endpoint when it too never comes. An idle endpoint
 * pays that one message, once.
 * Returns whether the endpoint was failed.
 */
int uct_rc_gdr_ep_check_stall(uct_rc_gdr_ep_t *ep, unsigned max_sweeps)
{
    if ((ep->flags & UCT_RC_GDR_EP_FLAG_FAILED) ||
        (uct_rc_gdr_ep_in_flight(ep) == 0) || (ep->tx_done != ep->stall_seen)) {
        ep->stall_seen   = ep->tx_done;
        ep->stall_sweeps = 0;
        return 0;
    }

    if (uct_rc_gdr_ep_in_flight(ep) <= ep->unsignaled) {
        /* a destroyed endpoint's QP is in error: its flush reports all */
        if (!(ep->flags & UCT_RC_GDR_EP_FLAG_DESTROYED)) {
            uct_rc_gdr_ep_probe(ep); /* without room: the next sweep */
        }
        ep->stall_sweeps = 0;
        return 0;
    }

    if (++ep->stall_sweeps < max_sweeps) {
        return 0;
    }

    /* An error, as the transport's own timeout reports it (and UCX's tests
     * take an endpoint failure's error, not a warning). */
    ucs_error("rc_gdr: QP 0x%x: none of %u work requests in flight "
              "completed within UCX_RC_GDR_TX_STALL_TIMEOUT, and the "
              "transport's own retry timeout did not report: endpoint failed",
              ep->qp->qp_num, uct_rc_gdr_ep_in_flight(ep));
    uct_rc_gdr_ep_fail(ep, UCS_ERR_ENDPOINT_TIMEOUT);
    return 1;
}


void uct_rc_gdr_ep_log_state(uct_rc_gdr_ep_t *ep)
{
    static const char *qp_states[] = {
        [IBV_QPS_RESET] = "RESET", [IBV_QPS_INIT] = "INIT",
        [IBV_QPS_RTR]   = "RTR",   [IBV_QPS_RTS]  = "RTS",
        [IBV_QPS_SQD]   = "SQD",   [IBV_QPS_SQE]  = "SQE",
        [IBV_QPS_ERR]   = "ERR"
    };
    struct ibv_qp_init_attr init_attr;
    struct ibv_qp_attr attr;
    int ret;

    memset(&attr, 0, sizeof(attr));
    ret = ibv_query_qp(ep->qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN |
                       IBV_QP_RQ_PSN, &init_attr);
    ucs_warn("rc_gdr: QP 0x%x -> 0x%x: flags 0x%x fc_credits %d "
             "fc_to_return %u pending %zu outstanding %u unsignaled %u "
             "sq_avail %u tx_done %u stall_sweeps %u status %s; QP %s%s "
             "sq_psn 0x%x rq_psn 0x%x", ep->qp->qp_num, ep->peer.qp_num,
             ep->flags, ep->fc_credits, ep->fc_to_return,
             ucs_queue_length(&ep->pending), uct_rc_gdr_ep_in_flight(ep),
             ep->unsignaled, ep->sq_avail, ep->tx_done, ep->stall_sweeps,
             ucs_status_string(ep->status),
             (ret == 0) ? "state " : "not queried: ",
             (ret != 0) ? strerror(ret) :
             (attr.qp_state <= IBV_QPS_ERR) ? qp_states[attr.qp_state] : "?",
             attr.sq_psn, attr.rq_psn);
}


/* ------------------------------------------------------------------------
 * Flush, fence, pending, check
 * ------------------------------------------------------------------------ */

/* A credit-only message posted to report a completion. */
static ucs_status_t uct_rc_gdr_ep_post_signaled_nop(uct_rc_gdr_ep_t *ep)
{
    uct_rc_gdr_op_t *op;
    ucs_status_t status;

    status = uct_rc_gdr_ep_start_internal_op(ep, UCT_RC_GDR_OP_SEND, 0, &op);
    if (status != UCS_OK) {
        return status;
    }

    op->signaled = 1;
    return uct_rc_gdr_ep_post_credit(ep, op);
}


/*
 * flush(CANCEL): every posted work request completes now, with a flush error.
 * Requests the NIC already finished unsignaled report nothing, even in the
 * error state: a signaled one is posted last, before the queue pair goes to
 * error, so that its flush completion retires them all. Without room for it
 * nothing changes (UCS_ERR_NO_RESOURCE): the caller progresses and retries.
 */
static ucs_status_t uct_rc_gdr_ep_cancel(uct_rc_gdr_ep_t *ep)
{
    ucs_status_t status;

    /* Nothing written is promised any more: no read. */
    ep->flags &= ~(UCT_RC_GDR_EP_FLAG_FLUSH_READ | UCT_RC_GDR_EP_FLAG_WRITTEN);
    if ((uct_rc_gdr_ep_in_flight(ep) == 0) ||
        (ep->flags & UCT_RC_GDR_EP_FLAG_FAILED)) {
        return UCS_OK;
    }

    if (ep->unsignaled > 0) {
        status = uct_rc_gdr_ep_post_signaled_nop(ep);
        if (status != UCS_OK) {
            return status;
        }
    }

    uct_rc_gdr_ep_move_to_error(ep);
    uct_rc_gdr_ep_set_failed(ep, UCS_ERR_CANCELED);
    ep->flags |= UCT_RC_GDR_EP_FLAG_ERR_RAISED; /* the user asked */
    return UCS_OK;
}


/* Whether this flush must post a read first (rc_gdr_flush.h). */
static int uct_rc_gdr_ep_flush_wants_read(uct_rc_gdr_ep_t *ep, unsigned flags)
{
    if (ep->flags & UCT_RC_GDR_EP_FLAG_FAILED) {
        return 0; /* its flush ends with the error, no read */
    }

#if UCT_RC_GDR_HAVE_FLUSH_REMOTE
    if ((flags & UCT_FLUSH_FLAG_REMOTE) &&
        (ep->flags & UCT_RC_GDR_EP_FLAG_WRITTEN)) {
        return 1;
    }
#endif

    return !!(ep->flags & UCT_RC_GDR_EP_FLAG_FLUSH_READ);
}


/* One signaled RDMA READ of the last written target into a transmit buffer:
 * RC executes it after the writes posted before it, and the PCIe read of the
 * target memory completes only after those writes were placed there. */
static ucs_status_t uct_rc_gdr_ep_flush_post_read(uct_rc_gdr_ep_t *ep)
{
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);
    struct ibv_send_wr wr;
    struct ibv_sge sge;
    uct_rc_gdr_op_t *op;
    ucs_status_t status;

    status = uct_rc_gdr_ep_start_internal_op(ep, UCT_RC_GDR_OP_FLUSH_READ, 1,
                                             &op);
    if (status != UCS_OK) {
        return status;
    }

    sge.addr   = (uintptr_t)(op->buf + 1);
    sge.length = ep->flush.length;
    sge.lkey   = op->buf->lkey;
    uct_rc_gdr_ep_wr_rdma(&wr, IBV_WR_RDMA_READ, &sge, 1,
                          ep->flush.remote_addr, ep->flush.rkey, 0);
    status = uct_rc_gdr_ep_post_op(ep, &wr, op);
    if (status != UCS_OK) {
        return status;
    }

    ep->flags &= ~(UCT_RC_GDR_EP_FLAG_FLUSH_READ | UCT_RC_GDR_EP_FLAG_WRITTEN);
    ++iface->stats.flush_reads;
    return UCS_OK;
}


/*
 * Completes when every operation posted before it has, and, when writes
 * since the last flush need it, after one RDMA READ posted here (whatever
 * the flags: UCP flushes with LOCAL); on an endpoint with bounce transfers
 * in progress, also after those started before it (the bounce lane adds its
 * part: uct_rc_gdr_bounce_ep_flush). Without the resources for the read the
 * flush returns NO_RESOURCE, changes nothing, and is retried by the caller.
 */
ucs_status_t uct_rc_gdr_ep_flush(uct_ep_h tl_ep, unsigned flags,
                                 uct_completion_t *comp)
{
    uct_rc_gdr_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_gdr_ep_t);
    uct_rc_gdr_op_t *op = NULL;
    ucs_status_t status;
    int read, bounce;

    if (flags & UCT_FLUSH_FLAG_CANCEL) {
        status = uct_rc_gdr_ep_cancel(ep);
        if (status != UCS_OK) {
            return status;
        }
    }

    read   = uct_rc_gdr_ep_flush_wants_read(ep, flags);
    bounce = ucs_unlikely(ep->bounce != NULL) &&
             uct_rc_gdr_bounce_ep_busy(ep);
    if ((uct_rc_gdr_ep_in_flight(ep) == 0) && !read && !bounce) {
        return UCS_OK;
    }

    if (!read && (ep->unsignaled > 0) &&
        !(ep->flags & UCT_RC_GDR_EP_FLAG_FAILED)) {
        /* The last requests do not report: one that does retires them. */
        status = uct_rc_gdr_ep_post_signaled_nop(ep);
        if (status != UCS_OK) {
            return status;
        }
    }

    if (!(flags & UCT_FLUSH_FLAG_CANCEL) && !ucs_queue_is_empty(&ep->pending)) {
        return UCS_ERR_NO_RESOURCE;
    }

    if (comp != NULL) {
        status = uct_rc_gdr_ep_get_op(ep, UCT_RC_GDR_OP_FLUSH, 0, &op);
        if (status != UCS_OK) {
            return status;
        }
    }

    if (read) {
        status = uct_rc_gdr_ep_flush_post_read(ep);
        if (status != UCS_OK) {
            if (op != NULL) {
                uct_rc_gdr_ep_release_op(op);
            }
            return status;
        }
    }

    if (op == NULL) {
        return UCS_INPROGRESS; /* the caller flushes again */
    }

    if (ucs_unlikely(bounce)) {
        /* The completion that waits for the bounce transfers too, and then
         * completes the user's. Should it fail, a read posted above stays
         * queued: the next flush waits for it all the same. */
        status = uct_rc_gdr_bounce_ep_flush(ep, uct_rc_gdr_ep_in_flight(ep) > 0,
                                            &comp);
        if (status != UCS_OK) {
            uct_rc_gdr_ep_release_op(op);
            return status;
        }
        op->internal = 1;
        if (uct_rc_gdr_ep_in_flight(ep) == 0) {
            uct_rc_gdr_ep_release_op(op); /* the bounce part alone */
            return UCS_INPROGRESS;
        }
    }

    op->comp = comp;
    op->seq  = ep->tx_posted; /* completes when all before it are retired */
    ucs_queue_push(&ep->outstanding, &op->queue);
    return UCS_INPROGRESS;
}


/*
 * Operations after the fence are ordered after those before it. When writes
 * into memory that needs a read-flush came before, the read is posted here
 * and the next work request carries IBV_SEND_FENCE, so it waits for the
 * read: UCP's rendezvous (puts, fence, then the "done" message) then tells
 * the target only once the data is visible there.
 */
ucs_status_t uct_rc_gdr_ep_fence(uct_ep_h tl_ep, unsigned flags)
{
    uct_rc_gdr_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_gdr_ep_t);
    ucs_status_t status;

    if (uct_rc_gdr_ep_flush_wants_read(ep, 0)) {
        status = uct_rc_gdr_ep_flush_post_read(ep);
        if (status != UCS_OK) {
            return status; /* nothing changed: the caller retries */
        }
    }

    ep->flags |= UCT_RC_GDR_EP_FLAG_FENCE;
    return UCS_OK;
}


ucs_status_t uct_rc_gdr_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req,
                                       unsigned flags)
{
    uct_rc_gdr_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_gdr_ep_t);

    /* BUSY only when the operation would now succeed: with requests queued
     * it would not (its turn has not come), and a caller that retries on
     * BUSY would spin. */
    if ((uct_rc_gdr_ep_check_user_tx(ep, 1) == UCS_OK) &&
        !uct_rc_gdr_bounce_ep_blocked(ep)) {
        return UCS_ERR_BUSY;
    }

    ucs_queue_push(&ep->pending, uct_pending_req_priv_queue_elem(req));
    uct_rc_gdr_ep_mark_busy(ep);
    return UCS_OK;
}


void uct_rc_gdr_ep_pending_purge(uct_ep_h tl_ep,
                                 uct_pending_purge_callback_t cb, void *arg)
{
    uct_rc_gdr_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_gdr_ep_t);
    uct_pending_req_priv_queue_t *priv;

    while (!ucs_queue_is_empty(&ep->pending)) {
        priv = ucs_queue_pull_elem_non_empty(&ep->pending,
                                             uct_pending_req_priv_queue_t,
                                             queue_elem);
        if (cb != NULL) {
            cb(ucs_container_of(priv, uct_pending_req_t, priv), arg);
        }
    }
}


/*
 * Each request leaves the queue before its callback runs: the callback may
 * free it, add it again, or add others, here or on another endpoint (UCT
 * allows all of these; UCP's rendezvous does them). Only a request that is
 * not done (UCS_INPROGRESS, or no resources) goes back to the head. While a
 * callback runs, its operations may pass the requests queued behind it.
 */
void uct_rc_gdr_ep_dispatch_pending(uct_rc_gdr_ep_t *ep, unsigned credits_due)
{
    uct_pending_req_priv_queue_t *priv;
    uct_pending_req_t *req;
    ucs_status_t status;

    uct_rc_gdr_ep_grant_credits(ep, credits_due);

    while (!ucs_queue_is_empty(&ep->pending) &&
           (uct_rc_gdr_ep_check_tx(ep, 0) == UCS_OK)) {
        priv       = ucs_queue_pull_elem_non_empty(&ep->pending,
                                                   uct_pending_req_priv_queue_t,
                                                   queue_elem);
        req        = ucs_container_of(priv, uct_pending_req_t, priv);
        ep->flags |= UCT_RC_GDR_EP_FLAG_DISPATCH;
        status     = req->func(req);
        ep->flags &= ~UCT_RC_GDR_EP_FLAG_DISPATCH;
        if (status != UCS_OK) {
            /* UCS_INPROGRESS: partly done, stays first; else no resources */
            ucs_queue_push_head(&ep->pending, &priv->queue_elem);
            break;
        }
    }

    if (!ucs_queue_is_empty(&ep->pending) ||
        (ep->fc_to_return >= uct_rc_gdr_ep_iface(ep)->config.fc_grant_idle)) {
        uct_rc_gdr_ep_mark_busy(ep);
    } else {
        uct_rc_gdr_ep_mark_idle(ep);
    }
}


/* Keepalive (rc_gdr_ep.inl, uct_rc_gdr_ep_probe) */
ucs_status_t uct_rc_gdr_ep_check(uct_ep_h tl_ep, unsigned flags,
                                 uct_completion_t *comp)
{
    return uct_rc_gdr_ep_probe(ucs_derived_of(tl_ep, uct_rc_gdr_ep_t));
}


ucs_status_t uct_rc_gdr_ep_invalidate(uct_ep_h tl_ep, unsigned flags)
{
    uct_rc_gdr_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_gdr_ep_t);

    if (ep->flags & UCT_RC_GDR_EP_FLAG_FAILED) {
        return UCS_OK;
    }

    /* The error comes from the progress context, through a flush
     * completion (uct_rc_gdr_ep_fail); a post without room would overrun
     * the completion queue, so then the requests in flight carry it. */
    return uct_rc_gdr_ep_fail(ep, UCS_ERR_ENDPOINT_TIMEOUT);
}


/* ------------------------------------------------------------------------
 * Connection
 * ------------------------------------------------------------------------ */

ucs_status_t uct_rc_gdr_ep_get_address(uct_ep_h tl_ep, uct_ep_addr_t *addr)
{
    uct_rc_gdr_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_gdr_ep_t);
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);
    uct_rc_gdr_ep_addr_t ep_addr;

    ep_addr.qp_num   = ep->qp->qp_num;
    ep_addr.path_mtu = iface->port_attr.active_mtu;
    ep_addr.flags    = 0;
    uct_rc_gdr_ep_addr_pack(&ep_addr, addr);
    return UCS_OK;
}


ucs_status_t uct_rc_gdr_ep_connect_to_ep(uct_ep_h tl_ep,
                                         const uct_device_addr_t *dev_addr,
                                         const uct_ep_addr_t *ep_addr)
{
    /* UCX before 1.16 passes no lengths: the sizes this transport packs */
    return uct_rc_gdr_ep_connect_to_ep_len(tl_ep, dev_addr,
                                           uct_rc_gdr_dev_addr_size(),
                                           ep_addr,
                                           uct_rc_gdr_ep_addr_size());
}


ucs_status_t uct_rc_gdr_ep_connect_to_ep_len(uct_ep_h tl_ep,
                                             const uct_device_addr_t *dev_addr,
                                             size_t dev_addr_length,
                                             const uct_ep_addr_t *ep_addr,
                                             size_t ep_addr_length)
{
    uct_rc_gdr_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_gdr_ep_t);
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);
    uct_rc_gdr_dev_addr_t remote_dev;
    uct_rc_gdr_ep_addr_t remote_ep;
    struct ibv_qp_attr attr;
    ucs_status_t status;
    int ret;

    /* The unpackers read no byte past the lengths: a truncated address is
     * refused by its length before its checksum is computed */
    status = uct_rc_gdr_dev_addr_unpack(dev_addr, dev_addr_length,
                                        &remote_dev);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_rc_gdr_ep_addr_unpack(ep_addr, ep_addr_length,
                                       &remote_ep);
    if (status != UCS_OK) {
        return status;
    }

    if (remote_dev.is_roce != iface->is_roce) {
        ucs_error("rc_gdr: peer link layer differs from %s:%u",
                  ibv_get_device_name(iface->send_cq->context->device),
                  iface->port_num);
        return UCS_ERR_UNREACHABLE;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state              = IBV_QPS_RTR;
    attr.path_mtu              = ucs_min(iface->port_attr.active_mtu,
                                         (enum ibv_mtu)remote_ep.path_mtu);
    attr.dest_qp_num           = remote_ep.qp_num;
    attr.rq_psn                = 0;
    attr.max_dest_rd_atomic    = iface->config.max_rd_atomic;
    attr.min_rnr_timer         = UCT_RC_GDR_MIN_RNR_TIMER;
    attr.ah_attr.port_num      = iface->port_num;
    attr.ah_attr.dlid          = remote_dev.lid;
    if (iface->is_roce) {
        attr.ah_attr.is_global         = 1;
        attr.ah_attr.grh.sgid_index    = iface->gid_index;
        attr.ah_attr.grh.hop_limit     = UCT_RC_GDR_HOP_LIMIT;
        memcpy(attr.ah_attr.grh.dgid.raw, remote_dev.gid,
               sizeof(remote_dev.gid));
    }

    ret = ibv_modify_qp(ep->qp, &attr,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                        IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (ret != 0) {
        ucs_error("rc_gdr: QP 0x%x to RTR (peer QP 0x%x) failed: %s",
                  ep->qp->qp_num, remote_ep.qp_num, strerror(ret));
        return UCS_ERR_IO_ERROR;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.sq_psn        = 0;
    attr.timeout       = iface->config.timeout_exp;
    attr.retry_cnt     = iface->config.retry_count;
    attr.rnr_retry     = UCT_RC_GDR_RNR_RETRY_INF;
    attr.max_rd_atomic = iface->config.max_rd_atomic;
    ret = ibv_modify_qp(ep->qp, &attr,
                        IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                        IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_MAX_QP_RD_ATOMIC);
    if (ret != 0) {
        ucs_error("rc_gdr: QP 0x%x to RTS failed: %s", ep->qp->qp_num,
                  strerror(ret));
        return UCS_ERR_IO_ERROR;
    }

    ep->flags       |= UCT_RC_GDR_EP_FLAG_CONNECTED;
    ep->peer.qp_num  = remote_ep.qp_num;
    ep->peer.dev     = remote_dev;
    ucs_debug("rc_gdr: QP 0x%x connected to QP 0x%x", ep->qp->qp_num,
              remote_ep.qp_num);
    return UCS_OK;
}


int uct_rc_gdr_ep_is_connected_to(uct_ep_h tl_ep,
                                  const uct_device_addr_t *dev_addr,
                                  const uct_ep_addr_t *ep_addr)
{
    uct_rc_gdr_ep_t *ep = ucs_derived_of(tl_ep, uct_rc_gdr_ep_t);
    uct_rc_gdr_dev_addr_t remote_dev;
    uct_rc_gdr_ep_addr_t remote_ep;

    if (!(ep->flags & UCT_RC_GDR_EP_FLAG_CONNECTED)) {
        return 0;
    }

    if ((ep_addr != NULL) &&
        ((uct_rc_gdr_ep_addr_unpack(ep_addr, uct_rc_gdr_ep_addr_size(),
                                    &remote_ep) != UCS_OK) ||
         (remote_ep.qp_num != ep->peer.qp_num))) {
        return 0;
    }

    /* A QP number is unique per device only: the port must match too. */
    return (dev_addr == NULL) ||
           ((uct_rc_gdr_dev_addr_unpack(dev_addr, uct_rc_gdr_dev_addr_size(),
                                        &remote_dev) == UCS_OK) &&
            (remote_dev.is_roce == ep->peer.dev.is_roce) &&
            (remote_dev.lid == ep->peer.dev.lid) &&
            !memcmp(remote_dev.gid, ep->peer.dev.gid,
                    sizeof(remote_dev.gid)));
}


static UCS_CLASS_INIT_FUNC(uct_rc_gdr_ep_t, const uct_ep_params_t *params)
{
    uct_rc_gdr_iface_t *iface;
    uct_rc_gdr_md_t *md;
    struct ibv_qp_init_attr qp_init;
    struct ibv_qp_attr attr;
    khiter_t iter;
    int ret;

    if (!(params->field_mask & UCT_EP_PARAM_FIELD_IFACE) ||
        (params->field_mask & (UCT_EP_PARAM_FIELD_DEV_ADDR |
                               UCT_EP_PARAM_FIELD_IFACE_ADDR))) {
        /* rc_gdr connects endpoint to endpoint only */
        return UCS_ERR_UNSUPPORTED;
    }

    iface = ucs_derived_of(params->iface, uct_rc_gdr_iface_t);
    md    = ucs_derived_of(iface->super.md, uct_rc_gdr_md_t);
    UCS_CLASS_CALL_SUPER_INIT(uct_base_ep_t, &iface->super);

    memset(&qp_init, 0, sizeof(qp_init));
    qp_init.send_cq             = iface->send_cq;
    qp_init.recv_cq             = iface->recv_cq;
    qp_init.srq                 = iface->srq;
    qp_init.qp_type             = IBV_QPT_RC;
    qp_init.sq_sig_all          = 0;
    qp_init.cap.max_send_wr     = iface->config.tx_queue_len;
    qp_init.cap.max_send_sge    = iface->config.max_send_sge;
    qp_init.cap.max_inline_data = iface->config.max_inline;
    self->qp = ibv_create_qp(md->pd, &qp_init);
    if (self->qp == NULL) {
        ucs_error("rc_gdr: ibv_create_qp(%s) failed: %m", md->name);
        return UCS_ERR_IO_ERROR;
    }

    memset(&attr, 0, sizeof(attr));
    attr.qp_state        = IBV_QPS_INIT;
    attr.pkey_index      = 0;
    attr.port_num        = iface->port_num;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC;
    ret = ibv_modify_qp(self->qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                        IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (ret != 0) {
        ucs_error("rc_gdr: QP 0x%x to INIT failed: %s", self->qp->qp_num,
                  strerror(ret));
        goto err_destroy_qp;
    }

    iter = kh_put(uct_rc_gdr_qpn, &iface->eps_by_qpn, self->qp->qp_num, &ret);
    if (ret == -1) {
        ucs_error("rc_gdr: out of memory adding QP 0x%x", self->qp->qp_num);
        goto err_destroy_qp;
    }
    kh_value(&iface->eps_by_qpn, iter) = self;

    ucs_queue_head_init(&self->outstanding);
    ucs_queue_head_init(&self->pending);
    self->tx_posted       = 0;
    self->tx_retired      = 0;
    self->sq_avail        = iface->config.tx_queue_len;
    self->unsignaled      = 0;
    self->tx_done         = 0;
    self->stall_seen      = 0;
    self->stall_sweeps    = 0;
    self->fc_credits      = iface->config.fc_wnd_size;
    self->fc_to_return    = 0;
    self->flags           = 0;
    self->status          = UCS_OK;
    memset(&self->flush, 0, sizeof(self->flush));
    self->bounce          = NULL;
    ucs_list_add_tail(&iface->eps, &self->list);
    return UCS_OK;

err_destroy_qp:
    ibv_destroy_qp(self->qp);
    return UCS_ERR_IO_ERROR;
}


static UCS_CLASS_CLEANUP_FUNC(uct_rc_gdr_ep_t)
{
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(self);
    uint32_t qp_num           = self->qp->qp_num; /* the QP is freed below */
    uct_rc_gdr_op_t *op;
    khiter_t iter;
    int ret;

    uct_rc_gdr_ep_pending_purge(&self->super.super, NULL, NULL);
    uct_rc_gdr_ep_mark_idle(self);

    ret = ibv_destroy_qp(self->qp);
    if (ret != 0) {
        ucs_warn("rc_gdr: ibv_destroy_qp(0x%x) failed: %s", qp_num,
                 strerror(ret));
    }

    /* Completions that never came (iface closing): the CQ slots are free. */
    self->flags        |= UCT_RC_GDR_EP_FLAG_DESTROYED;
    iface->tx_cq_avail += uct_rc_gdr_ep_in_flight(self);
    while (!ucs_queue_is_empty(&self->outstanding)) {
        op = ucs_queue_pull_elem_non_empty(&self->outstanding,
                                           uct_rc_gdr_op_t, queue);
        iface->tx_signaled -= op->signaled;
        uct_rc_gdr_ep_release_op(op);
    }

    /* its bounce transfers end, staging buffers back to the pool */
    uct_rc_gdr_bounce_ep_cleanup(self);

    iter = kh_get(uct_rc_gdr_qpn, &iface->eps_by_qpn, qp_num);
    if (iter != kh_end(&iface->eps_by_qpn)) {
        kh_del(uct_rc_gdr_qpn, &iface->eps_by_qpn, iter);
    }
    ucs_list_del(&self->list);
}


UCS_CLASS_DEFINE(uct_rc_gdr_ep_t, uct_base_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_rc_gdr_ep_t, uct_ep_t, const uct_ep_params_t*);


void uct_rc_gdr_ep_free_zombie(uct_rc_gdr_ep_t *ep)
{
    UCS_CLASS_DELETE(uct_rc_gdr_ep_t, ep);
}


/*
 * UCT: the operations of a destroyed endpoint have completed (canceled) when
 * destroy returns. Their work requests still owe the completion queue an
 * entry, so the descriptors stay queued, without callbacks, until then.
 */
static void uct_rc_gdr_ep_cancel_callbacks(uct_rc_gdr_ep_t *ep)
{
    uct_completion_t *comp;
    uct_rc_gdr_op_t *op;

    ucs_queue_for_each(op, &ep->outstanding, queue) {
        if ((op->comp == NULL) || op->internal) {
            continue;
        }
        comp     = op->comp;
        op->comp = NULL;
        uct_invoke_completion(comp, UCS_ERR_CANCELED);
    }
}


/* An endpoint with work in flight becomes a zombie until its completions
 * arrive: their descriptors must not point to freed memory. So does one
 * destroyed by a callback of its completions: the loop that called it still
 * walks the endpoint, and frees it at its end. */
void uct_rc_gdr_ep_destroy(uct_ep_h tl_ep)
{
    uct_rc_gdr_ep_t *ep       = ucs_derived_of(tl_ep, uct_rc_gdr_ep_t);
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);

    uct_rc_gdr_ep_pending_purge(tl_ep, NULL, NULL);
    uct_rc_gdr_ep_mark_idle(ep);
    uct_rc_gdr_ep_cancel_callbacks(ep);
    if ((uct_rc_gdr_ep_in_flight(ep) == 0) &&
        !(ep->flags & UCT_RC_GDR_EP_FLAG_COMPLETING)) {
        UCS_CLASS_DELETE(uct_rc_gdr_ep_t, ep);
        return;
    }

    ep->flags |= UCT_RC_GDR_EP_FLAG_DESTROYED;
    uct_rc_gdr_ep_move_to_error(ep);
    ucs_list_del(&ep->list);
    ucs_list_add_tail(&iface->zombies, &ep->list);
}

