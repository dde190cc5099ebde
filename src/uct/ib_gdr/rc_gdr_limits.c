/*
 * rc_gdr resource limits (rc_gdr_limits.h).
 *
 * See file LICENSE for terms.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "rc_gdr_limits.h"

#include <ucs/sys/string.h>

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>


/* The few NVML calls used, declared here: the CUDA toolkit on build
 * machines ships no nvml.h, and the library is optional at run time */
typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} uct_rc_gdr_nvml_bar1_t;

typedef int (*uct_rc_gdr_nvml_init_t)(void);
typedef int (*uct_rc_gdr_nvml_by_bus_t)(const char *bus_id, void **device_p);
typedef int (*uct_rc_gdr_nvml_bar1_func_t)(void *device,
                                           uct_rc_gdr_nvml_bar1_t *bar1);

/* Lines of a PCI function's sysfs "resource" file before BAR 1's */
#define UCT_RC_GDR_LIMITS_BAR1_LINE 1


void uct_rc_gdr_limits_memlock(uct_rc_gdr_limit_t *limit)
{
    struct rlimit rl;

    limit->free = UCT_RC_GDR_LIMIT_UNKNOWN;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
        limit->value = UCT_RC_GDR_LIMIT_UNKNOWN;
        ucs_snprintf_zero(limit->source, sizeof(limit->source),
                 "getrlimit(RLIMIT_MEMLOCK) failed: %s", strerror(errno));
        return;
    }

    limit->value = (rl.rlim_cur == RLIM_INFINITY) ?
                   UCT_RC_GDR_LIMIT_UNLIMITED : (uint64_t)rl.rlim_cur;
    ucs_strncpy_zero(limit->source, "getrlimit(RLIMIT_MEMLOCK), soft",
                     sizeof(limit->source));
}

/* NVML's answer: total and free BAR1 of the GPU, or 0 and why not */
static int uct_rc_gdr_limits_bar1_nvml(const char *bdf,
                                       uct_rc_gdr_limit_t *limit,
                                       char *why, size_t max)
{
    uct_rc_gdr_nvml_bar1_func_t get_bar1;
    uct_rc_gdr_nvml_by_bus_t by_bus;
    uct_rc_gdr_nvml_init_t init, shutdown;
    uct_rc_gdr_nvml_bar1_t bar1;
    void *lib, *device;
    int ret, found = 0;

    lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (lib == NULL) {
        ucs_snprintf_zero(why, max, "no NVML (libnvidia-ml.so.1)");
        return 0;
    }

    init     = (uct_rc_gdr_nvml_init_t)dlsym(lib, "nvmlInit_v2");
    shutdown = (uct_rc_gdr_nvml_init_t)dlsym(lib, "nvmlShutdown");
    by_bus   = (uct_rc_gdr_nvml_by_bus_t)dlsym(
            lib, "nvmlDeviceGetHandleByPciBusId_v2");
    get_bar1 = (uct_rc_gdr_nvml_bar1_func_t)dlsym(
            lib, "nvmlDeviceGetBAR1MemoryInfo");
    if ((init == NULL) || (shutdown == NULL) || (by_bus == NULL) ||
        (get_bar1 == NULL)) {
        ucs_snprintf_zero(why, max, "NVML lacks the BAR1 query");
        goto out_close;
    }

    ret = init();
    if (ret != 0) {
        ucs_snprintf_zero(why, max, "nvmlInit failed (%d)", ret);
        goto out_close;
    }

    ret = by_bus(bdf, &device);
    if (ret == 0) {
        ret = get_bar1(device, &bar1);
    }
    if (ret == 0) {
        limit->value = bar1.total;
        limit->free  = bar1.free;
        ucs_strncpy_zero(limit->source, "NVML", sizeof(limit->source));
        found = 1;
    } else {
        ucs_snprintf_zero(why, max, "NVML has no BAR1 of %s (%d)", bdf, ret);
    }
    shutdown();

out_close:
    dlclose(lib);
    return found;
}

/* The size of PCI BAR 1 from sysfs: "start end flags" per BAR */
static int uct_rc_gdr_limits_bar1_sysfs(const char *sysfs_root,
                                        const char *bdf,
                                        uct_rc_gdr_limit_t *limit,
                                        char *why, size_t max)
{
    uint64_t start, end, flags;
    char path[PATH_MAX];
    int line, found = 0;
    FILE *file;

    ucs_snprintf_zero(path, sizeof(path), "%s/bus/pci/devices/%s/resource",
             sysfs_root, bdf);
    file = fopen(path, "r");
    if (file == NULL) {
        ucs_snprintf_zero(why, max, "%s: %s", path, strerror(errno));
        return 0;
    }

    for (line = 0; line <= UCT_RC_GDR_LIMITS_BAR1_LINE; ++line) {
        if (fscanf(file, "%" SCNx64 " %" SCNx64 " %" SCNx64, &start, &end,
                   &flags) != 3) {
            break;
        }
        if ((line == UCT_RC_GDR_LIMITS_BAR1_LINE) && (end > start)) {
            limit->value = end - start + 1;
            ucs_snprintf_zero(limit->source, sizeof(limit->source),
                     "PCI BAR 1 in sysfs (size only)");
            found = 1;
        }
    }
    fclose(file);

    if (!found) {
        ucs_snprintf_zero(why, max, "%s: no BAR 1", path);
    }
    return found;
}

void uct_rc_gdr_limits_bar1(const char *sysfs_root, const char *bdf,
                            uct_rc_gdr_limit_t *limit)
{
    char nvml_why[64], sysfs_why[160];

    limit->value = UCT_RC_GDR_LIMIT_UNKNOWN;
    limit->free  = UCT_RC_GDR_LIMIT_UNKNOWN;
    if ((bdf == NULL) || (bdf[0] == '\0')) {
        ucs_strncpy_zero(limit->source, "no PCI address of the GPU",
                         sizeof(limit->source));
        return;
    }

    if (uct_rc_gdr_limits_bar1_nvml(bdf, limit, nvml_why, sizeof(nvml_why)) ||
        uct_rc_gdr_limits_bar1_sysfs(sysfs_root, bdf, limit, sysfs_why,
                                     sizeof(sysfs_why))) {
        return;
    }

    ucs_snprintf_zero(limit->source, sizeof(limit->source), "%s; %s", nvml_why,
             sysfs_why);
}

const char *uct_rc_gdr_limits_str(uint64_t value, int bytes, char *buf,
                                  size_t max)
{
    if (value == UCT_RC_GDR_LIMIT_UNKNOWN) {
        ucs_strncpy_zero(buf, "unknown", max);
    } else if (value == UCT_RC_GDR_LIMIT_UNLIMITED) {
        ucs_strncpy_zero(buf, "unlimited", max);
    } else if (bytes) {
        ucs_memunits_to_str(value, buf, max);
    } else {
        ucs_snprintf_zero(buf, max, "%" PRIu64, value);
    }
    return buf;
}
