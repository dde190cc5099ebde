/**
 * rc_gdr: PCIe distance between a GPU and a NIC, read from sysfs.
 *
 * A PCI device's sysfs path lists its ancestors:
 *   /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0
 *                host bridge root port  switch up     switch down  device
 * so the distance follows from the two paths alone. Config space is read only
 * for evidence (ACS), never to decide the class, because an unprivileged
 * reader sees just its first 64 bytes.
 */

#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "rc_gdr_topo.h"

#include <ucs/debug/log.h>
#include <ucs/sys/string.h>

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>


static const char *uct_rc_gdr_topo_dist_names[] = {
    [UCT_RC_GDR_DIST_LOC]     = "LOC",
    [UCT_RC_GDR_DIST_PIX]     = "PIX",
    [UCT_RC_GDR_DIST_PXB]     = "PXB",
    [UCT_RC_GDR_DIST_PHB]     = "PHB",
    [UCT_RC_GDR_DIST_NODE]    = "NODE",
    [UCT_RC_GDR_DIST_SYS]     = "SYS",
    [UCT_RC_GDR_DIST_UNKNOWN] = "UNKNOWN"
};


const char *uct_rc_gdr_topo_dist_name(uct_rc_gdr_dist_t dist)
{
    return (dist < UCT_RC_GDR_DIST_LAST) ? uct_rc_gdr_topo_dist_names[dist] :
                                           "invalid";
}

ucs_status_t uct_rc_gdr_topo_dist_parse(const char *str,
                                        uct_rc_gdr_dist_t *dist_p)
{
    uct_rc_gdr_dist_t dist;

    for (dist = UCT_RC_GDR_DIST_LOC; dist < UCT_RC_GDR_DIST_UNKNOWN; ++dist) {
        if ((str != NULL) &&
            !strcasecmp(str, uct_rc_gdr_topo_dist_names[dist])) {
            *dist_p = dist;
            return UCS_OK;
        }
    }

    return UCS_ERR_INVALID_PARAM;
}

const char *uct_rc_gdr_topo_iommu_name(uct_rc_gdr_iommu_t iommu)
{
    switch (iommu) {
    case UCT_RC_GDR_IOMMU_ABSENT:
        return "absent";
    case UCT_RC_GDR_IOMMU_IDENTITY:
        return "identity (passthrough)";
    case UCT_RC_GDR_IOMMU_TRANSLATED:
        return "DMA (translated)";
    case UCT_RC_GDR_IOMMU_OTHER:
        return "other";
    default:
        return "unknown";
    }
}

/* Read 1..max_digits hex digits; strict, so "0x", signs and blanks fail */
static int uct_rc_gdr_topo_hex(const char **p, unsigned max_digits,
                               unsigned *value_p)
{
    unsigned value = 0;
    unsigned n;

    for (n = 0; (n < max_digits) && isxdigit((unsigned char)**p); ++n) {
        value = (value << 4) |
                (isdigit((unsigned char)**p) ? (**p - '0') :
                                             (tolower((unsigned char)**p) -
                                              'a' + 10));
        ++(*p);
    }

    *value_p = value;
    return (n > 0) && !isxdigit((unsigned char)**p);
}

ucs_status_t uct_rc_gdr_topo_bdf_parse(const char *str, char *bdf, size_t max)
{
    const char *p = str;
    unsigned domain, bus, dev, fn, first;

    if (str == NULL) {
        return UCS_ERR_INVALID_PARAM;
    }

    /* "bb:dd.f" has no domain: it is domain 0 */
    if (!uct_rc_gdr_topo_hex(&p, 8, &first) || (*p++ != ':')) {
        return UCS_ERR_INVALID_PARAM;
    }

    if (!uct_rc_gdr_topo_hex(&p, 2, &bus)) {
        return UCS_ERR_INVALID_PARAM;
    }

    if (*p == ':') {
        ++p;
        domain = first;
        if (!uct_rc_gdr_topo_hex(&p, 2, &dev)) {
            return UCS_ERR_INVALID_PARAM;
        }
    } else {
        domain = 0;
        dev    = bus;
        bus    = first;
    }

    if ((*p++ != '.') || !uct_rc_gdr_topo_hex(&p, 1, &fn) || (*p != '\0') ||
        (bus > 0xff) || (dev > 0x1f) || (fn > 7)) {
        return UCS_ERR_INVALID_PARAM;
    }

    if (snprintf(bdf, max, "%04x:%02x:%02x.%x", domain, bus, dev, fn) >=
        (int)max) {
        return UCS_ERR_BUFFER_TOO_SMALL;
    }

    return UCS_OK;
}

/* "pci0000:00", "pci10000:e0": a PCI host bridge (root complex) */
static int uct_rc_gdr_topo_is_host_bridge(const char *comp)
{
    const char *p = comp + 3;
    unsigned value;

    return !strncmp(comp, "pci", 3) && uct_rc_gdr_topo_hex(&p, 8, &value) &&
           (*p++ == ':') && uct_rc_gdr_topo_hex(&p, 2, &value) && (*p == '\0');
}

/* First line of a small sysfs file, without the newline */
static ucs_status_t uct_rc_gdr_topo_read_line(const char *path, char *buf,
                                              size_t max)
{
    FILE *file;
    char *ok;

    file = fopen(path, "r");
    if (file == NULL) {
        return UCS_ERR_NO_ELEM;
    }

    ok = fgets(buf, max, file);
    fclose(file);
    if (ok == NULL) {
        return UCS_ERR_IO_ERROR;
    }

    buf[strcspn(buf, "\n")] = '\0';
    return UCS_OK;
}

static int uct_rc_gdr_topo_dev_attr_int(const char *root, const char *bdf,
                                        const char *attr, int dflt)
{
    char path[PATH_MAX];
    char line[32];
    char *end;
    long value;

    snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/%s", root, bdf, attr);
    if (uct_rc_gdr_topo_read_line(path, line, sizeof(line)) != UCS_OK) {
        return dflt;
    }

    value = strtol(line, &end, 0);
    return ((end == line) || (*end != '\0')) ? dflt : (int)value;
}

static int uct_rc_gdr_topo_dir_has_entries(const char *path)
{
    struct dirent *entry;
    DIR *dir;
    int found = 0;

    dir = opendir(path);
    if (dir == NULL) {
        return 0;
    }

    while (!found && ((entry = readdir(dir)) != NULL)) {
        found = (entry->d_name[0] != '.');
    }

    closedir(dir);
    return found;
}

/*
 * Resolve a sysfs link to a PCI device and split its real path into host
 * bridge, bridges and the device itself.
 */
static ucs_status_t uct_rc_gdr_topo_dev_resolve(const char *link,
                                                uct_rc_gdr_topo_dev_t *dev)
{
    char real[PATH_MAX];
    char *comp, *save;
    char bdf[UCT_RC_GDR_BDF_MAX];
    int in_pci   = 0;
    int tail_bdf = 0;

    if (realpath(link, real) == NULL) {
        return UCS_ERR_NO_ELEM;
    }

    dev->bdf[0]      = '\0';
    dev->num_bridges = 0;
    for (comp = strtok_r(real, "/", &save); comp != NULL;
         comp = strtok_r(NULL, "/", &save)) {
        if (!in_pci) {
            if (uct_rc_gdr_topo_is_host_bridge(comp)) {
                ucs_strncpy_safe(dev->host_bridge, comp,
                                 sizeof(dev->host_bridge));
                in_pci = 1;
            }
            continue;
        }

        /* Other components (e.g. a nested VMD domain) are transparent */
        tail_bdf = (uct_rc_gdr_topo_bdf_parse(comp, bdf, sizeof(bdf)) ==
                    UCS_OK);
        if (!tail_bdf) {
            continue;
        }

        /* The previous function is a bridge above this one */
        if (dev->bdf[0] != '\0') {
            if (dev->num_bridges == UCT_RC_GDR_TOPO_MAX_DEPTH) {
                return UCS_ERR_EXCEEDS_LIMIT;
            }
            ucs_strncpy_safe(dev->bridges[dev->num_bridges++], dev->bdf,
                             UCT_RC_GDR_BDF_MAX);
        }
        ucs_strncpy_safe(dev->bdf, bdf, sizeof(dev->bdf));
    }

    /* A PCI function's own directory is named by its address; a device
     * below one (virtio-net's virtio<n>) is that function's */
    return (in_pci && (dev->bdf[0] != '\0')) ? UCS_OK : UCS_ERR_UNSUPPORTED;
}

static void uct_rc_gdr_topo_iommu_classify(uct_rc_gdr_topo_dev_t *dev,
                                           const char *type)
{
    ucs_strncpy_safe(dev->iommu_type, type, sizeof(dev->iommu_type));
    if (!strcmp(type, "identity")) {
        dev->iommu = UCT_RC_GDR_IOMMU_IDENTITY;
    } else if (!strncmp(type, "DMA", 3)) {
        dev->iommu = UCT_RC_GDR_IOMMU_TRANSLATED;
    } else {
        dev->iommu = UCT_RC_GDR_IOMMU_OTHER;
    }
}

/*
 * The device's own IOMMU group says how its DMA is mapped. Without one,
 * fall back to the system: any translated group makes translation possible.
 */
static void uct_rc_gdr_topo_iommu_read(const uct_rc_gdr_topo_t *topo,
                                       uct_rc_gdr_topo_dev_t *dev)
{
    char path[PATH_MAX];
    char type[32];
    struct dirent *entry;
    DIR *dir;
    int seen = 0;

    dev->iommu = UCT_RC_GDR_IOMMU_UNKNOWN;
    snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/iommu_group/type",
             topo->sysfs_root, dev->bdf);
    if (uct_rc_gdr_topo_read_line(path, type, sizeof(type)) == UCS_OK) {
        uct_rc_gdr_topo_iommu_classify(dev, type);
        return;
    }

    snprintf(path, sizeof(path), "%s/kernel/iommu_groups", topo->sysfs_root);
    dir = opendir(path);
    if (dir != NULL) {
        while ((entry = readdir(dir)) != NULL) {
            if (entry->d_name[0] == '.') {
                continue;
            }
            snprintf(path, sizeof(path), "%s/kernel/iommu_groups/%s/type",
                     topo->sysfs_root, entry->d_name);
            if (uct_rc_gdr_topo_read_line(path, type, sizeof(type)) !=
                UCS_OK) {
                continue;
            }
            if (!seen || (dev->iommu != UCT_RC_GDR_IOMMU_TRANSLATED)) {
                uct_rc_gdr_topo_iommu_classify(dev, type);
            }
            seen = 1;
        }
        closedir(dir);
    }

    if (!seen && !topo->iommu_present) {
        dev->iommu = UCT_RC_GDR_IOMMU_ABSENT;
    }
}

/* Walk the extended capability list of a bridge to its ACS control word */
static void uct_rc_gdr_topo_acs_read(const char *root,
                                     uct_rc_gdr_topo_bridge_t *bridge)
{
    uint8_t cfg[4096];
    char path[PATH_MAX];
    unsigned offset, guard;
    uint32_t header;
    ssize_t len, ret;
    int fd;

    bridge->acs        = UCT_RC_GDR_ACS_UNREADABLE;
    bridge->acs_ctrl   = 0;
    bridge->acs_offset = 0;

    snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/config", root,
             bridge->bdf);
    fd = open(path, O_RDONLY);
    if (fd < 0) {
        return;
    }

    for (len = 0; len < (ssize_t)sizeof(cfg); len += ret) {
        ret = pread(fd, cfg + len, sizeof(cfg) - len, len);
        if (ret <= 0) {
            break;
        }
    }
    close(fd);

    /* Unprivileged readers get 64 bytes; conventional PCI has 256 */
    if (len <= 64) {
        return;
    }

    bridge->acs = UCT_RC_GDR_ACS_ABSENT;
    offset      = UCT_RC_GDR_PCI_EXT_CAP_START;
    /* A corrupt list could loop: each capability takes at least 4 bytes */
    for (guard = 0; (offset != 0) && (guard < sizeof(cfg) / 4); ++guard) {
        if ((offset < UCT_RC_GDR_PCI_EXT_CAP_START) ||
            (offset + 8 > (unsigned)len)) {
            return;
        }

        header = cfg[offset] | (cfg[offset + 1] << 8) |
                 (cfg[offset + 2] << 16) | ((uint32_t)cfg[offset + 3] << 24);
        if ((header == 0) || (header == UINT32_MAX)) {
            return;
        }

        if ((header & 0xffff) == UCT_RC_GDR_PCI_EXT_CAP_ID_ACS) {
            bridge->acs_offset = offset;
            bridge->acs_ctrl   = cfg[offset + UCT_RC_GDR_PCI_ACS_CTRL] |
                                 (cfg[offset + UCT_RC_GDR_PCI_ACS_CTRL + 1]
                                  << 8);
            bridge->acs        = (bridge->acs_ctrl &
                                  (UCT_RC_GDR_PCI_ACS_CTRL_RR |
                                   UCT_RC_GDR_PCI_ACS_CTRL_CR)) ?
                                         UCT_RC_GDR_ACS_REDIRECT :
                                         UCT_RC_GDR_ACS_NO_REDIRECT;
            return;
        }

        offset = (header >> 20) & 0xffc;
    }
}

static void uct_rc_gdr_topo_route_add(uct_rc_gdr_topo_t *topo,
                                      const uct_rc_gdr_topo_dev_t *dev,
                                      unsigned first)
{
    unsigned i;

    for (i = first; i < dev->num_bridges; ++i) {
        ucs_strncpy_safe(topo->route[topo->num_route++].bdf, dev->bridges[i],
                         UCT_RC_GDR_BDF_MAX);
    }
}

static void uct_rc_gdr_topo_numa_classify(uct_rc_gdr_topo_t *topo)
{
    int gpu_node = topo->gpu.numa_node;
    int nic_node = topo->nic.numa_node;

    if ((gpu_node == nic_node) && (gpu_node >= 0)) {
        topo->dist = UCT_RC_GDR_DIST_NODE;
        snprintf(topo->reason, sizeof(topo->reason),
                 "different host bridges (%s, %s) on NUMA node %d",
                 topo->gpu.host_bridge, topo->nic.host_bridge, gpu_node);
    } else if ((gpu_node < 0) && (nic_node < 0)) {
        /* The kernel reports -1 everywhere when there is one node */
        topo->dist = UCT_RC_GDR_DIST_NODE;
        snprintf(topo->reason, sizeof(topo->reason),
                 "different host bridges (%s, %s), no NUMA information: "
                 "one node assumed",
                 topo->gpu.host_bridge, topo->nic.host_bridge);
    } else if ((gpu_node < 0) || (nic_node < 0)) {
        /* Half the facts: do not claim the devices are near */
        topo->dist = UCT_RC_GDR_DIST_SYS;
        snprintf(topo->reason, sizeof(topo->reason),
                 "different host bridges (%s, %s), NUMA node of the %s "
                 "unknown: assumed remote",
                 topo->gpu.host_bridge, topo->nic.host_bridge,
                 (gpu_node < 0) ? "GPU" : "NIC");
    } else {
        topo->dist = UCT_RC_GDR_DIST_SYS;
        snprintf(topo->reason, sizeof(topo->reason),
                 "different NUMA nodes (GPU node %d, NIC node %d): crosses "
                 "the inter-socket link",
                 gpu_node, nic_node);
    }
}

/*
 * Common leading bridges decide the class. A PCIe switch shows up as an
 * upstream port with one downstream port per link below it, so "one bridge
 * between the devices" means at most one level below the lowest common
 * bridge on each side.
 */
static void uct_rc_gdr_topo_dist_classify(uct_rc_gdr_topo_t *topo)
{
    const uct_rc_gdr_topo_dev_t *gpu = &topo->gpu;
    const uct_rc_gdr_topo_dev_t *nic = &topo->nic;
    unsigned common, below_gpu, below_nic;

    topo->num_route = 0;

    if (!strcmp(gpu->bdf, nic->bdf)) {
        topo->dist = UCT_RC_GDR_DIST_LOC;
        snprintf(topo->reason, sizeof(topo->reason), "same PCI device %s",
                 gpu->bdf);
        return;
    }

    if (strcmp(gpu->host_bridge, nic->host_bridge)) {
        uct_rc_gdr_topo_route_add(topo, gpu, 0);
        uct_rc_gdr_topo_route_add(topo, nic, 0);
        uct_rc_gdr_topo_numa_classify(topo);
        return;
    }

    for (common = 0; (common < gpu->num_bridges) &&
                     (common < nic->num_bridges) &&
                     !strcmp(gpu->bridges[common], nic->bridges[common]);
         ++common) {
    }

    if (common == 0) {
        uct_rc_gdr_topo_route_add(topo, gpu, 0);
        uct_rc_gdr_topo_route_add(topo, nic, 0);
        topo->dist = UCT_RC_GDR_DIST_PHB;
        snprintf(topo->reason, sizeof(topo->reason),
                 "meet at host bridge %s (different root ports)",
                 gpu->host_bridge);
        return;
    }

    /* The lowest common bridge, then each side below it */
    uct_rc_gdr_topo_route_add(topo, gpu, common - 1);
    uct_rc_gdr_topo_route_add(topo, nic, common);

    below_gpu = gpu->num_bridges - common;
    below_nic = nic->num_bridges - common;
    if ((below_gpu <= 1) && (below_nic <= 1)) {
        topo->dist = UCT_RC_GDR_DIST_PIX;
        snprintf(topo->reason, sizeof(topo->reason),
                 "one PCIe switch/bridge between them, below %s",
                 gpu->bridges[common - 1]);
    } else {
        topo->dist = UCT_RC_GDR_DIST_PXB;
        snprintf(topo->reason, sizeof(topo->reason),
                 "%u PCIe bridges between them, meeting at %s, no host "
                 "bridge crossed",
                 topo->num_route, gpu->bridges[common - 1]);
    }
}

/* Resolve a device link; NUMA node and IOMMU mode come with it */
static ucs_status_t uct_rc_gdr_topo_dev_find(uct_rc_gdr_topo_t *topo,
                                             const char *link,
                                             uct_rc_gdr_topo_dev_t *dev)
{
    ucs_status_t status;

    status = uct_rc_gdr_topo_dev_resolve(link, dev);
    if (status != UCS_OK) {
        return status;
    }

    dev->numa_node = uct_rc_gdr_topo_dev_attr_int(topo->sysfs_root, dev->bdf,
                                                  "numa_node", -1);
    uct_rc_gdr_topo_iommu_read(topo, dev);
    return UCS_OK;
}

static ucs_status_t uct_rc_gdr_topo_pci_find(uct_rc_gdr_topo_t *topo,
                                             const char *what,
                                             const char *bdf,
                                             uct_rc_gdr_topo_dev_t *dev)
{
    char path[PATH_MAX];
    ucs_status_t status;

    snprintf(path, sizeof(path), "%s/bus/pci/devices/%s", topo->sysfs_root,
             bdf);
    status = uct_rc_gdr_topo_dev_find(topo, path, dev);
    if (status != UCS_OK) {
        topo->outcome = UCT_RC_GDR_TOPO_NOT_FOUND;
        snprintf(topo->reason, sizeof(topo->reason),
                 "%s %s not found below %s/bus/pci/devices (%s)", what, bdf,
                 topo->sysfs_root, ucs_status_string(status));
    }

    return status;
}

/*
 * The link to a verbs device's PCI function: <ibdev>/device, or for a
 * software device on a netdev (rxe: <ibdev>/parent names it) the netdev's
 * own device link, <class>/net/<parent>/device: its traffic leaves through
 * that NIC. The caller resolves it; a netdev without one (veth) has none.
 */
static void uct_rc_gdr_topo_ibdev_link(const char *ibdev_path, char *link,
                                       size_t max)
{
    char path[PATH_MAX], parent[64];
    const char *class_end;

    snprintf(link, max, "%s/device", ibdev_path);
    if (access(link, F_OK) == 0) {
        return;
    }

    /* <root>/class/infiniband/<name> -> <root>/class/net/<parent> */
    snprintf(path, sizeof(path), "%s/parent", ibdev_path);
    class_end = strstr(ibdev_path, "/infiniband/");
    if ((class_end == NULL) ||
        (uct_rc_gdr_topo_read_line(path, parent, sizeof(parent)) != UCS_OK) ||
        (parent[0] == '\0') || (strchr(parent, '/') != NULL)) {
        return;
    }

    snprintf(link, max, "%.*s/net/%s/device", (int)(class_end - ibdev_path),
             ibdev_path, parent);
}

/* A verbs device name leads to its PCI function through .../device */
static ucs_status_t uct_rc_gdr_topo_nic_find(uct_rc_gdr_topo_t *topo,
                                             const char *nic)
{
    char path[PATH_MAX], link[PATH_MAX];
    char bdf[UCT_RC_GDR_BDF_MAX];
    ucs_status_t status;

    if (uct_rc_gdr_topo_bdf_parse(nic, bdf, sizeof(bdf)) == UCS_OK) {
        return uct_rc_gdr_topo_pci_find(topo, "NIC", bdf, &topo->nic);
    }

    snprintf(path, sizeof(path), "%s/class/infiniband/%s", topo->sysfs_root,
             nic);
    if (access(path, F_OK) != 0) {
        topo->outcome = UCT_RC_GDR_TOPO_NOT_FOUND;
        snprintf(topo->reason, sizeof(topo->reason),
                 "verbs device %s not found in %s/class/infiniband", nic,
                 topo->sysfs_root);
        return UCS_ERR_NO_ELEM;
    }

    /* rxe and siw sit on a netdev: on its PCI function, if it has one */
    snprintf(path, sizeof(path), "%s/class/infiniband/%s", topo->sysfs_root,
             nic);
    uct_rc_gdr_topo_ibdev_link(path, link, sizeof(link));
    status = uct_rc_gdr_topo_dev_find(topo, link, &topo->nic);
    if (status != UCS_OK) {
        memset(&topo->nic, 0, sizeof(topo->nic));
        topo->nic.numa_node = -1;
        topo->outcome       = UCT_RC_GDR_TOPO_VIRTUAL_NIC;
        snprintf(topo->reason, sizeof(topo->reason),
                 "no PCI device: virtual NIC (%s has no PCI function, nor "
                 "has the netdev it sits on)", nic);
    }

    return status;
}

ucs_status_t uct_rc_gdr_topo_ibdev_bdf(const char *ibdev_path, char *bdf,
                                       size_t max)
{
    uct_rc_gdr_topo_dev_t dev;
    char link[PATH_MAX];
    ucs_status_t status;

    uct_rc_gdr_topo_ibdev_link(ibdev_path, link, sizeof(link));
    status = uct_rc_gdr_topo_dev_resolve(link, &dev);
    if (status != UCS_OK) {
        return status;
    }

    ucs_strncpy_safe(bdf, dev.bdf, max);
    return UCS_OK;
}

ucs_status_t uct_rc_gdr_topo_bus_id_parse(const char *bdf,
                                          ucs_sys_bus_id_t *bus_id_p)
{
    char canonical[UCT_RC_GDR_BDF_MAX];
    unsigned domain, bus, dev, fn;
    ucs_status_t status;

    status = uct_rc_gdr_topo_bdf_parse(bdf, canonical, sizeof(canonical));
    if (status != UCS_OK) {
        return status;
    }

    if ((sscanf(canonical, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) ||
        (domain > UINT16_MAX)) {
        return UCS_ERR_UNSUPPORTED;
    }

    bus_id_p->domain   = domain;
    bus_id_p->bus      = bus;
    bus_id_p->slot     = dev;
    bus_id_p->function = fn;
    return UCS_OK;
}

ucs_status_t uct_rc_gdr_topo_dev_query(const char *sysfs_root, const char *bdf,
                                       uct_rc_gdr_topo_dev_t *dev)
{
    uct_rc_gdr_topo_t topo;
    char parsed[UCT_RC_GDR_BDF_MAX];

    if ((sysfs_root == NULL) ||
        (strlen(sysfs_root) >= sizeof(topo.sysfs_root)) ||
        (uct_rc_gdr_topo_bdf_parse(bdf, parsed, sizeof(parsed)) != UCS_OK)) {
        return UCS_ERR_INVALID_PARAM;
    }

    memset(&topo, 0, sizeof(topo));
    memset(dev, 0, sizeof(*dev));
    dev->numa_node = -1;
    ucs_strncpy_safe(topo.sysfs_root, sysfs_root, sizeof(topo.sysfs_root));
    return uct_rc_gdr_topo_pci_find(&topo, "PCI function", parsed, dev);
}

ucs_status_t uct_rc_gdr_topo_classify(const char *sysfs_root,
                                      const char *gpu_bdf, const char *nic,
                                      uct_rc_gdr_topo_t *topo_p)
{
    uct_rc_gdr_topo_t *topo = topo_p;
    char path[PATH_MAX];
    char bdf[UCT_RC_GDR_BDF_MAX];
    unsigned i;

    if ((sysfs_root == NULL) || (nic == NULL) || (nic[0] == '\0') ||
        (strlen(sysfs_root) >= sizeof(topo->sysfs_root))) {
        ucs_error("rc_gdr topology: a sysfs root (shorter than %zu) and a "
                  "NIC name are required", sizeof(topo->sysfs_root));
        return UCS_ERR_INVALID_PARAM;
    }

    if (uct_rc_gdr_topo_bdf_parse(gpu_bdf, bdf, sizeof(bdf)) != UCS_OK) {
        ucs_error("rc_gdr topology: invalid GPU PCI address '%s' (expected "
                  "dddd:bb:dd.f)", (gpu_bdf != NULL) ? gpu_bdf : "(null)");
        return UCS_ERR_INVALID_PARAM;
    }

    memset(topo, 0, sizeof(*topo));
    topo->outcome       = UCT_RC_GDR_TOPO_PCI;
    topo->dist          = UCT_RC_GDR_DIST_UNKNOWN;
    topo->gpu.numa_node = -1;
    topo->nic.numa_node = -1;
    ucs_strncpy_safe(topo->sysfs_root, sysfs_root, sizeof(topo->sysfs_root));
    ucs_strncpy_safe(topo->nic_name, nic, sizeof(topo->nic_name));

    snprintf(path, sizeof(path), "%s/class/iommu", sysfs_root);
    topo->iommu_present = uct_rc_gdr_topo_dir_has_entries(path);

    if ((uct_rc_gdr_topo_pci_find(topo, "GPU", bdf, &topo->gpu) != UCS_OK) ||
        (uct_rc_gdr_topo_nic_find(topo, nic) != UCS_OK)) {
        /* An unknown distance is a result, not a failure to evaluate */
        ucs_debug("rc_gdr topology %s <-> %s: %s", bdf, nic, topo->reason);
        return UCS_OK;
    }

    uct_rc_gdr_topo_dist_classify(topo);
    for (i = 0; i < topo->num_route; ++i) {
        uct_rc_gdr_topo_acs_read(sysfs_root, &topo->route[i]);
    }

    ucs_debug("rc_gdr topology %s <-> %s: %s, %s", bdf, nic,
              uct_rc_gdr_topo_dist_name(topo->dist), topo->reason);
    return UCS_OK;
}
