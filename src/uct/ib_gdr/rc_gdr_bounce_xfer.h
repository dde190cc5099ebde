/**
 * rc_gdr bounce lane, transfer layer (rc_gdr_bounce_xfer.c), above the wire
 * units: the end of a transfer and its references, the flush barrier, the
 * staging engine's chunks on the wire. The two roles build on it.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_RC_GDR_BOUNCE_XFER_H_
#define UCT_RC_GDR_BOUNCE_XFER_H_

#include "rc_gdr_bounce_wire.h"


/* The barrier part of an ep flush (see uct_rc_gdr_bounce_ep_flush) */
typedef struct uct_rc_gdr_bounce_flush {
    uct_completion_t         comp;        /* count: ep flush + barrier */
    ucs_list_link_t          list;        /* bep->flushes */
    uct_rc_gdr_bounce_ep_t   *bep;
    uct_completion_t         *user;
    uint64_t                 seq;         /* waits for transfers before */
    int                      barrier_passed;
} uct_rc_gdr_bounce_flush_t;


/** A part of @a xfer ended; the last one ends the transfer. */
void uct_rc_gdr_bounce_xfer_put_ref(uct_rc_gdr_bounce_xfer_t *xfer,
                                    ucs_status_t status);

/** The reply of the peer came, or will not come. */
void uct_rc_gdr_bounce_xfer_replied(uct_rc_gdr_bounce_xfer_t *xfer,
                                    ucs_status_t status);

/** A wire unit's callback: a part of the transfer (a message run) is out. */
void uct_rc_gdr_bounce_xfer_part_done(uct_rc_gdr_bounce_xfer_t *xfer,
                                      unsigned chunk, ucs_status_t status);

/** The staging engine's post() and complete() for a transfer (@a arg); a
 *  role that checks each chunk first wraps the post. */
ucs_status_t uct_rc_gdr_bounce_xfer_stage_post(void *arg, unsigned chunk,
                                               uct_rc_gdr_stage_buf_t *buf,
                                               size_t length, size_t offset);
void uct_rc_gdr_bounce_xfer_stage_complete(void *arg, ucs_status_t status);
extern const uct_rc_gdr_stage_ops_t uct_rc_gdr_bounce_xfer_stage_ops;

/** Hands @a xfer to the staging engine, which calls @a ops. */
ucs_status_t uct_rc_gdr_bounce_xfer_stage(uct_rc_gdr_bounce_xfer_t *xfer,
                                          uct_rc_gdr_stage_engine_t *engine,
                                          const uct_rc_gdr_stage_ops_t *ops);

#endif
