/*
 * rc_gdr interface: port, completion queues, shared receive queue,
 * progress and the attributes UCP chooses protocols by.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h" /* UCX's: its log level, assertions */
#endif

#include "rc_gdr_iface.h"
#include "rc_gdr_ep.h"
#include "rc_gdr_addr.h"

#include <ucs/arch/bitops.h>
#include <ucs/arch/cpu.h>
#include <ucs/datastruct/mpool.inl>
#include <ucs/debug/log.h>
#include <ucs/sys/string.h>
#include <ucs/type/class.h>
#include <uct/api/v2/uct_v2.h>

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>


#define UCT_RC_GDR_POLL_BATCH    16
#define UCT_RC_GDR_RX_BATCH      16
#define UCT_RC_GDR_TX_IDLE_POLLS 16 /* progress calls between two polls of a
                                       send queue where only error
                                       completions can be */


static ucs_config_field_t uct_rc_gdr_iface_pool_config_table[] = {
    UCT_RC_GDR_IFACE_MPOOL_CONFIG_FIELDS("TX_", -1, 0, "send",
                                         ucs_offsetof(uct_rc_gdr_iface_config_t,
                                                      tx_mp), ""),

    UCT_RC_GDR_IFACE_MPOOL_CONFIG_FIELDS("RX_", -1, 0, "receive",
                                         ucs_offsetof(uct_rc_gdr_iface_config_t,
                                                      rx_mp),
                                         "\nActive messages the user keeps "
                                         "(UCT_CB_PARAM_FLAG_DESC) hold "
                                         "receive buffers until released."),

    {NULL}
};


ucs_config_field_t uct_rc_gdr_iface_config_table[] = {
    {"", "ALLOC=huge,thp,mmap,heap", NULL,
     ucs_offsetof(uct_rc_gdr_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},

    {"TX_QUEUE_LEN", "256",
     "Send work requests per endpoint (queue pair send queue length).",
     ucs_offsetof(uct_rc_gdr_iface_config_t, tx_queue_len),
     UCS_CONFIG_TYPE_UINT},

    {"TX_CQ_MODERATION", "64",
     "Writes and sends nobody waits for between two that report a "
     "completion: one completion retires every request before it (at most "
     "half of TX_QUEUE_LEN). Reads, atomics and requests whose completion "
     "the user waits for always report.",
     ucs_offsetof(uct_rc_gdr_iface_config_t, tx_cq_moderation),
     UCS_CONFIG_TYPE_UINT},

    {"TX_CQ_LEN", "4096",
     "Send completion queue length, shared by the endpoints of an interface.",
     ucs_offsetof(uct_rc_gdr_iface_config_t, tx_cq_len), UCS_CONFIG_TYPE_UINT},

    {"RX_QUEUE_LEN", "512",
     "Receive buffers in the interface's shared receive queue.",
     ucs_offsetof(uct_rc_gdr_iface_config_t, rx_queue_len),
     UCS_CONFIG_TYPE_UINT},

    {"FC_WND_SIZE", "128",
     "Active messages an endpoint may send before the peer returns credits.",
     ucs_offsetof(uct_rc_gdr_iface_config_t, fc_wnd_size),
     UCS_CONFIG_TYPE_UINT},

    {"SEG_SIZE", "8192",
     "Size of the bounce buffers for bcopy and active messages; the largest "
     "active message.",
     ucs_offsetof(uct_rc_gdr_iface_config_t, seg_size),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"TX_MAX_INLINE", "128",
     "Largest payload sent inline in the work request (short operations).",
     ucs_offsetof(uct_rc_gdr_iface_config_t, max_inline),
     UCS_CONFIG_TYPE_MEMUNITS},

    {"FAILURE_TIMEOUT", "8s",
     "Time after which a peer that stopped acknowledging is reported as "
     "failed (UCS_ERR_ENDPOINT_TIMEOUT). Split into RETRY_COUNT+1 transport "
     "timeouts of 4.096us*2^n each, so the bound is approximate.",
     ucs_offsetof(uct_rc_gdr_iface_config_t, failure_timeout),
     UCS_CONFIG_TYPE_TIME},

    {"TX_STALL_TIMEOUT", "auto",
     "Time after which an endpoint whose requests have reported nothing is "
     "failed (UCS_ERR_ENDPOINT_TIMEOUT), in case the transport's own timeout "
     "never fires: soft-RoCE with RETRY_COUNT=7 retries forever, and has "
     "been seen to lose its retry timer under load. Sends too: one that waits "
     "this long for a peer that posts no receive buffers (RNR retries are "
     "unbounded) fails as well. auto: 4 x FAILURE_TIMEOUT; inf: off.",
     ucs_offsetof(uct_rc_gdr_iface_config_t, tx_stall_timeout),
     UCS_CONFIG_TYPE_TIME_UNITS},

    {"STATE_SIGNAL", "0",
     "Signal (e.g. SIGUSR2) on which every rc_gdr interface of the process "
     "logs, at warning level, its counters and the flow-control, queue and "
     "QP state of each endpoint (at its next progress): what a hang looks "
     "like from inside. 0 (SIGNAL0): no handler is installed.",
     ucs_offsetof(uct_rc_gdr_iface_config_t, state_signal),
     UCS_CONFIG_TYPE_SIGNO},

    {"RETRY_COUNT", "6",
     "Transport retries before a work request fails (0..7). Soft-RoCE (rxe) "
     "treats 7 as 'retry forever', so a dead peer would never be reported.",
     ucs_offsetof(uct_rc_gdr_iface_config_t, retry_count),
     UCS_CONFIG_TYPE_UINT},

    {"MAX_RD_ATOMIC", "auto",
     "RDMA reads and atomics in flight per endpoint, as initiator and as "
     "responder. \"auto\" takes the device's limit, as UCX's rc_verbs does; "
     "a number is capped to it.",
     ucs_offsetof(uct_rc_gdr_iface_config_t, max_rd_atomic),
     UCS_CONFIG_TYPE_ULUNITS},

    {"GID_INDEX", "0",
     "GID table index of the local port (RoCE).",
     ucs_offsetof(uct_rc_gdr_iface_config_t, gid_index),
     UCS_CONFIG_TYPE_UINT},

    UCT_RC_GDR_FLUSH_CONFIG_FIELD(ucs_offsetof(uct_rc_gdr_iface_config_t,
                                               flush_mode)),

    UCT_RC_GDR_BOUNCE_CONFIG_FIELD(ucs_offsetof(uct_rc_gdr_iface_config_t,
                                                bounce)),

    /* The buffer pools' knobs, in a table of their own with no prefix of
     * its own (offsets are the whole struct's): UCX 1.22's
     * uct_config_modify() matches a bare name (RX_MAX_BUFS, as UCX's tests
     * set it) only against a sub-table's prefix, never the top table's. */
    {"", "", NULL, 0,
     UCS_CONFIG_TYPE_TABLE(uct_rc_gdr_iface_pool_config_table)},

    {NULL}
};


static uct_iface_ops_t uct_rc_gdr_iface_ops;

/* Operation descriptors live in plain host memory: no NIC ever reads them. */
static ucs_mpool_ops_t uct_rc_gdr_op_mpool_ops = {
    .chunk_alloc   = ucs_mpool_chunk_malloc,
    .chunk_release = ucs_mpool_chunk_free,
    .obj_init      = NULL,
    .obj_cleanup   = NULL,
    .obj_str       = NULL
};


/* Port rate in bytes per second, from the width and speed the port reports. */
static double uct_rc_gdr_iface_port_bandwidth(const struct ibv_port_attr *attr)
{
    static const double lane_gbps[] = {
        [1] = 2.5, [2] = 5.0, [4] = 10.0, [8] = 10.3125, [16] = 14.0625,
        [32] = 25.78125, [64] = 50.0, [128] = 100.0
    };
    unsigned width = (attr->active_width == 1) ? 1 :
                     (attr->active_width == 2) ? 4 :
                     (attr->active_width == 4) ? 8 :
                     (attr->active_width == 8) ? 12 : 2;
    double gbps    = ((attr->active_speed < ucs_static_array_size(lane_gbps)) &&
                      (lane_gbps[attr->active_speed] > 0)) ?
                     lane_gbps[attr->active_speed] : 2.5;

    return width * gbps * 1e9 / 8;
}


static ucs_status_t uct_rc_gdr_iface_query(uct_iface_h tl_iface,
                                           uct_iface_attr_t *attr)
{
    uct_rc_gdr_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_gdr_iface_t);
    uct_rc_gdr_md_t *md       = ucs_derived_of(iface->super.md,
                                               uct_rc_gdr_md_t);
    size_t max_msg            = iface->port_attr.max_msg_sz;
    unsigned max_iov          = ucs_min(iface->config.max_send_sge,
                                        (unsigned)UCT_RC_GDR_MAX_IOV);
    unsigned max_get_iov      = ucs_min((unsigned)md->dev_attr.max_sge_rd,
                                        max_iov);
    /* An active message's 8-byte header counts in its max_short. */
    unsigned am_max_short     = (iface->config.max_inline >=
                                 sizeof(uint64_t)) ?
                                iface->config.max_inline : 0;

    uct_base_iface_query(&iface->super, attr);

    attr->cap.put.max_short       = iface->config.max_inline;
    attr->cap.put.max_bcopy       = iface->config.seg_size;
    attr->cap.put.min_zcopy       = 0;
    attr->cap.put.max_zcopy       = max_msg;
    attr->cap.put.opt_zcopy_align = 512;
    attr->cap.put.align_mtu       = 128u << iface->port_attr.active_mtu;
    attr->cap.put.max_iov         = max_iov;

    attr->cap.get.max_bcopy       = iface->config.seg_size;
    attr->cap.get.min_zcopy       = 0;
    attr->cap.get.max_zcopy       = max_msg;
    attr->cap.get.opt_zcopy_align = 512;
    attr->cap.get.align_mtu       = attr->cap.put.align_mtu;
    attr->cap.get.max_iov         = ucs_max(max_get_iov, 1u);

    attr->cap.am.max_short        = am_max_short;
    attr->cap.am.max_bcopy        = iface->config.seg_size;
    attr->cap.am.min_zcopy        = 0;
    attr->cap.am.max_zcopy        = iface->config.seg_size -
                                    UCT_RC_GDR_AM_MAX_HDR;
    attr->cap.am.opt_zcopy_align  = 512;
    attr->cap.am.align_mtu        = attr->cap.put.align_mtu;
    attr->cap.am.max_hdr          = UCT_RC_GDR_AM_MAX_HDR;
    attr->cap.am.max_iov          = max_iov - 1;

    attr->cap.flags = UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY |
                      UCT_IFACE_FLAG_AM_ZCOPY | UCT_IFACE_FLAG_PUT_SHORT |
                      UCT_IFACE_FLAG_PUT_BCOPY | UCT_IFACE_FLAG_PUT_ZCOPY |
                      UCT_IFACE_FLAG_GET_BCOPY | UCT_IFACE_FLAG_GET_ZCOPY |
                      UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_CONNECT_TO_EP |
                      UCT_IFACE_FLAG_CB_SYNC | UCT_IFACE_FLAG_EP_CHECK |
                      UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE;

    /* Through the completion channel (rc_gdr_event.c); RECV_SIG: active
     * messages sent with UCT_SEND_FLAG_SIGNALED are solicited. */
    attr->cap.event_flags = UCT_IFACE_FLAG_EVENT_SEND_COMP |
                            UCT_IFACE_FLAG_EVENT_RECV |
                            UCT_IFACE_FLAG_EVENT_RECV_SIG |
                            UCT_IFACE_FLAG_EVENT_FD;

    if (iface->config.atomic) {
        attr->cap.flags              |= UCT_IFACE_FLAG_ATOMIC_DEVICE;
        attr->cap.atomic64.op_flags   = UCS_BIT(UCT_ATOMIC_OP_ADD);
        attr->cap.atomic64.fop_flags  = UCS_BIT(UCT_ATOMIC_OP_ADD) |
                                        UCS_BIT(UCT_ATOMIC_OP_CSWAP);
    }

    attr->device_addr_len  = uct_rc_gdr_dev_addr_size();
    attr->iface_addr_len   = 0;
    attr->ep_addr_len      = uct_rc_gdr_ep_addr_size();
    attr->max_conn_priv    = 0;
    attr->dev_num_paths    = 1;
    attr->overhead         = 75e-9;
    attr->latency          = ucs_linear_func_make(700e-9, 1e-9);
    attr->bandwidth.dedicated = uct_rc_gdr_iface_port_bandwidth(
                                        &iface->port_attr);
    attr->bandwidth.shared = 0;
    attr->priority         = 0;
    return UCS_OK;
}


static ucs_status_t
uct_rc_gdr_iface_get_device_address(uct_iface_h tl_iface,
                                    uct_device_addr_t *addr)
{
    uct_rc_gdr_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_gdr_iface_t);
    uct_rc_gdr_dev_addr_t dev_addr;

    dev_addr.is_roce = iface->is_roce;
    dev_addr.lid     = iface->port_attr.lid;
    memcpy(dev_addr.gid, iface->gid.raw, sizeof(dev_addr.gid));
    uct_rc_gdr_dev_addr_pack(&dev_addr, addr);
    return UCS_OK;
}


#define UCT_RC_GDR_IFACE_WHY(_why, _max, ...) \
    if ((_why) != NULL) { \
        ucs_snprintf_safe(_why, _max, __VA_ARGS__); \
    }

int uct_rc_gdr_iface_reachable(uct_iface_h tl_iface,
                               const uct_device_addr_t *dev_addr,
                               char *why, size_t max)
{
    uct_rc_gdr_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_gdr_iface_t);
    uct_rc_gdr_dev_addr_t remote;

    if ((dev_addr == NULL) ||
        (uct_rc_gdr_dev_addr_unpack(dev_addr, uct_rc_gdr_dev_addr_size(),
                                    &remote) != UCS_OK)) {
        UCT_RC_GDR_IFACE_WHY(why, max, "no valid rc_gdr device address");
        return 0;
    }

    /* RoCE reaches by GID (routable); InfiniBand needs the same subnet. */
    if (remote.is_roce != iface->is_roce) {
        UCT_RC_GDR_IFACE_WHY(why, max, "link layer differs (%s here)",
                          iface->is_roce ? "RoCE" : "InfiniBand");
        return 0;
    }

    if (!iface->is_roce &&
        memcmp(remote.gid, iface->gid.raw, 8 /* subnet prefix */)) {
        UCT_RC_GDR_IFACE_WHY(why, max, "another InfiniBand subnet");
        return 0;
    }
    return 1;
}


int uct_rc_gdr_iface_same_device(uct_iface_h tl_iface,
                                 const uct_device_addr_t *dev_addr)
{
    uct_rc_gdr_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_gdr_iface_t);
    uct_rc_gdr_dev_addr_t remote;

    return (dev_addr != NULL) &&
           (uct_rc_gdr_dev_addr_unpack(dev_addr, uct_rc_gdr_dev_addr_size(),
                                       &remote) == UCS_OK) &&
           (remote.is_roce == iface->is_roce) &&
           (remote.lid == iface->port_attr.lid) &&
           !memcmp(remote.gid, iface->gid.raw, sizeof(remote.gid));
}


static int uct_rc_gdr_iface_is_reachable(const uct_iface_h tl_iface,
                                         const uct_device_addr_t *dev_addr,
                                         const uct_iface_addr_t *iface_addr)
{
    return uct_rc_gdr_iface_reachable(tl_iface, dev_addr, NULL, 0);
}


/* Every live interface of the process, for uct_rc_gdr_dev_stats_query */
static UCS_LIST_HEAD(uct_rc_gdr_iface_all);
static pthread_mutex_t uct_rc_gdr_iface_all_lock = PTHREAD_MUTEX_INITIALIZER;


static int uct_rc_gdr_iface_stats_size_check(const uct_rc_gdr_iface_stats_t
                                             *stats)
{
    if (stats->size < 2 * sizeof(uint64_t)) {
        ucs_error("rc_gdr: stats query with size %" PRIu64 ", at least %zu",
                  stats->size, 2 * sizeof(uint64_t));
        return 0;
    }
    return 1;
}


/* Exported for tests: see rc_gdr_iface.h */
ucs_status_t uct_rc_gdr_dev_stats_query(const char *dev_name,
                                        uct_rc_gdr_iface_stats_t *stats)
{
    char name[UCT_DEVICE_NAME_MAX + 16];
    uct_rc_gdr_iface_t *iface;
    const uint64_t *from;
    uint64_t *sum;
    size_t size, i;
    int found;

    if ((dev_name == NULL) || (stats == NULL) ||
        !uct_rc_gdr_iface_stats_size_check(stats)) {
        return UCS_ERR_INVALID_PARAM;
    }

    size = ucs_min(stats->size, sizeof(*stats));
    sum  = (uint64_t*)stats;
    memset(stats, 0, size);
    found = 0;
    pthread_mutex_lock(&uct_rc_gdr_iface_all_lock);
    ucs_list_for_each(iface, &uct_rc_gdr_iface_all, all_list) {
        snprintf(name, sizeof(name), "%s:%u",
                 ucs_derived_of(iface->super.md, uct_rc_gdr_md_t)->name,
                 iface->port_num);
        if (strcmp(name, dev_name)) {
            continue;
        }
        from = (const uint64_t*)&iface->stats;
        for (i = 1; i < size / sizeof(uint64_t); ++i) { /* after size */
            sum[i] += from[i];
        }
        found = 1;
    }
    pthread_mutex_unlock(&uct_rc_gdr_iface_all_lock);
    stats->size = size;
    return found ? UCS_OK : UCS_ERR_NO_ELEM;
}


/* Exported for tests: see rc_gdr_iface.h */
ucs_status_t uct_rc_gdr_iface_stats_query(uct_iface_h tl_iface,
                                          uct_rc_gdr_iface_stats_t *stats)
{
    uct_rc_gdr_iface_t *iface;
    size_t size;

    if ((tl_iface == NULL) || (stats == NULL) ||
        (tl_iface->ops.iface_query != uct_rc_gdr_iface_query)) {
        ucs_error("rc_gdr: stats query on an interface that is not rc_gdr");
        return UCS_ERR_INVALID_PARAM;
    }

    if (!uct_rc_gdr_iface_stats_size_check(stats)) {
        return UCS_ERR_INVALID_PARAM;
    }

    iface = ucs_derived_of(tl_iface, uct_rc_gdr_iface_t);
    size  = ucs_min(stats->size, sizeof(iface->stats));
    memcpy(stats, &iface->stats, size);
    stats->size = size;
    return UCS_OK;
}


static uct_rc_gdr_ep_t *uct_rc_gdr_iface_lookup_ep(uct_rc_gdr_iface_t *iface,
                                                  uint32_t qp_num)
{
    khiter_t iter = kh_get(uct_rc_gdr_qpn, &iface->eps_by_qpn, qp_num);

    return (iter == kh_end(&iface->eps_by_qpn)) ? NULL :
           kh_value(&iface->eps_by_qpn, iter);
}


/* Posts receive buffers in one chained call, up to the queue length. */
static unsigned uct_rc_gdr_iface_post_recvs(uct_rc_gdr_iface_t *iface)
{
    struct ibv_recv_wr wrs[UCT_RC_GDR_RX_BATCH], *bad_wr;
    struct ibv_sge sges[UCT_RC_GDR_RX_BATCH];
    uct_rc_gdr_buf_t *buf;
    unsigned count = 0, batch, i;
    int ret;

    while (iface->rx_posted < iface->config.rx_queue_len) {
        batch = ucs_min(iface->config.rx_queue_len - iface->rx_posted,
                        (unsigned)UCT_RC_GDR_RX_BATCH);
        for (i = 0; i < batch; ++i) {
            buf = ucs_mpool_get_inline(&iface->rx_mp);
            if (buf == NULL) {
                break;
            }
            sges[i].addr   = (uintptr_t)uct_rc_gdr_iface_rx_data(iface, buf);
            sges[i].length = iface->config.seg_size;
            sges[i].lkey   = buf->lkey;
            wrs[i].wr_id   = (uintptr_t)buf;
            wrs[i].sg_list = &sges[i];
            wrs[i].num_sge = 1;
            wrs[i].next    = &wrs[i + 1];
        }
        if (i == 0) {
            break;
        }

        wrs[i - 1].next = NULL;
        ret = ibv_post_srq_recv(iface->srq, wrs, &bad_wr);
        if (ret != 0) {
            ucs_error("rc_gdr: ibv_post_srq_recv() failed: %s", strerror(ret));
            for (; bad_wr != NULL; bad_wr = bad_wr->next) {
                ucs_mpool_put_inline((void*)bad_wr->wr_id);
                --i;
            }
            iface->rx_posted += i;
            count            += i;
            break;
        }

        iface->rx_posted += i;
        count            += i;
        if (i < batch) {
            break;
        }
    }

    return count;
}


/*
 * An active message to an id the user set no handler for: a peer may send
 * such messages at will, so they are dropped here, counted, and said in one
 * line at most once a second (UCT's stub would log a warning, a hex dump and
 * a backtrace for each). The receive buffer goes back to the queue.
 */
static UCS_F_NOINLINE void
uct_rc_gdr_iface_am_unhandled(uct_rc_gdr_iface_t *iface, unsigned id,
                              uint32_t qp_num)
{
    ucs_time_t now = ucs_get_time();

    ++iface->stats.am_no_handler;
    if ((iface->stats.am_no_handler > 1) &&
        (now - iface->am_no_handler_logged < ucs_time_from_sec(1.0))) {
        return;
    }

    iface->am_no_handler_logged = now;
    ucs_warn("rc_gdr: active message id %u from QP 0x%x has no handler: "
             "dropped (%" PRIu64 " so far; said at most once a second)", id,
             qp_num, iface->stats.am_no_handler);
}


static void uct_rc_gdr_iface_handle_recv(uct_rc_gdr_iface_t *iface,
                                         struct ibv_wc *wc)
{
    uct_rc_gdr_buf_t *buf = (uct_rc_gdr_buf_t*)wc->wr_id;
    uct_rc_gdr_ep_t *ep;
    ucs_status_t status;
    uint32_t imm;
    void *data;

    --iface->rx_posted;

    if (wc->status != IBV_WC_SUCCESS) {
        if (wc->status != IBV_WC_WR_FLUSH_ERR) {
            ucs_error("rc_gdr: receive completion with error: %s",
                      ibv_wc_status_str(wc->status));
        }
        goto out;
    }

    if (ucs_unlikely(!(wc->wc_flags & IBV_WC_WITH_IMM))) {
        /* Not of the protocol: said once (a peer repeating it must not
         * flood the log), every one counted */
        if (iface->stats.rx_no_imm++ == 0) {
            ucs_error("rc_gdr: received a message without immediate data "
                      "from QP 0x%x: dropped; further ones are counted, not "
                      "logged", wc->qp_num);
        } else {
            ucs_debug("rc_gdr: message without immediate data from QP 0x%x:"
                      " dropped", wc->qp_num);
        }
        goto out;
    }

    ++iface->stats.rx_msgs;
    imm = ntohl(wc->imm_data);
    ep  = uct_rc_gdr_iface_lookup_ep(iface, wc->qp_num);
    if (ucs_unlikely(ep == NULL)) {
        /* No endpoint of ours: nobody the user knows sent it. Also what
         * was received for an endpoint destroyed since, which is routine:
         * said once, at diag level, and counted. */
        if (iface->stats.unknown_qp_msgs++ == 0) {
            ucs_diag("rc_gdr: message on QP 0x%x of no endpoint: dropped "
                     "(counted)", wc->qp_num);
        }
        goto out;
    }

    uct_rc_gdr_ep_recv_credits(ep, (imm >> UCT_RC_GDR_IMM_CREDITS_SHIFT) &
                                   UCT_RC_GDR_IMM_CREDITS_MAX);
    if (imm & UCT_RC_GDR_IMM_CREDIT_ONLY) {
        goto out;
    }

    /* Counted before the callback, which may destroy the endpoint (it is
     * found again by its QP number afterwards, or not at all). Credits go
     * back at once even for a kept buffer: the shared receive queue, not
     * the sender's window, runs out when the user keeps many (the peer then
     * waits on receiver-not-ready retries). */
    ++ep->fc_to_return;
    data = uct_rc_gdr_iface_rx_data(iface, buf);
    if (imm & UCT_RC_GDR_IMM_INTERNAL) {
        iface->lane_ops->recv(iface, ep, data, wc->byte_len);
    } else if (ucs_unlikely(iface->super.am[imm & UCT_RC_GDR_IMM_AM_ID_MASK]
                                    .cb == iface->am_stub)) {
        uct_rc_gdr_iface_am_unhandled(iface, imm & UCT_RC_GDR_IMM_AM_ID_MASK,
                                      wc->qp_num);
    } else {
        uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_RECV,
                           (int)(imm & UCT_RC_GDR_IMM_AM_ID_MASK), data,
                           wc->byte_len, "rc_gdr: QP 0x%x RX", wc->qp_num);
        status = uct_iface_invoke_am(&iface->super,
                                     imm & UCT_RC_GDR_IMM_AM_ID_MASK,
                                     data, wc->byte_len,
                                     UCT_CB_PARAM_FLAG_DESC);
        if (status == UCS_INPROGRESS) {
            buf = NULL; /* the user keeps it: uct_iface_release_desc() */
        }
    }

    ep = uct_rc_gdr_iface_lookup_ep(iface, wc->qp_num);
    if (ep != NULL) {
        uct_rc_gdr_ep_grant_credits(ep, iface->config.fc_grant_now);
    }

out:
    if (buf != NULL) {
        ucs_mpool_put_inline(buf);
    }
}


/* uct_iface_release_desc() of a kept active message: desc is where the
 * user's headroom starts, right after the buffer's header */
static void uct_rc_gdr_iface_release_desc(uct_recv_desc_t *self, void *desc)
{
    uct_rc_gdr_iface_t *iface = ucs_container_of(self, uct_rc_gdr_iface_t,
                                                 release_desc);

    ucs_mpool_put_inline((uct_rc_gdr_buf_t*)desc - 1);
    iface->rx_returned = 1;
}


/* STATE_SIGNAL: the handler only counts; each interface logs at its next
 * sweep (progress context, never the handler's). */
static volatile sig_atomic_t uct_rc_gdr_state_requests;
static int uct_rc_gdr_state_signo;


static void uct_rc_gdr_iface_state_handler(int signo)
{
    ++uct_rc_gdr_state_requests;
}


/* The first interface that asks installs the handler, once per process. */
static void uct_rc_gdr_iface_state_signal_init(int signo)
{
    struct sigaction sa;

    if ((signo <= 0) || (uct_rc_gdr_state_signo != 0)) {
        return;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = uct_rc_gdr_iface_state_handler;
    sa.sa_flags   = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(signo, &sa, NULL) != 0) {
        ucs_warn("rc_gdr: STATE_SIGNAL %d: sigaction() failed: %m", signo);
        return;
    }
    uct_rc_gdr_state_signo = signo;
}


static UCS_F_NOINLINE void uct_rc_gdr_iface_log_state(uct_rc_gdr_iface_t *iface)
{
    ucs_list_link_t *lists[] = {&iface->eps, &iface->zombies};
    uct_rc_gdr_ep_t *ep;
    unsigned i;

    ucs_warn("rc_gdr: %s:%u state: rx_posted %u/%u rx_returned %d "
             "tx_cq_avail %u busy_eps %s tx_wrs %" PRIu64 " rx_msgs %"
             PRIu64 " credit_grants %" PRIu64 " credit_overflows %" PRIu64
             " unknown_qp_msgs %" PRIu64 " rx_no_imm %" PRIu64
             " am_no_handler %" PRIu64 " tx_stalls %" PRIu64,
             ucs_derived_of(iface->super.md, uct_rc_gdr_md_t)->name,
             iface->port_num, iface->rx_posted, iface->config.rx_queue_len,
             iface->rx_returned, iface->tx_cq_avail,
             ucs_list_is_empty(&iface->busy_eps) ? "empty" : "not empty",
             iface->stats.tx_wrs, iface->stats.rx_msgs,
             iface->stats.credit_grants, iface->stats.credit_overflows,
             iface->stats.unknown_qp_msgs, iface->stats.rx_no_imm,
             iface->stats.am_no_handler, iface->stats.tx_stalls);
    for (i = 0; i < ucs_static_array_size(lists); ++i) {
        ucs_list_for_each(ep, lists[i], list) {
            uct_rc_gdr_ep_log_state(ep);
        }
    }
}


/*
 * The stall check: every UCT_RC_GDR_STALL_POLLS progress calls the clock is
 * read, and once per interval every endpoint, destroyed ones waiting for
 * their completions too, is swept (uct_rc_gdr_ep_check_stall). The clock is
 * not read on every call: progress is the data path.
 */
static UCS_F_NOINLINE void
uct_rc_gdr_iface_stall_sweep(uct_rc_gdr_iface_t *iface)
{
    ucs_list_link_t *lists[] = {&iface->eps, &iface->zombies};
    ucs_time_t now;
    uct_rc_gdr_ep_t *ep;
    unsigned i;

    iface->stall.polls = 0;
    if (ucs_unlikely(iface->state_seen !=
                     (unsigned)uct_rc_gdr_state_requests)) {
        iface->state_seen = uct_rc_gdr_state_requests;
        uct_rc_gdr_iface_log_state(iface);
    }

    if (iface->stall.interval == 0) {
        return; /* TX_STALL_TIMEOUT=inf */
    }

    now = ucs_get_time();
    if (now < iface->stall.next) {
        return;
    }

    iface->stall.next = now + iface->stall.interval;
    /* Failing an endpoint only moves its QP to the error state: the
     * completions, and any user callback, come from a later poll. */
    for (i = 0; i < ucs_static_array_size(lists); ++i) {
        ucs_list_for_each(ep, lists[i], list) {
            if (uct_rc_gdr_ep_check_stall(ep, UCT_RC_GDR_STALL_SWEEPS)) {
                ++iface->stats.tx_stalls;
            }
        }
    }
}


static UCS_F_ALWAYS_INLINE unsigned
uct_rc_gdr_iface_poll_send(uct_rc_gdr_iface_t *iface, struct ibv_wc *wcs)
{
    uct_rc_gdr_ep_t *ep;
    int i, num_wcs;

    num_wcs = uct_rc_gdr_iface_event_poll_cq(&iface->event,
                                             UCT_RC_GDR_CQ_SEND,
                                             iface->send_cq,
                                             UCT_RC_GDR_POLL_BATCH, wcs);
    for (i = 0; i < num_wcs; ++i) {
        /* wr_id names the descriptor, which knows its endpoint; a work
         * request without one is found by its QP */
        if (ucs_likely(!(wcs[i].wr_id & UCT_RC_GDR_WR_ID_BARE))) {
            ep = ((uct_rc_gdr_op_t*)wcs[i].wr_id)->ep;
        } else {
            ep = uct_rc_gdr_iface_lookup_ep(iface, wcs[i].qp_num);
            if (ep == NULL) {
                ucs_error("rc_gdr: completion on QP 0x%x of no endpoint "
                          "(wr_id 0x%" PRIx64 "): dropped", wcs[i].qp_num,
                          (uint64_t)wcs[i].wr_id);
                continue;
            }
        }
        uct_rc_gdr_ep_send_completion(ep, &wcs[i]);
    }
    return ucs_max(num_wcs, 0);
}


/*
 * Whether progress polls the send queue after the receive queue:
 * - not behind messages, unless its room runs short (tx_cq_low), as UCX's
 *   rc_verbs does: the completion a caller waits for goes back to it with
 *   no poll behind it. Polled after the send queue, the receive queue held
 *   back one-in-flight reads by whatever that poll found;
 * - only when a completion can be there: a signaled request is outstanding
 *   or an arm kept one. Otherwise only error completions of unsignaled
 *   requests can come, which every UCT_RC_GDR_TX_IDLE_POLLS-th call looks
 *   for. An empty poll is a call into the provider on every progress.
 * Both measured on the stand-in NIC: doc/MEASUREMENTS.md, "Progress:
 * messages first". An arm after a skipped poll looks into the queue itself
 * (uct_rc_gdr_iface_event_has_work).
 */
static UCS_F_ALWAYS_INLINE int
uct_rc_gdr_iface_send_poll_due(uct_rc_gdr_iface_t *iface, int num_recvs)
{
    return ((num_recvs <= 0) ||
            (iface->tx_cq_avail < iface->config.tx_cq_low)) &&
           ((iface->tx_signaled != 0) ||
            iface->event.stashed[UCT_RC_GDR_CQ_SEND] ||
            ((++iface->tx_idle_polls % UCT_RC_GDR_TX_IDLE_POLLS) == 0));
}


static unsigned uct_rc_gdr_iface_progress(uct_iface_h tl_iface)
{
    uct_rc_gdr_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_gdr_iface_t);
    struct ibv_wc wcs[UCT_RC_GDR_POLL_BATCH];
    ucs_list_link_t busy;
    uct_rc_gdr_ep_t *ep;
    unsigned count = 0;
    unsigned credits_due;
    int i, num_wcs;

    num_wcs = uct_rc_gdr_iface_event_poll_cq(&iface->event,
                                             UCT_RC_GDR_CQ_RECV,
                                             iface->recv_cq,
                                             UCT_RC_GDR_POLL_BATCH, wcs);
    for (i = 0; i < num_wcs; ++i) {
        uct_rc_gdr_iface_handle_recv(iface, &wcs[i]);
    }
    if (num_wcs > 0) {
        count      += num_wcs;
        credits_due = iface->config.fc_grant_now;
        /* Reposting in batches costs one call per batch, not per message;
         * the shared queue keeps all but a batch of buffers posted. */
        if (iface->config.rx_queue_len - iface->rx_posted >=
            ucs_min((unsigned)UCT_RC_GDR_RX_BATCH,
                    iface->config.rx_queue_len / 2)) {
            uct_rc_gdr_iface_post_recvs(iface);
        }
    } else {
        /* Nothing arrived: no reply of the user's is coming to carry
         * what is owed, which goes back now (fc_grant_idle, at init) */
        credits_due = iface->config.fc_grant_idle;
        if (ucs_unlikely(iface->rx_returned)) {
            /* The pool ran dry while the user kept buffers: with nothing
             * posted no receive completes, so a released buffer is posted
             * here. */
            iface->rx_returned = 0;
            uct_rc_gdr_iface_post_recvs(iface);
        }
    }

    iface->tx_poll_skipped = !uct_rc_gdr_iface_send_poll_due(iface, num_wcs);
    if (!iface->tx_poll_skipped) {
        count += uct_rc_gdr_iface_poll_send(iface, wcs);
    }

    if (ucs_unlikely(iface->lane_users > 0)) {
        count += iface->lane_ops->progress(iface);
    }

    if (ucs_unlikely(++iface->stall.polls >= UCT_RC_GDR_STALL_POLLS)) {
        uct_rc_gdr_iface_stall_sweep(iface);
    }

    /* Not only after completions: a connection or credits can give an
     * endpoint resources back without one (a request queued before the
     * endpoint was connected waited forever when nothing else completed).
     * The list is taken first: a pending callback may queue requests on
     * other endpoints, or destroy one (each stays BUSY, so its removal
     * finds it in the taken list). */
    if (ucs_likely(ucs_list_is_empty(&iface->busy_eps))) {
        return count;
    }

    ucs_list_head_init(&busy);
    ucs_list_splice_tail(&busy, &iface->busy_eps);
    ucs_list_head_init(&iface->busy_eps);
    while (!ucs_list_is_empty(&busy)) {
        ep         = ucs_list_extract_head(&busy, uct_rc_gdr_ep_t, busy_link);
        ep->flags &= ~UCT_RC_GDR_EP_FLAG_BUSY;
        /* BUSY again if still owed */
        uct_rc_gdr_ep_dispatch_pending(ep, credits_due);
    }

    return count;
}


/* Flushes every endpoint; those that owe a flush read post it here. An
 * endpoint without the resources for its read, or with pending requests, is
 * not flushed yet: INPROGRESS, and the caller calls again after progress
 * (UCP takes NO_RESOURCE from an iface flush for a failure). */
static ucs_status_t uct_rc_gdr_iface_flush(uct_iface_h tl_iface,
                                           unsigned flags,
                                           uct_completion_t *comp)
{
    uct_rc_gdr_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_gdr_iface_t);
    ucs_status_t status       = UCS_OK;
    ucs_status_t ep_status;
    uct_rc_gdr_ep_t *ep;

    if (comp != NULL) {
        return UCS_ERR_UNSUPPORTED;
    }

    ucs_list_for_each(ep, &iface->eps, list) {
        ep_status = uct_rc_gdr_ep_flush(&ep->super.super, flags, NULL);
        if ((ep_status == UCS_INPROGRESS) ||
            (ep_status == UCS_ERR_NO_RESOURCE)) {
            if (status == UCS_OK) {
                status = UCS_INPROGRESS;
            }
        } else if (UCS_STATUS_IS_ERR(ep_status)) {
            status = ep_status; /* a read could not be posted */
        }
    }

    return status;
}


static ucs_status_t uct_rc_gdr_iface_fence(uct_iface_h tl_iface,
                                           unsigned flags)
{
    uct_rc_gdr_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_gdr_iface_t);
    ucs_status_t status       = UCS_OK;
    ucs_status_t ep_status;
    uct_rc_gdr_ep_t *ep;

    /* Every endpoint is fenced; one that could not post its flush read
     * says so, and the caller retries (fencing again is harmless). */
    ucs_list_for_each(ep, &iface->eps, list) {
        ep_status = uct_rc_gdr_ep_fence(&ep->super.super, flags);
        if (ep_status != UCS_OK) {
            status = ep_status;
        }
    }
    return status;
}


static void uct_rc_gdr_iface_buf_init(uct_iface_h tl_iface, void *obj,
                                      uct_mem_h memh)
{
    uct_rc_gdr_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_gdr_iface_t);
    uct_rc_gdr_buf_t *buf     = obj;

    buf->lkey         = uct_rc_gdr_memh_lkey(memh);
    buf->release_desc = &iface->release_desc;
}


static ucs_status_t uct_rc_gdr_iface_parse_device(const char *dev_name,
                                                  const char *md_name,
                                                  uint8_t *port_num_p)
{
    size_t md_len = strlen(md_name);
    char *end;
    unsigned long port;

    if (strncmp(dev_name, md_name, md_len) || (dev_name[md_len] != ':')) {
        ucs_error("rc_gdr: device '%s' does not belong to '%s'", dev_name,
                  md_name);
        return UCS_ERR_NO_DEVICE;
    }

    port = strtoul(dev_name + md_len + 1, &end, 10);
    if ((*end != '\0') || (port == 0) || (port > UINT8_MAX)) {
        ucs_error("rc_gdr: bad port in device name '%s'", dev_name);
        return UCS_ERR_NO_DEVICE;
    }

    *port_num_p = port;
    return UCS_OK;
}


/*
 * Where received active messages start: the user's alignment (a power of
 * two) of the byte at the user's offset (below the alignment), or the cache
 * line. Received data starts data_offset bytes into a buffer: after its
 * header and the user's headroom.
 */
static ucs_status_t
uct_rc_gdr_iface_am_alignment(const uct_iface_params_t *params,
                              size_t seg_size, size_t data_offset,
                              size_t *align_p, size_t *align_offset_p)
{
    size_t align  = UCT_IFACE_PARAM_VALUE(params, am_alignment,
                                          AM_ALIGNMENT, 1);
    size_t offset = UCT_IFACE_PARAM_VALUE(params, am_align_offset,
                                          AM_ALIGN_OFFSET, 0);

    if ((params->field_mask & UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT) &&
        ((align == 0) || !ucs_is_pow2(align))) {
        ucs_error("rc_gdr: active message alignment %zu is not a power of 2",
                  align);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((params->field_mask & UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT) &&
        (params->field_mask & UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET) &&
        (offset >= align)) {
        ucs_error("rc_gdr: active message alignment offset %zu must be "
                  "below the alignment %zu", offset, align);
        return UCS_ERR_INVALID_PARAM;
    }

    /* UCX's own rules: the defaults, and no offset without an alignment */
    return uct_iface_param_am_alignment(params, seg_size, data_offset,
                                        data_offset, align_p, align_offset_p);
}


/* The transport timeout exponent: (retry+1) tries of 4.096us * 2^exp each
 * should add up to the configured failure timeout. */
/* Between two stall sweeps: an endpoint fails after UCT_RC_GDR_STALL_SWEEPS
 * sweeps without a completion, so within one interval of the timeout. */
static ucs_time_t uct_rc_gdr_iface_stall_interval(ucs_time_t timeout,
                                                  double failure_timeout)
{
    if (timeout == UCS_TIME_INFINITY) {
        return 0;
    }

    if (timeout == UCS_TIME_AUTO) {
        /* The transport's bound is approximate (a power of two per try) */
        timeout = ucs_time_from_sec(4 * failure_timeout);
    }
    return ucs_max(timeout / UCT_RC_GDR_STALL_SWEEPS, 1);
}


static uint8_t uct_rc_gdr_iface_timeout_exp(double failure_timeout,
                                            unsigned retry_count)
{
    double per_try = failure_timeout / (retry_count + 1);
    double exp     = log2(per_try / 4.096e-6);

    /* Rounded down: the configured time is an upper bound. */
    return (uint8_t)ucs_max(1, ucs_min(31, (int)floor(exp)));
}


static UCS_CLASS_INIT_FUNC(uct_rc_gdr_iface_t, uct_md_h tl_md,
                           uct_worker_h worker,
                           const uct_iface_params_t *params,
                           const uct_iface_config_t *tl_config)
{
    const uct_rc_gdr_iface_config_t *config =
            ucs_derived_of(tl_config, uct_rc_gdr_iface_config_t);
    uct_rc_gdr_md_t *md = ucs_derived_of(tl_md, uct_rc_gdr_md_t);
    struct ibv_srq_init_attr srq_attr;
    size_t am_align, am_align_offset, rx_headroom;
    ucs_status_t status;

    UCS_CLASS_CALL_SUPER_INIT(uct_base_iface_t, &uct_rc_gdr_iface_ops,
                              &uct_rc_gdr_iface_internal_ops, tl_md, worker,
                              params, tl_config
                              UCS_STATS_ARG(params->stats_root)
                              UCS_STATS_ARG(UCT_RC_GDR_TL_NAME));

    /* Every id has UCT's stub now; a handler the user sets replaces it */
    self->am_stub              = self->super.am[0].cb;
    self->am_no_handler_logged = 0;

    if (!(params->open_mode & UCT_IFACE_OPEN_MODE_DEVICE)) {
        ucs_error("rc_gdr: only device open mode is supported");
        return UCS_ERR_UNSUPPORTED;
    }

    /* SINGLE and SERIALIZED: one thread at a time in the iface and its
     * endpoints (UCP's MULTI mode serializes them under the worker lock and
     * opens its UCT worker SERIALIZED). What other threads do at any time
     * (free hooks inside cudaFree/munmap, registrations) goes through the
     * md, which locks. The data path takes no lock, so MULTI is refused,
     * as by UCX's IB transports. */
    if (uct_rc_gdr_glue_worker_thread_mode(worker) ==
        UCS_THREAD_MODE_MULTI) {
        ucs_error("rc_gdr: a UCT worker of thread mode %s is not supported:"
                  " serialize the calls (UCS_THREAD_MODE_SERIALIZED, what "
                  "UCP uses for a multi-threaded worker)",
                  ucs_thread_mode_names[UCS_THREAD_MODE_MULTI]);
        return UCS_ERR_UNSUPPORTED;
    }

    if ((config->retry_count > 7) || (config->fc_wnd_size == 0) ||
        (config->fc_wnd_size > UCT_RC_GDR_IMM_CREDITS_MAX) ||
        (config->tx_queue_len == 0) || (config->rx_queue_len == 0) ||
        (config->seg_size <= UCT_RC_GDR_AM_MAX_HDR) ||
        (config->max_rd_atomic == 0) || (config->failure_timeout <= 0) ||
        (config->tx_stall_timeout == 0)) {
        ucs_error("rc_gdr: invalid configuration: RETRY_COUNT must be 0..7, "
                  "FC_WND_SIZE 1..65535, TX/RX_QUEUE_LEN and MAX_RD_ATOMIC "
                  "> 0, SEG_SIZE > %d, FAILURE_TIMEOUT and TX_STALL_TIMEOUT "
                  "> 0",
                  UCT_RC_GDR_AM_MAX_HDR);
        return UCS_ERR_INVALID_PARAM;
    }

    status = uct_rc_gdr_iface_parse_device(params->mode.device.dev_name,
                                           md->name, &self->port_num);
    if (status != UCS_OK) {
        return status;
    }

    rx_headroom = UCT_IFACE_PARAM_VALUE(params, rx_headroom, RX_HEADROOM, 0);
    status      = uct_rc_gdr_iface_am_alignment(params, config->seg_size,
                                                sizeof(uct_rc_gdr_buf_t) +
                                                rx_headroom, &am_align,
                                                &am_align_offset);
    if (status != UCS_OK) {
        return status;
    }

    if (ibv_query_port(md->ibv_ctx, self->port_num, &self->port_attr) != 0) {
        ucs_error("rc_gdr: ibv_query_port(%s) failed: %m",
                  params->mode.device.dev_name);
        return UCS_ERR_IO_ERROR;
    }

    self->is_roce   = (self->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET);
    self->gid_index = config->gid_index;
    if (ibv_query_gid(md->ibv_ctx, self->port_num, self->gid_index,
                      &self->gid) != 0) {
        ucs_error("rc_gdr: ibv_query_gid(%s, index %u) failed: %m",
                  params->mode.device.dev_name, self->gid_index);
        return UCS_ERR_INVALID_PARAM;
    }

    self->config.tx_queue_len  = config->tx_queue_len;
    /* Within half the send queue, so a full queue always holds a request
     * that reports, and its completion frees the slots before it. */
    self->config.tx_cq_moderation = ucs_max(1u,
                                            ucs_min(config->tx_cq_moderation,
                                                    config->tx_queue_len / 2));
    if ((int)config->tx_mp.max_bufs > 0) {
        /* Likewise within half the send buffers: buffers come back only at
         * completions, and a pool that runs dry between two that report
         * would wait forever. */
        self->config.tx_cq_moderation =
                ucs_max(1u, ucs_min(self->config.tx_cq_moderation,
                                    config->tx_mp.max_bufs / 2));
    }
    self->config.rx_queue_len  = config->rx_queue_len;
    self->config.fc_wnd_size   = config->fc_wnd_size;
    /* A reply carries owed credits for free; a message of their own costs
     * a work request on both sides (measured: the receiver of a stream
     * that acknowledges every half window, as ucx_perftest's am_bw does,
     * sent a credit message beside each acknowledgement). So below three
     * quarters of the window the credits wait for a progress call that
     * finds no message, the point where a reply would have gone out; from
     * there they go at once, leaving the sender a quarter of its window
     * for the credit message's trip. */
    self->config.fc_grant_idle = ucs_max(config->fc_wnd_size / 2, 1u);
    self->config.fc_grant_now  = ucs_max(config->fc_wnd_size -
                                         config->fc_wnd_size / 4, 1u);
    self->config.seg_size      = config->seg_size;
    self->config.rx_headroom   = rx_headroom;
    self->config.max_inline    = config->max_inline;
    self->config.max_send_sge  = ucs_min((unsigned)md->dev_attr.max_sge,
                                         (unsigned)UCT_RC_GDR_MAX_IOV);
    /* One number serves both ends of a queue pair (initiator depth and
     * responder resources), so it stays within both of the device's limits;
     * "auto" and "inf" parse to values above any limit and take it whole. */
    self->config.max_rd_atomic = ucs_min(config->max_rd_atomic,
                                         (unsigned long)ucs_min(
                                         md->dev_attr.max_qp_init_rd_atom,
                                         md->dev_attr.max_qp_rd_atom));
    self->config.retry_count   = config->retry_count;
    self->config.timeout_exp   = uct_rc_gdr_iface_timeout_exp(
                                         config->failure_timeout,
                                         config->retry_count);
    self->config.atomic        = (md->dev_attr.atomic_cap != IBV_ATOMIC_NONE);
    self->config.flush_mode    = config->flush_mode;
    self->config.tx_cq_low     = config->tx_cq_len / 2;
    self->tx_cq_avail          = config->tx_cq_len;
    self->tx_signaled          = 0;
    self->tx_idle_polls        = 0;
    self->tx_poll_skipped      = 0;
    self->rx_posted            = 0;
    self->rx_returned          = 0;
    self->release_desc.cb      = uct_rc_gdr_iface_release_desc;
    self->lane_users           = 0;
    self->stall.interval       = uct_rc_gdr_iface_stall_interval(
                                         config->tx_stall_timeout,
                                         config->failure_timeout);
    self->stall.next           = ucs_get_time() + self->stall.interval;
    self->stall.polls          = 0;
    uct_rc_gdr_iface_state_signal_init(config->state_signal);
    self->state_seen           = uct_rc_gdr_state_requests;
    memset(&self->stats, 0, sizeof(self->stats));
    self->stats.size           = sizeof(self->stats);
    ucs_list_head_init(&self->eps);
    ucs_list_head_init(&self->zombies);
    ucs_list_head_init(&self->busy_eps);
    kh_init_inplace(uct_rc_gdr_qpn, &self->eps_by_qpn);

    status = uct_rc_gdr_iface_event_init(self);
    if (status != UCS_OK) {
        goto err_destroy_hash;
    }

    self->send_cq = ibv_create_cq(md->ibv_ctx, config->tx_cq_len, NULL,
                                  self->event.channel, 0);
    if (self->send_cq == NULL) {
        ucs_error("rc_gdr: ibv_create_cq(%u) failed: %m", config->tx_cq_len);
        status = UCS_ERR_IO_ERROR;
        goto err_cleanup_event;
    }

    self->recv_cq = ibv_create_cq(md->ibv_ctx, config->rx_queue_len, NULL,
                                  self->event.channel, 0);
    if (self->recv_cq == NULL) {
        ucs_error("rc_gdr: ibv_create_cq(%u) failed: %m",
                  config->rx_queue_len);
        status = UCS_ERR_IO_ERROR;
        goto err_destroy_send_cq;
    }

    memset(&srq_attr, 0, sizeof(srq_attr));
    srq_attr.attr.max_wr  = config->rx_queue_len;
    srq_attr.attr.max_sge = 1;
    self->srq = ibv_create_srq(md->pd, &srq_attr);
    if (self->srq == NULL) {
        ucs_error("rc_gdr: ibv_create_srq(%u) failed: %m",
                  config->rx_queue_len);
        status = UCS_ERR_IO_ERROR;
        goto err_destroy_recv_cq;
    }

    status = uct_iface_mpool_init(&self->super, &self->tx_mp,
                                  sizeof(uct_rc_gdr_buf_t) + config->seg_size,
                                  sizeof(uct_rc_gdr_buf_t),
                                  UCS_SYS_CACHE_LINE_SIZE,
                                  &config->tx_mp, config->tx_queue_len,
                                  uct_rc_gdr_iface_buf_init, "rc_gdr_tx");
    if (status != UCS_OK) {
        goto err_destroy_srq;
    }

    status = uct_iface_mpool_init(&self->super, &self->rx_mp,
                                  sizeof(uct_rc_gdr_buf_t) + rx_headroom +
                                  config->seg_size,
                                  am_align_offset, am_align,
                                  &config->rx_mp, config->rx_queue_len,
                                  uct_rc_gdr_iface_buf_init, "rc_gdr_rx");
    if (status != UCS_OK) {
        goto err_cleanup_tx_mp;
    }

    status = uct_rc_gdr_glue_mpool_init(&self->op_mp, sizeof(uct_rc_gdr_op_t),
                                        UCS_SYS_CACHE_LINE_SIZE, 256, UINT_MAX,
                                        &uct_rc_gdr_op_mpool_ops,
                                        "rc_gdr_ops");
    if (status != UCS_OK) {
        goto err_cleanup_rx_mp;
    }

    if (uct_rc_gdr_iface_post_recvs(self) == 0) {
        ucs_error("rc_gdr: could not post any receive buffer");
        status = UCS_ERR_NO_MEMORY;
        goto err_cleanup_op_mp;
    }

    status = uct_rc_gdr_bounce_iface_init(self, &config->bounce);
    if (status != UCS_OK) {
        goto err_cleanup_op_mp; /* the receives posted die with the SRQ */
    }

    ucs_debug("rc_gdr: iface %p on %s: timeout 4.096us*2^%u x %u tries, "
              "fc window %u, %u receives", self, params->mode.device.dev_name,
              self->config.timeout_exp, self->config.retry_count + 1,
              self->config.fc_wnd_size, self->rx_posted);
    pthread_mutex_lock(&uct_rc_gdr_iface_all_lock);
    ucs_list_add_tail(&uct_rc_gdr_iface_all, &self->all_list);
    pthread_mutex_unlock(&uct_rc_gdr_iface_all_lock);
    return UCS_OK;

err_cleanup_op_mp:
    ucs_mpool_cleanup(&self->op_mp, 0);
err_cleanup_rx_mp:
    ucs_mpool_cleanup(&self->rx_mp, 0);
err_cleanup_tx_mp:
    ucs_mpool_cleanup(&self->tx_mp, 0);
err_destroy_srq:
    ibv_destroy_srq(self->srq);
err_destroy_recv_cq:
    ibv_destroy_cq(self->recv_cq);
err_destroy_send_cq:
    ibv_destroy_cq(self->send_cq);
err_cleanup_event:
    uct_rc_gdr_iface_event_cleanup(self);
err_destroy_hash:
    kh_destroy_inplace(uct_rc_gdr_qpn, &self->eps_by_qpn);
    return status;
}


static UCS_CLASS_CLEANUP_FUNC(uct_rc_gdr_iface_t)
{
    uct_rc_gdr_ep_t *ep, *tmp;

    pthread_mutex_lock(&uct_rc_gdr_iface_all_lock);
    ucs_list_del(&self->all_list);
    pthread_mutex_unlock(&uct_rc_gdr_iface_all_lock);
    uct_base_iface_progress_disable(&self->super.super,
                                    UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    ucs_info("rc_gdr: %s:%u closed: %" PRIu64 " work requests posted, %"
             PRIu64 " messages received, %" PRIu64 " credit grants, %"
             PRIu64 " flush reads, %" PRIu64 " stalled endpoints failed",
             ucs_derived_of(self->super.md, uct_rc_gdr_md_t)->name,
             self->port_num, self->stats.tx_wrs, self->stats.rx_msgs,
             self->stats.credit_grants, self->stats.flush_reads,
             self->stats.tx_stalls);

    /* Users destroy their endpoints first; what is left is a zombie whose
     * completions will never come once its QP is gone. */
    ucs_list_for_each_safe(ep, tmp, &self->zombies, list) {
        uct_rc_gdr_ep_free_zombie(ep);
    }
    if (!ucs_list_is_empty(&self->eps)) {
        ucs_warn("rc_gdr: iface %p closed with %zu endpoints still open",
                 self, ucs_list_length(&self->eps));
    }
    uct_rc_gdr_bounce_iface_cleanup(self);

    ibv_destroy_srq(self->srq);
    uct_rc_gdr_iface_event_ack_all(self); /* destroy_cq waits for it */
    ibv_destroy_cq(self->recv_cq);
    ibv_destroy_cq(self->send_cq);
    uct_rc_gdr_iface_event_cleanup(self);
    ucs_mpool_cleanup(&self->op_mp, 1);
    ucs_mpool_cleanup(&self->rx_mp, 0); /* posted receives die with the SRQ */
    ucs_mpool_cleanup(&self->tx_mp, 1);
    kh_destroy_inplace(uct_rc_gdr_qpn, &self->eps_by_qpn);
}


UCS_CLASS_DEFINE(uct_rc_gdr_iface_t, uct_base_iface_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_rc_gdr_iface_t, uct_iface_t, uct_md_h,
                          uct_worker_h, const uct_iface_params_t*,
                          const uct_iface_config_t*);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_rc_gdr_iface_t, uct_iface_t);


static uct_iface_ops_t uct_rc_gdr_iface_ops = {
    .ep_put_short             = uct_rc_gdr_ep_put_short,
    .ep_put_bcopy             = uct_rc_gdr_ep_put_bcopy,
    .ep_put_zcopy             = uct_rc_gdr_ep_put_zcopy,
    .ep_get_bcopy             = uct_rc_gdr_ep_get_bcopy,
    .ep_get_zcopy             = uct_rc_gdr_ep_get_zcopy,
    .ep_am_short              = uct_rc_gdr_ep_am_short,
    .ep_am_short_iov          = uct_base_ep_am_short_iov,
    .ep_am_bcopy              = uct_rc_gdr_ep_am_bcopy,
    .ep_am_zcopy              = uct_rc_gdr_ep_am_zcopy,
    .ep_atomic_cswap64        = uct_rc_gdr_ep_atomic_cswap64,
    .ep_atomic64_post         = uct_rc_gdr_ep_atomic64_post,
    .ep_atomic64_fetch        = uct_rc_gdr_ep_atomic64_fetch,
    .ep_atomic_cswap32        = (uct_ep_atomic_cswap32_func_t)
                                    ucs_empty_function_return_unsupported,
    .ep_atomic32_post         = (uct_ep_atomic32_post_func_t)
                                    ucs_empty_function_return_unsupported,
    .ep_atomic32_fetch        = (uct_ep_atomic32_fetch_func_t)
                                    ucs_empty_function_return_unsupported,
    .ep_pending_add           = uct_rc_gdr_ep_pending_add,
    .ep_pending_purge         = uct_rc_gdr_ep_pending_purge,
    .ep_flush                 = uct_rc_gdr_ep_flush,
    .ep_fence                 = uct_rc_gdr_ep_fence,
    .ep_check                 = uct_rc_gdr_ep_check,
    .ep_create                = UCS_CLASS_NEW_FUNC_NAME(uct_rc_gdr_ep_t),
    .ep_destroy               = uct_rc_gdr_ep_destroy,
    .ep_get_address           = uct_rc_gdr_ep_get_address,
    .ep_connect_to_ep         = uct_rc_gdr_ep_connect_to_ep,
    .iface_flush              = uct_rc_gdr_iface_flush,
    .iface_fence              = uct_rc_gdr_iface_fence,
    .iface_progress_enable    = uct_base_iface_progress_enable,
    .iface_progress_disable   = uct_base_iface_progress_disable,
    .iface_progress           = uct_rc_gdr_iface_progress,
    .iface_event_fd_get       = uct_rc_gdr_iface_event_fd_get,
    .iface_event_arm          = uct_rc_gdr_iface_event_arm,
    .iface_close              = UCS_CLASS_DELETE_FUNC_NAME(uct_rc_gdr_iface_t),
    .iface_query              = uct_rc_gdr_iface_query,
    .iface_get_device_address = uct_rc_gdr_iface_get_device_address,
    .iface_get_address        = (uct_iface_get_address_func_t)
                                    ucs_empty_function_return_success,
    .iface_is_reachable       = uct_rc_gdr_iface_is_reachable
};


/*
 * Performance per lane, so that UCP's protocol choice matches the lane that
 * really moves the memory: GPU memory on the bounce lane pays a staging copy
 * (pinned copies run at ~50 GB/s and cost ~9 us for a small synchronous one
 * on an H200, doc/DESIGN.md section 7), host memory and GDR lanes the NIC's rate.
 */
#define UCT_RC_GDR_STAGE_BANDWIDTH  50e9
#define UCT_RC_GDR_STAGE_LATENCY    9e-6

static int uct_rc_gdr_iface_is_bounced(uct_rc_gdr_iface_t *iface,
                                       ucs_memory_type_t mem_type,
                                       uct_rc_gdr_dir_t dir)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(iface->super.md, uct_rc_gdr_md_t);
    int gpu;

    if ((mem_type != UCS_MEMORY_TYPE_CUDA) &&
        (mem_type != UCS_MEMORY_TYPE_CUDA_MANAGED)) {
        return 0;
    }

    /* Managed memory always bounces; otherwise any GPU that bounces makes
     * the estimate pessimistic, since the type does not name the GPU. */
    for (gpu = 0; gpu < md->num_gpus; ++gpu) {
        if ((mem_type == UCS_MEMORY_TYPE_CUDA_MANAGED) ||
            !UCT_RC_GDR_LANE_IS_GDR(md->gpus[gpu].lane[dir])) {
            return 1;
        }
    }
    return 0;
}


ucs_status_t uct_rc_gdr_iface_estimate_perf(uct_iface_h tl_iface,
                                            uct_perf_attr_t *perf_attr)
{
    uct_rc_gdr_iface_t *iface = ucs_derived_of(tl_iface, uct_rc_gdr_iface_t);
    ucs_memory_type_t local   = UCS_MEMORY_TYPE_HOST;
    ucs_memory_type_t remote  = UCS_MEMORY_TYPE_HOST;
    int is_get, bounced;
    ucs_status_t status;

    status = uct_base_iface_estimate_perf(tl_iface, perf_attr);
    if (status != UCS_OK) {
        return status;
    }

    if (perf_attr->field_mask & UCT_PERF_ATTR_FIELD_LOCAL_MEMORY_TYPE) {
        local = perf_attr->local_memory_type;
    }
    if (perf_attr->field_mask & UCT_PERF_ATTR_FIELD_REMOTE_MEMORY_TYPE) {
        remote = perf_attr->remote_memory_type;
    }

    /* A get makes the NIC write local and read remote memory; every other
     * operation the other way round. */
    is_get  = (perf_attr->field_mask & UCT_PERF_ATTR_FIELD_OPERATION) &&
              ((perf_attr->operation == UCT_EP_OP_GET_BCOPY) ||
               (perf_attr->operation == UCT_EP_OP_GET_ZCOPY));
    bounced = uct_rc_gdr_iface_is_bounced(iface, local,
                                          is_get ?
                                          UCT_RC_GDR_DIR_NIC_WRITES_GPU :
                                          UCT_RC_GDR_DIR_NIC_READS_GPU) +
              uct_rc_gdr_iface_is_bounced(iface, remote,
                                          is_get ?
                                          UCT_RC_GDR_DIR_NIC_READS_GPU :
                                          UCT_RC_GDR_DIR_NIC_WRITES_GPU);
    if (bounced == 0) {
        return UCS_OK;
    }

    if (perf_attr->field_mask & UCT_PERF_ATTR_FIELD_BANDWIDTH) {
        perf_attr->bandwidth.dedicated =
                ucs_min(perf_attr->bandwidth.dedicated +
                        perf_attr->bandwidth.shared,
                        UCT_RC_GDR_STAGE_BANDWIDTH);
        perf_attr->bandwidth.shared    = 0;
    }
    if (perf_attr->field_mask & UCT_PERF_ATTR_FIELD_LATENCY) {
        perf_attr->latency.c += bounced * UCT_RC_GDR_STAGE_LATENCY;
    }
    return UCS_OK;
}


ucs_status_t
uct_rc_gdr_iface_query_devices(uct_md_h tl_md,
                               uct_tl_device_resource_t **devices_p,
                               unsigned *num_devices_p)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(tl_md, uct_rc_gdr_md_t);
    uct_tl_device_resource_t *devices;
    struct ibv_port_attr port_attr;
    unsigned num_devices = 0;
    uint8_t port;

    devices = ucs_calloc(md->dev_attr.phys_port_cnt, sizeof(*devices),
                         "rc_gdr_devices");
    if (devices == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    for (port = 1; port <= md->dev_attr.phys_port_cnt; ++port) {
        if (ibv_query_port(md->ibv_ctx, port, &port_attr) != 0) {
            ucs_debug("rc_gdr: ibv_query_port(%s:%u) failed: %m", md->name,
                      port);
            continue;
        }

        if (port_attr.state != IBV_PORT_ACTIVE) {
            ucs_debug("rc_gdr: %s:%u is %s, not used", md->name, port,
                      ibv_port_state_str(port_attr.state));
            continue;
        }

        ucs_snprintf_zero(devices[num_devices].name,
                          sizeof(devices[num_devices].name), "%s:%u",
                          md->name, port);
        devices[num_devices].type       = UCT_DEVICE_TYPE_NET;
        devices[num_devices].sys_device = md->sys_dev;
        ++num_devices;
    }

    *devices_p     = devices;
    *num_devices_p = num_devices;
    return UCS_OK;
}
