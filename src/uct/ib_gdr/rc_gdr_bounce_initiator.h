/**
 * rc_gdr bounce lane, initiator role (rc_gdr_bounce_initiator.c), above the
 * transfers: what the top layer hands it, the peer's replies. Its entry
 * points for the endpoint are in rc_gdr_bounce.h.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_RC_GDR_BOUNCE_INITIATOR_H_
#define UCT_RC_GDR_BOUNCE_INITIATOR_H_

#include "rc_gdr_bounce_xfer.h"


void uct_rc_gdr_bounce_recv_get_data(uct_rc_gdr_bounce_ep_t *bep,
                                     const uct_rc_gdr_bounce_hdr_t *hdr,
                                     const void *payload);
void uct_rc_gdr_bounce_recv_ack(uct_rc_gdr_bounce_ep_t *bep,
                                const uct_rc_gdr_bounce_hdr_t *hdr);

#endif
