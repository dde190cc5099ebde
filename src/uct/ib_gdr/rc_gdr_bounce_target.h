/**
 * rc_gdr bounce lane, target role (rc_gdr_bounce_target.c), above the
 * transfers: the peer's puts and gets, and the gets being served.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_RC_GDR_BOUNCE_TARGET_H_
#define UCT_RC_GDR_BOUNCE_TARGET_H_

#include "rc_gdr_bounce_xfer.h"


/** Starts answering a validated get; UCS_ERR_NO_RESOURCE keeps it waiting
 *  for a staging buffer. */
ucs_status_t uct_rc_gdr_bounce_serve_start(uct_rc_gdr_bounce_xfer_t *xfer);

/** Served gets whose live peer took no data in BOUNCE_TIMEOUT: dropped. */
unsigned uct_rc_gdr_bounce_serve_timeouts(uct_rc_gdr_bounce_ep_t *bep,
                                          ucs_time_t now);

void uct_rc_gdr_bounce_recv_put_data(uct_rc_gdr_bounce_ep_t *bep,
                                     const uct_rc_gdr_bounce_hdr_t *hdr,
                                     const void *payload);
void uct_rc_gdr_bounce_recv_get_req(uct_rc_gdr_bounce_ep_t *bep,
                                    const uct_rc_gdr_bounce_hdr_t *hdr);

#endif
