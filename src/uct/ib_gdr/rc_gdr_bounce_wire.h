/**
 * rc_gdr bounce lane, wire layer (rc_gdr_bounce_wire.c), above the core: a
 * wire unit posts a run of internal messages (or is the completion of one
 * staged chunk's work requests) and reports to the callback its maker
 * stored in it. The message format is the core's (rc_gdr_bounce_core.h).
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_RC_GDR_BOUNCE_WIRE_H_
#define UCT_RC_GDR_BOUNCE_WIRE_H_

#include "rc_gdr_bounce_core.h"


/* What a wire unit reports to once its work requests completed, set by
 * whoever made it (a staged chunk tells the engine, a transfer's message
 * run the transfer): the wire layer knows no kinds of transfer */
typedef void (*uct_rc_gdr_bounce_wire_cb_t)(uct_rc_gdr_bounce_xfer_t *xfer,
                                            unsigned chunk,
                                            ucs_status_t status);


typedef struct uct_rc_gdr_bounce_wire {
    uct_completion_t         comp;        /* count: 1 while posting + work
                                             requests in flight */
    ucs_list_link_t          list;        /* bep->wires, while alive */
    ucs_list_link_t          sendq;       /* bep->sendq, while queued */
    uct_rc_gdr_bounce_ep_t   *bep;
    uct_rc_gdr_bounce_xfer_t *xfer;       /* NULL for an ACK */
    uct_rc_gdr_bounce_wire_cb_t cb;       /* with xfer and chunk; NULL for
                                             an ACK: nobody waits for it */
    unsigned                 chunk;       /* a staged chunk: engine's */
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


/** A unit that reports to @a cb (may be NULL), with its message @a type */
uct_rc_gdr_bounce_wire_t *
uct_rc_gdr_bounce_wire_new(uct_rc_gdr_bounce_ep_t *bep,
                           uct_rc_gdr_bounce_xfer_t *xfer,
                           uct_rc_gdr_bounce_wire_cb_t cb, uint8_t type);
void uct_rc_gdr_bounce_wire_free(uct_rc_gdr_bounce_wire_t *wire);
void uct_rc_gdr_bounce_wire_enqueue(uct_rc_gdr_bounce_wire_t *wire);
void uct_rc_gdr_bounce_wire_dequeue(uct_rc_gdr_bounce_wire_t *wire);

/** Posts queued messages in order while the endpoint has the resources. */
void uct_rc_gdr_bounce_ep_pump(uct_rc_gdr_bounce_ep_t *bep);

void uct_rc_gdr_bounce_send_ack(uct_rc_gdr_bounce_ep_t *bep,
                                uint32_t xfer_id, ucs_status_t status);

#endif
