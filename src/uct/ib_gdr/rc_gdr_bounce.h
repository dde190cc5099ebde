/**
 * rc_gdr bounce lane: put/get zcopy when one side's GPU memory has no NIC
 * key (doc/DESIGN.md section 3, "The bounce lane").
 *
 * The user sees plain UCT put/get zcopy: UCS_INPROGRESS, then one completion
 * after the whole transfer; ep flush waits for every bounce transfer posted
 * before it; a failed peer fails them with the endpoint's error; exhausted
 * staging buffers or credits answer UCS_ERR_NO_RESOURCE (pending), never an
 * error. How the data travels depends on who lacks the key:
 *
 *   local keyless, remote keyed    staged through pinned host buffers by the
 *                                  staging engine (rc_gdr_stage.h): D2H then
 *                                  RDMA WRITE (put), RDMA READ then H2D (get)
 *   remote keyless                 the target copies: the data travels in
 *                                  internal messages (SEND with the internal
 *                                  imm bit, flow-controlled by the credits of
 *                                  active messages) that name the target
 *                                  registration by its token; the target
 *                                  validates every one against its md
 *                                  (uct_rc_gdr_md_bounce_target) and answers
 *                                  with an ACK (put) or with data (get)
 *
 * The wire format of the internal messages is in rc_gdr_bounce_core.h.
 *
 * The endpoint calls the functions below (the "hooks"), the interface only
 * opens and closes the lane; everything else of the lane lives in
 * rc_gdr_bounce*.c, each layer over its own header (rc_gdr_bounce_core.h
 * says which).
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_RC_GDR_BOUNCE_H_
#define UCT_RC_GDR_BOUNCE_H_

#include "rc_gdr_addr.h"
#include "rc_gdr_md.h"

#include <uct/api/uct.h>
#include <ucs/config/parser.h>

#include <infiniband/verbs.h>


/* Defaults of the interface's bounce-lane knobs. 1 MiB chunks: on an H200
 * the staging engine keeps 0.89-0.94 of the pinned copy rate with them at
 * >= 4 MiB (256 KiB: 0.63-0.77), and a 4 MiB message still overlaps copy and
 * wire over four chunks (contrib/bench-stage.sh). */
#define UCT_RC_GDR_BOUNCE_CHUNK_SIZE_DEFAULT "1m"
#define UCT_RC_GDR_BOUNCE_DEPTH_DEFAULT      "4"
#define UCT_RC_GDR_BOUNCE_POOL_SIZE_DEFAULT  "32"
#define UCT_RC_GDR_BOUNCE_EP_MAX_BUFS_DEFAULT "auto"
/* A live peer answers a transfer's message within a round trip and a copy;
 * 30 s leaves room for a loaded host and a long FAILURE_TIMEOUT */
#define UCT_RC_GDR_BOUNCE_TIMEOUT_DEFAULT    "30s"


struct uct_rc_gdr_iface;
struct uct_rc_gdr_ep;

typedef struct uct_rc_gdr_bounce_iface uct_rc_gdr_bounce_iface_t;
typedef struct uct_rc_gdr_bounce_ep    uct_rc_gdr_bounce_ep_t;


typedef struct uct_rc_gdr_bounce_config {
    size_t   chunk_size;   /* staging buffer size, bytes per chunk */
    unsigned depth;        /* chunks in flight per transfer */
    unsigned pool_size;    /* staging buffers per interface */
    unsigned long ep_max_bufs; /* of them, what one endpoint's served gets
                                  may hold; UCS_ULUNITS_AUTO: a quarter */
    double   timeout;      /* seconds a transfer waits for a live peer */
} uct_rc_gdr_bounce_config_t;

extern ucs_config_field_t uct_rc_gdr_bounce_config_table[];

/* The knobs, embedded in the interface's config table (prefix RC_GDR_) */
#define UCT_RC_GDR_BOUNCE_CONFIG_FIELD(_offset) \
    {"", "", NULL, _offset, \
     UCS_CONFIG_TYPE_TABLE(uct_rc_gdr_bounce_config_table)}


/*
 * Interface hooks
 */

/** At interface open: checks the knobs and gives the interface the lane's
 *  ops (uct_rc_gdr_iface_lane_ops_t: received internal messages, progress);
 *  allocates no staging memory (the pool is made at the first transfer
 *  that needs it). */
ucs_status_t uct_rc_gdr_bounce_iface_init(struct uct_rc_gdr_iface *iface,
                                          const uct_rc_gdr_bounce_config_t
                                          *config);

/** At interface close, after the zombie endpoints are freed. */
void uct_rc_gdr_bounce_iface_cleanup(struct uct_rc_gdr_iface *iface);


/*
 * Endpoint hooks
 */

/** Whether local memory of this registration must be staged for the NIC
 *  in this direction (a put makes the NIC read it, a get write it): GPU
 *  memory without a NIC key, or with one that the gate keeps off that
 *  direction. */
static inline int uct_rc_gdr_bounce_mr_staged(const uct_rc_gdr_md_t *md,
                                              const uct_rc_gdr_mr_t *mr,
                                              int is_put)
{
    uct_rc_gdr_dir_t dir = is_put ? UCT_RC_GDR_DIR_NIC_READS_GPU :
                                    UCT_RC_GDR_DIR_NIC_WRITES_GPU;

    return (mr->gpu >= 0) &&
           (!uct_rc_gdr_mr_is_nic(mr) ||
            ((mr->gpu < md->num_gpus) &&
             (md->gpus[mr->gpu].lane[dir] == UCT_RC_GDR_LANE_BOUNCE)));
}

/* Why the endpoint sent an RMA to the bounce lane: decided there once
 * (uct_rc_gdr_ep_lane, uct_rc_gdr_bounce_mr_staged), never again here */
enum {
    /* the target's NIC may not access its memory: internal messages */
    UCT_RC_GDR_BOUNCE_REMOTE_KEYLESS = UCS_BIT(0),
    /* the local NIC may not access the local GPU memory: staged */
    UCT_RC_GDR_BOUNCE_LOCAL_STAGED   = UCS_BIT(1)
};

/** put_zcopy / get_zcopy through the bounce lane: the endpoint chose it for
 *  a non-empty transfer, for the reasons in @a route
 *  (UCT_RC_GDR_BOUNCE_REMOTE_KEYLESS, _LOCAL_STAGED), with the remote key
 *  it decoded. */
ucs_status_t uct_rc_gdr_bounce_zcopy(struct uct_rc_gdr_ep *ep, int is_put,
                                     unsigned route, const uct_iov_t *iov,
                                     size_t iovcnt, uint64_t remote_addr,
                                     const uct_rc_gdr_rkey_t *rkey,
                                     uct_completion_t *comp);

/** put_short / put_bcopy / get_bcopy to remote memory without a NIC key
 *  (the decoded @a rkey lacks UCT_RC_GDR_RKEY_FLAG_NIC, or denies the
 *  direction): the same semantics as on keyed memory; the data is copied
 *  into internal messages. */
ucs_status_t uct_rc_gdr_bounce_put_short(struct uct_rc_gdr_ep *ep,
                                         const void *buffer, unsigned length,
                                         uint64_t remote_addr,
                                         const uct_rc_gdr_rkey_t *rkey);
ssize_t uct_rc_gdr_bounce_put_bcopy(struct uct_rc_gdr_ep *ep,
                                    uct_pack_callback_t pack_cb, void *arg,
                                    uint64_t remote_addr,
                                    const uct_rc_gdr_rkey_t *rkey);
ucs_status_t uct_rc_gdr_bounce_get_bcopy(struct uct_rc_gdr_ep *ep,
                                         uct_unpack_callback_t unpack_cb,
                                         void *arg, size_t length,
                                         uint64_t remote_addr,
                                         const uct_rc_gdr_rkey_t *rkey,
                                         uct_completion_t *comp);

/** Whether bounce transfers started on the endpoint are still running: an
 *  endpoint flush then also waits for them. */
int uct_rc_gdr_bounce_ep_busy(struct uct_rc_gdr_ep *ep);

/** The bounce lane's part of an endpoint flush (uct_rc_gdr_ep_flush, when
 *  uct_rc_gdr_bounce_ep_busy): *comp_p, the flush's completion, is replaced
 *  by one that waits for the transfers started before now and, with
 *  @a own_part, to be completed once by the endpoint's own part; it then
 *  completes the original (never before this returns, never after the
 *  endpoint is destroyed).
 *
 *  @return UCS_OK, or UCS_ERR_NO_MEMORY with nothing changed. */
ucs_status_t uct_rc_gdr_bounce_ep_flush(struct uct_rc_gdr_ep *ep,
                                        int own_part,
                                        uct_completion_t **comp_p);

/** 1 when the last bounce operation was refused for the lane's own
 *  resources (staging buffers, message queue): pending_add must queue. */
int uct_rc_gdr_bounce_ep_blocked(struct uct_rc_gdr_ep *ep);

/** At endpoint destruction (class cleanup, after its QP is destroyed and
 *  its operations are released): transfers end without user callbacks,
 *  staging buffers go back to the pool. */
void uct_rc_gdr_bounce_ep_cleanup(struct uct_rc_gdr_ep *ep);

#endif
