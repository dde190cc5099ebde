/*
 * Registration cache hit cost: rc_gdr's cache beside UCX's ucs_rcache from
 * the libucs of the same process, in the same run.
 *
 * Both caches hold the same live one-page entries (each registered once and
 * held, as a user holding its registrations would) over real memory, with
 * registration operations that do nothing, so only the cache is measured.
 * A run times ITERS get+put pairs on entries taken in one fixed pseudo-random
 * order (the same for both) in thread CPU time; runs of the two alternate,
 * and the medians are printed with their ratio. One thread, pinned to one
 * CPU.
 *
 * Usage: rcache_bench [-n ENTRIES] [-i ITERS] [-r RUNS] [-c CPU] [-s]
 *                     [-o OFFSET]
 *   -s  sequential order instead of pseudo-random
 *   -o  every get asks for its page from OFFSET bytes in: rc_gdr's regions
 *       then never have every byte asked for, and each hit also updates the
 *       region's hull (a second cache line)
 *
 * See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <uct/ib_gdr/rc_gdr_rcache.h>

#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>
#include <ucs/sys/sys.h>

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>


/* ucs_rcache_get() takes an alignment from UCX 1.17; merge is called
 * unchecked from 1.18 (configure looks for both) */
#define BENCH_UCS_ALIGN_IN_PARAMS RC_GDR_UCX_HAVE_RCACHE_PARAMS_ALIGNMENT
#define BENCH_UCS_HAVE_MERGE      RC_GDR_UCX_HAVE_RCACHE_OPS_MERGE

#define BENCH_MAX_RUNS 101


typedef struct {
    size_t   entries;
    size_t   iters;
    unsigned runs;
    int      cpu;
    int      sequential;
    size_t   offset;     /* into each page, of every get */
    size_t   page;
    char     *mem;
    size_t   *order;
} bench_t;


/* The thread's CPU time: on a shared host, time spent descheduled is not
   the cache's (its caches cooled meanwhile are, which runs alternate for) */
static double bench_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x > y) - (x < y);
}

static double bench_median(double *values, unsigned count)
{
    qsort(values, count, sizeof(*values), bench_cmp_double);
    return (count % 2) ? values[count / 2] :
                         (values[count / 2 - 1] + values[count / 2]) / 2;
}

/* What every get of entry @a i asks for: its page from the offset on */
static void *bench_address(const bench_t *b, size_t i)
{
    return b->mem + i * b->page + b->offset;
}

static size_t bench_length(const bench_t *b)
{
    return b->page - b->offset;
}

static void bench_die(const char *what, ucs_status_t status)
{
    fprintf(stderr, "rcache_bench: %s: %s\n", what,
            ucs_status_string(status));
    exit(1);
}


/* rc_gdr's cache, registrations that do nothing */
static ucs_status_t bench_gdr_reg(void *arg, uct_rc_gdr_rcache_region_t *r)
{
    return UCS_OK;
}

static void bench_gdr_dereg(void *arg, uct_rc_gdr_rcache_region_t *r)
{
}

static const uct_rc_gdr_rcache_ops_t bench_gdr_ops = {
    .mem_reg   = bench_gdr_reg,
    .mem_dereg = bench_gdr_dereg
};

typedef struct {
    uct_rc_gdr_rcache_t        *rcache;
    uct_rc_gdr_rcache_handle_t *held;
} bench_gdr_t;

static void bench_gdr_init(bench_t *b, bench_gdr_t *g)
{
    const uct_rc_gdr_rcache_key_t key = {
        .mem_type = UCS_MEMORY_TYPE_HOST,
        .flags    = UCT_RC_GDR_RCACHE_GET_FLAG_SHARE |
                    UCT_RC_GDR_RCACHE_GET_FLAG_RETAIN
    };
    uct_rc_gdr_rcache_params_t params;
    ucs_status_t status;
    size_t i;

    memset(&params, 0, sizeof(params));
    params.page_size = b->page;
    params.priv_size = 24; /* what the md keeps per region */
    params.ops       = &bench_gdr_ops;
    params.name      = "bench";
    status = uct_rc_gdr_rcache_create(&params, &g->rcache);
    if (status != UCS_OK) {
        bench_die("uct_rc_gdr_rcache_create", status);
    }

    g->held = calloc(b->entries, sizeof(*g->held));
    for (i = 0; i < b->entries; ++i) {
        status = uct_rc_gdr_rcache_get(g->rcache, bench_address(b, i),
                                       bench_length(b), key, &g->held[i]);
        if (status != UCS_OK) {
            bench_die("uct_rc_gdr_rcache_get", status);
        }
    }
}

/*
 * Each run loop works on copies of the bench and of the cache pointer: the
 * compiler keeps them in registers instead of loading them again after every
 * call, which may write any memory it can reach. Both loops alike.
 */
static double bench_gdr_run(const bench_t *bench, const bench_gdr_t *gdr)
{
    const bench_t b                   = *bench;
    uct_rc_gdr_rcache_t *const rcache = gdr->rcache;
    const uct_rc_gdr_rcache_key_t key = {
        .mem_type = UCS_MEMORY_TYPE_HOST,
        .flags    = UCT_RC_GDR_RCACHE_GET_FLAG_SHARE |
                    UCT_RC_GDR_RCACHE_GET_FLAG_RETAIN
    };
    uct_rc_gdr_rcache_handle_t handle;
    double start;
    size_t i, k;

    start = bench_now_ns();
    for (i = 0, k = 0; i < b.iters; ++i) {
        if (uct_rc_gdr_rcache_get(rcache, bench_address(&b, b.order[k]),
                                  bench_length(&b), key, &handle) != UCS_OK) {
            bench_die("uct_rc_gdr_rcache_get", UCS_ERR_IO_ERROR);
        }
        uct_rc_gdr_rcache_put(rcache, handle);
        if (++k == b.entries) {
            k = 0;
        }
    }
    return (bench_now_ns() - start) / b.iters;
}

static void bench_gdr_cleanup(bench_t *b, bench_gdr_t *g)
{
    uct_rc_gdr_rcache_stats_t stats;
    size_t i;

    uct_rc_gdr_rcache_stats(g->rcache, &stats);
    printf("rc_gdr rcache: %lu entries, %lu registrations, %lu hits (%lu "
           "direct), %lu tree steps\n", stats.entries, stats.nic_regs,
           stats.hits, stats.fast_hits, stats.lookup_steps);
    for (i = 0; i < b->entries; ++i) {
        uct_rc_gdr_rcache_put(g->rcache, g->held[i]);
    }
    uct_rc_gdr_rcache_destroy(g->rcache);
    free(g->held);
}


/* UCX's ucs_rcache, registrations that do nothing */
static ucs_status_t bench_ucs_reg(void *context, ucs_rcache_t *rcache,
                                  void *arg, ucs_rcache_region_t *region,
                                  uint16_t flags)
{
    return UCS_OK;
}

static void bench_ucs_dereg(void *context, ucs_rcache_t *rcache,
                            ucs_rcache_region_t *region)
{
}

#if BENCH_UCS_HAVE_MERGE
static void bench_ucs_merge(void *context, ucs_rcache_t *rcache, void *arg,
                            ucs_rcache_region_t *region)
{
}
#endif

static void bench_ucs_dump(void *context, ucs_rcache_t *rcache,
                           ucs_rcache_region_t *region, char *buf, size_t max)
{
    buf[0] = '\0';
}

static const ucs_rcache_ops_t bench_ucs_ops = {
    .mem_reg     = bench_ucs_reg,
    .mem_dereg   = bench_ucs_dereg,
#if BENCH_UCS_HAVE_MERGE
    .merge       = bench_ucs_merge,
#endif
    .dump_region = bench_ucs_dump
};

typedef struct {
    ucs_rcache_t        *rcache;
    ucs_rcache_region_t **held;
} bench_ucs_t;

static ucs_status_t bench_ucs_get(const bench_t *b, const bench_ucs_t *u,
                                  void *address,
                                  ucs_rcache_region_t **region_p)
{
#if BENCH_UCS_ALIGN_IN_PARAMS
    return ucs_rcache_get(u->rcache, address, bench_length(b),
                          PROT_READ | PROT_WRITE, NULL, region_p);
#else
    return ucs_rcache_get(u->rcache, address, bench_length(b), b->page,
                          PROT_READ | PROT_WRITE, NULL, region_p);
#endif
}

static void bench_ucs_init(bench_t *b, bench_ucs_t *u)
{
    ucs_rcache_params_t params;
    ucs_status_t status;
    size_t i;

    /* As UCX's IB md sets it up: unmap events, no limits */
    memset(&params, 0, sizeof(params));
    params.region_struct_size = sizeof(ucs_rcache_region_t);
#if BENCH_UCS_ALIGN_IN_PARAMS
    params.alignment          = b->page;
    params.max_alignment      = b->page;
#endif
    params.ucm_events         = UCM_EVENT_VM_UNMAPPED;
    params.ucm_event_priority = 1000;
    params.ops                = &bench_ucs_ops;
    params.flags              = 0;
    params.max_regions        = (unsigned long)-1;
    params.max_size           = (size_t)-1;
    params.max_unreleased     = (size_t)-1;
    status = ucs_rcache_create(&params, "bench", NULL, &u->rcache);
    if (status != UCS_OK) {
        /* No memory events here (UCX_MEM_EVENTS=no): nothing to unmap */
        params.ucm_events = 0;
        status = ucs_rcache_create(&params, "bench", NULL, &u->rcache);
    }
    if (status != UCS_OK) {
        bench_die("ucs_rcache_create", status);
    }

    u->held = calloc(b->entries, sizeof(*u->held));
    for (i = 0; i < b->entries; ++i) {
        status = bench_ucs_get(b, u, bench_address(b, i), &u->held[i]);
        if (status != UCS_OK) {
            bench_die("ucs_rcache_get", status);
        }
    }
}

static double bench_ucs_run(const bench_t *bench, const bench_ucs_t *ucs)
{
    const bench_t b     = *bench;
    const bench_ucs_t u = *ucs;
    ucs_rcache_region_t *region;
    double start;
    size_t i, k;

    start = bench_now_ns();
    for (i = 0, k = 0; i < b.iters; ++i) {
        if (bench_ucs_get(&b, &u, bench_address(&b, b.order[k]), &region) !=
            UCS_OK) {
            bench_die("ucs_rcache_get", UCS_ERR_IO_ERROR);
        }
        ucs_rcache_region_put(u.rcache, region);
        if (++k == b.entries) {
            k = 0;
        }
    }
    return (bench_now_ns() - start) / b.iters;
}

static void bench_ucs_cleanup(bench_t *b, bench_ucs_t *u)
{
    size_t i;

    for (i = 0; i < b->entries; ++i) {
        ucs_rcache_region_put(u->rcache, u->held[i]);
    }
    ucs_rcache_destroy(u->rcache);
    free(u->held);
}


static void bench_usage(const char *prog)
{
    fprintf(stderr, "usage: %s [-n ENTRIES] [-i ITERS] [-r RUNS] [-c CPU] "
            "[-s] [-o OFFSET]\n", prog);
    exit(2);
}

int main(int argc, char **argv)
{
    double gdr_ns[BENCH_MAX_RUNS], ucs_ns[BENCH_MAX_RUNS];
    double gdr_median, ucs_median;
    bench_t b = {10000, 200000, 31, -1, 0};
    bench_gdr_t g;
    bench_ucs_t u;
    cpu_set_t cpus;
    uint64_t state;
    unsigned run;
    size_t i, j, t;
    int opt;

    while ((opt = getopt(argc, argv, "n:i:r:c:so:")) != -1) {
        switch (opt) {
        case 'n': b.entries    = strtoul(optarg, NULL, 0); break;
        case 'i': b.iters      = strtoul(optarg, NULL, 0); break;
        case 'r': b.runs       = strtoul(optarg, NULL, 0); break;
        case 'c': b.cpu        = atoi(optarg);             break;
        case 's': b.sequential = 1;                        break;
        case 'o': b.offset     = strtoul(optarg, NULL, 0); break;
        default:  bench_usage(argv[0]);
        }
    }
    if ((b.entries == 0) || (b.iters == 0) || (b.runs == 0) ||
        (b.runs > BENCH_MAX_RUNS)) {
        bench_usage(argv[0]);
    }

    /* One thread on one CPU: the one it runs on, unless told */
    if (b.cpu < 0) {
        b.cpu = sched_getcpu();
    }
    CPU_ZERO(&cpus);
    CPU_SET(b.cpu, &cpus);
    if (sched_setaffinity(0, sizeof(cpus), &cpus) != 0) {
        perror("rcache_bench: sched_setaffinity");
        return 1;
    }

    b.page = ucs_get_page_size();
    if (b.offset >= b.page) {
        bench_usage(argv[0]);
    }
    b.mem  = mmap(NULL, b.entries * b.page, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b.mem == MAP_FAILED) {
        perror("rcache_bench: mmap");
        return 1;
    }
    memset(b.mem, 1, b.entries * b.page);

    /* The same order for both: a fixed permutation (xorshift shuffle) */
    b.order = malloc(b.entries * sizeof(*b.order));
    for (i = 0; i < b.entries; ++i) {
        b.order[i] = i;
    }
    for (i = b.entries - 1, state = 88172645463325252ull;
         !b.sequential && (i > 0); --i) {
        state     ^= state << 13;
        state     ^= state >> 7;
        state     ^= state << 17;
        j          = state % (i + 1);
        t          = b.order[i];
        b.order[i] = b.order[j];
        b.order[j] = t;
    }

    bench_gdr_init(&b, &g);
    bench_ucs_init(&b, &u);

    /* Warm both, then alternate */
    bench_gdr_run(&b, &g);
    bench_ucs_run(&b, &u);
    for (run = 0; run < b.runs; ++run) {
        gdr_ns[run] = bench_gdr_run(&b, &g);
        ucs_ns[run] = bench_ucs_run(&b, &u);
    }

    printf("rcache_bench: %zu live one-page entries, %s order, gets of %zu "
           "bytes at offset %zu, %zu get+put per run, %u runs alternated, "
           "CPU %d, thread CPU time\n", b.entries,
           b.sequential ? "sequential" : "pseudo-random", bench_length(&b),
           b.offset, b.iters, b.runs, b.cpu);
    printf("runs (ns):");
    for (run = 0; run < b.runs; ++run) {
        printf(" %.1f/%.1f", gdr_ns[run], ucs_ns[run]);
    }
    printf("\n");

    gdr_median = bench_median(gdr_ns, b.runs);
    ucs_median = bench_median(ucs_ns, b.runs);
    bench_gdr_cleanup(&b, &g);
    bench_ucs_cleanup(&b, &u);

    printf("rc_gdr rcache:  median %.1f ns per get+put\n", gdr_median);
    printf("ucs_rcache:     median %.1f ns per get+put\n", ucs_median);
    printf("ratio rc_gdr / ucs_rcache: %.2f\n", gdr_median / ucs_median);
    munmap(b.mem, b.entries * b.page);
    free(b.order);
    return 0;
}
