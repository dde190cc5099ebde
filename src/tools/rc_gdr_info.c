/**
 * rc_gdr_info: print the GDR capability chain for every GPU x NIC pair, so
 * "why is GDR off?" has an answer before any application runs.
 *
 *   rc_gdr_info [--json] [--require-gdr] [--sysfs ROOT]
 *   rc_gdr_info --nearest-nics GPU
 *
 * Beside the chain, the limits on registrations it records as evidence:
 * the locked-memory limit, each NIC's MR count limit, each GPU's BAR1
 * aperture, and what the md does when a GPU registration is refused at run
 * time (bounce lane or error); whether registrations use PCIe relaxed
 * ordering; and the GPU x NIC matrix at a glance, as `nvidia-smi topo -m`
 * shows it (distance class and the lane of each direction).
 *
 * --nearest-nics prints only a GPU's nearest NICs, as UCX_NET_DEVICES takes
 * them, for a launcher that gives each rank the NICs of its own GPU where
 * UCP would not choose them itself (README, multi-GPU nodes).
 *
 * Exit status: 0; 1 for bad usage or configuration; 2 with --require-gdr
 * when no pair can use GDR; 3 with --nearest-nics when no such GPU, or no
 * NIC's distance to it is known.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include <uct/ib_gdr/rc_gdr_cuda.h>
#include <uct/ib_gdr/rc_gdr_gate.h>
#include <uct/ib_gdr/rc_gdr_limits.h>
#include <uct/ib_gdr/rc_gdr_probe.h>
#include <uct/ib_gdr/rc_gdr_topo.h>

#include <ucs/debug/log_def.h>
#include <ucs/sys/string.h>

#include <infiniband/verbs.h>

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>


#define RC_GDR_INFO_NVIDIA_VENDOR  0x10de
#define RC_GDR_INFO_MAX_GPUS       64
#define RC_GDR_INFO_MAX_NICS       64

#define RC_GDR_INFO_EXIT_USAGE     1
#define RC_GDR_INFO_EXIT_NO_GDR    2
#define RC_GDR_INFO_EXIT_NO_NEAREST 3

#define RC_GDR_INFO_KNOB_RELAXED_ORDERING "UCX_RC_GDR_PCI_RELAXED_ORDERING"


typedef struct rc_gdr_info_gpu {
    char                     name[16];     /* "GPU0" */
    char                     bdf[UCT_RC_GDR_BDF_MAX];
    uct_rc_gdr_gate_gpu_t    facts;
    int                      ordinal;      /* CUDA ordinal, -1: no driver */
    uct_rc_gdr_probe_gpu_t   probe;        /* when the driver answered */
    uct_rc_gdr_limit_t       bar1;
} rc_gdr_info_gpu_t;


typedef struct rc_gdr_info_nic {
    char                     name[64];
    char                     port_state[64];
    char                     peermem_source[256];
    uct_rc_gdr_gate_nic_t    facts;
    uint64_t                 max_mr;       /* UCT_RC_GDR_LIMIT_UNKNOWN: */
    uint64_t                 max_mr_size;  /* ibv_query_device failed */
    int                      ro_errno;     /* relaxed ordering probe: 0
                                              taken, -1 not probed */
    char                     column[72];   /* "mlx5_0:1" in the matrix */
} rc_gdr_info_nic_t;


typedef struct rc_gdr_info {
    const char               *sysfs_root;
    int                      json;
    int                      require_gdr;
    const char               *nearest_of;  /* --nearest-nics GPU, or NULL:
                                              print that alone */
    uct_rc_gdr_gate_config_t config;
    unsigned                 num_gpus;
    rc_gdr_info_gpu_t        gpus[RC_GDR_INFO_MAX_GPUS];
    unsigned                 num_nics;
    rc_gdr_info_nic_t        nics[RC_GDR_INFO_MAX_NICS];
    char                     no_gpu[384];  /* why no GPU is listed, or "" */
    char                     no_nic[128];  /* why no NIC is listed, or "" */
    uct_rc_gdr_limit_t       memlock;
    const char               *relaxed_order; /* the knob's value, "auto" */
} rc_gdr_info_t;


static void rc_gdr_info_usage(FILE *stream)
{
    fprintf(stream,
            "Usage: rc_gdr_info [--json] [--require-gdr] [--sysfs ROOT]\n"
            "       rc_gdr_info --nearest-nics GPU [--sysfs ROOT]\n"
            "Print, for every GPU x RDMA NIC pair, whether rc_gdr would use\n"
            "GPUDirect RDMA or the host bounce lane, and the evidence.\n"
            "  --json         one JSON document on stdout\n"
            "  --require-gdr  as %s=gdr; exit %d when no pair has GDR\n"
            "  --sysfs ROOT   read sysfs below ROOT (default /sys)\n"
            "  --nearest-nics GPU  only the NICs nearest GPU (a CUDA ordinal,\n"
            "                 GPU<N> or a PCI address), as UCX_NET_DEVICES\n"
            "                 takes them; exit %d when none is known\n"
            "The %s* variables apply as they would in a UCX process.\n",
            UCT_RC_GDR_KNOB_REQUIRE, RC_GDR_INFO_EXIT_NO_GDR,
            RC_GDR_INFO_EXIT_NO_NEAREST, "UCX_RC_GDR_");
}

static int rc_gdr_info_parse_args(int argc, char **argv, rc_gdr_info_t *info)
{
    static const struct option options[] = {
        {"json",        no_argument,       NULL, 'j'},
        {"require-gdr", no_argument,       NULL, 'r'},
        {"sysfs",       required_argument, NULL, 's'},
        {"nearest-nics", required_argument, NULL, 'n'},
        {"help",        no_argument,       NULL, 'h'},
        {NULL, 0, NULL, 0}
    };
    int c;

    info->sysfs_root = "/sys";
    while ((c = getopt_long(argc, argv, "jrs:n:h", options, NULL)) != -1) {
        switch (c) {
        case 'j':
            info->json = 1;
            break;
        case 'r':
            info->require_gdr = 1;
            break;
        case 's':
            info->sysfs_root = optarg;
            break;
        case 'n':
            info->nearest_of = optarg;
            break;
        case 'h':
            rc_gdr_info_usage(stdout);
            exit(0);
        default:
            rc_gdr_info_usage(stderr);
            return -1;
        }
    }

    if (optind < argc) {
        fprintf(stderr, "rc_gdr_info: unexpected argument '%s'\n",
                argv[optind]);
        rc_gdr_info_usage(stderr);
        return -1;
    }

    if ((info->nearest_of != NULL) && (info->json || info->require_gdr)) {
        fprintf(stderr, "rc_gdr_info: --nearest-nics prints a list alone: "
                "no --json or --require-gdr with it\n");
        return -1;
    }

    return 0;
}

/*
 * A GPU found in sysfs without a usable CUDA driver: its attributes are
 * unknown, and the chain says so rather than guessing.
 */
static void rc_gdr_info_fill_gpu_facts(rc_gdr_info_gpu_t *gpu)
{
    gpu->ordinal                = -1;
    gpu->facts.name             = gpu->name;
    gpu->facts.pci_bdf          = gpu->bdf;
    gpu->facts.gdr_supported    = -1;
    gpu->facts.dmabuf_supported = -1;
    gpu->facts.query_error      = "no usable CUDA driver (libcuda.so.1)";
}

/* The GPUs the CUDA driver reports, with their attributes. */
static int rc_gdr_info_find_cuda_gpus(rc_gdr_info_t *info)
{
    uct_rc_gdr_cuda_driver_info_t driver;
    rc_gdr_info_gpu_t *gpu;
    int ordinal, count;

    if ((uct_rc_gdr_cuda_init() != UCS_OK) ||
        (uct_rc_gdr_cuda_device_count(&count) != UCS_OK) || (count == 0)) {
        return 0;
    }

    for (ordinal = 0; (ordinal < count) &&
                      (info->num_gpus < RC_GDR_INFO_MAX_GPUS); ++ordinal) {
        gpu = &info->gpus[info->num_gpus++];
        uct_rc_gdr_probe_gpu(ordinal, &gpu->probe);
        gpu->ordinal = ordinal;
        gpu->facts   = gpu->probe.facts;
        ucs_strncpy_safe(gpu->name, gpu->probe.name, sizeof(gpu->name));
        ucs_strncpy_safe(gpu->bdf, gpu->probe.attr.pci_bus_id,
                         sizeof(gpu->bdf));
        gpu->facts.name    = gpu->name;
        gpu->facts.pci_bdf = gpu->bdf;
    }

    if ((uct_rc_gdr_cuda_driver_info(&driver) == UCS_OK) && driver.emulated) {
        fprintf(stderr, "NOTE: the CUDA driver is the project's stand-in "
                "(%s): every GPU is EMULATED (host memory behind device "
                "pointers)%s\n", driver.library,
                driver.placed ? ", placed at the PCI functions it reports "
                "(RC_GDR_FAKE_CUDA_PLACED): the gate judges their place as "
                "a real GPU's" : "");
    }
    return 1;
}

static unsigned rc_gdr_info_read_hex(const char *root, const char *bdf,
                                     const char *attr)
{
    char path[PATH_MAX];
    unsigned value = 0;
    FILE *file;

    snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/%s", root, bdf, attr);
    file = fopen(path, "r");
    if (file != NULL) {
        if (fscanf(file, "%x", &value) != 1) {
            value = 0;
        }
        fclose(file);
    }

    return value;
}

static int rc_gdr_info_gpu_compare(const void *a, const void *b)
{
    return strcmp(((const rc_gdr_info_gpu_t*)a)->bdf,
                  ((const rc_gdr_info_gpu_t*)b)->bdf);
}

/* The CUDA driver's GPUs; without a driver, the NVIDIA functions of class
 * 3D controller (0x0302xx) or VGA (0x0300xx) in sysfs. */
static void rc_gdr_info_find_gpus(rc_gdr_info_t *info)
{
    char path[PATH_MAX];
    struct dirent *entry;
    unsigned pci_class, i;
    DIR *dir;

    if (rc_gdr_info_find_cuda_gpus(info)) {
        return;
    }

    snprintf(path, sizeof(path), "%s/bus/pci/devices", info->sysfs_root);
    dir = opendir(path);
    if (dir != NULL) {
        while (((entry = readdir(dir)) != NULL) &&
               (info->num_gpus < RC_GDR_INFO_MAX_GPUS)) {
            if ((entry->d_name[0] == '.') ||
                (rc_gdr_info_read_hex(info->sysfs_root, entry->d_name,
                                      "vendor") !=
                 RC_GDR_INFO_NVIDIA_VENDOR)) {
                continue;
            }

            pci_class = rc_gdr_info_read_hex(info->sysfs_root, entry->d_name,
                                             "class") >> 8;
            if ((pci_class == 0x0302) || (pci_class == 0x0300)) {
                ucs_strncpy_safe(info->gpus[info->num_gpus++].bdf,
                                 entry->d_name, UCT_RC_GDR_BDF_MAX);
            }
        }
        closedir(dir);
    }

    qsort(info->gpus, info->num_gpus, sizeof(info->gpus[0]),
          rc_gdr_info_gpu_compare);
    for (i = 0; i < info->num_gpus; ++i) {
        snprintf(info->gpus[i].name, sizeof(info->gpus[i].name), "GPU%u", i);
        rc_gdr_info_fill_gpu_facts(&info->gpus[i]);
    }

    if (info->num_gpus == 0) {
        snprintf(info->no_gpu, sizeof(info->no_gpu),
                 "no NVIDIA GPU found (no vendor 0x10de function of class "
                 "0x0300xx/0x0302xx in %.256s/bus/pci/devices)",
                 info->sysfs_root);
    }
}

static rc_gdr_info_nic_t *rc_gdr_info_nic_add(rc_gdr_info_t *info,
                                              const char *name, uint8_t port)
{
    rc_gdr_info_nic_t *nic;

    if (info->num_nics == RC_GDR_INFO_MAX_NICS) {
        return NULL;
    }

    nic = &info->nics[info->num_nics++];
    memset(nic, 0, sizeof(*nic));
    ucs_strncpy_safe(nic->name, name, sizeof(nic->name));
    nic->facts.name          = nic->name;
    nic->facts.port_num      = port;
    nic->facts.port_active   = -1;
    nic->facts.port_state    = nic->port_state;
    nic->facts.dmabuf_errno  = UCT_RC_GDR_GATE_NOT_PROBED;
    nic->facts.peermem_errno = UCT_RC_GDR_GATE_NOT_PROBED;
    nic->max_mr              = UCT_RC_GDR_LIMIT_UNKNOWN;
    nic->max_mr_size         = UCT_RC_GDR_LIMIT_UNKNOWN;
    nic->ro_errno            = -1;
    snprintf(nic->column, sizeof(nic->column), "%s:%u", name, port);
    return nic;
}

/* Every port of a device, probed without GPU memory: port state, DMA-BUF
 * support of the provider, peermem module hints. The test registrations
 * need a GPU buffer: rc_gdr_info_probe_pair() makes them per pair. */
static void rc_gdr_info_probe_device(rc_gdr_info_t *info,
                                     struct ibv_device *device)
{
    const char *name = ibv_get_device_name(device);
    struct ibv_device_attr dev_attr;
    struct ibv_context *context;
    uct_rc_gdr_probe_nic_t probed;
    rc_gdr_info_nic_t *nic;
    struct ibv_pd *pd;
    uint8_t port;
    int ro_errno;

    context = ibv_open_device(device);
    pd      = (context != NULL) ? ibv_alloc_pd(context) : NULL;
    if (pd == NULL) {
        nic = rc_gdr_info_nic_add(info, name, 1);
        if (nic != NULL) {
            snprintf(nic->port_state, sizeof(nic->port_state),
                     "device open failed: %s", strerror(errno));
        }
        goto out;
    }

    if (ibv_query_device(context, &dev_attr) != 0) {
        memset(&dev_attr, 0, sizeof(dev_attr));
        dev_attr.phys_port_cnt = 1;
    }

    /* As the md does at open: a property of the device, not of a port */
    ro_errno = uct_rc_gdr_probe_relaxed_order(pd);
    for (port = 1; port <= dev_attr.phys_port_cnt; ++port) {
        nic = rc_gdr_info_nic_add(info, name, port);
        if (nic == NULL) {
            break;
        }

        nic->ro_errno = ro_errno;

        if (dev_attr.max_mr > 0) {
            nic->max_mr      = dev_attr.max_mr;
            nic->max_mr_size = dev_attr.max_mr_size;
        }

        uct_rc_gdr_probe_nic(context, pd, port, NULL, info->sysfs_root,
                             &probed);
        ucs_strncpy_safe(nic->port_state, probed.port_state,
                         sizeof(nic->port_state));
        ucs_strncpy_safe(nic->peermem_source, probed.peermem_source,
                         sizeof(nic->peermem_source));
        nic->facts                = probed.facts;
        nic->facts.name           = nic->name;
        nic->facts.port_state     = nic->port_state;
        nic->facts.peermem_source = nic->peermem_source;
    }

out:
    if (pd != NULL) {
        ibv_dealloc_pd(pd);
    }
    if (context != NULL) {
        ibv_close_device(context);
    }
}

static void rc_gdr_info_find_nics(rc_gdr_info_t *info)
{
    struct ibv_device **devices;
    int i, num_devices = 0;

    errno   = 0;
    devices = ibv_get_device_list(&num_devices);
    if ((devices == NULL) || (num_devices == 0)) {
        snprintf(info->no_nic, sizeof(info->no_nic),
                 "no verbs device found (ibv_get_device_list: %s)",
                 (devices == NULL) ? strerror(errno) : "empty list");
        if (devices != NULL) {
            ibv_free_device_list(devices);
        }
        return;
    }

    for (i = 0; i < num_devices; ++i) {
        rc_gdr_info_probe_device(info, devices[i]);
    }

    ibv_free_device_list(devices);
}

static int rc_gdr_info_has_gdr(const uct_rc_gdr_gate_result_t *result)
{
    uct_rc_gdr_dir_t dir;

    if (result->status != UCS_OK) {
        return 0;
    }

    for (dir = 0; dir < UCT_RC_GDR_DIR_LAST; ++dir) {
        if (result->why[dir] < 0) {
            return 1;
        }
    }

    return 0;
}

/* What the driver says about a GPU, whether or not a NIC is there to pair
 * it with: the facts the chain starts from, and the flush policy input. */
static void rc_gdr_info_print_gpu_attr(const uct_rc_gdr_probe_gpu_t *gpu)
{
    const uct_rc_gdr_cuda_dev_attr_t *attr = &gpu->attr;

    printf("  %s, compute capability %d.%d\n", attr->name, attr->cc_major,
           attr->cc_minor);
    printf("  GPU_DIRECT_RDMA_SUPPORTED %d, DMA_BUF_SUPPORTED %d, "
           "GPU_DIRECT_RDMA_WRITES_ORDERING %s\n", gpu->facts.gdr_supported,
           gpu->facts.dmabuf_supported,
           (attr->valid_mask & UCT_RC_GDR_CUDA_DEV_ATTR_WRITES_ORDERING) ?
           uct_rc_gdr_cuda_writes_ordering_str(attr->writes_ordering) :
           "unreadable");
}

/* Where a GPU sits: its PCIe path from the host bridge down, and its NUMA
 * node, from sysfs (nvidia-smi topo -m's columns, per device) */
static void rc_gdr_info_print_gpu_place(const char *sysfs_root,
                                        const char *bdf, int json)
{
    uct_rc_gdr_topo_dev_t dev;
    unsigned i;

    if (uct_rc_gdr_topo_dev_query(sysfs_root, bdf, &dev) != UCS_OK) {
        if (json) {
            printf(", \"pcie_path\": null, \"numa_node\": null");
        } else {
            printf("  PCIe path: not found below %s/bus/pci/devices\n",
                   sysfs_root);
        }
        return;
    }

    if (json) {
        printf(", \"pcie_path\": [");
        uct_rc_gdr_gate_print_json_string(stdout, dev.host_bridge);
        for (i = 0; i < dev.num_bridges; ++i) {
            printf(", ");
            uct_rc_gdr_gate_print_json_string(stdout, dev.bridges[i]);
        }
        printf(", ");
        uct_rc_gdr_gate_print_json_string(stdout, dev.bdf);
        printf("], \"numa_node\": ");
        if (dev.numa_node >= 0) {
            printf("%d", dev.numa_node);
        } else {
            printf("null");
        }
        return;
    }

    printf("  PCIe path: %s", dev.host_bridge);
    for (i = 0; i < dev.num_bridges; ++i) {
        printf(" > %s", dev.bridges[i]);
    }
    printf(" > %s; NUMA node ", dev.bdf);
    if (dev.numa_node >= 0) {
        printf("%d\n", dev.numa_node);
    } else {
        printf("unknown (numa_node -1)\n");
    }
}

/* A limit as JSON: a number, or null when unknown ("unlimited": -1) */
static void rc_gdr_info_print_json_limit(uint64_t value)
{
    if (value == UCT_RC_GDR_LIMIT_UNKNOWN) {
        printf("null");
    } else if (value == UCT_RC_GDR_LIMIT_UNLIMITED) {
        printf("-1");
    } else {
        printf("%" PRIu64, value);
    }
}

static void rc_gdr_info_print_json_bar1(const uct_rc_gdr_limit_t *bar1)
{
    printf(", \"bar1\": {\"total\": ");
    rc_gdr_info_print_json_limit(bar1->value);
    printf(", \"free\": ");
    rc_gdr_info_print_json_limit(bar1->free);
    printf(", \"source\": ");
    uct_rc_gdr_gate_print_json_string(stdout, bar1->source);
    printf("}");
}

/* What the md does with a GPU registration the NIC refuses at run time */
static const char *rc_gdr_info_fallback(const rc_gdr_info_t *info)
{
    return (info->config.bounce &&
            (info->config.require != UCT_RC_GDR_REQUIRE_GDR)) ?
           "bounce" : "error";
}

static void rc_gdr_info_print_limits(const rc_gdr_info_t *info)
{
    char value[32];

    printf("Limits: RLIMIT_MEMLOCK %s (%s)\n",
           uct_rc_gdr_limits_str(info->memlock.value, 1, value,
                                 sizeof(value)), info->memlock.source);
    printf("A GPU registration the NIC refuses at run time (BAR1, MR count, "
           "locked memory, the allocation): %s\n",
           !strcmp(rc_gdr_info_fallback(info), "bounce") ?
           "the bounce lane carries it" :
           "fails (" UCT_RC_GDR_KNOB_BOUNCE "=no or " UCT_RC_GDR_KNOB_REQUIRE
           "=gdr)");
}

static void rc_gdr_info_print_bar1(const uct_rc_gdr_limit_t *bar1)
{
    char total[32], free_str[32];

    if (bar1->value == UCT_RC_GDR_LIMIT_UNKNOWN) {
        printf("  BAR1 unknown (%s)\n", bar1->source);
    } else if (bar1->free == UCT_RC_GDR_LIMIT_UNKNOWN) {
        printf("  BAR1 %s (%s)\n",
               uct_rc_gdr_limits_str(bar1->value, 1, total, sizeof(total)),
               bar1->source);
    } else {
        printf("  BAR1 %s, %s free (%s)\n",
               uct_rc_gdr_limits_str(bar1->value, 1, total, sizeof(total)),
               uct_rc_gdr_limits_str(bar1->free, 1, free_str,
                                     sizeof(free_str)), bar1->source);
    }
}

/* What the md would do about relaxed ordering with this NIC: "on", "off"
 * or "error" (the md does not open), and why */
static const char *rc_gdr_info_relaxed_order(const rc_gdr_info_t *info,
                                             const rc_gdr_info_nic_t *nic,
                                             char *why, size_t max)
{
    int knob_no  = !strcasecmp(info->relaxed_order, "no") ||
                   !strcasecmp(info->relaxed_order, "off") ||
                   !strcasecmp(info->relaxed_order, "n") ||
                   !strcmp(info->relaxed_order, "0");
    int knob_yes = !strcasecmp(info->relaxed_order, "yes") ||
                   !strcasecmp(info->relaxed_order, "on") ||
                   !strcasecmp(info->relaxed_order, "y") ||
                   !strcmp(info->relaxed_order, "1");

    if (knob_no) {
        snprintf(why, max, "%s=%s", RC_GDR_INFO_KNOB_RELAXED_ORDERING,
                 info->relaxed_order);
        return "off";
    } else if (nic->ro_errno < 0) {
        snprintf(why, max, "the device did not open");
        return "off";
    } else if (nic->ro_errno == 0) {
        snprintf(why, max, "a registration with "
                 "IBV_ACCESS_RELAXED_ORDERING succeeds (an optional flag: "
                 "rdma-core drops it silently where the kernel lacks it); "
                 "%s=%s", RC_GDR_INFO_KNOB_RELAXED_ORDERING,
                 info->relaxed_order);
        return "on";
    }

    snprintf(why, max, "the device refuses IBV_ACCESS_RELAXED_ORDERING "
             "(ibv_reg_mr: %s)%s", strerror(nic->ro_errno),
             knob_yes ? "; with " RC_GDR_INFO_KNOB_RELAXED_ORDERING "=yes "
                        "the memory domain does not open" : "");
    return knob_yes ? "error" : "off";
}

static void rc_gdr_info_print_header(const rc_gdr_info_t *info)
{
    char ro_why[256];
    const char *ro;
    char max_mr[32], max_mr_size[32];
    unsigned i;

    if (info->json) {
        printf("{\"sysfs_root\": ");
        uct_rc_gdr_gate_print_json_string(stdout, info->sysfs_root);
        printf(", \"require_gdr\": %s, \"gpus\": [",
               info->require_gdr ? "true" : "false");
        for (i = 0; i < info->num_gpus; ++i) {
            printf("%s{\"name\": \"%s\", \"bdf\": ", (i > 0) ? ", " : "",
                   info->gpus[i].name);
            uct_rc_gdr_gate_print_json_string(stdout, info->gpus[i].bdf);
            printf(", \"emulated\": %s, \"placed\": %s",
                   info->gpus[i].facts.emulated ? "true" : "false",
                   info->gpus[i].facts.placed ? "true" : "false");
            if (info->gpus[i].ordinal >= 0) {
                printf(", \"ordinal\": %d, \"model\": ",
                       info->gpus[i].ordinal);
                uct_rc_gdr_gate_print_json_string(
                        stdout, info->gpus[i].probe.attr.name);
                printf(", \"cc\": \"%d.%d\", \"gdr_supported\": %d, "
                       "\"dmabuf_supported\": %d, \"writes_ordering\": %d",
                       info->gpus[i].probe.attr.cc_major,
                       info->gpus[i].probe.attr.cc_minor,
                       info->gpus[i].facts.gdr_supported,
                       info->gpus[i].facts.dmabuf_supported,
                       info->gpus[i].probe.attr.writes_ordering);
            }
            rc_gdr_info_print_json_bar1(&info->gpus[i].bar1);
            rc_gdr_info_print_gpu_place(info->sysfs_root, info->gpus[i].bdf,
                                        1);
            printf("}");
        }
        printf("], \"nics\": [");
        for (i = 0; i < info->num_nics; ++i) {
            printf("%s{\"name\": ", (i > 0) ? ", " : "");
            uct_rc_gdr_gate_print_json_string(stdout, info->nics[i].name);
            printf(", \"port\": %u, \"state\": ", info->nics[i].facts.port_num);
            uct_rc_gdr_gate_print_json_string(stdout,
                                              info->nics[i].port_state);
            printf(", \"max_mr\": ");
            rc_gdr_info_print_json_limit(info->nics[i].max_mr);
            printf(", \"max_mr_size\": ");
            rc_gdr_info_print_json_limit(info->nics[i].max_mr_size);
            ro = rc_gdr_info_relaxed_order(info, &info->nics[i], ro_why,
                                           sizeof(ro_why));
            printf(", \"relaxed_ordering\": \"%s\", "
                   "\"relaxed_ordering_why\": ", ro);
            uct_rc_gdr_gate_print_json_string(stdout, ro_why);
            printf("}");
        }
        printf("], \"memlock\": ");
        rc_gdr_info_print_json_limit(info->memlock.value);
        printf(", \"memlock_source\": ");
        uct_rc_gdr_gate_print_json_string(stdout, info->memlock.source);
        printf(", \"runtime_fallback\": \"%s\"", rc_gdr_info_fallback(info));
        printf(", \"notes\": [");
        if (info->no_gpu[0] != '\0') {
            uct_rc_gdr_gate_print_json_string(stdout, info->no_gpu);
        }
        if (info->no_nic[0] != '\0') {
            printf("%s", (info->no_gpu[0] != '\0') ? ", " : "");
            uct_rc_gdr_gate_print_json_string(stdout, info->no_nic);
        }
        printf("], \"pairs\": [");
        return;
    }

    printf("rc_gdr_info: sysfs root %s\n", info->sysfs_root);
    if (info->num_gpus == 0) {
        printf("GPUs: %s\n", info->no_gpu);
    }
    for (i = 0; i < info->num_gpus; ++i) {
        printf("%s %s%s%s\n", info->gpus[i].name, info->gpus[i].bdf,
               !info->gpus[i].facts.emulated ? "" :
               info->gpus[i].facts.placed ? " EMULATED, placed" : " EMULATED",
               (info->gpus[i].ordinal >= 0) ? " (CUDA ordinal)" :
               " (numbered in PCI order: no CUDA driver answered)");
        if (info->gpus[i].ordinal >= 0) {
            rc_gdr_info_print_gpu_attr(&info->gpus[i].probe);
        }
        rc_gdr_info_print_gpu_place(info->sysfs_root, info->gpus[i].bdf, 0);
        rc_gdr_info_print_bar1(&info->gpus[i].bar1);
    }
    if (info->num_nics == 0) {
        printf("NICs: %s\n", info->no_nic);
    }
    for (i = 0; i < info->num_nics; ++i) {
        printf("NIC %s port %u: %s; max_mr %s, max_mr_size %s\n",
               info->nics[i].name, info->nics[i].facts.port_num,
               info->nics[i].port_state,
               uct_rc_gdr_limits_str(info->nics[i].max_mr, 0, max_mr,
                                     sizeof(max_mr)),
               uct_rc_gdr_limits_str(info->nics[i].max_mr_size, 1,
                                     max_mr_size, sizeof(max_mr_size)));
        ro = rc_gdr_info_relaxed_order(info, &info->nics[i], ro_why,
                                       sizeof(ro_why));
        printf("  relaxed ordering %s (%s)\n", ro, ro_why);
    }
    rc_gdr_info_print_limits(info);
    printf("\n");
}

/* Test registrations of a buffer of @a gpu with @a nic's device. */
static int rc_gdr_info_probe_pair(const char *sysfs_root,
                                  const rc_gdr_info_gpu_t *gpu,
                                  const rc_gdr_info_nic_t *nic,
                                  uct_rc_gdr_probe_nic_t *probed)
{
    struct ibv_device **devices, *device = NULL;
    struct ibv_context *context;
    struct ibv_pd *pd;
    int i, num_devices, ok = 0;

    devices = ibv_get_device_list(&num_devices);
    if (devices == NULL) {
        return 0;
    }

    for (i = 0; i < num_devices; ++i) {
        if (!strcmp(ibv_get_device_name(devices[i]), nic->name)) {
            device = devices[i];
        }
    }

    context = (device != NULL) ? ibv_open_device(device) : NULL;
    pd      = (context != NULL) ? ibv_alloc_pd(context) : NULL;
    if (pd != NULL) {
        uct_rc_gdr_probe_nic(context, pd, nic->facts.port_num, &gpu->probe,
                             sysfs_root, probed);
        ok = 1;
        ibv_dealloc_pd(pd);
    }
    if (context != NULL) {
        ibv_close_device(context);
    }
    ibv_free_device_list(devices);
    return ok;
}

/* Evaluate and print one pair; returns whether it has a GDR lane */
static int rc_gdr_info_pair(const rc_gdr_info_t *info,
                            const rc_gdr_info_gpu_t *gpu,
                            const rc_gdr_info_nic_t *nic, int first,
                            uct_rc_gdr_gate_cell_t *cell)
{
    uct_rc_gdr_gate_result_t result;
    uct_rc_gdr_topo_t topo;
    ucs_status_t status;
    char why[UCT_RC_GDR_GATE_WHY_MAX];
    uct_rc_gdr_dir_t dir;

    const uct_rc_gdr_gate_nic_t *nic_facts = &nic->facts;
    uct_rc_gdr_probe_nic_t probed;

    /* With a driver, the mechanisms are proven by registering a buffer of
     * this GPU with this NIC; --nearest-nics wants only the distance, which
     * no registration changes, so a launcher's call per rank neither
     * retains a GPU context nor allocates GPU memory. */
    if ((gpu->ordinal >= 0) && (info->nearest_of == NULL) &&
        rc_gdr_info_probe_pair(info->sysfs_root, gpu, nic, &probed)) {
        nic_facts = &probed.facts;
    }

    status = uct_rc_gdr_topo_classify(info->sysfs_root, gpu->bdf, nic->name,
                                      &topo);
    status = uct_rc_gdr_gate_evaluate(&gpu->facts, nic_facts,
                                      (status == UCS_OK) ? &topo : NULL,
                                      &info->config, &result);
    if ((status != UCS_OK) && (status != UCS_ERR_UNSUPPORTED)) {
        fprintf(stderr, "rc_gdr_info: %s <-> %s: evaluation failed: %s\n",
                gpu->name, nic->name, ucs_status_string(status));
        uct_rc_gdr_gate_cell_set(cell, NULL);
        return 0;
    }

    uct_rc_gdr_gate_cell_set(cell, &result);

    if (info->nearest_of != NULL) {
        /* only the matrix's row is wanted */
    } else if (info->json) {
        printf("%s", first ? "" : ", ");
        uct_rc_gdr_gate_print_json(&result, stdout);
    } else {
        uct_rc_gdr_gate_print_table(&result, stdout);
        printf("\n");
    }

    if (!rc_gdr_info_has_gdr(&result) && info->require_gdr) {
        for (dir = 0; dir < UCT_RC_GDR_DIR_LAST; ++dir) {
            fprintf(stderr, "%s\n", uct_rc_gdr_gate_format_why(&result, dir,
                                                              why,
                                                              sizeof(why)));
        }
    }

    return rc_gdr_info_has_gdr(&result);
}

/* The GPU --nearest-nics names: a CUDA ordinal ("0"), a name ("GPU0") or
 * a PCI address, with or without its domain ("0000:17:00.0", "17:00.0") */
static int rc_gdr_info_gpu_lookup(const rc_gdr_info_t *info, const char *which)
{
    const char *bdf;
    char *end;
    long ordinal;
    unsigned g;

    ordinal = strtol(which, &end, 10);
    for (g = 0; g < info->num_gpus; ++g) {
        bdf = info->gpus[g].bdf;
        if (((*which != '\0') && (*end == '\0') &&
             (info->gpus[g].ordinal >= 0) &&
             (info->gpus[g].ordinal == ordinal)) ||
            !strcasecmp(which, info->gpus[g].name) ||
            !strcasecmp(which, bdf) ||
            ((strlen(bdf) > 5) && !strcasecmp(which, bdf + 5))) {
            return (int)g;
        }
    }
    /* no CUDA driver: GPUs are numbered in PCI order, as their names say */
    if ((*which != '\0') && (*end == '\0') && (ordinal >= 0) &&
        (ordinal < (long)info->num_gpus) &&
        (info->gpus[ordinal].ordinal < 0)) {
        return (int)ordinal;
    }
    return -1;
}

/* UCX logs to stdout; the tool's stdout is its report (JSON with --json),
 * so its log lines go to stderr. */
static ucs_log_func_rc_t
rc_gdr_info_log_to_stderr(const char *file, unsigned line, const char *function,
                          ucs_log_level_t level,
                          const ucs_log_component_config_t *comp_conf,
                          const char *message, va_list ap)
{
    if (!ucs_log_component_is_enabled(level, comp_conf)) {
        return UCS_LOG_FUNC_RC_STOP;
    }

    fprintf(stderr, "rc_gdr_info: %s: ", ucs_log_level_names[level]);
    vfprintf(stderr, message, ap);
    fprintf(stderr, "\n");
    return UCS_LOG_FUNC_RC_STOP;
}

int main(int argc, char **argv)
{
    const char *gpu_names[RC_GDR_INFO_MAX_GPUS];
    const char *nic_names[RC_GDR_INFO_MAX_NICS];
    uct_rc_gdr_gate_cell_t *cells = NULL;
    rc_gdr_info_t *info;
    unsigned g, n, num_gdr = 0, num_pairs = 0, first_gpu, end_gpu;
    int ret = 0, nearest_gpu = -1;

    ucs_log_push_handler(rc_gdr_info_log_to_stderr);
    info = calloc(1, sizeof(*info));
    if (info == NULL) {
        fprintf(stderr, "rc_gdr_info: out of memory\n");
        return RC_GDR_INFO_EXIT_USAGE;
    }

    uct_rc_gdr_gate_config_init(&info->config);
    if ((rc_gdr_info_parse_args(argc, argv, info) != 0) ||
        (uct_rc_gdr_gate_config_read_env(&info->config) != UCS_OK)) {
        ret = RC_GDR_INFO_EXIT_USAGE;
        goto out_free;
    }

    if (info->require_gdr) {
        info->config.require = UCT_RC_GDR_REQUIRE_GDR;
    }

    info->relaxed_order = getenv(RC_GDR_INFO_KNOB_RELAXED_ORDERING);
    if ((info->relaxed_order == NULL) || (info->relaxed_order[0] == '\0')) {
        info->relaxed_order = "auto";
    }

    rc_gdr_info_find_gpus(info);
    rc_gdr_info_find_nics(info);
    uct_rc_gdr_limits_memlock(&info->memlock);
    for (g = 0; g < info->num_gpus; ++g) {
        uct_rc_gdr_limits_bar1(info->sysfs_root, info->gpus[g].bdf,
                               &info->gpus[g].bar1);
    }
    if (info->nearest_of == NULL) {
        rc_gdr_info_print_header(info);
        first_gpu = 0;
        end_gpu   = info->num_gpus;
    } else {
        nearest_gpu = rc_gdr_info_gpu_lookup(info, info->nearest_of);
        if (nearest_gpu < 0) {
            fprintf(stderr, "rc_gdr_info: no GPU '%s' here%s%s\n",
                    info->nearest_of, info->no_gpu[0] ? ": " : "",
                    info->no_gpu);
            ret = RC_GDR_INFO_EXIT_NO_NEAREST;
            goto out_free;
        }
        first_gpu = nearest_gpu;
        end_gpu   = nearest_gpu + 1;
    }

    cells = calloc(info->num_gpus * info->num_nics + 1, sizeof(*cells));
    if (cells == NULL) {
        fprintf(stderr, "rc_gdr_info: out of memory\n");
        ret = RC_GDR_INFO_EXIT_USAGE;
        goto out_free;
    }

    for (g = first_gpu; g < end_gpu; ++g) {
        gpu_names[g] = info->gpus[g].name;
        for (n = 0; n < info->num_nics; ++n) {
            num_gdr += rc_gdr_info_pair(info, &info->gpus[g], &info->nics[n],
                                        num_pairs == 0,
                                        &cells[g * info->num_nics + n]);
            ++num_pairs;
        }
    }
    for (n = 0; n < info->num_nics; ++n) {
        nic_names[n] = info->nics[n].column;
    }

    if (info->nearest_of != NULL) {
        if (uct_rc_gdr_gate_print_nearest(nic_names, info->num_nics,
                                          &cells[nearest_gpu *
                                                 info->num_nics],
                                          stdout) == 0) {
            fprintf(stderr, "rc_gdr_info: no NIC's distance to %s is known"
                    "%s%s\n", info->gpus[nearest_gpu].name,
                    info->no_nic[0] ? ": " : "", info->no_nic);
            ret = RC_GDR_INFO_EXIT_NO_NEAREST;
        }
    } else if (info->json) {
        printf("], \"matrix\": ");
        uct_rc_gdr_gate_print_matrix_json(gpu_names, info->num_gpus,
                                          nic_names, info->num_nics, cells,
                                          stdout);
        printf(", \"gdr_pairs\": %u}\n", num_gdr);
    } else if (num_pairs == 0) {
        printf("No GPU x NIC pair to evaluate.\n");
    } else {
        printf("GPU x NIC:\n");
        uct_rc_gdr_gate_print_matrix(gpu_names, info->num_gpus, nic_names,
                                     info->num_nics, cells, stdout);
        printf("\n%u of %u GPU x NIC pairs can use GDR.\n", num_gdr,
               num_pairs);
    }

    if (info->require_gdr && (num_gdr == 0)) {
        fprintf(stderr, "rc_gdr_info: GDR required, but no GPU x NIC pair "
                "can use it%s%s%s%s\n",
                (num_pairs == 0) ? ": " : " (failing checks above)",
                info->no_gpu, (info->no_gpu[0] && info->no_nic[0]) ? "; " : "",
                info->no_nic);
        ret = RC_GDR_INFO_EXIT_NO_GDR;
    }

out_free:
    free(cells);
    free(info);
    return ret;
}
