/*
 * The stand-in NIC's executor: what the device of one process does.
 *
 * Requester: a posted WR is checked against the local keys (lkey, bounds,
 * local write access) and transmitted to the process that owns the
 * destination QP, split into segments of at most TNIC_SEG_MAX bytes. Its
 * completion is produced when the target's ACK or response arrives, in the
 * order of the send queue. A transport timer (the QP's timeout and
 * retry_cnt) sends again what was not answered, as a NIC does, and bounds
 * the wait when the peer is gone.
 * Responder: requests are executed against this process's memory only,
 * after the checks a responder makes (rkey, bounds, remote access, a posted
 * receive, its size); refusals go back as NAKs and move the QP to error.
 * A request it already executed (a retry whose answer was lost, a
 * duplicate) is answered again and not executed twice: sends and writes
 * with an ACK, reads read again, atomics with the saved result.
 * An RNR NAK makes the requester go back to that message and resend after
 * the responder's min_rnr_timer, rnr_retry times (7 = forever).
 *
 * Everything runs under tnic_proc.lock.
 */

#define _GNU_SOURCE
#include "tnic.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

static uint8_t tnic_engine_buf[TNIC_SEG_MAX];

/* IB spec 9.7.5.2.8: the RNR NAK timer field, in microseconds */
static const uint32_t tnic_rnr_timer_us[32] = {
    655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960,
    1280, 1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960,
    61440, 81920, 122880, 163840, 245760, 327680, 491520
};

static tnic_send_wqe_t *tnic_sq_wqe(tnic_qp_t *qp, uint32_t psn)
{
    return &qp->sq[psn % qp->cap.max_send_wr];
}

static uint64_t tnic_qp_timeout_ns(tnic_qp_t *qp)
{
    /* 4.096 us * 2^timeout; 0 means wait forever (IB spec) */
    return qp->attr.timeout ? (4096ull << qp->attr.timeout) : 0;
}

static uint16_t tnic_qp_lid(tnic_qp_t *qp)
{
    return qp->ctx->dev->lid;
}

static enum ibv_wc_opcode tnic_wc_opcode(int wr_opcode)
{
    switch (wr_opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
        return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
        return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        return IBV_WC_FETCH_ADD;
    default:
        return IBV_WC_SEND;
    }
}

int tnic_engine_rq_post(tnic_rq_t *rq, struct ibv_recv_wr *wr)
{
    tnic_recv_wqe_t *wqe;

    if ((wr->num_sge < 0) || ((unsigned)wr->num_sge > rq->max_sge)) {
        return EINVAL;
    }
    if (rq->count >= rq->size) {
        return ENOMEM;
    }
    wqe          = &rq->wqes[(rq->head + rq->count) % rq->size];
    wqe->wr_id   = wr->wr_id;
    wqe->num_sge = wr->num_sge;
    memcpy(wqe->sg, wr->sg_list, wr->num_sge * sizeof(*wr->sg_list));
    ++rq->count;
    ++tnic_proc.counters.wrs;
    return 0;
}

static int tnic_rq_pop(tnic_rq_t *rq, tnic_recv_wqe_t *wqe)
{
    if (rq->count == 0) {
        return 0;
    }
    *wqe     = rq->wqes[rq->head];
    rq->head = (rq->head + 1) % rq->size;
    --rq->count;
    --tnic_proc.counters.wrs;
    return 1;
}

/* A local SGE: the key of a live MR of this PD, inside its bounds, with
 * local write when the device writes into it */
static tnic_mr_t *tnic_sge_check(tnic_pd_t *pd, const struct ibv_sge *sge,
                                 int need_write)
{
    tnic_mr_t *mr = tnic_mr_lookup(sge->lkey);
    uint64_t start;

    if ((mr == NULL) || (mr->pd != pd)) {
        return NULL;
    }
    start = (uintptr_t)mr->mr.addr;
    if ((sge->addr < start) || (sge->addr + sge->length < sge->addr) ||
        (sge->addr + sge->length > start + mr->mr.length)) {
        return NULL;
    }
    if (need_write && !(mr->access & IBV_ACCESS_LOCAL_WRITE)) {
        return NULL;
    }
    return mr;
}

/* Copy between a scatter list and a buffer at a message offset;
 * IBV_WC_LOC_PROT_ERR when an SGE fails its check, LOC_LEN_ERR when the
 * list is too short */
static int tnic_sgl_copy(tnic_pd_t *pd, const struct ibv_sge *sg, int num_sge,
                         uint64_t offset, void *buf, size_t len, int to_sgl)
{
    uint64_t pos = 0, skip, n;
    uint8_t *p = buf;
    tnic_mr_t *mr;
    int i;

    for (i = 0; (i < num_sge) && (len > 0); ++i) {
        if (offset >= pos + sg[i].length) {
            pos += sg[i].length;
            continue;
        }
        mr = tnic_sge_check(pd, &sg[i], to_sgl);
        if (mr == NULL) {
            return IBV_WC_LOC_PROT_ERR;
        }
        skip = offset - pos;
        n    = sg[i].length - skip;
        if (n > len) {
            n = len;
        }
        /* an accessor that cannot reach the memory (device memory freed
         * under the registration) fails as an invalidated MR does */
        if ((to_sgl ?
             mr->mem_ops->write(mr->mem_priv, sg[i].addr + skip, p, n) :
             mr->mem_ops->read(mr->mem_priv, sg[i].addr + skip, p, n)) != 0) {
            return IBV_WC_LOC_PROT_ERR;
        }
        p      += n;
        len    -= n;
        offset += n;
        pos    += sg[i].length;
    }
    return (len == 0) ? IBV_WC_SUCCESS : IBV_WC_LOC_LEN_ERR;
}

static uint64_t tnic_sgl_len(const struct ibv_sge *sg, int num_sge)
{
    uint64_t len = 0;
    int i;

    for (i = 0; i < num_sge; ++i) {
        len += sg[i].length;
    }
    return len;
}

static void tnic_send_to_peer(tnic_qp_t *qp, uint32_t dst_slot,
                              tnic_msg_hdr_t *hdr, const void *data)
{
    (void)qp;
    if (tnic_fabric_send(dst_slot, hdr, data) != 0) {
        TNIC_LOG("message to slot %u lost: out of memory", dst_slot);
    }
}

/* ------------------------------------------------------------------------
 * Completion of the send queue, and the error state
 */

static void tnic_qp_flush(tnic_qp_t *qp)
{
    tnic_send_wqe_t *wqe;
    struct ibv_wc wc;
    uint32_t psn;

    for (psn = qp->sq_head; psn != qp->sq_tail; ++psn) {
        wqe = tnic_sq_wqe(qp, psn);
        if (wqe->state != TNIC_WQE_DONE) {
            wqe->state  = TNIC_WQE_DONE;
            wqe->status = IBV_WC_WR_FLUSH_ERR;
        }
    }
    qp->sq_tx    = qp->sq_tail;
    qp->rnr_wait = 0;

    /* a receive taken by an unfinished message, then the receive queue */
    memset(&wc, 0, sizeof(wc));
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qp->qp.qp_num;
    if (qp->rx_has_wqe) {
        wc.wr_id        = qp->rx_wqe.wr_id;
        qp->rx_has_wqe  = 0;
        tnic_cq_push(qp->recv_cq, &wc, 1);
    }
    qp->rx_active = 0;
    if (qp->srq == NULL) {
        while (tnic_rq_pop(&qp->rq, &qp->rx_wqe)) {
            wc.wr_id = qp->rx_wqe.wr_id;
            tnic_cq_push(qp->recv_cq, &wc, 1);
        }
    }
}

static void tnic_sq_complete(tnic_qp_t *qp);

/* The device moves a QP to error; struct ibv_qp's state stays what the
 * application last set with ibv_modify_qp, as with a real provider (only
 * ibv_query_qp tells the device's state) */
void tnic_engine_qp_error(tnic_qp_t *qp)
{
    qp->attr.qp_state = IBV_QPS_ERR;
    tnic_qp_flush(qp);
    tnic_sq_complete(qp);
}

static void tnic_sq_complete(tnic_qp_t *qp)
{
    tnic_send_wqe_t *wqe;
    struct ibv_wc wc;
    int error;

    while (qp->sq_head != qp->sq_tail) {
        wqe = tnic_sq_wqe(qp, qp->sq_head);
        if (wqe->state != TNIC_WQE_DONE) {
            break;
        }
        error = (wqe->status != IBV_WC_SUCCESS);
        if (error || qp->sq_sig_all ||
            (wqe->send_flags & IBV_SEND_SIGNALED)) {
            memset(&wc, 0, sizeof(wc));
            wc.wr_id    = wqe->wr_id;
            wc.status   = wqe->status;
            wc.opcode   = tnic_wc_opcode(wqe->opcode);
            wc.byte_len = (wqe->opcode == IBV_WR_RDMA_READ) ?
                          (uint32_t)wqe->total_len :
                          ((wqe->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) ||
                           (wqe->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)) ?
                          8 : 0;
            wc.qp_num   = qp->qp.qp_num;
            tnic_cq_push(qp->send_cq, &wc, 0);
        }
        free(wqe->inline_data);
        wqe->inline_data = NULL;
        ++qp->sq_head;
        --tnic_proc.counters.wrs;
        if (error && (wqe->status != IBV_WC_WR_FLUSH_ERR) &&
            (qp->attr.qp_state != IBV_QPS_ERR)) {
            /* the first error moves the QP to error: the rest flush */
            qp->attr.qp_state = IBV_QPS_ERR;
            tnic_qp_flush(qp);
        }
    }
}

static void tnic_wqe_done(tnic_qp_t *qp, tnic_send_wqe_t *wqe, int status)
{
    wqe->state  = TNIC_WQE_DONE;
    wqe->status = status;
    tnic_sq_complete(qp);
}

/* ------------------------------------------------------------------------
 * Requester
 */

int tnic_engine_post_send(tnic_qp_t *qp, struct ibv_send_wr *wr)
{
    enum ibv_qp_state state = qp->attr.qp_state;
    tnic_send_wqe_t *wqe;
    int status = -1, qp_error = 0, rc = (qp->qp.qp_type == IBV_QPT_RC);
    uint64_t total;

    if ((state == IBV_QPS_RESET) || (state == IBV_QPS_INIT) ||
        (state == IBV_QPS_RTR)) {
        return EINVAL;
    }
    if ((wr->num_sge < 0) || ((unsigned)wr->num_sge > qp->cap.max_send_sge)) {
        return EINVAL;
    }
    switch (wr->opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
        break;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        if (!rc) {
            return EINVAL;
        }
        break;
    default:
        return EINVAL;
    }
    total = tnic_sgl_len(wr->sg_list, wr->num_sge);
    if (wr->send_flags & IBV_SEND_INLINE) {
        if ((total > qp->cap.max_inline_data) ||
            (wr->opcode == IBV_WR_RDMA_READ) ||
            (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) ||
            (wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)) {
            return EINVAL;
        }
    }
    if (qp->sq_tail - qp->sq_head >= qp->cap.max_send_wr) {
        return ENOMEM;   /* the send queue is full, as hardware says */
    }

    wqe = tnic_sq_wqe(qp, qp->sq_tail);
    memset(wqe, 0, sizeof(*wqe));
    wqe->wr_id         = wr->wr_id;
    wqe->psn           = qp->sq_tail;
    wqe->opcode        = wr->opcode;
    wqe->send_flags    = wr->send_flags;
    wqe->state         = TNIC_WQE_POSTED;
    wqe->num_sge       = wr->num_sge;
    wqe->total_len     = total;
    wqe->imm           = wr->imm_data;
    wqe->forced_status = -1;
    memcpy(wqe->sg, wr->sg_list, wr->num_sge * sizeof(*wr->sg_list));
    if (rc) {
        if ((wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) ||
            (wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)) {
            wqe->rkey        = wr->wr.atomic.rkey;
            wqe->raddr       = wr->wr.atomic.remote_addr;
            wqe->compare_add = wr->wr.atomic.compare_add;
            wqe->swap        = wr->wr.atomic.swap;
        } else {
            wqe->rkey  = wr->wr.rdma.rkey;
            wqe->raddr = wr->wr.rdma.remote_addr;
        }
    } else {
        tnic_ah_t *ah = (tnic_ah_t*)wr->wr.ud.ah;
        if (ah == NULL) {
            return EINVAL;
        }
        wqe->ud_qpn    = wr->wr.ud.remote_qpn;
        /* a qkey with the high bit set means the QP's own (IB spec) */
        wqe->ud_qkey   = (wr->wr.ud.remote_qkey & 0x80000000u) ?
                         qp->attr.qkey : wr->wr.ud.remote_qkey;
        wqe->ud_dlid   = ah->attr.dlid;
        wqe->ud_global = ah->attr.is_global;
    }
    if ((wr->send_flags & IBV_SEND_INLINE) && (total > 0)) {
        /* inline data is the CPU's copy at post time: no key is checked */
        uint8_t *p;
        int i;

        wqe->inline_data = malloc(total);
        if (wqe->inline_data == NULL) {
            return ENOMEM;
        }
        for (i = 0, p = wqe->inline_data; i < wr->num_sge; ++i) {
            memcpy(p, (void*)(uintptr_t)wr->sg_list[i].addr,
                   wr->sg_list[i].length);
            p += wr->sg_list[i].length;
        }
    }
    if (tnic_fault_on_post(&status, &qp_error) && (status >= 0)) {
        wqe->forced_status = status;
    }
    ++qp->sq_tail;
    ++tnic_proc.counters.wrs;

    if (state == IBV_QPS_ERR) {
        tnic_qp_flush(qp);
        tnic_sq_complete(qp);
    } else if (qp_error) {
        tnic_engine_qp_error(qp);
        tnic_async_event(qp->ctx, IBV_EVENT_QP_FATAL, &qp->qp);
    }
    return 0;
}

static void tnic_msg_init(tnic_qp_t *qp, tnic_send_wqe_t *wqe,
                          tnic_msg_hdr_t *hdr)
{
    memset(hdr, 0, sizeof(*hdr));
    hdr->type        = TNIC_MSG_REQ;
    hdr->opcode      = wqe->opcode;
    hdr->src_slot    = tnic_proc.slot;
    hdr->src_qpn     = qp->qp.qp_num;
    hdr->dst_qpn     = qp->attr.dest_qp_num;
    hdr->psn         = wqe->psn;
    hdr->epoch       = qp->epoch;
    hdr->imm         = wqe->imm;
    hdr->rkey        = wqe->rkey;
    hdr->raddr       = wqe->raddr;
    hdr->total_len   = wqe->total_len;
    hdr->compare_add = wqe->compare_add;
    hdr->swap        = wqe->swap;
    hdr->src_lid     = tnic_qp_lid(qp);
    hdr->dst_lid     = qp->attr.ah_attr.dlid;
    if (wqe->send_flags & IBV_SEND_SOLICITED) {
        hdr->flags |= TNIC_MSG_F_SOLICITED;
    }
    if ((wqe->opcode == IBV_WR_SEND_WITH_IMM) ||
        (wqe->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)) {
        hdr->flags |= TNIC_MSG_F_IMM;
    }
}

/* the payload of a message at an offset: the inline copy or the SGEs */
static int tnic_wqe_gather(tnic_qp_t *qp, tnic_send_wqe_t *wqe,
                           uint64_t offset, void *buf, size_t len)
{
    if (wqe->inline_data != NULL) {
        memcpy(buf, wqe->inline_data + offset, len);
        return IBV_WC_SUCCESS;
    }
    return tnic_sgl_copy(qp->pd, wqe->sg, wqe->num_sge, offset, buf, len, 0);
}

static void tnic_ud_transmit(tnic_qp_t *qp, tnic_send_wqe_t *wqe)
{
    tnic_msg_hdr_t hdr;
    int status;

    if (wqe->total_len > TNIC_UD_MTU) {
        tnic_wqe_done(qp, wqe, IBV_WC_LOC_LEN_ERR);
        return;
    }
    status = tnic_wqe_gather(qp, wqe, 0, tnic_engine_buf, wqe->total_len);
    if (status != IBV_WC_SUCCESS) {
        tnic_wqe_done(qp, wqe, status);
        return;
    }
    tnic_msg_init(qp, wqe, &hdr);
    hdr.type    = TNIC_MSG_UD;
    hdr.dst_qpn = wqe->ud_qpn;
    hdr.qkey    = wqe->ud_qkey;
    hdr.dst_lid = wqe->ud_dlid;
    hdr.len     = wqe->total_len;
    hdr.flags  |= TNIC_MSG_F_FIRST | TNIC_MSG_F_LAST |
                  (wqe->ud_global ? TNIC_MSG_F_GRH : 0);
    tnic_send_to_peer(qp, wqe->ud_qpn >> 16, &hdr, tnic_engine_buf);
    /* unreliable: complete once it is on the wire */
    tnic_wqe_done(qp, wqe, IBV_WC_SUCCESS);
}

static int tnic_rc_transmit_segments(tnic_qp_t *qp, tnic_send_wqe_t *wqe,
                                     tnic_msg_hdr_t *hdr, uint32_t dst_slot);

static void tnic_rc_transmit(tnic_qp_t *qp, tnic_send_wqe_t *wqe)
{
    uint32_t dst_slot = qp->attr.dest_qp_num >> 16;
    int is_atomic = (wqe->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) ||
                    (wqe->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD);
    int writes_local = is_atomic || (wqe->opcode == IBV_WR_RDMA_READ);
    tnic_msg_hdr_t hdr;
    int i, copies;

    if (wqe->total_len > TNIC_MAX_MR_MSG) {
        tnic_wqe_done(qp, wqe, IBV_WC_LOC_LEN_ERR);
        return;
    }
    if (is_atomic && (wqe->total_len != 8)) {
        tnic_wqe_done(qp, wqe, IBV_WC_LOC_LEN_ERR);
        return;
    }
    if (wqe->inline_data == NULL) {
        for (i = 0; i < wqe->num_sge; ++i) {
            if ((wqe->sg[i].length > 0) &&
                (tnic_sge_check(qp->pd, &wqe->sg[i], writes_local) ==
                 NULL)) {
                tnic_wqe_done(qp, wqe, IBV_WC_LOC_PROT_ERR);
                return;
            }
        }
    }

    wqe->state       = TNIC_WQE_SENT;
    wqe->lost        = 0;
    wqe->deadline_ns = tnic_time_ns() + tnic_qp_timeout_ns(qp);
    wqe->drops_at    = tnic_fabric_drops();
    tnic_msg_init(qp, wqe, &hdr);
    /* the dup fault: the fabric delivers the message twice */
    copies = tnic_fault_dup() ? 2 : 1;
    if (writes_local) {
        hdr.flags |= TNIC_MSG_F_FIRST | TNIC_MSG_F_LAST;
        for (i = 0; i < copies; ++i) {
            tnic_send_to_peer(qp, dst_slot, &hdr, NULL);
        }
        return;
    }

    for (i = 0; (i < copies) &&
                (tnic_rc_transmit_segments(qp, wqe, &hdr, dst_slot) == 0);
         ++i) {
    }
}

/* The segments of a message that carries data to the responder; -1 when
 * the WR ended in an error instead */
static int tnic_rc_transmit_segments(tnic_qp_t *qp, tnic_send_wqe_t *wqe,
                                     tnic_msg_hdr_t *hdr, uint32_t dst_slot)
{
    uint64_t offset, len;
    int status;

    offset = 0;
    do {
        len = wqe->total_len - offset;
        if (len > TNIC_SEG_MAX) {
            len = TNIC_SEG_MAX;
        }
        status = tnic_wqe_gather(qp, wqe, offset, tnic_engine_buf, len);
        if (status != IBV_WC_SUCCESS) {
            /* checked above; only a concurrent deregistration gets here */
            tnic_wqe_done(qp, wqe, status);
            return -1;
        }
        hdr->offset = offset;
        hdr->len    = len;
        hdr->flags &= ~(TNIC_MSG_F_FIRST | TNIC_MSG_F_LAST);
        hdr->flags |= (offset == 0) ? TNIC_MSG_F_FIRST : 0;
        hdr->flags |= (offset + len == wqe->total_len) ? TNIC_MSG_F_LAST : 0;
        tnic_send_to_peer(qp, dst_slot, hdr, tnic_engine_buf);
        offset += len;
    } while (offset < wqe->total_len);
    return 0;
}

static int tnic_fence_blocks(tnic_qp_t *qp, uint32_t psn)
{
    tnic_send_wqe_t *wqe;
    uint32_t p;

    /* a fenced WR waits for the reads and atomics before it */
    for (p = qp->sq_head; p != psn; ++p) {
        wqe = tnic_sq_wqe(qp, p);
        if ((wqe->state != TNIC_WQE_DONE) &&
            ((wqe->opcode == IBV_WR_RDMA_READ) ||
             (wqe->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) ||
             (wqe->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD))) {
            return 1;
        }
    }
    return 0;
}

void tnic_engine_sq_kick(tnic_qp_t *qp)
{
    tnic_send_wqe_t *wqe;

    while ((qp->attr.qp_state == IBV_QPS_RTS) && !qp->rnr_wait &&
           (qp->sq_tx != qp->sq_tail)) {
        wqe = tnic_sq_wqe(qp, qp->sq_tx);
        if ((wqe->send_flags & IBV_SEND_FENCE) &&
            tnic_fence_blocks(qp, qp->sq_tx)) {
            break;
        }
        ++qp->sq_tx;
        if (wqe->forced_status >= 0) {
            tnic_wqe_done(qp, wqe, wqe->forced_status);
        } else if (qp->qp.qp_type == IBV_QPT_UD) {
            tnic_ud_transmit(qp, wqe);
        } else {
            tnic_rc_transmit(qp, wqe);
        }
    }
}

static void tnic_requester_recv(tnic_qp_t *qp, const tnic_msg_hdr_t *hdr,
                                const void *data)
{
    tnic_send_wqe_t *wqe;
    int status;

    if ((qp->attr.qp_state != IBV_QPS_RTS) ||
        (hdr->src_qpn != qp->attr.dest_qp_num) ||
        ((int32_t)(hdr->psn - qp->sq_head) < 0) ||
        ((int32_t)(hdr->psn - qp->sq_tx) >= 0)) {
        return;   /* stale: the QP moved on */
    }
    wqe = tnic_sq_wqe(qp, hdr->psn);
    if ((wqe->state != TNIC_WQE_SENT) || (hdr->epoch != qp->epoch)) {
        return;
    }
    /* an answer restarts the transport timer, as on a NIC: a long read
     * whose response is still streaming in is not tried again */
    qp->answered_ns = tnic_time_ns();

    switch (hdr->type) {
    case TNIC_MSG_ACK:
        qp->rnr_retries = 0;
        tnic_wqe_done(qp, wqe, IBV_WC_SUCCESS);
        break;
    case TNIC_MSG_READ_RESP:
        status = tnic_sgl_copy(qp->pd, wqe->sg, wqe->num_sge, hdr->offset,
                               (void*)data, hdr->len, 1);
        if (status != IBV_WC_SUCCESS) {
            tnic_wqe_done(qp, wqe, status);
        } else if (hdr->flags & TNIC_MSG_F_LAST) {
            qp->rnr_retries = 0;
            tnic_wqe_done(qp, wqe, IBV_WC_SUCCESS);
        }
        break;
    case TNIC_MSG_ATOMIC_RESP:
        status = tnic_sgl_copy(qp->pd, wqe->sg, wqe->num_sge, 0,
                               (void*)&hdr->compare_add, 8, 1);
        tnic_wqe_done(qp, wqe, status);
        break;
    case TNIC_MSG_LOST:
        wqe->lost = 1;   /* the timer counts this try when it expires */
        break;
    case TNIC_MSG_NAK:
        if (hdr->status != TNIC_NAK_RNR) {
            tnic_wqe_done(qp, wqe, hdr->status);
        } else if ((qp->attr.rnr_retry == 7) ||
                   (qp->rnr_retries < qp->attr.rnr_retry)) {
            /* go back to this message once the responder's timer passes */
            if (qp->attr.rnr_retry != 7) {
                ++qp->rnr_retries;
            }
            ++qp->epoch;
            qp->sq_tx         = hdr->psn;
            qp->rnr_wait      = 1;
            qp->rnr_resend_ns = tnic_time_ns() +
                                tnic_rnr_timer_us[hdr->imm & 31] * 1000ull;
        } else {
            tnic_wqe_done(qp, wqe, IBV_WC_RNR_RETRY_EXC_ERR);
        }
        break;
    }
}

/* ------------------------------------------------------------------------
 * Responder
 */

static void tnic_respond(tnic_qp_t *qp, const tnic_msg_hdr_t *req, int type,
                         tnic_msg_hdr_t *hdr, const void *data)
{
    hdr->type     = type;
    hdr->opcode   = req->opcode;
    hdr->src_slot = tnic_proc.slot;
    hdr->src_qpn  = qp->qp.qp_num;
    hdr->dst_qpn  = req->src_qpn;
    hdr->psn      = req->psn;
    hdr->epoch    = req->epoch;
    hdr->src_lid  = tnic_qp_lid(qp);
    hdr->dst_lid  = req->src_lid;
    tnic_send_to_peer(qp, req->src_slot, hdr, data);
}

/* What stands for the silence a fabric gives a request no QP takes */
static void tnic_respond_lost(const tnic_msg_hdr_t *req)
{
    tnic_msg_hdr_t hdr;

    memset(&hdr, 0, sizeof(hdr));
    hdr.type     = TNIC_MSG_LOST;
    hdr.opcode   = req->opcode;
    hdr.src_slot = tnic_proc.slot;
    hdr.src_qpn  = req->dst_qpn;
    hdr.dst_qpn  = req->src_qpn;
    hdr.psn      = req->psn;
    hdr.epoch    = req->epoch;
    hdr.src_lid  = req->dst_lid;
    hdr.dst_lid  = req->src_lid;
    tnic_fabric_send(req->src_slot, &hdr, NULL);
}

static void tnic_respond_simple(tnic_qp_t *qp, const tnic_msg_hdr_t *req,
                                int type, uint32_t status)
{
    tnic_msg_hdr_t hdr;

    memset(&hdr, 0, sizeof(hdr));
    hdr.status = status;
    hdr.imm    = qp->attr.min_rnr_timer;
    tnic_respond(qp, req, type, &hdr, NULL);
}

/* A responder error: NAK with status, the QP to error (IB spec 9.9.3) */
static void tnic_responder_fail(tnic_qp_t *qp, const tnic_msg_hdr_t *req,
                                uint32_t status, int async_event)
{
    tnic_respond_simple(qp, req, TNIC_MSG_NAK, status);
    tnic_engine_qp_error(qp);
    if (async_event >= 0) {
        tnic_async_event(qp->ctx, async_event, &qp->qp);
    }
}

/* The MR a remote access may use: its rkey, this QP's PD, the access, the
 * bounds; the host address of raddr in *addr_p */
static tnic_mr_t *tnic_rkey_check(tnic_qp_t *qp, uint32_t rkey,
                                  uint64_t raddr, uint64_t len, int access,
                                  uint64_t *addr_p)
{
    tnic_mr_t *mr = tnic_mr_lookup(rkey);

    if ((mr == NULL) || (mr->pd != qp->pd) || !(mr->access & access) ||
        !(qp->attr.qp_access_flags & access)) {
        return NULL;
    }
    if ((raddr < mr->iova) || (raddr + len < raddr) ||
        (raddr + len > mr->iova + mr->mr.length)) {
        return NULL;
    }
    *addr_p = (uintptr_t)mr->mr.addr + (raddr - mr->iova);
    return mr;
}

static int tnic_responder_take_recv(tnic_qp_t *qp, const tnic_msg_hdr_t *hdr)
{
    tnic_rq_t *rq = (qp->srq != NULL) ? &qp->srq->rq : &qp->rq;

    if (tnic_fault.rnr_all || !tnic_rq_pop(rq, &qp->rx_wqe)) {
        /* receiver not ready: the requester resends after our timer */
        tnic_respond_simple(qp, hdr, TNIC_MSG_NAK, TNIC_NAK_RNR);
        qp->rx_dropping  = 1;
        qp->rx_nak_epoch = hdr->epoch;
        return 0;
    }
    qp->rx_has_wqe = 1;
    if ((qp->srq != NULL) && (qp->srq->limit != 0) &&
        (rq->count < qp->srq->limit)) {
        qp->srq->limit = 0;
        tnic_async_event(qp->ctx, IBV_EVENT_SRQ_LIMIT_REACHED,
                         &qp->srq->srq);
    }
    return 1;
}

static void tnic_responder_recv_done(tnic_qp_t *qp, const tnic_msg_hdr_t *hdr,
                                     int status, enum ibv_wc_opcode opcode,
                                     uint32_t byte_len)
{
    struct ibv_wc wc;

    memset(&wc, 0, sizeof(wc));
    wc.wr_id    = qp->rx_wqe.wr_id;
    wc.status   = status;
    wc.opcode   = opcode;
    wc.byte_len = byte_len;
    wc.qp_num   = qp->qp.qp_num;
    wc.src_qp   = hdr->src_qpn;
    wc.slid     = hdr->src_lid;
    if (hdr->flags & TNIC_MSG_F_IMM) {
        wc.wc_flags |= IBV_WC_WITH_IMM;
        wc.imm_data  = hdr->imm;
    }
    qp->rx_has_wqe = 0;
    tnic_cq_push(qp->recv_cq, &wc, !!(hdr->flags & TNIC_MSG_F_SOLICITED));
}

/* An RDMA READ: the data, in segments; executed again for a repeat */
static void tnic_responder_read(tnic_qp_t *qp, const tnic_msg_hdr_t *hdr)
{
    tnic_mr_t *mr = NULL;
    uint64_t addr = 0, offset, len;
    tnic_msg_hdr_t resp;

    if ((hdr->total_len > 0) &&
        ((mr = tnic_rkey_check(qp, hdr->rkey, hdr->raddr, hdr->total_len,
                               IBV_ACCESS_REMOTE_READ, &addr)) == NULL)) {
        tnic_responder_fail(qp, hdr, IBV_WC_REM_ACCESS_ERR,
                            IBV_EVENT_QP_ACCESS_ERR);
        return;
    }
    offset = 0;
    do {
        len = hdr->total_len - offset;
        if (len > TNIC_SEG_MAX) {
            len = TNIC_SEG_MAX;
        }
        if ((len > 0) &&
            (mr->mem_ops->read(mr->mem_priv, addr + offset, tnic_engine_buf,
                               len) != 0)) {
            tnic_responder_fail(qp, hdr, IBV_WC_REM_ACCESS_ERR,
                                IBV_EVENT_QP_ACCESS_ERR);
            return;
        }
        memset(&resp, 0, sizeof(resp));
        resp.offset = offset;
        resp.len    = len;
        resp.flags  = (offset + len == hdr->total_len) ? TNIC_MSG_F_LAST : 0;
        tnic_respond(qp, hdr, TNIC_MSG_READ_RESP, &resp, tnic_engine_buf);
        offset += len;
    } while (offset < hdr->total_len);
}

/*
 * A request executed before (IB spec 9.9.2, duplicate requests): a retry
 * after a lost answer, or a copy the fabric delivered twice. Answered
 * again, never executed twice: a send or write is ACKed once its last
 * segment comes (no receive is taken, nothing is written), a read is read
 * again, an atomic answered with the result saved when it ran (one too old
 * to be saved gets no answer).
 */
static void tnic_responder_repeat(tnic_qp_t *qp, const tnic_msg_hdr_t *hdr)
{
    tnic_msg_hdr_t resp;
    int i;

    switch (hdr->opcode) {
    case IBV_WR_RDMA_READ:
        tnic_responder_read(qp, hdr);
        break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        i = hdr->psn % TNIC_MAX_RD_ATOM;
        if (qp->rx_atomics[i].valid && (qp->rx_atomics[i].psn == hdr->psn)) {
            memset(&resp, 0, sizeof(resp));
            resp.compare_add = qp->rx_atomics[i].value;
            tnic_respond(qp, hdr, TNIC_MSG_ATOMIC_RESP, &resp, NULL);
        }
        break;
    default:
        if (hdr->flags & TNIC_MSG_F_LAST) {
            tnic_respond_simple(qp, hdr, TNIC_MSG_ACK, 0);
        }
        break;
    }
}

static void tnic_responder_recv(tnic_qp_t *qp, const tnic_msg_hdr_t *hdr,
                                const void *data)
{
    uint64_t addr;
    tnic_msg_hdr_t resp;
    tnic_mr_t *mr;
    int status;
    tnic_rx_atomic_t *saved;

    if (((qp->attr.qp_state != IBV_QPS_RTR) &&
         (qp->attr.qp_state != IBV_QPS_RTS)) ||
        (hdr->src_qpn != qp->attr.dest_qp_num)) {
        /* dropped, as by a QP that is not connected to the sender */
        tnic_respond_lost(hdr);
        return;
    }
    if (qp->rx_dropping) {
        if (hdr->epoch == qp->rx_nak_epoch) {
            return;   /* the rest of what followed the RNR NAK */
        }
        qp->rx_dropping = 0;
    }
    if ((int32_t)(hdr->psn - qp->rx_psn) < 0) {
        tnic_responder_repeat(qp, hdr);
        return;
    }
    if (hdr->flags & TNIC_MSG_F_FIRST) {
        if ((hdr->psn != qp->rx_psn) ||
            (qp->rx_active && (hdr->epoch == qp->rx_epoch))) {
            return;
        }
        /* A new try of the message open here (the rest of the last try
         * was lost) starts it again, into the receive it took */
        qp->rx_active = 0;
        qp->rx_epoch  = hdr->epoch;
    } else if (!qp->rx_active || (hdr->psn != qp->rx_psn) ||
               (hdr->epoch != qp->rx_epoch)) {
        return;
    }

    switch (hdr->opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
        if (hdr->flags & TNIC_MSG_F_FIRST) {
            if (!qp->rx_has_wqe && !tnic_responder_take_recv(qp, hdr)) {
                return;
            }
            if (hdr->total_len >
                tnic_sgl_len(qp->rx_wqe.sg, qp->rx_wqe.num_sge)) {
                tnic_responder_recv_done(qp, hdr, IBV_WC_LOC_LEN_ERR,
                                         IBV_WC_RECV, 0);
                tnic_responder_fail(qp, hdr, IBV_WC_REM_INV_REQ_ERR, -1);
                return;
            }
            qp->rx_active = 1;
        }
        status = tnic_sgl_copy(qp->pd, qp->rx_wqe.sg, qp->rx_wqe.num_sge,
                               hdr->offset, (void*)data, hdr->len, 1);
        if (status != IBV_WC_SUCCESS) {
            tnic_responder_recv_done(qp, hdr, status, IBV_WC_RECV, 0);
            tnic_responder_fail(qp, hdr, IBV_WC_REM_OP_ERR, -1);
            return;
        }
        if (hdr->flags & TNIC_MSG_F_LAST) {
            qp->rx_active = 0;
            ++qp->rx_psn;
            tnic_responder_recv_done(qp, hdr, IBV_WC_SUCCESS, IBV_WC_RECV,
                                     hdr->total_len);
            tnic_respond_simple(qp, hdr, TNIC_MSG_ACK, 0);
        }
        break;

    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        if (hdr->flags & TNIC_MSG_F_FIRST) {
            if ((hdr->total_len > 0) &&
                (tnic_rkey_check(qp, hdr->rkey, hdr->raddr, hdr->total_len,
                                 IBV_ACCESS_REMOTE_WRITE, &addr) == NULL)) {
                tnic_responder_fail(qp, hdr, IBV_WC_REM_ACCESS_ERR,
                                    IBV_EVENT_QP_ACCESS_ERR);
                return;
            }
            if ((hdr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) &&
                !qp->rx_has_wqe && !tnic_responder_take_recv(qp, hdr)) {
                return;
            }
            qp->rx_active = 1;
        }
        if (hdr->len > 0) {
            mr = tnic_rkey_check(qp, hdr->rkey, hdr->raddr + hdr->offset,
                                 hdr->len, IBV_ACCESS_REMOTE_WRITE, &addr);
            if (mr == NULL) {
                /* deregistered while the message was on the wire */
                tnic_responder_fail(qp, hdr, IBV_WC_REM_ACCESS_ERR,
                                    IBV_EVENT_QP_ACCESS_ERR);
                return;
            }
            if (mr->mem_ops->write(mr->mem_priv, addr, data, hdr->len) != 0) {
                tnic_responder_fail(qp, hdr, IBV_WC_REM_ACCESS_ERR,
                                    IBV_EVENT_QP_ACCESS_ERR);
                return;
            }
        }
        if (hdr->flags & TNIC_MSG_F_LAST) {
            qp->rx_active = 0;
            ++qp->rx_psn;
            if (hdr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
                tnic_responder_recv_done(qp, hdr, IBV_WC_SUCCESS,
                                         IBV_WC_RECV_RDMA_WITH_IMM,
                                         hdr->total_len);
            }
            tnic_respond_simple(qp, hdr, TNIC_MSG_ACK, 0);
        }
        break;

    case IBV_WR_RDMA_READ:
        ++qp->rx_psn;
        tnic_responder_read(qp, hdr);
        break;

    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        if (hdr->raddr % 8) {
            tnic_responder_fail(qp, hdr, IBV_WC_REM_INV_REQ_ERR,
                                IBV_EVENT_QP_REQ_ERR);
            return;
        }
        mr = tnic_rkey_check(qp, hdr->rkey, hdr->raddr, 8,
                             IBV_ACCESS_REMOTE_ATOMIC, &addr);
        if (mr == NULL) {
            tnic_responder_fail(qp, hdr, IBV_WC_REM_ACCESS_ERR,
                                IBV_EVENT_QP_ACCESS_ERR);
            return;
        }
        ++qp->rx_psn;
        memset(&resp, 0, sizeof(resp));
        if (mr->mem_ops->atomic(mr->mem_priv, addr,
                                hdr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP,
                                hdr->compare_add, hdr->swap,
                                &resp.compare_add) != 0) {
            tnic_responder_fail(qp, hdr, IBV_WC_REM_ACCESS_ERR,
                                IBV_EVENT_QP_ACCESS_ERR);
            return;
        }
        saved        = &qp->rx_atomics[hdr->psn % TNIC_MAX_RD_ATOM];
        saved->psn   = hdr->psn;
        saved->valid = 1;
        saved->value = resp.compare_add;
        tnic_respond(qp, hdr, TNIC_MSG_ATOMIC_RESP, &resp, NULL);
        break;

    default:
        tnic_responder_fail(qp, hdr, IBV_WC_REM_INV_REQ_ERR,
                            IBV_EVENT_QP_REQ_ERR);
        break;
    }
}

static void tnic_ud_recv(tnic_qp_t *qp, const tnic_msg_hdr_t *hdr,
                         const void *data)
{
    tnic_rq_t *rq = (qp->srq != NULL) ? &qp->srq->rq : &qp->rq;
    uint8_t grh[TNIC_GRH_LEN];
    struct ibv_wc wc;
    int status;

    if (((qp->attr.qp_state != IBV_QPS_RTR) &&
         (qp->attr.qp_state != IBV_QPS_RTS)) ||
        (hdr->qkey != qp->attr.qkey)) {
        return;   /* a datagram nobody takes is lost */
    }
    if (!tnic_rq_pop(rq, &qp->rx_wqe)) {
        return;
    }
    memset(&wc, 0, sizeof(wc));
    wc.wr_id  = qp->rx_wqe.wr_id;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qp->qp.qp_num;
    wc.src_qp = hdr->src_qpn;
    wc.slid   = hdr->src_lid;
    if (TNIC_GRH_LEN + hdr->len >
        tnic_sgl_len(qp->rx_wqe.sg, qp->rx_wqe.num_sge)) {
        wc.status = IBV_WC_LOC_LEN_ERR;
        tnic_cq_push(qp->recv_cq, &wc, 1);
        return;
    }
    /* the first 40 bytes of a UD receive hold the GRH, when there is one */
    memset(grh, 0, sizeof(grh));
    status = tnic_sgl_copy(qp->pd, qp->rx_wqe.sg, qp->rx_wqe.num_sge, 0, grh,
                           sizeof(grh), 1);
    if (status == IBV_WC_SUCCESS) {
        status = tnic_sgl_copy(qp->pd, qp->rx_wqe.sg, qp->rx_wqe.num_sge,
                               TNIC_GRH_LEN, (void*)data, hdr->len, 1);
    }
    wc.status   = status;
    wc.byte_len = TNIC_GRH_LEN + hdr->len;
    if (hdr->flags & TNIC_MSG_F_GRH) {
        wc.wc_flags |= IBV_WC_GRH;
    }
    if (hdr->flags & TNIC_MSG_F_IMM) {
        wc.wc_flags |= IBV_WC_WITH_IMM;
        wc.imm_data  = hdr->imm;
    }
    tnic_cq_push(qp->recv_cq, &wc, !!(hdr->flags & TNIC_MSG_F_SOLICITED));
}

/* ------------------------------------------------------------------------
 * Progress: the inbox, the timers, the device thread
 */

int tnic_engine_progress(unsigned max_msgs)
{
    static uint8_t data[TNIC_SEG_MAX];
    tnic_msg_hdr_t hdr;
    tnic_qp_t *qp;
    unsigned n = 0;

    if (tnic_fabric_backlog_pending()) {
        tnic_fabric_flush_backlog();
    }
    while ((n < max_msgs) && tnic_fabric_recv(&hdr, data)) {
        ++n;
        if (tnic_fault_drop(hdr.src_slot, hdr.src_lid, hdr.dst_lid)) {
            tnic_fabric_note_drop();
            continue;
        }
        qp = tnic_qp_lookup(hdr.dst_qpn);
        if (qp == NULL) {
            /* no such QP: the packet is dropped */
            if (hdr.type == TNIC_MSG_REQ) {
                tnic_respond_lost(&hdr);
            }
            continue;
        }
        switch (hdr.type) {
        case TNIC_MSG_REQ:
            if (qp->qp.qp_type == IBV_QPT_RC) {
                tnic_responder_recv(qp, &hdr, data);
            }
            break;
        case TNIC_MSG_UD:
            if (qp->qp.qp_type == IBV_QPT_UD) {
                tnic_ud_recv(qp, &hdr, data);
            }
            break;
        default:
            tnic_requester_recv(qp, &hdr, data);
            tnic_engine_sq_kick(qp);
            break;
        }
    }
    return n;
}

static int tnic_peer_reachable(tnic_qp_t *qp)
{
    uint32_t slot = qp->attr.dest_qp_num >> 16;

    return tnic_fabric_peer_alive(slot) &&
           !tnic_fault_drop(slot, tnic_qp_lid(qp), qp->attr.ah_attr.dlid);
}

void tnic_engine_timers(void)
{
    uint64_t now = tnic_time_ns(), timeout;
    tnic_send_wqe_t *wqe;
    tnic_qp_t *qp, *next;

    for (qp = tnic_proc.qp_list; qp != NULL; qp = next) {
        next = qp->next;
        if ((qp->attr.qp_state != IBV_QPS_RTS) ||
            (qp->qp.qp_type != IBV_QPT_RC)) {
            continue;
        }
        if (qp->rnr_wait && (now >= qp->rnr_resend_ns)) {
            qp->rnr_wait = 0;
            tnic_engine_sq_kick(qp);
        }
        if (qp->sq_head == qp->sq_tx) {
            continue;
        }
        wqe     = tnic_sq_wqe(qp, qp->sq_head);
        timeout = tnic_qp_timeout_ns(qp);
        if ((wqe->state != TNIC_WQE_SENT) || (timeout == 0) ||
            (now < wqe->deadline_ns) || (now < qp->answered_ns + timeout)) {
            continue;
        }
        wqe->deadline_ns = now + timeout;
        /* Nothing is lost on a live peer's ring: a timeout counts as a
         * retry only when the peer is gone or cut off, or no QP there
         * took the request */
        if ((!tnic_peer_reachable(qp) || wqe->lost) &&
            (++wqe->retries > qp->attr.retry_cnt)) {
            tnic_wqe_done(qp, wqe, IBV_WC_RETRY_EXC_ERR);
            continue;
        }
        /* A NIC's retry when the timer expires: again from the oldest
         * request not answered, when it or its answer may be lost (the
         * drop fault lost a message since this try, the peer is gone or
         * cut off, or no QP took it); a request already executed is
         * answered again (tnic_responder_repeat). The rings lose nothing
         * else, and trying again a long message that is merely slow
         * would never end. An RNR wait resends by itself when it ends. */
        if (!qp->rnr_wait && (wqe->lost || !tnic_peer_reachable(qp) ||
                              (tnic_fabric_drops() != wqe->drops_at))) {
            ++qp->epoch;
            qp->sq_tx = qp->sq_head;
            tnic_engine_sq_kick(qp);
        }
    }
}

static int tnic_engine_has_timers(void)
{
    tnic_qp_t *qp;

    for (qp = tnic_proc.qp_list; qp != NULL; qp = qp->next) {
        if ((qp->attr.qp_state == IBV_QPS_RTS) &&
            (qp->rnr_wait || (qp->sq_head != qp->sq_tx))) {
            return 1;
        }
    }
    return tnic_fabric_backlog_pending();
}

static void *tnic_engine_thread(void *arg)
{
    uint64_t next_timers_ns = 0, now;
    unsigned idle = 0;
    int n, timers = 0;

    (void)arg;
    for (;;) {
        /* look without the lock first: an idle device must not contend
         * with the application's polls */
        now = tnic_time_ns();
        if (tnic_fabric_inbox_empty() && !tnic_fabric_backlog_pending() &&
            (now < next_timers_ns)) {
            /* a short spin, then sleep: the machine may have few cores */
            if (++idle < 32) {
                sched_yield();
            } else {
                tnic_fabric_wait(timers ? 200000ull : 50000000ull);
                idle = 0;
            }
            continue;
        }
        pthread_mutex_lock(&tnic_proc.lock);
        n = tnic_engine_progress(256);
        if (now >= next_timers_ns) {
            tnic_engine_timers();
            timers         = tnic_engine_has_timers();
            next_timers_ns = now + (timers ? 200000ull : 50000000ull);
        }
        pthread_mutex_unlock(&tnic_proc.lock);
        if (n > 0) {
            idle = 0;
        }
    }
    return NULL;
}

void tnic_engine_thread_start(void)
{
    pthread_attr_t attr;

    if (tnic_proc.thread_started) {
        return;
    }
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&tnic_proc.thread, &attr, tnic_engine_thread,
                       NULL) == 0) {
        tnic_proc.thread_started = 1;
    } else {
        TNIC_LOG("cannot start the device thread: %m");
    }
    pthread_attr_destroy(&attr);
}
