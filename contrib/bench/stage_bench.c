/**
 * stage_bench: bandwidth of rc_gdr's bounce-lane staging engine
 * (src/uct/ib_gdr/rc_gdr_stage.h), measured against plain pinned copies in
 * the same run, on a GPU machine. No NIC is needed or used: the engine's
 * "wire" is a LOOPBACK STAND-IN provided here:
 *
 *   no-op   post() completes at once: the engine is a pure copy pipeline
 *           (GPU <-> pinned staging), which shows its own overhead;
 *   memcpy  a host thread memcpy()s each staged chunk between the staging
 *           buffer and a host buffer (the bytes an RDMA engine would move)
 *           and reports completion asynchronously, as a CQ would;
 *   paced   a chunk completes after length / line rate (25 GB/s, HDR, and
 *           50 GB/s, NDR, by default), one after the other as on a link,
 *           moving no data (a host memcpy is slower than such links): the
 *           wire stage has a known, NIC-like cost.
 *
 * What it prints, for messages of 64 KiB .. 64 MiB (both directions):
 *   - pinned cuMemcpyDtoH / cuMemcpyHtoD GB/s (one synchronous copy of the
 *     whole message: the reference);
 *   - the engine's GB/s with the no-op and the memcpy wire, one message at
 *     a time, start to completion callback, and the ratio to pinned (no-op
 *     wire: the median of 5 pairs measured in turn, -r), with the chunks
 *     the engine cut the message in;
 *   - for chunked messages: each stage alone, their sum and the pipelined
 *     total (pipelined should be close to the slowest stage, not the sum);
 *   - a sweep of buffer sizes (1 .. 8 MiB) and depths (2 .. 4), and the
 *     pair it picks as defaults;
 *   - with -P instead: raw copy pipelines without the engine (copy size x
 *     copies in flight x streams), and the host time of driver calls;
 *   - a byte-exact round trip through the engine.
 *
 * Without a usable GPU it says so and exits 0. --emulated runs it against
 * the test emulation of the driver (test/mocks): every line is then
 * labelled EMULATED, and the numbers are memcpy speeds, not a GPU's.
 *
 * Exit status: 0 measured (or nothing to measure), 1 a transfer failed or
 * data differed, 2 usage or setup error.
 *
 * See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <uct/ib_gdr/rc_gdr_stage.h>

#include <dlfcn.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


#define KIB                  (1024ul)
#define MIB                  (1024ul * 1024ul)
#define GB                   1e9
#define WIRE_RING_SIZE       1024
#define IDLE_SPINS           4096  /* then sched_yield(): a loaded machine */
#define MAX_SIZES            32
#define MAX_REPS             15

#define BENCH_ERR(...) fprintf(stderr, "stage_bench: " __VA_ARGS__)

static const size_t   sweep_chunks[] = {1 * MIB, 2 * MIB, 4 * MIB, 8 * MIB};
static const unsigned sweep_depths[] = {2, 3, 4};
static const size_t   sweep_sizes[]  = {4 * MIB, 16 * MIB, 64 * MIB};
#define ARRAY_LEN(_a) (sizeof(_a) / sizeof((_a)[0]))


static struct {
    size_t     min_size;
    size_t     max_size;
    size_t     chunk;       /* 0: from the sweep */
    unsigned   depth;       /* 0: from the sweep */
    unsigned   streams;
    int        sweep;
    int        probe;
    double     target_s;    /* time per measurement */
    unsigned   reps;        /* pinned copy / engine pairs per ratio */
    double     paced_gbps;  /* the stage table's first paced wire */
    double     sweep_gbps;  /* its second one, and the sweep's */
    int        device;
    int        emulate;
    const char *emulated_lib;
    size_t     verify_size;
} opts = {
    .min_size    = 64 * KIB,
    .max_size    = 64 * MIB,
    .streams     = 1,
    .sweep       = 1,
    .target_s    = 0.025,
    .reps        = 5,
    .paced_gbps  = 25.0,
    .sweep_gbps  = 50.0,
    .device      = 0
};

static const char *label = "";   /* "EMULATED " with the test driver */


static double now_sec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + (ts.tv_nsec * 1e-9);
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static const char *size_str(size_t size, char *buf, size_t max)
{
    if ((size >= MIB) && ((size % MIB) == 0)) {
        snprintf(buf, max, "%zu MiB", size / MIB);
    } else if ((size >= KIB) && ((size % KIB) == 0)) {
        snprintf(buf, max, "%zu KiB", size / KIB);
    } else {
        snprintf(buf, max, "%zu B", size);
    }
    return buf;
}


/*
 * The loopback wire: one host thread, fed through a single-producer
 * single-consumer ring, answering through another
 */

typedef struct {
    void       *dst;
    const void *src;
    size_t     len;
    unsigned   chunk;
} wire_job_t;

typedef struct {
    wire_job_t       jobs[WIRE_RING_SIZE];
    _Atomic unsigned head;   /* written by the producer */
    _Atomic unsigned tail;   /* written by the consumer */
} wire_ring_t;

typedef struct {
    pthread_t   thread;
    wire_ring_t submit;
    wire_ring_t done;
    _Atomic int stop;
    double      rate;        /* bytes/s, 0: memcpy, as fast as it goes */
} wire_t;

static void wire_ring_push(wire_ring_t *ring, const wire_job_t *job)
{
    unsigned head = atomic_load_explicit(&ring->head, memory_order_relaxed);

    while ((head - atomic_load_explicit(&ring->tail, memory_order_acquire)) >=
           WIRE_RING_SIZE) {
        cpu_relax();
    }

    ring->jobs[head % WIRE_RING_SIZE] = *job;
    atomic_store_explicit(&ring->head, head + 1, memory_order_release);
}

static int wire_ring_pop(wire_ring_t *ring, wire_job_t *job)
{
    unsigned tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);

    if (tail == atomic_load_explicit(&ring->head, memory_order_acquire)) {
        return 0;
    }

    *job = ring->jobs[tail % WIRE_RING_SIZE];
    atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
    return 1;
}

static void *wire_thread(void *arg)
{
    wire_t *wire     = arg;
    double next_free = 0;
    unsigned idle    = 0;
    wire_job_t job;
    double start;

    while (!atomic_load_explicit(&wire->stop, memory_order_acquire)) {
        if (!wire_ring_pop(&wire->submit, &job)) {
            if (++idle >= IDLE_SPINS) {
                sched_yield();
                idle = 0;
            } else {
                cpu_relax();
            }
            continue;
        }

        idle = 0;

        if (wire->rate > 0) {
            /* a link of this rate: a chunk leaves when the previous one is
               out, and takes len / rate */
            start     = now_sec();
            next_free = ((next_free > start) ? next_free : start) +
                        (job.len / wire->rate);
        }

        if (wire->rate > 0) {
            /* a host memcpy is slower than the links this stands for */
            while (now_sec() < next_free) {
                cpu_relax();
            }
        } else {
            memcpy(job.dst, job.src, job.len);
        }

        wire_ring_push(&wire->done, &job);
    }

    return NULL;
}

static int wire_start(wire_t *wire, double rate)
{
    memset(wire, 0, sizeof(*wire));
    wire->rate = rate;
    if (pthread_create(&wire->thread, NULL, wire_thread, wire) != 0) {
        BENCH_ERR("cannot start the wire thread: %m\n");
        return -1;
    }
    return 0;
}

static void wire_stop(wire_t *wire)
{
    atomic_store_explicit(&wire->stop, 1, memory_order_release);
    pthread_join(wire->thread, NULL);
}


/*
 * Engine runs: one transfer at a time, progress until its callback
 */

typedef struct {
    uct_rc_gdr_stage_pool_t   *pool;
    uct_rc_gdr_stage_engine_t *engine;
    size_t                    chunk;
    unsigned                  depth;
    unsigned                  streams;
} bench_engine_t;

typedef struct {
    bench_engine_t          *be;
    wire_t                  *wire;    /* NULL: no-op wire */
    uct_rc_gdr_stage_dir_t  dir;
    void                    *gpu;
    char                    *remote;  /* the host buffer across the wire */
    size_t                  size;
    uct_rc_gdr_stage_xfer_t *xfer;
    int                     done;
    ucs_status_t            status;
} bench_xfer_t;

static ucs_status_t bench_wire_post(void *arg, unsigned chunk,
                                    uct_rc_gdr_stage_buf_t *buf,
                                    size_t length, size_t offset)
{
    bench_xfer_t *bx = arg;
    wire_job_t job;

    if (bx->wire == NULL) {
        return UCS_OK;
    }

    job.len   = length;
    job.chunk = chunk;
    if (bx->dir == UCT_RC_GDR_STAGE_D2H_WIRE) {
        job.dst = bx->remote + offset;
        job.src = buf->addr;
    } else {
        job.dst = buf->addr;
        job.src = bx->remote + offset;
    }

    wire_ring_push(&bx->wire->submit, &job);
    return UCS_INPROGRESS;
}

static void bench_xfer_complete(void *arg, ucs_status_t status)
{
    bench_xfer_t *bx = arg;

    bx->done   = 1;
    bx->status = status;
}

static const uct_rc_gdr_stage_ops_t bench_ops = {
    .post     = bench_wire_post,
    .complete = bench_xfer_complete
};

static int bench_engine_create(bench_engine_t *be, size_t chunk,
                               unsigned depth, unsigned streams)
{
    uct_rc_gdr_stage_pool_params_t pool_params     = {0};
    uct_rc_gdr_stage_engine_params_t engine_params = {0};

    memset(be, 0, sizeof(*be));
    be->chunk   = chunk;
    be->depth   = depth;
    be->streams = streams;

    /* one transfer at a time: depth buffers are all it can use */
    pool_params.chunk_size = chunk;
    pool_params.pool_size  = depth;
    pool_params.name       = "bench";
    if (uct_rc_gdr_stage_pool_create(&pool_params, &be->pool) != UCS_OK) {
        BENCH_ERR("cannot create a pool of %u x %zu bytes\n", depth, chunk);
        return -1;
    }

    engine_params.pool        = be->pool;
    engine_params.depth       = depth;
    engine_params.num_streams = streams;
    engine_params.name        = "bench";
    if (uct_rc_gdr_stage_engine_create(&engine_params, &be->engine) !=
        UCS_OK) {
        BENCH_ERR("cannot create the staging engine\n");
        uct_rc_gdr_stage_pool_destroy(be->pool);
        return -1;
    }

    return 0;
}

static void bench_engine_destroy(bench_engine_t *be)
{
    uct_rc_gdr_stage_engine_destroy(be->engine);
    uct_rc_gdr_stage_pool_destroy(be->pool);
}

static int bench_xfer_run(void *arg)
{
    bench_xfer_t *bx                      = arg;
    uct_rc_gdr_stage_xfer_params_t params = {0};
    unsigned idle                         = 0;
    wire_job_t job;
    ucs_status_t status;
    unsigned count;

    params.dir      = bx->dir;
    params.gpu_addr = bx->gpu;
    params.length   = bx->size;
    params.ops      = &bench_ops;
    params.arg      = bx;
    bx->done        = 0;
    bx->status      = UCS_OK;

    status = uct_rc_gdr_stage_xfer_start(bx->be->engine, &params, &bx->xfer);
    if (status == UCS_OK) {
        return 0;
    } else if (status != UCS_INPROGRESS) {
        BENCH_ERR("transfer start failed: %s\n", ucs_status_string(status));
        return -1;
    }

    while (!bx->done) {
        count = uct_rc_gdr_stage_progress(bx->be->engine);
        while ((bx->wire != NULL) && wire_ring_pop(&bx->wire->done, &job)) {
            status = uct_rc_gdr_stage_wire_done(bx->xfer, job.chunk);
            if (status != UCS_OK) {
                BENCH_ERR("wire completion of chunk %u refused\n", job.chunk);
                return -1;
            }
            ++count;
        }

        if (count > 0) {
            idle = 0;
        } else if (++idle >= IDLE_SPINS) {
            sched_yield();
            idle = 0;
        }
    }

    if (bx->status != UCS_OK) {
        BENCH_ERR("%s transfer of %zu bytes failed: %s\n",
                  uct_rc_gdr_stage_dir_str(bx->dir), bx->size,
                  ucs_status_string(bx->status));
        return -1;
    }
    return 0;
}


/*
 * The wire stage alone: the same chunks through the same wire thread, from
 * and to pinned buffers, `depth` chunks in flight, no CUDA
 */

typedef struct {
    wire_t                 *wire;
    uct_rc_gdr_stage_dir_t dir;
    char                   *remote;
    size_t                 size;
    size_t                 first;   /* chunks as the engine cuts them */
    size_t                 chunk;
    unsigned               depth;
    uct_rc_gdr_stage_buf_t *bufs[UCT_RC_GDR_STAGE_DEPTH_MAX];
} wire_alone_t;

static int wire_alone_run(void *arg)
{
    wire_alone_t *wa = arg;
    unsigned n       = uct_rc_gdr_stage_num_chunks(wa->size, wa->first,
                                                   wa->chunk);
    unsigned issued = 0, completed = 0, idle = 0;
    size_t offset, length;
    wire_job_t job;
    void *staging;

    while (completed < n) {
        while ((issued < n) && ((issued - completed) < wa->depth)) {
            uct_rc_gdr_stage_chunk(wa->size, wa->first, wa->chunk, issued,
                                   &offset, &length);
            staging   = wa->bufs[issued % wa->depth]->addr;
            job.len   = length;
            job.chunk = issued++;
            if (wa->dir == UCT_RC_GDR_STAGE_D2H_WIRE) {
                job.dst = wa->remote + offset;
                job.src = staging;
            } else {
                job.dst = staging;
                job.src = wa->remote + offset;
            }
            wire_ring_push(&wa->wire->submit, &job);
        }

        if (wire_ring_pop(&wa->wire->done, &job)) {
            ++completed;
            idle = 0;
        } else if (++idle >= IDLE_SPINS) {
            sched_yield();
            idle = 0;
        }
    }

    return 0;
}


/*
 * The reference: one synchronous pinned copy of the whole message
 */

typedef struct {
    uct_rc_gdr_stage_dir_t dir;
    void                   *gpu;
    void                   *pinned;
    size_t                 size;
} ref_copy_t;

static int ref_copy_run(void *arg)
{
    ref_copy_t *rc = arg;
    ucs_status_t status;

    status = (rc->dir == UCT_RC_GDR_STAGE_D2H_WIRE) ?
             uct_rc_gdr_cuda_memcpy_dtoh(rc->pinned, rc->gpu, rc->size) :
             uct_rc_gdr_cuda_memcpy_htod(rc->gpu, rc->pinned, rc->size);
    return (status == UCS_OK) ? 0 : -1;
}


/* Seconds per call of fn(arg), after warm-up, over at least target_s */
static double measure(int (*fn)(void*), void *arg, int *failed_p)
{
    double start, elapsed;
    unsigned iters = 0;
    int i;

    for (i = 0; i < 2; ++i) {
        if (fn(arg) != 0) {
            *failed_p = 1;
            return 0;
        }
    }

    start = now_sec();
    do {
        if (fn(arg) != 0) {
            *failed_p = 1;
            return 0;
        }
        ++iters;
        elapsed = now_sec() - start;
    } while ((elapsed < opts.target_s) || (iters < 3));

    return elapsed / iters;
}


/*
 * Buffers shared by every measurement
 */

static struct {
    void   *gpu_src;
    void   *gpu_dst;
    void   *pinned;
    char   *remote;
    size_t size;
} mem;

static int mem_alloc(size_t size)
{
    unsigned char *p;
    size_t i;

    mem.size = size;
    if ((uct_rc_gdr_cuda_mem_alloc(size, &mem.gpu_src) != UCS_OK) ||
        (uct_rc_gdr_cuda_mem_alloc(size, &mem.gpu_dst) != UCS_OK) ||
        (uct_rc_gdr_cuda_host_alloc(size, &mem.pinned) != UCS_OK)) {
        BENCH_ERR("cannot allocate 2 x %zu bytes of GPU memory and %zu "
                  "pinned\n", size, size);
        return -1;
    }

    mem.remote = malloc(size + 1);
    if (mem.remote == NULL) {
        BENCH_ERR("cannot allocate %zu bytes of host memory\n", size);
        return -1;
    }

    /* touch every page before timing anything */
    p = mem.pinned;
    for (i = 0; i < size; ++i) {
        p[i] = (unsigned char)((i * 131) ^ (i >> 12));
    }
    memset(mem.remote, 0, size + 1);
    if ((uct_rc_gdr_cuda_memcpy_htod(mem.gpu_src, mem.pinned, size) !=
         UCS_OK) ||
        (uct_rc_gdr_cuda_memcpy_htod(mem.gpu_dst, mem.pinned, size) !=
         UCS_OK)) {
        return -1;
    }
    return 0;
}


/*
 * Measurements of one engine configuration
 */

typedef struct {
    double ref_s;       /* pinned copy */
    double noop_s;      /* engine, no-op wire: the copy stage alone */
    double memcpy_s;    /* engine, memcpy wire: the pipeline */
    double wire_s;      /* the memcpy wire alone */
} dir_result_t;

static double gbps(size_t size, double sec)
{
    return (sec > 0) ? (size / sec / GB) : 0;
}

static int measure_engine(bench_engine_t *be, uct_rc_gdr_stage_dir_t dir,
                          size_t size, wire_t *wire, double *sec_p)
{
    bench_xfer_t bx = {0};
    int failed      = 0;

    bx.be     = be;
    bx.wire   = wire;
    bx.dir    = dir;
    bx.gpu    = (dir == UCT_RC_GDR_STAGE_D2H_WIRE) ? mem.gpu_src :
                                                     mem.gpu_dst;
    bx.remote = mem.remote;
    bx.size   = size;
    *sec_p    = measure(bench_xfer_run, &bx, &failed);
    return failed ? -1 : 0;
}

static int measure_ref(uct_rc_gdr_stage_dir_t dir, size_t size, double *sec_p)
{
    ref_copy_t rc = {dir, (dir == UCT_RC_GDR_STAGE_D2H_WIRE) ? mem.gpu_src :
                                                               mem.gpu_dst,
                     mem.pinned, size};
    int failed    = 0;

    *sec_p = measure(ref_copy_run, &rc, &failed);
    return failed ? -1 : 0;
}

static int measure_wire_alone(bench_engine_t *be, uct_rc_gdr_stage_dir_t dir,
                              size_t size, wire_t *wire, double *sec_p)
{
    wire_alone_t wa = {0};
    int failed      = 0;
    unsigned i;

    wa.wire   = wire;
    wa.dir    = dir;
    wa.remote = mem.remote;
    wa.size   = size;
    wa.first  = uct_rc_gdr_stage_chunk_first(size, be->chunk);
    wa.chunk  = uct_rc_gdr_stage_chunk_size(size, be->chunk);
    wa.depth  = be->depth;
    for (i = 0; i < be->depth; ++i) {
        if (uct_rc_gdr_stage_pool_get(be->pool, &wa.bufs[i]) != UCS_OK) {
            BENCH_ERR("pool exhausted\n");
            return -1;
        }
    }

    *sec_p = measure(wire_alone_run, &wa, &failed);

    for (i = 0; i < be->depth; ++i) {
        uct_rc_gdr_stage_pool_put(be->pool, wa.bufs[i]);
    }
    return failed ? -1 : 0;
}

static const uct_rc_gdr_stage_dir_t dirs[] = {UCT_RC_GDR_STAGE_D2H_WIRE,
                                              UCT_RC_GDR_STAGE_WIRE_H2D};
static const char *dir_names[] = {"D2H  GPU->staging->wire",
                                  "H2D  wire->staging->GPU"};

/* The chunks the engine cuts a message in: "4 MiB" (the message when it is
 * one chunk), or "2+4 MiB" when the first is shorter */
static const char *msg_chunks(size_t size, size_t buf_size, char *buf,
                              size_t max)
{
    size_t first = uct_rc_gdr_stage_chunk_first(size, buf_size);
    size_t chunk = uct_rc_gdr_stage_chunk_size(size, buf_size);
    char fbuf[32], cbuf[32];

    if (size <= first) {
        return size_str(size, buf, max);
    } else if (first == chunk) {
        return size_str(chunk, buf, max);
    } else if (((first % MIB) == 0) && ((chunk % MIB) == 0)) {
        snprintf(buf, max, "%zu+%zu MiB", first / MIB, chunk / MIB);
    } else {
        snprintf(buf, max, "%s+%s", size_str(first, fbuf, sizeof(fbuf)),
                 size_str(chunk, cbuf, sizeof(cbuf)));
    }
    return buf;
}

/* Reference copies, cached per (direction, size index) */
static double ref_cache[2][MAX_SIZES + ARRAY_LEN(sweep_sizes)];

static int ref_for(int d, size_t size, double *sec_p)
{
    unsigned idx = 0;
    size_t s;

    for (s = opts.min_size; s < size; s *= 2) {
        ++idx;
    }
    if ((s != size) || (idx >= ARRAY_LEN(ref_cache[0]))) {
        return measure_ref(dirs[d], size, sec_p);
    }
    if (ref_cache[d][idx] == 0) {
        if (measure_ref(dirs[d], size, &ref_cache[d][idx]) != 0) {
            return -1;
        }
    }
    *sec_p = ref_cache[d][idx];
    return 0;
}


static double median(double *v, unsigned n)
{
    unsigned i, j;
    double x;

    for (i = 1; i < n; ++i) {
        for (j = i, x = v[i]; (j > 0) && (v[j - 1] > x); --j) {
            v[j] = v[j - 1];
        }
        v[j] = x;
    }
    return (n % 2) ? v[n / 2] : ((v[(n / 2) - 1] + v[n / 2]) / 2);
}

/*
 * The engine with the no-op wire against one pinned copy, measured `reps`
 * times in turn, so that a slow moment of the machine falls on both: the
 * medians of each time and of the ratios of the pairs
 */
static int measure_ratio(bench_engine_t *be, int d, size_t size,
                         unsigned reps, double *ref_p, double *noop_p,
                         double *ratio_p)
{
    double ref[MAX_REPS], noop[MAX_REPS], ratio[MAX_REPS];
    unsigned i;

    for (i = 0; i < reps; ++i) {
        if ((measure_ref(dirs[d], size, &ref[i]) != 0) ||
            (measure_engine(be, dirs[d], size, NULL, &noop[i]) != 0)) {
            return -1;
        }
        ratio[i] = ref[i] / noop[i];
    }

    *ratio_p = median(ratio, reps);
    *ref_p   = median(ref, reps);
    *noop_p  = median(noop, reps);
    return 0;
}


/*
 * Sweep: buffer size x depth at 4, 16 and 64 MiB; pick the defaults
 */

typedef struct {
    size_t   chunk;     /* buffer size: the largest chunk */
    unsigned depth;
    double   min_ratio; /* lowest noop / pinned over sizes and directions */
    double   eff;       /* mean efficiency with the paced wire */
} sweep_pick_t;

#define SWEEP_TARGET 0.95

/* Is `a` a better pick than `b` (see run_sweep's header line) */
static int sweep_better(const sweep_pick_t *a, const sweep_pick_t *b)
{
    int a_meets = (a->min_ratio >= SWEEP_TARGET);
    int b_meets = (b->min_ratio >= SWEEP_TARGET);
    size_t a_mem = a->chunk * a->depth;
    size_t b_mem = b->chunk * b->depth;

    if (b->chunk == 0) {
        return 1;
    } else if (a_meets != b_meets) {
        return a_meets;
    } else if (!a_meets) {
        return a->min_ratio > b->min_ratio;
    } else if ((a_mem < b_mem) && (a->eff >= (b->eff * 0.98))) {
        return 1;
    } else if ((a_mem > b_mem) && (b->eff >= (a->eff * 0.98))) {
        return 0;
    }
    return a->eff > b->eff;
}

static int run_sweep(sweep_pick_t *pick)
{
    const double rate = opts.sweep_gbps * GB;
    sweep_pick_t res[ARRAY_LEN(sweep_chunks)][ARRAY_LEN(sweep_depths)];
    double ref_s, noop_s, paced_s, ideal_s, ratio, eff;
    char sbuf[32], cbuf[32], kbuf[80];
    sweep_pick_t *r;
    size_t ci, di, si;
    bench_engine_t be;
    wire_t wire;
    int d, n;

    printf("\n# %sSWEEP: buffer size (the largest chunk) x depth, 1 stream; "
           "chunk = the chunk the engine chose for the message\n", label);
    printf("# ratio = engine with the no-op wire (copy pipeline) / one pinned "
           "copy; eff = max(pinned copy, the wire's line time) / engine with "
           "a paced %.0f GB/s wire (no data moved, -m)\n", opts.sweep_gbps);
    printf("# pick: of the configurations with ratio >= %.2f at every size "
           "in both directions, the best mean eff, or one within 2%% of it "
           "(the spread between runs) with less pinned memory per transfer "
           "(buffer x depth); if none meets %.2f, the best lowest ratio\n",
           SWEEP_TARGET, SWEEP_TARGET);
    printf("# %-7s %5s %7s | %-29s | %-29s\n", "buffer", "depth", "size",
           "D2H chunk  GB/s ratio   eff", "H2D chunk  GB/s ratio   eff");

    for (ci = 0; ci < ARRAY_LEN(sweep_chunks); ++ci) {
        for (di = 0; di < ARRAY_LEN(sweep_depths); ++di) {
            r            = &res[ci][di];
            r->chunk     = sweep_chunks[ci];
            r->depth     = sweep_depths[di];
            r->min_ratio = 2;
            r->eff       = 0;
            n            = 0;

            if (bench_engine_create(&be, r->chunk, r->depth, 1) != 0) {
                return -1;
            }
            if (wire_start(&wire, rate) != 0) {
                bench_engine_destroy(&be);
                return -1;
            }

            for (si = 0; si < ARRAY_LEN(sweep_sizes); ++si) {
                if (sweep_sizes[si] > mem.size) {
                    continue;
                }
                printf("  %-7s %5u %7s |", size_str(r->chunk, cbuf,
                                                   sizeof(cbuf)),
                       r->depth, size_str(sweep_sizes[si], sbuf,
                                          sizeof(sbuf)));
                for (d = 0; d < 2; ++d) {
                    if ((measure_ratio(&be, d, sweep_sizes[si],
                                       (opts.reps < 3) ? opts.reps : 3,
                                       &ref_s, &noop_s, &ratio) != 0) ||
                        (measure_engine(&be, dirs[d], sweep_sizes[si], &wire,
                                        &paced_s) != 0)) {
                        wire_stop(&wire);
                        bench_engine_destroy(&be);
                        return -1;
                    }
                    ideal_s      = sweep_sizes[si] / rate;
                    ideal_s      = (ideal_s > ref_s) ? ideal_s : ref_s;
                    eff          = ideal_s / paced_s;
                    r->min_ratio = (ratio < r->min_ratio) ? ratio :
                                                            r->min_ratio;
                    r->eff      += eff;
                    ++n;
                    printf(" %9s %5.1f %5.3f %5.3f |",
                           msg_chunks(sweep_sizes[si], r->chunk, kbuf,
                                      sizeof(kbuf)),
                           gbps(sweep_sizes[si], noop_s), ratio, eff);
                }
                printf("\n");
            }
            r->eff = (n > 0) ? (r->eff / n) : 0;
            printf("  %-7s %5u %7s | lowest ratio %5.3f, mean eff %5.3f%s\n",
                   size_str(r->chunk, cbuf, sizeof(cbuf)), r->depth, "all",
                   r->min_ratio, r->eff,
                   (r->min_ratio >= SWEEP_TARGET) ? "" : "  < target");
            fflush(stdout);

            wire_stop(&wire);
            bench_engine_destroy(&be);
        }
    }

    pick->chunk = 0;
    for (ci = 0; ci < ARRAY_LEN(sweep_chunks); ++ci) {
        for (di = 0; di < ARRAY_LEN(sweep_depths); ++di) {
            if (sweep_better(&res[ci][di], pick)) {
                *pick = res[ci][di];
            }
        }
    }

    printf("# %sPICKED: buffer %s depth %u (lowest ratio %.3f, mean eff "
           "%.3f)\n", label, size_str(pick->chunk, cbuf, sizeof(cbuf)),
           pick->depth, pick->min_ratio, pick->eff);
    return 0;
}


/*
 * Main table and stage breakdown for one configuration
 */

static int run_table(size_t chunk, unsigned depth, unsigned streams)
{
    char sbuf[32], cbuf[32], kbuf[80];
    dir_result_t x;
    bench_engine_t be;
    double ratio;
    wire_t wire;
    size_t size;
    int d;

    if (bench_engine_create(&be, chunk, depth, streams) != 0) {
        return -1;
    }
    if (wire_start(&wire, 0) != 0) {
        bench_engine_destroy(&be);
        return -1;
    }

    for (d = 0; d < 2; ++d) {
        printf("\n# %s%s: buffer %s, depth %u, %u stream(s); wire = "
               "LOOPBACK STAND-IN (no NIC)\n", label, dir_names[d],
               size_str(chunk, cbuf, sizeof(cbuf)), depth, streams);
        printf("# %9s %9s %12s | %12s %6s | %12s %6s | %10s\n", "size",
               "chunk", "pinned GB/s", "engine GB/s", "ratio", "engine GB/s",
               "ratio", "wire alone");
        printf("# %9s %9s %12s | %19s | %19s | %10s\n", "", "", "(one copy)",
               "no-op wire", "memcpy wire", "GB/s");

        for (size = opts.min_size; size <= opts.max_size; size *= 2) {
            if ((measure_ratio(&be, d, size, opts.reps, &x.ref_s, &x.noop_s,
                               &ratio) != 0) ||
                (measure_engine(&be, dirs[d], size, &wire, &x.memcpy_s) !=
                 0) ||
                (measure_wire_alone(&be, dirs[d], size, &wire, &x.wire_s) !=
                 0)) {
                goto err;
            }

            printf("  %9s %9s %12.1f | %12.1f %6.3f | %12.1f %6.3f | "
                   "%10.1f%s\n", size_str(size, sbuf, sizeof(sbuf)),
                   msg_chunks(size, chunk, kbuf, sizeof(kbuf)),
                   gbps(size, x.ref_s), gbps(size, x.noop_s), ratio,
                   gbps(size, x.memcpy_s), x.ref_s / x.memcpy_s,
                   gbps(size, x.wire_s),
                   ((size >= 4 * MIB) && (ratio < SWEEP_TARGET)) ?
                   "  < 0.95 target" : "");
            fflush(stdout);
        }
    }

    wire_stop(&wire);
    bench_engine_destroy(&be);
    return 0;

err:
    wire_stop(&wire);
    bench_engine_destroy(&be);
    return -1;
}

static int run_stages(size_t chunk, unsigned depth, unsigned streams)
{
    const size_t sizes[] = {4 * MIB, 8 * MIB, 16 * MIB, 64 * MIB};
    const double rates[] = {0, opts.paced_gbps * GB, opts.sweep_gbps * GB};
    double copy_s, wire_s, pipe_s, slowest;
    char sbuf[32], cbuf[32], wbuf[48];
    bench_engine_t be;
    unsigned si, ri;
    wire_t wire;
    int d;

    if (bench_engine_create(&be, chunk, depth, streams) != 0) {
        return -1;
    }

    printf("\n# %sPIPELINE STAGES of one chunked message: buffer %s, depth "
           "%u; wire = LOOPBACK STAND-IN (no NIC)\n", label,
           size_str(chunk, cbuf, sizeof(cbuf)), depth);
    printf("# copy alone = engine with the no-op wire; wire alone = the same "
           "chunks through the wire thread, no CUDA; paced wires move no "
           "data\n");
    printf("# %-4s %7s %-13s | %9s %9s | %9s %9s | %9s | %8s %8s\n", "dir",
           "size", "wire", "copy ms", "wire ms", "sum ms", "slowest",
           "pipelined", "/slowest", "/sum");

    for (ri = 0; ri < ARRAY_LEN(rates); ++ri) {
        if ((ri > 0) && (rates[ri] <= 0)) {
            continue;
        }
        if (wire_start(&wire, rates[ri]) != 0) {
            bench_engine_destroy(&be);
            return -1;
        }
        if (rates[ri] > 0) {
            snprintf(wbuf, sizeof(wbuf), "paced %.0fGB/s", rates[ri] / GB);
        } else {
            snprintf(wbuf, sizeof(wbuf), "memcpy");
        }

        for (d = 0; d < 2; ++d) {
            for (si = 0; si < ARRAY_LEN(sizes); ++si) {
                if (sizes[si] > mem.size) {
                    continue;
                }
                if ((measure_engine(&be, dirs[d], sizes[si], NULL, &copy_s) !=
                     0) ||
                    (measure_wire_alone(&be, dirs[d], sizes[si], &wire,
                                        &wire_s) != 0) ||
                    (measure_engine(&be, dirs[d], sizes[si], &wire,
                                    &pipe_s) != 0)) {
                    wire_stop(&wire);
                    bench_engine_destroy(&be);
                    return -1;
                }

                slowest = (copy_s > wire_s) ? copy_s : wire_s;
                printf("  %-4s %7s %-13s | %9.3f %9.3f | %9.3f %9.3f | "
                       "%9.3f | %8.3f %8.3f\n", (d == 0) ? "D2H" : "H2D",
                       size_str(sizes[si], sbuf, sizeof(sbuf)), wbuf,
                       copy_s * 1e3, wire_s * 1e3, (copy_s + wire_s) * 1e3,
                       slowest * 1e3, pipe_s * 1e3, pipe_s / slowest,
                       pipe_s / (copy_s + wire_s));
                fflush(stdout);
            }
        }
        wire_stop(&wire);
    }

    bench_engine_destroy(&be);
    return 0;
}

/* Streams: the chosen configuration with 1 and 2 streams per direction */
static int run_streams(size_t chunk, unsigned depth)
{
    const size_t size = (64 * MIB <= mem.size) ? 64 * MIB : mem.size;
    char sbuf[32];
    double sec[2][2], ref[2];
    bench_engine_t be;
    unsigned s;
    int d;

    for (s = 1; s <= 2; ++s) {
        if (bench_engine_create(&be, chunk, depth, s) != 0) {
            return -1;
        }
        for (d = 0; d < 2; ++d) {
            if ((ref_for(d, size, &ref[d]) != 0) ||
                (measure_engine(&be, dirs[d], size, NULL, &sec[s - 1][d]) !=
                 0)) {
                bench_engine_destroy(&be);
                return -1;
            }
        }
        bench_engine_destroy(&be);
    }

    printf("\n# %sSTREAMS, no-op wire, %s: D2H %.1f / %.1f GB/s, H2D %.1f / "
           "%.1f GB/s with 1 / 2 streams (pinned %.1f / %.1f)\n", label,
           size_str(size, sbuf, sizeof(sbuf)), gbps(size, sec[0][0]),
           gbps(size, sec[1][0]), gbps(size, sec[0][1]),
           gbps(size, sec[1][1]), gbps(size, ref[0]), gbps(size, ref[1]));
    return 0;
}

/*
 * Probe (-P): raw copy pipelines without the engine, to see where a chunked
 * message loses time against one copy: the copy engine's cost per copy
 * (back-to-back copies, one event at the end), the cost of an event per copy
 * with the host waiting for it before reusing a slot (what the engine does),
 * and whether more streams hide either
 */

#define PROBE_MAX_STREAMS  4
#define PROBE_MAX_INFLIGHT 16

typedef struct {
    uct_rc_gdr_stage_dir_t   dir;
    size_t                   size;
    size_t                   unit;      /* bytes per copy */
    unsigned                 inflight;  /* 0: all copies at once, no events
                                           between them */
    unsigned                 streams;
    uct_rc_gdr_cuda_stream_h stream[PROBE_MAX_STREAMS];
    uct_rc_gdr_cuda_event_h  event[PROBE_MAX_INFLIGHT];
} probe_t;

static ucs_status_t probe_copy(probe_t *p, size_t index, void *host)
{
    size_t offset, length;
    char *gpu;

    uct_rc_gdr_stage_chunk(p->size, p->unit, p->unit, index, &offset,
                           &length);
    if (p->dir == UCT_RC_GDR_STAGE_D2H_WIRE) {
        gpu = (char*)mem.gpu_src + offset;
        return uct_rc_gdr_cuda_memcpy_dtoh_async(host, gpu, length,
                                                 p->stream[index %
                                                           p->streams]);
    }

    gpu = (char*)mem.gpu_dst + offset;
    return uct_rc_gdr_cuda_memcpy_htod_async(gpu, host, length,
                                             p->stream[index % p->streams]);
}

static int probe_run(void *arg)
{
    probe_t *p = arg;
    size_t n   = uct_rc_gdr_stage_num_chunks(p->size, p->unit, p->unit);
    size_t issued = 0, done = 0, offset, length;
    ucs_status_t status;
    unsigned s;

    if (p->inflight == 0) {
        for (issued = 0; issued < n; ++issued) {
            uct_rc_gdr_stage_chunk(p->size, p->unit, p->unit, issued,
                                   &offset, &length);
            if (probe_copy(p, issued, (char*)mem.pinned + offset) != UCS_OK) {
                return -1;
            }
        }
        for (s = 0; s < p->streams; ++s) {
            if (uct_rc_gdr_cuda_stream_synchronize(p->stream[s]) != UCS_OK) {
                return -1;
            }
        }
        return 0;
    }

    while (done < n) {
        while ((issued < n) && ((issued - done) < p->inflight)) {
            if ((probe_copy(p, issued, (char*)mem.pinned +
                            ((issued % p->inflight) * p->unit)) != UCS_OK) ||
                (uct_rc_gdr_cuda_event_record(
                        p->event[issued % p->inflight],
                        p->stream[issued % p->streams]) != UCS_OK)) {
                return -1;
            }
            ++issued;
        }

        status = uct_rc_gdr_cuda_event_query(p->event[done % p->inflight]);
        if (status == UCS_OK) {
            ++done;
        } else if (status != UCS_INPROGRESS) {
            return -1;
        }
    }
    return 0;
}

/* Host time of one driver call, in ns */
static void probe_call_costs(void)
{
    const unsigned iters = 2000;
    uct_rc_gdr_cuda_stream_h stream;
    uct_rc_gdr_cuda_event_h event;
    uct_rc_gdr_cuda_ctx_h ctx;
    double t0, t_copy, t_record, t_query, t_ctx;
    unsigned i;

    if ((uct_rc_gdr_cuda_stream_create(&stream) != UCS_OK) ||
        (uct_rc_gdr_cuda_event_create(&event) != UCS_OK)) {
        return;
    }

    t0 = now_sec();
    for (i = 0; i < iters; ++i) {
        uct_rc_gdr_cuda_memcpy_htod_async(mem.gpu_dst, mem.pinned, 4 * KIB,
                                          stream);
    }
    t_copy = now_sec() - t0;
    uct_rc_gdr_cuda_stream_synchronize(stream);

    t0 = now_sec();
    for (i = 0; i < iters; ++i) {
        uct_rc_gdr_cuda_event_record(event, stream);
    }
    t_record = now_sec() - t0;
    uct_rc_gdr_cuda_stream_synchronize(stream);

    t0 = now_sec();
    for (i = 0; i < iters; ++i) {
        uct_rc_gdr_cuda_event_query(event);
    }
    t_query = now_sec() - t0;

    t0 = now_sec();
    for (i = 0; i < iters; ++i) {
        uct_rc_gdr_cuda_ctx_get_current(&ctx);
    }
    t_ctx = now_sec() - t0;

    printf("# %sPROBE host time per call: async copy (4 KiB) %.0f ns, event "
           "record %.0f ns, event query (complete) %.0f ns, context get "
           "%.0f ns\n", label, t_copy / iters * 1e9, t_record / iters * 1e9,
           t_query / iters * 1e9, t_ctx / iters * 1e9);

    uct_rc_gdr_cuda_event_destroy(event);
    uct_rc_gdr_cuda_stream_destroy(stream);
}

static int run_probe(void)
{
    static const size_t units[]     = {256 * KIB, 1 * MIB, 2 * MIB, 4 * MIB};
    static const size_t sizes[]     = {4 * MIB, 64 * MIB};
    static const unsigned modes[][2] = { /* inflight, streams */
        {0, 1}, {2, 1}, {4, 1}, {8, 1}, {2, 2}, {4, 2}, {4, 4}, {8, 4}
    };
    double ref[2][ARRAY_LEN(sizes)], sec;
    char ubuf[32], sbuf[32];
    probe_t p = {0};
    size_t ui, si, mi;
    int d, failed = 0;
    unsigned i;

    probe_call_costs();

    for (i = 0; i < PROBE_MAX_STREAMS; ++i) {
        if (uct_rc_gdr_cuda_stream_create(&p.stream[i]) != UCS_OK) {
            return -1;
        }
    }
    for (i = 0; i < PROBE_MAX_INFLIGHT; ++i) {
        if (uct_rc_gdr_cuda_event_create(&p.event[i]) != UCS_OK) {
            return -1;
        }
    }

    printf("\n# %sPROBE: raw copy pipelines (no engine), GB/s and ratio to "
           "one pinned copy of the message\n", label);
    printf("# inflight 0 = every copy queued at once, one wait at the end; "
           "n = n copies in flight, an event after each, the host waits for "
           "the oldest before the next (engine-like); copy k on stream k %% "
           "streams\n");
    printf("# %-8s %8s %7s |", "unit", "inflight", "streams");
    for (d = 0; d < 2; ++d) {
        for (si = 0; si < ARRAY_LEN(sizes); ++si) {
            printf(" %s %-6s       |", (d == 0) ? "D2H" : "H2D",
                   size_str(sizes[si], sbuf, sizeof(sbuf)));
        }
    }
    printf("\n");

    for (d = 0; d < 2; ++d) {
        for (si = 0; si < ARRAY_LEN(sizes); ++si) {
            if (measure_ref(dirs[d], sizes[si], &ref[d][si]) != 0) {
                return -1;
            }
        }
    }
    printf("  %-8s %8s %7s |", "pinned", "-", "-");
    for (d = 0; d < 2; ++d) {
        for (si = 0; si < ARRAY_LEN(sizes); ++si) {
            printf(" %6.1f %6s     |", gbps(sizes[si], ref[d][si]), "");
        }
    }
    printf("\n");

    for (ui = 0; ui < ARRAY_LEN(units); ++ui) {
        for (mi = 0; mi < ARRAY_LEN(modes); ++mi) {
            p.unit     = units[ui];
            p.inflight = modes[mi][0];
            p.streams  = modes[mi][1];
            printf("  %-8s %8u %7u |", size_str(p.unit, ubuf, sizeof(ubuf)),
                   p.inflight, p.streams);
            for (d = 0; d < 2; ++d) {
                for (si = 0; si < ARRAY_LEN(sizes); ++si) {
                    p.dir  = dirs[d];
                    p.size = sizes[si];
                    sec    = measure(probe_run, &p, &failed);
                    if (failed) {
                        BENCH_ERR("probe copy failed\n");
                        return -1;
                    }
                    printf(" %6.1f %5.3f     |", gbps(p.size, sec),
                           ref[d][si] / sec);
                }
            }
            printf("\n");
            fflush(stdout);
        }
    }

    printf("  %-8s %8s %7s |", "pinned", "again", "-");
    for (d = 0; d < 2; ++d) {
        for (si = 0; si < ARRAY_LEN(sizes); ++si) {
            if (measure_ref(dirs[d], sizes[si], &sec) != 0) {
                return -1;
            }
            printf(" %6.1f %6s     |", gbps(sizes[si], sec), "");
        }
    }
    printf("\n");

    for (i = 0; i < PROBE_MAX_INFLIGHT; ++i) {
        uct_rc_gdr_cuda_event_destroy(p.event[i]);
    }
    for (i = 0; i < PROBE_MAX_STREAMS; ++i) {
        uct_rc_gdr_cuda_stream_destroy(p.stream[i]);
    }
    return 0;
}

/* GPU -> engine -> memcpy wire -> host -> memcpy wire -> engine -> GPU */
static int run_verify(size_t chunk, unsigned depth, size_t size)
{
    unsigned char *expect = NULL, *got = mem.pinned;
    bench_engine_t be;
    bench_xfer_t bx = {0};
    wire_t wire;
    size_t i;
    int ret = -1;

    if (size > mem.size) {
        size = mem.size;
    }

    expect = malloc(size);
    if (expect == NULL) {
        return -1;
    }
    for (i = 0; i < size; ++i) {
        expect[i] = (unsigned char)(i * 7 + (i >> 9) + 3);
    }

    if ((bench_engine_create(&be, chunk, depth, 1) != 0)) {
        goto out_free;
    }
    if (wire_start(&wire, 0) != 0) {
        goto out_engine;
    }

    memset(mem.remote, 0, size + 1);
    if ((uct_rc_gdr_cuda_memcpy_htod(mem.gpu_src, expect, size) != UCS_OK) ||
        (uct_rc_gdr_cuda_memcpy_htod(mem.gpu_dst, mem.remote, size) !=
         UCS_OK)) {
        goto out_wire;
    }

    bx.be     = &be;
    bx.wire   = &wire;
    bx.remote = mem.remote;
    bx.size   = size;
    bx.dir    = UCT_RC_GDR_STAGE_D2H_WIRE;
    bx.gpu    = mem.gpu_src;
    if (bench_xfer_run(&bx) != 0) {
        goto out_wire;
    }
    bx.dir = UCT_RC_GDR_STAGE_WIRE_H2D;
    bx.gpu = mem.gpu_dst;
    if (bench_xfer_run(&bx) != 0) {
        goto out_wire;
    }

    if (uct_rc_gdr_cuda_memcpy_dtoh(got, mem.gpu_dst, size) != UCS_OK) {
        goto out_wire;
    }

    if ((memcmp(mem.remote, expect, size) != 0) ||
        (memcmp(got, expect, size) != 0) || (mem.remote[size] != 0)) {
        printf("# %sVERIFY: round trip of %zu bytes (buffer %zu, depth %u): "
               "DATA DIFFERS\n", label, size, chunk, depth);
    } else {
        printf("# %sVERIFY: round trip of %zu bytes GPU->staging->wire->host"
               "->wire->staging->GPU (buffer %zu, depth %u): byte-exact\n",
               label, size, chunk, depth);
        ret = 0;
    }

out_wire:
    wire_stop(&wire);
out_engine:
    bench_engine_destroy(&be);
out_free:
    free(expect);
    return ret;
}


/*
 * Setup
 */

static int driver_is_emulation(void)
{
    uct_rc_gdr_cuda_driver_info_t info;
    void *handle;
    int found;

    if (uct_rc_gdr_cuda_driver_info(&info) != UCS_OK) {
        return 0;
    }

    handle = dlopen(info.library, RTLD_LAZY | RTLD_NOLOAD);
    if (handle == NULL) {
        return 0;
    }
    found = (dlsym(handle, "rc_gdr_fake_cuda_control") != NULL);
    dlclose(handle);
    return found;
}

/* The build's emulated driver: ../../test/mocks/libcuda.so.1 from this binary */
static const char *default_emulated_lib(void)
{
    static char path[PATH_MAX];
    ssize_t len;
    char *slash;

    len = readlink("/proc/self/exe", path, sizeof(path) - 64);
    if (len <= 0) {
        return "libcuda.so.1";
    }
    path[len] = '\0';
    slash     = strrchr(path, '/');
    if (slash != NULL) {
        *slash = '\0';
    }
    strcat(path, "/../../test/mocks/libcuda.so.1");
    return path;
}

static int parse_size(const char *str, size_t *size_p)
{
    char *end;
    double value = strtod(str, &end);

    switch (*end) {
    case 'k': case 'K': value *= KIB; ++end; break;
    case 'm': case 'M': value *= MIB; ++end; break;
    case 'g': case 'G': value *= 1024.0 * MIB; ++end; break;
    default: break;
    }
    if ((*end != '\0') || (value < 1)) {
        return -1;
    }
    *size_p = (size_t)value;
    return 0;
}

static void usage(void)
{
    printf("Usage: stage_bench [options]\n"
           "  -s MIN      smallest message (64k)\n"
           "  -S MAX      largest message (64m); sizes double from MIN\n"
           "  -c BUFFER   buffer size (the largest chunk) for the tables "
           "(default: the sweep's pick)\n"
           "  -d DEPTH    depth for the tables (default: the sweep's pick)\n"
           "  -n STREAMS  CUDA streams per direction for the tables (1)\n"
           "  -w GBPS     line rate of the first paced wire of the stage "
           "table (25: HDR; 0: none)\n"
           "  -m GBPS     line rate of the second, and of the sweep's, which "
           "picks the defaults (50: NDR)\n"
           "  -t MS       time per measurement (25)\n"
           "  -r REPS     pinned copy / engine pairs behind each ratio, "
           "medians (5; the sweep takes at most 3)\n"
           "  -D ORDINAL  GPU (0)\n"
           "  -N          no sweep (then -c/-d or the compiled-in defaults)\n"
           "  -P          probe only: raw copy pipelines without the engine "
           "(copy size x copies in flight x streams) and driver call costs\n"
           "  -q          quick: -t 5, sizes 64k..16m\n"
           "  --emulated[=LIB]  use the test emulation of the driver (default "
           "../../test/mocks/libcuda.so.1 from this binary); numbers are then "
           "memcpy speeds, labelled EMULATED\n");
}

int main(int argc, char **argv)
{
    static const struct option long_opts[] = {
        {"emulated", optional_argument, NULL, 'E'},
        {"help",     no_argument,       NULL, 'h'},
        {NULL, 0, NULL, 0}
    };
    uct_rc_gdr_cuda_driver_info_t info;
    uct_rc_gdr_cuda_dev_attr_t attr;
    uct_rc_gdr_cuda_ctx_h ctx;
    sweep_pick_t pick = {0};
    char cbuf[32], sbuf[32], s2buf[32];
    int c, count = 0, ret = 0;
    size_t chunk;
    unsigned depth;

    while ((c = getopt_long(argc, argv, "s:S:c:d:n:w:m:t:r:D:NPqh", long_opts,
                            NULL)) != -1) {
        switch (c) {
        case 's':
            if (parse_size(optarg, &opts.min_size) != 0) goto bad;
            break;
        case 'S':
            if (parse_size(optarg, &opts.max_size) != 0) goto bad;
            break;
        case 'c':
            if (parse_size(optarg, &opts.chunk) != 0) goto bad;
            break;
        case 'd':
            opts.depth = atoi(optarg);
            if ((opts.depth < 1) ||
                (opts.depth > UCT_RC_GDR_STAGE_DEPTH_MAX)) goto bad;
            break;
        case 'n':
            opts.streams = atoi(optarg);
            if ((opts.streams < 1) ||
                (opts.streams > UCT_RC_GDR_STAGE_STREAMS_MAX)) goto bad;
            break;
        case 'w':
            opts.paced_gbps = atof(optarg);
            break;
        case 'm':
            opts.sweep_gbps = atof(optarg);
            if (opts.sweep_gbps <= 0) goto bad;
            break;
        case 't':
            opts.target_s = atof(optarg) / 1e3;
            break;
        case 'r':
            opts.reps = atoi(optarg);
            if ((opts.reps < 1) || (opts.reps > MAX_REPS)) goto bad;
            break;
        case 'D':
            opts.device = atoi(optarg);
            break;
        case 'N':
            opts.sweep = 0;
            break;
        case 'P':
            opts.probe = 1;
            break;
        case 'q':
            opts.target_s = 0.005;
            opts.max_size = 16 * MIB;
            break;
        case 'E':
            opts.emulate      = 1;
            opts.emulated_lib = optarg;
            break;
        case 'h':
            usage();
            return 0;
        default:
            goto bad;
        }
    }
    if ((optind != argc) || (opts.min_size > opts.max_size)) {
        goto bad;
    }

    if (opts.emulate) {
        setenv(UCT_RC_GDR_CUDA_LIBRARY_ENV,
               (opts.emulated_lib != NULL) ? opts.emulated_lib :
                                             default_emulated_lib(), 1);
    }

    if ((uct_rc_gdr_cuda_init() != UCS_OK) ||
        (uct_rc_gdr_cuda_device_count(&count) != UCS_OK) || (count == 0)) {
        printf("stage_bench: no usable CUDA GPU here (driver library %s): "
               "nothing measured%s\n", uct_rc_gdr_cuda_library_name(),
               opts.emulate ? "" : " (--emulated runs against the test "
                                   "emulation of the driver)");
        return 0;
    }

    if (driver_is_emulation()) {
        label = "EMULATED ";
    } else if (opts.emulate) {
        BENCH_ERR("--emulated given, but %s is not the test emulation\n",
                  uct_rc_gdr_cuda_library_name());
        return 2;
    }

    if (opts.device >= count) {
        BENCH_ERR("no GPU %d (%d found)\n", opts.device, count);
        return 2;
    }
    if (uct_rc_gdr_cuda_ctx_activate(opts.device, &ctx) != UCS_OK) {
        BENCH_ERR("cannot activate GPU %d\n", opts.device);
        return 2;
    }

    uct_rc_gdr_cuda_driver_info(&info);
    memset(&attr, 0, sizeof(attr));
    uct_rc_gdr_cuda_device_attr_query(opts.device, &attr);

    printf("# stage_bench: rc_gdr bounce-lane staging engine vs pinned "
           "cuMemcpy, one message at a time\n");
    if (*label != '\0') {
        printf("# EMULATED: the driver is rc_gdr's test emulation (%s): "
               "\"GPU\" memory is host memory and every copy is a memcpy; "
               "these numbers say nothing about a GPU\n", info.library);
    }
    printf("# %sGPU %d: %s, pci %s, cc %d.%d; driver %s version %d\n", label,
           opts.device, attr.name, attr.pci_bus_id, attr.cc_major,
           attr.cc_minor, info.library, info.driver_version);
    printf("# WIRE: LOOPBACK STAND-IN, NO NIC. no-op: post() completes at "
           "once (pure copy pipeline); memcpy: one host thread memcpy()s "
           "each chunk staging<->host buffer, completions come back "
           "asynchronously; paced: a chunk takes length / line rate (%.0f "
           "and %.0f GB/s), no data moved\n", opts.paced_gbps,
           opts.sweep_gbps);
    printf("# %ssizes %s .. %s, %.0f ms per measurement (after 2 warm-up "
           "messages); engine/pinned ratios and their GB/s: medians of %u "
           "pairs measured in turn (the sweep: of %u); GB/s = 1e9 bytes/s; "
           "compiled-in defaults: buffer %s, depth %u, pool %u, streams "
           "%u\n", label,
           size_str(opts.min_size, sbuf, sizeof(sbuf)),
           size_str(opts.max_size, s2buf, sizeof(s2buf)), opts.target_s * 1e3,
           opts.reps, (opts.reps < 3) ? opts.reps : 3,
           size_str(UCT_RC_GDR_STAGE_CHUNK_SIZE_DEFAULT, cbuf, sizeof(cbuf)),
           UCT_RC_GDR_STAGE_DEPTH_DEFAULT, UCT_RC_GDR_STAGE_POOL_SIZE_DEFAULT,
           UCT_RC_GDR_STAGE_STREAMS_DEFAULT);
    fflush(stdout);

    if (mem_alloc((opts.max_size > 64 * MIB) ? opts.max_size : 64 * MIB) !=
        0) {
        return 2;
    }

    if (opts.probe) {
        return (run_probe() == 0) ? 0 : 1;
    }

    pick.chunk = UCT_RC_GDR_STAGE_CHUNK_SIZE_DEFAULT;
    pick.depth = UCT_RC_GDR_STAGE_DEPTH_DEFAULT;
    if (opts.sweep && (run_sweep(&pick) != 0)) {
        return 1;
    }

    chunk = (opts.chunk != 0) ? opts.chunk : pick.chunk;
    depth = (opts.depth != 0) ? opts.depth : pick.depth;
    printf("\n# %sCHOSEN for the tables: buffer %s, depth %u, streams %u%s\n",
           label, size_str(chunk, cbuf, sizeof(cbuf)), depth, opts.streams,
           opts.sweep ? " (from the sweep unless -c/-d)" :
                        " (no sweep: options or compiled-in defaults)");
    fflush(stdout);

    if ((run_table(chunk, depth, opts.streams) != 0) ||
        (run_stages(chunk, depth, opts.streams) != 0) ||
        (run_streams(chunk, depth) != 0)) {
        return 1;
    }

    printf("\n");
    if ((run_verify(chunk, depth, 64 * MIB - 12345) != 0) ||
        (run_verify(chunk, 1, 3 * chunk + 1) != 0)) {
        ret = 1;
    }

    return ret;

bad:
    usage();
    return 2;
}
