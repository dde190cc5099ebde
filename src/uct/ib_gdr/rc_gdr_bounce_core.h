/**
 * rc_gdr bounce lane, core layer (rc_gdr_bounce_core.c): the lane's objects,
 * the message format every layer reads, and what the core offers: knobs,
 * state, CUDA contexts, staging engines, statistics. The endpoint and the
 * interface see rc_gdr_bounce.h only.
 *
 * Layers, each file calling only those below it, each with a header that
 * includes only the one below (contrib/check-circles.sh holds CI to it):
 *
 *   rc_gdr_bounce.c            top: the dispatcher of received messages,
 *                              progress (timeouts, a dead endpoint's sweep,
 *                              queued messages, waiting gets), open/close
 *   rc_gdr_bounce_initiator.c  roles: the endpoint's operations and the
 *   rc_gdr_bounce_target.c     peer's replies; the peer's puts and gets
 *                              (rc_gdr_bounce_initiator.h, _target.h)
 *   rc_gdr_bounce_xfer.c       transfers: their end, the flush barrier, the
 *                              staging engine's chunks on the wire
 *                              (rc_gdr_bounce_xfer.h)
 *   rc_gdr_bounce_wire.c       wire units: internal messages in order, one
 *                              completion per unit (rc_gdr_bounce_wire.h)
 *   rc_gdr_bounce_core.c       core: knobs, state, CUDA contexts, staging
 *                              engines, statistics (this header)
 *
 * Below them all: the endpoint's posting layer (rc_gdr_ep.inl), the staging
 * engine (rc_gdr_stage.h), the md, CUDA. The endpoint, above them all, calls
 * the entry points of rc_gdr_bounce.h wherever they live. What comes up
 * arrives through callbacks: a wire unit reports through the function its
 * maker stored in it, the engine through the stage ops its transfer gave,
 * the interface through the lane ops (uct_rc_gdr_iface_lane_ops_t). The
 * wire layer reads and advances the message state of the transfer its unit
 * carries (next message index, deadline, last message sent): data, never a
 * call.
 *
 * Objects, and who owns what:
 *
 *   bounce iface   one per interface: the staging pool (made at the first
 *                  transfer that stages), one staging engine per GPU (its
 *                  primary context retained), the transfers by id;
 *   bounce ep      one per endpoint that used the lane, either side: its
 *                  initiator transfers in start order (flush barriers count
 *                  them), the gets it serves as a target, its queue of
 *                  internal messages, the state of the put arriving;
 *   transfer       one put/get (initiator) or one served get (target); ends
 *                  when its parts have ended (refs: the staging engine's
 *                  transfer, a message run, the reply awaited from the peer);
 *   wire unit      what one completion reports on: one RDMA work request of
 *                  a staged chunk, or a run of internal messages (a chunk's
 *                  data, an ACK, a GET_REQ); its uct_completion_t is the
 *                  op->comp of each of its work requests.
 *
 * The staging engine calls post() for chunk k after its D2H copy (put) or to
 * bring it in (get); post() posts the RDMA work request at once, or queues a
 * run of messages on the endpoint. Queued messages go out in order (one
 * transfer's messages are never interleaved with another's, so the target
 * needs one "put arriving" state per endpoint) as credits and send queue
 * allow, from the interface's progress. Nothing here calls a user callback,
 * or the engine's wire_done(), from inside a UCT operation or post().
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_RC_GDR_BOUNCE_CORE_H_
#define UCT_RC_GDR_BOUNCE_CORE_H_

#include "rc_gdr_log.h"
#include "rc_gdr_bounce.h"
#include "rc_gdr_ep.inl"
#include "rc_gdr_stage.h"
#include "rc_gdr_cuda.h"

#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/list.h>
#include <ucs/time/time.h>


/* Initiator transfers per endpoint; a target serves as many gets */
#define UCT_RC_GDR_BOUNCE_EP_MAX_XFERS   64
/* A transfer waiting for its peer with nothing posted probes the peer this
 * often, so that a dead peer is found by the QP's own timeout. */
#define UCT_RC_GDR_BOUNCE_PROBE_INTERVAL 0.1 /* seconds */
#define UCT_RC_GDR_BOUNCE_CHUNK_SIZE_MAX (1ul << 30)
/* Replies (ACKs) waiting for credits on one endpoint. A peer of this build
 * has at most UCT_RC_GDR_BOUNCE_EP_MAX_XFERS transfers waiting for a reply;
 * past that it asked for more than the protocol allows, and what does not
 * fit is dropped (counted): a peer that never returns credits cannot make
 * the target's memory grow. */
#define UCT_RC_GDR_BOUNCE_EP_MAX_ACKS    UCT_RC_GDR_BOUNCE_EP_MAX_XFERS


/*
 * Internal messages: a SEND_WITH_IMM with UCT_RC_GDR_IMM_INTERNAL
 * (rc_gdr_ep.h), this header, then the payload. Both peers run this build
 * (host byte order); every field a peer sends is checked before use. The
 * wire layer writes it, the roles and the dispatcher read it, the core
 * sizes the payload of a message by it.
 */
enum {
    UCT_RC_GDR_BOUNCE_MSG_PUT_DATA = 1, /* payload for [addr, +length) of the
                                           target registration `token` */
    UCT_RC_GDR_BOUNCE_MSG_GET_REQ  = 2, /* send [addr, +length) of `token` */
    UCT_RC_GDR_BOUNCE_MSG_GET_DATA = 3, /* payload for offset `addr` of the
                                           get `xfer_id` */
    UCT_RC_GDR_BOUNCE_MSG_ACK      = 4  /* transfer `xfer_id` ended at the
                                           target with `status` */
};

#define UCT_RC_GDR_BOUNCE_MSG_FLAG_LAST UCS_BIT(0) /* last PUT_DATA */

typedef struct UCS_S_PACKED uct_rc_gdr_bounce_hdr {
    uint8_t  type;      /* UCT_RC_GDR_BOUNCE_MSG_xx */
    uint8_t  flags;     /* UCT_RC_GDR_BOUNCE_MSG_FLAG_xx */
    uint16_t reserved;
    int32_t  status;    /* ACK: ucs_status_t */
    uint32_t xfer_id;   /* the initiator's transfer */
    uint32_t chunk;     /* PUT_DATA: message index in the transfer, from 0 */
    uint32_t token;     /* PUT_DATA, GET_REQ: target registration, the
                           rkey's key bits */
    uint32_t token_hi;  /* and its token_hi (rc_gdr_addr.h) */
    uint64_t addr;      /* PUT_DATA, GET_REQ: target address;
                           GET_DATA: offset in the transfer */
    uint64_t length;    /* GET_REQ: bytes asked; else payload bytes */
} uct_rc_gdr_bounce_hdr_t;


typedef enum {
    UCT_RC_GDR_BOUNCE_PUT_STAGED, /* D2H into staging, RDMA WRITE */
    UCT_RC_GDR_BOUNCE_GET_STAGED, /* RDMA READ into staging, H2D */
    UCT_RC_GDR_BOUNCE_PUT_MSG,    /* PUT_DATA messages, then the ACK */
    UCT_RC_GDR_BOUNCE_GET_MSG,    /* GET_REQ, then GET_DATA messages */
    UCT_RC_GDR_BOUNCE_SERVE_GET   /* target: D2H, GET_DATA messages */
} uct_rc_gdr_bounce_kind_t;


typedef struct uct_rc_gdr_bounce_xfer uct_rc_gdr_bounce_xfer_t;


struct uct_rc_gdr_bounce_xfer {
    ucs_list_link_t          list;        /* bep->xfers, ->serving or
                                             ->pending_gets */
    uct_rc_gdr_bounce_ep_t   *bep;
    uct_completion_t         *comp;       /* the user's, may be NULL */
    uct_rc_gdr_stage_xfer_t  *stage;      /* while the engine has it */
    uint64_t                 seq;         /* start order on the endpoint */
    uint32_t                 id;          /* initiator's id (the peer's, for
                                             SERVE_GET) */
    uint8_t                  kind;        /* uct_rc_gdr_bounce_kind_t */
    uint8_t                  awaiting;    /* a reply of the peer is due */
    uint8_t                  last_sent;   /* PUT_MSG: the LAST message */
    int8_t                   gpu;         /* of the local memory, -1 host */
    unsigned                 refs;        /* parts still running */
    ucs_status_t             status;      /* first error */
    char                     *local;      /* SERVE_GET: the GPU source */
    size_t                   length;
    size_t                   received;    /* GET_MSG: payload bytes */
    uint64_t                 remote_addr;
    uct_rc_gdr_rkey_t        rkey;        /* rkey field: NIC key or token */
    uint32_t                 next_msg;    /* PUT_MSG: next PUT_DATA index */
    uint64_t                 token;       /* SERVE_GET: what the peer named */
    uint64_t                 stamp;       /* SERVE_GET: the registration the
                                             first check found; each chunk
                                             is checked against it again */
    ucs_time_t               deadline;    /* awaiting: the peer must have
                                             answered, or taken a message,
                                             by then; SERVE_GET: taken the
                                             data queued */
    void                     *owned;      /* heap copy freed at the end */
    uct_unpack_callback_t    unpack_cb;   /* get_bcopy, with `owned` */
    void                     *unpack_arg;
};


struct uct_rc_gdr_bounce_ep {
    ucs_list_link_t          list;        /* bounce->eps */
    uct_rc_gdr_ep_t          *ep;
    ucs_list_link_t          xfers;       /* initiator transfers, by seq */
    ucs_list_link_t          serving;     /* target: gets being answered */
    ucs_list_link_t          pending_gets;/* target: gets waiting for a
                                             staging buffer */
    ucs_list_link_t          wires;       /* every live wire unit */
    ucs_list_link_t          sendq;       /* wire units with messages to
                                             post, in order */
    ucs_list_link_t          flushes;     /* uct_rc_gdr_bounce_flush_t */
    uct_rc_gdr_bounce_xfer_t *put_open;   /* the put whose PUT_DATA
                                             messages go out now: one at a
                                             time, the target follows one */
    unsigned                 num_xfers;
    unsigned                 num_awaiting;
    unsigned                 num_served;  /* serving + pending_gets */
    unsigned                 num_acks;    /* ACKs queued, not yet posted */
    unsigned                 num_queued;  /* units in sendq */
    uint64_t                 next_seq;
    ucs_time_t               last_probe;
    ucs_time_t               last_timeout_check;
    int                      gone;        /* cleanup: no callbacks, no posts;
                                             freed when no lane call is on
                                             the stack (bounce->depth) */
    struct {                              /* target: the put arriving */
        uint32_t             id;
        uint32_t             next_chunk;
        ucs_status_t         status;
        int                  active;
    } rx;
};


KHASH_MAP_INIT_INT(uct_rc_gdr_bounce_xfers, uct_rc_gdr_bounce_xfer_t*);


struct uct_rc_gdr_bounce_iface {
    uct_rc_gdr_iface_t               *iface;
    uct_rc_gdr_md_t                  *md;
    uct_rc_gdr_bounce_config_t       config;
    size_t                           msg_max;   /* payload per message */
    uct_rc_gdr_stage_pool_t          *pool;
    int                              num_gpus;
    uct_rc_gdr_cuda_ctx_h            *ctxs;     /* retained, by ordinal */
    uct_rc_gdr_stage_engine_t        **engines; /* by ordinal */
    ucs_list_link_t                  eps;       /* uct_rc_gdr_bounce_ep_t */
    khash_t(uct_rc_gdr_bounce_xfers) xfers;     /* initiator's, by id */
    uint32_t                         next_id;
    int                              blocked;   /* refused for the lane's
                                                   own resources */
    uint64_t                         sync_staged_bytes;
    ucs_time_t                       timeout;   /* BOUNCE_TIMEOUT */
    unsigned                         ep_max_serving; /* served gets staging
                                                        at once per endpoint
                                                        (BOUNCE_EP_MAX_BUFS) */
    unsigned                         depth;     /* lane calls on the stack
                                                   that may call the user,
                                                   who may destroy an
                                                   endpoint */
    unsigned                         num_gone;  /* endpoints to free */
    unsigned                         events;    /* transfers ended since the
                                                   last progress */
    unsigned                         logged;    /* UCS_BIT(uct_rc_gdr_bounce_
                                                   log_t), the target's:
                                                   said once */
};


/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

static inline uct_rc_gdr_iface_t *
uct_rc_gdr_bounce_ep_iface(uct_rc_gdr_bounce_ep_t *bep)
{
    return uct_rc_gdr_ep_iface(bep->ep);
}


static inline int uct_rc_gdr_bounce_ep_is_dead(uct_rc_gdr_bounce_ep_t *bep)
{
    return bep->gone ||
           (bep->ep->flags & (UCT_RC_GDR_EP_FLAG_FAILED |
                              UCT_RC_GDR_EP_FLAG_DESTROYED));
}


/* Why nothing more goes out on a dead endpoint */
static inline ucs_status_t
uct_rc_gdr_bounce_ep_dead_status(uct_rc_gdr_bounce_ep_t *bep)
{
    return (!bep->gone && (bep->ep->flags & UCT_RC_GDR_EP_FLAG_FAILED)) ?
           bep->ep->status : UCS_ERR_CANCELED;
}


/* Around lane code that may call the user, who may destroy endpoints: their
 * lane state is freed when the outermost call returns (bep->gone until
 * then), so that no loop of the lane walks freed memory */
static inline void uct_rc_gdr_bounce_enter(uct_rc_gdr_bounce_iface_t *b)
{
    ++b->depth;
}

void uct_rc_gdr_bounce_leave(uct_rc_gdr_bounce_iface_t *b);


/* No user callback once the user let the endpoint go */
static inline int uct_rc_gdr_bounce_ep_user_gone(uct_rc_gdr_bounce_ep_t *bep)
{
    return bep->gone || (bep->ep->flags & UCT_RC_GDR_EP_FLAG_DESTROYED);
}


static inline uint32_t uct_rc_gdr_bounce_buf_lkey(uct_rc_gdr_stage_buf_t *buf)
{
    return ((struct ibv_mr*)buf->memh)->lkey;
}


/*
 * Core (rc_gdr_bounce_core.c): state, contexts, engines, statistics
 */

void uct_rc_gdr_bounce_update_stats(uct_rc_gdr_bounce_iface_t *b);

/** A synchronous host-to-GPU copy out of a receive buffer. */
ucs_status_t uct_rc_gdr_bounce_copy_h2d(uct_rc_gdr_bounce_iface_t *b,
                                        int gpu, void *dst, const void *src,
                                        size_t length);

/** The staging engine of a GPU (and the pool, at the first one). */
ucs_status_t uct_rc_gdr_bounce_engine(uct_rc_gdr_bounce_iface_t *b, int gpu,
                                      uct_rc_gdr_stage_engine_t **engine_p);

/** The lane's state of an endpoint, made at its first use. */
uct_rc_gdr_bounce_ep_t *uct_rc_gdr_bounce_ep_get(uct_rc_gdr_ep_t *ep);

/** The lane's state of an endpoint gone: freed now, or when the outermost
 *  lane call returns. */
void uct_rc_gdr_bounce_ep_release(uct_rc_gdr_bounce_iface_t *b,
                                  uct_rc_gdr_bounce_ep_t *bep);

/** The lane's state of an interface, from checked knobs. */
ucs_status_t
uct_rc_gdr_bounce_iface_create(uct_rc_gdr_iface_t *iface,
                               const uct_rc_gdr_bounce_config_t *config,
                               uct_rc_gdr_bounce_iface_t **b_p);

/** Engines, pool and contexts released; no endpoint state is left. */
void uct_rc_gdr_bounce_iface_destroy(uct_rc_gdr_bounce_iface_t *b);

#endif
