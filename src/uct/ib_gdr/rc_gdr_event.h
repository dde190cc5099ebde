/*
 * rc_gdr interface events: a completion channel under both completion
 * queues, its file descriptor, and UCT's arm semantics (rc_gdr_event.c).
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_RC_GDR_EVENT_H_
#define UCT_RC_GDR_EVENT_H_

#include <uct/api/uct.h>
#include <ucs/sys/compiler_def.h>

#include <infiniband/verbs.h>


struct uct_rc_gdr_iface;


/* The completion queues of an interface, as the event code counts them */
typedef enum {
    UCT_RC_GDR_CQ_SEND,
    UCT_RC_GDR_CQ_RECV,
    UCT_RC_GDR_CQ_LAST
} uct_rc_gdr_cq_dir_t;


typedef struct uct_rc_gdr_iface_event {
    struct ibv_comp_channel *channel;   /* both CQs report here; its fd is
                                           the interface's event fd */
    unsigned                unacked[UCT_RC_GDR_CQ_LAST]; /* events got from
                                           the channel, not yet acked */
    uint8_t                 stashed[UCT_RC_GDR_CQ_LAST]; /* stash[dir] holds
                                           a completion */
    struct ibv_wc           stash[UCT_RC_GDR_CQ_LAST]; /* found by an arm
                                           after it requested notification:
                                           progress takes it first */
} uct_rc_gdr_iface_event_t;


/** At interface open, before the CQs: the channel, non-blocking. */
ucs_status_t uct_rc_gdr_iface_event_init(struct uct_rc_gdr_iface *iface);

/** At interface close, before the CQs are destroyed: acknowledges every
 *  event got from the channel (ibv_destroy_cq waits for that). */
void uct_rc_gdr_iface_event_ack_all(struct uct_rc_gdr_iface *iface);

/** At interface close, after the CQs are destroyed. */
void uct_rc_gdr_iface_event_cleanup(struct uct_rc_gdr_iface *iface);

/** uct_iface_event_fd_get(): the channel's file descriptor. */
ucs_status_t uct_rc_gdr_iface_event_fd_get(uct_iface_h tl_iface, int *fd_p);

/** uct_iface_event_arm(): UCS_OK when the fd will be signaled by the next
 *  event of @a events, UCS_ERR_BUSY when progress has work to do first. */
ucs_status_t uct_rc_gdr_iface_event_arm(uct_iface_h tl_iface,
                                        unsigned events);

/** The slow path of uct_rc_gdr_iface_event_poll_cq(): the kept completion,
 *  then up to @a max - 1 from the queue. */
int uct_rc_gdr_iface_event_unstash(uct_rc_gdr_iface_event_t *event,
                                   uct_rc_gdr_cq_dir_t dir, struct ibv_cq *cq,
                                   int max, struct ibv_wc *wcs);


/**
 * ibv_poll_cq() for the interface's progress: the completion an arm found
 * (and kept) comes first, then the queue's, in the order the NIC wrote them.
 */
static UCS_F_ALWAYS_INLINE int
uct_rc_gdr_iface_event_poll_cq(uct_rc_gdr_iface_event_t *event,
                               uct_rc_gdr_cq_dir_t dir, struct ibv_cq *cq,
                               int max, struct ibv_wc *wcs)
{
    if (ucs_likely(!event->stashed[dir])) {
        return ibv_poll_cq(cq, max, wcs);
    }
    return uct_rc_gdr_iface_event_unstash(event, dir, cq, max, wcs);
}

#endif
