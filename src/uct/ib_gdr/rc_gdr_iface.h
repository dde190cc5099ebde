/*
 * rc_gdr interface: one verbs port, one send CQ, one receive CQ, one SRQ,
 * the pools of send/receive buffers and of the endpoints' operation
 * descriptors (rc_gdr_ep.h says how completion moderation and flush use
 * them), and the progress that hands completions to the endpoints. Events:
 * rc_gdr_event.h.
 */

#ifndef UCT_RC_GDR_IFACE_H_
#define UCT_RC_GDR_IFACE_H_

#include "rc_gdr_md.h"
#include "rc_gdr_flush.h"
#include "rc_gdr_bounce.h"
#include "rc_gdr_event.h"
#include "rc_gdr_iface_stats.h"

#include <ucs/datastruct/khash.h>
#include <ucs/datastruct/list.h>
#include <ucs/datastruct/mpool.h>
#include <ucs/datastruct/queue.h>
#include <ucs/time/time.h>
#include <ucs/type/class.h>


#define UCT_RC_GDR_TL_NAME        "rc_gdr"
#define UCT_RC_GDR_MAX_IOV        8
#define UCT_RC_GDR_AM_MAX_HDR     128
#define UCT_RC_GDR_AM_ID_BITS     5
#define UCT_RC_GDR_STALL_SWEEPS   4    /* stall sweeps in a row that fail an
                                          endpoint */
#define UCT_RC_GDR_STALL_POLLS    256  /* progress calls between two reads
                                          of the clock */


typedef struct uct_rc_gdr_ep uct_rc_gdr_ep_t;
typedef struct uct_rc_gdr_iface uct_rc_gdr_iface_t;


/*
 * What a lane of rc_gdr's own above the endpoints (the bounce lane,
 * rc_gdr_bounce.h) gives the interface when it opens: the interface hands
 * up received messages with the internal imm bit (never the user's AM
 * table), and gives the lane a turn in each progress.
 */
typedef struct uct_rc_gdr_iface_lane_ops {
    /* @a ep is NULL when the sending QP is unknown */
    void     (*recv)(uct_rc_gdr_iface_t *iface, uct_rc_gdr_ep_t *ep,
                     const void *data, size_t length);
    /* @return how many things advanced */
    unsigned (*progress)(uct_rc_gdr_iface_t *iface);
} uct_rc_gdr_iface_lane_ops_t;


typedef struct uct_rc_gdr_iface_config {
    uct_iface_config_t        super;
    unsigned                  tx_queue_len;
    unsigned                  tx_cq_moderation;
    unsigned                  tx_cq_len;
    unsigned                  rx_queue_len;
    unsigned                  fc_wnd_size;
    size_t                    seg_size;
    size_t                    max_inline;
    double                    failure_timeout;
    ucs_time_t                tx_stall_timeout;
    int                       state_signal; /* 0: none */
    unsigned                  retry_count;
    unsigned long             max_rd_atomic; /* UCS_ULUNITS_AUTO: the device's */
    unsigned                  gid_index;
    uct_rc_gdr_flush_mode_t   flush_mode;
    uct_rc_gdr_bounce_config_t bounce;
    uct_iface_mpool_config_t  tx_mp;
    uct_iface_mpool_config_t  rx_mp;
} uct_rc_gdr_iface_config_t;


/* A registered buffer of seg_size bytes (bcopy, AM, atomic results); the
 * data follows the header. A receive buffer has the user's headroom
 * (rx_headroom) between the two; a received active message the user keeps
 * (UCT_CB_PARAM_FLAG_DESC) comes back through uct_iface_release_desc(),
 * which finds release_desc right before the headroom. */
typedef struct uct_rc_gdr_buf {
    uint32_t                  lkey;
    uct_recv_desc_t           *release_desc;
} uct_rc_gdr_buf_t;


KHASH_MAP_INIT_INT(uct_rc_gdr_qpn, uct_rc_gdr_ep_t*);




struct uct_rc_gdr_iface {
    uct_base_iface_t          super;
    uint8_t                   port_num;
    struct ibv_port_attr      port_attr;
    uint8_t                   gid_index;
    union ibv_gid             gid;
    int                       is_roce;
    struct ibv_cq             *send_cq;
    struct ibv_cq             *recv_cq;
    struct ibv_srq            *srq;
    uct_rc_gdr_iface_event_t  event;      /* completion channel of both
                                             CQs (rc_gdr_event.h) */
    ucs_mpool_t               tx_mp;      /* uct_rc_gdr_buf_t + seg_size */
    ucs_mpool_t               rx_mp;      /* uct_rc_gdr_buf_t + seg_size */
    ucs_mpool_t               op_mp;      /* uct_rc_gdr_op_t (rc_gdr_ep.h) */
    khash_t(uct_rc_gdr_qpn)   eps_by_qpn;
    ucs_list_link_t           eps;        /* every live endpoint */
    ucs_list_link_t           zombies;    /* destroyed, completions due */
    ucs_list_link_t           all_list;   /* in the process's list of live
                                             interfaces (rc_gdr_iface.c) */
    ucs_list_link_t           busy_eps;   /* pending requests or credits
                                             owed: progress visits these
                                             only, not every endpoint */
    unsigned                  tx_cq_avail;
    unsigned                  tx_signaled; /* signaled work requests whose
                                              completion was not taken */
    unsigned                  tx_idle_polls; /* progress calls that could
                                                skip the send queue */
    int                       tx_poll_skipped; /* the last progress did not
                                                  poll the send queue */
    unsigned                  rx_posted;
    int                       rx_returned; /* a kept buffer came back:
                                              repost even without receives */
    uct_recv_desc_t           release_desc;
    struct {
        ucs_time_t            interval; /* between sweeps; 0: off */
        ucs_time_t            next;     /* the next sweep, at the earliest */
        unsigned              polls;    /* progress calls since the clock
                                           was last read */
    } stall;
    unsigned                  state_seen; /* STATE_SIGNAL requests logged */
    struct {
        unsigned              tx_queue_len;
        unsigned              tx_cq_moderation;
        unsigned              tx_cq_low;     /* less room than this in the
                                                send queue: polled even
                                                behind messages */
        unsigned              rx_queue_len;
        unsigned              fc_wnd_size;
        unsigned              fc_grant_idle; /* credits owed that go back
                                                alone once no message
                                                arrives (half a window) */
        unsigned              fc_grant_now;  /* ... that go back alone at
                                                once (three quarters) */
        size_t                seg_size;
        size_t                rx_headroom; /* the user's bytes before
                                              received data */
        size_t                max_inline;
        unsigned              max_send_sge;
        unsigned              max_rd_atomic;
        uint8_t               timeout_exp;   /* 4.096 us * 2^exp per try */
        uint8_t               retry_count;
        uint8_t               atomic;        /* device 64-bit atomics */
        uint8_t               flush_mode;    /* uct_rc_gdr_flush_mode_t */
    } config;
    uct_rc_gdr_iface_stats_t  stats;
    /* UCT's handler of an id nobody set (every id's at init), which logs a
     * warning, a dump and a backtrace per message: what a peer sends to
     * such an id is dropped before it (uct_rc_gdr_iface_am_unhandled) */
    uct_am_callback_t         am_stub;
    ucs_time_t                am_no_handler_logged; /* last said */
    uct_rc_gdr_bounce_iface_t *bounce;    /* the lane's state */
    const uct_rc_gdr_iface_lane_ops_t *lane_ops; /* set by the lane */
    unsigned                  lane_users; /* endpoints the lane keeps state
                                             for: only then does progress
                                             give it a turn */
};


/* Where a receive buffer's data starts: past the header and the headroom */
static UCS_F_ALWAYS_INLINE void *
uct_rc_gdr_iface_rx_data(uct_rc_gdr_iface_t *iface, uct_rc_gdr_buf_t *buf)
{
    return UCS_PTR_BYTE_OFFSET(buf + 1, iface->config.rx_headroom);
}


UCS_CLASS_DECLARE_NEW_FUNC(uct_rc_gdr_iface_t, uct_iface_t, uct_md_h,
                           uct_worker_h, const uct_iface_params_t*,
                           const uct_iface_config_t*);

ucs_status_t
uct_rc_gdr_iface_query_devices(uct_md_h md,
                               uct_tl_device_resource_t **devices_p,
                               unsigned *num_devices_p);

/**
 * Copy the counters of an rc_gdr interface, for tests and tools. The caller
 * sets stats->size to sizeof its struct; on return stats->size is the number
 * of bytes filled: min(caller's size, this build's size). Exported: a test
 * program finds it with dlsym(RTLD_DEFAULT, "uct_rc_gdr_iface_stats_query").
 *
 * @return UCS_ERR_INVALID_PARAM if @a tl_iface is not an rc_gdr interface or
 *         stats->size is less than two fields.
 */
ucs_status_t uct_rc_gdr_iface_stats_query(uct_iface_h tl_iface,
                                          uct_rc_gdr_iface_stats_t *stats);

/**
 * The counters of every live rc_gdr interface on @a dev_name ("mlx5_0:1"),
 * summed (high-water marks too: an upper bound), for a program that reaches
 * rc_gdr only through UCP, which opens interfaces its users never see. Read
 * without the interfaces' locks: call it while they are quiet. Same size
 * rules as uct_rc_gdr_iface_stats_query; exported likewise.
 *
 * @return UCS_ERR_NO_ELEM if no live interface is on @a dev_name.
 */
ucs_status_t uct_rc_gdr_dev_stats_query(const char *dev_name,
                                        uct_rc_gdr_iface_stats_t *stats);

extern ucs_config_field_t uct_rc_gdr_iface_config_table[];

#endif
