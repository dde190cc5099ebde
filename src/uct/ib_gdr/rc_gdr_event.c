/*
 * rc_gdr interface events, with UCT's semantics (uct_iface_event_fd_get,
 * uct_iface_event_arm): what UCP's ucp_worker_get_efd / arm / wait and its
 * adaptive progress build on.
 *
 * Both completion queues of an interface report to one completion channel,
 * whose non-blocking fd is the interface's event fd. Arming:
 *
 *   1. drains the channel: events already got mean completions may wait in
 *      a queue, so the answer is UCS_ERR_BUSY (the caller progresses and
 *      arms again), as UCX's ib interfaces do;
 *   2. UCS_ERR_BUSY as well when progress has work that no completion will
 *      announce (a completion kept by an earlier arm, or one found in a
 *      send queue the last progress did not poll, an endpoint whose pending
 *      requests or owed credits can go now, bounce-lane copies);
 *   3. requests notification: UCT_EVENT_SEND_COMP arms the send queue, and
 *      the receive queue too, for every message (credit grants give blocked
 *      senders resources back; a bounce put completes at the target's ACK,
 *      a receive); UCT_EVENT_RECV arms the receive queue for every message,
 *      UCT_EVENT_RECV_SIG for solicited ones only;
 *   4. looks into each queue it armed once more: a completion written after
 *      the caller's last progress but before the request raises no event
 *      (verbs notifies only of later ones; rxe never reports it), so one
 *      found now is kept for progress, which takes it first
 *      (uct_rc_gdr_iface_event_poll_cq), and the answer is UCS_ERR_BUSY.
 *
 * Send-completion moderation (uct_rc_gdr_ep_post): writes and sends nobody
 * waits for are posted unsignaled and report nothing; every
 * tx_cq_moderation-th one is signaled and retires those before it. An
 * operation with a completion callback (and every read, atomic and flush
 * read) is always signaled, so its completion raises the SEND_COMP event
 * its caller waits for; an endpoint flush posts a signaled request behind
 * unsignaled ones. A full send queue always holds a signaled request (the
 * moderation is at most half the queue), so a pending request waiting for
 * room is woken by that completion.
 *
 * UCT_EVENT_RECV_SIG: active messages sent with UCT_SEND_FLAG_SIGNALED
 * carry IBV_SEND_SOLICITED (rc_gdr_ep.c), the others wake no one armed for
 * it alone.
 *
 * See file LICENSE for terms.
 */

#include "rc_gdr_event.h"
#include "rc_gdr_iface.h"
#include "rc_gdr_ep.h"

#include <ucs/debug/log.h>
#include <ucs/sys/math.h>
#include <ucs/sys/sys.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>


/* Events got from the channel are acknowledged in batches: each
 * ibv_ack_cq_events() takes the CQ's lock */
#define UCT_RC_GDR_EVENT_ACK_BATCH 32


static const char *uct_rc_gdr_cq_dir_names[] = {
    [UCT_RC_GDR_CQ_SEND] = "send",
    [UCT_RC_GDR_CQ_RECV] = "recv"
};


static struct ibv_cq *uct_rc_gdr_iface_event_cq(uct_rc_gdr_iface_t *iface,
                                                uct_rc_gdr_cq_dir_t dir)
{
    return (dir == UCT_RC_GDR_CQ_SEND) ? iface->send_cq : iface->recv_cq;
}


ucs_status_t uct_rc_gdr_iface_event_init(uct_rc_gdr_iface_t *iface)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(iface->super.md, uct_rc_gdr_md_t);
    uct_rc_gdr_iface_event_t *event = &iface->event;
    ucs_status_t status;

    memset(event, 0, sizeof(*event));
    event->channel = ibv_create_comp_channel(md->ibv_ctx);
    if (event->channel == NULL) {
        ucs_error("rc_gdr: ibv_create_comp_channel(%s) failed: %m",
                  md->name);
        return UCS_ERR_IO_ERROR;
    }

    /* an arm drains it until EAGAIN */
    status = ucs_sys_fcntl_modfl(event->channel->fd, O_NONBLOCK, 0);
    if (status != UCS_OK) {
        goto err_destroy_channel;
    }

    return UCS_OK;

err_destroy_channel:
    ibv_destroy_comp_channel(event->channel);
    event->channel = NULL;
    return status;
}


static void uct_rc_gdr_iface_event_ack(uct_rc_gdr_iface_t *iface,
                                       uct_rc_gdr_cq_dir_t dir)
{
    uct_rc_gdr_iface_event_t *event = &iface->event;

    if (event->unacked[dir] > 0) {
        ibv_ack_cq_events(uct_rc_gdr_iface_event_cq(iface, dir),
                          event->unacked[dir]);
        event->unacked[dir] = 0;
    }
}


void uct_rc_gdr_iface_event_ack_all(uct_rc_gdr_iface_t *iface)
{
    uct_rc_gdr_iface_event_ack(iface, UCT_RC_GDR_CQ_SEND);
    uct_rc_gdr_iface_event_ack(iface, UCT_RC_GDR_CQ_RECV);
}


void uct_rc_gdr_iface_event_cleanup(uct_rc_gdr_iface_t *iface)
{
    int ret;

    ret = ibv_destroy_comp_channel(iface->event.channel);
    if (ret != 0) {
        ucs_warn("rc_gdr: ibv_destroy_comp_channel() failed: %s",
                 strerror(ret));
    }
}


ucs_status_t uct_rc_gdr_iface_event_fd_get(uct_iface_h tl_iface, int *fd_p)
{
    uct_rc_gdr_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_gdr_iface_t);

    *fd_p = iface->event.channel->fd;
    return UCS_OK;
}


int uct_rc_gdr_iface_event_unstash(uct_rc_gdr_iface_event_t *event,
                                   uct_rc_gdr_cq_dir_t dir, struct ibv_cq *cq,
                                   int max, struct ibv_wc *wcs)
{
    int num_wcs;

    wcs[0]              = event->stash[dir];
    event->stashed[dir] = 0;
    if (max <= 1) {
        return 1;
    }

    num_wcs = ibv_poll_cq(cq, max - 1, wcs + 1);
    return 1 + ucs_max(num_wcs, 0);
}


/*
 * Takes every event the channel holds. UCS_ERR_BUSY if there was one: the
 * queue it names may hold completions progress has not seen.
 */
static ucs_status_t uct_rc_gdr_iface_event_drain(uct_rc_gdr_iface_t *iface)
{
    uct_rc_gdr_iface_event_t *event = &iface->event;
    unsigned count                  = 0;
    uct_rc_gdr_cq_dir_t dir;
    struct ibv_cq *cq;
    void *cq_context;

    while (ibv_get_cq_event(event->channel, &cq, &cq_context) == 0) {
        ++count;
        if (cq == iface->send_cq) {
            dir = UCT_RC_GDR_CQ_SEND;
        } else if (cq == iface->recv_cq) {
            dir = UCT_RC_GDR_CQ_RECV;
        } else {
            ucs_error("rc_gdr: event of an unknown completion queue %p", cq);
            ibv_ack_cq_events(cq, 1);
            continue;
        }

        if (++event->unacked[dir] >= UCT_RC_GDR_EVENT_ACK_BATCH) {
            uct_rc_gdr_iface_event_ack(iface, dir);
        }
    }

    if ((errno != EAGAIN) && (errno != EWOULDBLOCK)) {
        ucs_error("rc_gdr: ibv_get_cq_event(fd %d) failed: %m",
                  event->channel->fd);
        return UCS_ERR_IO_ERROR;
    }

    if (count > 0) {
        ucs_trace_data("rc_gdr: iface %p arm: %u events, busy", iface, count);
        return UCS_ERR_BUSY;
    }
    return UCS_OK;
}


/*
 * Whether the endpoint could post a work request now: the resources that
 * uct_rc_gdr_ep_check_tx() checks (rc_gdr_ep.inl), with a credit when asked.
 */
static int uct_rc_gdr_iface_event_ep_can_send(uct_rc_gdr_iface_t *iface,
                                              uct_rc_gdr_ep_t *ep,
                                              int needs_credit)
{
    return !(ep->flags & (UCT_RC_GDR_EP_FLAG_FAILED |
                          UCT_RC_GDR_EP_FLAG_DESTROYED)) &&
           (ep->flags & UCT_RC_GDR_EP_FLAG_CONNECTED) &&
           (ep->sq_avail > 0) && (iface->tx_cq_avail > 0) &&
           (!needs_credit || (ep->fc_credits > 0));
}


/* Takes one completion of the queue, if there is one, and keeps it for
 * progress, which takes it first: 1 if kept, 0 if none, -1 on error. */
static int uct_rc_gdr_iface_event_keep(uct_rc_gdr_iface_t *iface,
                                       uct_rc_gdr_cq_dir_t dir)
{
    uct_rc_gdr_iface_event_t *event = &iface->event;
    int ret;

    ucs_assert(!event->stashed[dir]);
    ret = ibv_poll_cq(uct_rc_gdr_iface_event_cq(iface, dir), 1,
                      &event->stash[dir]);
    if (ret < 0) {
        ucs_error("rc_gdr: ibv_poll_cq(%s) failed: %d",
                  uct_rc_gdr_cq_dir_names[dir], ret);
        return -1;
    }

    event->stashed[dir] = (ret > 0);
    return ret > 0;
}


/*
 * Work the next progress would do although no completion announces it:
 * after the caller's progress this is only what happened since (an
 * endpoint connected under queued requests, or an arm kept a completion).
 */
static int uct_rc_gdr_iface_event_has_work(uct_rc_gdr_iface_t *iface)
{
    unsigned credits_due = iface->config.fc_grant_idle;
    uct_rc_gdr_ep_t *ep;

    if (iface->event.stashed[UCT_RC_GDR_CQ_SEND] ||
        iface->event.stashed[UCT_RC_GDR_CQ_RECV]) {
        return 1;
    }

    /* A send queue the last progress did not poll may hold completions
     * from before it, which raise no event: one is kept for progress (an
     * error too: progress meets it again and reports it) */
    if (iface->tx_poll_skipped &&
        (uct_rc_gdr_iface_event_keep(iface, UCT_RC_GDR_CQ_SEND) != 0)) {
        return 1;
    }

    /* Progress dispatches these endpoints every time. A pending request is
     * dispatchable by the test pending_add refuses to queue with (it may
     * need a credit); credits owed go out in a message of their own. */
    ucs_list_for_each(ep, &iface->busy_eps, busy_link) {
        if (!ucs_queue_is_empty(&ep->pending) &&
            uct_rc_gdr_iface_event_ep_can_send(iface, ep, 1) &&
            !uct_rc_gdr_bounce_ep_blocked(ep)) {
            return 1;
        }

        if ((ep->fc_to_return >= credits_due) &&
            uct_rc_gdr_iface_event_ep_can_send(iface, ep, 0)) {
            return 1;
        }
    }

    /* The bounce lane's staging copies are CUDA work polled by progress,
     * which no completion queue reports; the staging buffers they use are
     * the lane's counter of work in flight (as of the last progress). A
     * bounce transfer waiting for its peer is woken by the peer's message.
     * Receive buffers need nothing: progress reposts them behind receive
     * completions, and those raise events. */
    return iface->stats.bounce_bufs_in_use > 0;
}


/* Requests an event at the queue's next completion (solicited only: at
 * its next solicited receive), then looks for one written before. */
static ucs_status_t uct_rc_gdr_iface_event_arm_cq(uct_rc_gdr_iface_t *iface,
                                                  uct_rc_gdr_cq_dir_t dir,
                                                  int solicited_only)
{
    struct ibv_cq *cq = uct_rc_gdr_iface_event_cq(iface, dir);
    int ret;

    ret = ibv_req_notify_cq(cq, solicited_only);
    if (ret != 0) {
        ucs_error("rc_gdr: ibv_req_notify_cq(%s, solicited_only=%d) failed: "
                  "%s", uct_rc_gdr_cq_dir_names[dir], solicited_only,
                  strerror(ret));
        return UCS_ERR_IO_ERROR;
    }

    ret = uct_rc_gdr_iface_event_keep(iface, dir);
    if (ret < 0) {
        return UCS_ERR_IO_ERROR;
    } else if (ret > 0) {
        ucs_trace_data("rc_gdr: iface %p arm: a %s completion came before "
                       "the request, busy", iface,
                       uct_rc_gdr_cq_dir_names[dir]);
        return UCS_ERR_BUSY;
    }

    return UCS_OK;
}


ucs_status_t uct_rc_gdr_iface_event_arm(uct_iface_h tl_iface, unsigned events)
{
    uct_rc_gdr_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_gdr_iface_t);
    ucs_status_t status, cq_status;
    int recv_all, recv_solicited;

    status = uct_rc_gdr_iface_event_drain(iface);
    if (status != UCS_OK) {
        return status;
    }

    if (uct_rc_gdr_iface_event_has_work(iface)) {
        ucs_trace_data("rc_gdr: iface %p arm: progress has work, busy",
                       iface);
        return UCS_ERR_BUSY;
    }

    recv_all       = !!(events & (UCT_EVENT_RECV | UCT_EVENT_SEND_COMP));
    recv_solicited = !!(events & UCT_EVENT_RECV_SIG);

    /* Both queues are armed even when the first already has a completion:
     * the answer is BUSY then, and the next arm drains what either raised */
    if (events & UCT_EVENT_SEND_COMP) {
        cq_status = uct_rc_gdr_iface_event_arm_cq(iface, UCT_RC_GDR_CQ_SEND,
                                                  0);
        if (UCS_STATUS_IS_ERR(cq_status) && (cq_status != UCS_ERR_BUSY)) {
            return cq_status;
        }
        status = cq_status;
    }

    if (recv_all || recv_solicited) {
        cq_status = uct_rc_gdr_iface_event_arm_cq(iface, UCT_RC_GDR_CQ_RECV,
                                                  !recv_all);
        if (UCS_STATUS_IS_ERR(cq_status) && (cq_status != UCS_ERR_BUSY)) {
            return cq_status;
        }
        if (status == UCS_OK) {
            status = cq_status;
        }
    }

    return status;
}
