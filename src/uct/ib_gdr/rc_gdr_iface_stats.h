/*
 * The counters of an rc_gdr interface, as uct_rc_gdr_dev_stats_query() fills
 * them: a header of its own, with no UCX type, so that programs outside the
 * module (test/mpi/mpi_verify.c) read the fields by name.
 */

#ifndef UCT_RC_GDR_IFACE_STATS_H_
#define UCT_RC_GDR_IFACE_STATS_H_

#include <stdint.h>


/*
 * Counters of an interface. Versioned by size: fields are only ever appended,
 * all uint64_t, so a caller with an older copy of this struct gets a prefix
 * and one with a newer copy sees a smaller size.
 */
typedef struct uct_rc_gdr_iface_stats {
    uint64_t                  size;          /* bytes filled, this one too */
    uint64_t                  tx_wrs;        /* work requests posted */
    uint64_t                  rx_msgs;       /* messages received */
    uint64_t                  credit_grants; /* explicit credit messages */
    uint64_t                  flush_reads;   /* RDMA READs posted by flushes */
    /* host bounce lane (rc_gdr_bounce.h) */
    uint64_t                  bounce_xfers;  /* transfers started here */
    uint64_t                  bounce_failed; /* of those, ended in error */
    uint64_t                  bounce_staged_bytes; /* copied GPU<->host */
    uint64_t                  bounce_msgs;   /* internal messages sent */
    uint64_t                  bounce_refused; /* peers' requests refused */
    uint64_t                  bounce_bufs_in_use; /* staging buffers out */
    uint64_t                  bounce_bufs_max; /* high-water mark of it */
    /* Appended later (a caller built for the fields above gets those):
     * what a peer sent that the protocol does not allow, each dropped or
     * refused (doc/DESIGN.md, "What a peer may do") */
    uint64_t                  bounce_malformed; /* bad length or type */
    uint64_t                  bounce_unexpected; /* replies to nothing asked,
                                                    repeated or out of order */
    uint64_t                  bounce_revoked; /* served gets stopped: the
                                                 registration went away */
    uint64_t                  bounce_acks_dropped; /* replies past the bound
                                                      of a peer that does not
                                                      take them */
    uint64_t                  bounce_timeouts; /* transfers whose live peer
                                                  did not answer in time */
    uint64_t                  unknown_qp_msgs; /* from no endpoint: dropped */
    uint64_t                  credit_overflows; /* credits past the window */
    uint64_t                  bounce_queued_max; /* most message units queued
                                                    on one endpoint */
    uint64_t                  tx_stalls; /* endpoints failed by the stall
                                            check (rc_gdr_iface.c) */
    uint64_t                  bounce_serve_timeouts; /* gets served to a live
                                                        peer that took no data
                                                        in BOUNCE_TIMEOUT */
    uint64_t                  rx_no_imm; /* messages without the
                                            immediate data every message
                                            of the protocol carries:
                                            dropped */
    uint64_t                  am_no_handler; /* active messages to an id
                                                with no handler: dropped */
    uint64_t                  am_staged_bytes; /* GPU bytes of active
                                                  messages copied into the
                                                  send buffer: the NIC may
                                                  not read them */
    uint64_t                  rma_zcopy_bytes; /* bytes of put/get zcopy
                                                  started here, either
                                                  lane: what UCP's
                                                  rendezvous and large RMA
                                                  put on this device */
} uct_rc_gdr_iface_stats_t;

#endif
