/*
 * reg_sweep: the registration cache of one rc_gdr memory domain (one verbs
 * device) seen through GPU memory of one GPU, case by case:
 *
 *   cold       first registration of a range (released again each time)
 *   hit        the same range while a registration of it is held
 *   contained  an unaligned sub-range of a held registration
 *   partial    a range that overlaps a held registration and extends past it
 *   disjoint   another allocation
 *   realloc    an allocation freed while still registered, allocated again
 *              (the same address when the driver hands it back)
 *
 * For each case: the md counters before and after every registration (which
 * lane made it: DMA-BUF, peermem or bounce; or a cache hit), the expectation
 * (a new registration or a hit) checked on every repetition, and the time of
 * uct_md_mem_reg: median, P95 and coefficient of variation over N
 * repetitions. The capability gate's own line for the GPU (captured from the
 * md's log) is printed with it.
 *
 *   reg_sweep [--gpu N] [--size BYTES] [--iters N] [--json] DEVICE[:PORT]
 *
 * Needs the module in the process (. contrib/env.sh). Exit status: 0 when
 * every case holds (or SKIP: no CUDA driver, no GPU); 1 when a case fails;
 * 2 for bad usage or set-up; 3 when the memory domain does not open (e.g.
 * a lane forced by UCX_RC_GDR_* that the gate refuses: the reason is in
 * the output). With the project's stand-in driver every result is about an
 * EMULATED GPU, and the output says so on every line.
 */

#define _GNU_SOURCE

#include <uct/ib_gdr/rc_gdr_cuda.h>
#include "site_uct.h"

#include <ucs/config/global_opts.h>
#include <ucs/debug/log_def.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define REG_SWEEP_DEFAULT_SIZE  (4ul << 20)
#define REG_SWEEP_DEFAULT_ITERS 50
#define REG_SWEEP_MAX_GATE      8
#define REG_SWEEP_LINE_MAX      1024

#define REG_SWEEP_EXIT_FAILED   1
#define REG_SWEEP_EXIT_USAGE    2
#define REG_SWEEP_EXIT_MD_OPEN  3


typedef enum {
    REG_SWEEP_EXPECT_NEW,   /* a new registration, no hit */
    REG_SWEEP_EXPECT_HIT    /* a hit, no new registration */
} reg_sweep_expect_t;


/* What one case saw, summed over its repetitions */
typedef struct {
    const char         *name;
    const char         *what;
    reg_sweep_expect_t expect;
    unsigned           reps;
    unsigned           reg_failures;   /* uct_md_mem_reg did not return OK */
    unsigned           dereg_failures;
    unsigned           mismatches;     /* repetitions not as expected */
    char               first_mismatch[160];
    unsigned           same_address;   /* realloc: the address came back */
    uint64_t           free_invalidations; /* realloc: entries dropped by
                                              the free itself (CUDA free
                                              hooks) */
    uint64_t           dmabuf, peermem, bounce, host, hits, invalidations;
    double             *times;         /* seconds, one per repetition */
    double             first, median, p95, mean, cv;
    const char         *lane;
    const char         *verdict;
    char               note[256];
} reg_sweep_case_t;


typedef struct {
    const char             *device;    /* as given, maybe with ":port" */
    char                   md_name[64];
    int                    gpu;
    size_t                 size;
    unsigned               iters;
    int                    json;
    uct_component_h        component;
    uct_md_h               md;
    uct_rc_gdr_cuda_dev_attr_t gpu_attr;
    uct_rc_gdr_cuda_driver_info_t driver;
    int                    emulated;
    site_md_stats_t        md_stats;   /* after md open */
    const char             *holder_lane;
} reg_sweep_t;


/* The gate's lines and errors logged while the md opens */
static struct {
    ucs_log_level_t level;             /* what the user asked to see */
    int             capture;
    unsigned        count;
    char            lines[REG_SWEEP_MAX_GATE][REG_SWEEP_LINE_MAX];
} reg_sweep_log;


static void reg_sweep_json_string(const char *str)
{
    const unsigned char *p;

    putchar('"');
    for (p = (const unsigned char*)str; *p != '\0'; ++p) {
        if ((*p == '"') || (*p == '\\')) {
            printf("\\%c", *p);
        } else if (*p < 0x20) {
            printf("\\u%04x", *p);
        } else {
            putchar(*p);
        }
    }
    putchar('"');
}

/*
 * UCX logs to stdout, and stdout is the report (JSON with --json): log lines
 * go to stderr. While the md opens the log level is raised to debug, so that
 * the gate's line for the GPU (debug when GDR is used, diag when not) is
 * captured; other lines are shown only at the level the user configured.
 */
static ucs_log_func_rc_t
reg_sweep_log_handler(const char *file, unsigned line, const char *function,
                      ucs_log_level_t level,
                      const ucs_log_component_config_t *comp_conf,
                      const char *message, va_list ap)
{
    char buf[REG_SWEEP_LINE_MAX];

    vsnprintf(buf, sizeof(buf), message, ap);
    if (reg_sweep_log.capture && !strncmp(buf, "rc_gdr: ", 8) &&
        (strstr(buf, " <-> ") != NULL) &&
        (reg_sweep_log.count < REG_SWEEP_MAX_GATE)) {
        snprintf(reg_sweep_log.lines[reg_sweep_log.count++],
                 REG_SWEEP_LINE_MAX, "%s", buf);
    }

    if (level <= reg_sweep_log.level) {
        fprintf(stderr, "reg_sweep: %s: %s\n", ucs_log_level_names[level],
                buf);
    }
    return UCS_LOG_FUNC_RC_STOP;
}

static void reg_sweep_usage(FILE *stream)
{
    fprintf(stream,
            "Usage: reg_sweep [options] DEVICE[:PORT]\n"
            "Registration cache sweep of the rc_gdr memory domain of a verbs\n"
            "DEVICE with GPU memory: cold, hit, contained, partial, disjoint,\n"
            "realloc; md counters (lane, hit) and uct_md_mem_reg time.\n"
            "  -g, --gpu N      CUDA ordinal of the GPU (0)\n"
            "  -s, --size SIZE  registered range per case, K/M/G suffixes "
            "(4M)\n"
            "  -n, --iters N    repetitions per case (%d)\n"
            "  -j, --json       one JSON document on stdout\n"
            "Run after '. contrib/env.sh' (or '. contrib/env.sh "
            "--emulated-gpu').\n"
            "Exit: 0 all cases hold or SKIP, 1 a case failed, 2 usage or "
            "set-up,\n"
            "3 the memory domain did not open (the gate's reason is "
            "printed).\n", REG_SWEEP_DEFAULT_ITERS);
}

static int reg_sweep_parse_size(const char *arg, size_t *size_p)
{
    unsigned long long value;
    char *end;

    errno = 0;
    value = strtoull(arg, &end, 0);
    if ((errno != 0) || (end == arg)) {
        return -1;
    }

    switch (*end) {
    case 'k': case 'K': value <<= 10; ++end; break;
    case 'm': case 'M': value <<= 20; ++end; break;
    case 'g': case 'G': value <<= 30; ++end; break;
    default: break;
    }
    if (!strcmp(end, "iB") || !strcmp(end, "B")) {
        end += strlen(end);
    }
    if ((*end != '\0') || (value < 4096)) {
        return -1;
    }

    *size_p = value;
    return 0;
}

static int reg_sweep_parse_args(int argc, char **argv, reg_sweep_t *sweep)
{
    static const struct option options[] = {
        {"gpu",   required_argument, NULL, 'g'},
        {"size",  required_argument, NULL, 's'},
        {"iters", required_argument, NULL, 'n'},
        {"json",  no_argument,       NULL, 'j'},
        {"help",  no_argument,       NULL, 'h'},
        {NULL, 0, NULL, 0}
    };
    char *end;
    long value;
    int c;

    sweep->size  = REG_SWEEP_DEFAULT_SIZE;
    sweep->iters = REG_SWEEP_DEFAULT_ITERS;
    while ((c = getopt_long(argc, argv, "g:s:n:jh", options, NULL)) != -1) {
        switch (c) {
        case 'g':
            value = strtol(optarg, &end, 10);
            if ((*end != '\0') || (value < 0)) {
                fprintf(stderr, "reg_sweep: bad GPU ordinal '%s'\n", optarg);
                return -1;
            }
            sweep->gpu = value;
            break;
        case 's':
            if (reg_sweep_parse_size(optarg, &sweep->size) != 0) {
                fprintf(stderr, "reg_sweep: bad size '%s' (at least 4096)\n",
                        optarg);
                return -1;
            }
            break;
        case 'n':
            value = strtol(optarg, &end, 10);
            if ((*end != '\0') || (value < 1) || (value > 1000000)) {
                fprintf(stderr, "reg_sweep: bad repetition count '%s'\n",
                        optarg);
                return -1;
            }
            sweep->iters = value;
            break;
        case 'j':
            sweep->json = 1;
            break;
        case 'h':
            reg_sweep_usage(stdout);
            exit(0);
        default:
            reg_sweep_usage(stderr);
            return -1;
        }
    }

    if (optind != argc - 1) {
        reg_sweep_usage(stderr);
        return -1;
    }

    sweep->device = argv[optind];
    snprintf(sweep->md_name, sizeof(sweep->md_name), "%s", sweep->device);
    *strchrnul(sweep->md_name, ':') = '\0';
    return 0;
}

static void reg_sweep_skip(const reg_sweep_t *sweep, const char *why)
{
    if (sweep->json) {
        printf("{\"tool\": \"reg_sweep\", \"result\": \"SKIP\", "
               "\"device\": ");
        reg_sweep_json_string(sweep->device);
        printf(", \"reason\": ");
        reg_sweep_json_string(why);
        printf("}\n");
    }
    /* The word the test tiers look for, on stderr with --json */
    fprintf(sweep->json ? stderr : stdout, "SKIP reg_sweep: %s\n", why);
}

static ucs_status_t reg_sweep_md_open(reg_sweep_t *sweep)
{
    ucs_log_component_config_t *log = &ucs_global_opts.log_component;
    uct_md_config_t *config;
    ucs_status_t status;

    /* Each case measures a registration that is new or a hit on the held
     * range: nothing is kept after its last deregistration (a kept region
     * would turn every later "cold" repetition into a hit) */
    setenv("UCX_RC_GDR_RCACHE_MAX_SIZE", "1", 0);
    status = uct_md_config_read(sweep->component, NULL, NULL, &config);
    if (status != UCS_OK) {
        return status;
    }

    reg_sweep_log.capture = 1;
    log->log_level        = UCS_LOG_LEVEL_DEBUG;
    status = uct_md_open(sweep->component, sweep->md_name, config, &sweep->md);
    log->log_level        = reg_sweep_log.level;
    reg_sweep_log.capture = 0;
    uct_config_release(config);
    return status;
}

static uint64_t reg_sweep_new_regs(const site_md_stats_t *stats)
{
    return stats->dmabuf_regs + stats->peermem_regs + stats->bounce_regs;
}

/* The lane that made the registrations counted between two snapshots */
static const char *reg_sweep_lane(uint64_t dmabuf, uint64_t peermem,
                                  uint64_t bounce, uint64_t host)
{
    int kinds = !!dmabuf + !!peermem + !!bounce + !!host;

    if (kinds > 1) {
        return "mixed";
    } else if (dmabuf) {
        return "dmabuf";
    } else if (peermem) {
        return "peermem";
    } else if (bounce) {
        return "bounce";
    } else if (host) {
        return "host(!)";
    }
    return "none";
}

static int reg_sweep_compare(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x < y) ? -1 : (x > y);
}

/* Newton's method: no libm for one square root */
static double reg_sweep_sqrt(double x)
{
    double r = (x > 1) ? x : 1;
    int i;

    if (x <= 0) {
        return 0;
    }
    for (i = 0; i < 200; ++i) {
        r = (r + x / r) / 2;
    }
    return r;
}

static void reg_sweep_case_stats(reg_sweep_case_t *c)
{
    double sum = 0, sq = 0;
    unsigned i, n = c->reps;

    if (n == 0) {
        return;
    }

    c->first = c->times[0];
    for (i = 0; i < n; ++i) {
        sum += c->times[i];
    }
    c->mean = sum / n;
    for (i = 0; i < n; ++i) {
        sq += (c->times[i] - c->mean) * (c->times[i] - c->mean);
    }
    c->cv = (n > 1) && (c->mean > 0) ?
            reg_sweep_sqrt(sq / (n - 1)) / c->mean : 0;

    qsort(c->times, n, sizeof(*c->times), reg_sweep_compare);
    c->median = (n % 2) ? c->times[n / 2] :
                          (c->times[n / 2 - 1] + c->times[n / 2]) / 2;
    /* nearest rank */
    c->p95    = c->times[(95 * n + 99) / 100 - 1];
}

/*
 * One registration of [address, address + length), timed, with the counters
 * around it checked against the expectation. On success *memh_p holds a
 * reference the caller drops.
 */
static void reg_sweep_one(reg_sweep_t *sweep, reg_sweep_case_t *c,
                          void *address, size_t length, uct_mem_h *memh_p)
{
    site_md_stats_t before, after;
    uint64_t new_regs, hits, host;
    ucs_status_t status;
    double t0, t1;
    int ok;

    *memh_p = NULL;
    site_md_stats_query(sweep->md, &before);
    t0     = site_now();
    status = uct_md_mem_reg(sweep->md, address, length, UCT_MD_MEM_ACCESS_ALL,
                            memh_p);
    t1     = site_now();
    site_md_stats_query(sweep->md, &after);

    if (status != UCS_OK) {
        *memh_p = NULL;
        if (c->reg_failures++ == 0) {
            snprintf(c->first_mismatch, sizeof(c->first_mismatch),
                     "rep %u: uct_md_mem_reg(%p, %zu): %s", c->reps, address,
                     length, ucs_status_string(status));
        }
        return;
    }

    c->times[c->reps] = t1 - t0;
    c->dmabuf        += after.dmabuf_regs - before.dmabuf_regs;
    c->peermem       += after.peermem_regs - before.peermem_regs;
    c->bounce        += after.bounce_regs - before.bounce_regs;
    c->host          += after.host_regs - before.host_regs;
    c->hits          += after.cache_hits - before.cache_hits;
    c->invalidations += after.invalidations - before.invalidations;

    new_regs = reg_sweep_new_regs(&after) - reg_sweep_new_regs(&before);
    hits     = after.cache_hits - before.cache_hits;
    host     = after.host_regs - before.host_regs;
    ok       = (host == 0) &&
               ((c->expect == REG_SWEEP_EXPECT_NEW) ?
                ((new_regs == 1) && (hits == 0)) :
                ((new_regs == 0) && (hits == 1)));
    if (!ok && (c->mismatches++ == 0)) {
        snprintf(c->first_mismatch, sizeof(c->first_mismatch),
                 "rep %u: %" PRIu64 " new GPU registrations, %" PRIu64
                 " hits, %" PRIu64 " host registrations (expected %s)",
                 c->reps, new_regs, hits, host,
                 (c->expect == REG_SWEEP_EXPECT_NEW) ? "1 new, 0 hits" :
                                                       "0 new, 1 hit");
    }
    ++c->reps;
}

static void reg_sweep_dereg(reg_sweep_t *sweep, reg_sweep_case_t *c,
                            uct_mem_h memh)
{
    if ((memh != NULL) && (uct_md_mem_dereg(sweep->md, memh) != UCS_OK)) {
        ++c->dereg_failures;
    }
}

static void *reg_sweep_alloc(size_t size)
{
    void *ptr;

    if (uct_rc_gdr_cuda_mem_alloc(size, &ptr) != UCS_OK) {
        fprintf(stderr, "reg_sweep: cuMemAlloc(%zu) failed\n", size);
        exit(REG_SWEEP_EXIT_USAGE);
    }
    return ptr;
}

/* Registers the range every "hit" case is measured against */
static uct_mem_h reg_sweep_hold(reg_sweep_t *sweep, void *address,
                                size_t length)
{
    site_md_stats_t before, after;
    uct_mem_h memh;

    site_md_stats_query(sweep->md, &before);
    if (uct_md_mem_reg(sweep->md, address, length, UCT_MD_MEM_ACCESS_ALL,
                       &memh) != UCS_OK) {
        fprintf(stderr, "reg_sweep: registration of the held range %p+%zu "
                "failed\n", address, length);
        exit(REG_SWEEP_EXIT_FAILED);
    }
    site_md_stats_query(sweep->md, &after);
    sweep->holder_lane = reg_sweep_lane(after.dmabuf_regs - before.dmabuf_regs,
                                        after.peermem_regs - before.peermem_regs,
                                        after.bounce_regs - before.bounce_regs,
                                        after.host_regs - before.host_regs);
    return memh;
}

static void reg_sweep_finish(reg_sweep_t *sweep, reg_sweep_case_t *c)
{
    char extra[128] = "";

    reg_sweep_case_stats(c);
    c->lane = (c->expect == REG_SWEEP_EXPECT_HIT) &&
              (c->dmabuf + c->peermem + c->bounce + c->host == 0) ?
              "cache" :
              reg_sweep_lane(c->dmabuf, c->peermem, c->bounce, c->host);

    if (c->dereg_failures > 0) {
        snprintf(extra, sizeof(extra), "; %u deregistrations failed",
                 c->dereg_failures);
    }

    if ((c->reg_failures > 0) || (c->mismatches > 0) ||
        (c->dereg_failures > 0)) {
        c->verdict = "FAIL";
        snprintf(c->note, sizeof(c->note), "%u of %u not as expected: %s%s",
                 c->reg_failures + c->mismatches, sweep->iters,
                 c->first_mismatch, extra);
    } else if (!strcmp(c->name, "realloc") && (c->same_address == 0)) {
        /* A new registration at another address proves nothing about
         * address reuse: say so instead of passing. */
        c->verdict = "NOT-EXERCISED";
        snprintf(c->note, sizeof(c->note), "the driver never returned the "
                 "freed address (0 of %u): address reuse not tested",
                 sweep->iters);
    } else {
        c->verdict = "PASS";
        if (!strcmp(c->name, "realloc")) {
            snprintf(c->note, sizeof(c->note), "same address in %u of %u; "
                     "the free itself dropped the entry in %" PRIu64 " of %u "
                     "(CUDA free hooks; else the buffer ID kept the stale "
                     "entry from being hit)", c->same_address, sweep->iters,
                     c->free_invalidations, sweep->iters);
        } else if (c->expect == REG_SWEEP_EXPECT_HIT) {
            snprintf(c->note, sizeof(c->note), "held range registered by "
                     "%s", sweep->holder_lane);
        }
    }
}

static void reg_sweep_run(reg_sweep_t *sweep, reg_sweep_case_t *cases,
                          unsigned num_cases)
{
    size_t size = sweep->size;
    site_md_stats_t before, after;
    reg_sweep_case_t *c;
    uct_mem_h held, memh, stale;
    char *a, *b, *r, *again;
    unsigned i;

    /* a: 2 x size, so that sub-ranges and partial overlaps stay inside one
     * allocation; b: another allocation */
    a = reg_sweep_alloc(2 * size);
    b = reg_sweep_alloc(size);

    for (c = cases; c < cases + num_cases; ++c) {
        c->times = calloc(sweep->iters, sizeof(*c->times));
        if (c->times == NULL) {
            fprintf(stderr, "reg_sweep: out of memory\n");
            exit(REG_SWEEP_EXIT_USAGE);
        }
    }

    /* cold: the range is released after each registration (last
     * reference), so every repetition registers anew; the first one is the
     * first registration this md makes */
    c = &cases[0];
    for (i = 0; i < sweep->iters; ++i) {
        reg_sweep_one(sweep, c, a, size, &memh);
        reg_sweep_dereg(sweep, c, memh);
    }

    held = reg_sweep_hold(sweep, a, size);

    c = &cases[1]; /* hit */
    for (i = 0; i < sweep->iters; ++i) {
        reg_sweep_one(sweep, c, a, size, &memh);
        reg_sweep_dereg(sweep, c, memh);
    }

    c = &cases[2]; /* contained, unaligned at both ends */
    for (i = 0; i < sweep->iters; ++i) {
        reg_sweep_one(sweep, c, a + size / 4 + 1, size / 2, &memh);
        reg_sweep_dereg(sweep, c, memh);
    }

    c = &cases[3]; /* partial: second half of the held range and beyond */
    for (i = 0; i < sweep->iters; ++i) {
        reg_sweep_one(sweep, c, a + size / 2, size, &memh);
        reg_sweep_dereg(sweep, c, memh);
    }

    c = &cases[4]; /* disjoint */
    for (i = 0; i < sweep->iters; ++i) {
        reg_sweep_one(sweep, c, b, size, &memh);
        reg_sweep_dereg(sweep, c, memh);
    }

    c = &cases[5]; /* realloc: freed while registered, allocated again */
    for (i = 0; i < sweep->iters; ++i) {
        r     = reg_sweep_alloc(size);
        stale = reg_sweep_hold(sweep, r, size);
        site_md_stats_query(sweep->md, &before);
        uct_rc_gdr_cuda_mem_free(r);
        site_md_stats_query(sweep->md, &after);
        c->free_invalidations += after.invalidations - before.invalidations;
        again = reg_sweep_alloc(size);
        c->same_address += (again == r);
        reg_sweep_one(sweep, c, again, size, &memh);
        reg_sweep_dereg(sweep, c, memh);
        /* the holder of the freed range drops its reference: accepted,
         * the region goes away */
        reg_sweep_dereg(sweep, c, stale);
        uct_rc_gdr_cuda_mem_free(again);
    }

    if (uct_md_mem_dereg(sweep->md, held) != UCS_OK) {
        ++cases[1].dereg_failures;
    }
    uct_rc_gdr_cuda_mem_free(b);
    uct_rc_gdr_cuda_mem_free(a);

    for (c = cases; c < cases + num_cases; ++c) {
        reg_sweep_finish(sweep, c);
    }
}

static void reg_sweep_print_text(const reg_sweep_t *sweep,
                                 const reg_sweep_case_t *cases,
                                 unsigned num_cases)
{
    const char *label = sweep->emulated ? " EMULATED" : "";
    const reg_sweep_case_t *c;
    unsigned i;

    printf("reg_sweep: device %s, GPU %d (%s, %s)%s, %zu bytes per range, "
           "%u repetitions per case\n", sweep->device, sweep->gpu,
           sweep->gpu_attr.name, sweep->gpu_attr.pci_bus_id, label,
           sweep->size, sweep->iters);
    if (sweep->emulated) {
        printf("NOTE: EMULATED GPU: the CUDA driver is the project's "
               "stand-in (%s); \"GPU\" memory is host memory: lanes and "
               "times below say nothing about a real GPU\n",
               sweep->driver.library);
    }
    for (i = 0; i < reg_sweep_log.count; ++i) {
        printf("gate: %s\n", reg_sweep_log.lines[i]);
    }
    if (reg_sweep_log.count == 0) {
        printf("gate: (no line for this GPU was logged)\n");
    }

    for (c = cases; c < cases + num_cases; ++c) {
        printf("%-9s %-13s%s lane %-7s new %3" PRIu64 " hits %3" PRIu64
               " (expect %s)  reg median %9.2f us  p95 %9.2f us  cv %5.2f  "
               "first %9.2f us%s%s\n",
               c->name, c->verdict, label, c->lane,
               c->dmabuf + c->peermem + c->bounce + c->host, c->hits,
               (c->expect == REG_SWEEP_EXPECT_NEW) ? "new" : "hit",
               c->median * 1e6, c->p95 * 1e6, c->cv, c->first * 1e6,
               c->note[0] ? "  -- " : "", c->note);
    }
}

static void reg_sweep_print_json(const reg_sweep_t *sweep,
                                 const reg_sweep_case_t *cases,
                                 unsigned num_cases, unsigned passed,
                                 unsigned failed)
{
    const reg_sweep_case_t *c;
    unsigned i;

    printf("{\"tool\": \"reg_sweep\", \"result\": \"%s\", \"device\": ",
           (failed > 0) ? "FAIL" : "PASS");
    reg_sweep_json_string(sweep->device);
    printf(", \"emulated\": %s, \"gpu\": {\"ordinal\": %d, \"name\": ",
           sweep->emulated ? "true" : "false", sweep->gpu);
    reg_sweep_json_string(sweep->gpu_attr.name);
    printf(", \"bdf\": ");
    reg_sweep_json_string(sweep->gpu_attr.pci_bus_id);
    printf("}, \"driver\": {\"library\": ");
    reg_sweep_json_string(sweep->driver.library);
    printf(", \"version\": %d}, \"size\": %zu, \"iters\": %u, "
           "\"md_gpus\": %" PRIu64 ", \"gate\": [",
           sweep->driver.driver_version, sweep->size, sweep->iters,
           sweep->md_stats.num_gpus);
    for (i = 0; i < reg_sweep_log.count; ++i) {
        printf("%s", (i > 0) ? ", " : "");
        reg_sweep_json_string(reg_sweep_log.lines[i]);
    }
    printf("], \"cases\": [");

    for (c = cases; c < cases + num_cases; ++c) {
        printf("%s{\"case\": \"%s\", \"what\": ", (c > cases) ? ", " : "",
               c->name);
        reg_sweep_json_string(c->what);
        printf(", \"verdict\": \"%s\", \"expect\": \"%s\", \"lane\": \"%s\", "
               "\"reps\": %u, \"new\": {\"dmabuf\": %" PRIu64
               ", \"peermem\": %" PRIu64 ", \"bounce\": %" PRIu64
               ", \"host\": %" PRIu64 "}, \"hits\": %" PRIu64
               ", \"invalidations\": %" PRIu64 ", \"reg_failures\": %u, "
               "\"dereg_failures\": %u, \"mismatches\": %u",
               c->verdict,
               (c->expect == REG_SWEEP_EXPECT_NEW) ? "new" : "hit", c->lane,
               c->reps, c->dmabuf, c->peermem, c->bounce, c->host, c->hits,
               c->invalidations, c->reg_failures, c->dereg_failures,
               c->mismatches);
        if (!strcmp(c->name, "realloc")) {
            printf(", \"same_address\": %u, \"free_invalidations\": %" PRIu64,
                   c->same_address, c->free_invalidations);
        }
        printf(", \"reg_us\": {\"first\": %.3f, \"median\": %.3f, "
               "\"p95\": %.3f, \"mean\": %.3f, \"cv\": %.4f}, \"note\": ",
               c->first * 1e6, c->median * 1e6, c->p95 * 1e6, c->mean * 1e6,
               c->cv);
        reg_sweep_json_string(c->note);
        printf("}");
    }
    printf("], \"passed\": %u, \"failed\": %u}\n", passed, failed);
}

int main(int argc, char **argv)
{
    reg_sweep_case_t cases[] = {
        {.name = "cold", .expect = REG_SWEEP_EXPECT_NEW,
         .what = "first registration of a range, released each time"},
        {.name = "hit", .expect = REG_SWEEP_EXPECT_HIT,
         .what = "the same range while a registration of it is held"},
        {.name = "contained", .expect = REG_SWEEP_EXPECT_HIT,
         .what = "unaligned sub-range of a held registration"},
        {.name = "partial", .expect = REG_SWEEP_EXPECT_NEW,
         .what = "overlaps a held registration and extends past it"},
        {.name = "disjoint", .expect = REG_SWEEP_EXPECT_NEW,
         .what = "another allocation"},
        {.name = "realloc", .expect = REG_SWEEP_EXPECT_NEW,
         .what = "allocation freed while registered, allocated again"}
    };
    const unsigned num_cases = sizeof(cases) / sizeof(cases[0]);
    reg_sweep_t sweep;
    uct_rc_gdr_cuda_ctx_h ctx;
    unsigned i, passed = 0, failed = 0;
    ucs_status_t status;
    char why[256];
    int count;

    setvbuf(stdout, NULL, _IOLBF, 0);
    memset(&sweep, 0, sizeof(sweep));
    if (reg_sweep_parse_args(argc, argv, &sweep) != 0) {
        return REG_SWEEP_EXIT_USAGE;
    }

    reg_sweep_log.level = ucs_global_opts.log_component.log_level;
    ucs_log_push_handler(reg_sweep_log_handler);

    if (uct_rc_gdr_cuda_init() != UCS_OK) {
        snprintf(why, sizeof(why), "no CUDA driver (%s did not load or "
                 "cuInit failed; set RC_GDR_CUDA_LIBRARY, or . contrib/env.sh "
                 "--emulated-gpu)", uct_rc_gdr_cuda_library_name());
        reg_sweep_skip(&sweep, why);
        return 0;
    }
    if ((uct_rc_gdr_cuda_device_count(&count) != UCS_OK) || (count == 0)) {
        reg_sweep_skip(&sweep, "the CUDA driver reports no GPU");
        return 0;
    }
    if (sweep.gpu >= count) {
        fprintf(stderr, "reg_sweep: no GPU %d (the driver reports %d)\n",
                sweep.gpu, count);
        return REG_SWEEP_EXIT_USAGE;
    }

    uct_rc_gdr_cuda_driver_info(&sweep.driver);
    sweep.emulated = sweep.driver.emulated;
    uct_rc_gdr_cuda_device_attr_query(sweep.gpu, &sweep.gpu_attr);
    if (uct_rc_gdr_cuda_ctx_activate(sweep.gpu, &ctx) != UCS_OK) {
        fprintf(stderr, "reg_sweep: primary context of GPU %d: failed\n",
                sweep.gpu);
        return REG_SWEEP_EXIT_USAGE;
    }

    sweep.component = site_component_find();
    if (sweep.component == NULL) {
        fprintf(stderr, "reg_sweep: the rc_gdr module is not in this process "
                "(. contrib/env.sh after a build)\n");
        return REG_SWEEP_EXIT_USAGE;
    }

    status = reg_sweep_md_open(&sweep);
    if (status != UCS_OK) {
        fprintf(stderr, "reg_sweep: the rc_gdr memory domain of %s did not "
                "open: %s\n", sweep.md_name, ucs_status_string(status));
        for (i = 0; i < reg_sweep_log.count; ++i) {
            fprintf(stderr, "reg_sweep: gate: %s\n", reg_sweep_log.lines[i]);
        }
        if (sweep.json) {
            printf("{\"tool\": \"reg_sweep\", \"result\": \"MD-OPEN-FAILED\", "
                   "\"device\": ");
            reg_sweep_json_string(sweep.device);
            printf(", \"emulated\": %s, \"status\": ",
                   sweep.emulated ? "true" : "false");
            reg_sweep_json_string(ucs_status_string(status));
            printf(", \"gate\": [");
            for (i = 0; i < reg_sweep_log.count; ++i) {
                printf("%s", (i > 0) ? ", " : "");
                reg_sweep_json_string(reg_sweep_log.lines[i]);
            }
            printf("]}\n");
        }
        return REG_SWEEP_EXIT_MD_OPEN;
    }

    status = site_md_stats_query(sweep.md, &sweep.md_stats);
    if (status != UCS_OK) {
        fprintf(stderr, "reg_sweep: uct_rc_gdr_md_stats_query: %s (a module "
                "built from another tree?)\n", ucs_status_string(status));
        return REG_SWEEP_EXIT_USAGE;
    }
    if ((int)sweep.md_stats.num_gpus <= sweep.gpu) {
        fprintf(stderr, "reg_sweep: the memory domain of %s sees %" PRIu64
                " GPUs: GPU %d would be registered as host memory\n",
                sweep.md_name, sweep.md_stats.num_gpus, sweep.gpu);
        return REG_SWEEP_EXIT_USAGE;
    }
    sweep.emulated |= (sweep.md_stats.emulated_gpu != 0);

    reg_sweep_run(&sweep, cases, num_cases);
    for (i = 0; i < num_cases; ++i) {
        if (!strcmp(cases[i].verdict, "FAIL")) {
            ++failed;
        } else if (!strcmp(cases[i].verdict, "PASS")) {
            ++passed;
        }
    }

    if (sweep.json) {
        reg_sweep_print_json(&sweep, cases, num_cases, passed, failed);
    } else {
        reg_sweep_print_text(&sweep, cases, num_cases);
        printf("%u passed, %u failed%s\n", passed, failed,
               sweep.emulated ? " (EMULATED GPU)" : "");
    }

    uct_md_close(sweep.md);
    for (i = 0; i < num_cases; ++i) {
        free(cases[i].times);
    }
    uct_rc_gdr_cuda_ctx_release(sweep.gpu);
    return (failed > 0) ? REG_SWEEP_EXIT_FAILED : 0;
}
