/**
 * rc_gdr bounce lane: the staging engine.
 *
 * When one side's GPU memory has no NIC memory region, its data goes through
 * pinned host memory in chunks. This file holds the two parts of that lane
 * that do not depend on UCT, so that they can be tested with the emulated
 * driver and benchmarked on a GPU machine without a NIC:
 *
 *   - the staging pool: N pinned host buffers of one chunk size, allocated
 *     once with cuMemHostAlloc(PORTABLE) and registered with the NIC once
 *     each, through the owner's callbacks; get/put of buffers; an exhausted
 *     pool answers UCS_ERR_NO_RESOURCE (back-pressure: the owner queues the
 *     operation, it does not fail it);
 *
 *   - the pipeline engine, which moves one large message per transfer in
 *     chunks through staging buffers, in either direction:
 *       D2H_WIRE  GPU source -> D2H copy into staging -> wire (send);
 *       WIRE_H2D  wire -> staging -> H2D copy to the GPU (receive);
 *     with up to `depth` chunks of a transfer in flight, so that the CUDA
 *     copy of chunk k+1 overlaps the wire transfer of chunk k. The chunk
 *     size is chosen per message (uct_rc_gdr_stage_chunk_size()): a buffer
 *     is the largest chunk, a message shorter than two buffers is cut in
 *     two, and a longer one starts with a chunk of half a buffer, so that
 *     the wire starts early.
 *
 * The wire is the owner's: post() starts moving one staged chunk (for RC, an
 * RDMA write or read; for the benchmark, a loopback memcpy) and the owner
 * reports its end with uct_rc_gdr_stage_wire_done(). Nothing here blocks
 * except cancellation: uct_rc_gdr_stage_progress() polls CUDA events and
 * advances every transfer of the engine.
 *
 * Order guarantees, per transfer:
 *   - post() is called in chunk order (0, 1, 2, ...), also when copies on
 *     several streams finish out of order;
 *   - the wire may finish chunks in any order;
 *   - ops->chunk_done() is called in chunk order, once per chunk, when the
 *     chunk has passed every stage (for D2H_WIRE: its wire transfer is done;
 *     for WIRE_H2D: its data is in GPU memory);
 *   - ops->complete() is called once per started transfer, after every
 *     staging buffer of the transfer is back in the pool, from progress (or
 *     from cancel / engine destroy), never from start.
 *
 * Threads: a pool and its engines are used by one thread at a time (the
 * worker's). The owner's callbacks run on that thread.
 *
 * See file LICENSE for terms.
 */

#ifndef UCT_RC_GDR_STAGE_H_
#define UCT_RC_GDR_STAGE_H_

#include "rc_gdr_cuda.h"

#include <ucs/sys/compiler_def.h>
#include "rc_gdr_glue_math.h"
#include <ucs/type/status.h>

#include <stddef.h>
#include <stdint.h>

BEGIN_C_DECLS

/*
 * Tunables, with their defaults (plain numbers, so that a configuration
 * table can take them with UCS_PP_MAKE_STRING). Measured on an H200 (driver
 * 580, PCIe Gen5, no NIC; doc/MEASUREMENTS.md): every CUDA copy costs the
 * copy engine ~2 us of its own, whether or not an event follows it, whatever
 * the copies in flight and over one stream or four. Against one pinned copy
 * of 64 MiB, back-to-back copies of 1 MiB reach 0.88-0.90, of 2 MiB
 * 0.94-0.95, of 4 MiB 0.97-0.98: only larger copies help. Hence 4 MiB
 * buffers, with the chunks chosen per message (below): the engine alone
 * then keeps 0.96-0.98 of the pinned copy from 4 MiB on (1 MiB: 0.87-0.93).
 * The price is the pipeline's fill: over a wire about as fast as the copy (a
 * paced 50 GB/s stand-in) 1 MiB buffers move 4-16 MiB messages 12-25%
 * faster, 64 MiB ones 1-3% (over 25 GB/s: 9% at 4 MiB, 2% at 16 MiB);
 * buffers of up to 1 MiB still get whole-buffer chunks. Two chunks in flight
 * keep the copy engine busy (three or four gain at most 1.5% over the paced
 * wire, about the spread between runs); 16 buffers serve as many large
 * transfers at once as 32 of 1 MiB did at depth 4.
 */
#define UCT_RC_GDR_STAGE_CHUNK_SIZE_DEFAULT  4194304 /* bytes per buffer:
                                                        the largest chunk */
#define UCT_RC_GDR_STAGE_DEPTH_DEFAULT       2   /* chunks in flight/transfer */
#define UCT_RC_GDR_STAGE_POOL_SIZE_DEFAULT   16  /* staging buffers */
#define UCT_RC_GDR_STAGE_STREAMS_DEFAULT     1   /* CUDA streams/direction */

/* Limits of the values above */
#define UCT_RC_GDR_STAGE_CHUNK_SIZE_MIN      4096
#define UCT_RC_GDR_STAGE_DEPTH_MAX           64
#define UCT_RC_GDR_STAGE_STREAMS_MAX         8

/* Per-message chunks (uct_rc_gdr_stage_chunk_size() below): no chunk is
 * made smaller than SPLIT_MIN (a message of up to SPLIT_MIN is one chunk),
 * as copies of less cost the copy engine more than they gain in overlap;
 * cuts fall on multiples of SPLIT_ALIGN */
#define UCT_RC_GDR_STAGE_SPLIT_MIN           (1ul << 20)
#define UCT_RC_GDR_STAGE_SPLIT_ALIGN         (64ul << 10)


typedef struct uct_rc_gdr_stage_pool   uct_rc_gdr_stage_pool_t;
typedef struct uct_rc_gdr_stage_engine uct_rc_gdr_stage_engine_t;
typedef struct uct_rc_gdr_stage_xfer   uct_rc_gdr_stage_xfer_t;


/*
 * Staging pool
 */

/* One staging buffer: pool->chunk_size bytes of pinned host memory */
typedef struct uct_rc_gdr_stage_buf {
    void                        *addr;  /* page-aligned */
    void                        *memh;  /* from ops->reg, NULL without */
    unsigned                    index;  /* 0 .. pool_size - 1 */

    /* Private to the pool */
    struct uct_rc_gdr_stage_buf *next_free;
    int                         in_use;
} uct_rc_gdr_stage_buf_t;


typedef struct uct_rc_gdr_stage_reg_ops {
    /* Register [addr, addr + length) with the NIC, once per buffer at pool
       creation; *memh_p is given back in the buffer (e.g. the ibv_mr, whose
       lkey the wire uses). Logs its own errors. */
    ucs_status_t (*reg)(void *arg, void *addr, size_t length, void **memh_p);

    /* Undo one successful reg, at pool destruction */
    void         (*dereg)(void *arg, void *addr, size_t length, void *memh);
} uct_rc_gdr_stage_reg_ops_t;


typedef struct uct_rc_gdr_stage_pool_params {
    size_t                           chunk_size; /* bytes per buffer */
    unsigned                         pool_size;  /* number of buffers */
    const uct_rc_gdr_stage_reg_ops_t *reg_ops;   /* NULL: no registration */
    void                             *reg_arg;
    const char                       *name;      /* for logs, may be NULL */
} uct_rc_gdr_stage_pool_params_t;


typedef struct uct_rc_gdr_stage_pool_stats {
    unsigned num_bufs;       /* buffers of the pool */
    unsigned in_use;         /* buffers handed out now */
    unsigned in_use_max;     /* high-water mark of in_use */
    uint64_t staged_bytes;   /* bytes copied by CUDA into or out of the
                                pool's buffers (both directions) */
    uint64_t no_resource;    /* gets refused because every buffer was out */
} uct_rc_gdr_stage_pool_stats_t;


/**
 * Allocate and register the pool's buffers. Needs a current CUDA context
 * (the memory is portable: any context can copy to and from it).
 */
ucs_status_t
uct_rc_gdr_stage_pool_create(const uct_rc_gdr_stage_pool_params_t *params,
                             uct_rc_gdr_stage_pool_t **pool_p);

/** Deregister and free; warns about buffers still out. */
void uct_rc_gdr_stage_pool_destroy(uct_rc_gdr_stage_pool_t *pool);

/** @return UCS_OK, or UCS_ERR_NO_RESOURCE when every buffer is out. */
ucs_status_t uct_rc_gdr_stage_pool_get(uct_rc_gdr_stage_pool_t *pool,
                                       uct_rc_gdr_stage_buf_t **buf_p);

/** @return UCS_ERR_INVALID_PARAM for a buffer that is not out (double put,
 *          or a buffer of another pool), without touching the pool. */
ucs_status_t uct_rc_gdr_stage_pool_put(uct_rc_gdr_stage_pool_t *pool,
                                       uct_rc_gdr_stage_buf_t *buf);

size_t uct_rc_gdr_stage_pool_chunk_size(const uct_rc_gdr_stage_pool_t *pool);

void uct_rc_gdr_stage_pool_stats(const uct_rc_gdr_stage_pool_t *pool,
                                 uct_rc_gdr_stage_pool_stats_t *stats_p);


/*
 * Pipeline engine
 */

typedef enum uct_rc_gdr_stage_dir {
    UCT_RC_GDR_STAGE_D2H_WIRE, /* GPU -> staging (D2H copy) -> wire */
    UCT_RC_GDR_STAGE_WIRE_H2D  /* wire -> staging -> GPU (H2D copy) */
} uct_rc_gdr_stage_dir_t;


/* What the owner of a transfer provides; one const table per owner kind */
typedef struct uct_rc_gdr_stage_ops {
    /*
     * Start the wire part of chunk `chunk_index`: bytes [offset, offset +
     * length) of the message, in `buf`. D2H_WIRE: buf holds the data, send
     * it. WIRE_H2D: bring the data into buf. Chunks are cut as
     * uct_rc_gdr_stage_chunk() says, with the sizes chosen for the message
     * (uct_rc_gdr_stage_chunk_first() and _chunk_size()).
     * Returns:
     *   UCS_INPROGRESS       started; the owner calls
     *                        uct_rc_gdr_stage_wire_done() (or _wire_error)
     *                        later, never from inside post();
     *   UCS_OK               done already (a synchronous wire);
     *   UCS_ERR_NO_RESOURCE  not now (e.g. no send credits): the engine
     *                        calls post() again for this chunk from a later
     *                        progress, before any later chunk;
     *   other                the transfer fails with this status.
     */
    ucs_status_t (*post)(void *arg, unsigned chunk_index,
                         uct_rc_gdr_stage_buf_t *buf, size_t length,
                         size_t offset);

    /* Optional: chunk `chunk_index` passed every stage (in chunk order) */
    void         (*chunk_done)(void *arg, unsigned chunk_index, size_t length,
                               size_t offset);

    /* The transfer ended: UCS_OK, the first error, or the cancel status.
       The transfer handle is gone when this runs. */
    void         (*complete)(void *arg, ucs_status_t status);
} uct_rc_gdr_stage_ops_t;


typedef struct uct_rc_gdr_stage_engine_params {
    uct_rc_gdr_stage_pool_t *pool;
    unsigned                depth;       /* default chunks in flight per
                                            transfer, 1 .. DEPTH_MAX */
    unsigned                num_streams; /* CUDA streams per direction, chunk
                                            k uses stream k % num_streams */
    uct_rc_gdr_cuda_ctx_h   ctx;         /* NULL: the context current at
                                            create (there must be one) */
    const char              *name;       /* for logs, may be NULL */
} uct_rc_gdr_stage_engine_params_t;


typedef struct uct_rc_gdr_stage_xfer_params {
    uct_rc_gdr_stage_dir_t       dir;
    void                         *gpu_addr; /* D2H_WIRE: source,
                                               WIRE_H2D: destination */
    size_t                       length;
    unsigned                     depth;     /* 0: the engine's default */
    const uct_rc_gdr_stage_ops_t *ops;
    void                         *arg;      /* passed to ops */
} uct_rc_gdr_stage_xfer_params_t;


typedef struct uct_rc_gdr_stage_engine_stats {
    uint64_t xfers_started;
    uint64_t xfers_completed; /* with UCS_OK */
    uint64_t xfers_failed;    /* with an error, cancellation included */
    uint64_t chunks_done;
    uint64_t buf_waits;       /* a chunk could not start: pool exhausted */
    uint64_t wire_retries;    /* post() answered UCS_ERR_NO_RESOURCE */
    unsigned active;          /* transfers in progress now */
} uct_rc_gdr_stage_engine_stats_t;


/** Creates the engine's streams and events in its context. */
ucs_status_t
uct_rc_gdr_stage_engine_create(const uct_rc_gdr_stage_engine_params_t *params,
                               uct_rc_gdr_stage_engine_t **engine_p);

/** Cancels the transfers still active (UCS_ERR_CANCELED), then frees. */
void uct_rc_gdr_stage_engine_destroy(uct_rc_gdr_stage_engine_t *engine);

/**
 * Start a transfer: takes staging buffers for its first chunks and, for
 * D2H_WIRE, issues their copies. Wire posts happen from progress.
 *
 * @return UCS_INPROGRESS  started, *xfer_p is valid until ops->complete;
 *         UCS_OK          nothing to move (length 0), no callback follows;
 *         UCS_ERR_NO_RESOURCE  no staging buffer is free: nothing started,
 *                         queue the operation and try again later;
 *         UCS_ERR_INVALID_PARAM  bad parameters;
 *         other           a CUDA error; nothing started, no callback.
 */
ucs_status_t
uct_rc_gdr_stage_xfer_start(uct_rc_gdr_stage_engine_t *engine,
                            const uct_rc_gdr_stage_xfer_params_t *params,
                            uct_rc_gdr_stage_xfer_t **xfer_p);

/**
 * The owner's wire finished chunk `chunk_index`, posted with UCS_INPROGRESS.
 * @return UCS_ERR_INVALID_PARAM when that chunk is not on the wire.
 */
ucs_status_t uct_rc_gdr_stage_wire_done(uct_rc_gdr_stage_xfer_t *xfer,
                                        unsigned chunk_index);

/**
 * The wire transfer of a chunk ended with an error: the transfer fails with
 * `status` once its other posted chunks are reported (done or failed) and its
 * copies are finished; it then completes with `status`. Until then its
 * buffers stay out of the pool, since the NIC may still use them.
 */
ucs_status_t uct_rc_gdr_stage_wire_error(uct_rc_gdr_stage_xfer_t *xfer,
                                         unsigned chunk_index,
                                         ucs_status_t status);

/**
 * Advance every transfer of the engine: poll copy events, post staged
 * chunks, retire finished chunks, start new ones, complete transfers.
 * @return how many chunk stages advanced (0: nothing happened).
 */
unsigned uct_rc_gdr_stage_progress(uct_rc_gdr_stage_engine_t *engine);

/**
 * Abandon a transfer (e.g. its peer died): the owner promises that the wire
 * no longer touches any buffer of it and will not report its chunks. Waits
 * for the CUDA copies in flight on its buffers (at most `depth` chunks),
 * returns every buffer to the pool, calls ops->complete(status) and frees
 * the transfer, all before it returns. Not to be called from the transfer's
 * own callbacks.
 */
void uct_rc_gdr_stage_xfer_cancel(uct_rc_gdr_stage_xfer_t *xfer,
                                  ucs_status_t status);

void uct_rc_gdr_stage_engine_stats(const uct_rc_gdr_stage_engine_t *engine,
                                   uct_rc_gdr_stage_engine_stats_t *stats_p);

const char *uct_rc_gdr_stage_dir_str(uct_rc_gdr_stage_dir_t dir);


/*
 * Chunking: a message of `length` bytes through staging buffers of
 * `buf_size` bytes goes in chunks of uct_rc_gdr_stage_chunk_size(length,
 * buf_size) bytes: buf_size from two buffers on, else half the message
 * (rounded up to SPLIT_ALIGN) but at least SPLIT_MIN and at most buf_size.
 * From two buffers on, the first chunk is only half a buffer (rounded down
 * to SPLIT_ALIGN, at least SPLIT_MIN): the wire starts after a shorter copy
 * and the copies that follow run ahead of it; this costs one copy more.
 * With buffers of up to SPLIT_MIN every chunk is a whole buffer.
 */
static UCS_F_ALWAYS_INLINE size_t
uct_rc_gdr_stage_chunk_size(size_t length, size_t buf_size)
{
    size_t half;

    if (length >= (2 * buf_size)) {
        return buf_size;
    }

    half = ucs_align_up_pow2(length - (length / 2),
                             UCT_RC_GDR_STAGE_SPLIT_ALIGN);
    return ucs_min(buf_size, ucs_max(half, UCT_RC_GDR_STAGE_SPLIT_MIN));
}

static UCS_F_ALWAYS_INLINE size_t
uct_rc_gdr_stage_chunk_first(size_t length, size_t buf_size)
{
    if (length < (2 * buf_size)) {
        return uct_rc_gdr_stage_chunk_size(length, buf_size);
    }

    return ucs_max(ucs_align_down_pow2(buf_size / 2,
                                       UCT_RC_GDR_STAGE_SPLIT_ALIGN),
                   ucs_min(buf_size, UCT_RC_GDR_STAGE_SPLIT_MIN));
}

/*
 * A message of `length` bytes with a first chunk of `first` bytes and the
 * others of `chunk_size` (the last may be shorter): the number of chunks,
 * and where chunk `index` lies.
 */
static UCS_F_ALWAYS_INLINE size_t
uct_rc_gdr_stage_num_chunks(size_t length, size_t first, size_t chunk_size)
{
    if (length <= first) {
        return (length > 0) ? 1 : 0;
    }

    return 1 + ((length - first + chunk_size - 1) / chunk_size);
}

static UCS_F_ALWAYS_INLINE void
uct_rc_gdr_stage_chunk(size_t length, size_t first, size_t chunk_size,
                       size_t index, size_t *offset_p, size_t *chunk_len_p)
{
    size_t offset = (index == 0) ? 0 : (first + ((index - 1) * chunk_size));
    size_t max    = (index == 0) ? first : chunk_size;

    *offset_p    = offset;
    *chunk_len_p = ((length - offset) < max) ? (length - offset) : max;
}

END_C_DECLS

#endif
