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
 *   paced   the memcpy wire held to a line rate (default 25 GB/s, HDR), so
 *           that the wire stage has a known, NIC-like cost.
 *
 * What it prints, for messages of 64 KiB .. 64 MiB (both directions):
 *   - pinned cuMemcpyDtoH / cuMemcpyHtoD GB/s (one synchronous copy of the
 *     whole message: the reference);
 *   - the engine's GB/s with the no-op and the memcpy wire, one message at
 *     a time, start to completion callback, and the ratio to pinned;
 *   - for chunked messages: each stage alone, their sum and the pipelined
 *     total (pipelined should be close to the slowest stage, not the sum);
 *   - a sweep of chunk sizes (256 KiB .. 4 MiB) and depths (2 .. 8), and
 *     the pair it picks as defaults;
 *   - a byte-exact round trip through the engine.
 *
 * Without a usable GPU it says so and exits 0. --emulated runs it against
 * the test emulation of the driver (test/fake_cuda): every line is then
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

#define BENCH_ERR(...) fprintf(stderr, "stage_bench: " __VA_ARGS__)

static const size_t   sweep_chunks[] = {256 * KIB, 512 * KIB, 1 * MIB,
                                        2 * MIB, 4 * MIB};
static const unsigned sweep_depths[] = {2, 4, 8};
static const size_t   sweep_sizes[]  = {4 * MIB, 64 * MIB};
#define ARRAY_LEN(_a) (sizeof(_a) / sizeof((_a)[0]))


static struct {
    size_t     min_size;
    size_t     max_size;
    size_t     chunk;       /* 0: from the sweep */
    unsigned   depth;       /* 0: from the sweep */
    unsigned   streams;
    int        sweep;
    double     target_s;    /* time per measurement */
    double     paced_gbps;
    double     model_gbps;  /* wire rate of the sweep's model */
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
    .paced_gbps  = 25.0,
    .model_gbps  = 50.0,
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
    double      rate;        /* bytes/s, 0: as fast as memcpy */
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

        memcpy(job.dst, job.src, job.len);

        if (wire->rate > 0) {
            while (now_sec() < next_free) {
                cpu_relax();
            }
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
    size_t                 chunk;
    unsigned               depth;
    uct_rc_gdr_stage_buf_t *bufs[UCT_RC_GDR_STAGE_DEPTH_MAX];
} wire_alone_t;

static int wire_alone_run(void *arg)
{
    wire_alone_t *wa = arg;
    unsigned n       = uct_rc_gdr_stage_num_chunks(wa->size, wa->chunk);
    unsigned issued = 0, completed = 0, idle = 0;
    size_t offset, length;
    wire_job_t job;
    void *staging;

    while (completed < n) {
        while ((issued < n) && ((issued - completed) < wa->depth)) {
            uct_rc_gdr_stage_chunk(wa->size, wa->chunk, issued, &offset,
                                   &length);
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
    wa.chunk  = be->chunk;
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


/*
 * Sweep: chunk x depth at 4 MiB and 64 MiB; pick the defaults
 */

typedef struct {
    size_t   chunk;
    unsigned depth;
    double   score;
} sweep_pick_t;

/*
 * The pipelined time of a message over a wire of line rate `rate` (bytes/s),
 * from the measured copy stage: n chunks, each stage per chunk as measured
 * (copy) or as the line rate says (wire); the slower one paces the pipe,
 * the faster one shows once (fill or drain).
 */
static double model_time(const dir_result_t *x, size_t size, size_t chunk,
                         double rate)
{
    size_t n         = uct_rc_gdr_stage_num_chunks(size, chunk);
    double copy_one  = x->noop_s / n;
    double wire_one  = (double)chunk / rate;

    return (n * ((copy_one > wire_one) ? copy_one : wire_one)) +
           ((copy_one > wire_one) ? wire_one : copy_one);
}

static int run_sweep(sweep_pick_t *pick)
{
    const double rate = opts.model_gbps * GB;
    double scores[ARRAY_LEN(sweep_chunks)][ARRAY_LEN(sweep_depths)];
    dir_result_t r[2][ARRAY_LEN(sweep_sizes)];
    double model_s[2], score, best = -1, ratio;
    char sbuf[32], cbuf[32];
    size_t ci, di, si;
    bench_engine_t be;
    wire_t wire;
    int d, n;

    printf("\n# %sSWEEP: chunk size x depth (1 stream), engine with the "
           "no-op wire (copy pipeline) and the memcpy wire (loopback "
           "stand-in, no NIC)\n", label);
    printf("# noop = GB/s with the no-op wire, ratio = noop / pinned; "
           "memcpy = GB/s with the memcpy wire, eff = slowest stage alone / "
           "pipelined;\n# model = GB/s of the measured copy stage pipelined "
           "with a %.0f GB/s wire (-m), computed, not measured\n",
           opts.model_gbps);
    printf("# score = mean over D2H/H2D and %zu MiB/%zu MiB of model / "
           "pinned: the pick is the best score, or one within 1%% with less "
           "pinned memory per transfer\n", sweep_sizes[0] / MIB,
           sweep_sizes[1] / MIB);
    printf("# %-8s %5s %8s | %-34s | %-34s | %6s\n", "chunk", "depth",
           "size", "D2H noop ratio memcpy  eff model",
           "H2D noop ratio memcpy  eff model", "score");

    for (ci = 0; ci < ARRAY_LEN(sweep_chunks); ++ci) {
        for (di = 0; di < ARRAY_LEN(sweep_depths); ++di) {
            if (bench_engine_create(&be, sweep_chunks[ci], sweep_depths[di],
                                    1) != 0) {
                return -1;
            }
            if (wire_start(&wire, 0) != 0) {
                bench_engine_destroy(&be);
                return -1;
            }

            score = 0;
            n     = 0;
            for (si = 0; si < ARRAY_LEN(sweep_sizes); ++si) {
                if (sweep_sizes[si] > mem.size) {
                    continue;
                }
                for (d = 0; d < 2; ++d) {
                    dir_result_t *x = &r[d][si];

                    if ((ref_for(d, sweep_sizes[si], &x->ref_s) != 0) ||
                        (measure_engine(&be, dirs[d], sweep_sizes[si], NULL,
                                        &x->noop_s) != 0) ||
                        (measure_engine(&be, dirs[d], sweep_sizes[si], &wire,
                                        &x->memcpy_s) != 0) ||
                        (measure_wire_alone(&be, dirs[d], sweep_sizes[si],
                                            &wire, &x->wire_s) != 0)) {
                        wire_stop(&wire);
                        bench_engine_destroy(&be);
                        return -1;
                    }
                    model_s[d] = model_time(x, sweep_sizes[si],
                                            sweep_chunks[ci], rate);
                    ratio      = x->ref_s / model_s[d];
                    score     += (ratio > 1) ? 1 : ratio;
                    ++n;
                }

                printf("  %-8s %5u %8s |", size_str(sweep_chunks[ci], cbuf,
                                                   sizeof(cbuf)),
                       sweep_depths[di],
                       size_str(sweep_sizes[si], sbuf, sizeof(sbuf)));
                for (d = 0; d < 2; ++d) {
                    const dir_result_t *x = &r[d][si];

                    printf(" %8.1f %5.3f %6.1f %4.2f %5.1f |",
                           gbps(sweep_sizes[si], x->noop_s),
                           x->ref_s / x->noop_s,
                           gbps(sweep_sizes[si], x->memcpy_s),
                           ((x->noop_s > x->wire_s) ? x->noop_s : x->wire_s) /
                           x->memcpy_s, gbps(sweep_sizes[si], model_s[d]));
                }
                printf("\n");
            }
            score = (n > 0) ? (score / n) : 0;
            printf("  %-8s %5u %8s | %34s | %34s | %6.3f\n",
                   size_str(sweep_chunks[ci], cbuf, sizeof(cbuf)),
                   sweep_depths[di], "", "", "", score);
            fflush(stdout);

            scores[ci][di] = score;
            wire_stop(&wire);
            bench_engine_destroy(&be);
        }
    }

    /* the best, or one as good (within 1%) with less pinned memory per
       transfer */
    for (ci = 0; ci < ARRAY_LEN(sweep_chunks); ++ci) {
        for (di = 0; di < ARRAY_LEN(sweep_depths); ++di) {
            best = (scores[ci][di] > best) ? scores[ci][di] : best;
        }
    }
    for (ci = 0; ci < ARRAY_LEN(sweep_chunks); ++ci) {
        for (di = 0; di < ARRAY_LEN(sweep_depths); ++di) {
            if ((scores[ci][di] < (best * 0.99)) ||
                ((pick->score > 0) &&
                 ((sweep_chunks[ci] * sweep_depths[di]) >
                  (pick->chunk * pick->depth))) ||
                ((pick->score > 0) &&
                 ((sweep_chunks[ci] * sweep_depths[di]) ==
                  (pick->chunk * pick->depth)) &&
                 (scores[ci][di] <= pick->score))) {
                continue;
            }
            pick->chunk = sweep_chunks[ci];
            pick->depth = sweep_depths[di];
            pick->score = scores[ci][di];
        }
    }

    printf("# %sPICKED: chunk %s depth %u (score %.3f; best %.3f; ties "
           "within 1%% go to less pinned memory per transfer)\n", label,
           size_str(pick->chunk, cbuf, sizeof(cbuf)), pick->depth,
           pick->score, best);
    return 0;
}


/*
 * Main table and stage breakdown for one configuration
 */

static int run_table(size_t chunk, unsigned depth, unsigned streams)
{
    char sbuf[32], cbuf[32];
    dir_result_t x;
    bench_engine_t be;
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
        printf("\n# %s%s: chunk %s, depth %u, %u stream(s); wire = LOOPBACK "
               "STAND-IN (no NIC)\n", label, dir_names[d],
               size_str(chunk, cbuf, sizeof(cbuf)), depth, streams);
        printf("# %9s %12s | %12s %6s | %12s %6s | %10s\n", "size",
               "pinned GB/s", "engine GB/s", "ratio", "engine GB/s", "ratio",
               "wire alone");
        printf("# %9s %12s | %19s | %19s | %10s\n", "", "(one copy)",
               "no-op wire", "memcpy wire", "GB/s");

        for (size = opts.min_size; size <= opts.max_size; size *= 2) {
            if ((ref_for(d, size, &x.ref_s) != 0) ||
                (measure_engine(&be, dirs[d], size, NULL, &x.noop_s) != 0) ||
                (measure_engine(&be, dirs[d], size, &wire, &x.memcpy_s) !=
                 0) ||
                (measure_wire_alone(&be, dirs[d], size, &wire, &x.wire_s) !=
                 0)) {
                goto err;
            }

            printf("  %9s %12.1f | %12.1f %6.3f | %12.1f %6.3f | %10.1f%s\n",
                   size_str(size, sbuf, sizeof(sbuf)), gbps(size, x.ref_s),
                   gbps(size, x.noop_s), x.ref_s / x.noop_s,
                   gbps(size, x.memcpy_s), x.ref_s / x.memcpy_s,
                   gbps(size, x.wire_s),
                   ((size >= 4 * MIB) && ((x.ref_s / x.noop_s) < 0.90)) ?
                   "  < 0.90 target" : "");
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
    const size_t sizes[] = {16 * MIB, 64 * MIB};
    const double rates[] = {0, opts.paced_gbps * GB};
    double copy_s, wire_s, pipe_s, slowest;
    char sbuf[32], cbuf[32], wbuf[48];
    bench_engine_t be;
    unsigned si, ri;
    wire_t wire;
    int d;

    if (bench_engine_create(&be, chunk, depth, streams) != 0) {
        return -1;
    }

    printf("\n# %sPIPELINE STAGES of one chunked message: chunk %s, depth %u; "
           "wire = LOOPBACK STAND-IN (no NIC)\n", label,
           size_str(chunk, cbuf, sizeof(cbuf)), depth);
    printf("# copy alone = engine with the no-op wire; wire alone = the same "
           "chunks through the wire thread, no CUDA\n");
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
            snprintf(wbuf, sizeof(wbuf), "paced %.0fGB/s", opts.paced_gbps);
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
        printf("# %sVERIFY: round trip of %zu bytes (chunk %zu, depth %u): "
               "DATA DIFFERS\n", label, size, chunk, depth);
    } else {
        printf("# %sVERIFY: round trip of %zu bytes GPU->staging->wire->host"
               "->wire->staging->GPU (chunk %zu, depth %u): byte-exact\n",
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

/* The build's emulated driver: ../fake_cuda/libcuda.so.1 from this binary */
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
    strcat(path, "/../fake_cuda/libcuda.so.1");
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
           "  -c CHUNK    chunk size for the tables (default: the sweep's "
           "pick)\n"
           "  -d DEPTH    depth for the tables (default: the sweep's pick)\n"
           "  -n STREAMS  CUDA streams per direction for the tables (1)\n"
           "  -w GBPS     line rate of the paced wire (25; 0: none)\n"
           "  -m GBPS     wire rate of the sweep's pipeline model, which "
           "picks the defaults (50: NDR)\n"
           "  -t MS       time per measurement (25)\n"
           "  -D ORDINAL  GPU (0)\n"
           "  -N          no sweep (then -c/-d or the compiled-in defaults)\n"
           "  -q          quick: -t 5, sizes 64k..16m\n"
           "  --emulated[=LIB]  use the test emulation of the driver (default "
           "../fake_cuda/libcuda.so.1 beside this binary); numbers are then "
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

    while ((c = getopt_long(argc, argv, "s:S:c:d:n:w:m:t:D:Nqh", long_opts,
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
            opts.model_gbps = atof(optarg);
            if (opts.model_gbps <= 0) goto bad;
            break;
        case 't':
            opts.target_s = atof(optarg) / 1e3;
            break;
        case 'D':
            opts.device = atoi(optarg);
            break;
        case 'N':
            opts.sweep = 0;
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
           "asynchronously; paced: the memcpy wire held to %.0f GB/s\n",
           opts.paced_gbps);
    printf("# %ssizes %s .. %s, %.0f ms per measurement (after 2 warm-up "
           "messages); GB/s = 1e9 bytes/s; compiled-in defaults: chunk %s, "
           "depth %u, pool %u, streams %u\n", label,
           size_str(opts.min_size, sbuf, sizeof(sbuf)),
           size_str(opts.max_size, s2buf, sizeof(s2buf)), opts.target_s * 1e3,
           size_str(UCT_RC_GDR_STAGE_CHUNK_SIZE_DEFAULT, cbuf, sizeof(cbuf)),
           UCT_RC_GDR_STAGE_DEPTH_DEFAULT, UCT_RC_GDR_STAGE_POOL_SIZE_DEFAULT,
           UCT_RC_GDR_STAGE_STREAMS_DEFAULT);
    fflush(stdout);

    if (mem_alloc((opts.max_size > 64 * MIB) ? opts.max_size : 64 * MIB) !=
        0) {
        return 2;
    }

    pick.chunk = UCT_RC_GDR_STAGE_CHUNK_SIZE_DEFAULT;
    pick.depth = UCT_RC_GDR_STAGE_DEPTH_DEFAULT;
    if (opts.sweep && (run_sweep(&pick) != 0)) {
        return 1;
    }

    chunk = (opts.chunk != 0) ? opts.chunk : pick.chunk;
    depth = (opts.depth != 0) ? opts.depth : pick.depth;
    printf("\n# %sCHOSEN for the tables: chunk %s, depth %u, streams %u%s\n",
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
