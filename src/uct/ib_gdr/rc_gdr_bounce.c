/**
 * rc_gdr bounce lane: put/get zcopy through pinned host memory when one
 * side's GPU memory has no NIC key. Overview in rc_gdr_bounce.h.
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

#include "rc_gdr_bounce.h"
#include "rc_gdr_ep.inl"
#include "rc_gdr_stage.h"
#include "rc_gdr_cuda.h"

#include <uct/base/uct_iov.inl>
#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/list.h>
#include <ucs/datastruct/mpool.inl>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/math.h>
#include <ucs/time/time.h>

#include <string.h>


/* Initiator transfers per endpoint; a target serves as many gets */
#define UCT_RC_GDR_BOUNCE_EP_MAX_XFERS   64
/* A transfer waiting for its peer with nothing posted probes the peer this
 * often, so that a dead peer is found by the QP's own timeout. */
#define UCT_RC_GDR_BOUNCE_PROBE_INTERVAL 0.1 /* seconds */
#define UCT_RC_GDR_BOUNCE_CHUNK_SIZE_MAX (1ul << 30)


ucs_config_field_t uct_rc_gdr_bounce_config_table[] = {
    {"BOUNCE_CHUNK_SIZE", UCT_RC_GDR_BOUNCE_CHUNK_SIZE_DEFAULT,
     "Host bounce lane (GPU memory without a NIC key): size of one pinned "
     "staging buffer, the unit in which GPU data is copied and sent; the copy "
     "of one chunk overlaps the network transfer of the one before. When the "
     "target memory has no NIC key the data travels in messages of at most "
     "SEG_SIZE bytes (header included) instead.",
     ucs_offsetof(uct_rc_gdr_bounce_config_t, chunk_size),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"BOUNCE_DEPTH", UCT_RC_GDR_BOUNCE_DEPTH_DEFAULT,
     "Host bounce lane: chunks of one transfer in flight at once (being "
     "copied or on the wire), 1..64.",
     ucs_offsetof(uct_rc_gdr_bounce_config_t, depth), UCS_CONFIG_TYPE_UINT},

    {"BOUNCE_POOL_SIZE", UCT_RC_GDR_BOUNCE_POOL_SIZE_DEFAULT,
     "Host bounce lane: pinned staging buffers per interface, allocated and "
     "registered with the NIC once, at the first transfer that needs them. "
     "When all are in use new transfers wait (UCS_ERR_NO_RESOURCE).",
     ucs_offsetof(uct_rc_gdr_bounce_config_t, pool_size),
     UCS_CONFIG_TYPE_UINT},

    {NULL}
};


/*
 * Internal messages: a SEND_WITH_IMM with UCT_RC_GDR_IMM_INTERNAL
 * (rc_gdr_ep.h), this header, then the payload. Both peers run this build
 * (host byte order); every field a peer sends is checked before use.
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
    uint32_t token;     /* PUT_DATA, GET_REQ: target registration */
    uint32_t reserved2;
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


/* What a wire unit's completion reports to */
typedef enum {
    UCT_RC_GDR_BOUNCE_REPORT_NONE,  /* an ACK: nobody waits for it */
    UCT_RC_GDR_BOUNCE_REPORT_STAGE, /* a staged chunk: the engine */
    UCT_RC_GDR_BOUNCE_REPORT_XFER   /* a part of a transfer */
} uct_rc_gdr_bounce_report_t;


typedef struct uct_rc_gdr_bounce_xfer uct_rc_gdr_bounce_xfer_t;


typedef struct uct_rc_gdr_bounce_wire {
    uct_completion_t         comp;        /* count: 1 while posting + work
                                             requests in flight */
    ucs_list_link_t          list;        /* bep->wires, while alive */
    ucs_list_link_t          sendq;       /* bep->sendq, while queued */
    uct_rc_gdr_bounce_ep_t   *bep;
    uct_rc_gdr_bounce_xfer_t *xfer;       /* NULL for an ACK */
    unsigned                 chunk;       /* REPORT_STAGE: engine's chunk */
    uint8_t                  report;      /* uct_rc_gdr_bounce_report_t */
    uint8_t                  queued;
    uint8_t                  last;        /* its last message ends a put */
    const char               *src;        /* message payload */
    uint32_t                 lkey;        /* of src; 0: host memory, copied
                                             into the transmit buffer */
    size_t                   length;      /* payload bytes */
    size_t                   posted;      /* payload bytes posted */
    ucs_status_t             post_status; /* a post failed for good */
    uct_rc_gdr_bounce_hdr_t  hdr;         /* template of its messages */
} uct_rc_gdr_bounce_wire_t;


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
    void                     *owned;      /* heap copy freed at the end */
    uct_unpack_callback_t    unpack_cb;   /* get_bcopy, with `owned` */
    void                     *unpack_arg;
};


/* The barrier part of an ep flush (see uct_rc_gdr_bounce_ep_flush) */
typedef struct uct_rc_gdr_bounce_flush {
    uct_completion_t         comp;        /* count: ep flush + barrier */
    ucs_list_link_t          list;        /* bep->flushes */
    uct_rc_gdr_bounce_ep_t   *bep;
    uct_completion_t         *user;
    uint64_t                 seq;         /* waits for transfers before */
    int                      barrier_passed;
} uct_rc_gdr_bounce_flush_t;


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
    uint64_t                 next_seq;
    ucs_time_t               last_probe;
    int                      gone;        /* cleanup: no callbacks, no posts */
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
    unsigned                         events;    /* transfers ended since the
                                                   last progress */
};


static void uct_rc_gdr_bounce_xfer_put_ref(uct_rc_gdr_bounce_xfer_t *xfer,
                                           ucs_status_t status);
static void uct_rc_gdr_bounce_ep_pump(uct_rc_gdr_bounce_ep_t *bep);


/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

static inline uct_rc_gdr_iface_t *
uct_rc_gdr_bounce_ep_iface(uct_rc_gdr_bounce_ep_t *bep)
{
    return ucs_derived_of(bep->ep->super.super.iface, uct_rc_gdr_iface_t);
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
    return (bep->ep->flags & UCT_RC_GDR_EP_FLAG_FAILED) ? bep->ep->status :
           UCS_ERR_CANCELED;
}


/* No user callback once the user let the endpoint go */
static inline int uct_rc_gdr_bounce_ep_user_gone(uct_rc_gdr_bounce_ep_t *bep)
{
    return bep->gone || (bep->ep->flags & UCT_RC_GDR_EP_FLAG_DESTROYED);
}


static void uct_rc_gdr_bounce_update_stats(uct_rc_gdr_bounce_iface_t *b)
{
    uct_rc_gdr_iface_stats_t *stats = &b->iface->stats;
    uct_rc_gdr_stage_pool_stats_t pool_stats;

    stats->bounce_staged_bytes = b->sync_staged_bytes;
    if (b->pool != NULL) {
        uct_rc_gdr_stage_pool_stats(b->pool, &pool_stats);
        stats->bounce_staged_bytes += pool_stats.staged_bytes;
        stats->bounce_bufs_in_use   = pool_stats.in_use;
        stats->bounce_bufs_max      = pool_stats.in_use_max;
    }
}


/* The primary context of a GPU, retained until the interface closes */
static ucs_status_t uct_rc_gdr_bounce_ctx(uct_rc_gdr_bounce_iface_t *b,
                                          int gpu,
                                          uct_rc_gdr_cuda_ctx_h *ctx_p)
{
    ucs_status_t status;

    if ((gpu < 0) || (gpu >= b->num_gpus)) {
        ucs_error("rc_gdr: %s: bounce lane for GPU %d, which the md does not "
                  "know (%d GPUs)", b->md->name, gpu, b->num_gpus);
        return UCS_ERR_NO_DEVICE;
    }

    if (b->ctxs[gpu] == NULL) {
        status = uct_rc_gdr_cuda_ctx_retain(gpu, &b->ctxs[gpu]);
        if (status != UCS_OK) {
            ucs_error("rc_gdr: %s: primary context of GPU %d: %s",
                      b->md->name, gpu, ucs_status_string(status));
            b->ctxs[gpu] = NULL;
            return status;
        }
    }

    *ctx_p = b->ctxs[gpu];
    return UCS_OK;
}


static uct_rc_gdr_cuda_ctx_h
uct_rc_gdr_bounce_ctx_push(uct_rc_gdr_cuda_ctx_h ctx)
{
    uct_rc_gdr_cuda_ctx_h prev;

    if (uct_rc_gdr_cuda_ctx_get_current(&prev) != UCS_OK) {
        prev = NULL;
    }
    if (prev != ctx) {
        uct_rc_gdr_cuda_ctx_set_current(ctx);
    }
    return prev;
}


static void uct_rc_gdr_bounce_ctx_pop(uct_rc_gdr_cuda_ctx_h ctx,
                                      uct_rc_gdr_cuda_ctx_h prev)
{
    if (prev != ctx) {
        uct_rc_gdr_cuda_ctx_set_current(prev);
    }
}


/* A synchronous host-to-GPU copy out of a receive buffer (messages are at
 * most SEG_SIZE: a staged pipeline would not pay off) */
static ucs_status_t uct_rc_gdr_bounce_copy_h2d(uct_rc_gdr_bounce_iface_t *b,
                                               int gpu, void *dst,
                                               const void *src, size_t length)
{
    uct_rc_gdr_cuda_ctx_h ctx, prev;
    ucs_status_t status;

    status = uct_rc_gdr_bounce_ctx(b, gpu, &ctx);
    if (status != UCS_OK) {
        return status;
    }

    prev   = uct_rc_gdr_bounce_ctx_push(ctx);
    status = uct_rc_gdr_cuda_memcpy_htod(dst, src, length);
    uct_rc_gdr_bounce_ctx_pop(ctx, prev);
    if (status != UCS_OK) {
        ucs_error("rc_gdr: bounce lane: copy of %zu bytes to GPU %d at %p "
                  "failed: %s", length, gpu, dst, ucs_status_string(status));
        return status;
    }

    b->sync_staged_bytes += length;
    return UCS_OK;
}


/* What a peer names: a live token, the range inside its registration
 * (checked by the md). Nothing is touched before this passed. */
static ucs_status_t uct_rc_gdr_bounce_target(uct_rc_gdr_bounce_iface_t *b,
                                             uint32_t token, uint64_t address,
                                             uint64_t length, int *gpu_p)
{
    return uct_rc_gdr_md_bounce_target(b->md, token, address, length, gpu_p);
}


static ucs_status_t uct_rc_gdr_bounce_buf_reg(void *arg, void *addr,
                                              size_t length, void **memh_p)
{
    struct ibv_mr *mr;
    ucs_status_t status;

    status = uct_rc_gdr_md_reg_internal(arg, addr, length, &mr);
    if (status == UCS_OK) {
        *memh_p = mr;
    }
    return status;
}


static void uct_rc_gdr_bounce_buf_dereg(void *arg, void *addr, size_t length,
                                        void *memh)
{
    int ret = ibv_dereg_mr(memh);

    if (ret != 0) {
        ucs_warn("rc_gdr: ibv_dereg_mr(staging buffer %p) failed: %s", addr,
                 strerror(ret));
    }
}


static const uct_rc_gdr_stage_reg_ops_t uct_rc_gdr_bounce_reg_ops = {
    .reg   = uct_rc_gdr_bounce_buf_reg,
    .dereg = uct_rc_gdr_bounce_buf_dereg
};


static inline uint32_t uct_rc_gdr_bounce_buf_lkey(uct_rc_gdr_stage_buf_t *buf)
{
    return ((struct ibv_mr*)buf->memh)->lkey;
}


/* The staging engine of a GPU, and the pool at the first one */
static ucs_status_t
uct_rc_gdr_bounce_engine(uct_rc_gdr_bounce_iface_t *b, int gpu,
                         uct_rc_gdr_stage_engine_t **engine_p)
{
    uct_rc_gdr_stage_pool_params_t pool_params;
    uct_rc_gdr_stage_engine_params_t params;
    uct_rc_gdr_cuda_ctx_h ctx, prev;
    ucs_status_t status;

    status = uct_rc_gdr_bounce_ctx(b, gpu, &ctx);
    if (status != UCS_OK) {
        return status;
    }

    if (b->engines[gpu] != NULL) {
        *engine_p = b->engines[gpu];
        return UCS_OK;
    }

    prev = uct_rc_gdr_bounce_ctx_push(ctx);
    if (b->pool == NULL) {
        pool_params.chunk_size = b->config.chunk_size;
        pool_params.pool_size  = b->config.pool_size;
        pool_params.reg_ops    = &uct_rc_gdr_bounce_reg_ops;
        pool_params.reg_arg    = b->md;
        pool_params.name       = "rc_gdr_bounce";
        status = uct_rc_gdr_stage_pool_create(&pool_params, &b->pool);
        if (status != UCS_OK) {
            ucs_error("rc_gdr: %s: staging pool of %u x %zu bytes: %s",
                      b->md->name, b->config.pool_size, b->config.chunk_size,
                      ucs_status_string(status));
            goto out;
        }
    }

    params.pool        = b->pool;
    params.depth       = b->config.depth;
    params.num_streams = 1;
    params.ctx         = ctx;
    params.name        = "rc_gdr_bounce";
    status = uct_rc_gdr_stage_engine_create(&params, &b->engines[gpu]);
    if (status != UCS_OK) {
        ucs_error("rc_gdr: %s: staging engine of GPU %d: %s", b->md->name,
                  gpu, ucs_status_string(status));
        goto out;
    }

    ucs_debug("rc_gdr: %s: bounce lane for GPU %d: %u buffers of %zu bytes, "
              "depth %u", b->md->name, gpu, b->config.pool_size,
              b->config.chunk_size, b->config.depth);
    *engine_p = b->engines[gpu];
out:
    uct_rc_gdr_bounce_ctx_pop(ctx, prev);
    return status;
}


static uct_rc_gdr_bounce_ep_t *uct_rc_gdr_bounce_ep_get(uct_rc_gdr_ep_t *ep)
{
    uct_rc_gdr_iface_t *iface = ucs_derived_of(ep->super.super.iface,
                                               uct_rc_gdr_iface_t);
    uct_rc_gdr_bounce_ep_t *bep;

    if (ep->bounce != NULL) {
        return ep->bounce;
    }

    bep = ucs_calloc(1, sizeof(*bep), "rc_gdr_bounce_ep");
    if (bep == NULL) {
        ucs_error("rc_gdr: failed to allocate bounce lane endpoint state");
        return NULL;
    }

    bep->ep = ep;
    ucs_list_head_init(&bep->xfers);
    ucs_list_head_init(&bep->serving);
    ucs_list_head_init(&bep->pending_gets);
    ucs_list_head_init(&bep->wires);
    ucs_list_head_init(&bep->sendq);
    ucs_list_head_init(&bep->flushes);
    bep->last_probe = ucs_get_time();
    ucs_list_add_tail(&iface->bounce->eps, &bep->list);
    ep->bounce = bep;
    return bep;
}


/* ------------------------------------------------------------------------
 * Wire units
 * ------------------------------------------------------------------------ */

static void uct_rc_gdr_bounce_wire_done(uct_completion_t *self);

static uct_rc_gdr_bounce_wire_t *
uct_rc_gdr_bounce_wire_new(uct_rc_gdr_bounce_ep_t *bep,
                           uct_rc_gdr_bounce_xfer_t *xfer, uint8_t report,
                           uint8_t type)
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
    wire->report       = report;
    wire->post_status  = UCS_OK;
    wire->hdr.type     = type;
    if (xfer != NULL) {
        wire->hdr.xfer_id = xfer->id;
    }
    ucs_list_add_tail(&bep->wires, &wire->list);
    return wire;
}


static void uct_rc_gdr_bounce_wire_free(uct_rc_gdr_bounce_wire_t *wire)
{
    if (wire->queued) {
        ucs_list_del(&wire->sendq);
    }
    ucs_list_del(&wire->list);
    ucs_free(wire);
}


static void uct_rc_gdr_bounce_wire_enqueue(uct_rc_gdr_bounce_wire_t *wire)
{
    wire->queued = 1;
    ucs_list_add_tail(&wire->bep->sendq, &wire->sendq);
}


static void uct_rc_gdr_bounce_wire_dequeue(uct_rc_gdr_bounce_wire_t *wire)
{
    ucs_assert(wire->queued);
    wire->queued = 0;
    ucs_list_del(&wire->sendq);
}


/* Every work request of the unit completed and nothing more is posted */
static void uct_rc_gdr_bounce_wire_done(uct_completion_t *self)
{
    uct_rc_gdr_bounce_wire_t *wire = ucs_container_of(self,
                                                      uct_rc_gdr_bounce_wire_t,
                                                      comp);
    uct_rc_gdr_bounce_xfer_t *xfer = wire->xfer;
    ucs_status_t status            = self->status;
    uint8_t report                 = wire->report;
    unsigned chunk                 = wire->chunk;

    if (status == UCS_OK) {
        status = wire->post_status;
    }
    uct_rc_gdr_bounce_wire_free(wire);

    switch (report) {
    case UCT_RC_GDR_BOUNCE_REPORT_STAGE:
        if (status == UCS_OK) {
            uct_rc_gdr_stage_wire_done(xfer->stage, chunk);
        } else {
            uct_rc_gdr_stage_wire_error(xfer->stage, chunk, status);
        }
        break;
    case UCT_RC_GDR_BOUNCE_REPORT_XFER:
        uct_rc_gdr_bounce_xfer_put_ref(xfer, status);
        break;
    default:
        break;
    }
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
static void uct_rc_gdr_bounce_ep_pump(uct_rc_gdr_bounce_ep_t *bep)
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


/* ------------------------------------------------------------------------
 * Transfers
 * ------------------------------------------------------------------------ */

static void uct_rc_gdr_bounce_send_ack(uct_rc_gdr_bounce_ep_t *bep,
                                       uint32_t xfer_id, ucs_status_t status)
{
    uct_rc_gdr_bounce_wire_t *wire;

    wire = uct_rc_gdr_bounce_wire_new(bep, NULL, UCT_RC_GDR_BOUNCE_REPORT_NONE,
                                      UCT_RC_GDR_BOUNCE_MSG_ACK);
    if (wire == NULL) {
        return; /* the initiator's transfer fails when the QP does */
    }

    wire->hdr.xfer_id = xfer_id;
    wire->hdr.status  = status;
    uct_rc_gdr_bounce_wire_enqueue(wire);
    uct_rc_gdr_bounce_ep_pump(bep);
}


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
        }
    }
}


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


static void uct_rc_gdr_bounce_xfer_put_ref(uct_rc_gdr_bounce_xfer_t *xfer,
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
static void uct_rc_gdr_bounce_xfer_replied(uct_rc_gdr_bounce_xfer_t *xfer,
                                           ucs_status_t status)
{
    ucs_assert(xfer->awaiting);
    xfer->awaiting = 0;
    --xfer->bep->num_awaiting;
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
                                      UCT_RC_GDR_BOUNCE_REPORT_STAGE, 0);
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


/* The staging engine's wire: chunk `chunk` is staged (put) or wanted (get) */
static ucs_status_t uct_rc_gdr_bounce_stage_post(void *arg, unsigned chunk,
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
                                      UCT_RC_GDR_BOUNCE_REPORT_STAGE, type);
    if (wire == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    wire->chunk  = chunk;
    wire->src    = buf->addr;
    wire->lkey   = uct_rc_gdr_bounce_buf_lkey(buf);
    wire->length = length;
    if (type == UCT_RC_GDR_BOUNCE_MSG_PUT_DATA) {
        wire->hdr.token = xfer->rkey.rkey;
        wire->hdr.addr  = xfer->remote_addr + offset;
        wire->last      = (offset + length == xfer->length);
    } else {
        wire->hdr.addr  = offset;
    }
    uct_rc_gdr_bounce_wire_enqueue(wire);
    return UCS_INPROGRESS;
}


static void uct_rc_gdr_bounce_stage_complete(void *arg, ucs_status_t status)
{
    uct_rc_gdr_bounce_xfer_t *xfer = arg;

    xfer->stage = NULL;
    uct_rc_gdr_bounce_xfer_put_ref(xfer, status);
}


static const uct_rc_gdr_stage_ops_t uct_rc_gdr_bounce_stage_ops = {
    .post       = uct_rc_gdr_bounce_stage_post,
    .chunk_done = NULL,
    .complete   = uct_rc_gdr_bounce_stage_complete
};


static ucs_status_t
uct_rc_gdr_bounce_xfer_stage(uct_rc_gdr_bounce_xfer_t *xfer,
                             uct_rc_gdr_stage_engine_t *engine)
{
    uct_rc_gdr_stage_xfer_params_t params;
    ucs_status_t status;

    params.dir      = (xfer->kind == UCT_RC_GDR_BOUNCE_GET_STAGED) ?
                      UCT_RC_GDR_STAGE_WIRE_H2D : UCT_RC_GDR_STAGE_D2H_WIRE;
    params.gpu_addr = xfer->local;
    params.length   = xfer->length;
    params.depth    = 0;
    params.ops      = &uct_rc_gdr_bounce_stage_ops;
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


/* Target: starts answering a validated get; UCS_ERR_NO_RESOURCE keeps it
 * waiting for a staging buffer */
static ucs_status_t
uct_rc_gdr_bounce_serve_start(uct_rc_gdr_bounce_xfer_t *xfer)
{
    uct_rc_gdr_bounce_ep_t *bep  = xfer->bep;
    uct_rc_gdr_bounce_iface_t *b = uct_rc_gdr_bounce_ep_iface(bep)->bounce;
    uct_rc_gdr_stage_engine_t *engine;
    ucs_status_t status;

    status = uct_rc_gdr_bounce_engine(b, xfer->gpu, &engine);
    if (status == UCS_OK) {
        status = uct_rc_gdr_bounce_xfer_stage(xfer, engine);
    }

    if (status == UCS_ERR_NO_RESOURCE) {
        return status;
    }

    ucs_list_del(&xfer->list);
    if (status == UCS_OK) {
        ucs_list_add_tail(&bep->serving, &xfer->list);
        return UCS_OK;
    }

    --bep->num_served;
    uct_rc_gdr_bounce_send_ack(bep, xfer->id, status);
    ucs_free(xfer);
    return UCS_OK;
}


/* ------------------------------------------------------------------------
 * Endpoint operations
 * ------------------------------------------------------------------------ */

/* Whether the endpoint takes one more bounce transfer now; NO_RESOURCE is
 * back-pressure (pending), never a failure */
static ucs_status_t uct_rc_gdr_bounce_admit(uct_rc_gdr_ep_t *ep,
                                            int remote_keyless, int is_put,
                                            uct_rc_gdr_bounce_ep_t **bep_p)
{
    uct_rc_gdr_iface_t *iface    = ucs_derived_of(ep->super.super.iface,
                                                  uct_rc_gdr_iface_t);
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

    if (remote_keyless) {
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
    int                   staged;    /* through the staging engine */
    void                  *owned;    /* freed with the transfer */
    uct_unpack_callback_t unpack_cb; /* get_bcopy: called with `owned` */
    void                  *unpack_arg;
} uct_rc_gdr_bounce_local_t;


/* Starts an admitted transfer; on failure nothing is left behind (and
 * `owned` is the caller's again) */
static ucs_status_t
uct_rc_gdr_bounce_start(uct_rc_gdr_bounce_ep_t *bep, int is_put,
                        const uct_rc_gdr_bounce_local_t *local,
                        uint64_t remote_addr, const uct_rc_gdr_rkey_t *rkey,
                        uct_completion_t *comp)
{
    uct_rc_gdr_iface_t *iface         = uct_rc_gdr_bounce_ep_iface(bep);
    uct_rc_gdr_bounce_iface_t *b      = iface->bounce;
    int remote_keyless                = !uct_rc_gdr_rkey_nic_allows(rkey,
                                                                    is_put);
    uct_rc_gdr_stage_engine_t *engine = NULL;
    uct_rc_gdr_bounce_wire_t *wire    = NULL;
    uct_rc_gdr_bounce_xfer_t *xfer;
    ucs_status_t status;
    khiter_t iter;
    int ret;

    if (local->staged) {
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
                                          UCT_RC_GDR_BOUNCE_REPORT_XFER,
                                          UCT_RC_GDR_BOUNCE_MSG_GET_REQ);
        if (wire == NULL) {
            status = UCS_ERR_NO_MEMORY;
            goto err_del;
        }
        wire->hdr.token  = rkey->rkey;
        wire->hdr.addr   = remote_addr;
        wire->hdr.length = xfer->length;
    } else if ((xfer->kind == UCT_RC_GDR_BOUNCE_PUT_MSG) && !local->staged) {
        /* the data straight from its NIC key (or copied into each message:
         * no key), then the ACK */
        wire = uct_rc_gdr_bounce_wire_new(bep, xfer,
                                          UCT_RC_GDR_BOUNCE_REPORT_XFER,
                                          UCT_RC_GDR_BOUNCE_MSG_PUT_DATA);
        if (wire == NULL) {
            status = UCS_ERR_NO_MEMORY;
            goto err_del;
        }
        wire->src       = xfer->local;
        wire->lkey      = local->lkey;
        wire->length    = xfer->length;
        wire->last      = 1;
        wire->hdr.token = rkey->rkey;
        wire->hdr.addr  = remote_addr;
    } else {
        status = uct_rc_gdr_bounce_xfer_stage(xfer, engine);
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
                                     const uct_iov_t *iov, size_t iovcnt,
                                     uint64_t remote_addr,
                                     const uct_rc_gdr_rkey_t *rkey,
                                     uct_completion_t *comp)
{
    uct_rc_gdr_iface_t *iface  = ucs_derived_of(ep->super.super.iface,
                                                uct_rc_gdr_iface_t);
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

    status = uct_rc_gdr_bounce_admit(ep,
                                     !uct_rc_gdr_rkey_nic_allows(rkey, is_put),
                                     is_put, &bep);
    if (status != UCS_OK) {
        return status;
    }

    memset(&local, 0, sizeof(local));
    local.local  = entry->buffer;
    local.length = uct_iov_get_length(entry);
    local.gpu    = -1;
    if (entry->memh != UCT_MEM_HANDLE_NULL) {
        mr           = uct_rc_gdr_memh_mr(entry->memh);
        local.staged = uct_rc_gdr_bounce_mr_staged(iface->bounce->md, mr,
                                                   is_put);
        local.gpu    = mr->gpu;
        local.lkey   = (local.staged || (mr->mr == NULL)) ? 0 :
                       mr->mr->lkey;
    }

    status = uct_rc_gdr_bounce_start(bep, is_put, &local, remote_addr, rkey,
                                     comp);
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
    status       = uct_rc_gdr_bounce_start(bep, 1, &local, remote_addr, rkey,
                                           NULL);
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
    status = uct_rc_gdr_bounce_admit(ep, 1, 1, &bep);
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
    uct_rc_gdr_iface_t *iface = ucs_derived_of(ep->super.super.iface,
                                               uct_rc_gdr_iface_t);
    uct_rc_gdr_bounce_ep_t *bep;
    ucs_status_t status;
    size_t length;
    void *copy;

    status = uct_rc_gdr_bounce_admit(ep, 1, 1, &bep);
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
    status = uct_rc_gdr_bounce_admit(ep, 1, 0, &bep);
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

    status = uct_rc_gdr_bounce_start(bep, 0, &local, remote_addr, rkey,
                                     comp);
    if (status != UCS_OK) {
        ucs_free(local.owned);
        return status;
    }
    return UCS_INPROGRESS;
}


/*
 * The endpoint's flush, once it has bounce state. A flush with a completion
 * gets one of ours with two references: the endpoint's own flush (work
 * requests posted before it) and the barrier (bounce transfers started
 * before it, ACKs included); the user's completes when both are gone.
 */
ucs_status_t uct_rc_gdr_bounce_ep_flush(uct_rc_gdr_ep_t *ep, unsigned flags,
                                        uct_completion_t *comp)
{
    uct_rc_gdr_bounce_ep_t *bep = ep->bounce;
    uct_rc_gdr_bounce_flush_t *flush;
    ucs_status_t status;

    flags |= UCT_RC_GDR_FLUSH_FLAG_NO_BOUNCE;
    if ((bep == NULL) || ucs_list_is_empty(&bep->xfers)) {
        return uct_rc_gdr_ep_flush(&ep->super.super, flags, comp);
    }

    if (comp == NULL) {
        if (flags & UCT_FLUSH_FLAG_CANCEL) {
            uct_rc_gdr_ep_flush(&ep->super.super, flags, NULL);
        }
        return UCS_INPROGRESS;
    }

    flush = ucs_malloc(sizeof(*flush), "rc_gdr_bounce_flush");
    if (flush == NULL) {
        ucs_error("rc_gdr: failed to allocate a flush of the bounce lane");
        return UCS_ERR_NO_MEMORY;
    }

    flush->comp.func      = uct_rc_gdr_bounce_flush_done;
    flush->comp.count     = 2;
    flush->comp.status    = UCS_OK;
    flush->bep            = bep;
    flush->user           = comp;
    flush->seq            = bep->next_seq;
    flush->barrier_passed = 0;

    /* never completes the given completion before it returns */
    status = uct_rc_gdr_ep_flush(&ep->super.super, flags, &flush->comp);
    if (status == UCS_OK) {
        --flush->comp.count; /* nothing of the endpoint's own to wait for */
    } else if (status != UCS_INPROGRESS) {
        ucs_free(flush);
        return status;
    }

    ucs_list_add_tail(&bep->flushes, &flush->list);
    return UCS_INPROGRESS;
}


int uct_rc_gdr_bounce_ep_blocked(uct_rc_gdr_ep_t *ep)
{
    return ucs_derived_of(ep->super.super.iface,
                          uct_rc_gdr_iface_t)->bounce->blocked;
}


/* ------------------------------------------------------------------------
 * Receive side: messages of the peer
 * ------------------------------------------------------------------------ */

static void uct_rc_gdr_bounce_recv_put_data(uct_rc_gdr_bounce_ep_t *bep,
                                            const uct_rc_gdr_bounce_hdr_t *hdr,
                                            const void *payload)
{
    uct_rc_gdr_iface_t *iface    = uct_rc_gdr_bounce_ep_iface(bep);
    uct_rc_gdr_bounce_iface_t *b = iface->bounce;
    ucs_status_t status;
    int gpu;

    if ((hdr->chunk == 0) || !bep->rx.active ||
        (bep->rx.id != hdr->xfer_id)) {
        bep->rx.active = 1;
        bep->rx.id     = hdr->xfer_id;
        bep->rx.status = UCS_OK;
        if (hdr->chunk != 0) {
            ucs_error("rc_gdr: QP 0x%x: bounce put %u starts at message %u",
                      bep->ep->qp->qp_num, hdr->xfer_id, hdr->chunk);
            bep->rx.status = UCS_ERR_INVALID_PARAM;
        }
    } else if (hdr->chunk != bep->rx.next_chunk) {
        if (bep->rx.status == UCS_OK) {
            ucs_error("rc_gdr: QP 0x%x: bounce put %u: message %u, expected "
                      "%u", bep->ep->qp->qp_num, hdr->xfer_id, hdr->chunk,
                      bep->rx.next_chunk);
        }
        bep->rx.status = UCS_ERR_INVALID_PARAM;
    }
    bep->rx.next_chunk = hdr->chunk + 1;

    /* once refused, the rest of the transfer is dropped without a word */
    if (bep->rx.status == UCS_OK) {
        status = uct_rc_gdr_bounce_target(b, hdr->token, hdr->addr,
                                          hdr->length, &gpu);
        if (status != UCS_OK) {
            ++iface->stats.bounce_refused;
            bep->rx.status = status;
        } else if (hdr->length > 0) {
            bep->rx.status = uct_rc_gdr_bounce_copy_h2d(b, gpu,
                                                        (void*)hdr->addr,
                                                        payload, hdr->length);
        }
    }

    if (hdr->flags & UCT_RC_GDR_BOUNCE_MSG_FLAG_LAST) {
        bep->rx.active = 0;
        uct_rc_gdr_bounce_send_ack(bep, hdr->xfer_id, bep->rx.status);
    }
}


static void uct_rc_gdr_bounce_recv_get_req(uct_rc_gdr_bounce_ep_t *bep,
                                           const uct_rc_gdr_bounce_hdr_t *hdr)
{
    uct_rc_gdr_iface_t *iface    = uct_rc_gdr_bounce_ep_iface(bep);
    uct_rc_gdr_bounce_iface_t *b = iface->bounce;
    uct_rc_gdr_bounce_xfer_t *xfer;
    ucs_status_t status;
    int gpu;

    if ((hdr->length == 0) ||
        (bep->num_served >= UCT_RC_GDR_BOUNCE_EP_MAX_XFERS)) {
        ucs_error("rc_gdr: QP 0x%x: bounce get %u of %" PRIu64 " bytes "
                  "refused (%u already served)", bep->ep->qp->qp_num,
                  hdr->xfer_id, hdr->length, bep->num_served);
        ++iface->stats.bounce_refused;
        uct_rc_gdr_bounce_send_ack(bep, hdr->xfer_id,
                                   (hdr->length == 0) ? UCS_ERR_INVALID_PARAM :
                                   UCS_ERR_EXCEEDS_LIMIT);
        return;
    }

    status = uct_rc_gdr_bounce_target(b, hdr->token, hdr->addr, hdr->length,
                                      &gpu);
    if (status != UCS_OK) {
        ++iface->stats.bounce_refused;
        uct_rc_gdr_bounce_send_ack(bep, hdr->xfer_id, status);
        return;
    }

    xfer = ucs_calloc(1, sizeof(*xfer), "rc_gdr_bounce_serve");
    if (xfer == NULL) {
        ucs_error("rc_gdr: failed to allocate a bounce get to serve");
        uct_rc_gdr_bounce_send_ack(bep, hdr->xfer_id, UCS_ERR_NO_MEMORY);
        return;
    }

    xfer->bep    = bep;
    xfer->kind   = UCT_RC_GDR_BOUNCE_SERVE_GET;
    xfer->id     = hdr->xfer_id;
    xfer->gpu    = gpu;
    xfer->status = UCS_OK;
    xfer->local  = (char*)hdr->addr;
    xfer->length = hdr->length;
    ++bep->num_served;
    ucs_list_add_tail(&bep->pending_gets, &xfer->list);
    if (ucs_list_is_only(&bep->pending_gets, &xfer->list)) {
        uct_rc_gdr_bounce_serve_start(xfer);
    }
}


/* A reply to one of our transfers: checked against what we asked */
static uct_rc_gdr_bounce_xfer_t *
uct_rc_gdr_bounce_recv_find(uct_rc_gdr_bounce_ep_t *bep,
                            const uct_rc_gdr_bounce_hdr_t *hdr)
{
    uct_rc_gdr_bounce_iface_t *b = uct_rc_gdr_bounce_ep_iface(bep)->bounce;
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
        ucs_error("rc_gdr: QP 0x%x: unexpected bounce message type %u for "
                  "transfer %u (offset %" PRIu64 ", %" PRIu64 " bytes): "
                  "dropped", bep->ep->qp->qp_num, hdr->type, hdr->xfer_id,
                  hdr->addr, hdr->length);
        return NULL;
    }

    return xfer;
}


static void uct_rc_gdr_bounce_recv_get_data(uct_rc_gdr_bounce_ep_t *bep,
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


static void uct_rc_gdr_bounce_recv_ack(uct_rc_gdr_bounce_ep_t *bep,
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


void uct_rc_gdr_bounce_handle_msg(uct_rc_gdr_iface_t *iface,
                                  uct_rc_gdr_ep_t *ep, const void *data,
                                  size_t length)
{
    size_t payload_len = length - sizeof(uct_rc_gdr_bounce_hdr_t);
    uct_rc_gdr_bounce_hdr_t hdr;
    uct_rc_gdr_bounce_ep_t *bep;
    int ok;

    if ((ep == NULL) || (length < sizeof(hdr))) {
        ucs_error("rc_gdr: bounce message of %zu bytes from %s: dropped",
                  length, (ep == NULL) ? "an unknown QP" : "a peer");
        return;
    }

    memcpy(&hdr, data, sizeof(hdr));
    switch (hdr.type) {
    case UCT_RC_GDR_BOUNCE_MSG_PUT_DATA:
    case UCT_RC_GDR_BOUNCE_MSG_GET_DATA:
        ok = (hdr.length == payload_len);
        break;
    case UCT_RC_GDR_BOUNCE_MSG_GET_REQ:
    case UCT_RC_GDR_BOUNCE_MSG_ACK:
        ok = (payload_len == 0);
        break;
    default:
        ok = 0;
        break;
    }
    if (!ok) {
        ucs_error("rc_gdr: QP 0x%x: malformed bounce message (type %u, "
                  "length %" PRIu64 ", %zu bytes): dropped", ep->qp->qp_num,
                  hdr.type, hdr.length, length);
        return;
    }

    bep = uct_rc_gdr_bounce_ep_get(ep);
    if ((bep == NULL) || bep->gone) {
        return;
    }

    switch (hdr.type) {
    case UCT_RC_GDR_BOUNCE_MSG_PUT_DATA:
        uct_rc_gdr_bounce_recv_put_data(bep, &hdr,
                                        UCS_PTR_BYTE_OFFSET(data,
                                                            sizeof(hdr)));
        break;
    case UCT_RC_GDR_BOUNCE_MSG_GET_REQ:
        uct_rc_gdr_bounce_recv_get_req(bep, &hdr);
        break;
    case UCT_RC_GDR_BOUNCE_MSG_GET_DATA:
        uct_rc_gdr_bounce_recv_get_data(bep, &hdr,
                                        UCS_PTR_BYTE_OFFSET(data,
                                                            sizeof(hdr)));
        break;
    default:
        uct_rc_gdr_bounce_recv_ack(bep, &hdr);
        break;
    }
    uct_rc_gdr_bounce_update_stats(iface->bounce);
}


/* ------------------------------------------------------------------------
 * Progress
 * ------------------------------------------------------------------------ */

/* A dead endpoint: what waits for the wire or the peer ends with its error.
 * Work requests in flight still complete (flushed) and report themselves. */
static unsigned uct_rc_gdr_bounce_ep_sweep(uct_rc_gdr_bounce_ep_t *bep)
{
    int dead            = uct_rc_gdr_bounce_ep_is_dead(bep);
    ucs_status_t status = dead ? uct_rc_gdr_bounce_ep_dead_status(bep) :
                          UCS_OK;
    uct_rc_gdr_bounce_xfer_t *xfer, *txfer;
    uct_rc_gdr_bounce_wire_t *wire, *twire;
    unsigned count      = 0;

    ucs_list_for_each_safe(wire, twire, &bep->sendq, sendq) {
        if (!dead && (wire->post_status == UCS_OK)) {
            continue;
        }
        uct_rc_gdr_bounce_wire_dequeue(wire);
        uct_invoke_completion(&wire->comp, dead ? status : wire->post_status);
        ++count;
    }

    if (!dead) {
        return count;
    }

    ucs_list_for_each_safe(xfer, txfer, &bep->pending_gets, list) {
        ucs_list_del(&xfer->list);
        --bep->num_served;
        ucs_free(xfer);
        ++count;
    }

    /* one at a time: each may end its transfer, and the user's callback */
    while (bep->num_awaiting > 0) {
        ucs_list_for_each(xfer, &bep->xfers, list) {
            if (xfer->awaiting) {
                break;
            }
        }
        if (&xfer->list == &bep->xfers) {
            ucs_assertv(0, "bep %p: %u awaiting, none found", bep,
                        bep->num_awaiting);
            bep->num_awaiting = 0;
            break;
        }
        uct_rc_gdr_bounce_xfer_replied(xfer, status);
        ++count;
    }

    bep->rx.active = 0;
    return count;
}


static unsigned uct_rc_gdr_bounce_ep_progress(uct_rc_gdr_bounce_ep_t *bep)
{
    uct_rc_gdr_ep_t *ep = bep->ep;
    uct_rc_gdr_bounce_xfer_t *xfer;
    unsigned count;
    ucs_time_t now;

    if (ucs_list_is_empty(&bep->sendq) && (bep->num_awaiting == 0) &&
        ucs_list_is_empty(&bep->pending_gets)) {
        return 0;
    }

    count = uct_rc_gdr_bounce_ep_sweep(bep);
    if (uct_rc_gdr_bounce_ep_is_dead(bep)) {
        return count;
    }

    uct_rc_gdr_bounce_ep_pump(bep);

    while (!ucs_list_is_empty(&bep->pending_gets)) {
        xfer = ucs_list_head(&bep->pending_gets, uct_rc_gdr_bounce_xfer_t,
                             list);
        if (uct_rc_gdr_bounce_serve_start(xfer) == UCS_ERR_NO_RESOURCE) {
            break;
        }
        ++count;
    }

    /* waiting for the peer with nothing in flight: probe it, so that its
     * death shows as a failed work request */
    if ((bep->num_awaiting > 0) && (ep->num_outstanding == 0)) {
        now = ucs_get_time();
        if ((now - bep->last_probe) >
            ucs_time_from_sec(UCT_RC_GDR_BOUNCE_PROBE_INTERVAL)) {
            bep->last_probe = now;
            uct_rc_gdr_ep_check(&ep->super.super, 0, NULL);
        }
    }

    return count;
}


unsigned uct_rc_gdr_bounce_progress(uct_rc_gdr_iface_t *iface)
{
    uct_rc_gdr_bounce_iface_t *b = iface->bounce;
    uct_rc_gdr_bounce_ep_t *bep, *tmp;
    unsigned count = 0;
    int i;

    if (ucs_list_is_empty(&b->eps)) {
        return 0;
    }

    for (i = 0; i < b->num_gpus; ++i) {
        if (b->engines[i] != NULL) {
            count += uct_rc_gdr_stage_progress(b->engines[i]);
        }
    }

    ucs_list_for_each_safe(bep, tmp, &b->eps, list) {
        count += uct_rc_gdr_bounce_ep_progress(bep);
    }

    /* a transfer that ended (also inside a send completion) freed what
     * others may wait for */
    count    += b->events;
    b->events = 0;
    if (count > 0) {
        b->blocked = 0; /* pending requests may go again */
    }
    uct_rc_gdr_bounce_update_stats(b);
    return count;
}


/* ------------------------------------------------------------------------
 * Setup and teardown
 * ------------------------------------------------------------------------ */

void uct_rc_gdr_bounce_ep_cleanup(uct_rc_gdr_ep_t *ep)
{
    uct_rc_gdr_bounce_ep_t *bep = ep->bounce;
    uct_rc_gdr_bounce_iface_t *b;
    uct_rc_gdr_bounce_xfer_t *xfer;
    uct_rc_gdr_bounce_flush_t *flush;
    uct_rc_gdr_bounce_wire_t *wire;
    ucs_list_link_t *lists[3];
    unsigned i;

    if (bep == NULL) {
        return;
    }

    b         = uct_rc_gdr_bounce_ep_iface(bep)->bounce;
    bep->gone = 1;
    lists[0]  = &bep->xfers;
    lists[1]  = &bep->serving;
    lists[2]  = &bep->pending_gets;

    /* The engine gets its buffers back (the QP is gone: the NIC no longer
     * touches them); the transfers end without user callbacks. */
    for (i = 0; i < ucs_static_array_size(lists); ++i) {
        while (!ucs_list_is_empty(lists[i])) {
            xfer = ucs_list_head(lists[i], uct_rc_gdr_bounce_xfer_t, list);
            if (xfer->stage != NULL) {
                uct_rc_gdr_stage_xfer_cancel(xfer->stage, UCS_ERR_CANCELED);
                continue; /* ended, or left without its engine part */
            }
            if (xfer->kind == UCT_RC_GDR_BOUNCE_SERVE_GET) {
                --bep->num_served;
                ucs_list_del(&xfer->list);
                ucs_free(xfer);
                continue;
            }
            xfer->refs     = 1;
            xfer->awaiting = 0;
            uct_rc_gdr_bounce_xfer_put_ref(xfer, UCS_ERR_CANCELED);
        }
    }

    /* units whose work requests never completed, and those never posted */
    while (!ucs_list_is_empty(&bep->wires)) {
        wire = ucs_list_head(&bep->wires, uct_rc_gdr_bounce_wire_t, list);
        uct_rc_gdr_bounce_wire_free(wire);
    }

    while (!ucs_list_is_empty(&bep->flushes)) {
        flush = ucs_list_extract_head(&bep->flushes,
                                      uct_rc_gdr_bounce_flush_t, list);
        ucs_free(flush);
    }

    ucs_list_del(&bep->list);
    ucs_free(bep);
    ep->bounce = NULL;
    uct_rc_gdr_bounce_update_stats(b);
}


ucs_status_t uct_rc_gdr_bounce_iface_init(uct_rc_gdr_iface_t *iface,
                                          const uct_rc_gdr_bounce_config_t
                                          *config)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(iface->super.md, uct_rc_gdr_md_t);
    uct_rc_gdr_bounce_iface_t *b;

    if ((config->chunk_size < UCT_RC_GDR_STAGE_CHUNK_SIZE_MIN) ||
        (config->chunk_size > UCT_RC_GDR_BOUNCE_CHUNK_SIZE_MAX) ||
        (config->depth == 0) ||
        (config->depth > UCT_RC_GDR_STAGE_DEPTH_MAX) ||
        (config->pool_size == 0)) {
        ucs_error("rc_gdr: invalid configuration: BOUNCE_CHUNK_SIZE must be "
                  "%d..%lu, BOUNCE_DEPTH 1..%d, BOUNCE_POOL_SIZE > 0",
                  UCT_RC_GDR_STAGE_CHUNK_SIZE_MIN,
                  UCT_RC_GDR_BOUNCE_CHUNK_SIZE_MAX,
                  UCT_RC_GDR_STAGE_DEPTH_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    b = ucs_calloc(1, sizeof(*b), "rc_gdr_bounce_iface");
    if (b == NULL) {
        ucs_error("rc_gdr: failed to allocate the bounce lane");
        return UCS_ERR_NO_MEMORY;
    }

    b->iface    = iface;
    b->md       = md;
    b->config   = *config;
    b->msg_max  = ucs_min(config->chunk_size,
                          iface->config.seg_size -
                          sizeof(uct_rc_gdr_bounce_hdr_t));
    b->num_gpus = md->num_gpus;
    if (b->num_gpus > 0) {
        b->ctxs    = ucs_calloc(b->num_gpus, sizeof(*b->ctxs),
                                "rc_gdr_bounce_ctxs");
        b->engines = ucs_calloc(b->num_gpus, sizeof(*b->engines),
                                "rc_gdr_bounce_engines");
        if ((b->ctxs == NULL) || (b->engines == NULL)) {
            ucs_error("rc_gdr: failed to allocate the bounce lane's GPUs");
            ucs_free(b->ctxs);
            ucs_free(b->engines);
            ucs_free(b);
            return UCS_ERR_NO_MEMORY;
        }
    }

    ucs_list_head_init(&b->eps);
    kh_init_inplace(uct_rc_gdr_bounce_xfers, &b->xfers);
    iface->bounce = b;
    return UCS_OK;
}


void uct_rc_gdr_bounce_iface_cleanup(uct_rc_gdr_iface_t *iface)
{
    uct_rc_gdr_bounce_iface_t *b = iface->bounce;
    uct_rc_gdr_cuda_ctx_h ctx    = NULL;
    uct_rc_gdr_cuda_ctx_h prev;
    int i;

    if (b == NULL) {
        return;
    }

    /* endpoints still open: their transfers end here, without callbacks */
    while (!ucs_list_is_empty(&b->eps)) {
        uct_rc_gdr_bounce_ep_cleanup(ucs_list_head(&b->eps,
                                                   uct_rc_gdr_bounce_ep_t,
                                                   list)->ep);
    }

    for (i = 0; i < b->num_gpus; ++i) {
        uct_rc_gdr_stage_engine_destroy(b->engines[i]);
        if (b->ctxs[i] != NULL) {
            ctx = b->ctxs[i];
        }
    }

    uct_rc_gdr_bounce_update_stats(b);
    if ((iface->stats.bounce_xfers > 0) || (iface->stats.bounce_msgs > 0)) {
        ucs_info("rc_gdr: %s:%u bounce lane closed: %" PRIu64 " transfers (%"
                 PRIu64 " failed), %" PRIu64 " messages, %" PRIu64
                 " bytes staged, %" PRIu64 " staging buffers used at most, %"
                 PRIu64 " requests refused", b->md->name, iface->port_num,
                 iface->stats.bounce_xfers, iface->stats.bounce_failed,
                 iface->stats.bounce_msgs, iface->stats.bounce_staged_bytes,
                 iface->stats.bounce_bufs_max, iface->stats.bounce_refused);
    }

    if (b->pool != NULL) {
        prev = uct_rc_gdr_bounce_ctx_push(ctx);
        uct_rc_gdr_stage_pool_destroy(b->pool);
        uct_rc_gdr_bounce_ctx_pop(ctx, prev);
    }

    for (i = 0; i < b->num_gpus; ++i) {
        if (b->ctxs[i] != NULL) {
            uct_rc_gdr_cuda_ctx_release(i);
        }
    }

    kh_destroy_inplace(uct_rc_gdr_bounce_xfers, &b->xfers);
    ucs_free(b->ctxs);
    ucs_free(b->engines);
    ucs_free(b);
    iface->bounce = NULL;
}
