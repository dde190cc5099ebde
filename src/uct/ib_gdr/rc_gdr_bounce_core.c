/**
 * rc_gdr bounce lane, core: the bottom layer (rc_gdr_bounce_core.h). The
 * knobs, the lane's state of an interface and of its endpoints, CUDA
 * contexts and staging engines, synchronous copies, statistics. It calls
 * nothing of the lane above it.
 *
 * See file LICENSE for terms.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h" /* UCX's: its log level, assertions */
#endif

#include "rc_gdr_bounce_core.h"

#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include <ucs/sys/math.h>
#include <ucs/sys/string.h>

#include <string.h>


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

    {"BOUNCE_EP_MAX_BUFS", UCT_RC_GDR_BOUNCE_EP_MAX_BUFS_DEFAULT,
     "Host bounce lane: staging buffers the gets one peer has this interface "
     "serve from GPU memory may hold at once (each served get holds up to "
     "BOUNCE_DEPTH); more of its gets wait, so that a peer that takes no "
     "data cannot hold the whole pool from every other endpoint. auto: a "
     "quarter of BOUNCE_POOL_SIZE; at least one get is served.",
     ucs_offsetof(uct_rc_gdr_bounce_config_t, ep_max_bufs),
     UCS_CONFIG_TYPE_ULUNITS},

    {"BOUNCE_TIMEOUT", UCT_RC_GDR_BOUNCE_TIMEOUT_DEFAULT,
     "Host bounce lane: how long a transfer to memory without a NIC key waits "
     "for a peer that is alive (its QP acknowledges) but neither answers nor "
     "returns the credits for the transfer's next message; the transfer then "
     "ends with UCS_ERR_TIMED_OUT. A get served from such memory to a live "
     "peer that takes none of its data for as long is dropped, its staging "
     "buffers returned. Each answer or message sent restarts it. A dead peer "
     "is found sooner, by FAILURE_TIMEOUT.",
     ucs_offsetof(uct_rc_gdr_bounce_config_t, timeout), UCS_CONFIG_TYPE_TIME},

    {NULL}
};


/* ------------------------------------------------------------------------
 * State, contexts, engines
 * ------------------------------------------------------------------------ */

void uct_rc_gdr_bounce_update_stats(uct_rc_gdr_bounce_iface_t *b)
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
ucs_status_t uct_rc_gdr_bounce_copy_h2d(uct_rc_gdr_bounce_iface_t *b,
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


/* The staging engine of a GPU, and the pool at the first one */
ucs_status_t
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


/* ------------------------------------------------------------------------
 * Endpoints
 * ------------------------------------------------------------------------ */

uct_rc_gdr_bounce_ep_t *uct_rc_gdr_bounce_ep_get(uct_rc_gdr_ep_t *ep)
{
    uct_rc_gdr_iface_t *iface = uct_rc_gdr_ep_iface(ep);
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
    bep->last_probe         = ucs_get_time();
    bep->last_timeout_check = bep->last_probe;
    ucs_list_add_tail(&iface->bounce->eps, &bep->list);
    ++iface->lane_users; /* progress calls the lane from now on */
    ep->bounce = bep;
    return bep;
}


/* The lane state of an endpoint gone, no lane call on the stack */
static void uct_rc_gdr_bounce_ep_free(uct_rc_gdr_bounce_iface_t *b,
                                      uct_rc_gdr_bounce_ep_t *bep)
{
    ucs_list_del(&bep->list);
    --b->iface->lane_users;
    ucs_free(bep);
}


void uct_rc_gdr_bounce_leave(uct_rc_gdr_bounce_iface_t *b)
{
    uct_rc_gdr_bounce_ep_t *bep, *tmp;

    ucs_assert(b->depth > 0);
    if ((--b->depth > 0) || (b->num_gone == 0)) {
        return;
    }

    ucs_list_for_each_safe(bep, tmp, &b->eps, list) {
        if (bep->gone) {
            uct_rc_gdr_bounce_ep_free(b, bep);
        }
    }
    b->num_gone = 0;
}


/* The lane state of an endpoint gone: freed now, or when the outermost
 * lane call returns (a lane loop may still hold it) */
void uct_rc_gdr_bounce_ep_release(uct_rc_gdr_bounce_iface_t *b,
                                  uct_rc_gdr_bounce_ep_t *bep)
{
    if (b->depth > 0) {
        ++b->num_gone;
    } else {
        uct_rc_gdr_bounce_ep_free(b, bep);
    }
}


int uct_rc_gdr_bounce_ep_blocked(uct_rc_gdr_ep_t *ep)
{
    return uct_rc_gdr_ep_iface(ep)->bounce->blocked;
}


/* ------------------------------------------------------------------------
 * Setup and teardown
 * ------------------------------------------------------------------------ */

/* Gets one endpoint may have served at once: its share of the staging
 * buffers (BOUNCE_EP_MAX_BUFS) over what one get holds (BOUNCE_DEPTH) */
static unsigned
uct_rc_gdr_bounce_ep_max_serving(const uct_rc_gdr_bounce_config_t *config)
{
    unsigned long bufs = config->ep_max_bufs;

    if (bufs == UCS_ULUNITS_AUTO) {
        bufs = config->pool_size / 4;
    } else if (bufs == UCS_ULUNITS_INF) {
        bufs = config->pool_size;
    }
    return ucs_max(1, ucs_min(bufs, config->pool_size) / config->depth);
}


ucs_status_t
uct_rc_gdr_bounce_iface_create(uct_rc_gdr_iface_t *iface,
                               const uct_rc_gdr_bounce_config_t *config,
                               uct_rc_gdr_bounce_iface_t **b_p)
{
    uct_rc_gdr_md_t *md = ucs_derived_of(iface->super.md, uct_rc_gdr_md_t);
    uct_rc_gdr_bounce_iface_t *b;

    if ((config->chunk_size < UCT_RC_GDR_STAGE_CHUNK_SIZE_MIN) ||
        (config->chunk_size > UCT_RC_GDR_BOUNCE_CHUNK_SIZE_MAX) ||
        (config->depth == 0) ||
        (config->depth > UCT_RC_GDR_STAGE_DEPTH_MAX) ||
        (config->pool_size == 0) || !(config->timeout > 0)) {
        ucs_error("rc_gdr: invalid configuration: BOUNCE_CHUNK_SIZE must be "
                  "%d..%lu, BOUNCE_DEPTH 1..%d, BOUNCE_POOL_SIZE > 0, "
                  "BOUNCE_TIMEOUT > 0",
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
    b->timeout  = ucs_time_from_sec(config->timeout);
    b->ep_max_serving = uct_rc_gdr_bounce_ep_max_serving(config);
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
    *b_p = b;
    return UCS_OK;
}


void uct_rc_gdr_bounce_iface_destroy(uct_rc_gdr_bounce_iface_t *b)
{
    uct_rc_gdr_iface_t *iface = b->iface;
    uct_rc_gdr_cuda_ctx_h ctx = NULL;
    uct_rc_gdr_cuda_ctx_h prev;
    int i;

    ucs_assert(ucs_list_is_empty(&b->eps));
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
}
