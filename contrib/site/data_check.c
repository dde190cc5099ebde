/*
 * data_check: rc_gdr moves GPU memory byte for byte, between two rc_gdr
 * endpoints of one process on two verbs devices (or ports; one device at
 * both ends loops back inside the HCA):
 *
 *   put_gpu_gpu   put_zcopy GPU -> GPU
 *   get_gpu_gpu   get_zcopy GPU <- GPU
 *   put_gpu_host  put_zcopy from an interior, unaligned GPU address -> host
 *   get_host_gpu  get_zcopy of host memory into an unaligned GPU address
 *
 * Each buffer is filled with a pattern of its own and read back through the
 * CUDA driver after the operation. The line "lane of GPU memory on DEV:
 * peermem N, dmabuf N, bounce N new registrations" says which lane really
 * registered the GPU buffers of the first endpoint (the md's counters).
 *
 *   data_check [--gpu N] [--size BYTES] [--timeout S] DEV_A[:PORT] DEV_B[:PORT]
 *
 * Needs the module in the process (. contrib/env.sh). Prints one line per
 * check ("PASS name ..." / "FAIL name ...") and last
 * "data_check: N passed, N failed". Exit status: 0 every check passed (or
 * "SKIP: reason": no CUDA driver, no GPU); 1 a check failed; 2 bad usage or
 * set-up; 3 a memory domain did not open (e.g. a lane forced by
 * UCX_RC_GDR_* that the gate refuses: its line is in the output). With the
 * project's stand-in driver every result is about an EMULATED GPU, and the
 * output says so.
 *
 * See file LICENSE for terms.
 */

#define _GNU_SOURCE

#include <uct/ib_gdr/rc_gdr_cuda.h>
#include "site_uct.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DATA_CHECK_EXIT_FAILED   1
#define DATA_CHECK_EXIT_USAGE    2
#define DATA_CHECK_EXIT_MD_OPEN  3

#define DATA_CHECK_PROG          "data_check"


/* A buffer of one node, registered, its key unpacked by the other node */
typedef struct {
    void              *buf;
    int               gpu;      /* 1: GPU memory */
    uct_mem_h         memh;
    uct_rkey_bundle_t rkey;
    int               has_rkey;
} data_check_region_t;


typedef struct {
    int         gpu;
    size_t      size;
    double      timeout;
    const char  *dev_a;
    const char  *dev_b;
    int         emulated;
    site_node_t a, b;
    unsigned    passed;
    unsigned    failed;
} data_check_t;


static void data_check_usage(void)
{
    fprintf(stderr, "Usage: " DATA_CHECK_PROG " [--gpu N] [--size BYTES] "
            "[--timeout S] DEV_A[:PORT] DEV_B[:PORT]\n"
            "  --gpu N       CUDA ordinal of the GPU (0)\n"
            "  --size BYTES  bytes of each transfer (262144)\n"
            "  --timeout S   bound of each operation, seconds (60)\n");
}

static int data_check_parse_args(int argc, char **argv, data_check_t *dc)
{
    static const struct option opts[] = {
        {"gpu",     required_argument, NULL, 'g'},
        {"size",    required_argument, NULL, 's'},
        {"timeout", required_argument, NULL, 't'},
        {"help",    no_argument,       NULL, 'h'},
        {NULL, 0, NULL, 0}
    };
    char *end;
    int c;

    dc->size    = 256 * 1024;
    dc->timeout = 60.0;
    while ((c = getopt_long(argc, argv, "g:s:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'g':
            dc->gpu = strtol(optarg, &end, 0);
            if ((*end != '\0') || (dc->gpu < 0)) {
                goto err_usage;
            }
            break;
        case 's':
            dc->size = strtoull(optarg, &end, 0);
            /* room for the interior, unaligned offsets of the checks */
            if ((*end != '\0') || (dc->size < 16384)) {
                goto err_usage;
            }
            break;
        case 't':
            dc->timeout = strtod(optarg, &end);
            if ((*end != '\0') || (dc->timeout <= 0)) {
                goto err_usage;
            }
            break;
        default:
            goto err_usage;
        }
    }
    if (argc - optind != 2) {
        goto err_usage;
    }
    dc->dev_a = argv[optind];
    dc->dev_b = argv[optind + 1];
    return 0;

err_usage:
    data_check_usage();
    return -1;
}

static unsigned char data_check_byte(unsigned seed, size_t i)
{
    return (unsigned char)(seed * 29 + i * 7 + (i >> 10));
}

static void data_check_pattern(unsigned char *host, size_t length,
                               unsigned seed)
{
    size_t i;

    for (i = 0; i < length; ++i) {
        host[i] = data_check_byte(seed, i);
    }
}

/* Fills [ptr, +length) of a region with the pattern of seed */
static ucs_status_t data_check_fill(const data_check_region_t *r, void *ptr,
                                    size_t length, unsigned seed)
{
    unsigned char *host;
    ucs_status_t status;

    if (!r->gpu) {
        data_check_pattern(ptr, length, seed);
        return UCS_OK;
    }

    host = malloc(length);
    if (host == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    data_check_pattern(host, length, seed);
    status = uct_rc_gdr_cuda_memcpy_htod(ptr, host, length);
    free(host);
    return status;
}

/* The first byte of [ptr, +length) that is not the pattern of seed, or -1;
 * -2 when the GPU memory could not be read */
static long data_check_compare(const data_check_region_t *r, const void *ptr,
                               size_t length, unsigned seed)
{
    const unsigned char *bytes = ptr;
    unsigned char *host        = NULL;
    long bad                   = -1;
    size_t i;

    if (r->gpu) {
        host = malloc(length);
        if ((host == NULL) ||
            (uct_rc_gdr_cuda_memcpy_dtoh(host, ptr, length) != UCS_OK)) {
            free(host);
            return -2;
        }
        bytes = host;
    }

    for (i = 0; i < length; ++i) {
        if (bytes[i] != data_check_byte(seed, i)) {
            bad = i;
            break;
        }
    }
    free(host);
    return bad;
}

/* Allocates and registers a region on owner, its key unpacked on peer */
static ucs_status_t data_check_region_open(data_check_t *dc, site_node_t *owner,
                                           site_node_t *peer, int gpu,
                                           data_check_region_t *r)
{
    void *packed;
    ucs_status_t status;

    memset(r, 0, sizeof(*r));
    r->gpu = gpu;
    if (gpu) {
        status = uct_rc_gdr_cuda_mem_alloc(dc->size, &r->buf);
    } else {
        status = (posix_memalign(&r->buf, 4096, dc->size) == 0) ?
                 UCS_OK : UCS_ERR_NO_MEMORY;
    }
    if (status != UCS_OK) {
        fprintf(stderr, DATA_CHECK_PROG ": allocation of %zu bytes of %s "
                "memory: %s\n", dc->size, gpu ? "GPU" : "host",
                ucs_status_string(status));
        r->buf = NULL;
        return status;
    }

    status = uct_md_mem_reg(owner->md, r->buf, dc->size,
                            UCT_MD_MEM_ACCESS_ALL, &r->memh);
    if (status != UCS_OK) {
        fprintf(stderr, DATA_CHECK_PROG ": uct_md_mem_reg of %s memory: %s\n",
                gpu ? "GPU" : "host", ucs_status_string(status));
        r->memh = NULL;
        return status;
    }

    packed = calloc(1, owner->md_attr.rkey_packed_size);
    if (packed == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    status = uct_md_mkey_pack(owner->md, r->memh, packed);
    if (status == UCS_OK) {
        status = uct_rkey_unpack(peer->component, packed, &r->rkey);
    }
    free(packed);
    if (status != UCS_OK) {
        fprintf(stderr, DATA_CHECK_PROG ": remote key of %s memory: %s\n",
                gpu ? "GPU" : "host", ucs_status_string(status));
        return status;
    }
    r->has_rkey = 1;
    return UCS_OK;
}

static void data_check_region_close(site_node_t *owner, site_node_t *peer,
                                    data_check_region_t *r)
{
    if (r->has_rkey) {
        uct_rkey_release(peer->component, &r->rkey);
    }
    if (r->memh != NULL) {
        uct_md_mem_dereg(owner->md, r->memh);
    }
    if (r->buf != NULL) {
        if (r->gpu) {
            uct_rc_gdr_cuda_mem_free(r->buf);
        } else {
            free(r->buf);
        }
    }
    memset(r, 0, sizeof(*r));
}

/*
 * One check: fills the source, moves length bytes by put (local -> remote)
 * or get (remote -> local) from node a, and compares the destination.
 */
static void data_check_one(data_check_t *dc, const char *name, int put,
                           data_check_region_t *local, size_t local_off,
                           data_check_region_t *remote, size_t remote_off,
                           size_t length, unsigned seed)
{
    char *lptr = (char*)local->buf + local_off;
    char *rptr = (char*)remote->buf + remote_off;
    const data_check_region_t *dst = put ? remote : local;
    char *dptr                     = put ? rptr : lptr;
    ucs_status_t status;
    long bad;

    status = data_check_fill(put ? local : remote, put ? lptr : rptr,
                             length, seed);
    if (status == UCS_OK) {
        /* the destination holds another pattern before */
        status = data_check_fill(dst, dptr, length, seed + 100);
    }
    if (status != UCS_OK) {
        printf("FAIL %-13s could not fill the buffers: %s\n", name,
               ucs_status_string(status));
        ++dc->failed;
        return;
    }

    status = site_zcopy(&dc->a, &dc->b, put, lptr, local->memh, length,
                        (uintptr_t)rptr, remote->rkey.rkey, dc->timeout);
    if (status == UCS_ERR_TIMED_OUT) {
        /* the operation may still write into the buffers: stop here */
        printf("FAIL %-13s %s of %zu bytes did not complete in %.0f s\n",
               name, put ? "put_zcopy" : "get_zcopy", length, dc->timeout);
        printf(DATA_CHECK_PROG ": %u passed, %u failed\n", dc->passed,
               dc->failed + 1);
        exit(DATA_CHECK_EXIT_FAILED);
    }
    if (status != UCS_OK) {
        printf("FAIL %-13s %s of %zu bytes: %s\n", name,
               put ? "put_zcopy" : "get_zcopy", length,
               ucs_status_string(status));
        ++dc->failed;
        return;
    }

    bad = data_check_compare(dst, dptr, length, seed);
    if (bad == -1) {
        printf("PASS %-13s %zu bytes byte-exact%s\n", name, length,
               dc->emulated ? " (EMULATED GPU)" : "");
        ++dc->passed;
    } else if (bad == -2) {
        printf("FAIL %-13s the destination could not be read back\n", name);
        ++dc->failed;
    } else {
        printf("FAIL %-13s %zu bytes moved, byte %ld differs\n", name,
               length, bad);
        ++dc->failed;
    }
}

static int data_check_open(data_check_t *dc)
{
    const char *step = "";
    ucs_status_t status;

    status = site_node_open(&dc->a, dc->dev_a, DATA_CHECK_PROG, &step);
    if (status == UCS_OK) {
        status = site_node_open(&dc->b, dc->dev_b, DATA_CHECK_PROG, &step);
        if (status != UCS_OK) {
            site_node_close(&dc->a);
        }
    }
    if (status != UCS_OK) {
        /* no md: the gate refused a forced lane, its line is above */
        return !strcmp(step, "uct_md_open") ? DATA_CHECK_EXIT_MD_OPEN :
               DATA_CHECK_EXIT_USAGE;
    }

    status = site_node_connect_pair(&dc->a, &dc->b);
    if (status != UCS_OK) {
        fprintf(stderr, DATA_CHECK_PROG ": connecting %s and %s: %s\n",
                dc->dev_a, dc->dev_b, ucs_status_string(status));
        site_node_close(&dc->b);
        site_node_close(&dc->a);
        return DATA_CHECK_EXIT_USAGE;
    }
    return 0;
}

static int data_check_run(data_check_t *dc)
{
    data_check_region_t src_gpu, dst_gpu, host;
    site_md_stats_t before, after;
    ucs_status_t status;
    size_t half = dc->size / 2;

    memset(&src_gpu, 0, sizeof(src_gpu));
    memset(&dst_gpu, 0, sizeof(dst_gpu));
    memset(&host, 0, sizeof(host));

    status = site_md_stats_query(dc->a.md, &before);
    if (status != UCS_OK) {
        fprintf(stderr, DATA_CHECK_PROG ": uct_rc_gdr_md_stats_query: %s (a "
                "module built from another tree?)\n",
                ucs_status_string(status));
        return DATA_CHECK_EXIT_USAGE;
    }
    if ((int)before.num_gpus <= dc->gpu) {
        fprintf(stderr, DATA_CHECK_PROG ": the memory domain of %s sees %"
                PRIu64 " GPUs: GPU %d would be registered as host memory\n",
                dc->dev_a, before.num_gpus, dc->gpu);
        return DATA_CHECK_EXIT_USAGE;
    }
    dc->emulated |= (before.emulated_gpu != 0);

    if ((data_check_region_open(dc, &dc->a, &dc->b, 1, &src_gpu) != UCS_OK) ||
        (data_check_region_open(dc, &dc->b, &dc->a, 1, &dst_gpu) != UCS_OK) ||
        (data_check_region_open(dc, &dc->b, &dc->a, 0, &host) != UCS_OK)) {
        data_check_region_close(&dc->b, &dc->a, &host);
        data_check_region_close(&dc->b, &dc->a, &dst_gpu);
        data_check_region_close(&dc->a, &dc->b, &src_gpu);
        return DATA_CHECK_EXIT_USAGE;
    }

    site_md_stats_query(dc->a.md, &after);
    /* what the site's validation reads: the lane that really registered */
    printf("lane of GPU memory on %s: peermem %" PRIu64 ", dmabuf %" PRIu64
           ", bounce %" PRIu64 " new registrations\n", dc->dev_a,
           after.peermem_regs - before.peermem_regs,
           after.dmabuf_regs - before.dmabuf_regs,
           after.bounce_regs - before.bounce_regs);

    data_check_one(dc, "put_gpu_gpu", 1, &src_gpu, 0, &dst_gpu, 0, dc->size,
                   1);
    data_check_one(dc, "get_gpu_gpu", 0, &src_gpu, 0, &dst_gpu, 0, dc->size,
                   2);
    data_check_one(dc, "put_gpu_host", 1, &src_gpu, 4096 + 3, &host, 5, half,
                   3);
    data_check_one(dc, "get_host_gpu", 0, &src_gpu, 8192 + 1, &host, 7, half,
                   4);

    data_check_region_close(&dc->b, &dc->a, &host);
    data_check_region_close(&dc->b, &dc->a, &dst_gpu);
    data_check_region_close(&dc->a, &dc->b, &src_gpu);
    return 0;
}

int main(int argc, char **argv)
{
    uct_rc_gdr_cuda_driver_info_t driver;
    uct_rc_gdr_cuda_ctx_h ctx;
    data_check_t dc;
    int count, ret;

    setvbuf(stdout, NULL, _IOLBF, 0);
    memset(&dc, 0, sizeof(dc));
    if (data_check_parse_args(argc, argv, &dc) != 0) {
        return DATA_CHECK_EXIT_USAGE;
    }

    if (uct_rc_gdr_cuda_init() != UCS_OK) {
        printf("SKIP: no CUDA driver (%s did not load or cuInit failed; set "
               "RC_GDR_CUDA_LIBRARY, or . contrib/env.sh --emulated-gpu)\n",
               uct_rc_gdr_cuda_library_name());
        return 0;
    }
    if ((uct_rc_gdr_cuda_device_count(&count) != UCS_OK) || (count == 0)) {
        printf("SKIP: the CUDA driver reports no GPU\n");
        return 0;
    }
    if (dc.gpu >= count) {
        fprintf(stderr, DATA_CHECK_PROG ": no GPU %d (the driver reports "
                "%d)\n", dc.gpu, count);
        return DATA_CHECK_EXIT_USAGE;
    }
    dc.emulated = (uct_rc_gdr_cuda_driver_info(&driver) == UCS_OK) &&
                  driver.emulated;
    if (uct_rc_gdr_cuda_ctx_activate(dc.gpu, &ctx) != UCS_OK) {
        fprintf(stderr, DATA_CHECK_PROG ": primary context of GPU %d: "
                "failed\n", dc.gpu);
        return DATA_CHECK_EXIT_USAGE;
    }

    ret = data_check_open(&dc);
    if (ret == 0) {
        ret = data_check_run(&dc);
        site_node_close(&dc.b);
        site_node_close(&dc.a);
    }
    uct_rc_gdr_cuda_ctx_release(dc.gpu);
    if (ret != 0) {
        return ret;
    }

    printf(DATA_CHECK_PROG ": %u passed, %u failed%s\n", dc.passed,
           dc.failed, dc.emulated ? " (EMULATED GPU)" : "");
    return (dc.failed > 0) ? DATA_CHECK_EXIT_FAILED : 0;
}
