/*
 * rc_gdr endpoint: one RC queue pair connected to one peer QP.
 */

#ifndef UCT_RC_GDR_EP_H_
#define UCT_RC_GDR_EP_H_

#include "rc_gdr_iface.h"
#include "rc_gdr_addr.h"


/*
 * Immediate data of every SEND: the AM id, and the credits this side returns
 * to the peer (receives of the peer's messages it has consumed). A message
 * with CREDIT_ONLY carries no AM and consumes no credit itself.
 */
#define UCT_RC_GDR_IMM_AM_ID_MASK     UCS_MASK(UCT_RC_GDR_AM_ID_BITS)
#define UCT_RC_GDR_IMM_INTERNAL       UCS_BIT(6) /* the bounce lane's own
                                                    message, not an AM */
#define UCT_RC_GDR_IMM_CREDIT_ONLY    UCS_BIT(7)
#define UCT_RC_GDR_IMM_CREDITS_SHIFT  8
#define UCT_RC_GDR_IMM_CREDITS_MAX    0xffffu


enum {
    UCT_RC_GDR_EP_FLAG_CONNECTED  = UCS_BIT(0),
    UCT_RC_GDR_EP_FLAG_FENCE      = UCS_BIT(1), /* next read/atomic waits */
    UCT_RC_GDR_EP_FLAG_FAILED     = UCS_BIT(2),
    UCT_RC_GDR_EP_FLAG_DESTROYED  = UCS_BIT(3), /* zombie: user let go */
    UCT_RC_GDR_EP_FLAG_ERR_RAISED = UCS_BIT(4), /* error handler called */
    UCT_RC_GDR_EP_FLAG_FLUSH_READ = UCS_BIT(5), /* next flush reads first */
    UCT_RC_GDR_EP_FLAG_WRITTEN    = UCS_BIT(6), /* written since last read */
    UCT_RC_GDR_EP_FLAG_BUSY       = UCS_BIT(7), /* on iface->busy_eps */
    UCT_RC_GDR_EP_FLAG_DISPATCH   = UCS_BIT(8), /* a pending request's turn:
                                                   it may send past those
                                                   queued behind it */
    UCT_RC_GDR_EP_FLAG_COMPLETING = UCS_BIT(9)  /* its completions are being
                                                   called: a destroy waits
                                                   for their end */
};


typedef enum {
    UCT_RC_GDR_OP_SEND,       /* put/am/credit: nothing to do but complete */
    UCT_RC_GDR_OP_GET_BCOPY,  /* unpack the buffer into the user's */
    UCT_RC_GDR_OP_ATOMIC,     /* copy the fetched value to the user */
    UCT_RC_GDR_OP_FLUSH_READ, /* a flush's RDMA READ: nothing to deliver */
    UCT_RC_GDR_OP_FLUSH       /* no work request: completes at the head */
} uct_rc_gdr_op_type_t;


/*
 * One work request, or one flush waiting for those before it. Every work
 * request has a sequence number (ep->tx_posted); one that has something to
 * do at its end (a callback, a buffer, data to deliver) owns a descriptor
 * queued on its endpoint in posting order. Writes and sends nobody waits
 * for are posted unsignaled, one in every tx_cq_moderation reports
 * (rc_gdr_ep.inl, uct_rc_gdr_ep_post), and the short ones without a
 * descriptor at all (uct_rc_gdr_ep_post_bare: counted, not queued, as
 * rc_verbs posts them): RC completes a QP's sends in order, so a completion
 * retires every request up to its sequence number. A flush is a descriptor
 * without a work request that completes when those before it are retired
 * (behind a signaled request it posts when the last ones report nothing).
 * When writes since the last flush need a read to be visible
 * (rc_gdr_flush.h), the flush first posts that RDMA READ and queues itself
 * behind it.
 */
#define UCT_RC_GDR_WR_ID_BARE  1 /* wr_id of a work request without a
                                    descriptor: its sequence number << 1,
                                    this bit set (a descriptor's address
                                    never has it) */

typedef struct uct_rc_gdr_op {
    ucs_queue_elem_t          queue;      /* in ep->outstanding */
    uct_rc_gdr_ep_t           *ep;        /* whose: a completion's wr_id
                                             names its descriptor */
    uct_rc_gdr_op_type_t      type;
    uint32_t                  seq;        /* its work request's number; a
                                             flush's: the last one before */
    uint8_t                   signaled;   /* its work request reports */
    uint8_t                   internal;   /* comp is rc_gdr's own (the
                                             bounce lane's), not the user's */
    uct_completion_t          *comp;      /* may be NULL */
    uct_rc_gdr_buf_t          *buf;       /* released at completion */
    union {
        struct {
            uct_unpack_callback_t cb;
            void                  *arg;
            size_t                length;
        } get_bcopy;
        struct {
            void                  *result;
            size_t                size;
        } atomic;
    };
} uct_rc_gdr_op_t;



struct uct_rc_gdr_ep {
    uct_base_ep_t             super;
    struct ibv_qp             *qp;
    ucs_list_link_t           list;         /* iface->eps or ->zombies */
    ucs_list_link_t           busy_link;    /* iface->busy_eps */
    ucs_queue_head_t          outstanding;  /* uct_rc_gdr_op_t, post order */
    ucs_queue_head_t          pending;      /* uct_pending_req_t */
    unsigned                  sq_avail;
    unsigned                  unsignaled;   /* posted since the last
                                               signaled work request */
    int                       fc_credits;   /* messages we may still send */
    unsigned                  fc_to_return; /* peer's messages consumed */
    uint16_t                  flags;        /* UCT_RC_GDR_EP_FLAG_xx */
    uint8_t                   stall_sweeps; /* stall sweeps in a row that
                                               found no completion */
    ucs_status_t              status;       /* why it failed */
    uint32_t                  tx_posted;    /* work requests posted */
    uint32_t                  tx_retired;   /* ... and retired, in order:
                                               uct_rc_gdr_ep_in_flight() */
    uint32_t                  tx_done;      /* send completions, counted */
    uint32_t                  stall_seen;   /* tx_done at the last sweep */
    struct {
        uint64_t              remote_addr;  /* where the next flush reads */
        uint32_t              rkey;         /* its NIC key */
        uint32_t              length;       /* 1..UCT_RC_GDR_FLUSH_READ_MAX */
    } flush;
    uct_rc_gdr_bounce_ep_t    *bounce;      /* bounce lane state, or NULL */
    struct {
        uint32_t              qp_num;       /* the QP this one is connected */
        uct_rc_gdr_dev_addr_t dev;          /* to, and its port (valid with
                                               EP_FLAG_CONNECTED) */
    } peer;
};


/* Work requests posted and not yet retired by a completion */
static inline unsigned uct_rc_gdr_ep_in_flight(const uct_rc_gdr_ep_t *ep)
{
    return ep->tx_posted - ep->tx_retired;
}


UCS_CLASS_DECLARE_NEW_FUNC(uct_rc_gdr_ep_t, uct_ep_t, const uct_ep_params_t*);
void uct_rc_gdr_ep_destroy(uct_ep_h tl_ep);
int uct_rc_gdr_ep_check_stall(uct_rc_gdr_ep_t *ep, unsigned max_sweeps);
/* One line at warning level: flow control, queues, flags, the QP's state */
void uct_rc_gdr_ep_log_state(uct_rc_gdr_ep_t *ep);

ucs_status_t uct_rc_gdr_ep_get_address(uct_ep_h tl_ep, uct_ep_addr_t *addr);
ucs_status_t uct_rc_gdr_ep_connect_to_ep(uct_ep_h tl_ep,
                                         const uct_device_addr_t *dev_addr,
                                         const uct_ep_addr_t *ep_addr);
/* connect_to_ep with the lengths of the peer's addresses (UCX >= 1.16 gives
 * them in its parameters) */
ucs_status_t uct_rc_gdr_ep_connect_to_ep_len(uct_ep_h tl_ep,
                                             const uct_device_addr_t *dev_addr,
                                             size_t dev_addr_length,
                                             const uct_ep_addr_t *ep_addr,
                                             size_t ep_addr_length);
/* Whether the endpoint's QP is connected to that peer (either address may
 * be NULL: not compared). */
int uct_rc_gdr_ep_is_connected_to(uct_ep_h tl_ep,
                                  const uct_device_addr_t *dev_addr,
                                  const uct_ep_addr_t *ep_addr);

ucs_status_t uct_rc_gdr_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                                     unsigned length, uint64_t remote_addr,
                                     uct_rkey_t rkey);
ssize_t uct_rc_gdr_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb,
                                void *arg, uint64_t remote_addr,
                                uct_rkey_t rkey);
ucs_status_t uct_rc_gdr_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                     size_t iovcnt, uint64_t remote_addr,
                                     uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t uct_rc_gdr_ep_get_bcopy(uct_ep_h tl_ep,
                                     uct_unpack_callback_t unpack_cb,
                                     void *arg, size_t length,
                                     uint64_t remote_addr, uct_rkey_t rkey,
                                     uct_completion_t *comp);
ucs_status_t uct_rc_gdr_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                     size_t iovcnt, uint64_t remote_addr,
                                     uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t uct_rc_gdr_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t hdr,
                                    const void *buffer, unsigned length);
ssize_t uct_rc_gdr_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                               uct_pack_callback_t pack_cb, void *arg,
                               unsigned flags);
ucs_status_t uct_rc_gdr_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id,
                                    const void *header, unsigned header_length,
                                    const uct_iov_t *iov, size_t iovcnt,
                                    unsigned flags, uct_completion_t *comp);
ucs_status_t uct_rc_gdr_ep_atomic_cswap64(uct_ep_h tl_ep, uint64_t compare,
                                          uint64_t swap, uint64_t remote_addr,
                                          uct_rkey_t rkey, uint64_t *result,
                                          uct_completion_t *comp);
ucs_status_t uct_rc_gdr_ep_atomic64_post(uct_ep_h tl_ep, unsigned opcode,
                                         uint64_t value, uint64_t remote_addr,
                                         uct_rkey_t rkey);
ucs_status_t uct_rc_gdr_ep_atomic64_fetch(uct_ep_h tl_ep,
                                          uct_atomic_op_t opcode,
                                          uint64_t value, uint64_t *result,
                                          uint64_t remote_addr,
                                          uct_rkey_t rkey,
                                          uct_completion_t *comp);
ucs_status_t uct_rc_gdr_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req,
                                       unsigned flags);
void uct_rc_gdr_ep_pending_purge(uct_ep_h tl_ep,
                                 uct_pending_purge_callback_t cb, void *arg);
ucs_status_t uct_rc_gdr_ep_flush(uct_ep_h tl_ep, unsigned flags,
                                 uct_completion_t *comp);
ucs_status_t uct_rc_gdr_ep_fence(uct_ep_h tl_ep, unsigned flags);
ucs_status_t uct_rc_gdr_ep_check(uct_ep_h tl_ep, unsigned flags,
                                 uct_completion_t *comp);
ucs_status_t uct_rc_gdr_ep_invalidate(uct_ep_h tl_ep, unsigned flags);

/* Called from the interface's progress (rc_gdr_iface.c). */
void uct_rc_gdr_ep_send_completion(uct_rc_gdr_ep_t *ep, struct ibv_wc *wc);
void uct_rc_gdr_ep_recv_credits(uct_rc_gdr_ep_t *ep, unsigned credits);
void uct_rc_gdr_ep_dispatch_pending(uct_rc_gdr_ep_t *ep, unsigned credits_due);
void uct_rc_gdr_ep_grant_credits(uct_rc_gdr_ep_t *ep, unsigned credits_due);
void uct_rc_gdr_ep_free_zombie(uct_rc_gdr_ep_t *ep);

#endif
