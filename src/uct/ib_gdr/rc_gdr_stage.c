/**
 * rc_gdr bounce lane: the staging engine (pool and chunk pipeline).
 *
 * See file LICENSE for terms.
 */

#include "rc_gdr_stage.h"

#include <ucs/datastruct/list.h>
#include <ucs/debug/assert.h>
#include <ucs/debug/log.h>
#include <ucs/debug/memtrack_int.h>
#include "rc_gdr_glue_math.h"
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>

#include <limits.h>
#include <string.h>


/*
 * Staging pool
 */

struct uct_rc_gdr_stage_pool {
    void                             *mem;        /* one cuMemHostAlloc */
    size_t                           mem_size;
    size_t                           chunk_size;
    size_t                           stride;      /* chunk_size, page-rounded */
    unsigned                         num_bufs;
    uct_rc_gdr_stage_buf_t           *bufs;
    uct_rc_gdr_stage_buf_t           *free_list;
    const uct_rc_gdr_stage_reg_ops_t *reg_ops;
    void                             *reg_arg;
    uct_rc_gdr_stage_pool_stats_t    stats;
    char                             name[32];
};


static void uct_rc_gdr_stage_pool_dereg(uct_rc_gdr_stage_pool_t *pool,
                                        unsigned num_registered)
{
    uct_rc_gdr_stage_buf_t *buf;
    unsigned i;

    if (pool->reg_ops == NULL) {
        return;
    }

    for (i = num_registered; i-- > 0;) {
        buf = &pool->bufs[i];
        pool->reg_ops->dereg(pool->reg_arg, buf->addr, pool->chunk_size,
                             buf->memh);
        buf->memh = NULL;
    }
}

ucs_status_t
uct_rc_gdr_stage_pool_create(const uct_rc_gdr_stage_pool_params_t *params,
                             uct_rc_gdr_stage_pool_t **pool_p)
{
    uct_rc_gdr_stage_pool_t *pool;
    uct_rc_gdr_stage_buf_t *buf;
    ucs_status_t status;
    size_t stride;
    unsigned i;

    if ((params->chunk_size < UCT_RC_GDR_STAGE_CHUNK_SIZE_MIN) ||
        (params->pool_size == 0)) {
        ucs_error("invalid staging pool: chunk size %zu (at least %d), "
                  "%u buffers (at least 1)", params->chunk_size,
                  UCT_RC_GDR_STAGE_CHUNK_SIZE_MIN, params->pool_size);
        return UCS_ERR_INVALID_PARAM;
    }

    stride = ucs_align_up(params->chunk_size, ucs_get_page_size());
    if (stride > (SIZE_MAX / params->pool_size)) {
        ucs_error("staging pool of %u x %zu bytes is too large",
                  params->pool_size, params->chunk_size);
        return UCS_ERR_INVALID_PARAM;
    }

    if ((params->reg_ops != NULL) &&
        ((params->reg_ops->reg == NULL) || (params->reg_ops->dereg == NULL))) {
        ucs_error("staging pool registration ops need both reg and dereg");
        return UCS_ERR_INVALID_PARAM;
    }

    pool = ucs_calloc(1, sizeof(*pool), "rc_gdr_stage_pool");
    if (pool == NULL) {
        ucs_error("failed to allocate the staging pool");
        return UCS_ERR_NO_MEMORY;
    }

    pool->chunk_size = params->chunk_size;
    pool->stride     = stride;
    pool->num_bufs   = params->pool_size;
    pool->mem_size   = stride * params->pool_size;
    pool->reg_ops    = params->reg_ops;
    pool->reg_arg    = params->reg_arg;
    ucs_snprintf_zero(pool->name, sizeof(pool->name), "%s",
                      (params->name != NULL) ? params->name : "stage");

    pool->bufs = ucs_calloc(pool->num_bufs, sizeof(*pool->bufs),
                            "rc_gdr_stage_bufs");
    if (pool->bufs == NULL) {
        ucs_error("failed to allocate %u staging buffer descriptors",
                  pool->num_bufs);
        status = UCS_ERR_NO_MEMORY;
        goto err_free_pool;
    }

    /* the shim logs the driver's error */
    status = uct_rc_gdr_cuda_host_alloc(pool->mem_size, &pool->mem);
    if (status != UCS_OK) {
        goto err_free_bufs;
    }

    for (i = 0; i < pool->num_bufs; ++i) {
        buf        = &pool->bufs[i];
        buf->addr  = UCS_PTR_BYTE_OFFSET(pool->mem, (size_t)i * stride);
        buf->index = i;

        if (pool->reg_ops != NULL) {
            status = pool->reg_ops->reg(pool->reg_arg, buf->addr,
                                        pool->chunk_size, &buf->memh);
            if (status != UCS_OK) {
                ucs_debug("%s: registration of staging buffer %u failed: %s",
                          pool->name, i, ucs_status_string(status));
                uct_rc_gdr_stage_pool_dereg(pool, i);
                goto err_free_mem;
            }
        }
    }

    /* free list in index order: buffer 0 is handed out first */
    for (i = pool->num_bufs; i-- > 0;) {
        pool->bufs[i].next_free = pool->free_list;
        pool->free_list         = &pool->bufs[i];
    }

    pool->stats.num_bufs = pool->num_bufs;
    ucs_debug("%s: %u staging buffers of %zu bytes at %p", pool->name,
              pool->num_bufs, pool->chunk_size, pool->mem);
    *pool_p = pool;
    return UCS_OK;

err_free_mem:
    uct_rc_gdr_cuda_host_free(pool->mem);
err_free_bufs:
    ucs_free(pool->bufs);
err_free_pool:
    ucs_free(pool);
    return status;
}

void uct_rc_gdr_stage_pool_destroy(uct_rc_gdr_stage_pool_t *pool)
{
    if (pool == NULL) {
        return;
    }

    if (pool->stats.in_use != 0) {
        ucs_warn("%s: destroying the staging pool with %u buffers still out",
                 pool->name, pool->stats.in_use);
    }

    uct_rc_gdr_stage_pool_dereg(pool, pool->num_bufs);
    uct_rc_gdr_cuda_host_free(pool->mem);
    ucs_free(pool->bufs);
    ucs_free(pool);
}

ucs_status_t uct_rc_gdr_stage_pool_get(uct_rc_gdr_stage_pool_t *pool,
                                       uct_rc_gdr_stage_buf_t **buf_p)
{
    uct_rc_gdr_stage_buf_t *buf = pool->free_list;

    if (buf == NULL) {
        ++pool->stats.no_resource;
        return UCS_ERR_NO_RESOURCE;
    }

    pool->free_list = buf->next_free;
    buf->next_free  = NULL;
    buf->in_use     = 1;
    ++pool->stats.in_use;
    pool->stats.in_use_max = ucs_max(pool->stats.in_use_max,
                                     pool->stats.in_use);
    *buf_p = buf;
    return UCS_OK;
}

ucs_status_t uct_rc_gdr_stage_pool_put(uct_rc_gdr_stage_pool_t *pool,
                                       uct_rc_gdr_stage_buf_t *buf)
{
    if ((buf < pool->bufs) || (buf >= (pool->bufs + pool->num_bufs)) ||
        (buf != &pool->bufs[buf->index]) || !buf->in_use) {
        ucs_error("%s: staging buffer %p is not out of this pool", pool->name,
                  buf);
        return UCS_ERR_INVALID_PARAM;
    }

    ucs_assert(pool->stats.in_use > 0);
    buf->in_use     = 0;
    buf->next_free  = pool->free_list;
    pool->free_list = buf;
    --pool->stats.in_use;
    return UCS_OK;
}

size_t uct_rc_gdr_stage_pool_chunk_size(const uct_rc_gdr_stage_pool_t *pool)
{
    return pool->chunk_size;
}

void uct_rc_gdr_stage_pool_stats(const uct_rc_gdr_stage_pool_t *pool,
                                 uct_rc_gdr_stage_pool_stats_t *stats_p)
{
    *stats_p = pool->stats;
}


/*
 * Pipeline engine
 *
 * A transfer has `depth` slots; chunk k lives in slot k % depth. Chunks start
 * in order and only inside the window [next_retire, next_retire + depth), so
 * slot k % depth is free exactly when chunk k - depth has retired. A chunk
 * goes through:
 *
 *   D2H_WIRE:  COPY (D2H into buf) -> READY -> WIRE -> DONE -> retired
 *   WIRE_H2D:  READY -> WIRE -> ARRIVED -> COPY (H2D out of buf) -> DONE
 *                                                             -> retired
 *
 * (a synchronous wire skips WIRE). Posts happen in chunk order
 * (next_post), retirement too (next_retire). A retired chunk's buffer stays
 * with the transfer, on its spare list, while chunks remain to be started:
 * a started transfer always owns at least one buffer, so it never waits for
 * the pool forever, whatever the other transfers hold.
 */

typedef enum {
    UCT_RC_GDR_STAGE_SLOT_FREE,     /* no chunk */
    UCT_RC_GDR_STAGE_SLOT_COPY,     /* a CUDA copy into or out of buf */
    UCT_RC_GDR_STAGE_SLOT_READY,    /* waiting for its turn to be posted */
    UCT_RC_GDR_STAGE_SLOT_WIRE,     /* the owner's wire has it */
    UCT_RC_GDR_STAGE_SLOT_ARRIVED,  /* WIRE_H2D: data in buf, not copied yet */
    UCT_RC_GDR_STAGE_SLOT_DONE      /* no stage left, waiting to retire */
} uct_rc_gdr_stage_slot_state_t;


typedef struct uct_rc_gdr_stage_slot {
    uct_rc_gdr_stage_buf_t *buf;
    unsigned               chunk;
    int                    state;   /* uct_rc_gdr_stage_slot_state_t */
} uct_rc_gdr_stage_slot_t;


struct uct_rc_gdr_stage_xfer {
    ucs_list_link_t              list;        /* engine's active or done */
    uct_rc_gdr_stage_engine_t    *engine;
    const uct_rc_gdr_stage_ops_t *ops;
    void                         *arg;
    uct_rc_gdr_stage_dir_t       dir;
    char                         *gpu_addr;
    size_t                       length;
    size_t                       first_size;  /* chosen for the message: */
    size_t                       chunk_size;  /* chunk 0, the others */
    unsigned                     num_chunks;
    unsigned                     depth;
    unsigned                     next_start;  /* next chunk to start */
    unsigned                     next_post;   /* next chunk to post */
    unsigned                     next_retire; /* oldest chunk not retired */
    unsigned                     num_copies;  /* slots in COPY */
    unsigned                     num_wire;    /* slots in WIRE */
    unsigned                     num_spare;
    uct_rc_gdr_stage_buf_t       *spare;      /* buffers between chunks */
    int                          buf_wait;    /* last start found no buffer */
    int                          ended;       /* on the done list */
    ucs_status_t                 status;      /* first error: failing */
    uct_rc_gdr_stage_slot_t      slots[0];
};


struct uct_rc_gdr_stage_engine {
    uct_rc_gdr_stage_pool_t         *pool;
    uct_rc_gdr_cuda_ctx_h           ctx;
    unsigned                        depth;
    unsigned                        num_streams;
    uct_rc_gdr_cuda_stream_h        streams[2][UCT_RC_GDR_STAGE_STREAMS_MAX];
    uct_rc_gdr_cuda_event_h         *events;  /* one per pool buffer: copies
                                                 into or out of it */
    ucs_list_link_t                 active;
    ucs_list_link_t                 done;     /* complete() still to call */
    uct_rc_gdr_stage_engine_stats_t stats;
    char                            name[32];
};


const char *uct_rc_gdr_stage_dir_str(uct_rc_gdr_stage_dir_t dir)
{
    switch (dir) {
    case UCT_RC_GDR_STAGE_D2H_WIRE:
        return "d2h-wire";
    case UCT_RC_GDR_STAGE_WIRE_H2D:
        return "wire-h2d";
    default:
        return "?";
    }
}

/*
 * The engine's context is made current around every entry point that talks
 * to the driver, and the caller's restored after.
 */
static uct_rc_gdr_cuda_ctx_h
uct_rc_gdr_stage_ctx_push(uct_rc_gdr_stage_engine_t *engine)
{
    uct_rc_gdr_cuda_ctx_h prev;

    if (uct_rc_gdr_cuda_ctx_get_current(&prev) != UCS_OK) {
        prev = NULL;
    }

    if (prev != engine->ctx) {
        uct_rc_gdr_cuda_ctx_set_current(engine->ctx);
    }
    return prev;
}

static void uct_rc_gdr_stage_ctx_pop(uct_rc_gdr_stage_engine_t *engine,
                                     uct_rc_gdr_cuda_ctx_h prev)
{
    if (prev != engine->ctx) {
        uct_rc_gdr_cuda_ctx_set_current(prev);
    }
}

static void
uct_rc_gdr_stage_engine_free_cuda(uct_rc_gdr_stage_engine_t *engine)
{
    unsigned i, dir;

    if (engine->events != NULL) {
        for (i = 0; i < engine->pool->num_bufs; ++i) {
            if (engine->events[i] != NULL) {
                uct_rc_gdr_cuda_event_destroy(engine->events[i]);
            }
        }
        ucs_free(engine->events);
    }

    for (dir = 0; dir < 2; ++dir) {
        for (i = 0; i < engine->num_streams; ++i) {
            if (engine->streams[dir][i] != NULL) {
                uct_rc_gdr_cuda_stream_destroy(engine->streams[dir][i]);
            }
        }
    }
}

ucs_status_t
uct_rc_gdr_stage_engine_create(const uct_rc_gdr_stage_engine_params_t *params,
                               uct_rc_gdr_stage_engine_t **engine_p)
{
    uct_rc_gdr_stage_engine_t *engine;
    uct_rc_gdr_cuda_ctx_h prev_ctx;
    unsigned depth, num_streams, i, dir;
    ucs_status_t status;

    depth       = (params->depth != 0) ? params->depth :
                  UCT_RC_GDR_STAGE_DEPTH_DEFAULT;
    num_streams = (params->num_streams != 0) ? params->num_streams :
                  UCT_RC_GDR_STAGE_STREAMS_DEFAULT;
    if ((params->pool == NULL) || (depth > UCT_RC_GDR_STAGE_DEPTH_MAX) ||
        (num_streams > UCT_RC_GDR_STAGE_STREAMS_MAX)) {
        ucs_error("invalid staging engine: pool %p, depth %u (at most %d), "
                  "%u streams (at most %d)", params->pool, depth,
                  UCT_RC_GDR_STAGE_DEPTH_MAX, num_streams,
                  UCT_RC_GDR_STAGE_STREAMS_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    engine = ucs_calloc(1, sizeof(*engine), "rc_gdr_stage_engine");
    if (engine == NULL) {
        ucs_error("failed to allocate the staging engine");
        return UCS_ERR_NO_MEMORY;
    }

    engine->pool        = params->pool;
    engine->depth       = depth;
    engine->num_streams = num_streams;
    ucs_list_head_init(&engine->active);
    ucs_list_head_init(&engine->done);
    ucs_snprintf_zero(engine->name, sizeof(engine->name), "%s",
                      (params->name != NULL) ? params->name : "stage");

    status = uct_rc_gdr_cuda_ctx_get_current(&prev_ctx);
    if (status != UCS_OK) {
        goto err_free;
    }

    engine->ctx = (params->ctx != NULL) ? params->ctx : prev_ctx;
    if (engine->ctx == NULL) {
        ucs_error("%s: no CUDA context given and none is current",
                  engine->name);
        status = UCS_ERR_INVALID_PARAM;
        goto err_free;
    }

    uct_rc_gdr_stage_ctx_push(engine);

    engine->events = ucs_calloc(engine->pool->num_bufs,
                                sizeof(*engine->events),
                                "rc_gdr_stage_events");
    if (engine->events == NULL) {
        ucs_error("%s: failed to allocate %u event handles", engine->name,
                  engine->pool->num_bufs);
        status = UCS_ERR_NO_MEMORY;
        goto err_pop_ctx;
    }

    for (i = 0; i < engine->pool->num_bufs; ++i) {
        status = uct_rc_gdr_cuda_event_create(&engine->events[i]);
        if (status != UCS_OK) {
            goto err_free_cuda;
        }
    }

    for (dir = 0; dir < 2; ++dir) {
        for (i = 0; i < num_streams; ++i) {
            status = uct_rc_gdr_cuda_stream_create(&engine->streams[dir][i]);
            if (status != UCS_OK) {
                goto err_free_cuda;
            }
        }
    }

    uct_rc_gdr_stage_ctx_pop(engine, prev_ctx);
    *engine_p = engine;
    return UCS_OK;

err_free_cuda:
    uct_rc_gdr_stage_engine_free_cuda(engine);
err_pop_ctx:
    uct_rc_gdr_stage_ctx_pop(engine, prev_ctx);
err_free:
    ucs_free(engine);
    return status;
}

static UCS_F_ALWAYS_INLINE uct_rc_gdr_stage_slot_t *
uct_rc_gdr_stage_xfer_slot(uct_rc_gdr_stage_xfer_t *xfer, unsigned chunk)
{
    return &xfer->slots[chunk % xfer->depth];
}

static UCS_F_ALWAYS_INLINE void
uct_rc_gdr_stage_xfer_chunk(const uct_rc_gdr_stage_xfer_t *xfer,
                            unsigned chunk, size_t *offset_p,
                            size_t *length_p)
{
    uct_rc_gdr_stage_chunk(xfer->length, xfer->first_size, xfer->chunk_size,
                           chunk, offset_p, length_p);
}

static UCS_F_ALWAYS_INLINE uct_rc_gdr_cuda_stream_h
uct_rc_gdr_stage_xfer_stream(uct_rc_gdr_stage_xfer_t *xfer, unsigned chunk)
{
    uct_rc_gdr_stage_engine_t *engine = xfer->engine;

    return engine->streams[xfer->dir][chunk % engine->num_streams];
}

static UCS_F_ALWAYS_INLINE uct_rc_gdr_cuda_event_h
uct_rc_gdr_stage_buf_event(uct_rc_gdr_stage_xfer_t *xfer,
                           uct_rc_gdr_stage_buf_t *buf)
{
    return xfer->engine->events[buf->index];
}

static void uct_rc_gdr_stage_xfer_fail(uct_rc_gdr_stage_xfer_t *xfer,
                                       ucs_status_t status)
{
    ucs_assert(status != UCS_OK);

    if (xfer->status == UCS_OK) {
        ucs_debug("%s: %s transfer %p of %zu bytes fails at chunk %u/%u: %s",
                  xfer->engine->name, uct_rc_gdr_stage_dir_str(xfer->dir),
                  xfer, xfer->length, xfer->next_retire, xfer->num_chunks,
                  ucs_status_string(status));
        xfer->status = status;
    }
}

/* Issue the CUDA copy of a chunk and record its buffer's event after it */
static ucs_status_t
uct_rc_gdr_stage_xfer_copy(uct_rc_gdr_stage_xfer_t *xfer,
                           uct_rc_gdr_stage_slot_t *slot)
{
    uct_rc_gdr_cuda_stream_h stream = uct_rc_gdr_stage_xfer_stream(xfer,
                                                                   slot->chunk);
    size_t offset, length;
    ucs_status_t status;

    uct_rc_gdr_stage_xfer_chunk(xfer, slot->chunk, &offset, &length);

    if (xfer->dir == UCT_RC_GDR_STAGE_D2H_WIRE) {
        status = uct_rc_gdr_cuda_memcpy_dtoh_async(slot->buf->addr,
                                                   xfer->gpu_addr + offset,
                                                   length, stream);
    } else {
        status = uct_rc_gdr_cuda_memcpy_htod_async(xfer->gpu_addr + offset,
                                                   slot->buf->addr, length,
                                                   stream);
    }
    if (status != UCS_OK) {
        return status;
    }

    status = uct_rc_gdr_cuda_event_record(uct_rc_gdr_stage_buf_event(xfer,
                                                                     slot->buf),
                                          stream);
    if (status != UCS_OK) {
        /* the copy is queued but cannot be tracked: wait for it here */
        uct_rc_gdr_cuda_stream_synchronize(stream);
        return status;
    }

    slot->state = UCT_RC_GDR_STAGE_SLOT_COPY;
    ++xfer->num_copies;
    xfer->engine->pool->stats.staged_bytes += length;
    return UCS_OK;
}

static unsigned
uct_rc_gdr_stage_xfer_poll_copies(uct_rc_gdr_stage_xfer_t *xfer)
{
    /* with one stream, D2H copies finish in chunk order */
    int in_order = (xfer->engine->num_streams == 1) &&
                   (xfer->dir == UCT_RC_GDR_STAGE_D2H_WIRE);
    uct_rc_gdr_stage_slot_t *slot;
    ucs_status_t status;
    unsigned chunk, count = 0;

    for (chunk = xfer->next_retire;
         (chunk < xfer->next_start) && (xfer->num_copies > 0); ++chunk) {
        slot = uct_rc_gdr_stage_xfer_slot(xfer, chunk);
        if (slot->state != UCT_RC_GDR_STAGE_SLOT_COPY) {
            continue;
        }

        status = uct_rc_gdr_cuda_event_query(uct_rc_gdr_stage_buf_event(xfer,
                                                                   slot->buf));
        if (status == UCS_INPROGRESS) {
            if (in_order) {
                break;
            }
            continue;
        }

        --xfer->num_copies;
        ++count;
        if (status != UCS_OK) {
            slot->state = UCT_RC_GDR_STAGE_SLOT_DONE;
            uct_rc_gdr_stage_xfer_fail(xfer, status);
        } else if (xfer->dir == UCT_RC_GDR_STAGE_D2H_WIRE) {
            slot->state = UCT_RC_GDR_STAGE_SLOT_READY;
        } else {
            slot->state = UCT_RC_GDR_STAGE_SLOT_DONE;
        }
    }

    return count;
}

static unsigned uct_rc_gdr_stage_xfer_post(uct_rc_gdr_stage_xfer_t *xfer)
{
    uct_rc_gdr_stage_slot_t *slot;
    size_t offset, length;
    ucs_status_t status;
    unsigned count = 0;

    while ((xfer->status == UCS_OK) && (xfer->next_post < xfer->next_start)) {
        slot = uct_rc_gdr_stage_xfer_slot(xfer, xfer->next_post);
        if (slot->state != UCT_RC_GDR_STAGE_SLOT_READY) {
            break;
        }

        uct_rc_gdr_stage_xfer_chunk(xfer, slot->chunk, &offset, &length);
        status = xfer->ops->post(xfer->arg, slot->chunk, slot->buf, length,
                                 offset);
        if (status == UCS_INPROGRESS) {
            slot->state = UCT_RC_GDR_STAGE_SLOT_WIRE;
            ++xfer->num_wire;
        } else if (status == UCS_OK) {
            slot->state = (xfer->dir == UCT_RC_GDR_STAGE_D2H_WIRE) ?
                          UCT_RC_GDR_STAGE_SLOT_DONE :
                          UCT_RC_GDR_STAGE_SLOT_ARRIVED;
        } else if (status == UCS_ERR_NO_RESOURCE) {
            ++xfer->engine->stats.wire_retries;
            break;
        } else {
            /* never reached the wire: the buffer is free */
            slot->state = UCT_RC_GDR_STAGE_SLOT_DONE;
            uct_rc_gdr_stage_xfer_fail(xfer, status);
            break;
        }

        ++xfer->next_post;
        ++count;
    }

    return count;
}

/* WIRE_H2D: copy every chunk that arrived to the GPU */
static unsigned uct_rc_gdr_stage_xfer_copy_out(uct_rc_gdr_stage_xfer_t *xfer)
{
    uct_rc_gdr_stage_slot_t *slot;
    ucs_status_t status;
    unsigned chunk, count = 0;

    for (chunk = xfer->next_retire;
         (chunk < xfer->next_post) && (xfer->status == UCS_OK); ++chunk) {
        slot = uct_rc_gdr_stage_xfer_slot(xfer, chunk);
        if (slot->state != UCT_RC_GDR_STAGE_SLOT_ARRIVED) {
            continue;
        }

        status = uct_rc_gdr_stage_xfer_copy(xfer, slot);
        if (status != UCS_OK) {
            slot->state = UCT_RC_GDR_STAGE_SLOT_DONE;
            uct_rc_gdr_stage_xfer_fail(xfer, status);
            break;
        }
        ++count;
    }

    return count;
}

static void uct_rc_gdr_stage_xfer_buf_release(uct_rc_gdr_stage_xfer_t *xfer,
                                              uct_rc_gdr_stage_buf_t *buf)
{
    ucs_status_t status UCS_V_UNUSED;

    status = uct_rc_gdr_stage_pool_put(xfer->engine->pool, buf);
    ucs_assert(status == UCS_OK);
}

static unsigned uct_rc_gdr_stage_xfer_retire(uct_rc_gdr_stage_xfer_t *xfer)
{
    uct_rc_gdr_stage_slot_t *slot;
    size_t offset, length;
    unsigned count = 0;

    while ((xfer->status == UCS_OK) &&
           (xfer->next_retire < xfer->next_start)) {
        slot = uct_rc_gdr_stage_xfer_slot(xfer, xfer->next_retire);
        if (slot->state != UCT_RC_GDR_STAGE_SLOT_DONE) {
            break;
        }

        /* keep the buffer for a chunk still to start */
        if ((xfer->num_chunks - xfer->next_start) > xfer->num_spare) {
            slot->buf->next_free = xfer->spare;
            xfer->spare          = slot->buf;
            ++xfer->num_spare;
        } else {
            uct_rc_gdr_stage_xfer_buf_release(xfer, slot->buf);
        }

        slot->buf   = NULL;
        slot->state = UCT_RC_GDR_STAGE_SLOT_FREE;
        ++xfer->next_retire;
        ++xfer->engine->stats.chunks_done;
        ++count;

        if (xfer->ops->chunk_done != NULL) {
            uct_rc_gdr_stage_xfer_chunk(xfer, xfer->next_retire - 1, &offset,
                                        &length);
            xfer->ops->chunk_done(xfer->arg, xfer->next_retire - 1, length,
                                  offset);
        }
    }

    return count;
}

static unsigned
uct_rc_gdr_stage_xfer_start_chunks(uct_rc_gdr_stage_xfer_t *xfer)
{
    uct_rc_gdr_stage_slot_t *slot;
    uct_rc_gdr_stage_buf_t *buf;
    ucs_status_t status;
    unsigned count = 0;

    while ((xfer->status == UCS_OK) &&
           (xfer->next_start < xfer->num_chunks) &&
           (xfer->next_start < (xfer->next_retire + xfer->depth))) {
        if (xfer->spare != NULL) {
            buf         = xfer->spare;
            xfer->spare = buf->next_free;
            --xfer->num_spare;
        } else if (uct_rc_gdr_stage_pool_get(xfer->engine->pool, &buf) !=
                   UCS_OK) {
            /* back-pressure: a buffer comes back at the next retirement of
               this transfer or another one */
            if (!xfer->buf_wait) {
                xfer->buf_wait = 1;
                ++xfer->engine->stats.buf_waits;
            }
            break;
        }

        xfer->buf_wait = 0;
        slot           = uct_rc_gdr_stage_xfer_slot(xfer, xfer->next_start);
        ucs_assert(slot->state == UCT_RC_GDR_STAGE_SLOT_FREE);
        slot->buf      = buf;
        slot->chunk    = xfer->next_start++;
        ++count;

        if (xfer->dir == UCT_RC_GDR_STAGE_WIRE_H2D) {
            slot->state = UCT_RC_GDR_STAGE_SLOT_READY;
            continue;
        }

        status = uct_rc_gdr_stage_xfer_copy(xfer, slot);
        if (status != UCS_OK) {
            slot->state = UCT_RC_GDR_STAGE_SLOT_DONE;
            uct_rc_gdr_stage_xfer_fail(xfer, status);
        }
    }

    return count;
}

/* Wait for the copies in flight on the transfer's buffers */
static void uct_rc_gdr_stage_xfer_sync_copies(uct_rc_gdr_stage_xfer_t *xfer)
{
    uct_rc_gdr_stage_slot_t *slot;
    ucs_status_t status;
    unsigned i, dir, s;

    for (i = 0; (i < xfer->depth) && (xfer->num_copies > 0); ++i) {
        slot = &xfer->slots[i];
        if (slot->state != UCT_RC_GDR_STAGE_SLOT_COPY) {
            continue;
        }

        status = uct_rc_gdr_cuda_event_synchronize(
                uct_rc_gdr_stage_buf_event(xfer, slot->buf));
        if (status != UCS_OK) {
            /* the event cannot tell: wait for everything the engine issued */
            for (dir = 0; dir < 2; ++dir) {
                for (s = 0; s < xfer->engine->num_streams; ++s) {
                    uct_rc_gdr_cuda_stream_synchronize(
                            xfer->engine->streams[dir][s]);
                }
            }
            xfer->num_copies = 0;
            break;
        }

        slot->state = UCT_RC_GDR_STAGE_SLOT_DONE;
        --xfer->num_copies;
    }

    ucs_assert(xfer->num_copies == 0);
}

/* Give every buffer of the transfer back and take it off the active list */
static void uct_rc_gdr_stage_xfer_release(uct_rc_gdr_stage_xfer_t *xfer)
{
    uct_rc_gdr_stage_buf_t *buf;
    unsigned i;

    for (i = 0; i < xfer->depth; ++i) {
        if (xfer->slots[i].buf != NULL) {
            uct_rc_gdr_stage_xfer_buf_release(xfer, xfer->slots[i].buf);
            xfer->slots[i].buf   = NULL;
            xfer->slots[i].state = UCT_RC_GDR_STAGE_SLOT_FREE;
        }
    }

    while (xfer->spare != NULL) {
        buf         = xfer->spare;
        xfer->spare = buf->next_free;
        uct_rc_gdr_stage_xfer_buf_release(xfer, buf);
    }
    xfer->num_spare = 0;

    ucs_list_del(&xfer->list);
    --xfer->engine->stats.active;
}

static void uct_rc_gdr_stage_xfer_account(uct_rc_gdr_stage_xfer_t *xfer,
                                          ucs_status_t status)
{
    if (status == UCS_OK) {
        ++xfer->engine->stats.xfers_completed;
    } else {
        ++xfer->engine->stats.xfers_failed;
    }
}

/* One pass over a transfer; moves it to the done list when it has ended */
static unsigned uct_rc_gdr_stage_xfer_advance(uct_rc_gdr_stage_xfer_t *xfer,
                                              int *ended_p)
{
    unsigned count;

    count = uct_rc_gdr_stage_xfer_poll_copies(xfer);
    count += uct_rc_gdr_stage_xfer_post(xfer);
    if (xfer->dir == UCT_RC_GDR_STAGE_WIRE_H2D) {
        count += uct_rc_gdr_stage_xfer_copy_out(xfer);
    }
    count += uct_rc_gdr_stage_xfer_retire(xfer);
    count += uct_rc_gdr_stage_xfer_start_chunks(xfer);

    *ended_p = ((xfer->status == UCS_OK) &&
                (xfer->next_retire == xfer->num_chunks)) ||
               ((xfer->status != UCS_OK) && (xfer->num_copies == 0) &&
                (xfer->num_wire == 0));
    if (*ended_p) {
        xfer->ended = 1;
        uct_rc_gdr_stage_xfer_release(xfer);
        ucs_list_add_tail(&xfer->engine->done, &xfer->list);
    }

    return count;
}

static void uct_rc_gdr_stage_complete_done(uct_rc_gdr_stage_engine_t *engine)
{
    const uct_rc_gdr_stage_ops_t *ops;
    uct_rc_gdr_stage_xfer_t *xfer;
    ucs_status_t status;
    void *arg;

    while (!ucs_list_is_empty(&engine->done)) {
        xfer   = ucs_list_extract_head(&engine->done, uct_rc_gdr_stage_xfer_t,
                                       list);
        ops    = xfer->ops;
        arg    = xfer->arg;
        status = xfer->status;
        uct_rc_gdr_stage_xfer_account(xfer, status);
        ucs_free(xfer);
        ops->complete(arg, status);
    }
}

unsigned uct_rc_gdr_stage_progress(uct_rc_gdr_stage_engine_t *engine)
{
    uct_rc_gdr_stage_xfer_t *xfer, *txfer;
    uct_rc_gdr_cuda_ctx_h prev_ctx;
    unsigned count, total = 0;
    int ended;

    if (ucs_list_is_empty(&engine->active)) {
        return 0;
    }

    prev_ctx = uct_rc_gdr_stage_ctx_push(engine);

    ucs_list_for_each_safe(xfer, txfer, &engine->active, list) {
        /* several passes: a synchronous wire or a finished copy lets the
           next stage run at once */
        do {
            count  = uct_rc_gdr_stage_xfer_advance(xfer, &ended);
            total += count;
        } while ((count > 0) && !ended);
    }

    uct_rc_gdr_stage_ctx_pop(engine, prev_ctx);
    uct_rc_gdr_stage_complete_done(engine);
    return total;
}

ucs_status_t
uct_rc_gdr_stage_xfer_start(uct_rc_gdr_stage_engine_t *engine,
                            const uct_rc_gdr_stage_xfer_params_t *params,
                            uct_rc_gdr_stage_xfer_t **xfer_p)
{
    uct_rc_gdr_stage_xfer_t *xfer;
    uct_rc_gdr_cuda_ctx_h prev_ctx;
    uct_rc_gdr_stage_buf_t *buf;
    size_t num_chunks, first_size, chunk_size;
    ucs_status_t status;
    unsigned depth;

    if ((params->ops == NULL) || (params->ops->post == NULL) ||
        (params->ops->complete == NULL) ||
        ((params->dir != UCT_RC_GDR_STAGE_D2H_WIRE) &&
         (params->dir != UCT_RC_GDR_STAGE_WIRE_H2D)) ||
        ((params->gpu_addr == NULL) && (params->length > 0)) ||
        (params->depth > UCT_RC_GDR_STAGE_DEPTH_MAX)) {
        ucs_error("%s: invalid transfer: ops %p, direction %d, address %p, "
                  "depth %u", engine->name, params->ops, params->dir,
                  params->gpu_addr, params->depth);
        return UCS_ERR_INVALID_PARAM;
    }

    if (params->length == 0) {
        return UCS_OK;
    }

    first_size = uct_rc_gdr_stage_chunk_first(params->length,
                                              engine->pool->chunk_size);
    chunk_size = uct_rc_gdr_stage_chunk_size(params->length,
                                             engine->pool->chunk_size);
    num_chunks = uct_rc_gdr_stage_num_chunks(params->length, first_size,
                                             chunk_size);
    if (num_chunks > UINT_MAX) {
        ucs_error("%s: transfer of %zu bytes has too many chunks of %zu",
                  engine->name, params->length, chunk_size);
        return UCS_ERR_INVALID_PARAM;
    }

    depth = (params->depth != 0) ? params->depth : engine->depth;
    depth = ucs_min(depth, num_chunks);

    /* the first buffer decides whether the transfer starts at all */
    status = uct_rc_gdr_stage_pool_get(engine->pool, &buf);
    if (status != UCS_OK) {
        return status;
    }

    xfer = ucs_calloc(1, sizeof(*xfer) + (depth * sizeof(xfer->slots[0])),
                      "rc_gdr_stage_xfer");
    if (xfer == NULL) {
        ucs_error("%s: failed to allocate a transfer", engine->name);
        status = UCS_ERR_NO_MEMORY;
        goto err_put_buf;
    }

    xfer->engine     = engine;
    xfer->ops        = params->ops;
    xfer->arg        = params->arg;
    xfer->dir        = params->dir;
    xfer->gpu_addr   = params->gpu_addr;
    xfer->length     = params->length;
    xfer->first_size = first_size;
    xfer->chunk_size = chunk_size;
    xfer->num_chunks = num_chunks;
    xfer->depth      = depth;
    xfer->spare      = buf;
    xfer->num_spare  = 1;
    xfer->status     = UCS_OK;
    buf->next_free   = NULL;
    ucs_list_add_tail(&engine->active, &xfer->list);
    ++engine->stats.active;

    prev_ctx = uct_rc_gdr_stage_ctx_push(engine);
    uct_rc_gdr_stage_xfer_start_chunks(xfer);
    status = xfer->status;
    if (status != UCS_OK) {
        /* nothing was posted: undo without a callback */
        uct_rc_gdr_stage_xfer_sync_copies(xfer);
        uct_rc_gdr_stage_ctx_pop(engine, prev_ctx);
        uct_rc_gdr_stage_xfer_release(xfer);
        ucs_free(xfer);
        return status;
    }
    uct_rc_gdr_stage_ctx_pop(engine, prev_ctx);

    ++engine->stats.xfers_started;
    *xfer_p = xfer;
    return UCS_INPROGRESS;

err_put_buf:
    uct_rc_gdr_stage_pool_put(engine->pool, buf);
    return status;
}

static uct_rc_gdr_stage_slot_t *
uct_rc_gdr_stage_xfer_wire_slot(uct_rc_gdr_stage_xfer_t *xfer,
                                unsigned chunk_index)
{
    uct_rc_gdr_stage_slot_t *slot;

    if ((chunk_index < xfer->next_retire) ||
        (chunk_index >= xfer->next_post)) {
        goto err;
    }

    slot = uct_rc_gdr_stage_xfer_slot(xfer, chunk_index);
    if ((slot->chunk != chunk_index) ||
        (slot->state != UCT_RC_GDR_STAGE_SLOT_WIRE)) {
        goto err;
    }

    ucs_assert(xfer->num_wire > 0);
    --xfer->num_wire;
    return slot;

err:
    ucs_error("%s: chunk %u of transfer %p is not on the wire",
              xfer->engine->name, chunk_index, xfer);
    return NULL;
}

ucs_status_t uct_rc_gdr_stage_wire_done(uct_rc_gdr_stage_xfer_t *xfer,
                                        unsigned chunk_index)
{
    uct_rc_gdr_stage_slot_t *slot;

    slot = uct_rc_gdr_stage_xfer_wire_slot(xfer, chunk_index);
    if (slot == NULL) {
        return UCS_ERR_INVALID_PARAM;
    }

    slot->state = ((xfer->dir == UCT_RC_GDR_STAGE_D2H_WIRE) ||
                   (xfer->status != UCS_OK)) ?
                  UCT_RC_GDR_STAGE_SLOT_DONE : UCT_RC_GDR_STAGE_SLOT_ARRIVED;
    return UCS_OK;
}

ucs_status_t uct_rc_gdr_stage_wire_error(uct_rc_gdr_stage_xfer_t *xfer,
                                         unsigned chunk_index,
                                         ucs_status_t status)
{
    uct_rc_gdr_stage_slot_t *slot;

    slot = uct_rc_gdr_stage_xfer_wire_slot(xfer, chunk_index);
    if (slot == NULL) {
        return UCS_ERR_INVALID_PARAM;
    }

    slot->state = UCT_RC_GDR_STAGE_SLOT_DONE;
    uct_rc_gdr_stage_xfer_fail(xfer, (status != UCS_OK) ? status :
                                     UCS_ERR_IO_ERROR);
    return UCS_OK;
}

void uct_rc_gdr_stage_xfer_cancel(uct_rc_gdr_stage_xfer_t *xfer,
                                  ucs_status_t status)
{
    uct_rc_gdr_stage_engine_t *engine = xfer->engine;
    const uct_rc_gdr_stage_ops_t *ops = xfer->ops;
    void *arg                         = xfer->arg;
    uct_rc_gdr_cuda_ctx_h prev_ctx;

    if (xfer->ended) {
        /* it finished in this progress call; its callback was not called
           yet: it completes now, with its own status */
        ucs_list_del(&xfer->list);
        status = xfer->status;
        goto out;
    }

    ucs_debug("%s: cancel %s transfer %p at chunk %u/%u (%u on the wire): %s",
              engine->name, uct_rc_gdr_stage_dir_str(xfer->dir), xfer,
              xfer->next_retire, xfer->num_chunks, xfer->num_wire,
              ucs_status_string(status));

    prev_ctx = uct_rc_gdr_stage_ctx_push(engine);
    uct_rc_gdr_stage_xfer_sync_copies(xfer);
    uct_rc_gdr_stage_ctx_pop(engine, prev_ctx);

    /* the owner's promise: the wire no longer touches these buffers */
    xfer->num_wire = 0;
    uct_rc_gdr_stage_xfer_release(xfer);

out:
    uct_rc_gdr_stage_xfer_account(xfer, status);
    ucs_free(xfer);
    ops->complete(arg, status);
}

void uct_rc_gdr_stage_engine_destroy(uct_rc_gdr_stage_engine_t *engine)
{
    uct_rc_gdr_cuda_ctx_h prev_ctx;
    uct_rc_gdr_stage_xfer_t *xfer;

    if (engine == NULL) {
        return;
    }

    /* transfers that ended in a progress call still owe their callback */
    uct_rc_gdr_stage_complete_done(engine);

    while (!ucs_list_is_empty(&engine->active)) {
        xfer = ucs_list_head(&engine->active, uct_rc_gdr_stage_xfer_t, list);
        ucs_debug("%s: destroyed with transfer %p active", engine->name,
                  xfer);
        uct_rc_gdr_stage_xfer_cancel(xfer, UCS_ERR_CANCELED);
    }

    prev_ctx = uct_rc_gdr_stage_ctx_push(engine);
    uct_rc_gdr_stage_engine_free_cuda(engine);
    uct_rc_gdr_stage_ctx_pop(engine, prev_ctx);
    ucs_free(engine);
}

void uct_rc_gdr_stage_engine_stats(const uct_rc_gdr_stage_engine_t *engine,
                                   uct_rc_gdr_stage_engine_stats_t *stats_p)
{
    *stats_p = engine->stats;
}
